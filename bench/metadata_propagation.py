"""How long after CreateTopics / CreatePartitions returns until every broker's metadata
shows the change.

    .venv/bin/python bench/metadata_propagation.py [--brokers 4] [--rounds 100]

A ``--brokers`` cluster. Each round sends, through the project's protocol client, a
CreateTopics (a new topic, 2 partitions, RF 3) or a CreatePartitions (that topic to 6),
alternately, to broker ``round % brokers``; from the moment the answer arrives, every
broker is asked Metadata (v12) on its own open connection, back to back, until its
answer shows every partition of the change with a leader. A round's window is the
latest broker's first showing answer (0 when every broker's first answer already shows
it); ``stale`` counts rounds where some broker's first answer did not.

Prints one JSON line per kind: rounds, stale, p50 / p99 / max of the window in ms, and
the p50 / p99 of the call itself (request sent to answer read), in ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from datetime import timedelta

import common
from kio.schema.errors import ErrorCode

from replog.protocol.apis import ApiKey, make, nested, request_schema
from replog.protocol.client import KafkaConnection

CREATE_TOPICS_VERSION = 7
CREATE_PARTITIONS_VERSION = 3
METADATA_VERSION = 12


def create_topic_request(topic: str, partitions: int, rf: int) -> object:
    cls = request_schema(ApiKey.CREATE_TOPICS, CREATE_TOPICS_VERSION)
    entry = make(
        nested(cls, "CreatableTopic"),
        name=topic,
        num_partitions=partitions,
        replication_factor=rf,
        assignments=(),
        configs=(),
    )
    return make(cls, topics=(entry,), timeout=timedelta(seconds=30), validate_only=False)


def create_partitions_request(topic: str, count: int) -> object:
    cls = request_schema(ApiKey.CREATE_PARTITIONS, CREATE_PARTITIONS_VERSION)
    entry = make(nested(cls, "CreatePartitionsTopic"), name=topic, count=count, assignments=None)
    return make(cls, topics=(entry,), timeout=timedelta(seconds=30), validate_only=False)


def metadata_request(topic: str) -> object:
    cls = request_schema(ApiKey.METADATA, METADATA_VERSION)
    return make(
        cls,
        topics=(make(nested(cls, "MetadataRequestTopic"), name=topic, topic_id=None),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


async def shows(conn: KafkaConnection, topic: str, partitions: int) -> bool:
    """Whether this broker's Metadata names ``partitions`` partitions of ``topic``, led."""
    answer = await conn.request(metadata_request(topic))
    [t] = answer.topics
    if t.error_code != ErrorCode.none:
        return False
    led = {p.partition_index for p in t.partitions if p.leader_id >= 0}
    return led >= set(range(partitions))


async def window(
    conns: list[KafkaConnection], topic: str, partitions: int, start: float
) -> tuple[float, bool]:
    """(seconds from ``start`` until the last broker showed it, whether some broker's
    first answer did not)."""
    stale = False

    async def one(conn: KafkaConnection) -> float:
        nonlocal stale
        first = True
        while not await shows(conn, topic, partitions):
            stale |= first
            first = False
        return 0.0 if first else time.monotonic() - start

    seen = await asyncio.gather(*(one(c) for c in conns))
    return max(seen), stale


async def run(ports: list[int], rounds: int) -> dict[str, dict]:
    conns = [KafkaConnection("127.0.0.1", p, client_id="bench-metadata") for p in ports]
    for conn in conns:
        await conn.connect()
    windows: dict[str, list[float]] = {"create_topics": [], "create_partitions": []}
    calls: dict[str, list[float]] = {"create_topics": [], "create_partitions": []}
    stale = {"create_topics": 0, "create_partitions": 0}
    topic = ""
    try:
        for i in range(rounds):
            receiver = conns[i % len(conns)]
            sent = time.monotonic()
            if i % 2 == 0:
                kind, topic, partitions = "create_topics", f"prop-{uuid.uuid4().hex[:8]}", 2
                answer = await receiver.request(create_topic_request(topic, partitions, 3))
                errors = [t.error_code for t in answer.topics]
            else:
                kind, partitions = "create_partitions", 6
                answer = await receiver.request(create_partitions_request(topic, partitions))
                errors = [t.error_code for t in answer.results]
            start = time.monotonic()
            calls[kind].append((start - sent) * 1000)
            assert errors == [ErrorCode.none], (kind, answer)
            took, was_stale = await window(conns, topic, partitions, start)
            windows[kind].append(took * 1000)
            stale[kind] += was_stale
    finally:
        for conn in conns:
            await conn.close()
    out = {}
    for kind, values in windows.items():
        values.sort()
        took = sorted(calls[kind])
        out[kind] = {
            "rounds": len(values),
            "stale": stale[kind],
            "p50_ms": round(common.percentile(values, 0.50), 2),
            "p99_ms": round(common.percentile(values, 0.99), 2),
            "max_ms": round(values[-1], 2),
            "call_p50_ms": round(common.percentile(took, 0.50), 2),
            "call_p99_ms": round(common.percentile(took, 0.99), 2),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    with (
        common.work_dir("metadata-propagation") as directory,
        common.replog_cluster(directory, args.brokers) as cluster,
    ):
        ports = [cluster.port(b) for b in cluster.broker_ids]
        results = asyncio.run(run(ports, args.rounds))
    for kind, summary in results.items():
        print(json.dumps({"kind": kind, "brokers": args.brokers, **summary}))


if __name__ == "__main__":
    main()
