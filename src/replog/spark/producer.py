"""Task-side writing of Arrow record batches to replog with an idempotent producer.

Columns, as in Spark's Kafka sink: ``value`` (binary or string, required), ``key``
(binary or string, optional), ``topic`` (string; the ``topic`` option wins over it),
``partition`` (int, optional: otherwise the key decides), ``headers``
(``array<struct<key string, value binary>>``, optional). Other columns are ignored.

Each call owns one ``Producer`` (``enable.idempotence=true``, ``acks=all``), flushes it
before returning, and raises if any record failed delivery, so the Spark task fails.
Concurrency: used by one thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa

#: How long a task waits for outstanding deliveries before failing.
FLUSH_TIMEOUT_S = 300.0


class DeliveryError(RuntimeError):
    """At least one record was not acknowledged by the broker."""


@dataclass(frozen=True)
class WriteSettings:
    """What a write task needs: picklable."""

    bootstrap_servers: str
    topic: str | None
    client_config: Mapping[str, str]


def producer_config(settings: WriteSettings) -> dict[str, object]:
    """An idempotent producer; ``kafka.``-prefixed options may tune batching and the like."""
    config: dict[str, object] = dict(settings.client_config)
    config.update(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
        }
    )
    return config


def _as_bytes(column: pa.Array | None, n: int) -> list[bytes | None]:
    if column is None:
        return [None] * n
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return [None if v is None else v.encode() for v in column.to_pylist()]
    return column.to_pylist()


def write_batches(batches: Iterable[pa.RecordBatch], settings: WriteSettings) -> int:
    """Produce every row, flush, and return the number of records acknowledged."""
    from confluent_kafka import Producer

    producer = Producer(producer_config(settings))
    failures: list[str] = []
    failed = 0

    def on_delivery(error: object, _message: object) -> None:
        nonlocal failed
        if error is not None:
            failed += 1
            if len(failures) < 3:
                failures.append(str(error))

    sent = 0
    for batch in batches:
        for topic, key, value, partition, headers in _rows(batch, settings.topic):
            kwargs: dict[str, object] = {"key": key, "value": value, "on_delivery": on_delivery}
            if partition is not None:
                kwargs["partition"] = partition
            if headers:
                kwargs["headers"] = [(h["key"], h["value"]) for h in headers]
            while True:
                try:
                    producer.produce(topic, **kwargs)
                    break
                except BufferError:
                    producer.poll(0.05)
            sent += 1
        producer.poll(0)
        if failures:
            break
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    if failures or remaining:
        raise DeliveryError(
            f"replog sink: {failed} of {sent} records failed delivery, {remaining} still "
            f"unacknowledged after flush; first errors: {failures}"
        )
    return sent


def _rows(
    batch: pa.RecordBatch, topic_option: str | None
) -> Iterator[tuple[str, bytes | None, bytes | None, int | None, list[dict] | None]]:
    n = batch.num_rows
    names = batch.schema.names

    def column(name: str) -> pa.Array | None:
        return batch.column(names.index(name)) if name in names else None

    values = _as_bytes(column("value"), n)
    keys = _as_bytes(column("key"), n)
    topic_column = column("topic")
    if topic_option is not None:
        topics: list[str | None] = [topic_option] * n
    elif topic_column is not None:
        topics = topic_column.to_pylist()
    else:
        topics = [None] * n
    partition_column = column("partition")
    partitions = partition_column.to_pylist() if partition_column is not None else [None] * n
    header_column = column("headers")
    headers = header_column.to_pylist() if header_column is not None else [None] * n
    for i in range(n):
        topic = topics[i]
        if topic is None:
            raise ValueError(
                "replog sink: a row has a null 'topic' column and no option 'topic' is set"
            )
        yield topic, keys[i], values[i], partitions[i], headers[i]
