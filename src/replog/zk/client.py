"""``KafkaZkClient``: Kafka's ZooKeeper znode layout and formats, over kazoo.

IO only: this module reads and writes znodes and reports what happened; every decision
(who leads, what the ISR is, when to retry) belongs to the caller.

Concurrency rules
-----------------
* Every method except the ``watch_*``/listener registrations blocks on ZooKeeper. Call them
  from a worker thread (``await asyncio.to_thread(zk.get_all_brokers)``), never on the event
  loop. kazoo is thread-safe: several threads may use one client.
* Callbacks (watches, session listeners) run on kazoo's threads, not on the event loop.
  Hand their data over with ``loop.call_soon_threadsafe(queue.put_nowait, Event(...))``
  and return at once. Session listeners run on kazoo's *connection* thread: a blocking
  ZooKeeper call there deadlocks. Watch callbacks run on kazoo's callback thread; the
  first call of ``watch_children``/``watch_data`` happens synchronously on the registering
  thread.
* Batched reads use ZooKeeper's ``multiRead`` (ZooKeeper 3.6+; up to 1,000 reads per
  request), falling back to pipelined ``get_async`` calls on older servers. Batched writes
  are ``multi`` transactions of up to 1,000 ops that start with a ``check`` on
  ``/controller_epoch``'s version, so a deposed controller's writes fail as a whole.

Session expiry
--------------
kazoo reconnects by itself after a session expires, with a *new* session: this client's
ephemeral znodes (``/brokers/ids/<id>``, ``/controller``) are gone and every Kafka watch
must be treated as having missed events (kazoo's recipes re-read and re-arm themselves).
Listeners added with :meth:`KafkaZkClient.add_session_listener` receive
:attr:`ZkSessionState.NEW_SESSION` in that case, instead of ``CONNECTED``. The caller then
re-registers, from its own task/thread: ``register_broker(info)`` again, and the controller
re-runs its election (Kafka's ``KafkaController`` ``Expire``/``RegisterBrokerAndReelect``
events). A ``LOST`` event means the old session is over: stop acting as controller at once.
"""

from __future__ import annotations

import base64
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)
from kazoo.protocol.states import ZnodeStat
from kazoo.retry import KazooRetry

from replog.protocol.kafka_uuid import random_uuid
from replog.zk import config_znodes as cz
from replog.zk import data as zd
from replog.zk import security as zsec
from replog.zk.data import (
    BrokerInfo,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    TopicPartition,
)
from replog.zk.fencing import ControllerEpoch, ControllerMovedError
from replog.zk.ops import (
    MultiRead,
    Op,
    SessionTracker,
    WatchHandle,
    ZkOps,
    ZkSessionState,
    ZkWriteError,
    ZkWriteResult,
    apply_ops,
)
from replog.zk.security import ZkLogin, ZkSecurityError

__all__ = [
    "BrokerAlreadyRegisteredError",
    "KafkaZkClient",
    "TopicExistsError",
    "WatchHandle",
    "ZkSessionState",
    "ZkWriteError",
    "ZkWriteResult",
]

log = logging.getLogger(__name__)
GET_DATA, GET_CHILDREN = MultiRead.GET_DATA, MultiRead.GET_CHILDREN


class TopicExistsError(Exception):
    """``/brokers/topics/<topic>`` already exists."""


class BrokerAlreadyRegisteredError(Exception):
    """``/brokers/ids/<id>`` is held by another ZooKeeper session."""


class KafkaZkClient:
    """Kafka's ``KafkaZkClient`` for replog. See the module docstring for threading rules.

    ``connect`` is ``host:port[,host:port...][/chroot]``; a missing chroot is created on
    :meth:`start`, as Kafka does.
    """

    def __init__(
        self,
        connect: str,
        session_timeout_ms: int = 18000,
        connection_timeout_ms: int | None = None,
        login: ZkLogin | None = None,
        set_acl: bool = False,
    ) -> None:
        """``login``: SASL to ZooKeeper (``replog.zk.security``); ``set_acl``
        (``zookeeper.set.acl``): Kafka's ACLs on every znode created, which needs a login."""
        if set_acl and login is None:
            raise ZkSecurityError(
                "zookeeper.set.acl is true, but there is no ZooKeeper login (a JAAS file with "
                "a Client section, named by -Djava.security.auth.login.config in KAFKA_OPTS)"
            )
        self._login = login
        self._set_acl = set_acl
        hosts, _, chroot = connect.partition("/")
        self.connect = connect
        self._hosts = hosts
        self._chroot = "/" + chroot.strip("/") if chroot.strip("/") else ""
        self._session_timeout_s = session_timeout_ms / 1000
        self._connection_timeout_s = (connection_timeout_ms or session_timeout_ms) / 1000
        self._zk = self._new_kazoo(connect)
        self._ops = ZkOps(self._zk, self._connection_timeout_s)
        self._sessions = SessionTracker(self._zk)

    def _new_kazoo(self, hosts: str) -> KazooClient:
        return KazooClient(
            hosts=hosts,
            timeout=self._session_timeout_s,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
            sasl_options=None if self._login is None else self._login.sasl_options(),
            default_acl=zsec.default_acls("/", self._set_acl),
        )

    # --- lifecycle -------------------------------------------------------------------

    def start(self, timeout_ms: int | None = None) -> None:
        """Connect (creating the chroot if needed) and ensure Kafka's persistent paths.
        ``timeout_ms``: the wait for a connection (default: the connection timeout)."""
        timeout_s = self._connection_timeout_s if timeout_ms is None else timeout_ms / 1000
        if self._chroot:
            bootstrap = self._new_kazoo(self._hosts)
            try:
                bootstrap.start(timeout=timeout_s)
                bootstrap.ensure_path(self._chroot)
            finally:
                bootstrap.stop()
                bootstrap.close()
        try:
            self._zk.start(timeout=timeout_s)
        except Exception:
            self._zk.stop()
            raise
        for path in zd.PERSISTENT_ZK_PATHS:
            self._ops.call(self._zk.ensure_path, path)

    def close(self) -> None:
        """Close the session: this client's ephemeral znodes disappear at once."""
        self._zk.stop()
        self._zk.close()

    def __enter__(self) -> KafkaZkClient:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def session_id(self) -> int | None:
        client_id = self._zk.client_id
        return client_id[0] if client_id else None

    @property
    def client(self) -> KazooClient:
        """The underlying kazoo client (for paths this class does not cover, and tests)."""
        return self._zk

    def get_or_create_cluster_id(self, proposed: str | None = None) -> str:
        """Kafka's ``getOrCreateClusterId``: read ``/cluster/id``, creating it if absent.

        A new id is ``proposed`` or a random UUID in Kafka's 22-character url-safe base64.
        """
        try:
            return zd.decode_cluster_id(self._ops.call(self._zk.get, zd.CLUSTER_ID_PATH)[0])
        except NoNodeError:
            pass
        if proposed is None:
            proposed = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        try:
            self._ops.call(
                self._zk.create, zd.CLUSTER_ID_PATH, zd.encode_cluster_id(proposed), makepath=True
            )
            return proposed
        except NodeExistsError:
            return zd.decode_cluster_id(self._ops.call(self._zk.get, zd.CLUSTER_ID_PATH)[0])

    def _checked_ephemeral_create(self, path: str, data: bytes) -> ZnodeStat:
        """Create an ephemeral znode; if it exists, succeed only if this session owns it."""
        try:
            _, stat = self._ops.call(self._zk.create, path, data, ephemeral=True, include_data=True)
            return stat
        except NodeExistsError:
            existing, stat = self._ops.call(self._zk.get, path)
            if stat.ephemeralOwner == self.session_id and existing == data:
                return stat
            raise

    # --- brokers ---------------------------------------------------------------------

    def register_broker(self, info: BrokerInfo, timestamp_ms: int | None = None) -> int:
        """Create ephemeral ``/brokers/ids/<id>``; return the broker epoch (its czxid)."""
        timestamp_ms = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        try:
            stat = self._checked_ephemeral_create(
                zd.broker_path(info.id), zd.encode_broker(info, timestamp_ms)
            )
        except NodeExistsError as exc:
            raise BrokerAlreadyRegisteredError(
                f"broker id {info.id} is registered by another session"
            ) from exc
        return int(stat.czxid)

    def deregister_broker(self, broker_id: int) -> None:
        """Delete ``/brokers/ids/<id>`` if this session holds it (the controller sees the
        broker leave; a registration after it is a new broker epoch)."""
        path = zd.broker_path(broker_id)
        try:
            _, stat = self._ops.call(self._zk.get, path)
            if stat.ephemeralOwner == self.session_id:
                self._ops.call(self._zk.delete, path, stat.version)
        except NoNodeError:
            return

    def get_broker_ids(self) -> set[int]:
        return {int(child) for child in self._ops.call(self._zk.get_children, zd.BROKER_IDS_PATH)}

    def get_broker(self, broker_id: int) -> BrokerInfo | None:
        try:
            data, stat = self._ops.call(self._zk.get, zd.broker_path(broker_id))
        except NoNodeError:
            return None
        return zd.decode_broker(broker_id, data, epoch=stat.czxid)

    def get_all_brokers(self) -> dict[int, BrokerInfo]:
        ids = sorted(self.get_broker_ids())
        results = self._ops.read_many([zd.broker_path(i) for i in ids], GET_DATA)
        return {
            broker_id: zd.decode_broker(broker_id, result[0], epoch=result[1].czxid)
            for broker_id, result in zip(ids, results, strict=True)
            if not isinstance(result, Exception)
        }

    # --- controller ------------------------------------------------------------------

    def get_controller_id(self) -> int | None:
        try:
            data, _ = self._ops.call(self._zk.get, zd.CONTROLLER_PATH)
        except NoNodeError:
            return None
        return zd.decode_controller(data)

    def get_controller_epoch(self) -> ControllerEpoch | None:
        """``(epoch, zk version)`` of ``/controller_epoch``, or None if it does not exist."""
        try:
            data, stat = self._ops.call(self._zk.get, zd.CONTROLLER_EPOCH_PATH)
        except NoNodeError:
            return None
        return ControllerEpoch(zd.decode_controller_epoch(data), stat.version)

    def get_controller_and_epoch(self) -> tuple[int | None, ControllerEpoch | None]:
        """``/controller``'s broker id and ``/controller_epoch`` in one batched read (one
        round trip: a broker checks both before it obeys a controller's command); None
        for a znode that does not exist."""
        controller, epoch = self._ops.read_many(
            [zd.CONTROLLER_PATH, zd.CONTROLLER_EPOCH_PATH], GET_DATA
        )
        for result in (controller, epoch):
            if isinstance(result, Exception) and not isinstance(result, NoNodeError):
                raise result
        return (
            None if isinstance(controller, Exception) else zd.decode_controller(controller[0]),
            None
            if isinstance(epoch, Exception)
            else ControllerEpoch(zd.decode_controller_epoch(epoch[0]), epoch[1].version),
        )

    def _get_or_create_controller_epoch(self) -> ControllerEpoch:
        current = self.get_controller_epoch()
        if current is not None:
            return current
        try:
            self._ops.call(
                self._zk.create,
                zd.CONTROLLER_EPOCH_PATH,
                zd.encode_controller_epoch(zd.INITIAL_CONTROLLER_EPOCH),
            )
            return ControllerEpoch(
                zd.INITIAL_CONTROLLER_EPOCH, zd.INITIAL_CONTROLLER_EPOCH_ZK_VERSION
            )
        except NodeExistsError:
            current = self.get_controller_epoch()
            if current is None:
                raise ControllerMovedError("/controller_epoch vanished while read") from None
            return current

    def increment_controller_epoch(self, max_attempts: int = 10) -> ControllerEpoch:
        """Bump ``/controller_epoch`` while this session holds ``/controller``.

        One transaction: ``check /controller`` (at the version read, owned by this session)
        and a conditional set of the epoch; a lost race on the epoch is retried. Raises
        :class:`ControllerMovedError` if ``/controller`` is absent or another session's.
        Returns the new epoch and its zk version (needed for the epoch checks of writes).
        """
        for _ in range(max_attempts):
            try:
                data, controller_stat = self._ops.call(self._zk.get, zd.CONTROLLER_PATH)
            except NoNodeError:
                raise ControllerMovedError("no controller is registered") from None
            if controller_stat.ephemeralOwner != self.session_id:
                raise ControllerMovedError(
                    f"/controller is held by broker {zd.decode_controller(data)}, another session"
                )
            epoch, version = self._get_or_create_controller_epoch()
            guard = (zd.CONTROLLER_PATH, controller_stat.version)
            results = self._ops.commit(partial(_bump_epoch, guard, None, epoch + 1, version))
            if not any(isinstance(r, Exception) for r in results):
                return ControllerEpoch(epoch + 1, results[1].version)
            if isinstance(results[0], (BadVersionError, NoNodeError)):
                raise ControllerMovedError("/controller changed while incrementing the epoch")
        raise ControllerMovedError(f"lost {max_attempts} races for /controller_epoch")

    def register_controller_and_increment_epoch(
        self, broker_id: int, timestamp_ms: int, max_attempts: int = 10
    ) -> ControllerEpoch:
        """Kafka's ``registerControllerAndIncrementControllerEpoch``, as one transaction.

        ``create /controller`` (ephemeral) and ``set /controller_epoch`` conditional on the
        version just read. Returns the new ``(epoch, zk version)``. Raises
        :class:`ControllerMovedError` if another broker is controller. If the epoch moved
        but nobody holds ``/controller`` the attempt is repeated.
        """
        data = zd.encode_controller(broker_id, timestamp_ms)
        for _ in range(max_attempts):
            epoch, version = self._get_or_create_controller_epoch()
            results = self._ops.commit(partial(_bump_epoch, None, data, epoch + 1, version))
            if not any(isinstance(r, Exception) for r in results):
                return ControllerEpoch(epoch + 1, results[1].version)
            # NodeExists or BadVersion (or a re-sent commit that had landed): look again.
            try:
                current, stat = self._ops.call(self._zk.get, zd.CONTROLLER_PATH)
            except NoNodeError:
                continue
            if (
                stat.ephemeralOwner == self.session_id
                and zd.decode_controller(current) == broker_id
            ):
                now = self.get_controller_epoch()
                if current == data and now is not None and now.epoch == epoch + 1:
                    return now  # our transaction had landed before a connection loss
                return self.increment_controller_epoch()  # registered earlier by this session
            raise ControllerMovedError(
                f"broker {zd.decode_controller(current)} is controller, not broker {broker_id}"
            )
        raise ControllerMovedError(f"lost {max_attempts} races for /controller_epoch")

    def delete_controller(self, broker_id: int) -> bool:
        """Resign: delete ``/controller`` if this session holds it for ``broker_id``."""
        try:
            data, stat = self._ops.call(self._zk.get, zd.CONTROLLER_PATH)
            if stat.ephemeralOwner != self.session_id or zd.decode_controller(data) != broker_id:
                return False
            self._ops.call(self._zk.delete, zd.CONTROLLER_PATH, stat.version)
        except (NoNodeError, BadVersionError):
            return False
        return True

    # --- topics ----------------------------------------------------------------------

    def create_topic(
        self,
        topic: str,
        assignment: Mapping[int, Sequence[int]],
        config: Mapping[str, str],
        topic_id: uuid.UUID | None = None,
    ) -> uuid.UUID:
        """Write ``/config/topics/<t>`` and ``/brokers/topics/<t>`` in one transaction.

        The topic znode carries ``topic_id`` (KIP-516), a new random one unless given;
        returns the id written. Raises :class:`TopicExistsError` (nothing written) if the
        topic znode exists. A leftover config znode of a deleted topic is overwritten.
        """
        topic_id = random_uuid() if topic_id is None else topic_id
        config_path = zd.topic_config_path(topic)
        config_data = zd.encode_config(config)
        topic_op: Op = (
            "create",
            zd.topic_path(topic),
            zd.encode_topic_assignment(assignment, topic_id),
            -1,
        )
        for _ in range(5):
            config_stat = self._ops.call(self._zk.exists, config_path)
            # A config znode left by a deleted topic is overwritten.
            config_op: Op = ("create", config_path, config_data, -1)
            if config_stat is not None:
                config_op = ("set", config_path, config_data, config_stat.version)
            results = self._ops.commit(partial(apply_ops, [config_op, topic_op]))
            if not any(isinstance(r, Exception) for r in results):
                return topic_id
            if isinstance(results[1], NodeExistsError):
                raise TopicExistsError(f"topic {topic!r} already exists")
            if isinstance(results[1], NoNodeError):
                raise NoNodeError(f"{zd.TOPICS_PATH} is missing")
            # The config znode changed under us: read it again.
        raise TopicExistsError(f"topic {topic!r}: config znode keeps changing")

    def get_all_topics(self) -> set[str]:
        return set(self._ops.call(self._zk.get_children, zd.TOPICS_PATH))

    def topic_exists(self, topic: str) -> bool:
        return self._ops.call(self._zk.exists, zd.topic_path(topic)) is not None

    def get_topic_assignment(self, topic: str) -> dict[int, list[int]] | None:
        return self.get_topic_assignments([topic]).get(topic)

    def get_topic_assignments(self, topics: Iterable[str]) -> dict[str, dict[int, list[int]]]:
        """Replica assignments of many topics in batched reads; absent topics are omitted."""
        names = list(topics)
        results = self._ops.read_many([zd.topic_path(t) for t in names], GET_DATA)
        return {
            topic: zd.decode_topic_assignment(topic, result[0])
            for topic, result in zip(names, results, strict=True)
            if not isinstance(result, Exception)
        }

    def read_topic_znodes(self, topics: Iterable[str]) -> dict[str, tuple[bytes, int]]:
        """``/brokers/topics/<t>`` of many topics in batched reads: ``(data, zk version)``
        per topic (``zd.decode_topic_id`` reads the id); absent topics are omitted."""
        names = list(topics)
        results = self._ops.read_many([zd.topic_path(t) for t in names], GET_DATA)
        return {
            topic: (result[0], int(result[1].version))
            for topic, result in zip(names, results, strict=True)
            if not isinstance(result, Exception)
        }

    def get_topic_ids(self, topics: Iterable[str]) -> dict[str, uuid.UUID | None]:
        """Each existing topic's id (None where its znode has none)."""
        return {
            t: zd.decode_topic_id(data) for t, (data, _) in self.read_topic_znodes(topics).items()
        }

    def update_topic_znodes(
        self,
        updates: Mapping[str, tuple[bytes, int]],
        expected_controller_epoch_zk_version: int,
    ) -> dict[str, ZkWriteResult]:
        """Set ``/brokers/topics/<t>`` to ``data`` if it is still at ``zk version``, per
        topic (``updates``: topic -> (data, expected version)), in batches guarded by the
        controller epoch check. BAD_VERSION: someone wrote the znode since it was read;
        NO_NODE: it was deleted; CONTROLLER_MOVED: the epoch check failed."""
        items = [
            (topic, ("set", zd.topic_path(topic), data, version))
            for topic, (data, version) in updates.items()
        ]
        return self._ops.write_batched(items, _epoch_check(expected_controller_epoch_zk_version))

    def get_replica_assignments(
        self, topics: Iterable[str]
    ) -> dict[str, tuple[dict[int, zd.ReplicaAssignment], int]]:
        """Each existing topic's partitions with their adding and removing replicas
        (KIP-455), and the topic znode's version."""
        return {
            topic: (zd.decode_replica_assignments(topic, data), version)
            for topic, (data, version) in self.read_topic_znodes(topics).items()
        }

    def set_replica_assignments(
        self,
        topic: str,
        change: Callable[[dict[int, zd.ReplicaAssignment]], dict[int, zd.ReplicaAssignment]],
        expected_controller_epoch_zk_version: int | None,
        attempts: int = 5,
    ) -> dict[int, zd.ReplicaAssignment]:
        """Read ``/brokers/topics/<t>``, apply ``change`` to its assignments and write the
        result back conditionally on the version read (again on a lost race); the topic
        id and other fields are kept. The controller's writes pass its epoch's version
        (``ControllerMovedError`` if the check fails); an admin's (CreatePartitions)
        pass None, as Kafka's ``AdminZkClient`` writes unfenced. ``NoNodeError`` if the
        topic does not exist. Returns the assignments written."""
        path = zd.topic_path(topic)
        for _ in range(attempts):
            data, stat = self._ops.call(self._zk.get, path)
            new = change(zd.decode_replica_assignments(topic, data))
            op: Op = ("set", path, zd.with_replica_assignments(data, new), stat.version)
            check = (
                None
                if expected_controller_epoch_zk_version is None
                else _epoch_check(expected_controller_epoch_zk_version)
            )
            result = self._ops.write_batched([(path, op)], check)[path]
            if result.error is None:
                return new
            if result.error is ZkWriteError.CONTROLLER_MOVED:
                raise ControllerMovedError(f"controller moved while writing topic {topic!r}")
            if result.error is ZkWriteError.NO_NODE:
                raise NoNodeError(path)
        raise BadVersionError(f"{path} keeps changing")

    def get_topic_config(self, topic: str) -> dict[str, str]:
        try:
            data, _ = self._ops.call(self._zk.get, zd.topic_config_path(topic))
        except NoNodeError:
            return {}
        return zd.decode_config(data)

    # --- partition state -------------------------------------------------------------

    def get_partition_states(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, LeaderIsrAndControllerEpoch]:
        """Read ``.../partitions/<p>/state`` for many partitions; absent ones are omitted."""
        return {tp: state for tp, (state, _) in self.read_partition_states(partitions).items()}

    def read_partition_states(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, tuple[LeaderIsrAndControllerEpoch, int]]:
        """Each partition's state with the zxid of the znode's last write (its mzxid)."""
        keys = list(partitions)
        results = self._ops.read_many([zd.partition_state_path(t, p) for t, p in keys], GET_DATA)
        return {
            key: (zd.decode_partition_state(result[0], result[1].version), result[1].mzxid)
            for key, result in zip(keys, results, strict=True)
            if not isinstance(result, Exception)
        }

    def create_partition_states(
        self,
        states: Mapping[TopicPartition, LeaderAndIsr],
        controller_epoch: int,
        expected_controller_epoch_zk_version: int,
    ) -> dict[TopicPartition, ZkWriteResult]:
        """Create state znodes (and their parent znodes), guarded by the epoch check.

        Success has ``zk_version == 0``. NODE_EXISTS if the state exists, NO_NODE if the
        topic znode does not, CONTROLLER_MOVED if the epoch check failed.
        """
        topics = sorted({t for t, _ in states})
        listing = self._ops.read_many([zd.topic_partitions_path(t) for t in topics], GET_CHILDREN)
        existing = {t: set(r) for t, r in zip(topics, listing, strict=True) if isinstance(r, list)}
        parents: list[tuple[str, Op]] = [
            (zd.topic_partitions_path(t), ("create", zd.topic_partitions_path(t), b"", -1))
            for t in topics
            if t not in existing
        ]
        parents += [
            (zd.topic_partition_path(t, p), ("create", zd.topic_partition_path(t, p), b"", -1))
            for t, p in sorted(states)
            if str(p) not in existing.get(t, set())
        ]
        done = self._ops.write_batched(parents, _epoch_check(expected_controller_epoch_zk_version))
        if any(r.error is ZkWriteError.CONTROLLER_MOVED for r in done.values()):
            return {key: ZkWriteResult(error=ZkWriteError.CONTROLLER_MOVED) for key in states}
        items = [
            (
                key,
                (
                    "create",
                    zd.partition_state_path(*key),
                    zd.encode_partition_state(LeaderIsrAndControllerEpoch(lai, controller_epoch)),
                    -1,
                ),
            )
            for key, lai in states.items()
        ]
        return self._ops.write_batched(items, _epoch_check(expected_controller_epoch_zk_version))

    def update_partition_states(
        self,
        states: Mapping[TopicPartition, LeaderAndIsr],
        controller_epoch: int,
        expected_controller_epoch_zk_version: int,
    ) -> dict[TopicPartition, ZkWriteResult]:
        """Set state znodes, each conditional on its ``LeaderAndIsr.zk_version``.

        Kafka's ``updateLeaderAndIsr``. A BAD_VERSION whose znode already holds exactly the
        requested state (e.g. our own write, re-sent after a connection loss) is reported as
        success with the znode's version, as Kafka's ``checkLeaderAndIsrZkData`` does.
        """
        payloads = {
            key: zd.encode_partition_state(LeaderIsrAndControllerEpoch(lai, controller_epoch))
            for key, lai in states.items()
        }
        items = [
            (key, ("set", zd.partition_state_path(*key), payloads[key], lai.zk_version))
            for key, lai in states.items()
        ]
        results = self._ops.write_batched(items, _epoch_check(expected_controller_epoch_zk_version))
        stale = [key for key, r in results.items() if r.error is ZkWriteError.BAD_VERSION]
        if stale:
            now = self._ops.read_many([zd.partition_state_path(*key) for key in stale], GET_DATA)
            for key, result in zip(stale, now, strict=True):
                if not isinstance(result, Exception) and result[0] == payloads[key]:
                    results[key] = ZkWriteResult(zk_version=result[1].version)
        return results

    def update_leader_and_isr_conditional(
        self,
        topic: str,
        partition: int,
        state: LeaderIsrAndControllerEpoch,
        expected_version: int,
    ) -> int | None:
        """One conditional set of a partition's state (a leader changing its ISR).

        Returns the new zk version, or None if the version did not match (someone else
        wrote first: re-read). Raises ``kazoo.exceptions.NoNodeError`` if there is no state.
        """
        path = zd.partition_state_path(topic, partition)
        payload = zd.encode_partition_state(state)
        try:
            stat = self._ops.call(self._zk.set, path, payload, expected_version)
        except BadVersionError:
            data, stat = self._ops.call(self._zk.get, path)
            return int(stat.version) if data == payload else None
        return int(stat.version)

    # --- topic deletion --------------------------------------------------------------

    def mark_topic_for_deletion(self, topic: str) -> None:
        try:
            self._ops.call(self._zk.create, zd.delete_topic_path(topic))
        except NodeExistsError:
            pass

    def get_topics_marked_for_deletion(self) -> set[str]:
        return set(self._ops.call(self._zk.get_children, zd.DELETE_TOPICS_PATH))

    def delete_topic_znodes(self, topic: str, expected_controller_epoch_zk_version: int) -> None:
        """Delete ``/brokers/topics/<t>`` recursively and ``/config/topics/<t>``.

        Deletes leaves first, in batched transactions guarded by the epoch check.
        Raises :class:`ControllerMovedError` if the epoch check fails.
        """
        for root in (zd.topic_path(topic), zd.topic_config_path(topic)):
            for _ in range(5):
                tree = self._ops.subtree(root)
                if not tree:
                    break
                items = [(path, ("delete", path, b"", -1)) for path in reversed(tree)]
                results = self._ops.write_batched(
                    items, _epoch_check(expected_controller_epoch_zk_version)
                )
                if any(r.error is ZkWriteError.CONTROLLER_MOVED for r in results.values()):
                    raise ControllerMovedError(f"controller moved while deleting {topic!r}")
            else:
                raise NotEmptyError(f"{root} keeps getting new children")

    def remove_deletion_marker(self, topic: str, expected_controller_epoch_zk_version: int) -> None:
        """Delete ``/admin/delete_topics/<t>``, guarded by the epoch check."""
        path = zd.delete_topic_path(topic)
        result = self._ops.write_batched(
            [(path, ("delete", path, b"", -1))], _epoch_check(expected_controller_epoch_zk_version)
        )
        if result[path].error is ZkWriteError.CONTROLLER_MOVED:
            raise ControllerMovedError(f"controller moved while removing deletion of {topic!r}")

    # --- preferred replica election -------------------------------------------------

    def get_preferred_replica_election(self) -> set[TopicPartition] | None:
        """The partitions ``/admin/preferred_replica_election`` lists; None if absent."""
        try:
            data, _stat = self._ops.call(self._zk.get, zd.PREFERRED_REPLICA_ELECTION_PATH)
        except NoNodeError:
            return None
        return zd.decode_preferred_replica_election(data)

    def delete_preferred_replica_election(self, expected_controller_epoch_zk_version: int) -> None:
        """Delete ``/admin/preferred_replica_election`` (the controller is done with it),
        guarded by the epoch check."""
        path = zd.PREFERRED_REPLICA_ELECTION_PATH
        result = self._ops.write_batched(
            [(path, ("delete", path, b"", -1))], _epoch_check(expected_controller_epoch_zk_version)
        )
        if result[path].error is ZkWriteError.CONTROLLER_MOVED:
            raise ControllerMovedError("controller moved while ending a preferred election")

    # --- partition reassignment (/admin/reassign_partitions) ---------------------------

    def get_reassign_partitions(
        self,
    ) -> tuple[dict[TopicPartition, tuple[int, ...]], int] | None:
        """What ``/admin/reassign_partitions`` asks for and its version; None if absent."""
        try:
            data, stat = self._ops.call(self._zk.get, zd.REASSIGN_PARTITIONS_PATH)
        except NoNodeError:
            return None
        return zd.decode_reassign_partitions(data), int(stat.version)

    def create_reassign_partitions(
        self, reassignments: Mapping[TopicPartition, Sequence[int]]
    ) -> None:
        """Write ``/admin/reassign_partitions`` as Kafka's tool does; ``NodeExistsError``
        while one is under way."""
        self._ops.call(
            self._zk.create,
            zd.REASSIGN_PARTITIONS_PATH,
            zd.encode_reassign_partitions(reassignments),
            makepath=True,
        )

    def update_reassign_partitions(
        self,
        remaining: Mapping[TopicPartition, Sequence[int]],
        expected_version: int,
        expected_controller_epoch_zk_version: int,
    ) -> bool:
        """The controller's update of ``/admin/reassign_partitions``: keep ``remaining``
        (delete the znode if empty), conditional on ``expected_version`` and guarded by
        the epoch check. False if the znode changed or vanished meanwhile."""
        path = zd.REASSIGN_PARTITIONS_PATH
        op: Op = (
            ("set", path, zd.encode_reassign_partitions(remaining), expected_version)
            if remaining
            else ("delete", path, b"", expected_version)
        )
        result = self._ops.write_batched(
            [(path, op)], _epoch_check(expected_controller_epoch_zk_version)
        )[path]
        if result.error is ZkWriteError.CONTROLLER_MOVED:
            raise ControllerMovedError("controller moved while updating reassign_partitions")
        return result.error is None

    # --- ISR change notifications ----------------------------------------------------

    def propagate_isr_changes(self, partitions: Iterable[TopicPartition]) -> str:
        """Create ``/isr_change_notification/isr_change_<seq>``; return the node's name."""
        path = self._ops.call(
            self._zk.create,
            zd.isr_change_path(zd.ISR_CHANGE_PREFIX),
            zd.encode_isr_change(partitions),
            sequence=True,
        )
        return str(path).rsplit("/", 1)[-1]

    def get_isr_change_notifications(self) -> list[str]:
        return sorted(self._ops.call(self._zk.get_children, zd.ISR_CHANGE_NOTIFICATION_PATH))

    def read_isr_change_notifications(self, names: Iterable[str]) -> set[TopicPartition]:
        paths = [zd.isr_change_path(name) for name in names]
        changed: set[TopicPartition] = set()
        for result in self._ops.read_many(paths, GET_DATA):
            if not isinstance(result, Exception):
                changed |= zd.decode_isr_change(result[0])
        return changed

    def delete_isr_change_notifications(
        self, names: Iterable[str], expected_controller_epoch_zk_version: int
    ) -> None:
        """Delete the named ISR change notifications, guarded by the epoch check."""
        paths = [zd.isr_change_path(name) for name in names]
        results = self._ops.write_batched(
            [(p, ("delete", p, b"", -1)) for p in paths],
            _epoch_check(expected_controller_epoch_zk_version),
        )
        if any(r.error is ZkWriteError.CONTROLLER_MOVED for r in results.values()):
            raise ControllerMovedError("controller moved while deleting ISR change notifications")

    # --- log dir event notifications (KIP-112) ----------------------------------------

    def propagate_log_dir_event(self, broker_id: int) -> str:
        """Kafka ``propagateLogDirEvent``: create ``/log_dir_event_notification/
        log_dir_event_<seq>`` naming ``broker_id``; return the node's name."""
        path = self._ops.call(
            self._zk.create,
            zd.log_dir_event_path(zd.LOG_DIR_EVENT_PREFIX),
            zd.encode_log_dir_event(broker_id),
            sequence=True,
            makepath=True,
        )
        return str(path).rsplit("/", 1)[-1]

    def get_log_dir_event_notifications(self) -> list[str]:
        try:
            names = self._ops.call(self._zk.get_children, zd.LOG_DIR_EVENT_NOTIFICATION_PATH)
        except NoNodeError:
            return []
        return sorted(names)

    def read_log_dir_event_notifications(self, names: Iterable[str]) -> set[int]:
        """The brokers the named notifications report (Kafka
        ``getBrokerIdsFromLogDirEvents``); unreadable or vanished ones are skipped."""
        paths = [zd.log_dir_event_path(name) for name in names]
        brokers: set[int] = set()
        for result in self._ops.read_many(paths, GET_DATA):
            if isinstance(result, Exception):
                continue
            try:
                broker = zd.decode_log_dir_event(result[0])
            except zd.ZkDataError as exc:
                log.warning("ignoring %s", exc)
                continue
            if broker is not None:
                brokers.add(broker)
        return brokers

    def delete_log_dir_event_notifications(
        self, names: Iterable[str], expected_controller_epoch_zk_version: int
    ) -> None:
        """Delete the named notifications, guarded by the epoch check."""
        paths = [zd.log_dir_event_path(name) for name in names]
        results = self._ops.write_batched(
            [(p, ("delete", p, b"", -1)) for p in paths],
            _epoch_check(expected_controller_epoch_zk_version),
        )
        if any(r.error is ZkWriteError.CONTROLLER_MOVED for r in results.values()):
            raise ControllerMovedError("controller moved while deleting log dir events")

    # --- dynamic configs (Kafka AdminZkClient.changeConfigs, ZkConfigManager) ---------

    def get_entity_config(
        self, entity_type: str, entity_name: str
    ) -> tuple[dict[str, str], int | None]:
        """``/config/<type>/<name>`` and its znode version; ``({}, None)`` when absent."""
        path = cz.entity_config_path(entity_type, entity_name)
        try:
            data, stat = self._ops.call(self._zk.get, path)
        except NoNodeError:
            return {}, None
        return cz.decode_entity_config(data), stat.version

    def get_entity_names(self, entity_type: str) -> list[str]:
        """The entities with a ``/config/<type>/<name>`` znode (e.g. the SCRAM users)."""
        if entity_type not in zd.CONFIG_TYPES:
            raise ValueError(f"unknown config entity type {entity_type!r}")
        try:
            return sorted(self._ops.call(self._zk.get_children, f"{zd.CONFIG_PATH}/{entity_type}"))
        except NoNodeError:
            return []

    def get_entity_configs(
        self, entity_type: str, names: Iterable[str]
    ) -> dict[str, dict[str, str]]:
        """Many entities' configs in batched reads; absent ones are omitted."""
        wanted = list(names)
        paths = [cz.entity_config_path(entity_type, name) for name in wanted]
        return {
            name: cz.decode_entity_config(result[0])
            for name, result in zip(wanted, self._ops.read_many(paths, GET_DATA), strict=True)
            if not isinstance(result, Exception)
        }

    def change_entity_config(
        self,
        entity_type: str,
        entity_name: str,
        config: Mapping[str, str],
        expected_version: int | None,
    ) -> None:
        """Kafka ``AdminZkClient.changeEntityConfig`` in one transaction: write
        ``/config/<type>/<name>`` and create ``/config/changes/config_change_<seq>``.

        ``expected_version`` fences the write: the znode version the caller read, or
        ``None`` if it read no znode. Raises ``BadVersionError``/``NodeExistsError``
        (nothing written) when another writer came first.
        """
        path = cz.entity_config_path(entity_type, entity_name)
        data = cz.encode_entity_config(config)
        note = cz.encode_config_change(cz.ConfigChange(entity_type, entity_name))

        acl = zsec.default_acls(path, self._set_acl)  # (SCRAM credentials: owner only)

        def build(txn: TransactionRequest) -> None:
            if expected_version is None:
                txn.create(path, data, acl=acl)
            else:
                txn.set_data(path, data, expected_version)
            txn.create(cz.config_change_path(cz.CONFIG_CHANGE_PREFIX), note, sequence=True)

        for result in self._ops.commit(build):
            if isinstance(result, Exception) and not isinstance(result, RolledBackError):
                raise result

    def get_config_change_notifications(self) -> list[str]:
        return sorted(self._ops.call(self._zk.get_children, cz.CONFIG_CHANGES_PATH))

    def read_config_change_notifications(
        self, names: Iterable[str]
    ) -> dict[str, tuple[bytes, int]]:
        """Each notification's data and creation time (ms); vanished ones are omitted."""
        wanted = list(names)
        paths = [cz.config_change_path(name) for name in wanted]
        return {
            name: (result[0], int(result[1].ctime))
            for name, result in zip(wanted, self._ops.read_many(paths, GET_DATA), strict=True)
            if not isinstance(result, Exception)
        }

    def delete_config_change_notifications(self, names: Iterable[str]) -> None:
        """Delete expired notifications; one already deleted by another broker is fine."""
        for name in names:
            try:
                self._ops.call(self._zk.delete, cz.config_change_path(name))
            except NoNodeError:
                pass

    # --- watches and session ---------------------------------------------------------

    def watch_children(self, path: str, callback: Callable[[list[str]], None]) -> WatchHandle:
        """Call ``callback(sorted children)`` now and after every change (see ``ZkOps``)."""
        return self._ops.watch_children(path, callback)

    def watch_data(
        self, path: str, callback: Callable[[bytes | None, int | None], None]
    ) -> WatchHandle:
        """Call ``callback(data, zk_version)`` now and on create/change/delete of ``path``."""
        return self._ops.watch_data(path, callback)

    def watch_controller(self, callback: Callable[[int | None], None]) -> WatchHandle:
        """Call ``callback(controller broker id or None)`` now and on every change of
        ``/controller`` (Kafka's ``ControllerChangeHandler``)."""

        def on_controller(data: bytes | None, _version: int | None) -> None:
            controller = None
            if data:
                try:
                    controller = zd.decode_controller(data)
                except (zd.ZkDataError, KeyError, ValueError):
                    log.warning("unreadable /controller: %r", data)
            callback(controller)

        return self.watch_data(zd.CONTROLLER_PATH, on_controller)

    def add_session_listener(self, callback: Callable[[ZkSessionState], None]) -> None:
        """Call ``callback(state)`` on session changes, on kazoo's connection thread.

        It must return quickly and must not call ZooKeeper (that deadlocks).
        """
        self._sessions.listeners.append(callback)

    def remove_session_listener(self, callback: Callable[[ZkSessionState], None]) -> None:
        self._sessions.listeners.remove(callback)


def _epoch_check(expected_controller_epoch_zk_version: int) -> tuple[str, int]:
    """The guard of every controller write: ``/controller_epoch`` still at the version
    this controller's election left it at. Required: there is no unfenced controller
    write (STYLE.md, "Fencing as a type")."""
    if not isinstance(expected_controller_epoch_zk_version, int):
        raise TypeError(
            f"controller writes need the controller epoch's zk version, not "
            f"{expected_controller_epoch_zk_version!r}"
        )
    return (zd.CONTROLLER_EPOCH_PATH, expected_controller_epoch_zk_version)


def _bump_epoch(
    guard: tuple[str, int] | None,
    controller_data: bytes | None,
    new_epoch: int,
    expected_version: int,
    txn: TransactionRequest,
) -> None:
    """Transaction ops: [check guard | create /controller], then set /controller_epoch."""
    if guard is not None:
        txn.check(*guard)
    if controller_data is not None:
        txn.create(zd.CONTROLLER_PATH, controller_data, ephemeral=True)
    txn.set_data(zd.CONTROLLER_EPOCH_PATH, zd.encode_controller_epoch(new_epoch), expected_version)
