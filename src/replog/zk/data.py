"""Kafka's ZooKeeper paths and znode JSON formats (Kafka ``ZkData.scala``), as pure codecs.

Every encoder writes what a ZooKeeper-mode Kafka broker (2.x/3.x) writes, field for field,
so that Kafka tooling (``kafka-topics --zookeeper``, ``zookeeper-shell``, Kafka's own
controller) reads replog's metadata, and every decoder accepts what Kafka writes (unknown
fields are ignored).

=========================================  ===============================================
path                                       data
=========================================  ===============================================
``/controller``                            ``{"version":1,"brokerid":1,"timestamp":"..."}``
``/controller_epoch``                      ``"3"`` (a bare decimal)
``/brokers/ids/<id>``                      ``{"version":5,"host":..,"port":..,"endpoints":[..],
                                           "listener_security_protocol_map":{..},"rack":..,
                                           "jmx_port":-1,"timestamp":"...","features":{}}``
``/brokers/topics/<t>``                    ``{"version":3,"partitions":{"0":[1,2]},
                                           "adding_replicas":{},"removing_replicas":{},
                                           "topic_id":"<22-char base64 uuid>"}``
``/brokers/topics/<t>/partitions/<p>/state``  ``{"controller_epoch":1,"leader":1,"version":1,
                                           "leader_epoch":0,"isr":[1,2]}``
``/config/topics/<t>``                     ``{"version":1,"config":{"k":"v"}}``
``/cluster/id``                            ``{"version":"1","id":"<22-char base64 uuid>"}``
``/admin/delete_topics/<t>``               empty
=========================================  ===============================================

The notification and admin request znodes (``/isr_change_notification``,
``/log_dir_event_notification``, ``/admin/preferred_replica_election``,
``/admin/reassign_partitions``) have their codecs in ``replog.zk.notification_data``;
their paths are here with the others.

No IO here; everything is a plain function of its arguments.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from replog.protocol.kafka_uuid import ZERO_UUID, InvalidUuid, uuid_from_string, uuid_to_string

TopicPartition = tuple[str, int]

CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
BROKER_IDS_PATH = "/brokers/ids"
BROKER_SEQID_PATH = "/brokers/seqid"
TOPICS_PATH = "/brokers/topics"
DELETE_TOPICS_PATH = "/admin/delete_topics"
PREFERRED_REPLICA_ELECTION_PATH = "/admin/preferred_replica_election"
REASSIGN_PARTITIONS_PATH = "/admin/reassign_partitions"
CONFIG_PATH = "/config"
CONFIG_CHANGES_PATH = "/config/changes"
ISR_CHANGE_NOTIFICATION_PATH = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
LOG_DIR_EVENT_NOTIFICATION_PATH = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
CONSUMERS_PATH = "/consumers"
CLUSTER_ID_PATH = "/cluster/id"
CONFIG_TYPES = ("topics", "clients", "users", "brokers", "ips")

# Kafka ZkData.PersistentZkPaths: created on startup if missing.
PERSISTENT_ZK_PATHS: tuple[str, ...] = (
    CONSUMERS_PATH,
    BROKER_IDS_PATH,
    TOPICS_PATH,
    CONFIG_CHANGES_PATH,
    DELETE_TOPICS_PATH,
    BROKER_SEQID_PATH,
    ISR_CHANGE_NOTIFICATION_PATH,
    PRODUCER_ID_BLOCK_PATH,
    LOG_DIR_EVENT_NOTIFICATION_PATH,
    *(f"{CONFIG_PATH}/{config_type}" for config_type in CONFIG_TYPES),
)

# Kafka KafkaController / LeaderAndIsr constants.
INITIAL_CONTROLLER_EPOCH = 0
INITIAL_CONTROLLER_EPOCH_ZK_VERSION = 0
NO_LEADER = -1
LEADER_DURING_DELETE = -2
INITIAL_LEADER_EPOCH = 0
INITIAL_PARTITION_ZK_VERSION = 0

BROKER_INFO_VERSION = 5
TOPIC_ASSIGNMENT_VERSION = 3
PARTITION_STATE_VERSION = 1
CONFIG_VERSION = 1
CONTROLLER_VERSION = 1


class ZkDataError(ValueError):
    """A znode's bytes are not in the format Kafka writes."""


def _dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def _loads(data: bytes | None, what: str) -> Any:
    if not data:
        raise ZkDataError(f"{what}: empty znode")
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ZkDataError(f"{what}: not JSON: {data[:200]!r}") from exc


# --- paths -------------------------------------------------------------------------------


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS_PATH}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{topic}"


def topic_partitions_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions"


def topic_partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_PATH}/topics/{topic}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS_PATH}/{topic}"


def isr_change_path(name: str) -> str:
    return f"{ISR_CHANGE_NOTIFICATION_PATH}/{name}"


def log_dir_event_path(name: str) -> str:
    return f"{LOG_DIR_EVENT_NOTIFICATION_PATH}/{name}"


# --- cluster id --------------------------------------------------------------------------


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dumps({"version": "1", "id": cluster_id})  # Kafka writes the version as a string


def decode_cluster_id(data: bytes) -> str:
    try:
        return str(_loads(data, "cluster id")["id"])
    except (KeyError, TypeError) as exc:
        raise ZkDataError(f"cluster id: {data!r}") from exc


# --- brokers -----------------------------------------------------------------------------

_ENDPOINT = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)$")


@dataclass(frozen=True)
class EndPoint:
    """One advertised listener, Kafka ``EndPoint``: ``PLAINTEXT://host:9092``."""

    listener_name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"

    @classmethod
    def parse(cls, text: str, protocol_map: Mapping[str, str] | None = None) -> EndPoint:
        match = _ENDPOINT.match(text)
        if match is None:
            raise ZkDataError(f"unparseable endpoint {text!r}")
        listener, host, port = match.group(1), match.group(2), int(match.group(3))
        protocol = (protocol_map or {}).get(listener, listener)
        return cls(listener, host, port, protocol)


@dataclass(frozen=True)
class BrokerInfo:
    """A broker's registration under ``/brokers/ids/<id>``.

    ``epoch`` is the broker epoch: the czxid of the registration znode (set when read back
    or returned by ``register_broker``; None on an unregistered value).
    """

    id: int
    endpoints: tuple[EndPoint, ...]
    rack: str | None = None
    jmx_port: int = -1
    epoch: int | None = field(default=None, compare=False)
    timestamp_ms: int | None = field(default=None, compare=False)

    @classmethod
    def plaintext(cls, broker_id: int, host: str, port: int, rack: str | None = None) -> BrokerInfo:
        return cls(broker_id, (EndPoint("PLAINTEXT", host, port),), rack)

    def _default_endpoint(self) -> EndPoint | None:
        for endpoint in self.endpoints:
            if endpoint.security_protocol == "PLAINTEXT":
                return endpoint
        return self.endpoints[0] if self.endpoints else None

    @property
    def host(self) -> str:
        endpoint = self._default_endpoint()
        return endpoint.host if endpoint else ""

    @property
    def port(self) -> int:
        endpoint = self._default_endpoint()
        return endpoint.port if endpoint else -1

    @property
    def listeners(self) -> dict[str, EndPoint]:
        return {endpoint.listener_name: endpoint for endpoint in self.endpoints}

    def address(self, listener: str) -> tuple[str, int]:
        """Where another broker reaches this one on ``listener`` (the inter-broker
        listener); the default endpoint for a registration without that listener."""
        for endpoint in self.endpoints:
            if endpoint.listener_name == listener:
                return endpoint.host, endpoint.port
        return self.host, self.port

    def with_epoch(self, epoch: int) -> BrokerInfo:
        return replace(self, epoch=epoch)


def encode_broker(info: BrokerInfo, timestamp_ms: int) -> bytes:
    # Kafka's top-level host/port are the first PLAINTEXT endpoint, else null/-1.
    plaintext = next((e for e in info.endpoints if e.security_protocol == "PLAINTEXT"), None)
    body: dict[str, object] = {
        "version": BROKER_INFO_VERSION,
        "host": plaintext.host if plaintext else None,
        "port": plaintext.port if plaintext else -1,
        "endpoints": [e.connection_string for e in info.endpoints],
        "listener_security_protocol_map": {
            e.listener_name: e.security_protocol for e in info.endpoints
        },
        "jmx_port": info.jmx_port,
        "timestamp": str(timestamp_ms),
        "features": {},
    }
    if info.rack is not None:
        body["rack"] = info.rack
    return _dumps(body)


def decode_broker(broker_id: int, data: bytes, epoch: int | None = None) -> BrokerInfo:
    js = _loads(data, f"broker {broker_id}")
    version = int(js.get("version", 0))
    if version < 1:
        raise ZkDataError(f"unsupported broker registration version {version}: {data!r}")
    if version == 1:
        endpoints: tuple[EndPoint, ...] = (EndPoint("PLAINTEXT", js["host"], int(js["port"])),)
    else:
        protocol_map = js.get("listener_security_protocol_map") or {}
        endpoints = tuple(EndPoint.parse(text, protocol_map) for text in js.get("endpoints", []))
    timestamp = js.get("timestamp")
    return BrokerInfo(
        id=broker_id,
        endpoints=endpoints,
        rack=js.get("rack"),
        jmx_port=int(js.get("jmx_port", -1)),
        epoch=epoch,
        timestamp_ms=int(timestamp) if timestamp is not None else None,
    )


# --- controller --------------------------------------------------------------------------


def encode_controller(broker_id: int, timestamp_ms: int) -> bytes:
    return _dumps(
        {"version": CONTROLLER_VERSION, "brokerid": broker_id, "timestamp": str(timestamp_ms)}
    )


def decode_controller(data: bytes) -> int:
    return int(_loads(data, "controller")["brokerid"])


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode("ascii")


def decode_controller_epoch(data: bytes) -> int:
    try:
        return int(data.decode("ascii"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ZkDataError(f"controller epoch: {data!r}") from exc


# --- topics ------------------------------------------------------------------------------


def encode_topic_assignment(
    assignment: Mapping[int, Iterable[int]], topic_id: uuid.UUID | None = None
) -> bytes:
    """Kafka ``TopicZNode.encode``: version 3, with ``topic_id`` (KIP-516) when given."""
    body: dict[str, object] = {
        "version": TOPIC_ASSIGNMENT_VERSION,
        "partitions": {str(p): list(replicas) for p, replicas in sorted(assignment.items())},
        "adding_replicas": {},
        "removing_replicas": {},
    }
    if topic_id is not None:
        body["topic_id"] = _topic_id_text(topic_id)
    return _dumps(body)


def decode_topic_assignment(topic: str, data: bytes) -> dict[int, list[int]]:
    js = _loads(data, f"topic {topic}")
    partitions = js.get("partitions") or {}
    return {int(p): [int(r) for r in replicas] for p, replicas in partitions.items()}


def decode_topic_id(data: bytes) -> uuid.UUID | None:
    """The topic's id, or None if the znode has none (written by a tool older than
    Kafka 2.8: the controller gives it one). An unreadable id is a ``ZkDataError``."""
    js = _loads(data, "topic")
    text = js.get("topic_id") if isinstance(js, dict) else None
    if text is None:
        return None
    try:
        topic_id = uuid_from_string(text)
    except InvalidUuid as exc:
        raise ZkDataError(f"topic: bad topic_id {text!r}") from exc
    return None if topic_id == ZERO_UUID else topic_id


def with_topic_id(data: bytes, topic_id: uuid.UUID) -> bytes:
    """The topic znode ``data`` with ``topic_id`` added: version 3, every other field kept
    (an id is added to a znode once and never changed, Kafka's ``setTopicIds``)."""
    js = _loads(data, "topic")
    if not isinstance(js, dict):
        raise ZkDataError(f"topic: not a JSON object: {data[:200]!r}")
    js.setdefault("partitions", {})
    js.setdefault("adding_replicas", {})
    js.setdefault("removing_replicas", {})
    js["version"] = max(int(js.get("version", 0)), TOPIC_ASSIGNMENT_VERSION)
    js["topic_id"] = _topic_id_text(topic_id)
    return _dumps(js)


@dataclass(frozen=True, slots=True)
class ReplicaAssignment:
    """One partition's replicas as the topic znode keeps them (Kafka ``ReplicaAssignment``).

    During a reassignment (KIP-455) ``replicas`` is the full set RS = TRS + ORS (target
    replicas first), ``adding_replicas`` = TRS - ORS and ``removing_replicas`` = ORS - TRS.
    """

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """TRS: the replicas once the reassignment is done."""
        return tuple(r for r in self.replicas if r not in self.removing_replicas)

    @property
    def origin_replicas(self) -> tuple[int, ...]:
        """ORS: the replicas before the reassignment began."""
        return tuple(r for r in self.replicas if r not in self.adding_replicas)

    def reassign_to(self, target: Iterable[int]) -> ReplicaAssignment:
        """Kafka ``ReplicaAssignment.reassignTo``: the full assignment while moving from
        the origin replicas to ``target`` (RS = TRS then ORS, without duplicates)."""
        target = tuple(target)
        origin = self.origin_replicas
        full = tuple(dict.fromkeys(target + origin))
        return ReplicaAssignment(
            full,
            tuple(r for r in full if r not in origin),
            tuple(r for r in full if r not in target),
        )


def decode_replica_assignments(topic: str, data: bytes) -> dict[int, ReplicaAssignment]:
    """Kafka ``TopicZNode.decode``: every partition with its adding and removing
    replicas (absent in a version 1 znode)."""
    js = _loads(data, f"topic {topic}")
    try:
        adding = js.get("adding_replicas") or {}
        removing = js.get("removing_replicas") or {}
        return {
            int(p): ReplicaAssignment(
                tuple(int(r) for r in replicas),
                tuple(int(r) for r in adding.get(p, ())),
                tuple(int(r) for r in removing.get(p, ())),
            )
            for p, replicas in (js.get("partitions") or {}).items()
        }
    except (AttributeError, TypeError, ValueError) as exc:
        raise ZkDataError(f"topic {topic}: bad assignment {data[:200]!r}") from exc


def with_replica_assignments(data: bytes, assignments: Mapping[int, ReplicaAssignment]) -> bytes:
    """The topic znode ``data`` with its partitions, adding and removing replicas replaced
    by ``assignments``; the topic id and unknown fields are kept (version 3)."""
    js = _loads(data, "topic")
    if not isinstance(js, dict):
        raise ZkDataError(f"topic: not a JSON object: {data[:200]!r}")
    ordered = sorted(assignments.items())
    js["version"] = max(int(js.get("version", 0)), TOPIC_ASSIGNMENT_VERSION)
    js["partitions"] = {str(p): list(a.replicas) for p, a in ordered}
    js["adding_replicas"] = {
        str(p): list(a.adding_replicas) for p, a in ordered if a.adding_replicas
    }
    js["removing_replicas"] = {
        str(p): list(a.removing_replicas) for p, a in ordered if a.removing_replicas
    }
    return _dumps(js)


def _topic_id_text(topic_id: uuid.UUID) -> str:
    if topic_id == ZERO_UUID:
        raise ValueError("the zero Uuid is not a topic id")
    return uuid_to_string(topic_id)


def encode_config(config: Mapping[str, str]) -> bytes:
    return _dumps(
        {"version": CONFIG_VERSION, "config": {str(k): str(v) for k, v in config.items()}}
    )


def decode_config(data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    config = _loads(data, "config").get("config") or {}
    return {str(k): str(v) for k, v in config.items()}


# --- partition state ---------------------------------------------------------------------


@dataclass(frozen=True)
class LeaderAndIsr:
    """Kafka ``LeaderAndIsr``: ``zk_version`` is the state znode's version (partition epoch).

    For a conditional update, ``zk_version`` is the version the writer last read.
    """

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int = INITIAL_PARTITION_ZK_VERSION

    def with_zk_version(self, zk_version: int) -> LeaderAndIsr:
        return replace(self, zk_version=zk_version)


@dataclass(frozen=True)
class LeaderIsrAndControllerEpoch:
    """Kafka ``LeaderIsrAndControllerEpoch``: a state and the controller epoch that wrote it."""

    leader_and_isr: LeaderAndIsr
    controller_epoch: int


def encode_partition_state(state: LeaderIsrAndControllerEpoch) -> bytes:
    """Kafka's state znode JSON, formatted directly: the same bytes as ``_dumps`` of
    the dict (keys in Kafka's order), in 40% of its time; a controller writes 10,000 of
    them after a broker failure."""
    lai = state.leader_and_isr
    return _PARTITION_STATE_JSON % (
        int(state.controller_epoch),
        int(lai.leader),
        PARTITION_STATE_VERSION,
        int(lai.leader_epoch),
        ",".join([str(int(r)) for r in lai.isr]).encode(),
    )


_PARTITION_STATE_JSON = (
    b'{"controller_epoch":%d,"leader":%d,"version":%d,"leader_epoch":%d,"isr":[%s]}'
)


def decode_partition_state(data: bytes, zk_version: int) -> LeaderIsrAndControllerEpoch:
    js = _loads(data, "partition state")
    try:
        lai = LeaderAndIsr(
            leader=int(js["leader"]),
            leader_epoch=int(js["leader_epoch"]),
            isr=tuple(int(r) for r in js["isr"]),
            zk_version=zk_version,
        )
        return LeaderIsrAndControllerEpoch(lai, int(js["controller_epoch"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ZkDataError(f"partition state: {data!r}") from exc
