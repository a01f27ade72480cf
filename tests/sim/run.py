"""Run the replication simulation on random seeds for a while; print every failing seed.

    PYTHONPATH=tests .venv/bin/python -m sim.run --seconds 600 --profile lossy
    PYTHONPATH=tests .venv/bin/python -m sim.run --profile lossy --seed 1234   # replay one

Each failure prints the seed, the profile, the invariant it broke and a
one-line replay command; ``--seed`` replays one seed and prints its failure
report (``REPLOG_SIM_TRACE=all`` keeps the whole trace). A seed that found a
bug belongs in ``sim/regressions.py``.

``run_random`` and ``PROFILES`` are what ``tests/test_replication_simulation.py``
runs too.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import random
import sys
import time

from sim.network import NetworkConfig
from sim.world import SimConfig, SimInvariantViolation, World, replay_line

DEFAULT_STEPS = 20_000

PROFILES: dict[str, SimConfig] = {
    # every append reaches the disk; crashes keep whole logs
    "flushed": SimConfig(flush_on_append=True, lossy_crashes=False),
    # appends are flushed every ~1.5 s; crashes may lose the unflushed tail
    "lossy": SimConfig(flush_on_append=False, lossy_crashes=True),
    # five replicas, min.insync.replicas=3, lossy
    "five": SimConfig(replicas=5, min_insync_replicas=3, flush_on_append=False),
    # half the crashes are controlled shutdowns (leadership moved away first); lossy
    "operations": SimConfig(flush_on_append=False, controlled_shutdowns=True),
    # "operations" with reassignments, and controller takeovers in the middle of an event
    "controller": SimConfig(
        flush_on_append=False,
        controlled_shutdowns=True,
        reassignments=True,
        controller_takeovers=True,
    ),
    # "controller" with operators' preferred leader elections and auto leader rebalances
    "elections": SimConfig(
        flush_on_append=False,
        controlled_shutdowns=True,
        reassignments=True,
        controller_takeovers=True,
        leader_elections=True,
        broker_isr_propagation=True,
    ),
    # "controller" with brokers' log dirs failing, and LeaderAndIsr answers reaching the
    # controller (KAFKA_STORAGE_ERROR for a replica in a failed log dir)
    "disks": SimConfig(
        flush_on_append=False,
        controlled_shutdowns=True,
        reassignments=True,
        controller_takeovers=True,
        leader_and_isr_answers=True,
        log_dir_failures=True,
        broker_isr_propagation=True,
    ),
    # consumers reading with last_fetched_epoch (KIP-595) and a two-slot fetch session
    # cache: followers' sessions evict consumers', sessions older than 2 s evict others;
    # leaders over their replication quota at 30 % of the fetches (throttled replicas)
    "consumers": SimConfig(
        flush_on_append=True,
        lossy_crashes=False,
        consumers=3,
        fetch_session_cache_slots=2,
        fetch_session_eviction_ms=2_000,
        replication_throttle=0.3,
    ),
    # mostly ZooKeeper and controller trouble: more faults, calmer network
    "control": SimConfig(
        flush_on_append=False,
        fault_probability=0.03,
        network=NetworkConfig(min_delay_ms=1, max_delay_ms=30, drop_probability=0.01),
    ),
}


def run_random(seed: int, config: SimConfig, steps: int = DEFAULT_STEPS, label: str = "") -> World:
    """One random run: ``steps`` steps with faults, then heal and converge (liveness).

    Raises ``SimInvariantViolation``, or ``AssertionError`` with the failure report
    (and its replay line) for anything else that broke.
    """
    world = World(seed, config, label=label, steps=steps)
    try:
        world.start()
        world.run(steps)
        world.heal_and_converge()
        world.check_acked_everywhere()
    except SimInvariantViolation:
        raise
    except Exception as exc:  # a core assertion, a stuck cluster, a glue error: still replay
        raise AssertionError(f"{type(exc).__name__}: {exc}\n{world.failure_report()}") from exc
    return world


def failure_kind(exc: BaseException) -> str:
    if isinstance(exc, SimInvariantViolation):
        return exc.kind
    text = str(exc)
    if "condition not reached" in text.split("\n", 1)[0]:
        return "liveness"
    return text.split(":", 1)[0].split("\n", 1)[0][:60]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.run", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--seconds", type=float, default=60, help="wall time to run for, all profiles together"
    )
    parser.add_argument(
        "--profile", action="append", choices=sorted(PROFILES), help="repeatable; default: all"
    )
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--seed", type=int, help="run only this seed and show its report")
    parser.add_argument("--first-seed", type=int, help="run seeds in order from here")
    parser.add_argument("--stop-on-failure", action="store_true")
    parser.add_argument(
        "--tolerate",
        action="append",
        default=[],
        metavar="KIND",
        help="also count violations of KIND instead of failing on them",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="fail on the open bugs' violations too (sim/regressions.py OPEN_BUG_KINDS)",
    )
    args = parser.parse_args(argv)
    logging.getLogger("replog").setLevel(logging.ERROR)  # failed elections are part of the game
    profiles = args.profile or list(PROFILES)
    configs = {
        p: dataclasses.replace(
            PROFILES[p],
            tolerated=frozenset(args.tolerate)
            | (frozenset() if args.strict else PROFILES[p].tolerated),
        )
        for p in profiles
    }

    if args.seed is not None:
        failed = False
        for profile in profiles:
            try:
                world = run_random(args.seed, configs[profile], args.steps, label=profile)
            except AssertionError as exc:
                print(exc)
                failed = True
            else:
                print(f"profile={profile} seed={args.seed} ok: {world.summary()}")
        return 1 if failed else 0

    seeds = (
        iter(range(args.first_seed, sys.maxsize))
        if args.first_seed is not None
        else iter(lambda: random.SystemRandom().randrange(1 << 31), None)
    )
    deadline = time.monotonic() + args.seconds
    runs = failures = 0
    while time.monotonic() < deadline:
        seed = next(seeds)
        for profile in profiles:
            runs += 1
            started = time.monotonic()
            try:
                run_random(seed, configs[profile], args.steps, label=profile)
            except AssertionError as exc:
                failures += 1
                replay = replay_line(seed, profile, args.steps, configs[profile].tolerated)
                print(
                    f"FAIL seed={seed} profile={profile} [{failure_kind(exc)}] "
                    f"({time.monotonic() - started:.1f} s)\n  replay: {replay}",
                    flush=True,
                )
                if args.stop_on_failure:
                    return 1
    print(f"{runs} runs, {failures} failed, profiles {','.join(profiles)}, {args.steps} steps")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
