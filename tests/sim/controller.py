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

``BrokerController`` is one broker's ``KafkaController``
(``replog.controller.controller``) with its asyncio IO replaced by synchronous
in-memory calls, handler for handler: elect and fail over, turn the
``/brokers/ids`` and ISR-change watches into ``replog.controller.decisions``
calls, carry a decision out as ``KafkaController._apply`` does (write, install
the context, send; re-read and decide again on a version conflict), resign when
fenced. Of its requests, every partition of a LeaderAndIsr becomes a sim
``LeaderAndIsr`` message on the controller's own connection to that broker;
UpdateMetadata and StopReplica are only counted (a SimBroker has no metadata
cache, and StopReplica only goes to replicas already offline here).

``SimController`` (``world.controller``) ties them to the world: watches become
``ControllerWork`` events for the brokers' controllers, and it is ZooKeeper for
the leaders, with their IO: the conditional ISR write (``conditional_update``)
and the ISR change notification.

Concurrency: everything runs in the world's single thread, one event at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import NoNodeError

from replog.controller import controller_zk, decisions
from replog.controller.context import ControllerContext, TopicPartition
from replog.controller.controller import MAX_WRITE_ATTEMPTS, _rerun_failure
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

Decide = decisions.Decide
Retry = decisions.Retry


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
        self.assignments = {TOPIC: {0: assigned}}
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
        return set(self.assignments)

    def get_topic_assignments(self, topics) -> dict[str, dict[int, list[int]]]:
        return {
            t: {p: list(r) for p, r in self.assignments[t].items()}
            for t in topics
            if t in self.assignments
        }

    def get_replica_assignments(self, topics) -> dict[str, tuple[dict[int, Any], int]]:
        """The topic znodes with their adding/removing replicas (none: the simulation
        runs no reassignment) and a version."""
        return {
            t: ({p: ReplicaAssignment(tuple(r)) for p, r in a.items()}, 0)
            for t, a in self.get_topic_assignments(topics).items()
        }

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


class BrokerController:
    """One broker's ``KafkaController``: ``process`` is its one controller task.

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
        self.context: ControllerContext | None = None
        self.watch_session: int | None = None

    @property
    def is_active(self) -> bool:
        return self.context is not None

    @property
    def controller_epoch(self) -> int:
        return self.context.controller_epoch if self.context is not None else -1

    def _trace(self, text: str) -> None:
        self.plane.trace(f"c{self.broker_id}: {text}")

    # -- dispatch (KafkaController._process) -------------------------------------------

    def process(self, kind: str) -> None:
        if kind.startswith("controlled_shutdown "):
            _, broker, broker_epoch, incarnation = kind.split()
            handler: Callable[[], None] = partial(
                self._process_controlled_shutdown, int(broker), int(broker_epoch), int(incarnation)
            )
        else:
            handler = {
                "startup": self._elect,
                "reelect": self._process_reelect,
                "controller_change": self._process_controller_change,
                "broker_change": self._process_broker_change,
                "isr_change": self._process_isr_change,
                "expire": self._process_expire,
            }[kind]
        try:
            handler()
        except ControllerMovedError as exc:
            self._trace(f"controller moved ({exc}): resigning")
            self.plane.world.count("controller_fenced")
            self._maybe_resign()

    # -- election --------------------------------------------------------------------------

    def _elect(self) -> None:
        if self.zk.get_controller_id() is not None:
            return
        try:
            epoch = self.zk.register_controller_and_increment_epoch(
                self.broker_id, self.plane.world.now
            )
        except ControllerMovedError:
            return
        self._trace(f"elected controller at epoch {epoch.epoch}")
        self.plane.world.count("controller_elected")
        try:
            self._on_controller_failover(epoch)
        except ControllerMovedError as exc:
            # controller.py resigns on any failover error; any other here is a bug to report
            self._trace(f"failover failed ({exc}): resigning")
            self._resign()
            self.zk.delete_controller(self.broker_id)

    def _on_controller_failover(self, epoch: ControllerEpoch) -> None:
        self.watch_session = self.zk.sessions.get(self.broker_id)
        self.zk.delete_isr_change_notifications(
            self.zk.get_isr_change_notifications(), epoch.zk_version
        )
        self.context = controller_zk.load_context(self.zk, self.broker_id, epoch, False, 1.0)
        self._apply(decisions.on_controller_failover, _rerun_failure)

    def _resign(self) -> None:
        if self.context is not None:
            self._trace(f"resigned (epoch {self.context.controller_epoch})")
        self.context = None
        self.watch_session = None

    def _maybe_resign(self) -> None:
        was_active = self.is_active
        current = self.zk.get_controller_id()
        if was_active and current != self.broker_id:
            self._resign()
        elif was_active and current == self.broker_id:
            self._resign()
            self.zk.delete_controller(self.broker_id)

    def _process_controller_change(self) -> None:
        current = self.zk.get_controller_id()
        if self.is_active and current != self.broker_id:
            self._resign()

    def _process_reelect(self) -> None:
        self._process_controller_change()
        self._elect()

    def _process_controlled_shutdown(
        self, broker: int, broker_epoch: int, incarnation: int
    ) -> None:
        """As ``KafkaController._process_controlled_shutdown``: decide, write, send, answer."""
        if self.context is None:
            # NOT_CONTROLLER: the broker's retries are not modelled; it stops anyway
            self.plane.world.controlled_shutdown_answered(broker, incarnation, -1)
            return
        results: list[decisions.ControlledShutdownResult] = []

        def decide(ctx: ControllerContext) -> ControllerDecision:
            d, result = decisions.on_controlled_shutdown(ctx, broker, broker_epoch)
            results.append(result)
            return d

        self._apply(decide, lambda ctx, _stale: decide(ctx))
        answer = results[-1]
        self._trace(
            f"controlled shutdown of b{broker}: error {int(answer.error_code)}, "
            f"{len(answer.remaining)} partitions still led by it"
        )
        self.plane.world.controlled_shutdown_answered(broker, incarnation, len(answer.remaining))

    def _process_expire(self) -> None:
        if self.is_active:
            self._trace("ZooKeeper session expired: resigning")
            self._resign()

    # -- applying decisions (KafkaController._apply) ---------------------------------------

    def _apply(self, decide: Decide, retry: Retry | None) -> None:
        assert self.context is not None
        d = decide(self.context)
        for attempt in range(1, MAX_WRITE_ATTEMPTS + 1):
            stale = controller_zk.write_decision(self.zk, d)
            if stale:
                d.drop_failed_writes(stale)
            for write in d.zk_writes:
                lai = write.state.leader_and_isr
                self._trace(
                    f"zk write leader={lai.leader} epoch={lai.leader_epoch} isr={list(lai.isr)} "
                    f"v={lai.zk_version}"
                )
            self.context = d.context
            self._send_requests(d)
            if not stale:
                break
            ctx = self.context = decisions.refreshed(
                self.context, self.zk.get_partition_states(sorted(stale))
            )
            self.plane.world.count("controller_stale_write")
            self._trace(f"partitions {sorted(stale)} changed under us: deciding again")
            if retry is None or attempt == MAX_WRITE_ATTEMPTS:
                break
            d = retry(ctx, stale)

    def _send_requests(self, d: ControllerDecision) -> None:
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

    # -- cluster events --------------------------------------------------------------------

    def _process_broker_change(self) -> None:
        """As ``KafkaController._process_broker_change``: classify, re-read, decide, retry."""
        if self.context is None:
            return
        registered = self.zk.get_all_brokers()
        known = self.context.live_brokers
        changes = decisions.broker_changes(self.context, registered)
        if not changes:
            return
        self._trace(f"broker change: registered {sorted(registered)}, known {sorted(known)}")
        refresh = decisions.partitions_to_refresh(self.context, changes)
        if refresh:
            self.context = decisions.refreshed(self.context, self.zk.get_partition_states(refresh))
        for step in decisions.broker_change_steps(changes, registered):
            self._apply(step.decide, step.retry)
        self.plane.check_failed_brokers_left_isr(self, {*changes.dead, *changes.bounced})

    def _process_isr_change(self) -> None:
        if self.context is None:
            return
        names = self.zk.get_isr_change_notifications()
        if not names:
            return
        try:
            changed = self.zk.read_isr_change_notifications(names)
            known = sorted(tp for tp in changed if tp[0] in self.context.all_topics)
            fresh = self.zk.get_partition_states(known)
            self._apply(partial(decisions.on_isr_change, fresh_states=fresh), None)
        finally:
            if self.context is not None:
                self.zk.delete_isr_change_notifications(
                    names, self.context.controller_epoch_zk_version
                )


class SimController:
    """ZooKeeper plus every broker's controller, for the world (``world.controller``)."""

    def __init__(self, world: World, assigned: tuple[int, ...]) -> None:
        self.world = world
        self.assigned = assigned
        self.zk = SimZooKeeper(assigned, self._on_znode_change, world.violation)
        self.controllers: dict[int, BrokerController] = {}
        self._generation = 0
        self.held_writes: set[tuple[int, IsrChangeProposal]] = set()
        self.isr_change_notifications = 0
        self._cached: tuple[tuple[bytes, int] | None, ZkPartitionState | None] = (None, None)

    def trace(self, text: str) -> None:
        self.world.trace(text)

    # -- what the world reads ----------------------------------------------------------------

    @property
    def state(self) -> ZkPartitionState:
        """The partition state znode as a ``ZkPartitionState`` (cached per znode version)."""
        raw = self.zk.partition_state_znode()
        if raw is not None and self._cached[0] == raw:
            cached = self._cached[1]
            assert cached is not None
            return cached
        if raw is None:
            return ZkPartitionState(NO_LEADER, -1, (), -1, self.assigned, 0)
        s = zd.decode_partition_state(raw[0], raw[1])
        lai = s.leader_and_isr
        state = ZkPartitionState(
            lai.leader,
            lai.leader_epoch,
            tuple(lai.isr),
            lai.zk_version,
            self.assigned,
            s.controller_epoch,
        )
        self._cached = (raw, state)
        return state

    @property
    def registrations(self) -> dict[int, int]:
        return self.zk.registrations

    @property
    def live(self) -> set[int]:
        """Brokers registered in ZooKeeper: those the controller counts as live."""
        return set(self.zk.registrations)

    @property
    def active(self) -> BrokerController | None:
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

    def _new_controller(self, broker: int) -> BrokerController:
        self._generation += 1
        c = BrokerController(broker, self, self._generation)
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
        self.world.schedule_controller_work(c, "startup")
        return self.zk.registrations[broker]

    def session_renewed(self, broker: int) -> int:
        """A live broker learned that its session expired (Kafka ``Expire`` then
        ``RegisterBrokerAndReelect``): its controller resigns and drops what it had
        queued, the broker registers in a new session, then runs the election."""
        old = self.controllers[broker]
        old.process("expire")
        self._generation += 1
        old.generation = self._generation
        self.zk.open_session(broker)
        epoch = self.zk.register_broker(broker)
        self.world.schedule_controller_work(old, "reelect")
        return epoch

    def broker_crashed(self, broker: int) -> None:
        """The process died, and its controller with it (its session may live on)."""
        self.controllers.pop(broker, None)
        self.held_writes = {(b, p) for b, p in self.held_writes if b != broker}

    def current(self, work: ControllerWork) -> BrokerController | None:
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
            if kind in ("brokers", "isr_change"):
                if c.is_active and c.watch_session == session:
                    self.world.schedule_controller_work(
                        c, "broker_change" if kind == "brokers" else "isr_change"
                    )
            elif kind == "controller":
                if self.zk.controller_owner is None:
                    self.world.schedule_controller_work(c, "reelect")
                elif c.is_active and self.zk.controller_owner != b:
                    self.world.schedule_controller_work(c, "controller_change")

    def check_failed_brokers_left_isr(self, c: BrokerController, failed: set[int]) -> None:
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

    # -- controller -> broker ------------------------------------------------------------------------

    def send_leader_and_isr(self, sender: BrokerController, msg: LeaderAndIsrMessage) -> None:
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
