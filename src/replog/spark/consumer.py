"""Task-side reading of one offset range into Arrow record batches, with confluent-kafka.

Runs inside a Spark Python worker. Each call owns a private ``Consumer`` that is
``assign()``-ed to one topic-partition at an explicit offset: no group membership, no
offset commits, ``auto.offset.reset=error`` so a deleted start offset is noticed rather
than silently skipped. Records come out as ``pyarrow.RecordBatch`` in the exact column
layout of Spark's Kafka source.

Concurrency: a generator used by one thread; the consumer is closed when it finishes or
is closed early.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa

from replog.spark.metadata import DataLossError
from replog.spark.offsets import OffsetRange

log = logging.getLogger("replog.spark")

#: Rows per Arrow batch handed to Spark.
BATCH_ROWS = 8192

#: librdkafka timestamp types -> Kafka's TimestampType ids, as Spark reports them.
_TIMESTAMP_TYPE = {0: -1, 1: 0, 2: 1}


@dataclass(frozen=True)
class ReadSettings:
    """What a task needs to read a range: picklable, shipped with each input partition."""

    bootstrap_servers: str
    client_config: Mapping[str, str]
    fail_on_data_loss: bool
    include_headers: bool
    poll_timeout_ms: int
    isolation_level: str = "read_uncommitted"


def consumer_config(settings: ReadSettings) -> dict[str, object]:
    """A plain assign-only consumer: the group id is required by the client, never joined.

    Its ``isolation.level`` is the source's (librdkafka's own default would be
    read_committed; Kafka's and Spark's is read_uncommitted): under read_committed,
    librdkafka fetches up to the last stable offset and drops the records of aborted
    transactions, using the aborted transactions the Fetch response lists, as Kafka's
    consumer does. Control records (transaction markers) are never handed out either way,
    so offsets have gaps; :func:`read_range` reads by offset, not by count."""
    config: dict[str, object] = dict(settings.client_config)
    config.update(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "group.id": "replog-spark-reader",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "enable.partition.eof": True,
            "isolation.level": settings.isolation_level,
        }
    )
    return config


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow form of the source's Spark schema (what ``to_arrow_schema`` yields)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
        fields.append(pa.field("headers", pa.list_(pa.field("element", header))))
    return pa.schema(fields)


class _Columns:
    """Column buffers for one batch of records of a single topic-partition."""

    def __init__(self, schema: pa.Schema, topic: str, partition: int, headers: bool) -> None:
        self.schema = schema
        self.topic = topic
        self.partition = partition
        self.with_headers = headers
        self.clear()

    def clear(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.types: list[int] = []
        self.headers: list[list[dict[str, object]] | None] = []

    def append(self, message: object) -> None:
        ts_type, ts = message.timestamp()  # type: ignore[attr-defined]
        self.keys.append(message.key())  # type: ignore[attr-defined]
        self.values.append(message.value())  # type: ignore[attr-defined]
        self.offsets.append(message.offset())  # type: ignore[attr-defined]
        self.timestamps.append(ts * 1000)
        self.types.append(_TIMESTAMP_TYPE.get(ts_type, -1))
        if self.with_headers:
            hs = message.headers()  # type: ignore[attr-defined]
            self.headers.append([{"key": k, "value": v} for k, v in hs] if hs else [])

    def __len__(self) -> int:
        return len(self.offsets)

    def batch(self) -> pa.RecordBatch:
        n = len(self.offsets)
        arrays = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.array([self.topic] * n, pa.string()),
            pa.array([self.partition] * n, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            pa.array(self.timestamps, pa.timestamp("us", tz="UTC")),
            pa.array(self.types, pa.int32()),
        ]
        if self.with_headers:
            arrays.append(pa.array(self.headers, self.schema.field("headers").type))
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        self.clear()
        return batch


def read_range(rng: OffsetRange, settings: ReadSettings) -> Iterator[pa.RecordBatch]:
    """Every committed record of ``rng`` in offset order, as Arrow batches.

    Records deleted before they could be read raise :class:`DataLossError` when
    ``failOnDataLoss`` is set, otherwise they are skipped with a warning. No record for
    ``kafkaConsumer.pollTimeoutMs`` raises ``TimeoutError``.
    """
    from confluent_kafka import Consumer, KafkaError, KafkaException
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    if rng.size <= 0:
        return
    schema = arrow_schema(settings.include_headers)
    columns = _Columns(schema, rng.topic, rng.partition, settings.include_headers)
    consumer = Consumer(consumer_config(settings))
    reset_codes = {KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE}
    try:
        next_offset = rng.from_offset
        consumer.assign([KafkaTopicPartition(rng.topic, rng.partition, next_offset)])
        last_progress = time.monotonic()
        while next_offset < rng.until_offset:
            messages = consumer.consume(
                num_messages=min(BATCH_ROWS, rng.until_offset - next_offset), timeout=1.0
            )
            if not messages:
                if (time.monotonic() - last_progress) * 1000 > settings.poll_timeout_ms:
                    next_offset = _after_stall(consumer, rng, next_offset, settings)
                    last_progress = time.monotonic()
                continue
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        # At the end of what can be read (the high watermark, or the
                        # last stable offset under read_committed): past markers and
                        # aborted records the range's tail may hold no record to hand out.
                        next_offset = max(next_offset, message.offset())
                        continue
                    if error.code() in reset_codes:
                        next_offset = _skip_lost(consumer, rng, next_offset, settings)
                        break
                    raise KafkaException(error)
                offset = message.offset()
                if offset >= rng.until_offset:
                    next_offset = rng.until_offset
                    break
                if offset > next_offset:
                    _check_gap(consumer, rng, next_offset, offset, settings)
                columns.append(message)
                next_offset = offset + 1
            last_progress = time.monotonic()
            if len(columns) >= BATCH_ROWS:
                yield columns.batch()
        if len(columns):
            yield columns.batch()
    finally:
        consumer.close()


def _watermarks(consumer: object, rng: OffsetRange) -> tuple[int, int]:
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    low, high = consumer.get_watermark_offsets(  # type: ignore[attr-defined]
        KafkaTopicPartition(rng.topic, rng.partition), timeout=30.0, cached=False
    )
    return int(low), int(high)


def _lost(rng: OffsetRange, first: int, last: int, why: str, settings: ReadSettings) -> None:
    message = f"records {first}..{last} of {rng.topic}-{rng.partition} {why}"
    if settings.fail_on_data_loss:
        raise DataLossError(
            f"{message}. Set option failOnDataLoss=false to skip lost records with a warning."
        )
    log.warning("replog source: %s (failOnDataLoss=false: skipping ahead)", message)


_DELETED = "were deleted (retention) before they were read"


def _skip_lost(consumer: object, rng: OffsetRange, next_offset: int, settings: ReadSettings) -> int:
    """The next offset is out of the log's range: report the loss and return where to resume."""
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    low, high = _watermarks(consumer, rng)
    if low <= next_offset:
        _lost(
            rng,
            next_offset,
            rng.until_offset - 1,
            f"are beyond the log end {high} (log truncated or topic recreated?)",
            settings,
        )
        return rng.until_offset
    resume = min(low, rng.until_offset)
    _lost(rng, next_offset, resume - 1, _DELETED, settings)
    if resume < rng.until_offset:
        consumer.assign([KafkaTopicPartition(rng.topic, rng.partition, resume)])  # type: ignore[attr-defined]
    return resume


def _check_gap(
    consumer: object, rng: OffsetRange, expected: int, got: int, settings: ReadSettings
) -> None:
    """A jump in offsets is loss only if the log start moved past ``expected``."""
    low, _ = _watermarks(consumer, rng)
    if low > expected:
        _lost(rng, expected, min(low, got) - 1, _DELETED, settings)


def _after_stall(
    consumer: object, rng: OffsetRange, next_offset: int, settings: ReadSettings
) -> int:
    """Nothing arrived for the poll timeout: the log was truncated below the range end, or
    the broker is stuck."""
    _, high = _watermarks(consumer, rng)
    if high <= next_offset:
        _lost(rng, next_offset, rng.until_offset - 1, "are gone: the log was truncated", settings)
        return rng.until_offset
    raise TimeoutError(
        f"no records from {rng.topic}-{rng.partition} at offset {next_offset} within "
        f"kafkaConsumer.pollTimeoutMs={settings.poll_timeout_ms}"
    )
