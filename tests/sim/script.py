"""Helpers for scripted scenarios: a calm world (fixed 1 ms network, no random faults or
producers) that a test drives step by step, for interleavings random runs do not reach.

``scripted`` starts it with broker 1 leading (and hosting the controller) and every
follower fetching; ``three_replicas`` adds a record committed everywhere.
"""

from __future__ import annotations

from replog.replication.follower import FollowerPhase
from sim.broker import TruncationRule
from sim.network import NetworkConfig
from sim.world import SimConfig, World


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


def three_replicas(**overrides) -> World:
    """Three replicas, min.insync.replicas=2, b1 leads and hosts the controller; m0 committed."""
    world = scripted(TruncationRule.LEADER_EPOCH, replicas=3, min_insync_replicas=2, **overrides)
    commit(world, 1, "m0")
    world.run_until(lambda: all(b.high_watermark == 1 for b in world.brokers.values()))
    return world
