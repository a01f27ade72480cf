"""ZooKeeper and the controller of the replication simulation.

The world keeps ZooKeeper; every controller decision is the shipped controller's.

``SimZooKeeper`` is ZooKeeper in memory: sessions, broker registrations under
``/brokers/ids`` (broker epoch = the registration's czxid), ``/controller`` and
``/controller_epoch`` with its znode version, the topic's assignment, the
partition state znode (Kafka's JSON through ``replog.zk.data``, with its
version) and ``/isr_change_notification``. It answers the ``KafkaZkClient``
calls the controller's IO code makes, with ZooKeeper's fencing: every
controller write checks ``/controller_epoch``'s version, a partition state
update checks the znode's version. So ``controller_zk.load_context`` and
``controller_zk.write_decision`` run on it unchanged.

``SimControllerDriver`` is one broker's controller: the shipped
``replog.controller.core.ControllerCore`` (every handler and the write / install
/ send / re-read / retry loop that ``KafkaController`` drives), driven
synchronously: each request the core yields is carried out at once, a ZooKeeper
call against ``SimZooKeeper``, a LeaderAndIsr as sim ``LeaderAndIsr`` messages
on the controller's own connection to each broker; UpdateMetadata and
StopReplica are only counted (a SimBroker has no metadata cache, and a replica
removed by a reassignment keeps its log, as one whose StopReplica was lost
would).

``SimController`` (``world.controller``) ties them to the world: watches become
``ControllerWork`` events for the brokers' controllers, and it is ZooKeeper for
the leaders, with their IO: the conditional ISR write (``conditional_update``)
and the ISR change notification.

Concurrency: everything runs in the world's single thread, one event at a time.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import KazooException, NoNodeError, SessionExpiredError

from replog.config import KafkaConfig
from replog.controller import controller_zk, decisions
from replog.controller import events as ev
from replog.controller.context import ControllerContext, TopicPartition
from replog.controller.core import ControllerCore
from replog.controller.core_requests import (
    EndTerm,
    Enqueue,
    LetSendersRun,
    ReadClock,
    ReadWallClockMs,
    RegisterBroker,
    Reply,
    Report,
    Request,
    ScheduleAutoRebalance,
    Send,
    Step,
    UnwatchTopics,
    WatchCluster,
    WatchController,
    WatchReassignments,
    WatchTopics,
    ZkCall,
)
from replog.controller.effects import ControllerDecision
from replog.protocol.controller_schemas import LeaderAndIsrRequest
from replog.replication.isr import IsrChangeProposal
from replog.zk import data as zd
from replog.zk.data import BrokerInfo, LeaderAndIsr, LeaderIsrAndControllerEpoch, ReplicaAssignment
from replog.zk.fencing import ControllerEpoch, ControllerMovedError
from replog.zk.ops import ZkWriteError, ZkWriteResult
from sim.network import ControllerWork, ZkPartitionState
from sim.network import LeaderAndIsr as LeaderAndIsrMessage

if TYPE_CHECKING:
    from sim.world import World

NO_LEADER = -1
INELIGIBLE = "ineligible"
TOPIC = "t"
PARTITION = TopicPartition(TOPIC, 0)

TOPIC_ID = uuid.UUID(int=0x5EED)
ZOOKEEPER_ERRORS = (ControllerMovedError, KazooException, zd.ZkDataError)
"""What ZooKeeper calls raise: thrown back into the core, as ``KafkaController`` does."""

TAKEOVER_PROBABILITY = 0.01  # per ZooKeeper call of an acting controller (controller_takeovers)

_CONFIGS: dict[int, KafkaConfig] = {}

# The znodes the active controller watches (its watches live in the session that set
# them at failover) -> the ControllerWork their change enqueues.
WATCHED = {
    "brokers": "broker_change",
    "isr_change": "isr_change",
    "topic": "partition_modifications",
    "reassign_partitions": "zk_reassignment",
}


def _config(broker_id: int) -> KafkaConfig:
    """The broker's config as the controller reads it (Kafka's defaults; no auto leader
    rebalance, which needs a timer the simulation does not run)."""
    if broker_id not in _CONFIGS:
        _CONFIGS[broker_id] = KafkaConfig.from_properties(
            {
                "broker.id": str(broker_id),
                "zookeeper.connect": "zookeeper.sim:2181",
                "auto.leader.rebalance.enable": "false",
            }
        )
    return _CONFIGS[broker_id]


class _NoTopicConfigs:
    """``KafkaZkClient.client`` as ``read_unclean_overrides`` uses it: no topic has
    a ``/config/topics/<t>`` znode, so no unclean-election override."""

    def get_async(self, path: str) -> _NoTopicConfigs:
        return self

    def get(self, timeout: float | None = None) -> tuple[bytes, object]:
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
        self._on_change = on_change
        self._on_violation = on_violation
        self.client = _NoTopicConfigs()

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
        self._reassign = (zd.encode_reassign_partitions(reassignments), 0)
        self._on_change("reassign_partitions")
        return True

    def get_reassign_partitions(self):
        if self._reassign is None:
            return None
        data, version = self._reassign
        return zd.decode_reassign_partitions(data), version

    def update_reassign_partitions(
        self, remaining, expected_version: int, expected_controller_epoch_zk_version: int
    ) -> bool:
        if self._epoch_fence_fails(expected_controller_epoch_zk_version):
            raise ControllerMovedError("controller moved while updating reassign_partitions")
        if self._reassign is None or self._reassign[1] != expected_version:
            return False
        if remaining:
            self._reassign = (zd.encode_reassign_partitions(remaining), expected_version + 1)
        else:
            self._reassign = None
        return True

    def get_topics_marked_for_deletion(self) -> set[str]:
        return set()

    def delete_topic_znodes(self, topic: str, expected_controller_epoch_zk_version=None) -> None:
        raise AssertionError("the simulation deletes no topic")

    remove_deletion_marker = delete_topic_znodes

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

    # -- KafkaZkClient: ISR change notifications ----------------------------------------

    def propagate_isr_changes(self, partitions) -> str:
        name = f"{zd.ISR_CHANGE_PREFIX}{self._next_isr_change:010d}"
        self._next_isr_change += 1
        self._isr_changes[name] = zd.encode_isr_change(partitions)
        self._on_change("isr_change")
        return name

    def get_isr_change_notifications(self) -> list[str]:
        return sorted(self._isr_changes)

    def read_isr_change_notifications(self, names) -> set[tuple[str, int]]:
        changed: set[tuple[str, int]] = set()
        for name in names:
            if name in self._isr_changes:
                changed |= zd.decode_isr_change(self._isr_changes[name])
        return changed

    def delete_isr_change_notifications(
        self, names, expected_controller_epoch_zk_version: int | None = None
    ) -> None:
        if self._epoch_fence_fails(expected_controller_epoch_zk_version):
            raise ControllerMovedError("controller moved while deleting ISR change notifications")
        for name in names:
            self._isr_changes.pop(name, None)


class SimControllerDriver:
    """One broker's controller: the shipped ``ControllerCore`` driven synchronously.

    ``process`` is its one controller task: it turns a ``ControllerWork`` into the
    core's event and carries out, in order, every request the core yields
    (``replog.controller.core_requests``), as ``KafkaController`` does with IO: a
    ZooKeeper call against ``SimZooKeeper`` (its errors thrown back into the core), a
    LeaderAndIsr as sim messages on the controller's own connection to each broker
    (UpdateMetadata and StopReplica are only counted: a SimBroker has no metadata cache,
    and StopReplica only goes to replicas already offline here), a reply at once (no
    LeaderAndIsr is acknowledged in the simulation). An event's error that is not the
    simulation's (a ZooKeeper error escaping the core) is logged and counted, as the
    event manager logs it; anything else is raised.

    ``generation`` counts the broker's ZooKeeper sessions as this controller saw
    them: events queued under an older one are dropped (Kafka's ``Expire`` event
    clears the queue). ``watch_session`` is the session that registered the
    controller's watches at failover; they fire only while it lives.

    Concurrency: called by the world, one ``ControllerWork`` at a time.
    """

    def __init__(self, broker_id: int, plane: SimController, generation: int) -> None:
        self.broker_id = broker_id
        self.plane = plane
        self.zk = plane.zk
        self.generation = generation
        self.core = ControllerCore(broker_id, _config(broker_id), lambda: False)
        self.watch_session: int | None = None

    @property
    def is_active(self) -> bool:
        return self.core.is_active

    @property
    def context(self) -> ControllerContext | None:
        return self.core.context

    @property
    def controller_epoch(self) -> int:
        return self.core.controller_epoch

    def _trace(self, text: str) -> None:
        self.plane.trace(f"c{self.broker_id}: {text}")

    # -- the controller task (KafkaController._process) --------------------------------

    def process(self, kind: str) -> None:
        event = self.plane.event_of(kind)
        world = self.plane.world
        failed: set[int] = set()
        if isinstance(event, ev.BrokerChange) and self.core.context is not None:
            changes = decisions.broker_changes(self.core.context, self.zk.get_all_brokers())
            failed = {*changes.dead, *changes.bounced} if changes else set()
        outer, self.plane.processing = self.plane.processing, self
        try:
            self.drive(self.core.process(event, world.now / 1000))
        except ZOOKEEPER_ERRORS as exc:
            self._trace(f"error processing {type(event).__name__}: {exc!r}")
            world.count("controller_event_error")
        finally:
            self.plane.processing = outer
        if failed and self.core.is_active:
            self.plane.check_failed_brokers_left_isr(self, failed)

    def drive(self, step: Step[Any]) -> Any:
        """Carry out each request of ``step`` in order; hand results and ZooKeeper's
        errors back to it (``KafkaController._drive``, synchronously)."""
        result: Any = None
        error: BaseException | None = None
        while True:
            try:
                request = step.throw(error) if error is not None else step.send(result)
            except StopIteration as stop:
                return stop.value
            result, error = None, None
            try:
                result = self._carry_out(request)
            except ZOOKEEPER_ERRORS as exc:
                if isinstance(exc, ControllerMovedError):
                    self._trace(f"fenced: {exc}")
                    self.plane.world.count("controller_fenced")
                error = exc

    def _carry_out(self, request: Request) -> Any:
        world = self.plane.world
        match request:
            case ZkCall():
                if (
                    world.config.controller_takeovers
                    and world.faults_enabled
                    and self.core.active_controller_id == self.broker_id
                    and world.rng.random() < TAKEOVER_PROBABILITY
                ):
                    world.take_over_controller(self.broker_id)
                result = request.run(self.zk)
                if request.target is controller_zk.write_decision and result:
                    world.count("controller_stale_write")
                    self._trace(f"partitions {sorted(result)} changed under us")
                elif request.target == "register_controller_and_increment_epoch":
                    self._trace(f"elected controller at epoch {result.epoch}")
                    world.count("controller_elected")
                return result
            case Send(decision=d):
                return self._send_requests(d)
            case ReadClock():
                return world.now / 1000
            case ReadWallClockMs():
                return world.now
            case Reply(callback=callback, answer=answer):
                callback(answer)
            case RegisterBroker():
                self.plane.register_broker(self.broker_id)
            case WatchCluster():
                self.watch_session = self.zk.sessions.get(self.broker_id)
            case EndTerm():
                self._trace("resigned")
                self.watch_session = None
            case Enqueue(event=event):
                world.schedule_controller_work(self, self.plane.kind_of(event))
            case Report(what=what, record=record):
                self._trace(f"{what}: {record.zk_writes} partition states written")
            case (
                WatchController()
                | WatchReassignments()
                | WatchTopics()
                | UnwatchTopics()
                | LetSendersRun()
                | ScheduleAutoRebalance()
            ):
                pass  # the world fires every watch it models; no timer runs here
            case _:
                raise AssertionError(f"unknown controller request {request!r}")
        return None

    def _send_requests(self, d: ControllerDecision) -> list[Any]:
        for write in d.zk_writes:
            state = getattr(write, "state", None)
            if state is not None:
                lai = state.leader_and_isr
                self._trace(
                    f"zk write leader={lai.leader} epoch={lai.leader_epoch} isr={list(lai.isr)} "
                    f"v={lai.zk_version}"
                )
        for broker_id, requests in d.requests().items():
            for request in requests:
                if not isinstance(request, LeaderAndIsrRequest):
                    self.plane.world.count(type(request).__name__)
                    continue
                for topic in request.topic_states:
                    for p in topic.partition_states:
                        state = ZkPartitionState(
                            leader=int(p.leader),
                            leader_epoch=int(p.leader_epoch),
                            isr=tuple(int(r) for r in p.isr),
                            zk_version=int(p.zk_version),
                            assigned=tuple(int(r) for r in p.replicas),
                            controller_epoch=int(p.controller_epoch),
                        )
                        self.plane.send_leader_and_isr(
                            self,
                            LeaderAndIsrMessage(
                                broker_id,
                                state,
                                int(request.broker_epoch),
                                int(request.controller_epoch),
                            ),
                        )
        return []


class SimController:
    """ZooKeeper plus every broker's controller, for the world (``world.controller``)."""

    def __init__(self, world: World, assigned: tuple[int, ...]) -> None:
        self.world = world
        self.assigned = assigned
        self.zk = SimZooKeeper(assigned, self._on_znode_change, world.violation)
        self.controllers: dict[int, SimControllerDriver] = {}
        self._generation = 0
        self.held_writes: set[tuple[int, IsrChangeProposal]] = set()
        self.isr_change_notifications = 0
        self._cached: tuple[tuple[Any, ...] | None, ZkPartitionState | None] = (None, None)
        self._events: dict[str, ev.ControllerEvent] = {}  # ControllerWork kind -> event
        self.processing: SimControllerDriver | None = None  # the controller handling an event
        self._next_event = 0

    def trace(self, text: str) -> None:
        self.world.trace(text)

    # -- what the world reads ----------------------------------------------------------------

    @property
    def state(self) -> ZkPartitionState:
        """The partition state znode as a ``ZkPartitionState`` (cached per znode version)."""
        raw = self.zk.partition_state_znode()
        key = (raw, self.zk.read_topic_znodes([TOPIC])[TOPIC])
        if self._cached[0] == key:
            cached = self._cached[1]
            assert cached is not None
            return cached
        assigned = self.zk.topic_assignment().replicas
        if raw is None:
            return ZkPartitionState(NO_LEADER, -1, (), -1, assigned, 0)
        s = zd.decode_partition_state(raw[0], raw[1])
        lai = s.leader_and_isr
        state = ZkPartitionState(
            lai.leader,
            lai.leader_epoch,
            tuple(lai.isr),
            lai.zk_version,
            assigned,
            s.controller_epoch,
        )
        self._cached = (key, state)
        return state

    @property
    def registrations(self) -> dict[int, int]:
        return self.zk.registrations

    @property
    def live(self) -> set[int]:
        """Brokers registered in ZooKeeper: those the controller counts as live."""
        return set(self.zk.registrations)

    @property
    def active(self) -> SimControllerDriver | None:
        """The controller ZooKeeper names, if it is acting as one."""
        owner = self.zk.controller_owner
        c = self.controllers.get(owner) if owner is not None else None
        return c if c is not None and c.is_active else None

    @property
    def controller_epoch(self) -> int:
        return self.zk.controller_epoch

    def describe(self) -> str:
        acting = sorted(b for b, c in self.controllers.items() if c.is_active)
        return (
            f"controller={self.zk.controller_owner} e{self.zk.controller_epoch} "
            f"acting={acting} registered={sorted(self.zk.registrations)}"
        )

    # -- broker lifecycle (called by the world) -------------------------------------------------

    def _new_controller(self, broker: int) -> SimControllerDriver:
        self._generation += 1
        c = SimControllerDriver(broker, self, self._generation)
        self.controllers[broker] = c
        return c

    def broker_started(self, broker: int, *, keep_session: bool = False) -> int:
        """A broker process started: a fresh controller; unless it found its old session
        still alive (``keep_session``), a new session and registration. Returns the
        broker epoch."""
        c = self._new_controller(broker)
        if not keep_session or broker not in self.zk.sessions:
            self.zk.open_session(broker)
            self.zk.register_broker(broker)
        elif broker not in self.zk.registrations:  # its session renewed, not yet registered
            self.zk.register_broker(broker)
        self.world.schedule_controller_work(c, "startup")
        return self.zk.registrations[broker]

    def session_renewed(self, broker: int) -> None:
        """A live broker learned that its session expired and its client opened a new
        one: its controller handles Kafka's ``Expire`` (resigns, drops what it had
        queued), then ``RegisterBrokerAndReelect`` (the broker registers in the new
        session, ``register_broker``, then runs the election)."""
        old = self.controllers[broker]
        old.process("expire")
        self._generation += 1
        old.generation = self._generation
        self.zk.open_session(broker)
        self.world.schedule_controller_work(old, "register_broker_and_reelect")

    def register_broker(self, broker: int) -> None:
        """``RegisterBroker``: ``/brokers/ids/<broker>`` in its current session; the
        broker process learns its new broker epoch."""
        if broker not in self.zk.sessions:
            raise SessionExpiredError()
        epoch = self.zk.register_broker(broker)
        self.world.brokers[broker].broker_epoch = epoch
        self.trace(f"b{broker}: registered in a new ZooKeeper session, broker epoch {epoch}")

    # -- controller events ---------------------------------------------------------------------

    SIMPLE_EVENTS: dict[str, Callable[[], ev.ControllerEvent]] = {
        "startup": ev.Startup,
        "reelect": ev.Reelect,
        "controller_change": ev.ControllerChange,
        "broker_change": ev.BrokerChange,
        "isr_change": ev.IsrChangeNotification,
        "expire": ev.Expire,
        "register_broker_and_reelect": ev.RegisterBrokerAndReelect,
        "zk_reassignment": ev.ZkPartitionReassignment,
        "partition_modifications": partial(ev.PartitionModifications, TOPIC),
    }

    def event_of(self, kind: str) -> ev.ControllerEvent:
        """The controller event a ``ControllerWork`` stands for."""
        make = self.SIMPLE_EVENTS.get(kind)
        return make() if make is not None else self._events[kind]

    def kind_of(self, event: ev.ControllerEvent) -> str:
        """A ``ControllerWork`` kind for ``event`` (``event_of`` turns it back)."""
        for kind, make in self.SIMPLE_EVENTS.items():
            if make() == event:
                return kind
        self._next_event += 1
        kind = f"{type(event).__name__} #{self._next_event}"
        self._events[kind] = event
        return kind

    def broker_crashed(self, broker: int) -> None:
        """The process died, and its controller with it (its session may live on)."""
        self.controllers.pop(broker, None)
        self.held_writes = {(b, p) for b, p in self.held_writes if b != broker}

    def current(self, work: ControllerWork) -> SimControllerDriver | None:
        """The controller ``work`` is for, if that controller still exists and the work
        was queued under its current session."""
        c = self.controllers.get(work.broker)
        return c if c is not None and c.generation == work.generation else None

    def run(self, work: ControllerWork) -> None:
        c = self.current(work)
        if c is not None:
            c.process(work.kind)

    # -- watches -----------------------------------------------------------------------------------

    def _on_znode_change(self, kind: str) -> None:
        for b, c in sorted(self.controllers.items()):
            session = self.zk.sessions.get(b)
            if session is None:
                continue  # a watch lives in a session
            if kind in ("brokers", "isr_change", "topic", "reassign_partitions"):
                if c.is_active and c.watch_session == session:
                    self.world.schedule_controller_work(c, WATCHED[kind])
            elif kind == "controller":
                if self.zk.controller_owner is None:
                    self.world.schedule_controller_work(c, "reelect")
                elif c.is_active and self.zk.controller_owner != b:
                    self.world.schedule_controller_work(c, "controller_change")

    def check_failed_brokers_left_isr(self, c: SimControllerDriver, failed: set[int]) -> None:
        """Invariant: once a controller handled brokers' failure, none of them is left in
        the ISR in ZooKeeper, unless as its only member (Kafka never empties an ISR)."""
        st = self.state
        for b in sorted(failed):
            if b in st.isr and len(st.isr) > 1:
                self.world.violation(
                    "controller_isr",
                    f"c{c.broker_id} handled the failure of b{b} (epoch "
                    f"{c.controller_epoch}), ZooKeeper's ISR is still {list(st.isr)}",
                )

    def controlled_shutdown(self, broker: int, broker_epoch: int, incarnation: int) -> str:
        """The ControlledShutdown request of ``broker``, as a ``ControllerWork`` kind;
        its answer goes to ``controlled_shutdown_answered``."""
        callback = partial(self.controlled_shutdown_answered, broker, incarnation)
        return self.kind_of(ev.ControlledShutdown(broker, broker_epoch, callback=callback))

    def controlled_shutdown_answered(
        self, broker: int, incarnation: int, answer: decisions.ControlledShutdownResult
    ) -> None:
        """Invariant: after a successful answer (no error, no partition left that it
        leads: the broker stops; otherwise Kafka's broker tries again) the broker leads
        no partition that another live ISR member (registered, not shutting down)
        could lead. A deposed controller that has not noticed yet (its session expired)
        answers from what it knew, in Kafka too: its answers are not checked."""
        by = self.processing
        deposed = by is None or (
            by.broker_id != self.zk.controller_owner
            or by.controller_epoch != self.zk.controller_epoch
        )
        if deposed:
            self.world.count("controlled_shutdown_answered_by_deposed_controller")
        elif answer.error_code == 0 and not answer.remaining:
            st = self.state
            others = [
                r for r in st.isr if r != broker and r in self.live and not self._shutting_down(r)
            ]
            if st.leader == broker and others:
                self.world.violation(
                    "shutdown_leader",
                    f"b{broker} was told its controlled shutdown is done and still leads "
                    f"(ISR {list(st.isr)}, live {sorted(self.live)})",
                )
        remaining = len(answer.remaining) if answer.error_code == 0 else -1
        self.world.controlled_shutdown_answered(broker, incarnation, remaining)

    def alter_reassignment(self, target: tuple[int, ...]) -> str:
        """An AlterPartitionReassignments request, as a ``ControllerWork`` kind."""

        def answered(outcomes: dict | None) -> None:
            if outcomes is None:
                self.trace(f"reassignment to {list(target)}: NOT_CONTROLLER")
                return
            for tp, outcome in outcomes.items():
                self.trace(f"reassignment of {tp} to {list(target)}: {outcome}")

        return self.kind_of(ev.ApiPartitionReassignment({PARTITION: target}, answered))

    def _shutting_down(self, broker: int) -> bool:
        active = self.active
        return (
            active is not None
            and active.context is not None
            and broker in active.context.shutting_down_broker_ids
        )

    # -- controller -> broker ------------------------------------------------------------------------

    def send_leader_and_isr(self, sender: SimControllerDriver, msg: LeaderAndIsrMessage) -> None:
        self.world.count("leader_and_isr")
        self.world.network.send_reliable(
            self.world.now,
            msg.dst,
            msg,
            channel=f"controller:{sender.broker_id}:{sender.controller_epoch}",
            src=sender.broker_id,
        )

    # -- the leaders' ZooKeeper IO --------------------------------------------------------------------

    def conditional_update(self, proposal: IsrChangeProposal) -> int | str | None:
        """A leader's ISR write; applied only at the version the leader last saw.

        Returns the new version, None on a version conflict, or ``INELIGIBLE``
        when a replica being added is not registered at the broker epoch it
        fetched with (KIP-903; the IO layer checks the registration znode).
        A leader cut from ZooKeeper keeps retrying: the write is held (the answer
        the broker sends itself is held with it, see ``World``) and made when the
        connection comes back.
        """
        if self.world.zookeeper_unreachable(proposal.leader_id):
            self.held_writes.add((proposal.leader_id, proposal))
            self.trace(f"zk: ISR write from {proposal.leader_id} held: no ZooKeeper connection")
            return None
        return self.write_isr(proposal)

    def write_isr(self, proposal: IsrChangeProposal) -> int | str | None:
        current = self.zk.partition_state()
        assert current is not None
        lai = current.leader_and_isr
        if (
            proposal.partition_zk_version != lai.zk_version
            or proposal.leader_id != lai.leader
            or proposal.leader_epoch != lai.leader_epoch
        ):
            self.trace(
                f"zk: reject ISR {list(proposal.new_isr)} from {proposal.leader_id} "
                f"(epoch {proposal.leader_epoch} v{proposal.partition_zk_version}, "
                f"znode epoch {lai.leader_epoch} v{lai.zk_version})"
            )
            return None
        for replica, broker_epoch in proposal.added_broker_epochs:
            if self.zk.registrations.get(replica) != broker_epoch:
                self.trace(
                    f"zk: reject adding {replica} at broker epoch {broker_epoch} "
                    f"(registered: {self.zk.registrations.get(replica)})"
                )
                return INELIGIBLE
        state = LeaderIsrAndControllerEpoch(
            LeaderAndIsr(
                proposal.leader_id,
                proposal.leader_epoch,
                tuple(proposal.new_isr),
                proposal.partition_zk_version,
            ),
            current.controller_epoch,
        )
        version = self.zk.update_leader_and_isr_conditional(
            TOPIC, 0, state, proposal.partition_zk_version
        )
        assert version is not None
        self.trace(
            f"zk: leader {proposal.leader_id} {proposal.kind.name}: isr={list(proposal.new_isr)} "
            f"v={version}"
        )
        return version

    def on_isr_change_notification(self, partitions: frozenset) -> None:
        """The leader being run creates ``/isr_change_notification/isr_change_N``."""
        self.isr_change_notifications += 1
        broker = self.world.acting_broker
        if broker is not None and self.world.zookeeper_unreachable(broker):
            self.world.hold_for_zookeeper(broker, ("isr_notification", frozenset(partitions)))
            return
        self.zk.propagate_isr_changes(partitions)
