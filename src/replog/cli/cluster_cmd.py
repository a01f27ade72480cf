"""``replog cluster up|status|stop|start|kill|roll|down``: a local cluster under one directory.

``up`` refuses a directory where processes of a cluster still run (naming them); a
failed ``up`` stops the processes it started. The other actions on a directory without a
cluster say so and exit 1.

``roll`` restarts every broker in turn (controlled shutdown by SIGTERM to its pid), waiting
for every partition's ISR to be full before the next; it prints a line per step and exits
1 with a one-line reason when a broker does not come back or the ISRs do not fill.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import asdict
from pathlib import Path

from replog.cluster.launcher import ClusterRunningError, LocalCluster, RollFailed
from replog.cluster.secure import prepare_secure_cluster


def _cluster(args: argparse.Namespace) -> LocalCluster:
    # The launcher's own ZooKeeper client: its reconnection warnings are not the user's.
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    return LocalCluster(Path(args.dir))


def _no_cluster(args: argparse.Namespace) -> int:
    print(f"replog: no cluster in {args.dir} (replog cluster up --dir makes one)", file=sys.stderr)
    return 1


def _up(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    try:
        overrides = dict(item.split("=", 1) for item in (args.override or []))
    except ValueError:
        print("replog: --override takes KEY=VALUE", file=sys.stderr)
        return 2
    extra: tuple[str, ...] = ()
    try:
        cluster.check_not_running()  # before anything is written here
        if args.secure:
            secure = prepare_secure_cluster(Path(args.dir))
            overrides = {**secure.overrides, **overrides}
            extra = ("SASL_SSL",)
        bootstrap = cluster.up(
            args.brokers,
            zookeeper=args.zookeeper,
            overrides=overrides,
            metrics=True,
            extra_listeners=extra,
        )
    except ClusterRunningError as exc:
        print(f"replog: {exc}", file=sys.stderr)
        return 1
    except (RuntimeError, TimeoutError) as exc:  # up stopped what it had started
        # The first line: the reason and where the log is (the rest is the log's tail).
        print(f"replog: cluster did not come up: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    try:
        console = cluster.start_console()
        if args.secure:
            secure.add_user(cluster)
    except (RuntimeError, TimeoutError) as exc:  # the cluster is ours: stop all of it
        print(f"replog: cluster did not come up: {exc}", file=sys.stderr)
        cluster.down()
        return 1
    print(bootstrap)
    for broker_id in cluster.broker_ids:
        print(f"broker {broker_id} metrics: {cluster.metrics_url(broker_id)}")
    print(f"console: {console}")
    if args.secure:
        print(secure.client_properties(cluster), end="")
    return 0


def _status(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    if not cluster.state:
        return _no_cluster(args)
    rows = cluster.status()
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
        return 0
    print(f"{'broker':>6} {'pid':>8} {'listener':<22} {'alive':<6} {'registered':<10} controller")
    for r in rows:
        print(
            f"{r.broker_id:>6} {r.pid or '-':>8} {r.listener:<22} {str(r.alive).lower():<6} "
            f"{str(r.registered).lower():<10} {'*' if r.controller else ''}"
        )
    return 0


def _broker_action(action: str):
    def run(args: argparse.Namespace) -> int:
        cluster = _cluster(args)
        if not cluster.state:
            return _no_cluster(args)
        if args.broker not in cluster.broker_ids:
            print(f"replog: no broker {args.broker} in {args.dir}", file=sys.stderr)
            return 1
        if action == "stop":
            started = time.monotonic()
            cluster.stop_broker(args.broker)
            print(f"broker {args.broker} stopped in {time.monotonic() - started:.2f} s")
        elif action == "kill":
            cluster.kill_broker(args.broker)
        else:
            cluster.start_broker(args.broker)
        return 0

    return run


def _roll(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    if not cluster.state:
        return _no_cluster(args)
    try:
        cluster.roll(
            lambda line: print(line, flush=True),
            isr_timeout_s=args.isr_timeout,
            stop_timeout_s=args.stop_timeout,
        )
    except RollFailed as exc:
        print(f"replog: roll failed: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # ZooKeeper unreachable and the like: still one line
        print(f"replog: roll failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


def _down(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    if not cluster.state:
        return _no_cluster(args)
    stopped = cluster.down()
    if not stopped:
        print(f"nothing of the cluster in {args.dir} was running")
    for name, pid in stopped:
        print(f"stopped {name} (pid {pid})")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    cluster = sub.add_parser(
        "cluster", help="a local cluster (ZooKeeper and brokers) under one directory"
    )
    actions = cluster.add_subparsers(dest="action", required=True)
    up = actions.add_parser("up", help="start ZooKeeper (unless given) and N brokers")
    up.add_argument("--brokers", type=int, default=3)
    up.add_argument("--dir", required=True)
    up.add_argument("--zookeeper", help="HOST:PORT[/chroot] of an existing ZooKeeper")
    up.add_argument("--override", action="append", metavar="KEY=VALUE")
    up.add_argument(
        "--secure",
        action="store_true",
        help="also a SASL_SSL listener: a CA and broker certificate made here, a SCRAM "
        "user; prints the client configuration",
    )
    up.set_defaults(func=_up)
    status = actions.add_parser("status", help="list the processes")
    status.add_argument("--dir", required=True)
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=_status)
    for name, helptext in (
        ("stop", "stop a broker (SIGTERM: a controlled shutdown unless disabled)"),
        ("start", "start a broker again"),
        ("kill", "kill a broker (SIGKILL)"),
    ):
        p = actions.add_parser(name, help=helptext)
        p.add_argument("--dir", required=True)
        p.add_argument("--broker", type=int, required=True)
        p.set_defaults(func=_broker_action(name))
    roll = actions.add_parser(
        "roll", help="rolling restart: each broker in turn, waiting for full ISRs between"
    )
    roll.add_argument("--dir", required=True)
    roll.add_argument(
        "--isr-timeout", type=float, default=300, help="seconds to wait for full ISRs (300)"
    )
    roll.add_argument(
        "--stop-timeout", type=float, default=60, help="seconds before a SIGKILL (60)"
    )
    roll.set_defaults(func=_roll)
    down = actions.add_parser("down", help="stop every process of the cluster")
    down.add_argument("--dir", required=True)
    down.set_defaults(func=_down)
