"""Deterministic simulation of replication and the controller (FoundationDB / TigerBeetle VOPR style).

The simulator drives the shipped code: the replication core in the brokers, the
controller core (``replog.controller.core``: every handler and the write /
install / send / re-read / retry loop ``KafkaController`` drives) over an
in-memory ZooKeeper; it replaces only the world (network, disks, clocks,
ZooKeeper sessions, faults).

Random runs: a fixed short set of seeds per fault profile, thousands of steps
each, invariants after every step (see ``tests/sim/world.py``), then every fault
healed and the cluster required to converge within a bounded simulated time
(liveness) to identical logs holding every acknowledged record. Regressions:
every seed in ``tests/sim/regressions.py``. Planted bugs, in a replication rule
or in the controller, must make a seed fail. Scripted runs: the two failure
cases of seed 003 (KIP-101), with leader-epoch truncation and with the old
high-watermark truncation, the zombie leader of seed 000, and one scenario per
world fault (controller failover, one-way link, broker cut from ZooKeeper), a
reassignment resumed by a new controller half way, a controlled shutdown, unclean
leader election three ways, another topic created, grown and deleted across a
controller failover, a consumer told where its log diverges (KIP-595) after a loss.
The "consumers" profile adds consumers that fetch with ``last_fetched_epoch`` in fetch
sessions of several partitions, from brokers whose session cache has two slots
(``sim/consumer.py``, ``sim/sessions.py``).

Longer searches: ``PYTHONPATH=tests .venv/bin/python -m sim.run --seconds 600``.

Environment:
  REPLOG_SIM_SEEDS=N     run seeds 0..N-1 per profile instead of the fixed set
  REPLOG_SIM_SEED=S      run only seed S (replay a failure)
  REPLOG_SIM_STEPS=K     steps per run (default 20000; SHORT_STEPS for newer profiles)
  REPLOG_SIM_PROFILE=P   run only profile P (see sim/run.py's PROFILES)
  REPLOG_SIM_TRACE=all   keep the whole step trace for the failure report (default: last 600)
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from replog.controller import controller_zk, state_machines
from replog.controller.context import TopicPartition
from replog.controller.election import ElectionResult
from replog.replication.core import LeaderState
from replog.replication.fetch_session_handler import FetchSessionHandler
from replog.server.fetch_session import IncrementalFetchContext
from sim.broker import NO_LEADER, TruncationRule
from sim.logcheck import every_log_record_formats
from sim.network import ControllerWork
from sim.regressions import REGRESSIONS, Regression
from sim.run import DEFAULT_STEPS, PROFILES, failure_kind, run_random
from sim.script import all_fetching, commit, payloads, scripted, three_replicas
from sim.world import PROBE, SimConfig, SimInvariantViolation, World
from sim.zookeeper import PARTITION


@pytest.fixture(autouse=True)
def _log_records_format() -> Iterator[None]:
    """Every log record the runs make the shipped code write formats (sim/logcheck.py)."""
    with every_log_record_formats():
        yield


# Seeds for make test: a fixed short set (about 1 s of wall time per run).
FIXED_SEEDS = (0, 1, 2)


def _seeds() -> list[int]:
    if "REPLOG_SIM_SEED" in os.environ:
        return [int(os.environ["REPLOG_SIM_SEED"])]
    if "REPLOG_SIM_SEEDS" in os.environ:
        return list(range(int(os.environ["REPLOG_SIM_SEEDS"])))
    return list(FIXED_SEEDS)


def _profiles() -> list[str]:
    only = os.environ.get("REPLOG_SIM_PROFILE")
    return [only] if only else list(PROFILES)


STEPS = int(os.environ.get("REPLOG_SIM_STEPS", str(DEFAULT_STEPS)))
# make test's share: profiles added after the suite reached its time bound run shorter
# unless REPLOG_SIM_STEPS says otherwise (make mutation-sim and make sim run them in full)
SHORT_STEPS = {"consumers": 3_000}


def _steps(profile: str) -> int:
    if "REPLOG_SIM_STEPS" in os.environ:
        return STEPS
    return SHORT_STEPS.get(profile, STEPS)


@pytest.mark.parametrize("profile", _profiles())
@pytest.mark.parametrize("seed", _seeds())
def test_random_simulation(profile: str, seed: int) -> None:
    steps = _steps(profile)
    world = run_random(seed, PROFILES[profile], steps, label=profile)
    print(f"profile={profile} seed={seed} {world.summary()}")
    # the run did something: records were committed and acknowledged through faults
    assert len(world.committed) > 50 and len(world.acked) > 50, world.summary()
    assert world.stats.get("crash", 0) + world.stats.get("crash_lossy", 0) > 0
    assert world.stats.get("controller_elected", 0) > 1, "no controller failover happened"
    assert world.controller.state.leader_epoch > 1
    leader_log = world.brokers[world.controller.state.leader].log.records
    assert all(b.log.records == leader_log for b in world.brokers.values())
    assert PROBE in world.acked_payloads  # liveness: a produce after heal was acknowledged
    # followers fetch in KIP-227 sessions (the shipped FetchSessionHandler and FetchManager):
    # some answers leave the partition out, as nothing was new
    assert world.stats.get("fetch_session_nothing_new", 0) > 0, world.summary()
    if PROFILES[profile].consumers:  # consumers read with last_fetched_epoch, in sessions
        assert world.stats.get("consumer_read", 0) > 0, world.summary()
        assert world.stats.get("consumer_fetch_in_session", 0) > 0, world.summary()
        # the two-slot cache evicted sessions, and their fetchers started new ones
        assert world.stats.get("fetch_session_evicted", 0) > 0, world.summary()
        assert world.stats.get("consumer_session_fetch_session_id_not_found", 0) > 0
    if steps < DEFAULT_STEPS:
        return  # a short run (make mutation-sim's) may draw none of the rarer operations
    if PROFILES[profile].reassignments:  # and the controller's operations were driven
        assert world.stats.get("reassignment", 0) > 0, world.summary()
        assert world.stats.get("controlled_shutdown", 0) > 0, world.summary()
    if PROFILES[profile].leader_elections:  # preferred elections answered and checked
        assert world.stats.get("preferred_leader_elected", 0) > 0, world.summary()
    if PROFILES[profile].log_dir_failures:  # offline replicas moved off by the controller
        assert world.stats.get("offline_replica_moved", 0) > 0, world.summary()


@pytest.mark.parametrize(
    "regression", REGRESSIONS, ids=[f"{r.profile}-{r.seed}" for r in REGRESSIONS]
)
def test_regression_seed(regression: Regression) -> None:
    """Each seed that found a bug runs clean; an open bug's seed still breaks as recorded."""
    config = dataclasses.replace(PROFILES[regression.profile], tolerated=regression.tolerate)
    if regression.open_bug is None:
        run_random(regression.seed, config, regression.steps, label=regression.profile)
        return
    try:
        run_random(regression.seed, config, regression.steps, label=regression.profile)
    except AssertionError as exc:
        assert failure_kind(exc) == regression.kind, exc
        pytest.xfail(f"open: {regression.open_bug}")
    # Seeds drift whenever the world or the code changes; the scripted test (a strict
    # xfail) is what says the bug is fixed.
    pytest.skip(
        f"seed {regression.seed} no longer reaches its open bug; {regression.scripted} "
        "still pins it"
    )


def test_random_simulation_is_deterministic() -> None:
    a = run_random(7, PROFILES["lossy"], steps=3000)
    b = run_random(7, PROFILES["lossy"], steps=3000)
    assert list(a.trace_lines) == list(b.trace_lines)
    assert a.summary() == b.summary()


def test_random_simulation_catches_high_watermark_truncation() -> None:
    """The old rule (truncate to HW on becoming follower) breaks the invariants quickly."""
    kinds = set()
    for seed in range(6):
        config = SimConfig(truncation_rule=TruncationRule.HIGH_WATERMARK)
        with pytest.raises(SimInvariantViolation) as info:
            run_random(seed, config, steps=8000)
        kinds.add(info.value.kind)
    assert kinds <= {"hw_above_isr_leo", "committed_lost", "committed_changed"}


def _first_violation(
    seeds: range, steps: int = 6000, profile: str = "lossy"
) -> SimInvariantViolation | AssertionError | None:
    for seed in seeds:
        try:
            run_random(seed, PROFILES[profile], steps=steps)
        except AssertionError as exc:
            return exc
    return None


def test_simulation_catches_a_leader_that_ignores_rejected_isr_writes(monkeypatch) -> None:
    """Seed 000 'multiple leaders': a zombie leader must stop when its ISR write is rejected."""
    original = LeaderState.on_isr_update_result

    def apply_anyway(self, proposal, new_zk_version):
        if new_zk_version is None:
            new_zk_version = self.partition_zk_version + 1
        return original(self, proposal, new_zk_version)

    monkeypatch.setattr(LeaderState, "on_isr_update_result", apply_anyway)
    found = _first_violation(range(12))
    assert isinstance(found, SimInvariantViolation)
    assert found.kind in {"committed_lost", "committed_changed", "hw_above_isr_leo"}


def test_simulation_catches_hw_advanced_before_every_isr_follower_reported(monkeypatch) -> None:
    def skip_unknown(self):
        candidate = self.log_end_offset
        for r in self.maximal_in_sync_replicas:
            leo = None if r == self.broker_id else self.follower_log_end_offset(r)
            if leo is not None:
                candidate = min(candidate, leo)
        if candidate <= self._high_watermark:
            return None
        self._high_watermark = candidate
        return None

    monkeypatch.setattr(LeaderState, "_maybe_increment_high_watermark", skip_unknown)
    found = _first_violation(range(6), steps=3000)
    assert isinstance(found, SimInvariantViolation)
    # the new acknowledgement check sees it first in some seeds: an ack held by one replica
    assert found.kind in {"hw_above_isr_leo", "committed_lost", "ack_below_min_isr"}


def test_a_leader_fenced_from_zookeeper_leads_again() -> None:
    """The broker's own fence in the simulated world: a leader cut from ZooKeeper for a
    whole session timeout stops leading; after the heal the cluster must converge (seed 2
    of the flushed profile fences leaders three times). The interleaving that needed
    ``PartitionMachine.on_session_renewed`` (the fenced leader wins the controller election
    on its new session and sends the partition's current epoch) was reached by seed 1
    before the controller core's session renewal registered the broker in its own step;
    seeds 1-12 no longer reach it, so the machine's unit test covers that rule."""
    world = run_random(2, PROFILES["flushed"], DEFAULT_STEPS, label="flushed")
    assert world.stats.get("leader_fenced", 0) > 0


def test_simulation_catches_a_session_that_never_resends_a_changed_partition(monkeypatch) -> None:
    """A bug planted in the follower's FetchSessionHandler: an incremental fetch leaves out
    a partition whose fetch offset moved, so the leader reads at the one it cached."""
    original = FetchSessionHandler.build

    def stale(self, partitions):
        data = original(self, partitions)  # records the partition as sent
        if data.metadata.is_full:
            return data
        return dataclasses.replace(data, to_send=[])

    monkeypatch.setattr(FetchSessionHandler, "build", stale)
    found = _first_violation(range(6), steps=3000)
    assert isinstance(found, SimInvariantViolation), found
    assert found.kind in {"fetch_answer_misplaced", "committed_lost"}, found.kind


def test_simulation_catches_a_session_that_drops_partitions_with_records(monkeypatch) -> None:
    """A bug planted in the leader's FetchManager: an incremental answer leaves out a
    partition even when records were read for it; followers stop catching up."""
    original = IncrementalFetchContext.must_respond

    def no_news(self, cached, error, hw, lso, log_start, has_records, has_news):
        original(self, cached, error, hw, lso, log_start, has_records, has_news)
        return error != 0

    monkeypatch.setattr(IncrementalFetchContext, "must_respond", no_news)
    found = _first_violation(range(6), steps=3000)
    assert found is not None
    assert failure_kind(found) == "liveness", found


def test_simulation_catches_a_controller_electing_outside_the_isr(monkeypatch) -> None:
    """A bug planted in the controller's election (first live replica, in sync or not)."""

    def any_live_replica(assignment, isr, live, unclean_allowed):
        for replica in assignment:
            if replica in live:
                return ElectionResult(replica, (replica,), was_unclean=replica not in isr)
        return None

    monkeypatch.setattr(state_machines, "offline_partition_leader", any_live_replica)
    found = _first_violation(range(6), steps=6000)
    assert isinstance(found, SimInvariantViolation), found
    assert found.kind in {"committed_lost", "committed_changed", "hw_beyond_commit"}


def test_simulation_catches_a_controller_whose_writes_are_not_fenced(monkeypatch) -> None:
    """A bug planted in the controller's IO: writes guarded by ZooKeeper's current
    ``/controller_epoch`` version instead of the one the controller was elected at."""
    original = controller_zk.write_decision

    def unfenced(zk, d):
        d.context.controller_epoch_zk_version = zk.controller_epoch_version
        return original(zk, d)

    monkeypatch.setattr(controller_zk, "write_decision", unfenced)
    # the controller re-reads partition states before a broker change and resigns on one a
    # newer controller wrote (a second fence): a zombie write needs another event, rarer
    found = _first_violation(range(32), steps=6000, profile="control")
    assert isinstance(found, SimInvariantViolation), found
    assert found.kind == "unfenced_write"


# -- scripted scenarios (seed 003 / KIP-101) -------------------------------------------------


def replicate_until_follower_hw_lags(world: World) -> None:
    """A=1 leads, B=2 follows. m0 everywhere; m1 committed on A while B's HW is still 1."""
    a, b = world.brokers[1], world.brokers[2]
    commit(world, 1, "m0")
    world.run_until(lambda: b.high_watermark == 1)
    world.produce(1, "m1")
    world.run_until(lambda: a.high_watermark == 2)
    # B has m1 but learns HW=2 only with the next fetch answer, still in flight
    assert payloads(world, 2) == ["m0", "m1"] and b.high_watermark == 1
    assert world.acked == {0: "m0", 1: "m1"}
    b.log.hw_checkpoint = b.high_watermark


def scenario_1(rule: TruncationRule) -> World:
    """Seed 003 scenario 1: B restarts before learning HW=2, then A dies and B leads."""
    world = scripted(rule)
    replicate_until_follower_hw_lags(world)
    world.crash(2, noticed=False)  # a quick restart the controller does not notice
    world.restart(2)
    world.crash(1)  # the leader fails before B fetched again: the controller elects B
    world.run_until(lambda: world.brokers[2].is_acting_leader)
    commit(world, 2, "m2")
    world.restart(1)
    return world


def test_seed_003_scenario_1_leader_epoch_truncation_keeps_committed_records() -> None:
    world = scenario_1(TruncationRule.LEADER_EPOCH)
    world.heal_and_converge()
    world.check_acked_everywhere()
    assert payloads(world, 1) == payloads(world, 2) == ["m0", "m1", "m2", PROBE]
    assert world.violations == []


def test_seed_003_scenario_1_high_watermark_truncation_loses_a_committed_record() -> None:
    world = scenario_1(TruncationRule.HIGH_WATERMARK)
    world.heal_and_converge()
    kinds = {v.kind for v in world.violations}
    assert "committed_lost" in kinds
    # m1 was acknowledged to the producer, and no replica has it any more
    assert "m1" in world.acked_payloads
    assert payloads(world, 1) == payloads(world, 2) == ["m0", "m2", PROBE]


def scenario_2(rule: TruncationRule) -> World:
    """Seed 003 scenario 2: A and B fail together; B comes back first and leads, then A."""
    world = scripted(rule)
    a, b = world.brokers[1], world.brokers[2]
    replicate_until_follower_hw_lags(world)
    world.crash(2, noticed=False)
    world.restart(2)
    if rule is TruncationRule.LEADER_EPOCH:
        world.run_until(lambda: all_fetching(world))
    a.log.hw_checkpoint = a.high_watermark  # A's checkpoint says 2
    world.crash(1)
    world.crash(2)
    # the controller ran on A: nobody is left to act, ZooKeeper still names A
    assert world.controller.state.leader == 1 and world.controller.state.isr == (1, 2)
    world.restart(2)  # B first: the only ISR member, so it leads
    world.run_until(lambda: b.is_acting_leader)
    commit(world, 2, "m2")
    world.restart(1)
    return world


def test_seed_003_scenario_2_leader_epoch_truncation_keeps_replicas_identical() -> None:
    world = scenario_2(TruncationRule.LEADER_EPOCH)
    world.heal_and_converge()
    world.check_acked_everywhere()
    assert payloads(world, 1) == payloads(world, 2) == ["m0", "m1", "m2", PROBE]
    assert world.violations == []


def test_seed_003_scenario_2_high_watermark_truncation_diverges() -> None:
    world = scenario_2(TruncationRule.HIGH_WATERMARK)
    a, b = world.brokers[1], world.brokers[2]
    world.run_until(lambda: a.high_watermark == 2 and b.high_watermark == 2)
    # both replicas consider offset 1 committed, and they hold different records there
    assert payloads(world, 1) == ["m0", "m1"] and payloads(world, 2) == ["m0", "m2"]
    kinds = {v.kind for v in world.violations}
    assert {"committed_lost", "committed_changed"} <= kinds


def power_failure(rule: TruncationRule) -> World:
    """Seed 003 scenario 2 as written there: B loses its unflushed copy of m0 in the crash."""
    world = scripted(rule, flush_on_append=False, flush_interval_ms=None)
    a, b = world.brokers[1], world.brokers[2]
    commit(world, 1, "m0")  # HW 1 on A: B had m0, only in its page cache
    a.log.flushed = a.log.log_end_offset
    a.log.hw_checkpoint = a.high_watermark
    world.crash(1)
    world.crash(2, lose_unflushed=True)
    # every in-sync copy that survives lacks m0: acks=all without fsync loses it by design
    world.accept_loss_beyond(0, "the only ISR member left lost m0 unflushed")
    world.restart(2)
    world.run_until(lambda: b.is_acting_leader)
    commit(world, 2, "n0")
    world.restart(1)
    return world


def test_seed_003_power_failure_leader_epoch_truncation_converges() -> None:
    world = power_failure(TruncationRule.LEADER_EPOCH)
    world.heal_and_converge()
    assert payloads(world, 1) == payloads(world, 2) == ["n0", PROBE]
    assert world.violations == []


def test_seed_003_power_failure_high_watermark_truncation_diverges() -> None:
    world = power_failure(TruncationRule.HIGH_WATERMARK)
    a = world.brokers[1]
    # A took B's answer (HW 1) and keeps its own m0 below it
    world.run_until(lambda: a.follower_state is not None and a.responses_in_term > 0)
    assert a.high_watermark == 1
    assert payloads(world, 1) == ["m0"] and payloads(world, 2) == ["n0"]
    assert "committed_changed" in {v.kind for v in world.violations}


def test_seed_000_zombie_leader_cannot_commit_and_steps_down() -> None:
    """A leader paused past its ZooKeeper session keeps thinking it leads; it must not commit."""
    world = scripted(TruncationRule.LEADER_EPOCH, replicas=3, min_insync_replicas=2)
    commit(world, 1, "m0")
    world.run_until(lambda: all(b.high_watermark == 1 for b in world.brokers.values()))
    # the controller's LeaderAndIsr to broker 1 will be slow: it must find out by itself
    world.network.channel_extra_delay_ms[("controller", 1)] = 10_000
    world.pause(1, 5_000)
    world.run_until(lambda: world.brokers[2].is_acting_leader)
    world.produce(1, "z1")  # a producer with stale metadata
    commit(world, 2, "m1")
    zombie = world.brokers[1]
    world.run_until(lambda: not zombie.paused and not zombie.is_acting_leader)
    assert world.stats.get("stop_leading") == 1  # its ISR shrink was rejected by ZooKeeper
    assert "z1" in payloads(world, 1) and "z1" not in world.acked_payloads
    world.heal_and_converge()
    world.check_acked_everywhere()
    assert payloads(world, 1) == payloads(world, 2) == payloads(world, 3) == ["m0", "m1", PROBE]


# -- scripted world faults -------------------------------------------------------------------


def test_controller_failover_fences_the_old_controllers_writes() -> None:
    """The controller's session expires while it handles a broker change: another broker
    takes over (a new controller epoch) before the old one writes; its write fails on
    ``/controller_epoch``'s version and it resigns."""
    world = three_replicas()
    old = world.controller.controllers[1]
    assert old.is_active and world.controller.controller_epoch == 1
    world.controller.zk.expire_session(1)  # the old controller has not noticed yet
    world.brokers[1].session_expired = True
    world.run_until(lambda: world.controller.active is not None)
    new = world.controller.active
    assert new.broker_id != 1 and world.controller.controller_epoch == 2
    assert world.controller.state.leader != 1  # the new controller moved leadership off b1
    epoch_before = world.controller.state.leader_epoch
    # the broker change the old controller was in the middle of: b1 is gone, re-elect
    world.controller.run(ControllerWork(1, old.generation, "broker_change"))
    assert not old.is_active and world.stats.get("controller_fenced") == 1
    assert world.controller.state.leader_epoch == epoch_before
    world.heal_and_converge()
    world.check_acked_everywhere()


def test_one_way_partition_from_the_leader_shrinks_the_isr_then_heals() -> None:
    """b1 -> b3 is cut, b3 -> b1 is not: b3's fetches reach the leader, the answers do
    not. b3 falls behind and leaves the ISR; acks=all goes on with b1 and b2."""
    world = three_replicas()
    world.cut_link(1, 3, 30_000, both_ways=False)
    for i in range(5):
        commit(world, 1, f"p{i}")
    world.run_until(lambda: 3 not in world.controller.state.isr, max_events=50_000)
    assert world.brokers[3].log.log_end_offset == 1
    world.heal_and_converge()
    world.check_acked_everywhere()
    assert payloads(world, 3)[-1] == PROBE


def test_leader_cut_from_zookeeper_keeps_serving_until_its_session_expires() -> None:
    """The leader loses ZooKeeper but not its followers: its ISR write waits; after the
    session timeout the controller moves leadership; on reconnection the held write is
    refused and the old leader stops leading. No acknowledged record is lost. (Without
    the broker's own fence, which would stop it at the session timeout, before the
    refusal: this is the path of a broker whose fence has not fired, Kafka's path.)"""
    world = three_replicas(broker_zk_fence=False)
    world.cut_from_zookeeper(1, 10_000)
    world.crash(3)  # the controller (on b1) cannot hear of it
    world.produce(1, "z1")  # b3 falls behind: the leader shrinks the ISR, the write waits
    world.run_until(lambda: world.controller.held_writes, max_events=50_000)
    assert world.brokers[1].is_acting_leader  # still serving fetches meanwhile
    world.run_until(lambda: world.controller.state.leader == 2, max_events=50_000)
    world.run_until(lambda: not world.brokers[1].is_acting_leader, max_events=50_000)
    assert not world.controller.held_writes
    world.heal_and_converge()
    world.check_acked_everywhere()


def test_clock_jump_fires_a_brokers_timers_early() -> None:
    world = three_replicas()
    world.jump_clock(2, 5_000)
    assert world.stats["clock_jump"] == 1 and world.local_now(2) == world.now + 5_000
    world.heal_and_converge()


# -- open bugs, scripted (see sim/regressions.py) ---------------------------------------------


def isr_expanded_behind_the_controllers_back(**overrides) -> World:
    """b3 fails and comes back; b1 adds it to the ISR again. ISR change notifications
    wait out a 5 s blackout, so the controller still believes the ISR is [1, 2]."""
    world = three_replicas(**overrides)
    world.crash(3)
    world.run_until(lambda: world.controller.state.isr == (1, 2))
    world.restart(3)
    world.run_until(lambda: sorted(world.controller.state.isr) == [1, 2, 3])
    known = world.controller.active.context.partition_leadership
    assert sorted(next(iter(known.values())).leader_and_isr.isr) == [1, 2]
    return world


def test_controller_takes_a_failed_broker_out_of_an_isr_it_has_not_heard_of() -> None:
    world = isr_expanded_behind_the_controllers_back(tolerated=frozenset())
    world.crash(3)
    world.run_until(lambda: 3 not in world.controller.active.context.live_brokers)
    assert 3 not in world.controller.state.isr


def test_a_bounced_broker_gets_leader_and_isr_after_a_version_conflict() -> None:
    world = isr_expanded_behind_the_controllers_back()
    b2 = world.brokers[2]
    world.crash(2)
    world.restart(2)  # one broker change: b2 bounced; the partition write loses the race
    world.run_until(lambda: b2.known_leader_epoch >= 0, deadline_ms=world.now + 30_000)


# -- the controller's operations, scripted ---------------------------------------------------


def test_reassignment_resumed_by_a_new_controller_half_way() -> None:
    """b3 is reassigned away (AlterPartitionReassignments: the move completes at once,
    b3 leaves the ISR), then back (through /admin/reassign_partitions): b3 must catch up
    first. The controller's session expires half way; the new controller resumes the move
    from the topic znode (adding_replicas) and completes it once b3 is in sync."""
    world = three_replicas()
    zk = world.controller.zk
    world.reassign((1, 2), via_zk=False)
    world.run_until(lambda: zk.topic_assignment().replicas == (1, 2))
    assert 3 not in world.controller.state.isr and not zk.topic_assignment().is_being_reassigned
    for i in range(5):
        commit(world, 1, f"r{i}")  # b3 falls behind
    world.cut_link(1, 3, 2_000, both_ways=True)  # and stays behind for a while
    world.reassign((1, 2, 3), via_zk=True)
    world.run_until(lambda: zk.topic_assignment().is_being_reassigned)
    assert zk.topic_assignment().adding_replicas == (3,)
    assert zk.get_reassign_partitions() is not None
    old = world.controller.active
    assert old is not None and old.broker_id == 1
    world.expire_session(1, 50)  # the controller fails over in the middle of the move
    world.run_until(lambda: world.controller.active not in (None, old))
    assert zk.topic_assignment().is_being_reassigned  # the new controller resumed it
    assert world.stats.get("reassignment_resumed") == 1
    world.run_until(lambda: world.assignment_restored(), deadline_ms=world.now + 30_000)
    assert sorted(world.controller.state.isr) == [1, 2, 3]
    assert zk.get_reassign_partitions() is None  # the entry is done: the znode is gone
    world.heal_and_converge()
    world.check_acked_everywhere()
    assert payloads(world, 3)[-1] == PROBE


def test_controlled_shutdown_moves_leadership_before_the_answer() -> None:
    """The leader asks for a controlled shutdown: the controller moves leadership to another
    ISR member before it answers (the ``shutdown_leader`` invariant checks the answer)."""
    world = three_replicas()
    assert world.controller.state.leader == 1
    world.controlled_shutdown(1)
    world.run_until(lambda: not world.brokers[1].alive)
    assert world.controller.state.leader in (2, 3)
    assert world.stats.get("controlled_shutdown") == 1
    world.heal_and_converge()
    world.check_acked_everywhere()


def test_controlled_shutdown_sent_to_a_broker_that_is_not_the_controller() -> None:
    """b3's ControlledShutdown reaches b2, whose controller is inactive (the broker's
    metadata named an old controller): b2 answers NOT_CONTROLLER (the
    ``shutdown_answer_not_controller`` invariant), and nothing moves."""
    world = three_replicas()
    inactive = world.controller.controllers[2]
    assert not inactive.is_active and world.controller.state.leader == 1
    b3 = world.brokers[3]
    inactive.process(world.controller.controlled_shutdown(3, b3.broker_epoch, b3.incarnation))
    assert [(b, a.error_code) for b, a in world.controller.controlled_shutdown_answers] == [
        (3, ErrorCode.not_controller)
    ]
    assert world.controller.state.leader == 1 and world.controller.state.isr == (1, 2, 3)
    world.heal_and_converge()
    world.check_acked_everywhere()


def offline_partition() -> World:
    """b2 and b3 fail (the ISR shrinks to [1]), then b1: b2 and b3 come back, out of sync,
    and the partition stays without a leader: no clean election can give it one."""
    world = three_replicas()
    world.crash(2)
    world.crash(3)
    world.run_until(lambda: world.controller.state.isr == (1,))
    world.crash(1)
    world.restart(2)
    world.restart(3)

    def offline() -> bool:
        active = world.controller.active
        return (
            active is not None
            and active.context is not None
            and sorted(active.context.live_brokers) == [2, 3]
            and world.controller.state.leader == NO_LEADER
        )

    world.run_until(offline, deadline_ms=world.now + 20_000)
    return world


@pytest.mark.parametrize("how", ["topic", "broker", "elect"])
def test_unclean_leader_election_brings_an_offline_partition_back(how: str) -> None:
    """unclean.leader.election.enable set on the topic (its config change reaches the
    controller), as the brokers' dynamic default, or an ElectLeaders (unclean): the first
    live assigned replica leads, alone in the ISR; b1 comes back as a follower."""
    world = offline_partition()
    until = world.now + 2_000
    world.run_until(lambda: world.now >= until)
    assert world.controller.state.leader == NO_LEADER  # clean elections cannot help
    world.enable_unclean_leader_election(how)
    world.run_until(lambda: world.brokers[2].is_acting_leader, deadline_ms=world.now + 5_000)
    assert world.controller.state.leader == 2 and world.controller.state.isr == (2,)
    answers = world.controller.elect_leaders_answers
    if how == "elect":
        assert [(a.error_code, a.leader) for a in answers] == [(0, 2)]
        world.enable_unclean_leader_election(how)  # a leader is live: nothing to do
        world.run_until(lambda: len(answers) == 2)
        assert answers[1].error_code == ErrorCode.election_not_needed
    else:
        assert answers == []
    world.heal_and_converge()
    world.check_acked_everywhere()
    assert payloads(world, 1) == payloads(world, 2) == ["m0", PROBE]


def test_topic_created_grown_and_deleted_across_a_controller_failover() -> None:
    """Another topic (hosted by the simulated brokers by name only): created, its
    partitions get their preferred replicas as leaders and every replica in sync; a
    partition added later too. Its deletion waits while b3 is down (b3's replicas must
    answer StopReplica), survives a controller failover, and completes once b3 is back:
    its znodes, partition states and deletion marker are gone. The partition t-0 is
    untouched throughout. A topic created while its only replica is down gets its
    partition state once that broker starts."""
    world = three_replicas()
    zk = world.controller.zk
    u = [TopicPartition("u", p) for p in range(3)]

    def states() -> dict:
        return {
            tp: (s.leader_and_isr.leader, tuple(s.leader_and_isr.isr))
            for tp, s in zk.get_partition_states(u).items()
        }

    zk.create_topic("u", {0: [2, 3, 1], 1: [3, 1, 2]})
    world.run_until(lambda: len(states()) == 2)
    assert states() == {u[0]: (2, (2, 3, 1)), u[1]: (3, (3, 1, 2))}
    zk.add_partitions("u", {2: [1, 2, 3]})
    world.run_until(lambda: len(states()) == 3)
    assert states()[u[2]] == (1, (1, 2, 3))
    world.crash(3)
    world.run_until(lambda: 3 not in world.controller.active.context.live_brokers)
    assert states() == {u[0]: (2, (2, 1)), u[1]: (1, (1, 2)), u[2]: (1, (1, 2))}
    v0 = TopicPartition("v", 0)
    zk.create_topic("v", {0: [3]})  # its only replica is down: no leader, no state yet
    world.run_until(lambda: "v" in world.controller.active.context.all_topics)
    assert zk.get_partition_states([v0]) == {}
    zk.mark_topic_for_deletion("u")
    world.run_until(lambda: "u" in world.controller.active.context.topics_to_be_deleted)
    old = world.controller.active
    world.expire_session(old.broker_id, 50)
    world.run_until(lambda: world.controller.active not in (None, old))
    until = world.now + 2_000
    world.run_until(lambda: world.now >= until)
    assert "u" in zk.get_all_topics() and zk.get_topics_marked_for_deletion() == {"u"}
    world.restart(3)
    world.run_until(
        lambda: "u" not in zk.get_all_topics() and not zk.get_topics_marked_for_deletion(),
        deadline_ms=world.now + 10_000,
    )
    assert states() == {} and world.controller.active.context.all_topics == {"t", "v"}
    world.run_until(lambda: v0 in zk.get_partition_states([v0]))
    v0_state = zk.get_partition_states([v0])[v0].leader_and_isr
    assert (v0_state.leader, tuple(v0_state.isr)) == (3, (3,))
    world.heal_and_converge()
    world.check_acked_everywhere()


def test_preferred_leader_elections_scripted() -> None:
    """b1, the preferred replica, stops by a controlled shutdown: b2 leads. ElectLeaders
    (preferred) while b1 is away: PREFERRED_LEADER_NOT_AVAILABLE. b1 comes back (a new
    process: no longer shutting down) and catches up; the auto leader rebalance hands it
    the leadership back. Then ElectLeaders again: ELECTION_NOT_NEEDED. b1 fails and comes
    back once more; /admin/preferred_replica_election moves the leadership back and is
    deleted once done."""
    world = three_replicas(leader_elections=True, broker_isr_propagation=True)
    zk = world.controller.zk
    answers = world.controller.elect_leaders_answers

    def leads(broker: int) -> bool:
        return world.controller.state.leader == broker and world.brokers[broker].is_acting_leader

    def in_sync_again(broker: int) -> bool:
        active = world.controller.active
        return (
            broker in world.controller.state.isr
            and active is not None
            and broker in active.context.partition_leadership[PARTITION].leader_and_isr.isr
        )

    def controller_on(broker: int) -> bool:
        active = world.controller.active
        return active is not None and active.broker_id == broker

    world.controlled_shutdown(1)  # b1 hosts the controller: b2 or b3 takes it over
    world.run_until(lambda: not world.brokers[1].alive and leads(2))
    world.run_until(lambda: controller_on(2) or controller_on(3))
    world.elect_preferred_leader(how="api")
    world.run_until(lambda: len(answers) == 1)
    assert answers[0].error_code == ErrorCode.preferred_leader_not_available
    world.restart(1)
    world.run_until(lambda: in_sync_again(1), deadline_ms=world.now + 20_000)
    world.elect_preferred_leader(how="auto")
    world.run_until(lambda: leads(1))
    world.elect_preferred_leader(how="api")
    world.run_until(lambda: len(answers) == 2)
    assert (answers[1].error_code, answers[1].leader) == (ErrorCode.election_not_needed, -1)
    commit(world, 1, "p0")
    world.crash(1)
    world.run_until(lambda: leads(2) and not controller_on(1))
    world.restart(1)
    world.run_until(lambda: in_sync_again(1), deadline_ms=world.now + 20_000)
    world.elect_preferred_leader(how="zk")
    world.run_until(lambda: leads(1) and zk.get_preferred_replica_election() is None)
    assert world.stats.get("preferred_leader_elected", 0) >= 2
    world.heal_and_converge()
    world.check_acked_everywhere()


def test_topic_deletion_disabled_drops_the_request_even_across_a_failover() -> None:
    """delete.topic.enable=false: the controller removes a deletion marker and keeps the
    topic, whether it sees the marker as an event or finds it at failover."""
    world = three_replicas(delete_topic_enable=False)
    zk = world.controller.zk
    zk.create_topic("u", {0: [2, 3, 1]})
    world.run_until(lambda: "u" in world.controller.active.context.all_topics)
    zk.mark_topic_for_deletion("u")
    world.run_until(lambda: not zk.get_topics_marked_for_deletion())
    old = world.controller.active
    world.crash(old.broker_id)  # the marker comes while no controller acts
    zk.mark_topic_for_deletion("u")
    world.run_until(lambda: world.controller.active not in (None, old))
    world.run_until(lambda: not zk.get_topics_marked_for_deletion())
    assert "u" in zk.get_all_topics() and TopicPartition("u", 0) in zk.get_partition_states(
        [TopicPartition("u", 0)]
    )
    assert not world.controller.active.context.topics_to_be_deleted
    world.heal_and_converge()
    world.check_acked_everywhere()


def test_min_insync_replicas_changed_live() -> None:
    """A live min.insync.replicas change (a topic config the brokers apply at once): with
    b3 down and the ISR [1, 2], raising it to 3 refuses acks=all appends
    (NOT_ENOUGH_REPLICAS); back to 2, they are acknowledged again. A value below 1 is
    refused; at 1 the leader alone, out of an ISR of one, acknowledges."""
    world = three_replicas()
    world.crash(3)
    world.run_until(lambda: world.brokers[1].leader_state.in_sync_replicas == (1, 2))
    for b in world.brokers.values():
        b.machine.set_min_insync_replicas(3)
    world.produce(1, "x")
    until = world.now + 500
    world.run_until(lambda: world.now >= until)
    assert "x" not in payloads(world, 1)  # refused before the append
    for b in world.brokers.values():
        b.machine.set_min_insync_replicas(2)
    commit(world, 1, "y")
    with pytest.raises(ValueError):
        world.brokers[1].machine.set_min_insync_replicas(0)
    # down to 1: the leader alone acknowledges (the world's acks=all check follows it)
    world.config.min_insync_replicas = 1
    for b in world.brokers.values():
        b.machine.set_min_insync_replicas(1)
    world.crash(2)
    world.run_until(lambda: world.brokers[1].leader_state.in_sync_replicas == (1,))
    commit(world, 1, "z")
    world.heal_and_converge()
    world.check_acked_everywhere()
    assert payloads(world, 3) == ["m0", "y", "z", PROBE]


@pytest.mark.parametrize("flushed", [1, 0])
def test_consumer_told_where_its_log_diverges_after_a_loss(flushed: int) -> None:
    """KIP-595 at the leader, for a consumer that sends ``last_fetched_epoch``: it read m0
    and m1 at epoch 1; both replicas crash and the new leader kept ``flushed`` of them
    (a power failure: the loss is accepted). With m0 kept the leader answers a diverging
    epoch (epoch 1 ends at 1) and the consumer goes back to 1; with nothing kept, epoch 1
    is unknown: OFFSET_OUT_OF_RANGE, and the consumer starts over. Then it reads the new
    leader's log, and nothing else."""
    world = scripted(
        TruncationRule.LEADER_EPOCH, flush_on_append=False, flush_interval_ms=None, consumers=1
    )
    consumer = world.consumers.consumers[0]
    a, b = world.brokers[1], world.brokers[2]
    commit(world, 1, "m0")
    commit(world, 1, "m1")
    epoch = world.controller.state.leader_epoch
    for _ in range(3):  # a full fetch opens the session; the next ones are incremental
        world.consumers.fetch(consumer, a, epoch)
    assert [r.payload for r in consumer.records] == ["m0", "m1"]
    assert {r.epoch for r in consumer.records} == {epoch}
    a.log.flushed = a.log.log_end_offset
    a.log.hw_checkpoint = a.high_watermark
    b.log.flushed = flushed
    world.crash(1)
    world.crash(2, lose_unflushed=True)
    world.accept_loss_beyond(flushed, "the only ISR member left lost its unflushed tail")
    world.restart(2)
    world.run_until(lambda: b.is_acting_leader)
    commit(world, 2, "n0")
    commit(world, 2, "n1")
    epoch = world.controller.state.leader_epoch
    world.consumers.fetch(consumer, b, epoch)  # the session with b is new: a full fetch
    assert world.stats.get("consumer_divergence") == 1, world.summary()
    assert [r.payload for r in consumer.records] == ["m0"][:flushed]
    world.consumers.fetch(consumer, b, epoch)
    assert (
        [r.payload for r in consumer.records]
        == payloads(world, 2)
        == ["m0"][:flushed]
        + [
            "n0",
            "n1",
        ]
    )
    world.restart(1)
    world.heal_and_converge()
    assert payloads(world, 1) == payloads(world, 2)
