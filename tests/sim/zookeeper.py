"""ZooKeeper in memory for the replication simulation.

``SimZooKeeper`` is ZooKeeper in memory: sessions, broker registrations under
``/brokers/ids`` (broker epoch = the registration's czxid), ``/controller`` and
``/controller_epoch`` with its znode version, the topic znode (assignment,
adding and removing replicas, topic id, version), the partition state znode
(Kafka's JSON through ``replog.zk.data``, with its version),
``/isr_change_notification`` and ``/admin/reassign_partitions``. It answers
the ``KafkaZkClient`` calls the controller core makes, with ZooKeeper's
fencing: every
controller write checks ``/controller_epoch``'s version, a partition state
update checks the znode's version. So ``controller_zk.load_context`` and
``controller_zk.write_decision`` run on it unchanged.

Concurrency: everything runs in the world's single thread, one call at a time.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import NoNodeError

from replog.controller.context import TopicPartition
from replog.zk import data as zd
from replog.zk import notification_data as nd
from replog.zk.data import BrokerInfo, LeaderIsrAndControllerEpoch, ReplicaAssignment
from replog.zk.fencing import ControllerEpoch, ControllerMovedError
from replog.zk.ops import ZkWriteError, ZkWriteResult

NO_LEADER = -1
TOPIC = "t"
PARTITION = TopicPartition(TOPIC, 0)
TOPIC_ID = uuid.UUID(int=0x5EED)


class _TopicConfigs:
    """``KafkaZkClient.client`` as ``read_unclean_overrides`` uses it: the
    ``/config/topics/<t>`` znodes of ``SimZooKeeper.topic_configs`` (none unless a
    scripted test writes one)."""

    def __init__(self, configs: dict[str, dict[str, str]]) -> None:
        self._configs = configs
        self._path: str | None = None

    def get_async(self, path: str) -> _TopicConfigs:
        answer = _TopicConfigs(self._configs)
        answer._path = path
        return answer

    def get(self, timeout: float | None = None) -> tuple[bytes, object]:
        for topic, config in self._configs.items():
            if self._path == zd.topic_config_path(topic):
                return zd.encode_config(config), None
        raise NoNodeError()


class SimZooKeeper:
    """ZooKeeper in memory, with the ``KafkaZkClient`` calls the controller makes."""

    def __init__(
        self,
        assigned: tuple[int, ...],
        on_change: Callable[[str], None],
        on_violation: Callable[[str, str], None],
    ) -> None:
        self._topics: dict[str, tuple[bytes, int]] = {
            TOPIC: (zd.encode_topic_assignment({0: assigned}, TOPIC_ID), 0)
        }  # /brokers/topics/<t>: data, version
        self._reassign: tuple[bytes, int] | None = None  # /admin/reassign_partitions
        self.sessions: dict[int, int] = {}  # broker -> its live session
        self.registrations: dict[int, int] = {}  # /brokers/ids/<id> -> broker epoch (czxid)
        self.controller_owner: int | None = None  # /controller
        self.controller_epoch = 0
        self.controller_epoch_version = 0
        self._states: dict[TopicPartition, tuple[bytes, int]] = {}  # data, version
        self._state_mzxid: dict[TopicPartition, int] = {}  # zxid of each state's last write
        self._isr_changes: dict[str, bytes] = {}
        self._zxid = 100
        self._next_session = 0
        self._next_isr_change = 0
        self._log_dir_events: dict[str, int] = {}  # /log_dir_event_notification
        self._deletion_markers: set[str] = set()  # /admin/delete_topics
        self._preferred_election: set[TopicPartition] | None = None
        self._next_log_dir_event = 0
        self._on_change = on_change
        self._on_violation = on_violation
        self.topic_configs: dict[str, dict[str, str]] = {}  # /config/topics/<t>
        self.client = _TopicConfigs(self.topic_configs)
        # scripted: the next N controller writes of the simulated partition's state each
        # find it rewritten just before (its version bumped, its data unchanged), as a
        # concurrent writer would leave it: each loses its version race (BAD_VERSION)
        self.races_before_controller_writes = 0

    # -- sessions and registrations (the world's side) --------------------------------

    def open_session(self, broker: int) -> None:
        self._next_session += 1
        self.sessions[broker] = self._next_session

    def register_broker(self, broker: int) -> int:
        """Create ``/brokers/ids/<broker>`` in its session: a new broker epoch."""
        assert broker in self.sessions, f"broker {broker} registers without a session"
        self._zxid += 1
        self.registrations[broker] = self._zxid
        self._on_change("brokers")
        return self._zxid

    def expire_session(self, broker: int) -> bool:
        """The session ends: its ephemeral znodes go, watches on them fire."""
        if self.sessions.pop(broker, None) is None:
            return False
        if self.registrations.pop(broker, None) is not None:
            self._on_change("brokers")
        if self.controller_owner == broker:
            self.controller_owner = None
            self._on_change("controller")
        return True

    # -- KafkaZkClient: brokers, controller, topics -------------------------------------

    def get_broker_ids(self) -> set[int]:
        return set(self.registrations)

    def get_broker_epoch(self, broker_id: int) -> int | None:
        return self.registrations.get(broker_id)

    def get_all_brokers(self) -> dict[int, BrokerInfo]:
        return {
            b: BrokerInfo.plaintext(b, f"b{b}", 9092).with_epoch(epoch)
            for b, epoch in sorted(self.registrations.items())
        }

    def get_controller_id(self) -> int | None:
        return self.controller_owner

    def get_controller_epoch(self) -> ControllerEpoch:
        return ControllerEpoch(self.controller_epoch, self.controller_epoch_version)

    def register_controller_and_increment_epoch(
        self, broker_id: int, timestamp_ms: int
    ) -> ControllerEpoch:
        """Create ``/controller`` and bump ``/controller_epoch`` in one transaction."""
        if broker_id not in self.sessions:
            raise ControllerMovedError(f"broker {broker_id} has no ZooKeeper session")
        if self.controller_owner is not None:
            raise ControllerMovedError(f"broker {self.controller_owner} is controller")
        self.controller_owner = broker_id
        self.controller_epoch += 1
        self.controller_epoch_version += 1
        self._on_change("controller")
        return self.get_controller_epoch()

    def delete_controller(self, broker_id: int) -> bool:
        if self.controller_owner != broker_id or broker_id not in self.sessions:
            return False
        self.controller_owner = None
        self._on_change("controller")
        return True

    def get_all_topics(self) -> set[str]:
        return set(self._topics)

    @property
    def assignments(self) -> dict[str, dict[int, tuple[int, ...]]]:
        """Every topic's partitions and their full replica sets (RS)."""
        return {
            t: {p: tuple(r) for p, r in zd.decode_topic_assignment(t, data).items()}
            for t, (data, _) in self._topics.items()
        }

    def topic_assignment(self) -> ReplicaAssignment:
        """The simulated partition's assignment, its adding and removing replicas."""
        data, _ = self._topics[TOPIC]
        return zd.decode_replica_assignments(TOPIC, data)[0]

    def get_topic_assignments(self, topics) -> dict[str, dict[int, list[int]]]:
        return {
            t: zd.decode_topic_assignment(t, self._topics[t][0])
            for t in topics
            if t in self._topics
        }

    def read_topic_znodes(self, topics) -> dict[str, tuple[bytes, int]]:
        return {t: self._topics[t] for t in topics if t in self._topics}

    def get_replica_assignments(self, topics) -> dict[str, tuple[dict[int, Any], int]]:
        """The topic znodes with their adding/removing replicas (KIP-455) and version."""
        return {
            t: (zd.decode_replica_assignments(t, data), version)
            for t, (data, version) in self.read_topic_znodes(topics).items()
        }

    def update_topic_znodes(self, updates, expected_controller_epoch_zk_version: int) -> dict:
        if self._epoch_fence_fails(expected_controller_epoch_zk_version):
            return {t: ZkWriteResult(error=ZkWriteError.CONTROLLER_MOVED) for t in updates}
        results = {}
        for topic, (data, version) in updates.items():
            found = self._topics.get(topic)
            if found is None:
                results[topic] = ZkWriteResult(error=ZkWriteError.NO_NODE)
            elif found[1] != version:
                results[topic] = ZkWriteResult(error=ZkWriteError.BAD_VERSION)
            else:
                self._topics[topic] = (data, version + 1)
                results[topic] = ZkWriteResult(zk_version=version + 1)
        return results

    def set_replica_assignments(
        self, topic: str, change, expected_controller_epoch_zk_version: int | None
    ) -> dict[int, ReplicaAssignment]:
        """Read, change and write the topic znode's assignments (one thread: no race)."""
        if self._epoch_fence_fails(expected_controller_epoch_zk_version):
            raise ControllerMovedError(f"controller moved while writing topic {topic!r}")
        if topic not in self._topics:
            raise NoNodeError(zd.topic_path(topic))
        data, version = self._topics[topic]
        new = change(zd.decode_replica_assignments(topic, data))
        self._topics[topic] = (zd.with_replica_assignments(data, new), version + 1)
        self._on_change("topic")
        return new

    # -- KafkaZkClient: /admin/reassign_partitions ----------------------------------------

    def create_reassign_partitions(self, reassignments) -> bool:
        """An operator's request (kafka-reassign-partitions); False if one is pending."""
        if self._reassign is not None:
            return False
        self._reassign = (nd.encode_reassign_partitions(reassignments), 0)
        self._on_change("reassign_partitions")
        return True

    def get_reassign_partitions(self):
        if self._reassign is None:
            return None
        data, version = self._reassign
        return nd.decode_reassign_partitions(data), version

    def update_reassign_partitions(
        self, remaining, expected_version: int, expected_controller_epoch_zk_version: int
    ) -> bool:
        if self._epoch_fence_fails(expected_controller_epoch_zk_version):
            raise ControllerMovedError("controller moved while updating reassign_partitions")
        if self._reassign is None or self._reassign[1] != expected_version:
            return False
        if remaining:
            self._reassign = (nd.encode_reassign_partitions(remaining), expected_version + 1)
        else:
            self._reassign = None
        return True

    # -- topics other than the simulated partition's (scripted: created, grown, deleted) ----

    def create_topic(self, topic: str, assignment: dict[int, list[int]]) -> None:
        """An operator creates ``topic`` (AdminZkClient): its znode, no partition state."""
        assert topic not in self._topics
        self._topics[topic] = (zd.encode_topic_assignment(assignment, uuid.uuid4()), 0)
        self._on_change("topics")

    def add_partitions(self, topic: str, added: dict[int, list[int]]) -> None:
        """An operator adds partitions to ``topic``: its znode changes."""
        data, version = self._topics[topic]
        znode = json.loads(data)  # the rest of the znode (its topic id) kept
        znode["partitions"].update({str(p): list(r) for p, r in added.items()})
        self._topics[topic] = (json.dumps(znode).encode(), version + 1)
        self._on_change(f"topic:{topic}")

    def delete_topic_behind_the_controller(self, topic: str) -> None:
        """An operator removes ``/brokers/topics/<topic>`` and its partition states by hand
        (zkCli ``deleteall``), not through ``/admin/delete_topics``: the controller learns
        of it only from the topics watch."""
        assert topic != TOPIC, "the simulated partition's topic is never deleted"
        del self._topics[topic]
        self.topic_configs.pop(topic, None)
        for tp in [tp for tp in self._states if tp.topic == topic]:
            del self._states[tp]
            del self._state_mzxid[tp]
        self._on_change("topics")

    def mark_topic_for_deletion(self, topic: str) -> None:
        """``/admin/delete_topics/<t>`` (kafka-topics --delete)."""
        self._deletion_markers.add(topic)
        self._on_change("delete_topics")

    def get_topics_marked_for_deletion(self) -> set[str]:
        return set(self._deletion_markers)

    def delete_topic_znodes(self, topic: str, expected_controller_epoch_zk_version: int) -> None:
        assert topic != TOPIC, "the simulated partition's topic is never deleted"
        if self._epoch_fence_fails(expected_controller_epoch_zk_version):
            raise ControllerMovedError(f"controller moved while deleting topic {topic!r}")
        self._topics.pop(topic, None)
        self.topic_configs.pop(topic, None)
        for tp in [tp for tp in self._states if tp.topic == topic]:
            del self._states[tp]
            del self._state_mzxid[tp]

    def remove_deletion_marker(self, topic: str, expected_controller_epoch_zk_version: int) -> None:
        if self._epoch_fence_fails(expected_controller_epoch_zk_version):
            raise ControllerMovedError(f"controller moved while removing deletion of {topic!r}")
        self._deletion_markers.discard(topic)

    # -- KafkaZkClient: partition state --------------------------------------------------

    def get_partition_states(self, partitions) -> dict[TopicPartition, LeaderIsrAndControllerEpoch]:
        out = {}
        for tp in partitions:
            found = self._states.get(TopicPartition(tp[0], tp[1]))
            if found is not None:
                out[tp] = zd.decode_partition_state(found[0], found[1])
        return out

    def read_partition_states(self, partitions) -> dict:
        states = self.get_partition_states(partitions)
        return {tp: (state, self._state_mzxid[TopicPartition(*tp)]) for tp, state in states.items()}

    def partition_state(self) -> LeaderIsrAndControllerEpoch | None:
        return self.get_partition_states([PARTITION]).get(PARTITION)

    def partition_state_znode(self) -> tuple[bytes, int] | None:
        """The raw state znode of the simulated partition: (data, version)."""
        return self._states.get(PARTITION)

    def _store(self, tp: TopicPartition, data: bytes, version: int) -> None:
        new = zd.decode_partition_state(data, version).leader_and_isr
        old = self._states.get(tp)
        if old is not None:
            before = zd.decode_partition_state(old[0], old[1]).leader_and_isr
            if new.leader_epoch < before.leader_epoch:
                raise AssertionError(f"zk: {tp} leader epoch went back: {before} -> {new}")
        if new.leader != NO_LEADER and new.leader not in new.isr:
            raise AssertionError(f"zk: {tp} leader outside the ISR: {new}")
        self._states[tp] = (data, version)
        self._zxid += 1
        self._state_mzxid[tp] = self._zxid

    def _epoch_fence_fails(self, expected_controller_epoch_zk_version: int | None) -> bool:
        return (
            expected_controller_epoch_zk_version is not None
            and expected_controller_epoch_zk_version != self.controller_epoch_version
        )

    def _check_writer(self, controller_epoch: int) -> None:
        """Invariant: a controller write that passed the fence comes from the controller
        ZooKeeper names (a deposed one's must fail; its fence is its own election's)."""
        if controller_epoch != self.controller_epoch:
            self._on_violation(
                "unfenced_write",
                f"controller epoch {controller_epoch} wrote a partition state, "
                f"ZooKeeper's controller epoch is {self.controller_epoch}",
            )

    def create_partition_states(
        self, states, controller_epoch: int, expected_controller_epoch_zk_version: int
    ) -> dict[TopicPartition, ZkWriteResult]:
        if self._epoch_fence_fails(expected_controller_epoch_zk_version):
            return {tp: ZkWriteResult(error=ZkWriteError.CONTROLLER_MOVED) for tp in states}
        self._check_writer(controller_epoch)
        results = {}
        for tp, lai in states.items():
            key = TopicPartition(tp[0], tp[1])
            if key in self._states:
                results[tp] = ZkWriteResult(error=ZkWriteError.NODE_EXISTS)
            elif key.partition not in self.assignments.get(key.topic, {}):
                results[tp] = ZkWriteResult(error=ZkWriteError.NO_NODE)
            else:
                data = zd.encode_partition_state(LeaderIsrAndControllerEpoch(lai, controller_epoch))
                self._store(key, data, 0)
                results[tp] = ZkWriteResult(zk_version=0)
        return results

    def _conditional_set(
        self, tp: TopicPartition, data: bytes, expected_version: int
    ) -> ZkWriteResult:
        found = self._states.get(tp)
        if found is None:
            return ZkWriteResult(error=ZkWriteError.NO_NODE)
        current, version = found
        if version != expected_version:
            if current == data:  # our own write, landed before (KafkaZkClient does the same)
                return ZkWriteResult(zk_version=version)
            return ZkWriteResult(error=ZkWriteError.BAD_VERSION)
        self._store(tp, data, version + 1)
        return ZkWriteResult(zk_version=version + 1)

    def update_partition_states(
        self, states, controller_epoch: int, expected_controller_epoch_zk_version: int
    ) -> dict[TopicPartition, ZkWriteResult]:
        if self._epoch_fence_fails(expected_controller_epoch_zk_version):
            return {tp: ZkWriteResult(error=ZkWriteError.CONTROLLER_MOVED) for tp in states}
        self._check_writer(controller_epoch)
        if self.races_before_controller_writes > 0 and PARTITION in states:
            self.races_before_controller_writes -= 1
            data, version = self._states[PARTITION]
            self._store(PARTITION, data, version + 1)
        return {
            tp: self._conditional_set(
                TopicPartition(tp[0], tp[1]),
                zd.encode_partition_state(LeaderIsrAndControllerEpoch(lai, controller_epoch)),
                lai.zk_version,
            )
            for tp, lai in states.items()
        }

    def update_leader_and_isr_conditional(
        self, topic: str, partition: int, state: LeaderIsrAndControllerEpoch, expected_version: int
    ) -> int | None:
        """A leader's ISR write: no controller epoch check, only the znode's version."""
        result = self._conditional_set(
            TopicPartition(topic, partition), zd.encode_partition_state(state), expected_version
        )
        if result.error is ZkWriteError.NO_NODE:
            raise NoNodeError()
        return result.zk_version

    # -- KafkaZkClient: /admin/preferred_replica_election ------------------------------------

    def create_preferred_replica_election(self, partitions) -> bool:
        """An operator's kafka-preferred-replica-election; False if one is pending."""
        if self._preferred_election is not None:
            return False
        self._preferred_election = {TopicPartition(t, p) for t, p in partitions}
        self._on_change("preferred_replica_election")
        return True

    def get_preferred_replica_election(self) -> set[TopicPartition] | None:
        return None if self._preferred_election is None else set(self._preferred_election)

    def delete_preferred_replica_election(self, expected_controller_epoch_zk_version: int) -> None:
        if self._epoch_fence_fails(expected_controller_epoch_zk_version):
            raise ControllerMovedError("controller moved while ending a preferred election")
        self._preferred_election = None

    # -- KafkaZkClient: log dir event notifications ----------------------------------------

    def propagate_log_dir_event(self, broker_id: int) -> str:
        name = f"{zd.LOG_DIR_EVENT_PREFIX}{self._next_log_dir_event:010d}"
        self._next_log_dir_event += 1
        self._log_dir_events[name] = broker_id
        self._on_change("log_dir_event")
        return name

    def get_log_dir_event_notifications(self) -> list[str]:
        return sorted(self._log_dir_events)

    def read_log_dir_event_notifications(self, names) -> set[int]:
        return {self._log_dir_events[n] for n in names if n in self._log_dir_events}

    def delete_log_dir_event_notifications(
        self, names, expected_controller_epoch_zk_version: int
    ) -> None:
        if self._epoch_fence_fails(expected_controller_epoch_zk_version):
            raise ControllerMovedError("controller moved while deleting log dir events")
        for name in names:
            self._log_dir_events.pop(name, None)

    # -- KafkaZkClient: ISR change notifications ----------------------------------------

    def propagate_isr_changes(self, partitions) -> str:
        name = f"{zd.ISR_CHANGE_PREFIX}{self._next_isr_change:010d}"
        self._next_isr_change += 1
        self._isr_changes[name] = nd.encode_isr_change(partitions)
        self._on_change("isr_change")
        return name

    def get_isr_change_notifications(self) -> list[str]:
        return sorted(self._isr_changes)

    def read_isr_change_notifications(self, names) -> set[tuple[str, int]]:
        changed: set[tuple[str, int]] = set()
        for name in names:
            if name in self._isr_changes:
                changed |= nd.decode_isr_change(self._isr_changes[name])
        return changed

    def delete_isr_change_notifications(
        self, names, expected_controller_epoch_zk_version: int | None = None
    ) -> None:
        if self._epoch_fence_fails(expected_controller_epoch_zk_version):
            raise ControllerMovedError("controller moved while deleting ISR change notifications")
        for name in names:
            self._isr_changes.pop(name, None)
