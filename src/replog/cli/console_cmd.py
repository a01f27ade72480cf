"""``replog console``: the live cluster console (``replog.console``), in the foreground.

    replog console --cluster-dir DIR [--port N]
    replog console --bootstrap-server H:P[,H:P] [--metrics-url ID=URL ...]
                   [--zookeeper H:P[/chroot]] [--port N]

With ``--cluster-dir`` (a ``replog cluster up`` directory) it reads the bootstrap servers,
each broker's metrics URL and the ZooKeeper address from ``cluster.json``. It prints its
URL and serves until SIGINT or SIGTERM. It only reads from the cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from replog.cluster.launcher import LocalCluster
from replog.console.server import ClusterPoller, ConsoleServer, ConsoleTargets


def _targets(args: argparse.Namespace) -> ConsoleTargets:
    if args.cluster_dir:
        cluster = LocalCluster(Path(args.cluster_dir))
        if not cluster.state.get("brokers"):
            raise ValueError(f"no cluster in {args.cluster_dir}")
        return ConsoleTargets(
            bootstrap=cluster.bootstrap_servers().split(","),
            metrics_urls={
                b: url for b in cluster.broker_ids if (url := cluster.metrics_url(b)) is not None
            },
            zookeeper=cluster.zookeeper_connect,
        )
    if not args.bootstrap_server:
        raise ValueError("give --cluster-dir or --bootstrap-server")
    urls = {}
    for item in args.metrics_url or []:
        broker, sep, url = item.partition("=")
        if not sep or not broker.isdigit():
            raise ValueError(f"--metrics-url takes BROKER_ID=URL, got {item!r}")
        urls[int(broker)] = url
    return ConsoleTargets(args.bootstrap_server.split(","), urls, args.zookeeper)


async def _serve(targets: ConsoleTargets, host: str, port: int, interval_s: float) -> None:
    server = ConsoleServer(ClusterPoller(targets), interval_s)
    await server.start(host, port)
    print(f"console at http://{host}:{server.port}/", flush=True)
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopped.set)
    try:
        await stopped.wait()
    finally:
        await server.stop()


def _main(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.WARNING, format="[%(asctime)s] %(levelname)s %(name)s: %(message)s"
    )
    try:
        targets = _targets(args)
    except ValueError as exc:
        print(f"replog: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve(targets, args.host, args.port, args.interval))
    except OSError as exc:
        print(f"replog: console could not start: {exc}", file=sys.stderr)
        return 1
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("console", help="serve a live web console of a cluster (read-only)")
    p.add_argument("--cluster-dir", help="a `replog cluster up` directory")
    p.add_argument("--bootstrap-server", help="host:port[,host:port]")
    p.add_argument(
        "--metrics-url", action="append", help="BROKER_ID=URL of a broker's /metrics (repeat)"
    )
    p.add_argument("--zookeeper", help="host:port[/chroot], to show the controller epoch")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between polls")
    p.set_defaults(func=_main)
