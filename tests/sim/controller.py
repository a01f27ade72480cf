"""ZooKeeper and the controller of the replication simulation.

The world keeps ZooKeeper; every controller decision is the shipped controller's.

``SimZooKeeper`` (``sim.zookeeper``) is ZooKeeper in memory.

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

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import KazooException, SessionExpiredError

from replog.config import KafkaConfig
from replog.controller import controller_zk, decisions
from replog.controller import events as ev
from replog.controller.context import ControllerContext
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
from replog.replication.isr_write import write_isr_change
from replog.zk import data as zd
from replog.zk.fencing import ControllerMovedError
from sim.network import ControllerWork, ZkPartitionState
from sim.network import LeaderAndIsr as LeaderAndIsrMessage
from sim.zookeeper import NO_LEADER, PARTITION, TOPIC, SimZooKeeper

if TYPE_CHECKING:
    from sim.world import World

INELIGIBLE = "ineligible"

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
                if what == "resumed reassignment":
                    world.count("reassignment_resumed")
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
        # a leader fenced at an epoch obeys the controller's word at it from now on
        self.world.brokers[broker].on_session_renewed()
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
        fetched with (KIP-903: the shipped ``write_isr_change`` checks it).
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
        # The broker's own write (KIP-903's check included), on the simulated ZooKeeper.
        result = write_isr_change(self.zk, TOPIC, 0, proposal, current.controller_epoch)
        if result.ineligible:
            self.trace(
                f"zk: reject adding {list(result.ineligible)} at broker epochs "
                f"{dict(proposal.added_broker_epochs)} (registered: {self.zk.registrations})"
            )
            return INELIGIBLE
        version = result.new_zk_version
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
