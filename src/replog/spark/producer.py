"""Task-side writing of Arrow record batches to replog with an idempotent producer.

Columns, as in Spark's Kafka sink: ``value`` (binary or string, required), ``key``
(binary or string, optional), ``topic`` (string; the ``topic`` option wins over it),
``partition`` (int, optional: otherwise the key decides), ``headers``
(``array<struct<key string, value binary>>``, optional). Other columns are ignored.

Each call owns one ``Producer`` (``enable.idempotence=true``, ``acks=all``), flushes it
before returning, and raises if any record failed delivery, so the Spark task fails.

Rows go to librdkafka a run at a time, not one Python call per row: :func:`plan_runs`
cuts each Arrow batch into runs bound for one topic and one partition (or for the
partitioner: Kafka's murmur2 of the key, sticky for null keys), keeping row order within
every partition, and each run is queued with one ``produce_batch`` call. Rows that carry
headers take one ``produce`` call each (``produce_batch`` has no headers). Delivery
reports come back only for failures (``delivery.report.only.error``), so a successful
record costs no Python callback either.

Concurrency: used by one thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

#: How long a task waits for outstanding deliveries before failing.
FLUSH_TIMEOUT_S = 300.0

#: At most this many rows per ``produce_batch`` call.
CHUNK_ROWS = 10_000

#: librdkafka's ``RD_KAFKA_PARTITION_UA``: the configured partitioner picks the partition.
UNASSIGNED = -1


class DeliveryError(RuntimeError):
    """At least one record was not acknowledged by the broker."""


@dataclass(frozen=True)
class WriteSettings:
    """What a write task needs: picklable."""

    bootstrap_servers: str
    topic: str | None
    client_config: Mapping[str, str]
    #: Set for ``deliveryGuarantee=exactlyOnce`` (:mod:`replog.spark.exactly_once`).
    transactional_id_prefix: str | None = None


def producer_config(settings: WriteSettings) -> dict[str, object]:
    """An idempotent producer; ``kafka.``-prefixed options may tune batching and the like.

    The partitioner defaults to Java Kafka's (``murmur2_random``: murmur2 of the key, a
    sticky partition for null keys), so a keyed row lands where Spark's own Kafka sink
    would put it."""
    config: dict[str, object] = {"partitioner": "murmur2_random"}
    config.update(settings.client_config)
    config.update(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            "delivery.report.only.error": True,
        }
    )
    return config


@dataclass(frozen=True)
class Run:
    """Rows of one Arrow batch for one topic and one partition (:data:`UNASSIGNED`: the
    partitioner decides), in row order; a batch's runs, sent in order, keep every
    partition's rows in row order."""

    topic: str
    partition: int
    rows: pa.RecordBatch


def plan_runs(batch: pa.RecordBatch, topic_option: str | None) -> Iterator[Run]:
    """Cut ``batch`` into runs such that sending them in order keeps every partition's
    rows in row order. Pure: no I/O."""
    if batch.num_rows == 0:
        return
    for topic, rows in _by_topic(batch, topic_option):
        yield from _by_partition(topic, rows)


def _column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    index = batch.schema.get_field_index(name)
    return batch.column(index) if index >= 0 else None


def _by_topic(
    batch: pa.RecordBatch, topic_option: str | None
) -> Iterator[tuple[str, pa.RecordBatch]]:
    if topic_option is not None:
        yield topic_option, batch
        return
    column = _column(batch, "topic")
    if column is None or column.null_count:
        raise ValueError(
            "replog sink: a row has a null 'topic' column and no option 'topic' is set"
        )
    topics = pc.unique(column).to_pylist()
    if len(topics) == 1:
        yield topics[0], batch
        return
    for topic in topics:  # topics are distinct partitions: their relative order is free
        yield topic, batch.filter(pc.equal(column, topic))


def _by_partition(topic: str, batch: pa.RecordBatch) -> Iterator[Run]:
    column = _column(batch, "partition")
    if column is None or column.null_count == len(column):
        yield Run(topic, UNASSIGNED, batch)
        return
    if column.null_count == 0:
        partitions = pc.unique(column).to_pylist()
        if len(partitions) == 1:
            yield Run(topic, partitions[0], batch)
            return
        for partition in partitions:  # distinct partitions: each keeps its row order
            yield Run(topic, partition, batch.filter(pc.equal(column, partition)))
        return
    # Some rows name a partition, others leave it to the partitioner, which may pick the
    # same one: only runs of consecutive rows keep the row order exactly.
    values = column.to_pylist()
    start = 0
    for end in range(1, len(values) + 1):
        if end == len(values) or values[end] != values[start]:
            partition = values[start]
            yield Run(
                topic,
                UNASSIGNED if partition is None else partition,
                batch.slice(start, end - start),
            )
            start = end


def messages(run: Run) -> tuple[list[dict[str, Any]], bool]:
    """The run's rows as confluent-kafka message dicts, and whether any has headers (then
    they need ``produce``, one call per row)."""
    values = _column(run.rows, "value")
    if values is None:
        raise ValueError("replog sink: the DataFrame needs a 'value' column")
    value_list = values.to_pylist()
    keys = _column(run.rows, "key")
    if keys is None:
        out = [{"value": v} for v in value_list]
    else:
        out = [{"key": k, "value": v} for k, v in zip(keys.to_pylist(), value_list, strict=True)]
    headers = _column(run.rows, "headers")
    if headers is None or not pc.max(pc.list_value_length(headers)).as_py():
        return out, False
    for message, row_headers in zip(out, headers.to_pylist(), strict=True):
        if row_headers:
            message["headers"] = [(h["key"], h["value"]) for h in row_headers]
    return out, True


class DeliveryReport:
    """Counts the records librdkafka reports as failed (with the first few errors)."""

    def __init__(self) -> None:
        self.failed = 0
        self.errors: list[str] = []

    def __call__(self, error: object, _message: object) -> None:
        if error is None:  # a success, in case a kafka.* option asked for those too
            return
        self.failed += 1
        if len(self.errors) < 3:
            self.errors.append(str(error))


def write_batches(batches: Iterable[pa.RecordBatch], settings: WriteSettings) -> int:
    """Produce every row, flush, and return the number of records acknowledged."""
    from confluent_kafka import Producer

    config = producer_config(settings)
    producer = Producer(config)
    report = DeliveryReport()
    sent, _ = queue_batches(producer, config, batches, settings.topic, report)
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    if report.failed or remaining:
        raise DeliveryError(
            f"replog sink: {report.failed} of {sent} records failed delivery, {remaining} "
            f"still unacknowledged after flush; first errors: {report.errors}"
        )
    return sent


def queue_batches(
    producer: Any,
    config: Mapping[str, object],
    batches: Iterable[pa.RecordBatch],
    topic_option: str | None,
    report: DeliveryReport,
) -> tuple[int, set[str]]:
    """Queue every row in librdkafka (a run per ``produce_batch`` call, at most as many
    rows as the queue holds); stop early once a delivery failed. Returns how many rows
    were queued and to which topics. The caller flushes (or commits the transaction)."""
    queue_limit = int(str(config.get("queue.buffering.max.messages", 100_000)))
    chunk = max(1, min(CHUNK_ROWS, queue_limit))
    sent = 0
    topics: set[str] = set()
    for batch in batches:
        for run in plan_runs(batch, topic_option):
            rows, with_headers = messages(run)
            topics.add(run.topic)
            if with_headers:
                _produce_each(producer, run, rows, report)
            else:
                for start in range(0, len(rows), chunk):
                    part = rows[start : start + chunk]
                    while len(producer) + len(part) > queue_limit:  # room for all of it
                        producer.poll(0.05)
                    _produce_batch(producer, run, part, report)
            sent += len(rows)
        producer.poll(0)
        if report.failed:
            break
    return sent, topics


def _produce_batch(
    producer: Any, run: Run, rows: list[dict[str, Any]], on_delivery: Callable
) -> None:
    """Queue ``rows`` with one call; on a full queue, wait and queue the rest again.

    The caller makes room for every row first (by count); the queue's byte limit
    (``queue.buffering.max.kbytes``) may still refuse a suffix, queued again in order. A
    row refused before one accepted would be reordered by a retry: the task fails
    instead (at-least-once holds, Spark runs it again)."""
    from confluent_kafka import KafkaError

    while rows:
        queued = producer.produce_batch(
            run.topic, rows, partition=run.partition, on_delivery=on_delivery
        )
        if queued == len(rows):
            return
        first = next(i for i, row in enumerate(rows) if "_error" in row)
        rest = rows[first:]
        errors = [row.get("_error") for row in rest]
        if not all(e is not None and e.code() == KafkaError._QUEUE_FULL for e in errors):
            # Not queued for another reason, or a hole that a retry would reorder.
            bad = next(
                (e for e in errors if e is not None and e.code() != KafkaError._QUEUE_FULL), None
            )
            raise DeliveryError(
                f"replog sink: {sum(e is not None for e in errors)} records for "
                f"{run.topic} could not be queued: {bad or 'queue full out of order'}"
            )
        for row in rest:
            del row["_error"]
        producer.poll(0.05)
        rows = rest


def _produce_each(
    producer: Any, run: Run, rows: list[dict[str, Any]], on_delivery: Callable
) -> None:
    partition = {} if run.partition == UNASSIGNED else {"partition": run.partition}
    for row in rows:
        while True:
            try:
                producer.produce(run.topic, on_delivery=on_delivery, **partition, **row)
                break
            except BufferError:
                producer.poll(0.05)
