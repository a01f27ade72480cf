"""The ``replog`` command: one sub-command per tool (``replog --help`` lists them).

``replog broker start`` reports every start-up failure a user can cause (a bad
configuration, ZooKeeper out of reach, a log dir another broker holds, another broker's
or cluster's data) as one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import logging
import sys
from pathlib import Path

from replog.config import ConfigError, KafkaConfig, parse_overrides, read_properties
from replog.storage.log_dir_lock import LogDirLockedError
from replog.storage.meta_properties import MetaPropertiesError

# sub-command -> the module that adds its parser (``add_parser``), in --help's order. Only
# the one named on the command line is imported (all of them for --help or a wrong name):
# importing every one took 0.3 s of CPU from each command and each broker process.
COMMAND_MODULES = {
    "cluster": "cluster_cmd",
    "topics": "topics_cmd",
    "configs": "configs_cmd",
    "api-versions": "api_versions_cmd",
    "elect-leaders": "elect_leaders_cmd",
    "groups": "groups_cmd",
    "reassign": "reassign_cmd",
    "console": "console_cmd",
    "spark": "spark_cmd",
    "users": "users_cmd",
    "acls": "acls_cmd",
    "transactions": "transactions_cmd",
}

DESCRIPTION = """\
replog: a Kafka-compatible replicated commit log (ZooKeeper mode).

Run a broker or a ZooKeeper server, start a local cluster, or manage a running cluster
the way Kafka's command-line tools do. Each sub-command has its own --help."""


def _setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("kazoo").setLevel(logging.WARNING)


# The broker process's cyclic garbage collector. Python's default thresholds (700, 10, 10)
# run a young collection every 700 net allocations and may run a full one every 70,000.
# With 10,000 partitions a full collection took 0.15-0.25 s here, and a broker failure
# (new leader states, requests, the controller's new context) set off several young and
# full ones within the second it is handled, stalling the event loop the controller and
# the replicas share (gc.callbacks timed during bench/failover.py: about 0.6 s of
# collections in that second across the brokers, 0.24 s with these thresholds). These
# make young collections 70 times rarer and full ones at most every ~10 million
# allocations; a broker's garbage is nearly all freed by reference counting anyway.
BROKER_GC_THRESHOLDS = (50_000, 20, 10)


def _broker_start(args: argparse.Namespace) -> int:
    try:
        props = read_properties(Path(args.config))
        props.update(parse_overrides(args.override or []))
        config = KafkaConfig.from_properties(props)
    except ConfigError as exc:
        print(f"replog: bad configuration: {exc}", file=sys.stderr)
        return 2
    _setup_logging(args.log_level)
    gc.set_threshold(*BROKER_GC_THRESHOLDS)
    from replog.server import stack_dump
    from replog.server.broker import Broker
    from replog.server.broker_startup import BrokerStartupError

    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass

    startup_errors = (
        BrokerStartupError,  # ZooKeeper out of reach, no usable log dir, the id taken
        LogDirLockedError,  # another broker on a log dir
        MetaPropertiesError,  # another broker's or another cluster's data
        OSError,  # a port in use
        ValueError,  # a listener's unusable TLS files, a bad zookeeper.connect
    )

    async def run() -> None:
        stack_dump.install(asyncio.get_running_loop())  # SIGUSR1: what it waits on
        broker = Broker(config)
        try:
            await broker.run_until_stopped()
        except startup_errors:
            raise
        except Exception:
            # logged here, in the broker's log: asyncio.run prints it only after its
            # shutdown, which waits for the executor's threads
            logging.getLogger("replog.server.broker").exception(
                "broker %d stopped on an error", config.broker_id
            )
            raise

    try:
        asyncio.run(run())
    except startup_errors as exc:
        print(f"replog: broker {config.broker_id} failed to start: {exc}", file=sys.stderr)
        return 1
    return 0


def _zookeeper_start(args: argparse.Namespace) -> int:
    _setup_logging()
    from replog.cluster.zookeeper import run_zookeeper_foreground

    return run_zookeeper_foreground(Path(args.dir), args.port)


BUILT_IN = ("broker", "zookeeper")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``command``, only that sub-command's (the others not imported)."""
    parser = argparse.ArgumentParser(
        prog="replog",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(
        dest="command", required=True, title="sub-commands", metavar="COMMAND"
    )

    broker = sub.add_parser("broker", help="run a broker (broker start --config FILE)")
    broker_sub = broker.add_subparsers(dest="action", required=True)
    start = broker_sub.add_parser("start", help="run one broker in the foreground")
    start.add_argument("--config", required=True, help="server.properties file")
    start.add_argument("--override", action="append", metavar="KEY=VALUE")
    start.add_argument("--log-level", default="INFO")
    start.set_defaults(func=_broker_start)

    zk = sub.add_parser("zookeeper", help="run a ZooKeeper server (zookeeper start --dir DIR)")
    zk_sub = zk.add_subparsers(dest="action", required=True)
    zk_start = zk_sub.add_parser("start", help="run ZooKeeper in the foreground")
    zk_start.add_argument("--dir", required=True)
    zk_start.add_argument("--port", type=int, default=2181)
    zk_start.set_defaults(func=_zookeeper_start)

    for name, module in COMMAND_MODULES.items():
        if command is None or command == name:
            importlib.import_module(f"replog.cli.{module}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    named = argv[0] if argv else None
    parser = build_parser(named if named in COMMAND_MODULES or named in BUILT_IN else None)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
