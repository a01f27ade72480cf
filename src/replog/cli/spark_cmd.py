"""``replog spark up|down|status``: a standalone Spark cluster (``spark://``) on this machine.

    replog spark up --dir /tmp/spark [--workers 2] [--cores 1] [--memory 1g]
    replog spark status --dir /tmp/spark
    replog spark down --dir /tmp/spark

``up`` prints the master URL to give to ``SparkSession.builder.master(...)`` (or to
``make demo SPARK_MASTER=...``) once every worker has registered.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from replog.cluster.processes import pid_alive
from replog.cluster.spark_cluster import StandaloneSpark


def _up(args: argparse.Namespace) -> int:
    cluster = StandaloneSpark(Path(args.dir))
    try:
        print(cluster.up(workers=args.workers, cores=args.cores, memory=args.memory))
    except RuntimeError as exc:
        print(f"replog: {exc}", file=sys.stderr)
        return 1
    return 0


def _status(args: argparse.Namespace) -> int:
    cluster = StandaloneSpark(Path(args.dir))
    if not cluster.master_url:
        print(f"replog: no Spark cluster in {args.dir}", file=sys.stderr)
        return 1
    alive = [p for p in cluster.pids() if pid_alive(p)]
    print(f"master {cluster.master_url} (web {cluster.web_url})")
    print(f"processes alive: {len(alive)} of {len(cluster.pids())}")
    print(f"workers registered: {cluster.alive_workers()}")
    return 0


def _down(args: argparse.Namespace) -> int:
    StandaloneSpark(Path(args.dir)).down()
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("spark", help="a standalone Spark cluster on this machine")
    actions = p.add_subparsers(dest="spark_command", required=True)
    up = actions.add_parser("up", help="start a master and workers (background)")
    up.add_argument("--dir", required=True)
    up.add_argument("--workers", type=int, default=2)
    up.add_argument("--cores", type=int, default=1, help="cores per worker")
    up.add_argument("--memory", default="1g", help="memory per worker")
    up.set_defaults(func=_up)
    for name, func, text in (
        ("status", _status, "the master, its processes and registered workers"),
        ("down", _down, "stop every process by pid"),
    ):
        action = actions.add_parser(name, help=text)
        action.add_argument("--dir", required=True)
        action.set_defaults(func=func)
