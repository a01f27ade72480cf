"""Deterministic simulation of replication (FoundationDB / TigerBeetle VOPR style).

Random runs: a few seeds per fault profile, thousands of steps each, invariants
after every step (see ``tests/sim/world.py``), then every fault healed and the
replicas required to converge to identical logs holding every acknowledged
record. Scripted runs: the two failure cases of seed 003 (KIP-101), with
leader-epoch truncation and with the old high-watermark truncation, plus the
zombie leader of seed 000.

Environment:
  REPLOG_SIM_SEEDS=N     run N seeds per profile (default 5)
  REPLOG_SIM_SEED=S      run only seed S (replay a failure)
  REPLOG_SIM_STEPS=K     steps per run (default 20000)
  REPLOG_SIM_PROFILE=P   run only profile P (flushed, lossy, five)
  REPLOG_SIM_TRACE=all   keep the whole step trace for the failure report (default: last 600)
"""

from __future__ import annotations

import os

import pytest

from replog.replication.core import LeaderState
from replog.replication.follower import FollowerPhase
from sim.broker import TruncationRule
from sim.network import NetworkConfig
from sim.world import SimConfig, SimInvariantViolation, World

PROFILES: dict[str, SimConfig] = {
    # every append reaches the disk; crashes keep whole logs
    "flushed": SimConfig(flush_on_append=True, lossy_crashes=False),
    # appends are flushed every ~1.5 s; crashes may lose the unflushed tail
    "lossy": SimConfig(flush_on_append=False, lossy_crashes=True),
    # five replicas, min.insync.replicas=3, lossy
    "five": SimConfig(replicas=5, min_insync_replicas=3, flush_on_append=False),
}


def _seeds() -> list[int]:
    if "REPLOG_SIM_SEED" in os.environ:
        return [int(os.environ["REPLOG_SIM_SEED"])]
    return list(range(int(os.environ.get("REPLOG_SIM_SEEDS", "5"))))


def _profiles() -> list[str]:
    only = os.environ.get("REPLOG_SIM_PROFILE")
    return [only] if only else list(PROFILES)


STEPS = int(os.environ.get("REPLOG_SIM_STEPS", "20000"))


def run_random(seed: int, config: SimConfig, steps: int = STEPS, label: str = "") -> World:
    world = World(seed, config, label=label)
    try:
        world.start()
        world.run(steps)
        world.heal_and_converge()
        world.check_acked_everywhere()
    except SimInvariantViolation:
        raise
    except Exception as exc:  # a core assertion or a glue error: still print the replay
        raise AssertionError(f"{type(exc).__name__}: {exc}\n{world.failure_report()}") from exc
    return world


@pytest.mark.parametrize("profile", _profiles())
@pytest.mark.parametrize("seed", _seeds())
def test_random_simulation(profile: str, seed: int) -> None:
    config = PROFILES[profile]
    world = run_random(seed, config, label=profile)
    print(f"profile={profile} seed={seed} {world.summary()}")
    # the run did something: records were committed and acknowledged through faults
    assert len(world.committed) > 50 and len(world.acked) > 50, world.summary()
    assert world.stats.get("crash", 0) + world.stats.get("crash_lossy", 0) > 0
    assert world.controller.state.leader_epoch > 1
    leader_log = world.brokers[world.controller.state.leader].log.records
    assert all(b.log.records == leader_log for b in world.brokers.values())


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
            run_random(seed, config, steps=4000)
        kinds.add(info.value.kind)
    assert kinds <= {"hw_above_isr_leo", "committed_lost", "committed_changed"}


def _first_violation(seeds: range, steps: int = 6000) -> SimInvariantViolation | None:
    for seed in seeds:
        try:
            run_random(seed, PROFILES["lossy"], steps=steps)
        except SimInvariantViolation as exc:
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
    assert found is not None
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
    assert found is not None and found.kind in {"hw_above_isr_leo", "committed_lost"}


# -- scripted scenarios (seed 003 / KIP-101) -------------------------------------------------


def scripted(rule: TruncationRule, **overrides) -> World:
    config = SimConfig(
        replicas=overrides.pop("replicas", 2),
        min_insync_replicas=overrides.pop("min_insync_replicas", 1),
        truncation_rule=rule,
        network=NetworkConfig.fixed(1),
        fault_probability=0.0,
        produce_probability=0.0,
        hw_checkpoint_interval_ms=10**9,  # checkpoints only where the script writes them
        **overrides,
    )
    world = World(0, config, collect_violations=rule is TruncationRule.HIGH_WATERMARK)
    world.start()
    world.run_until(lambda: world.brokers[1].is_acting_leader and all_fetching(world))
    return world


def all_fetching(world: World) -> bool:
    leader = world.controller.state.leader
    return all(
        b.follower_state is not None and b.follower_state.phase is FollowerPhase.FETCHING
        for b in world.brokers.values()
        if b.id != leader and b.alive
    )


def commit(world: World, broker: int, payload: str) -> None:
    world.produce(broker, payload)
    world.run_until(lambda: payload in world.acked_payloads)


def payloads(world: World, broker: int) -> list[str]:
    return [r.payload for r in world.brokers[broker].log.records]


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
    assert payloads(world, 1) == payloads(world, 2) == ["m0", "m1", "m2"]
    assert world.violations == []


def test_seed_003_scenario_1_high_watermark_truncation_loses_a_committed_record() -> None:
    world = scenario_1(TruncationRule.HIGH_WATERMARK)
    world.heal_and_converge()
    kinds = {v.kind for v in world.violations}
    assert "committed_lost" in kinds
    # m1 was acknowledged to the producer, and no replica has it any more
    assert "m1" in world.acked_payloads
    assert payloads(world, 1) == payloads(world, 2) == ["m0", "m2"]


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
    assert world.controller.state.leader == -1 and world.controller.state.isr == (2,)
    world.restart(2)  # B first: the only ISR member, so it leads
    world.run_until(lambda: b.is_acting_leader)
    commit(world, 2, "m2")
    world.restart(1)
    return world


def test_seed_003_scenario_2_leader_epoch_truncation_keeps_replicas_identical() -> None:
    world = scenario_2(TruncationRule.LEADER_EPOCH)
    world.heal_and_converge()
    world.check_acked_everywhere()
    assert payloads(world, 1) == payloads(world, 2) == ["m0", "m1", "m2"]
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
    assert payloads(world, 1) == payloads(world, 2) == ["n0"]
    assert world.violations == []


def test_seed_003_power_failure_high_watermark_truncation_diverges() -> None:
    world = power_failure(TruncationRule.HIGH_WATERMARK)
    a = world.brokers[1]
    world.run_until(lambda: a.follower_state is not None and a.high_watermark == 1)
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
    assert payloads(world, 1) == payloads(world, 2) == payloads(world, 3) == ["m0", "m1"]
