"""Admin-client helpers of the demo: create topics, wait for leaders, read leaders and ends.

All of them are blocking calls through confluent-kafka's ``AdminClient``; used from the
demo's main thread only.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


def admin_client(bootstrap_servers: str, logger: logging.Logger | None = None) -> Any:
    """An admin client; librdkafka's own log lines go to ``logger`` when given."""
    from confluent_kafka.admin import AdminClient

    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers,
        "client.id": "replog-demo-admin",
    }
    if logger is not None:
        config["logger"] = logger
    return AdminClient(config)


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str]


def create_topics(admin: Any, specs: Iterable[TopicSpec], timeout_s: float = 60) -> None:
    from confluent_kafka.admin import NewTopic

    futures = admin.create_topics(
        [
            NewTopic(
                s.name,
                num_partitions=s.partitions,
                replication_factor=s.replication_factor,
                config=dict(s.configs),
            )
            for s in specs
        ],
        request_timeout=timeout_s,
    )
    for future in futures.values():
        future.result(timeout=timeout_s)


@dataclass(frozen=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


def describe(admin: Any, topics: Iterable[str], timeout_s: float = 10) -> list[PartitionInfo]:
    out = []
    for name in topics:
        metadata = admin.list_topics(topic=name, timeout=timeout_s)
        topic = metadata.topics[name]
        if topic.error is not None:
            raise RuntimeError(f"topic {name}: {topic.error}")
        for p in sorted(topic.partitions):
            part = topic.partitions[p]
            out.append(
                PartitionInfo(name, p, int(part.leader), tuple(part.replicas), tuple(part.isrs))
            )
    return out


def wait_for_leaders(admin: Any, topics: list[str], timeout_s: float = 60) -> list[PartitionInfo]:
    """Until every partition of ``topics`` has a leader; returns the final description."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            parts = describe(admin, topics)
            if parts and all(p.leader >= 0 for p in parts):
                return parts
        except Exception as exc:  # metadata not there yet
            last = exc
        time.sleep(0.2)
    raise TimeoutError(f"partitions of {topics} have no leader after {timeout_s} s ({last})")


def busiest_leader(parts: Iterable[PartitionInfo]) -> tuple[int, int]:
    """(broker leading the most partitions, how many); ties go to the lowest id."""
    counts = Counter(p.leader for p in parts if p.leader >= 0)
    if not counts:
        raise RuntimeError("no partition has a leader")
    broker, n = min(counts.items(), key=lambda item: (-item[1], item[0]))
    return broker, n


def log_end_offsets(
    bootstrap_servers: str,
    topic: str,
    partitions: int,
    logger: logging.Logger | None = None,
    attempts: int = 10,
) -> tuple[dict[int, int], dict[int, int]]:
    """(earliest, latest) offset of each partition of ``topic``.

    librdkafka's ``list_offsets`` does not refresh its metadata on NOT_LEADER_FOR_PARTITION,
    so after a leader change a long-lived admin client keeps asking the old leader: each
    attempt uses a fresh client.
    """
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    for attempt in range(attempts):
        admin = admin_client(bootstrap_servers, logger)
        try:
            result = []
            for spec in (OffsetSpec.earliest(), OffsetSpec.latest()):
                futures = admin.list_offsets(
                    {TopicPartition(topic, p): spec for p in range(partitions)},
                    request_timeout=30,
                )
                result.append({tp.partition: int(f.result().offset) for tp, f in futures.items()})
            return result[0], result[1]
        except KafkaException:
            if attempt == attempts - 1:
                raise
            time.sleep(0.5)
    raise AssertionError("unreachable")
