"""The simulated world: clock, brokers, controller, producers, faults and invariants.

``World.step`` either injects a random action (fault, produce) or runs the next
event; the invariants are checked after every step. Everything random comes
from one ``random.Random(seed)``, so a seed replays exactly.

Invariants (``check_invariants``):

* committed records never change: every replica's log below its own HW, and
  every record a producer was told is acknowledged, matches one global
  "committed" log (extended only by leaders' high watermarks);
* the acting leader (the one ZooKeeper names, at ZooKeeper's epoch) holds every
  committed record: no acknowledged write was lost;
* the acting leader's HW is at most the log end offset of every ISR member;
* a replica's HW never goes back while it keeps one role at one leader epoch;
* leader epochs only increase (ZooKeeper, each replica, each log's records and
  epoch cache).

Fault model: crashes that keep the whole log, crashes that lose the unflushed
tail (only while another live ISR member holds the data: Kafka's acks=all does
not fsync, so losing every ISR copy at once loses data by design), quick
restarts the controller never notices (log kept), pauses (SIGSTOP / GC) shorter
or longer than the ZooKeeper session, links down, and a network that delays,
drops, duplicates and reorders.
"""

from __future__ import annotations

import os
import random
from collections import deque
from dataclasses import dataclass, field

from replog.replication.follower import FollowerPhase
from replog.replication.truncation import check_epoch_entries
from sim.broker import Role, SimBroker, TruncationRule
from sim.controller import NO_LEADER, SimController
from sim.network import (
    Deliver,
    EventQueue,
    LeaderAndIsr,
    Network,
    NetworkConfig,
    ProduceRequest,
    Record,
    Timer,
    WorldEvent,
)


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
    ) -> None:
        self.seed = seed
        self.label = label
        self.config = config
        self.rng = random.Random(seed)
        self.now = 0
        self.step_no = 0
        self.queue = EventQueue()
        self.network = Network(config.network, self.rng, self.queue)
        full = os.environ.get("REPLOG_SIM_TRACE") == "all"
        self.trace_lines: deque[str] = deque(maxlen=None if full else 600)
        self.collect_violations = collect_violations
        self.violations: list[SimInvariantViolation] = []
        ids = tuple(range(1, config.replicas + 1))
        self.controller = SimController(ids, self._send_leader_and_isr, self.trace)
        self.brokers = {b: SimBroker(b, self) for b in ids}
        self.committed: list[Record] = []
        self.acked: dict[int, str] = {}
        self.acked_payloads: set[str] = set()
        self.loss_accepted = False
        self.produced = 0
        self._verified: dict[int, int] = dict.fromkeys(ids, 0)
        self._hw_term: dict[int, tuple[object, int]] = {}
        self._known_epoch: dict[int, tuple[int, int]] = {}
        self._zk_epoch = 0
        self._pause_id = 0
        self.unnoticed_down: set[int] = set()
        self.faults_enabled = True
        self.produce_enabled = True
        self.stats: dict[str, int] = {}

    # -- plumbing -------------------------------------------------------------------------

    def trace(self, text: str) -> None:
        self.trace_lines.append(f"{self.step_no:6d} t={self.now:7d} {text}")

    def count(self, key: str) -> None:
        self.stats[key] = self.stats.get(key, 0) + 1

    def _send_leader_and_isr(self, dst: int, state) -> None:
        epoch = self.controller.registrations.get(dst, -1)
        self.network.send_reliable(
            self.now, dst, LeaderAndIsr(dst, state, epoch), channel="controller"
        )

    def start(self) -> None:
        for b in self.brokers.values():
            b.incarnation = -1
            b.restart()
            b.broker_epoch = self.controller.register(b.id)
        for b in self.brokers.values():
            b.apply_partition_state(self.controller.state)

    def describe(self) -> str:
        st = self.controller.state
        parts = " ".join(b.describe() for b in self.brokers.values())
        return f"zk(leader={st.leader} e{st.leader_epoch} isr={list(st.isr)}) {parts}"

    def failure_report(self) -> str:
        tail = "\n".join(self.trace_lines)
        return (
            f"seed={self.seed} step={self.step_no} t={self.now}\n{self.describe()}\n"
            f"--- last {len(self.trace_lines)} trace lines ---\n{tail}\n"
            f"replay with: REPLOG_SIM_SEED={self.seed}"
            f"{' REPLOG_SIM_PROFILE=' + self.label if self.label else ''} REPLOG_SIM_TRACE=all "
            f".venv/bin/python -m pytest tests/test_replication_simulation.py -k test_random_simulation"
        )

    # -- events ------------------------------------------------------------------------------

    def run_next_event(self) -> bool:
        if not len(self.queue):
            return False
        at, event = self.queue.pop()
        self.now = max(self.now, at)
        if isinstance(event, Deliver):
            msg = event.message
            dst = self.brokers[msg.dst]
            if not dst.alive:
                return True
            if dst.paused:
                dst.deferred.append(event)
                return True
            dst.deliver(msg)
        elif isinstance(event, Timer):
            b = self.brokers[event.broker]
            if not b.alive or b.incarnation != event.incarnation:
                return True
            if b.paused:
                b.deferred.append(event)
                return True
            b.on_timer(event)
        elif isinstance(event, WorldEvent):
            self._on_world_event(event)
        return True

    def _on_world_event(self, ev: WorldEvent) -> None:
        b = self.brokers[ev.broker]
        if ev.kind == "resume":
            if b.alive and b.paused and ev.token == self._pause_token(b):
                self.resume(b.id)
        elif ev.kind == "session_expired":
            if b.alive and b.paused and ev.token == self._pause_token(b):
                b.session_expired = True
                self.trace(f"b{b.id}: ZooKeeper session expired while paused")
                self.controller.broker_down(b.id)
        elif ev.kind == "fast_restart":
            if not b.alive and b.id in self.unnoticed_down:
                self.restart(b.id)

    @staticmethod
    def _pause_token(b: SimBroker) -> object:
        return b.pause_token

    # -- faults --------------------------------------------------------------------------------

    def lossy_crash_allowed(self, broker: int) -> bool:
        st = self.controller.state
        if broker not in st.isr:
            return True
        return any(
            r != broker and self.brokers[r].alive and r in self.controller.live for r in st.isr
        )

    def crash(self, broker: int, *, lose_unflushed: bool = False, noticed: bool = True) -> None:
        b = self.brokers[broker]
        lost = b.log.log_end_offset - b.log.flushed if lose_unflushed else 0
        b.crash(lose_unflushed=lose_unflushed)
        self.count("crash_lossy" if lose_unflushed else "crash")
        self.trace(
            f"b{broker}: CRASH{' losing ' + str(lost) + ' unflushed' if lose_unflushed else ''}"
            f"{'' if noticed else ' (unnoticed)'}"
        )
        if noticed:
            self.controller.broker_down(broker)
        else:
            self.unnoticed_down.add(broker)

    def restart(self, broker: int) -> None:
        b = self.brokers[broker]
        assert not b.alive
        self.unnoticed_down.discard(broker)
        b.restart()
        b.broker_epoch = self.controller.register(broker)
        self.count("restart")
        self.trace(f"b{broker}: RESTART incarnation {b.incarnation} leo={b.log.log_end_offset}")
        if broker in self.controller.live:
            # a quick restart the controller never saw: the broker reads the znode at startup
            b.apply_partition_state(self.controller.state)
        else:
            self.controller.broker_up(broker)

    def fast_bounce(self, broker: int, down_ms: int) -> None:
        self.crash(broker, noticed=False)
        self.queue.push(self.now + down_ms, WorldEvent("fast_restart", broker))

    def pause(self, broker: int, duration_ms: int) -> None:
        b = self.brokers[broker]
        self._pause_id += 1
        b.paused = True
        b.pause_token = self._pause_id
        b.session_expired = False
        self.count("pause")
        self.trace(f"b{broker}: PAUSE {duration_ms} ms")
        self.queue.push(self.now + duration_ms, WorldEvent("resume", broker, self._pause_id))
        if duration_ms > self.config.session_timeout_ms:
            self.queue.push(
                self.now + self.config.session_timeout_ms,
                WorldEvent("session_expired", broker, self._pause_id),
            )

    def resume(self, broker: int) -> None:
        b = self.brokers[broker]
        b.paused = False
        b.pause_token = None
        self.trace(f"b{broker}: RESUME")
        for event in b.deferred:
            self.queue.push(self.now, event)
        b.deferred = []
        if b.session_expired:
            b.session_expired = False
            b.broker_epoch = self.controller.register(broker)
            self.controller.broker_up(broker)

    def _random_fault(self) -> None:
        rng = self.rng
        ids = list(self.brokers)
        down = [b for b in ids if not self.brokers[b].alive and b not in self.unnoticed_down]
        up = [b for b in ids if self.brokers[b].alive]
        if down and (rng.random() < 0.5 or len(up) <= 1):
            self.restart(rng.choice(down))
            return
        choice = rng.random()
        if not up:
            return
        target = rng.choice(up)
        if choice < 0.3:
            lossy = self.config.lossy_crashes and rng.random() < 0.5
            if lossy and not self.lossy_crash_allowed(target):
                lossy = False
            self.crash(target, lose_unflushed=lossy)
        elif choice < 0.45 and self.config.fast_bounces:
            # Only followers: since KIP-380 a bounced leader is always noticed (new epoch).
            if target == self.controller.state.leader:
                return
            self.count("fast_bounce")
            self.fast_bounce(target, rng.randint(5, self.config.session_timeout_ms // 2))
        elif choice < 0.75:
            if not self.brokers[target].paused:
                long_pause = rng.random() < 0.4
                hi = (
                    3 * self.config.session_timeout_ms
                    if long_pause
                    else self.config.session_timeout_ms
                )
                self.pause(target, rng.randint(50, hi))
        elif choice < 0.9:
            other = rng.choice([b for b in ids if b != target])
            heal = self.now + rng.randint(200, 4 * self.config.replica_lag_time_max_ms)
            self.network.links_down[frozenset((target, other))] = heal
            self.count("link_down")
            self.trace(f"link b{target}-b{other} DOWN until t={heal}")
        else:
            b = self.brokers[target]
            b.log.flushed = b.log.log_end_offset
            b.log.hw_checkpoint = b.high_watermark

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
            raise AssertionError("simulation ran out of events")
        self.check_invariants()

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self.step()

    def run_until(self, predicate, max_events: int = 20_000) -> None:
        """Run events (no random actions) until ``predicate()``; invariants after each."""
        for _ in range(max_events):
            if predicate():
                return
            self.step_no += 1
            if not self.run_next_event():
                break
            self.check_invariants()
        if not predicate():
            raise AssertionError(f"condition not reached\n{self.failure_report()}")

    # -- convergence --------------------------------------------------------------------------------

    def heal(self) -> None:
        """Stop faults and producers, calm the network, bring every broker back."""
        self.faults_enabled = False
        self.produce_enabled = False
        self.network.config = NetworkConfig(min_delay_ms=1, max_delay_ms=20)
        self.network.links_down.clear()
        for b in self.brokers.values():
            if b.alive and b.paused:
                self.resume(b.id)
        for b in self.brokers.values():
            if not b.alive:
                self.restart(b.id)
        self.trace("HEAL")

    def converged(self) -> bool:
        st = self.controller.state
        if st.leader == NO_LEADER or sorted(st.isr) != sorted(self.brokers):
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

    def heal_and_converge(self, max_events: int = 50_000) -> None:
        self.heal()
        self.run_until(self.converged, max_events)

    # -- invariants -------------------------------------------------------------------------------------

    def violation(self, kind: str, message: str) -> None:
        v = SimInvariantViolation(kind, f"{message}\n{self.failure_report()}")
        self.trace(f"VIOLATION [{kind}] {message}")
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
        self.acked[offset] = payload
        self.acked_payloads.add(payload)
        self.count("acked")
        self.trace(f"b{broker.id}: ACK {payload}@{offset}")
        self._commit(broker, offset + 1)

    def accept_loss_beyond(self, offset: int, why: str) -> None:
        """A scripted test destroyed every copy past ``offset``: forget those commitments."""
        self.trace(f"durability knowingly lost beyond {offset}: {why}")
        # from now on a restarted replica's checkpointed HW may vouch for lost records
        # until it has truncated: only check replicas that lead or fetch
        self.loss_accepted = True
        del self.committed[offset:]
        for o in [o for o in self.acked if o >= offset]:
            del self.acked[o]
        for b in self._verified:
            self._verified[b] = min(self._verified[b], offset)

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
        self._zk_epoch = st.leader_epoch
        for b in self.brokers.values():
            log = b.log
            if log.truncated_to is not None:
                self._verified[b.id] = min(self._verified[b.id], log.truncated_to)
                log.truncated_to = None
            try:
                check_epoch_entries(log.epochs)
            except ValueError as exc:
                self.violation("epoch_cache", f"b{b.id}: {exc}")
            if not b.alive:
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
                self._commit(b, hw)
            elif self.loss_accepted and b.role is not Role.FOLLOWER:
                pass
            elif self.loss_accepted and b.follower_state.phase is not FollowerPhase.FETCHING:
                pass
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
                b.known_leader_epoch,
                b.term_seq,
                b.responses_in_term > 0,
                b.truncations if self.loss_accepted else 0,
            )
            prev = self._hw_term.get(b.id)
            if prev is not None and prev[0] == term and hw < prev[1]:
                self.violation("hw_back", f"b{b.id} hw {prev[1]} -> {hw} in one term")
            self._hw_term[b.id] = (term, hw)
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
            if self.brokers[r].log.log_end_offset < ls.high_watermark:
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
