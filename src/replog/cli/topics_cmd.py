"""``replog topics create|delete|describe|list|alter``, like kafka-topics.sh.

``alter --topic T --partitions N`` adds partitions (CreatePartitions v3); Kafka never
removes partitions, so a lower count is refused (INVALID_PARTITIONS)."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import sys

from kio.schema.create_partitions.v3 import request as partitions_req
from kio.schema.create_topics.v4 import request as create_req
from kio.schema.delete_topics.v3 import request as delete_req
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as metadata_req
from kio.static.primitive import i32Timedelta

from replog.protocol.client import KafkaConnection
from replog.protocol.kafka_uuid import uuid_to_string


def _timeout(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


async def _connect(bootstrap: str) -> KafkaConnection:
    last: Exception | None = None
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        conn = KafkaConnection(host or "127.0.0.1", int(port), client_id="replog-topics")
        try:
            await conn.connect()
            return conn
        except OSError as exc:
            last = exc
    raise ConnectionError(f"cannot reach any of {bootstrap}: {last}")


async def _metadata(conn: KafkaConnection, topics: list[str] | None):
    body = metadata_req.MetadataRequest(
        topics=None
        if topics is None
        else tuple(metadata_req.MetadataRequestTopic(name=t, topic_id=None) for t in topics),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    return await conn.request(body)


async def _run(args: argparse.Namespace) -> int:
    conn = await _connect(args.bootstrap_server)
    try:
        if args.action == "create":
            configs = tuple(
                create_req.CreatableTopicConfig(name=k, value=v)
                for k, v in (item.split("=", 1) for item in (args.config or []))
            )
            body = create_req.CreateTopicsRequest(
                topics=(
                    create_req.CreatableTopic(
                        name=args.topic,
                        num_partitions=args.partitions,
                        replication_factor=args.replication_factor,
                        assignments=(),
                        configs=configs,
                    ),
                ),
                timeout=_timeout(30000),
                validate_only=False,
            )
            response = await conn.request(body, timeout_s=40)
            result = response.topics[0]
            if result.error_code != ErrorCode.none:
                print(
                    f"Error while creating topic {args.topic}: {result.error_code.name}: "
                    f"{result.error_message or ''}",
                    file=sys.stderr,
                )
                return 1
            print(f"Created topic {args.topic}.")
        elif args.action == "delete":
            body = delete_req.DeleteTopicsRequest(
                topic_names=(args.topic,), timeout=_timeout(30000)
            )
            response = await conn.request(body, timeout_s=40)
            result = response.responses[0]
            if result.error_code != ErrorCode.none:
                print(
                    f"Error while deleting topic {args.topic}: {result.error_code.name}",
                    file=sys.stderr,
                )
                return 1
            print(f"Deleted topic {args.topic}.")
        elif args.action == "alter":
            if args.partitions is None:
                print("replog: topics alter needs --partitions", file=sys.stderr)
                return 2
            body = partitions_req.CreatePartitionsRequest(
                topics=(
                    partitions_req.CreatePartitionsTopic(
                        name=args.topic, count=args.partitions, assignments=None
                    ),
                ),
                timeout=_timeout(30000),
                validate_only=False,
            )
            response = await conn.request(body, timeout_s=40)
            result = response.results[0]
            if result.error_code != ErrorCode.none:
                print(
                    f"Error while executing topic command : {result.error_message or ''} "
                    f"({result.error_code.name.upper()})",
                    file=sys.stderr,
                )
                return 1
            print(f"Topic {args.topic} now has {args.partitions} partitions.")
        elif args.action == "list":
            response = await _metadata(conn, None)
            for topic in sorted(t.name for t in response.topics):
                print(topic)
        else:
            response = await _metadata(conn, [args.topic] if args.topic else None)
            status = 0
            for topic in sorted(response.topics, key=lambda t: t.name):
                if topic.error_code != ErrorCode.none:
                    print(f"Topic: {topic.name}\tError: {topic.error_code.name}", file=sys.stderr)
                    status = 1
                    continue
                rf = len(topic.partitions[0].replica_nodes) if topic.partitions else 0
                print(
                    f"Topic: {topic.name}\tTopicId: {uuid_to_string(topic.topic_id)}"
                    f"\tPartitionCount: {len(topic.partitions)}\tReplicationFactor: {rf}"
                )
                for p in sorted(topic.partitions, key=lambda p: p.partition_index):
                    print(
                        f"\tTopic: {topic.name}\tPartition: {p.partition_index}\tLeader: {p.leader_id}"
                        f"\tLeaderEpoch: {p.leader_epoch}"
                        f"\tReplicas: {','.join(map(str, p.replica_nodes))}"
                        f"\tIsr: {','.join(map(str, p.isr_nodes))}"
                    )
            return status
        return 0
    finally:
        await conn.close()


def _main(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_run(args))
    except (ConnectionError, TimeoutError) as exc:
        print(f"replog: {exc}", file=sys.stderr)
        return 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    topics = sub.add_parser("topics", help="create, delete, describe and list topics")
    actions = topics.add_subparsers(dest="action", required=True)
    for name in ("create", "delete", "describe", "list", "alter"):
        p = actions.add_parser(name)
        p.add_argument("--bootstrap-server", required=True)
        if name != "list":
            p.add_argument("--topic", required=name != "describe")
        if name == "create":
            p.add_argument("--partitions", type=int, default=-1)
            p.add_argument("--replication-factor", type=int, default=-1)
            p.add_argument("--config", action="append", metavar="KEY=VALUE")
        if name == "alter":
            p.add_argument("--partitions", type=int, help="the new partition count")
        p.set_defaults(func=_main)
