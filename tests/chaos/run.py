"""Run a seeded fault campaign against a real replog cluster in network namespaces.

    PYTHONPATH=tests .venv/bin/python -m chaos.run --seed 42 --minutes 5
    PYTHONPATH=tests .venv/bin/python -m chaos.run --minutes 5          # random seed, printed
    PYTHONPATH=tests .venv/bin/python -m chaos.run --check DIR/history.jsonl   # re-check
    make chaos SEED=42 MINUTES=5

The schedule (which faults, in which order, for how long) follows from the seed; the run
directory (default ``bench/out/chaos/seed-S-<time>``, git-ignored) keeps ``history.jsonl``, ``nemesis.log``,
``report.txt``, ``timeline.png``/``.svg`` (faults as bands, acked writes and leader changes
a second) and every process's log; ``--check`` redraws the timeline beside the history. Exit status 1 when the checker finds an anomaly,
2 when this machine cannot build namespaces.
"""

from __future__ import annotations

import argparse
import secrets
import sys
import time
from pathlib import Path

from chaos.campaign import CampaignConfig, make_schedule, run_campaign
from chaos.checker import check, report
from chaos.history import load
from chaos.nemesis import (
    ENSEMBLE_ONLY,
    FAULT_KINDS,
    KNOWN_FAULTS,
    NAMED_ONLY_CRASHES,
    PROXY_FAULTS,
    TXN_FAULTS,
)
from chaos.net import unavailable_reason
from chaos.timeline import draw, series


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=None, help="replay this seed")
    parser.add_argument("--minutes", type=float, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="run directory")
    parser.add_argument(
        "--faults",
        default=None,
        help=f"comma-separated fault kinds to draw (default: all of {', '.join(FAULT_KINDS)}; "
        f"{', '.join(ENSEMBLE_ONLY)} only with --zookeepers 3; "
        f"{', '.join(TXN_FAULTS)} too with --workload transactions; "
        f"{', '.join(PROXY_FAULTS + NAMED_ONLY_CRASHES)} only when named)",
    )
    parser.add_argument("--zookeepers", type=int, choices=(1, 3), default=3)
    parser.add_argument(
        "--dense",
        action="store_true",
        help="short faults close together, without waiting for full ISRs between them",
    )
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rate", type=int, default=200, help="values produced a second")
    parser.add_argument(
        "--workload",
        choices=("queue", "transactions"),
        default="transactions",
        help="transactions (the default): add transactional producers, a "
        "consume-transform-produce flow and read_committed readers (chaos.txn_workload) to "
        "the queue workload, and draw the coordinator faults too; queue: the queue workload "
        "alone (the seeds recorded before the transactional workload became the default "
        "replay their schedules with it)",
    )
    parser.add_argument(
        "--check", type=Path, default=None, help="only check a saved history.jsonl and report"
    )
    args = parser.parse_args(argv)
    if args.check is not None:
        events = load(args.check)
        result = check(events)
        print(report(result, f"history {args.check}"))
        charts = draw(series(events), args.check.parent, f"history {args.check}")
        print(f"timeline: {', '.join(str(c) for c in charts)}")
        return 0 if result.ok else 1

    reason = unavailable_reason()
    if reason is not None:
        print(f"chaos: cannot run here: {reason}", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else secrets.randbelow(1_000_000)
    if args.faults is None:
        kinds = tuple(k for k in FAULT_KINDS if args.zookeepers >= 3 or k not in ENSEMBLE_ONLY)
        if args.workload == "transactions":
            kinds += TXN_FAULTS
    else:
        kinds = tuple(k for k in args.faults.split(",") if k)
    unknown = {part for k in kinds for part in k.split("+")} - set(KNOWN_FAULTS)
    if unknown:
        parser.error(f"unknown fault kinds {sorted(unknown)}; known: {', '.join(KNOWN_FAULTS)}")
    schedule = make_schedule(seed, args.minutes, kinds, dense=args.dense)
    directory = (
        args.dir or Path("bench/out/chaos") / f"seed-{seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    print(
        f"chaos: seed {seed} ({len(schedule)} faults); replay with: make chaos SEED={seed} "
        f"MINUTES={args.minutes:g}" + _extra_args(args)
    )
    for n, fault in enumerate(schedule):
        print(
            f"  #{n} {fault.kind} pick={fault.pick} hold {fault.hold_s} s, quiet {fault.quiet_s} s"
        )
    config = CampaignConfig(
        partitions=args.partitions,
        rate=args.rate,
        zookeepers=args.zookeepers,
        wait_recovery=not args.dense,
        transactions=args.workload == "transactions",
        seed=seed,
    )
    result = run_campaign(
        schedule,
        directory,
        config,
        log=lambda line: print(line, flush=True),
        title=f"chaos seed {seed}",
    )
    print(f"chaos: seed {seed}: {'OK' if result.ok else 'ANOMALIES'}; run directory {directory}")
    return 0 if result.ok else 1


def _extra_args(args: argparse.Namespace) -> str:
    """The options besides seed and minutes, as ``make chaos`` takes them (CHAOS_ARGS)."""
    extra = []
    if args.dense:
        extra.append("--dense")
    if args.zookeepers != 3:
        extra.append(f"--zookeepers {args.zookeepers}")
    if args.faults is not None:
        extra.append(f"--faults {args.faults}")
    if args.partitions != 6:
        extra.append(f"--partitions {args.partitions}")
    if args.rate != 200:
        extra.append(f"--rate {args.rate}")
    if args.workload != "transactions":
        extra.append(f"--workload {args.workload}")
    return f' CHAOS_ARGS="{" ".join(extra)}"' if extra else ""


if __name__ == "__main__":
    sys.exit(main())
