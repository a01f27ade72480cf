"""``replog elect-leaders`` (Kafka ``kafka-leader-election.sh``, KIP-460).

    replog elect-leaders --bootstrap-server H:P --election-type preferred|unclean \\
        (--topic T --partition P | --all-topic-partitions)

Sends ElectLeaders (v2) to the controller that Metadata names and prints Kafka's three
kinds of lines: the partitions whose election succeeded, those that already had the
leader asked for (ELECTION_NOT_NEEDED), and one line per failed partition. Exits 1
with a one-line reason when any partition failed or the cluster could not be reached;
2 on bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import sys

from kio.schema.elect_leaders.v2 import request as elect_req
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v8 import request as metadata_req
from kio.static.primitive import i8, i32, i32Timedelta

from replog.cli.connection import CommandError, connect
from replog.protocol.client import KafkaConnection

ELECTION_TYPES = {"preferred": 0, "unclean": 1}
TIMEOUT_MS = 30_000


async def _connect(server: str) -> KafkaConnection:
    return await connect(server, "replog-elect-leaders")


async def _connect_to_controller(bootstrap: str) -> KafkaConnection:
    last: Exception | None = None
    for server in bootstrap.split(","):
        try:
            conn = await _connect(server)
        except (OSError, CommandError) as exc:
            last = exc
            continue
        try:
            response = await conn.request(
                metadata_req.MetadataRequest(
                    topics=(),
                    allow_auto_topic_creation=False,
                    include_cluster_authorized_operations=False,
                    include_topic_authorized_operations=False,
                )
            )
        finally:
            await conn.close()
        for b in response.brokers:
            if int(b.node_id) == int(response.controller_id):
                return await _connect(f"{b.host}:{b.port}")
        raise CommandError("the cluster has no controller at the moment")
    raise CommandError(f"cannot reach any of {bootstrap}: {last}")


def _request(args: argparse.Namespace) -> elect_req.ElectLeadersRequest:
    partitions = None
    if not args.all_topic_partitions:
        partitions = (
            elect_req.TopicPartitions(topic=args.topic, partitions=(i32(args.partition),)),
        )
    return elect_req.ElectLeadersRequest(
        election_type=i8(ELECTION_TYPES[args.election_type]),
        topic_partitions=partitions,
        timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=TIMEOUT_MS)),
    )


async def _run(args: argparse.Namespace) -> int:
    conn = await _connect_to_controller(args.bootstrap_server)
    try:
        response = await conn.request(_request(args), timeout_s=TIMEOUT_MS / 1000 + 5)
    finally:
        await conn.close()
    if response.error_code != ErrorCode.none:
        raise CommandError(f"the controller refused the election: {response.error_code.name}")
    kind = args.election_type.upper()
    succeeded, noop, failed = [], [], []
    for topic in response.replica_election_results:
        for p in topic.partition_result:
            name = f"{topic.topic}-{p.partition_id}"
            if p.error_code == ErrorCode.none:
                succeeded.append(name)
            elif p.error_code == ErrorCode.election_not_needed:
                noop.append(name)
            else:
                detail = f": {p.error_message}" if p.error_message else ""
                failed.append(f"{name}: {p.error_code.name.upper()}{detail}")
    if succeeded:
        print(
            f"Successfully completed leader election ({kind}) for partitions {', '.join(succeeded)}"
        )
    if noop:
        print(f"Valid replica already elected for partitions {', '.join(noop)}")
    for line in failed:
        print(f"Error completing leader election ({kind}) for partition: {line}")
    if failed:
        raise CommandError(f"{len(failed)} replica(s) could not be elected")
    return 0


def _main(args: argparse.Namespace) -> int:
    if args.all_topic_partitions == (args.topic is not None):
        print(
            "replog: give either --all-topic-partitions or --topic (with --partition)",
            file=sys.stderr,
        )
        return 2
    if args.topic is not None and args.partition is None:
        print("replog: --topic needs --partition", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_run(args))
    except (CommandError, ConnectionError, TimeoutError, OSError) as exc:
        print(f"replog: Error while executing leader election command: {exc}", file=sys.stderr)
        return 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("elect-leaders", help="preferred or unclean leader election (KIP-460)")
    p.add_argument("--bootstrap-server", required=True)
    p.add_argument("--election-type", required=True, type=str.lower, choices=tuple(ELECTION_TYPES))
    p.add_argument("--topic")
    p.add_argument("--partition", type=int)
    p.add_argument("--all-topic-partitions", action="store_true")
    p.set_defaults(func=_main)
