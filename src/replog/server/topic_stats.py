"""Kafka's ``BrokerTopicStats``: per-topic message and byte counts, as plain counters.

The handlers count here (no metrics library below the exporter); ``server.metrics``
reads the counts at scrape time.

Concurrency: event loop only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class TopicCounts:
    messages_in: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    """Bytes returned to consumers (Kafka ``BytesOutPerSec``: followers not counted)."""
    replication_bytes_out: int = 0
    """Bytes returned to followers (Kafka ``ReplicationBytesOutPerSec``)."""
    failed_produce_requests: int = 0
    failed_fetch_requests: int = 0


class BrokerTopicStats:
    def __init__(self) -> None:
        self.topics: dict[str, TopicCounts] = {}

    def of(self, topic: str) -> TopicCounts:
        counts = self.topics.get(topic)
        if counts is None:
            counts = self.topics[topic] = TopicCounts()
        return counts

    def record_append(self, topic: str, messages: int, nbytes: int) -> None:
        counts = self.of(topic)
        counts.messages_in += messages
        counts.bytes_in += nbytes

    def record_fetch(self, topic: str, nbytes: int, *, follower: bool) -> None:
        counts = self.of(topic)
        if follower:
            counts.replication_bytes_out += nbytes
        else:
            counts.bytes_out += nbytes

    def forget(self, topic: str) -> None:
        """A deleted topic's counts go (Kafka ``removeMetrics``)."""
        self.topics.pop(topic, None)
