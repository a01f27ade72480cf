"""The simulated world: clock, brokers, ZooKeeper and controllers, producers, faults, invariants.

``World.step`` either injects a random action (fault, produce) or runs the next
event; the invariants are checked after every step. Everything random comes
from one ``random.Random(seed)``, so a seed replays exactly.

Invariants (``check_invariants``):

* committed records never change: every replica's log below its own HW, and
  every record a producer was told is acknowledged, matches one global
  "committed" log (extended only by leaders' high watermarks);
* the acting leader (the one ZooKeeper names, at ZooKeeper's epoch) holds every
  committed record: no acknowledged write was lost;
* the acting leader's HW is at most the log end offset of every live ISR member;
* a controller write that ZooKeeper accepted came from the controller it names
  (a deposed controller's writes are fenced by ``/controller_epoch``'s version);
* a controller that handled a broker's failure (or bounce) left it in no ISR
  but a one-member one (checked after each broker change it handles);
* after a successful ControlledShutdown answer (no error, nothing left), the
  broker leads no partition another live ISR member could lead (checked at the
  answer of the controller ZooKeeper names);
* a replica's HW never goes back while it keeps one role at one leader epoch;
* leader epochs only increase (ZooKeeper, each replica, each log's records and
  epoch cache); so do the controller epoch and the state znode's version.

Liveness (``heal_and_converge``): once ``heal()`` stops every fault, within
``SimConfig.liveness_bound_ms`` of simulated time the partition has a leader
at ZooKeeper's epoch, every replica is in the ISR with an identical log and
the leader's HW, a controller is acting with every broker live, and a produce
with acks=all is acknowledged.

Fault model: crashes that keep the whole log, crashes that lose the unflushed
tail (only while another live ISR member holds the data: Kafka's acks=all does
not fsync, so losing every ISR copy at once loses data by design); a crash ends
the ZooKeeper session at once (clean) or only after ``session_timeout_ms``
(hard kill: ZooKeeper still lists the dead broker meanwhile); quick restarts
the controller never notices (log and ZooKeeper registration kept, the world
before KIP-380; never the leader or the controller's broker); pauses (SIGSTOP,
GC) shorter or longer than the ZooKeeper session; links cut in one direction
or both; a network that delays, drops, duplicates and reorders; controller
failover (the controller's session expires; the old controller may still
finish the event it was processing, and its writes must be fenced by the
controller epoch); a broker cut from ZooKeeper (its ISR writes and
notifications wait, its session expires after ``session_timeout_ms``, it keeps
serving fetches meanwhile); a ZooKeeper session expiring by itself; slow disks
(the broker stalls for a random time before handling a message or timer);
clock jumps (a broker's pending timers fire early). With
``controlled_shutdowns``, ``reassignments`` and ``controller_takeovers`` (the
"operations" and "controller" profiles): controlled shutdowns, KIP-455
reassignments (one replica removed, then every broker again, through the API or
``/admin/reassign_partitions``), and the acting controller's session expiring
between two ZooKeeper calls of an event while another broker's controller
takes over at once.

The brokers run with one world-wide clock (``now``): a broker's clock offset
(``local_now``) is kept for a SimBroker that reads its clock through it.
"""

from __future__ import annotations

import os
import random
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

from replog.controller import events as controller_events
from replog.controller.decisions import PREFERRED_ELECTION, UNCLEAN_ELECTION
from replog.replication.follower import FollowerPhase
from replog.replication.truncation import check_epoch_entries
from sim.broker import Role, SimBroker, TruncationRule
from sim.consumer import Consumers
from sim.controller import INELIGIBLE, NO_LEADER, SimController, SimControllerDriver
from sim.network import (
    ControllerWork,
    Deliver,
    EventQueue,
    FetchResponse,
    Network,
    NetworkConfig,
    ProduceRequest,
    Record,
    Timer,
    WorldEvent,
)
from sim.regressions import OPEN_BUG_KINDS

PROBE = "liveness-probe"


@dataclass
class SimConfig:
    replicas: int = 3
    min_insync_replicas: int = 2
    replica_lag_time_max_ms: int = 1_500
    session_timeout_ms: int = 3_000
    request_timeout_ms: int = 1_000
    fetch_backoff_ms: int = 100
    fetch_wait_ms: int = 100
    hw_checkpoint_interval_ms: int = 2_000
    flush_interval_ms: int | None = 1_500  # None: flush only where a script does
    flush_on_append: bool = True
    truncation_rule: TruncationRule = TruncationRule.LEADER_EPOCH
    network: NetworkConfig = field(default_factory=NetworkConfig.chaotic)
    fault_probability: float = 0.02
    produce_probability: float = 0.2
    lossy_crashes: bool = True
    fast_bounces: bool = True
    controller_faults: bool = True  # controller failover, zombie controller
    zookeeper_faults: bool = True  # broker cut from ZooKeeper, session expiry
    one_way_links: bool = True
    slow_disks: bool = True
    clock_jumps: bool = True
    # a leader cut from ZooKeeper for a session timeout fences itself
    # (``PartitionMachine.on_session_expired``, as the broker's zk_fence does)
    broker_zk_fence: bool = True
    # some crashes are controlled shutdowns instead (ControlledShutdown to the controller,
    # then a clean stop); off by default so the other profiles' random streams stay as
    # their regression seeds were found
    controlled_shutdowns: bool = False
    # operators reassign the partition (KIP-455, through AlterPartitionReassignments or
    # /admin/reassign_partitions): one replica removed, then every broker again; heal()
    # asks for the full assignment back
    reassignments: bool = False
    # between two ZooKeeper calls of an event, the acting controller's session expires and
    # another broker's controller takes over at once (its writes fence the rest of the event)
    controller_takeovers: bool = False
    # operators' leader elections (KIP-460 ElectLeaders, preferred) and the controller's
    # periodic auto leader rebalance; each answer and outcome is checked (``SimController``)
    leader_elections: bool = False
    # brokers answer LeaderAndIsr (the answers a controller acts on: KAFKA_STORAGE_ERROR)
    leader_and_isr_answers: bool = False
    # a broker's log dir fails (its replica goes offline, a log dir event notification);
    # the broker is stopped a while later to replace the disk
    log_dir_failures: bool = False
    # the ISR change notifications go out from a task of the broker, as the replica
    # manager's, not of each leadership: a change made just before the leadership ended
    # still reaches the controller (the older profiles keep the per-leadership timer their
    # seeds were found with)
    broker_isr_propagation: bool = False
    # the brokers' delete.topic.enable (false: the controller drops deletion requests)
    delete_topic_enable: bool = True
    # consumers fetching at v12 with last_fetched_epoch (KIP-595) in fetch sessions
    # (sim/consumer.py), on a random stream of their own; and the brokers' session cache
    # (max.incremental.fetch.session.cache.slots, min.incremental.fetch.session.eviction.ms)
    consumers: int = 0
    consumer_fetch_probability: float = 0.3
    fetch_session_cache_slots: int = 1_000
    fetch_session_eviction_ms: int = 120_000
    # the leader's replication quota (leader.replication.throttled.replicas): how often a
    # follower's fetch finds the leader over it (its own random stream; 0: never)
    replication_throttle: float = 0.0
    # after heal(): a leader, a full ISR, identical logs and an acknowledged produce within
    # this much simulated time (runs take 0.3-2.5 s; catching up 3,000 records at 25 per
    # fetch takes ~5 s)
    liveness_bound_ms: int = 30_000
    # violation kinds only counted, not raised: by default those of the open bugs listed
    # in sim/regressions.py, so that runs look past a bug already found
    tolerated: frozenset[str] = frozenset(OPEN_BUG_KINDS)


def replay_line(seed: int, profile: str, steps: int | None, tolerated: frozenset[str]) -> str:
    """The one-line command that replays a random run of ``python -m sim.run``."""
    flags = f" --steps {steps}" if steps is not None else ""
    if tolerated != frozenset(OPEN_BUG_KINDS):
        flags += " --strict" + "".join(f" --tolerate {k}" for k in sorted(tolerated))
    return (
        f"PYTHONPATH=tests REPLOG_SIM_TRACE=all .venv/bin/python -m sim.run "
        f"--profile {profile} --seed {seed}{flags}"
    )


class SimInvariantViolation(AssertionError):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"[{kind}] {message}")
        self.kind = kind


class World:
    def __init__(
        self,
        seed: int,
        config: SimConfig,
        *,
        collect_violations: bool = False,
        label: str = "",
        steps: int | None = None,
    ) -> None:
        self.seed = seed
        self.label = label
        self.steps = steps
        self.config = config
        self.rng = random.Random(seed)
        self.now = 0
        self.step_no = 0
        self.queue = EventQueue()
        self.network = Network(config.network, self.rng, self.queue)
        self.network.zookeeper_gate = self._zookeeper_gate
        self.network.incarnation_of = lambda b: self.brokers[b].incarnation if b else None
        full = os.environ.get("REPLOG_SIM_TRACE") == "all"
        self.trace_lines: deque[str] = deque(maxlen=None if full else 600)
        self.collect_violations = collect_violations
        self.violations: list[SimInvariantViolation] = []
        ids = tuple(range(1, config.replicas + 1))
        self.controller = SimController(self, ids)
        self.clock_offset: dict[int, int] = dict.fromkeys(ids, 0)  # clock jumps per broker
        self.brokers = {b: SimBroker(b, self) for b in ids}
        self.committed: list[Record] = []
        self.acked: dict[int, str] = {}
        self.acked_payloads: set[str] = set()
        # offset -> (broker, record) copies a crash lost from a replica's unflushed tail
        self._lost_copies: dict[int, list[tuple[int, object]]] = {}
        self.loss_accepted = False
        self._loss_epoch = -1  # ZooKeeper's leader epoch when durability was last given up
        self._unaware_of_loss: dict[int, tuple] = {}  # broker -> _loss_view at that moment
        self._loss_leader: tuple[int, int] | None = None  # who led, as (broker, incarnation)
        self.produced = 0
        self._verified: dict[int, int] = dict.fromkeys(ids, 0)
        self._hw_term: dict[int, tuple[object, int]] = {}
        self._answered_by: dict[int, tuple[int, int]] = {}  # the last fetch answer's sender
        self._known_epoch: dict[int, tuple[int, int]] = {}
        self._zk_epoch = 0
        self._zk_version = -1
        self._controller_epoch = 0
        self._pause_id = 0
        # lost an unflushed tail and may still be in ZooKeeper's ISR -> log end before
        self.lossy: dict[int, int] = {}
        self.unnoticed_down: set[int] = set()  # crashed, ZooKeeper session kept (fast bounce)
        self.awaiting_expiry: set[int] = set()  # crashed, ZooKeeper session not yet expired
        self.zk_cut: dict[int, int] = {}  # broker -> when its ZooKeeper connection heals
        self.zk_held: dict[int, list[Any]] = {}  # what waits for that connection
        self.slow_disk: dict[int, int] = {}  # broker -> until when its disk is slow
        self.shutdown_requested: dict[int, int] = {}  # broker -> incarnation that asked
        self.acting_broker: int | None = None  # the broker whose handler is running
        self.faults_enabled = True
        self.produce_enabled = True
        self.stats: dict[str, int] = {}
        self.consumers = Consumers(self, config.consumers)
        self._throttle_rng = random.Random(seed * 104_729 + 3)

    # -- plumbing -------------------------------------------------------------------------

    def trace(self, text: str) -> None:
        self.trace_lines.append(f"{self.step_no:6d} t={self.now:7d} {text}")

    def count(self, key: str) -> None:
        self.stats[key] = self.stats.get(key, 0) + 1

    def local_now(self, broker: int) -> int:
        """``broker``'s own clock: the world's, plus every jump it took."""
        return self.now + self.clock_offset[broker]

    def schedule_controller_work(self, c: SimControllerDriver, kind: str) -> None:
        """A watch fired (or the broker started): the event reaches its controller soon."""
        self.queue.push(
            self.now + self.rng.randint(1, 20), ControllerWork(c.broker_id, c.generation, kind)
        )

    def start(self) -> None:
        for b in self.brokers.values():
            b.incarnation = -1
            b.restart()
        for b in self.brokers.values():
            b.broker_epoch = self.controller.broker_started(b.id)
        # the first broker wins the first election: scripted runs know where the controller is
        first = self.controller.controllers[min(self.brokers)]
        first.process("startup")

    def describe(self) -> str:
        st = self.controller.state
        parts = " ".join(b.describe() for b in self.brokers.values())
        return (
            f"zk(leader={st.leader} e{st.leader_epoch} isr={list(st.isr)} v{st.zk_version} "
            f"{self.controller.describe()}) {parts}"
        )

    def replay_command(self) -> str:
        if not self.label:  # a scripted world or a custom config: its test replays it
            return "REPLOG_SIM_TRACE=all .venv/bin/pytest -q tests/test_replication_simulation.py"
        return replay_line(self.seed, self.label, self.steps, self.config.tolerated)

    def failure_report(self) -> str:
        tail = "\n".join(self.trace_lines)
        return (
            f"seed={self.seed} step={self.step_no} t={self.now}\n{self.describe()}\n"
            f"--- last {len(self.trace_lines)} trace lines ---\n{tail}\n"
            f"replay with: {self.replay_command()}"
        )

    # -- events ------------------------------------------------------------------------------

    def run_next_event(self) -> bool:
        if not len(self.queue):
            return False
        at, event = self.queue.pop()
        self.now = max(self.now, at)
        if isinstance(event, Deliver):
            b = self.brokers[event.message.dst]
            if self._may_handle(b, event):
                msg = event.message
                answers = b.responses_in_term
                self.acting_broker = b.id
                try:
                    b.deliver(msg)
                finally:
                    self.acting_broker = None
                if isinstance(msg, FetchResponse) and b.responses_in_term > answers:
                    # a fetch answer the follower took: whose (which process) it was
                    self._answered_by[b.id] = (msg.src, event.sender_incarnation)
        elif isinstance(event, Timer):
            b = self.brokers[event.broker]
            if b.incarnation == event.incarnation and self._may_handle(b, event):
                self.acting_broker = b.id
                try:
                    b.on_timer(event)
                finally:
                    self.acting_broker = None
        elif isinstance(event, ControllerWork):
            b = self.brokers[event.broker]
            if self.controller.current(event) is None or not b.alive:
                c = self.controller.controllers.get(event.broker)
                if c is not None and b.alive:
                    # queued under a session that expired since: Kafka's Expire cleared the
                    # queue and answered the requests it dropped (``preempt``)
                    c.core.preempt(self.controller.event_of(event.kind))
                    self.count("controller_event_dropped")
                return True
            if b.paused:
                b.deferred.append(event)
            elif self.zookeeper_unreachable(b.id):
                self.hold_for_zookeeper(b.id, event)
            else:
                self.controller.run(event)
        elif isinstance(event, WorldEvent):
            self._on_world_event(event)
        return True

    def _may_handle(self, b: SimBroker, event: object) -> bool:
        """Whether ``b`` handles ``event`` now; a paused or stalled broker defers it."""
        if not b.alive:
            return False
        if b.paused:
            b.deferred.append(event)
            return False
        until = self.slow_disk.get(b.id)
        if until is not None and self.now < until and self.rng.random() < 0.15:
            # the disk write before this event takes long: everything waits behind it
            stall = self.rng.randint(5, 400 if self.rng.random() < 0.9 else 2_500)
            self.count("disk_stall")
            self.pause(b.id, stall, expire_session=False, why="slow disk")
            b.deferred.append(event)
            return False
        return True

    def _on_world_event(self, ev: WorldEvent) -> None:
        b = self.brokers[ev.broker]
        if ev.kind == "resume":
            if b.alive and b.paused and ev.token == b.pause_token:
                self.resume(b.id)
        elif ev.kind == "pause_session_expired":
            if b.alive and b.paused and ev.token == b.pause_token:
                self.trace(f"b{b.id}: ZooKeeper session expired while paused")
                self._zookeeper_expires_session(b.id)
        elif ev.kind == "fast_restart":
            if not b.alive and b.id in self.unnoticed_down:
                self.restart(b.id)
        elif ev.kind == "crash_session_expired":
            if not b.alive and b.id in self.awaiting_expiry and ev.token == b.incarnation:
                self.awaiting_expiry.discard(b.id)
                self.trace(f"b{b.id}: ZooKeeper session of the crashed broker expired")
                self._zookeeper_expires_session(b.id)
        elif ev.kind == "zk_cut_session_expired":
            if self.zk_cut.get(b.id) == ev.token:
                self.trace(f"b{b.id}: ZooKeeper session expired while cut from ZooKeeper")
                self._zookeeper_expires_session(b.id)
                if self.config.broker_zk_fence and not b.paused:  # its fence fires too
                    b.fence_from_zookeeper()
        elif ev.kind == "zk_heal":
            if self.zk_cut.get(b.id) == ev.token:
                if b.alive and b.paused:
                    b.deferred.append(ev)  # the process reconnects once it runs again
                else:
                    self._zk_reconnect(b.id)
        elif ev.kind == "restore_assignment":
            # after heal(): the operator asks for every broker as a replica again, until
            # the topic znode shows it (a controller may fail over meanwhile)
            # the operator's check goes on until the world converged: a reassignment
            # scheduled before heal() may complete after it and move the topic again
            if not self.assignment_restored():
                target = self.controller.zk.topic_assignment().target_replicas
                if sorted(target) != sorted(self.brokers):
                    self.reassign(tuple(sorted(self.brokers)), via_zk=False)
            if not self.converged():
                self.queue.push(self.now + 500, ev)
        elif ev.kind == "replace_disk":
            if b.alive and b.log_dir_failed and ev.token == b.incarnation:
                self.trace(f"b{b.id}: stopped to replace its disk")
                b.log.flushed = b.log.log_end_offset  # a clean stop: no append since the failure
                self.crash(b.id)
        elif ev.kind == "controlled_stop":
            if b.alive and ev.token == b.incarnation:
                b.log.flushed = b.log.log_end_offset  # a clean stop flushes the log
                self.crash(b.id)
                if not self.faults_enabled:  # asked before heal(): it comes back as well
                    self.restart(b.id)
        elif ev.kind == "session_notice":
            if (
                b.alive
                and ev.token == b.incarnation
                and b.session_expired
                and not b.paused
                and not self.zookeeper_unreachable(b.id)
            ):
                self._notice_session_expired(b.id, None)
        else:
            raise AssertionError(f"unknown world event {ev}")

    # -- ZooKeeper sessions and connections ------------------------------------------------

    def zookeeper_unreachable(self, broker: int) -> bool:
        return broker in self.zk_cut

    def hold_for_zookeeper(self, broker: int, item: Any) -> None:
        self.zk_held.setdefault(broker, []).append(item)

    def _zookeeper_gate(self, dst: int, message: Any) -> bool:
        """The answer to a held ISR write travels with the write (see ``conditional_update``)."""
        proposal = getattr(message, "proposal", None)
        if proposal is not None and (dst, proposal) in self.controller.held_writes:
            self.hold_for_zookeeper(dst, message)
            return True
        return False

    def _zookeeper_expires_session(self, broker: int) -> None:
        if self.controller.zk.expire_session(broker):
            self.brokers[broker].session_expired = True
            self.count("session_expired")

    def _notice_session_expired(self, broker: int, in_flight: ControllerWork | None) -> None:
        """The broker learns its session is gone. The controller event it was in the
        middle of (``in_flight``) completes first, on the new connection, as a zombie
        controller's would; then it registers again (a new broker epoch) and its
        controller resigns and runs the election."""
        b = self.brokers[broker]
        if in_flight is not None:
            self.trace(f"c{broker}: finishing {in_flight.kind} after its session expired")
            self.count("zombie_controller_event")
            self.controller.run(in_flight)
        b.session_expired = False
        self.trace(f"b{broker}: new ZooKeeper session")
        self.controller.session_renewed(broker)

    def _zk_reconnect(self, broker: int) -> None:
        """The broker's ZooKeeper connection is back: held work goes out, in order."""
        self.zk_cut.pop(broker, None)
        held = self.zk_held.pop(broker, [])
        b = self.brokers[broker]
        self.trace(f"b{broker}: ZooKeeper connection back ({len(held)} held)")
        if not b.alive:
            return
        work = [w for w in held if isinstance(w, ControllerWork)]
        if b.session_expired:
            self._notice_session_expired(broker, work[0] if work else None)
            work = []
        for w in work:
            self.controller.run(w)
        for item in held:
            if isinstance(item, ControllerWork):
                continue
            if isinstance(item, tuple) and item[0] == "isr_notification":
                self.controller.zk.propagate_isr_changes(item[1])
                continue
            if isinstance(item, tuple) and item[0] == "log_dir_event":
                self.controller.zk.propagate_log_dir_event(item[1])
                continue
            # an ISR write and the answer the broker sent for it: write now, answer now
            key = (broker, item.proposal)
            if key not in self.controller.held_writes:
                continue
            self.controller.held_writes.discard(key)
            if item.dst_incarnation != b.incarnation:
                continue
            result = self.controller.write_isr(item.proposal)
            ineligible = result == INELIGIBLE
            answer = replace(
                item, new_zk_version=None if ineligible else result, ineligible=ineligible
            )
            self.network.send_reliable(self.now, broker, answer, channel="zookeeper")

    # -- faults --------------------------------------------------------------------------------

    def _healthy(self, broker: int) -> bool:
        b = self.brokers[broker]
        return (
            b.alive
            and not b.paused
            and not b.log_dir_failed
            and not b.session_expired
            and broker in self.controller.live
            and not self.zookeeper_unreachable(broker)
        )

    def shutting_down(self, broker: int) -> bool:
        """This process of ``broker`` asked for a controlled shutdown (a restarted one has
        not, whatever a controller still remembers)."""
        b = self.brokers[broker]
        return b.alive and self.shutdown_requested.get(broker) == b.incarnation

    def lossy_crash_allowed(self, broker: int) -> bool:
        """Losing the unflushed tail is fair only while another in-sync copy is healthy and
        a healthy controller will take this one out of the ISR (a crash then ends the
        session at once). Loss that later faults still cause is accepted by design
        (``_check_acting_leader``)."""
        st = self.controller.state
        if broker not in st.isr:
            return True
        active = self.controller.active
        if active is None or active.broker_id == broker or not self._healthy(active.broker_id):
            return False
        return any(r != broker and self._healthy(r) for r in st.isr)

    def crash(
        self,
        broker: int,
        *,
        lose_unflushed: bool = False,
        noticed: bool = True,
        session_timeout: bool = False,
    ) -> None:
        """Kill the process. ``noticed``: its ZooKeeper session ends at once, or with
        ``session_timeout`` after ``session_timeout_ms``; not noticed: a quick bounce
        that keeps its session and registration (the world before KIP-380)."""
        b = self.brokers[broker]
        leo = b.log.log_end_offset
        lost = leo - b.log.flushed if lose_unflushed else 0
        b.crash(lose_unflushed=lose_unflushed)
        if lost:
            self.lossy[broker] = max(leo, self.lossy.get(broker, 0))
        self.controller.broker_crashed(broker)
        self.zk_cut.pop(broker, None)  # the next process starts with a connection of its own
        self.zk_held.pop(broker, None)
        self.slow_disk.pop(broker, None)
        self.count("crash_lossy" if lose_unflushed else "crash")
        how = "" if noticed and not session_timeout else " (unnoticed)"
        if noticed and session_timeout:
            how = f" (session expires in {self.config.session_timeout_ms} ms)"
        self.trace(
            f"b{broker}: CRASH{' losing ' + str(lost) + ' unflushed' if lose_unflushed else ''}"
            f"{how}"
        )
        if not noticed:
            self.unnoticed_down.add(broker)
        elif session_timeout:
            self.awaiting_expiry.add(broker)
            self.queue.push(
                self.now + self.config.session_timeout_ms,
                WorldEvent("crash_session_expired", broker, b.incarnation),
            )
        else:
            self._zookeeper_expires_session(broker)

    def restart(self, broker: int) -> None:
        b = self.brokers[broker]
        assert not b.alive
        if broker in self.awaiting_expiry:  # the old session must be gone first
            self.awaiting_expiry.discard(broker)
            self._zookeeper_expires_session(broker)
        keep = broker in self.unnoticed_down
        self.unnoticed_down.discard(broker)
        b.restart()
        b.session_expired = False
        b.broker_epoch = self.controller.broker_started(broker, keep_session=keep)
        self.count("restart")
        self.trace(f"b{broker}: RESTART incarnation {b.incarnation} leo={b.log.log_end_offset}")
        if keep:
            # a quick restart the controller never saw: the broker reads the znode at startup
            b.apply_partition_state(self.controller.state)

    def controlled_shutdown(self, broker: int) -> None:
        """SIGTERM with ``controlled.shutdown.enable``: the broker asks the controller to
        move its leaderships and ISR memberships away, then stops cleanly (its session
        ends at once). Without an active controller it stops anyway, as a broker does
        once ``controlled.shutdown.max.retries`` are spent."""
        b = self.brokers[broker]
        self.shutdown_requested[broker] = b.incarnation
        self.count("controlled_shutdown")
        active = self.controller.active
        self.trace(f"b{broker}: CONTROLLED SHUTDOWN requested (broker epoch {b.broker_epoch})")
        if active is None:
            self.crash(broker)
            return
        self.schedule_controller_work(
            active, self.controller.controlled_shutdown(broker, b.broker_epoch, b.incarnation)
        )

    def controlled_shutdown_answered(self, broker: int, incarnation: int, remaining: int) -> None:
        """The controller answered: the broker stops once the answer reaches it."""
        self.trace(f"b{broker}: controlled shutdown answered ({remaining} partitions remain)")
        self.queue.push(
            self.now + self.rng.randint(1, 20), WorldEvent("controlled_stop", broker, incarnation)
        )

    def fast_bounce(self, broker: int, down_ms: int) -> None:
        self.crash(broker, noticed=False)
        self.queue.push(self.now + down_ms, WorldEvent("fast_restart", broker))

    def pause(
        self, broker: int, duration_ms: int, *, expire_session: bool = True, why: str = ""
    ) -> None:
        """Stop the process for ``duration_ms`` (SIGSTOP, GC; a stalled disk write with
        ``expire_session=False``: ZooKeeper heartbeats go on)."""
        b = self.brokers[broker]
        self._pause_id += 1
        b.paused = True
        b.pause_token = self._pause_id
        if expire_session:
            self.count("pause")
        self.trace(f"b{broker}: PAUSE {duration_ms} ms{' (' + why + ')' if why else ''}")
        self.queue.push(self.now + duration_ms, WorldEvent("resume", broker, self._pause_id))
        if expire_session and duration_ms > self.config.session_timeout_ms:
            self.queue.push(
                self.now + self.config.session_timeout_ms,
                WorldEvent("pause_session_expired", broker, self._pause_id),
            )

    def resume(self, broker: int) -> None:
        b = self.brokers[broker]
        b.paused = False
        b.pause_token = None
        self.trace(f"b{broker}: RESUME")
        deferred, b.deferred = b.deferred, []
        if b.session_expired and not self.zookeeper_unreachable(broker):
            work = [e for e in deferred if isinstance(e, ControllerWork)]
            in_flight = work[0] if work else None
            deferred = [e for e in deferred if e is not in_flight]
            self._notice_session_expired(broker, in_flight)
        for event in deferred:
            self.queue.push(self.now, event)

    def cut_link(self, src: int, dst: int, duration_ms: int, *, both_ways: bool) -> None:
        heal = self.now + duration_ms
        self.network.cut_link(src, dst, heal)
        if both_ways:
            self.network.cut_link(dst, src, heal)
        self.count("link_cut" if both_ways else "link_cut_one_way")
        arrow = "<->" if both_ways else "->"
        self.trace(f"link b{src}{arrow}b{dst} DOWN until t={heal}")

    def cut_from_zookeeper(self, broker: int, duration_ms: int) -> None:
        """The broker loses its ZooKeeper connection; past ``session_timeout_ms`` the
        session expires. Peer traffic goes on: it keeps serving fetches."""
        heal = max(self.now + duration_ms, self.zk_cut.get(broker, 0))
        self.zk_cut[broker] = heal
        self.count("zk_cut")
        self.trace(f"b{broker}: cut from ZooKeeper until t={heal}")
        self.queue.push(heal, WorldEvent("zk_heal", broker, heal))
        if heal - self.now > self.config.session_timeout_ms:
            self.queue.push(
                self.now + self.config.session_timeout_ms,
                WorldEvent("zk_cut_session_expired", broker, heal),
            )

    def expire_session(self, broker: int, notice_ms: int, *, zombie: bool = False) -> None:
        """ZooKeeper expires the broker's session; the broker learns it ``notice_ms``
        later (when its client reconnects). With ``zombie``, its controller, if acting,
        is in the middle of handling a broker change and finishes it meanwhile."""
        b = self.brokers[broker]
        c = self.controller.controllers.get(broker)
        was_acting = c is not None and c.is_active
        if broker not in self.controller.zk.sessions:
            return
        self.trace(f"b{broker}: ZooKeeper session EXPIRES (noticed in {notice_ms} ms)")
        self._zookeeper_expires_session(broker)
        if zombie and was_acting and c is not None:
            self.queue.push(
                self.now + self.rng.randint(0, notice_ms),
                ControllerWork(broker, c.generation, "broker_change"),
            )
        self.queue.push(self.now + notice_ms, WorldEvent("session_notice", broker, b.incarnation))

    def fail_log_dir(self, broker: int, replace_after_ms: int | None) -> None:
        """``broker``'s log dir fails; with ``replace_after_ms`` an operator stops the
        broker that much later to replace the disk."""
        b = self.brokers[broker]
        if not b.alive or b.log_dir_failed:
            return
        self.count("log_dir_failure")
        b.fail_log_dir()
        if self.zookeeper_unreachable(broker):
            self.hold_for_zookeeper(broker, ("log_dir_event", broker))
        else:
            self.controller.zk.propagate_log_dir_event(broker)
        if replace_after_ms is not None:
            self.queue.push(
                self.now + replace_after_ms, WorldEvent("replace_disk", broker, b.incarnation)
            )

    def enable_unclean_leader_election(self, how: str) -> None:
        """An operator allows unclean leader election (scripted): ``topic`` sets the
        topic's ``unclean.leader.election.enable`` (``/config/topics/t``, whose change
        notification reaches the controller), ``broker`` the brokers' dynamic default,
        ``elect`` sends ElectLeaders (unclean) instead."""
        active = self.controller.active
        assert active is not None
        self.trace(f"unclean leader election enabled ({how})")
        if how == "topic":
            self.controller.zk.topic_configs["t"] = {"unclean.leader.election.enable": "true"}
            kind = self.controller.kind_of(controller_events.TopicUncleanLeaderElectionEnable("t"))
        elif how == "broker":
            self.controller.unclean_leader_election_default = True
            kind = self.controller.kind_of(controller_events.UncleanLeaderElectionEnable())
        else:
            kind = self.controller.elect_leaders(UNCLEAN_ELECTION)
        self.schedule_controller_work(active, kind)

    def lose_zookeeper_call(self, broker: int, call: str) -> None:
        """The next ZooKeeper call named ``call`` (a ``KafkaZkClient`` method or a
        ``controller_zk`` helper) of ``broker``'s controller fails with ConnectionLoss:
        the connection dropped for a while, the session lives on."""
        self.controller.connection_losses.setdefault(broker, set()).add(call)
        self.trace(f"b{broker}: its controller's next {call} will lose the connection")

    def jump_clock(self, broker: int, jump_ms: int) -> None:
        self.clock_offset[broker] += jump_ms
        moved = self.queue.advance_timers(broker, self.now, jump_ms)
        self.count("clock_jump")
        self.trace(f"b{broker}: clock jumps {jump_ms} ms forward ({moved} timers due sooner)")

    # -- the controller's operations ---------------------------------------------------------

    def reassign(
        self, target: tuple[int, ...] | None = None, *, via_zk: bool | None = None
    ) -> None:
        """An operator reassigns the partition: to ``target``, or (random) one replica
        fewer while every broker is a replica, every broker again otherwise. Through
        ``/admin/reassign_partitions`` (``via_zk``) or AlterPartitionReassignments to
        the controller ZooKeeper names (none acting: nothing happens)."""
        active = self.controller.active
        if active is None or not self.brokers[active.broker_id].alive:
            return
        rng = self.rng
        if target is None:
            ra = self.controller.zk.topic_assignment()
            brokers = sorted(self.brokers)
            if ra.is_being_reassigned or sorted(ra.target_replicas) != brokers:
                target = tuple(brokers)
            else:
                victim = rng.choice(brokers)
                target = tuple(b for b in brokers if b != victim)
            target = tuple(rng.sample(target, len(target)))
        if via_zk is None:
            via_zk = rng.random() < 0.5
        self.count("reassignment")
        if via_zk and self.controller.zk.create_reassign_partitions({("t", 0): list(target)}):
            self.trace(f"REASSIGN to {list(target)} (/admin/reassign_partitions)")
            return
        self.trace(
            f"REASSIGN to {list(target)} (AlterPartitionReassignments to c{active.broker_id})"
        )
        self.schedule_controller_work(active, self.controller.alter_reassignment(target))

    def elect_preferred_leader(self, *, how: str) -> None:
        """An operator's preferred replica election: ElectLeaders to the controller
        ZooKeeper names (``api``), or ``/admin/preferred_replica_election`` (``zk``); or
        (``auto``) that controller's periodic leader-imbalance check firing."""
        if how == "zk":
            if self.controller.zk.create_preferred_replica_election({("t", 0)}):
                self.count("preferred_election_zk")
                self.trace("/admin/preferred_replica_election written")
            return
        active = self.controller.active
        if active is None or not self.brokers[active.broker_id].alive:
            return
        auto = how == "auto"
        self.count("auto_rebalance" if auto else "preferred_election")
        what = "auto leader rebalance" if auto else "ElectLeaders (preferred)"
        self.trace(f"{what} to c{active.broker_id}")
        kind = "auto_rebalance" if auto else self.controller.elect_leaders(PREFERRED_ELECTION)
        self.schedule_controller_work(active, kind)

    def assignment_restored(self) -> bool:
        ra = self.controller.zk.topic_assignment()
        return not ra.is_being_reassigned and sorted(ra.replicas) == sorted(self.brokers)

    def take_over_controller(self, broker: int) -> None:
        """Between two ZooKeeper calls of ``broker``'s controller: its session expires
        (it hears of it later) and another healthy broker's controller wins the election
        and fails over at once; the rest of the first one's event is fenced."""
        others = [
            b
            for b in sorted(self.brokers)
            if b != broker and self._healthy(b) and b in self.controller.controllers
        ]
        if not others or broker not in self.controller.zk.sessions:
            return
        self.count("controller_takeover")
        self.trace(f"c{broker}: TAKEOVER in the middle of an event")
        self.expire_session(broker, self.rng.randint(1, 500))
        other = self.controller.controllers[self.rng.choice(others)]
        self.controller.run(ControllerWork(other.broker_id, other.generation, "reelect"))

    def _restartable(self) -> list[int]:
        """Crashed brokers whose ZooKeeper session is over: they may start again."""
        return [
            b
            for b in self.brokers
            if not self.brokers[b].alive
            and b not in self.unnoticed_down
            and b not in self.awaiting_expiry
        ]

    def _random_fault(self) -> None:
        rng = self.rng
        cfg = self.config
        if cfg.reassignments and rng.random() < 0.08:
            self.reassign()
            return
        if cfg.log_dir_failures and rng.random() < 0.04:
            healthy = [b for b in self.brokers if self._healthy(b)]
            if healthy:
                self.fail_log_dir(rng.choice(healthy), rng.randint(500, 6_000))
            return
        if cfg.leader_elections and rng.random() < 0.1:
            how = rng.random()
            self.elect_preferred_leader(how="auto" if how < 0.3 else "zk" if how < 0.6 else "api")
            return
        ids = list(self.brokers)
        down = self._restartable()
        up = [b for b in ids if self.brokers[b].alive]
        if down and (rng.random() < 0.5 or len(up) <= 1):
            self.restart(rng.choice(down))
            return
        choice = rng.random()
        if not up:
            return
        target = rng.choice(up)
        host = self.controller.zk.controller_owner
        if choice < 0.22:
            if cfg.controlled_shutdowns and rng.random() < 0.5:
                self.controlled_shutdown(target)
                return
            lossy = cfg.lossy_crashes and rng.random() < 0.5
            if lossy and not self.lossy_crash_allowed(target):
                lossy = False
            self.crash(
                target, lose_unflushed=lossy, session_timeout=not lossy and rng.random() < 0.4
            )
        elif choice < 0.32 and cfg.fast_bounces:
            # Only followers: since KIP-380 a bounced leader is always noticed (new epoch).
            # Not the controller's broker either: its new process could not take /controller back.
            if target in (self.controller.state.leader, host):
                return
            self.count("fast_bounce")
            self.fast_bounce(target, rng.randint(5, cfg.session_timeout_ms // 2))
        elif choice < 0.52:
            if not self.brokers[target].paused:
                long_pause = rng.random() < 0.4
                hi = 3 * cfg.session_timeout_ms if long_pause else cfg.session_timeout_ms
                self.pause(target, rng.randint(50, hi))
        elif choice < 0.64:
            other = rng.choice([b for b in ids if b != target])
            both = not cfg.one_way_links or rng.random() < 0.5
            self.cut_link(
                target, other, rng.randint(200, 4 * cfg.replica_lag_time_max_ms), both_ways=both
            )
        elif choice < 0.70:
            b = self.brokers[target]
            b.log.flushed = b.log.log_end_offset
            b.log.hw_checkpoint = b.high_watermark
        elif choice < 0.76 and cfg.controller_faults:
            if host is not None and self.brokers[host].alive:
                self.count("controller_failover")
                if rng.random() < 0.3:
                    self.crash(host, session_timeout=rng.random() < 0.5)
                else:
                    self.expire_session(host, rng.randint(1, 500), zombie=True)
        elif choice < 0.82 and cfg.zookeeper_faults:
            self.cut_from_zookeeper(target, rng.randint(100, 3 * cfg.session_timeout_ms))
        elif choice < 0.88 and cfg.zookeeper_faults:
            self.expire_session(target, rng.randint(1, 1_000), zombie=rng.random() < 0.5)
        elif choice < 0.94 and cfg.slow_disks:
            until = self.now + rng.randint(500, 5_000)
            self.slow_disk[target] = until
            self.count("slow_disk")
            self.trace(f"b{target}: disk slow until t={until}")
        elif cfg.clock_jumps:
            self.jump_clock(target, rng.randint(100, 3 * cfg.replica_lag_time_max_ms))

    def over_replication_quota(self) -> bool:
        """Whether the leader's replication quota meter is over its bound for this fetch."""
        throttle = self.config.replication_throttle
        return bool(throttle) and self._throttle_rng.random() < throttle

    def produce(self, broker: int | None = None, payload: str | None = None) -> str:
        self.produced += 1
        payload = payload or f"m{self.produced}"
        if broker is None:
            leader = self.controller.state.leader
            broker = leader if leader != NO_LEADER and self.rng.random() < 0.85 else None
            broker = broker or self.rng.choice(list(self.brokers))
        self.network.send(self.now, 0, broker, ProduceRequest(broker, payload))
        return payload

    def step(self) -> None:
        self.step_no += 1
        r = self.rng.random()
        if self.faults_enabled and r < self.config.fault_probability:
            self._random_fault()
        elif (
            self.produce_enabled
            and r < self.config.fault_probability + self.config.produce_probability
        ):
            self.produce()
        elif not self.run_next_event():
            # every broker is down and nothing is scheduled: an operator restarts one
            down = [b for b in self.brokers.values() if not b.alive and b.id in self._restartable()]
            if not down:
                raise AssertionError("simulation ran out of events")
            self.restart(self.rng.choice(down).id)
        self.check_invariants()
        self.consumers.maybe_fetch()

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self.step()

    def run_until(
        self, predicate, max_events: int = 20_000, *, deadline_ms: int | None = None
    ) -> None:
        """Run events (no random actions) until ``predicate()``; invariants after each.

        Bounded by ``max_events``, or with ``deadline_ms`` by simulated time instead.
        """
        events = 0
        while not predicate():
            if deadline_ms is None and events >= max_events:
                break
            nxt = self.queue.peek_time()
            if nxt is None or (deadline_ms is not None and nxt > deadline_ms):
                break
            events += 1
            self.step_no += 1
            self.run_next_event()
            self.check_invariants()
        if not predicate():
            bound = f"by t={deadline_ms}" if deadline_ms is not None else f"in {max_events} events"
            raise AssertionError(f"condition not reached {bound}\n{self.failure_report()}")

    # -- convergence --------------------------------------------------------------------------------

    def heal(self) -> None:
        """Stop faults and producers, calm the network, bring every broker back."""
        self.faults_enabled = False
        self.produce_enabled = False
        self.network.config = NetworkConfig(min_delay_ms=1, max_delay_ms=20)
        self.network.links_down.clear()
        self.network.channel_extra_delay_ms.clear()
        self.slow_disk.clear()
        for b in list(self.zk_cut):
            self._zk_reconnect(b)
        for b in self.brokers.values():
            if b.alive and b.paused:
                self.resume(b.id)
        for b in self.brokers.values():
            if b.alive and b.session_expired:
                self._notice_session_expired(b.id, None)
        for b in self.brokers.values():
            if b.alive and b.log_dir_failed:  # the operator replaces the disk now
                self.crash(b.id)
        for b in self.brokers.values():
            if not b.alive:
                self.restart(b.id)
        self.queue.push(self.now, WorldEvent("restore_assignment", min(self.brokers)))
        self.trace("HEAL")

    def converged(self) -> bool:
        if not self.assignment_restored():
            return False
        if self.controller.zk.get_preferred_replica_election() is not None:
            return False  # an operator's election the controller has not done
        st = self.controller.state
        if st.leader == NO_LEADER or sorted(st.isr) != sorted(self.brokers):
            return False
        active = self.controller.active
        if active is None or active.context is None or not self.brokers[active.broker_id].alive:
            return False
        if sorted(active.context.live_brokers) != sorted(self.brokers):
            return False
        leader = self.brokers[st.leader]
        ls = leader.leader_state
        if ls is None or not ls.is_leading or ls.leader_epoch != st.leader_epoch:
            return False
        leo = leader.log.log_end_offset
        if ls.high_watermark != leo or sorted(ls.in_sync_replicas) != sorted(self.brokers):
            return False
        for b in self.brokers.values():
            if b.log.records != leader.log.records or b.high_watermark != leo:
                return False
        return True

    def heal_and_converge(self, max_ms: int | None = None, *, probe: bool = True) -> None:
        """Liveness: after ``heal()``, converge and (with ``probe``) acknowledge a produce
        within ``max_ms`` of simulated time (default ``SimConfig.liveness_bound_ms``)."""
        self.heal()
        healed_at = self.now
        deadline = self.now + (max_ms if max_ms is not None else self.config.liveness_bound_ms)
        self.run_until(self.converged, deadline_ms=deadline)
        if probe:
            payload = self.produce(self.controller.state.leader, PROBE)
            self.run_until(
                lambda: payload in self.acked_payloads and self.converged(), deadline_ms=deadline
            )
        self.stats["converged_ms"] = self.now - healed_at

    # -- invariants -------------------------------------------------------------------------------------

    def violation(self, kind: str, message: str) -> None:
        self.trace(f"VIOLATION [{kind}] {message}")
        if kind in self.config.tolerated:
            self.count(f"tolerated_{kind}")
            return
        v = SimInvariantViolation(kind, f"{message}\n{self.failure_report()}")
        if not self.collect_violations:
            raise v
        if all(x.kind != kind for x in self.violations):
            self.violations.append(v)

    def on_acked(self, broker: SimBroker, offset: int, payload: str) -> None:
        record = broker.log.records[offset]
        if record.payload != payload:
            self.violation(
                "ack_mismatch", f"b{broker.id} acked {payload}@{offset}, log has {record}"
            )
        # acks=all: at least min.insync.replicas replicas hold the record, or held it until
        # a crash lost their unflushed tail (acks=all promises replication, not fsync)
        holders = sorted(
            {
                b.id
                for b in self.brokers.values()
                if b.log.log_end_offset > offset and b.log.records[offset] == record
            }
            | {b for b, lost in self._lost_copies.get(offset, ()) if lost == record}
        )
        if len(holders) < self.config.min_insync_replicas:
            self.violation(
                "ack_below_min_isr",
                f"b{broker.id} acked {payload}@{offset} held by {holders} only "
                f"(min.insync.replicas={self.config.min_insync_replicas})",
            )
        self.acked[offset] = payload
        self.acked_payloads.add(payload)
        self.count("acked")
        self.trace(f"b{broker.id}: ACK {payload}@{offset}")
        self._commit(broker, offset + 1)

    def on_lost_unflushed(self, broker: SimBroker, start: int, records: list) -> None:
        """``broker`` crashed and lost ``records`` from offset ``start`` on."""
        for i, record in enumerate(records):
            self._lost_copies.setdefault(start + i, []).append((broker.id, record))

    def accept_loss_beyond(self, offset: int, why: str) -> None:
        """A scripted test destroyed every copy past ``offset``: forget those commitments."""
        self.trace(f"durability knowingly lost beyond {offset}: {why}")
        # from now on a restarted replica's checkpointed HW may vouch for lost records
        # until it has truncated: only check replicas that lead or fetch
        self.loss_accepted = True
        self._loss_epoch = max(self._loss_epoch, self.controller.state.leader_epoch)
        leader = self.controller.state.leader
        self._loss_leader = (leader, self.brokers[leader].incarnation) if leader > 0 else None
        self._unaware_of_loss = {b.id: self._loss_view(b) for b in self.brokers.values()}
        del self.committed[offset:]
        for o in [o for o in self.acked if o >= offset]:
            del self.acked[o]
        for b in self._verified:
            self._verified[b] = min(self._verified[b], offset)

    def _loss_view(self, b: SimBroker) -> tuple:
        """What changes once a replica hears of a new leader, truncates or restarts."""
        return (
            b.incarnation,
            b.known_leader_epoch,
            b.term_seq,
            b.truncations,
            self._answered_by.get(b.id) == self._loss_leader,
        )

    def _commit(self, broker: SimBroker, upto: int) -> None:
        """Records below ``upto`` in ``broker``'s log are committed (it leads, its HW passed them)."""
        log = broker.log.records
        start = self._verified[broker.id]
        for o in range(start, upto):
            if o < len(self.committed):
                if self.committed[o] != log[o]:
                    self.violation(
                        "committed_changed",
                        f"b{broker.id} has {log[o]}@{o} below its HW, committed {self.committed[o]}",
                    )
                    return
            else:
                self.committed.append(log[o])
        self._verified[broker.id] = max(start, upto)

    def check_invariants(self) -> None:
        st = self.controller.state
        if st.leader_epoch < self._zk_epoch:
            self.violation("epoch_back", f"zk epoch {self._zk_epoch} -> {st.leader_epoch}")
        if st.zk_version < self._zk_version:
            self.violation("epoch_back", f"zk version {self._zk_version} -> {st.zk_version}")
        ce = self.controller.controller_epoch
        if ce < self._controller_epoch:
            self.violation("epoch_back", f"controller epoch {self._controller_epoch} -> {ce}")
        self._zk_epoch, self._zk_version, self._controller_epoch = (
            st.leader_epoch,
            st.zk_version,
            ce,
        )
        for r, leo_before in list(self.lossy.items()):
            # out of the ISR, it must catch up to come back; or it caught up with what a
            # leader may have counted it for
            log = self.brokers[r].log.records
            n = len(self.committed)
            if r not in st.isr or (len(log) >= max(n, leo_before) and log[:n] == self.committed):
                del self.lossy[r]
        for b in self.brokers.values():
            log = b.log
            if log.truncated_to is not None:
                self._verified[b.id] = min(self._verified[b.id], log.truncated_to)
                log.truncated_to = None
            try:
                check_epoch_entries(log.epochs)
            except ValueError as exc:
                self.violation("epoch_cache", f"b{b.id}: {exc}")
            if not b.alive or b.log_dir_failed:  # an offline replica: its role is gone
                continue
            hw = b.high_watermark
            if hw > log.log_end_offset:
                self.violation("hw_above_leo", f"b{b.id} hw {hw} > leo {log.log_end_offset}")
            seen = self._known_epoch.get(b.id)
            if seen is not None and seen[0] == b.incarnation and b.known_leader_epoch < seen[1]:
                self.violation("epoch_back", f"b{b.id} epoch {seen[1]} -> {b.known_leader_epoch}")
            self._known_epoch[b.id] = (b.incarnation, b.known_leader_epoch)
            if b.known_leader_epoch > st.leader_epoch:
                self.violation("epoch_ahead", f"b{b.id} knows epoch {b.known_leader_epoch} > zk")
            # committed prefix: leaders extend it, everyone else must agree with it
            if b.leader_state is not None and b.leader_state.is_leading:
                if not self.loss_accepted or b.leader_state.leader_epoch >= self._loss_epoch:
                    self._commit(b, hw)
                # else: a leader from before the loss, not yet told: its HW counts lost records
            elif self.loss_accepted and b.role is not Role.FOLLOWER:
                pass
            elif self.loss_accepted and (
                b.follower_state.phase is not FollowerPhase.FETCHING or not b.responses_in_term
            ):
                pass  # its HW is still the checkpointed one, from before the loss maybe
            elif self._unaware_of_loss.get(b.id) == self._loss_view(b):
                pass  # nothing happened to it since the loss: its HW still counts lost records
            elif hw > len(self.committed):
                self.violation(
                    "hw_beyond_commit", f"b{b.id} hw {hw} > committed {len(self.committed)}"
                )
            else:
                self._commit(b, hw)
            # HW monotonic within one role at one epoch (a follower adopts its new
            # leader's HW at the first fetch answer of a term, which may be lower: Kafka too)
            term = (
                b.incarnation,
                # a leader bounced unseen (during a controller failover) leads again at
                # the same epoch from its checkpointed HW: Kafka too
                self._answered_by.get(b.id),
                b.known_leader_epoch,
                b.term_seq,
                b.responses_in_term > 0,
                b.truncations if self.loss_accepted else 0,
            )
            prev = self._hw_term.get(b.id)
            if prev is not None and prev[0] == term and hw < prev[1]:
                self.violation("hw_back", f"b{b.id} hw {prev[1]} -> {hw} in one term")
            self._hw_term[b.id] = (term, hw)
        for b_id, c in self.controller.controllers.items():
            # the controller id a broker reports (Metadata's controller_id): -1 or a broker
            named = c.core.active_controller_id
            if named != -1 and named not in self.brokers:
                self.violation("controller_id", f"b{b_id} names controller {named}")
            # the state machines log and skip an illegal transition, as Kafka's do; the
            # simulated controller makes none
            ctx = c.core.context
            if ctx is not None and ctx.illegal_transitions:
                self.violation(
                    "illegal_transition",
                    f"b{b_id}'s controller made {ctx.illegal_transitions} illegal state change(s)",
                )
        self._check_acting_leader(st)

    def _check_acting_leader(self, st) -> None:
        if st.leader == NO_LEADER:
            return
        leader = self.brokers[st.leader]
        ls = leader.leader_state
        if (
            not leader.alive
            or ls is None
            or not ls.is_leading
            or ls.leader_epoch != st.leader_epoch
        ):
            return
        log = leader.log.records
        n = len(self.committed)
        if leader.id in self.lossy and log[:n] != self.committed:
            # It lost its unflushed tail and no controller took it out of the ISR before
            # it led again (every other copy was unavailable, or a controller failover hid
            # its restart): acks=all without fsync loses data here by design, Kafka's too.
            keep = next(
                (o for o in range(min(n, len(log))) if log[o] != self.committed[o]),
                min(n, len(log)),
            )
            self.count("loss_by_design")
            self.accept_loss_beyond(keep, f"b{leader.id} leads after losing its unflushed tail")
            n = len(self.committed)
        if len(log) < n:
            self.violation(
                "committed_lost",
                f"acting leader b{leader.id} log ends at {len(log)}, {n} records committed",
            )
            return
        for o in range(max(self._verified[leader.id], ls.high_watermark), n):
            if log[o] != self.committed[o]:
                self.violation(
                    "committed_lost",
                    f"leader b{leader.id} has {log[o]}@{o}, committed {self.committed[o]}",
                )
                return
        for r in st.isr:
            # a crashed member stays in ZooKeeper's ISR until the controller hears of it;
            # what its disk kept is checked when it comes back (it must truncate or catch up)
            b = self.brokers[r]
            if b.alive and r not in self.lossy and b.log.log_end_offset < ls.high_watermark:
                self.violation(
                    "hw_above_isr_leo",
                    f"leader hw {ls.high_watermark} > b{r} leo {self.brokers[r].log.log_end_offset}",
                )

    # -- summary -----------------------------------------------------------------------------------------

    def summary(self) -> str:
        s = dict(self.stats)
        s.update(
            steps=self.step_no,
            sim_ms=self.now,
            committed=len(self.committed),
            zk_epoch=self.controller.state.leader_epoch,
            controller_epoch=self.controller.controller_epoch,
            sent=self.network.sent,
            dropped=self.network.dropped,
            duplicated=self.network.duplicated,
        )
        return " ".join(f"{k}={v}" for k, v in sorted(s.items()))

    def check_acked_everywhere(self) -> None:
        """Every acknowledged record is in every replica's log (after convergence)."""
        for b in self.brokers.values():
            for o, payload in self.acked.items():
                log = b.log.records
                if o >= len(log) or log[o].payload != payload:
                    self.violation("acked_lost", f"acked {payload}@{o} missing on b{b.id}")
