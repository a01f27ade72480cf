"""Test helpers for consumer groups through real clients."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaException, TopicPartition


def commit(consumer: Consumer, offsets: list[TopicPartition], deadline_s: float = 30):
    """Commit synchronously. The first commit of a cluster creates ``__consumer_offsets``
    and finds no coordinator until it has leaders: a retriable error, retried until
    ``deadline_s``."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            if time.monotonic() > deadline or not exc.args[0].retriable():
                raise
            time.sleep(0.2)


def commit_offsets(bootstrap_servers: str, group: str, offsets: list[TopicPartition]) -> None:
    """Commit ``offsets`` for ``group`` from a consumer outside group management."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap_servers, "group.id": group, "enable.auto.commit": False}
    )
    try:
        commit(consumer, offsets)
    finally:
        consumer.close()
