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

from kazoo.exceptions import ConnectionLoss, KazooException, SessionExpiredError
from kio.schema.errors import ErrorCode

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
from replog.protocol.controller_schemas import LeaderAndIsrRequest, StopReplicaRequest
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

_CONFIGS: dict[tuple[int, bool], KafkaConfig] = {}

# The znodes the active controller watches (its watches live in the session that set
# them at failover) -> the ControllerWork their change enqueues.
WATCHED = {
    "brokers": "broker_change",
    "isr_change": "isr_change",
    "topic": "partition_modifications",
    "reassign_partitions": "zk_reassignment",
    "log_dir_event": "log_dir_event",
    "topics": "topic_change",
    "delete_topics": "topic_deletion",
    "preferred_replica_election": "preferred_election_zk",
}


def _config(broker_id: int, delete_topic_enable: bool = True) -> KafkaConfig:
    """The broker's config as the controller reads it (Kafka's defaults; no auto leader
    rebalance, which needs a timer the simulation does not run)."""
    key = (broker_id, delete_topic_enable)
    if key not in _CONFIGS:
        _CONFIGS[key] = KafkaConfig.from_properties(
            {
                "broker.id": str(broker_id),
                "zookeeper.connect": "zookeeper.sim:2181",
                "auto.leader.rebalance.enable": "false",
                "delete.topic.enable": str(delete_topic_enable).lower(),
            }
        )
    return _CONFIGS[key]


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
        self.inactive_at_start = False  # whether the event being processed found it inactive
        self.core = ControllerCore(
            broker_id,
            _config(broker_id, plane.world.config.delete_topic_enable),
            lambda: plane.unclean_leader_election_default,
        )
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
        self.inactive_at_start = self.core.context is None
        self.plane.leader_before_event = self.plane.state.leader
        try:
            self.drive(self.core.process(event, world.now / 1000))
        except ZOOKEEPER_ERRORS as exc:
            self._trace(f"error processing {type(event).__name__}: {exc!r}")
            world.count("controller_event_error")
        finally:
            self.plane.processing = outer
        if failed and self.core.is_active:
            self.plane.check_failed_brokers_left_isr(self, failed)
        if isinstance(event, ev.AutoPreferredReplicaLeaderElection):
            self.plane.check_preferred_leader(self, "auto leader rebalance", None)
        elif isinstance(event, ev.ReplicaLeaderElection) and event.trigger is ev.ElectionTrigger.ZK:
            self.plane.check_preferred_leader(self, "/admin/preferred_replica_election", None)
        if isinstance(event, ev.LeaderAndIsrResponseReceived) and event.offline:
            self.plane.check_offline_replica_moved(self, event.broker_id, event.broker_epoch)

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
                name = (
                    request.target if isinstance(request.target, str) else request.target.__name__
                )
                losses = self.plane.connection_losses.get(self.broker_id, set())
                if name in losses:
                    losses.discard(name)
                    self._trace(f"ZooKeeper {name}: ConnectionLoss (the session lives on)")
                    world.count("zk_connection_loss")
                    raise ConnectionLoss()
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
                if self.zk.get_preferred_replica_election() is not None:
                    # a kazoo DataWatch calls back at once: a znode left from before
                    world.schedule_controller_work(self, "preferred_election_zk")
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
                if isinstance(request, StopReplicaRequest):
                    self.plane.stop_replica_sent(self, broker_id, request)
                if not isinstance(request, LeaderAndIsrRequest):
                    self.plane.world.count(type(request).__name__)
                    continue
                for topic in request.topic_states:
                    if str(topic.topic_name) != TOPIC:  # a topic the simulation only names
                        self.plane.world.count("leader_and_isr_other_topic")
                        continue
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
                                self.broker_id,
                                self.generation,
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
        self.controlled_shutdown_answers: list[tuple[int, decisions.ControlledShutdownResult]] = []
        # the brokers' unclean.leader.election.enable (a dynamic broker config; scripted)
        self.unclean_leader_election_default = False
        self.elect_leaders_answers: list[decisions.ElectionOutcome] = []
        self.leader_before_event = NO_LEADER  # ZooKeeper's, when the event being run began
        self._next_event = 0
        # broker -> ZooKeeper calls of its controller that fail once with ConnectionLoss
        # (kazoo's answer while the connection is down for zookeeper.connection.timeout.ms;
        # the session may outlive it): a scripted fault, see World.lose_zookeeper_call
        self.connection_losses: dict[int, set[str]] = {}

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
        "auto_rebalance": ev.AutoPreferredReplicaLeaderElection,
        "log_dir_event": ev.LogDirEventNotification,
        "topic_change": ev.TopicChange,
        "topic_deletion": ev.TopicDeletion,
        "preferred_election_zk": partial(ev.ReplicaLeaderElection, None, 0, ev.ElectionTrigger.ZK),
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
            if kind in WATCHED or kind.startswith("topic:"):
                if c.is_active and c.watch_session == session:
                    work = WATCHED.get(kind) or self.kind_of(
                        ev.PartitionModifications(kind.split(":", 1)[1])
                    )
                    self.world.schedule_controller_work(c, work)
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
        self.controlled_shutdown_answers.append((broker, answer))
        if (
            by is not None
            and by.inactive_at_start
            and answer.error_code != ErrorCode.not_controller
        ):
            # Kafka: a broker that is not the controller answers NOT_CONTROLLER, and the
            # shutting-down broker asks again (controlled.shutdown.max.retries)
            self.world.violation(
                "shutdown_answer_not_controller",
                f"c{by.broker_id}, not the controller, answered b{broker}'s controlled "
                f"shutdown with {answer}",
            )
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

    def elect_leaders(self, election_type: int) -> str:
        """An ElectLeaders request (KIP-460) for the partition, as a ``ControllerWork``
        kind; its answer goes to ``election_answered``."""
        callback = partial(self.election_answered, election_type)
        return self.kind_of(
            ev.ReplicaLeaderElection(frozenset({PARTITION}), election_type, callback=callback)
        )

    def election_answered(self, election_type: int, outcomes: dict | None) -> None:
        if outcomes is None:
            self.trace("ElectLeaders: NOT_CONTROLLER")
            return
        outcome = outcomes[PARTITION]
        self.elect_leaders_answers.append(outcome)
        self.trace(f"ElectLeaders (type {election_type}): {outcome}")
        failed = (
            ErrorCode.preferred_leader_not_available,
            ErrorCode.eligible_leaders_not_available,
        )
        if outcome.error_code in failed and f"{PARTITION[0]}-{PARTITION[1]}" not in (
            outcome.message or ""
        ):
            # Kafka: ApiError(..., "Failed to elect leader for partition t-0 ...")
            self.world.violation(
                "election_answer_message", f"ElectLeaders answered {outcome}: no partition named"
            )
        assert self.processing is not None
        if election_type == decisions.PREFERRED_ELECTION:
            self.check_preferred_leader(self.processing, "ElectLeaders (preferred)", outcome)

    def check_preferred_leader(
        self, c: SimControllerDriver, what: str, outcome: decisions.ElectionOutcome | None
    ) -> None:
        """Invariant, after a preferred replica election (an ElectLeaders answer, or the
        auto leader rebalance with ``outcome`` None): the partition is led by its
        preferred replica (the first assigned) whenever that one could lead, live (as
        the controller knows, and not shutting down) and in ZooKeeper's ISR; an answer of success names it, and only
        an answer of PREFERRED_LEADER_NOT_AVAILABLE says it could not. A partition being
        reassigned is left to its reassignment by the auto rebalance. Answers of a
        deposed controller (its session expired unnoticed) are not checked."""
        if (
            c.context is None
            or c.broker_id != self.zk.controller_owner
            or c.controller_epoch != self.zk.controller_epoch
        ):
            self.world.count("election_by_deposed_controller")
            return
        st = self.state
        ra = self.zk.topic_assignment()
        preferred = ra.replicas[0]
        # registered as the controller knows it (a broker change may still be queued), and
        # this process of it has not asked to shut down (a restarted one is eligible again)
        could_lead = (
            preferred in c.context.live_brokers
            and not self.world.shutting_down(preferred)
            and preferred in st.isr
        )
        wrong = None
        if outcome is None:
            if could_lead and st.leader != preferred and not ra.is_being_reassigned:
                wrong = f"b{preferred} could lead and does not"
        elif outcome.error_code in (ErrorCode.none, ErrorCode.election_not_needed):
            # ELECTION_NOT_NEEDED exactly when it led already (the controller re-read
            # the partition state first; a takeover in between deposes it, see above)
            not_needed = self.leader_before_event == preferred
            if (
                st.leader != preferred
                or (outcome.error_code == ErrorCode.none and outcome.leader != preferred)
                or (outcome.error_code == ErrorCode.election_not_needed) != not_needed
            ):
                wrong = f"answered {outcome}, the preferred replica is b{preferred}"
        elif outcome.error_code == ErrorCode.preferred_leader_not_available:
            if could_lead:
                wrong = f"answered {outcome}, b{preferred} could lead"
        else:
            wrong = f"answered {outcome}"
        if wrong is not None:
            self.world.violation(
                "preferred_leader",
                f"c{c.broker_id} {what}: {wrong} (leader {st.leader}, ISR {list(st.isr)}, "
                f"assignment {list(ra.replicas)}, live {sorted(self.live)})",
            )
        elif st.leader == preferred:
            self.world.count("preferred_leader_elected")

    def _shutting_down(self, broker: int) -> bool:
        active = self.active
        return (
            active is not None
            and active.context is not None
            and broker in active.context.shutting_down_broker_ids
        )

    # -- controller -> broker ------------------------------------------------------------------------

    def leader_and_isr_answered(self, msg: LeaderAndIsrMessage, *, storage_error: bool) -> None:
        """The broker's answer to a LeaderAndIsr reaches the controller that sent it (the
        ``leader_and_isr_answers`` profiles): as ``KafkaController``'s sender does, an
        answer with KAFKA_STORAGE_ERROR, or without one for a replica the controller
        believes in a failed log dir, becomes a ``LeaderAndIsrResponseReceived``."""
        if not self.world.config.leader_and_isr_answers:
            return
        c = self.controllers.get(msg.sender)
        if c is None or c.generation != msg.sender_generation or c.context is None:
            return
        known = PARTITION in c.context.replicas_on_offline_dirs.get(msg.dst, frozenset())
        if not storage_error and not known:
            return
        mine = frozenset({PARTITION})
        event = ev.LeaderAndIsrResponseReceived(
            msg.dst,
            msg.broker_epoch,
            mine if storage_error else frozenset(),
            frozenset() if storage_error else mine,
        )
        self.trace(f"b{msg.dst} -> c{c.broker_id}: LeaderAndIsr answered {event}")
        self.world.queue.push(
            self.world.now + 1, ControllerWork(c.broker_id, c.generation, self.kind_of(event))
        )

    def stop_replica_sent(
        self, c: SimControllerDriver, broker: int, request: StopReplicaRequest
    ) -> None:
        """A StopReplica that deletes partitions (of a topic being deleted, which the
        simulated brokers host only by name): a live broker at the registration it was
        sent to deletes them and answers, and ``KafkaController``'s sender turns the
        answer into a ``TopicDeletionStopReplicaResponseReceived``. A stopped broker
        never answers: the deletion waits for it. The simulated partition's own replica,
        removed by a reassignment, keeps its log as before (its StopReplica is lost)."""
        deleted = {
            TopicPartition(str(t.topic_name), int(p.partition_index)): 0
            for t in request.topic_states
            for p in t.partition_states
            if p.delete_partition and str(t.topic_name) != TOPIC
        }
        b = self.world.brokers[broker]
        if not deleted or not b.alive or b.broker_epoch != int(request.broker_epoch):
            return
        event = ev.TopicDeletionStopReplicaResponseReceived(broker, 0, deleted)
        self.trace(f"b{broker} -> c{c.broker_id}: deleted {sorted(deleted)}")
        self.world.queue.push(
            self.world.now + 1, ControllerWork(c.broker_id, c.generation, self.kind_of(event))
        )

    def check_offline_replica_moved(self, c: SimControllerDriver, broker: int, epoch: int) -> None:
        """Invariant: once the acting controller handled an answer saying ``broker``'s
        replica is in a failed log dir, that replica is out of ZooKeeper's ISR (unless
        as its only member: Kafka never empties an ISR) and leads only if no other ISR
        member could."""
        if not c.is_active or self.zk.registrations.get(broker) != epoch:
            return
        b = self.world.brokers[broker]
        if not b.alive or not b.log_dir_failed:
            return
        st = self.state
        live = c.context.live_broker_ids if c.context is not None else set()
        others = [r for r in st.isr if r != broker and r in live]
        if (broker in st.isr and len(st.isr) > 1) or (st.leader == broker and others):
            self.world.violation(
                "offline_replica",
                f"c{c.broker_id} handled b{broker}'s failed log dir: leader {st.leader}, "
                f"ISR {list(st.isr)}",
            )
        else:
            self.world.count("offline_replica_moved")

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
