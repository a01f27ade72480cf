"""The ``replog`` PySpark data source: batch and streaming reads and writes.

Spark's Python Data Source API (PySpark >= 4.2) drives these classes:

- :class:`ReplogDataSource` is found by name (``format("replog")``) through the top-level
  module ``pyspark_replog``, or registered with ``spark.dataSource.register``.
- Readers plan one input partition per topic-partition offset range on the driver
  (:mod:`replog.spark.offsets`, :mod:`replog.spark.metadata`) and read it in a task
  (:mod:`replog.spark.consumer`), yielding Arrow batches.
- Writers produce each task's rows with an idempotent producer
  (:mod:`replog.spark.producer`), or with ``deliveryGuarantee=exactlyOnce`` in one
  fenced transaction per task (:mod:`replog.spark.exactly_once`). Delivery guarantees
  are in ``README.md`` beside this file.

Concurrency: Spark calls each reader or writer from one thread of one Python worker;
instances are pickled to executors, so broker clients are created lazily and never pickled.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from replog.spark.consumer import ReadSettings, read_range
from replog.spark.exactly_once import TaskTransaction, write_batches_exactly_once
from replog.spark.metadata import BrokerMetadata, report_data_loss
from replog.spark.offsets import (
    OffsetRange,
    PartitionOffsets,
    TopicPartition,
    cap_offsets,
    from_json,
    limit_offsets,
    plan_ranges,
    resolve,
    split_ranges,
    to_json,
)
from replog.spark.options import (
    DeliveryGuarantee,
    OptionError,
    SourceOptions,
    check_read_options,
    normalize,
    parse_sink_options,
    parse_source_options,
)
from replog.spark.producer import WriteSettings, write_batches

log = logging.getLogger("replog.spark")

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


def source_schema(include_headers: bool) -> StructType:
    """Exactly the schema of Spark's Kafka source."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


class ReplogDataSource(DataSource):
    """``format("replog")``: read from and write to a replog (or any Kafka) cluster."""

    @classmethod
    def name(cls) -> str:
        return "replog"

    def schema(self) -> StructType:
        check_read_options(self.options)
        include = normalize(self.options).get("includeheaders", "false").lower() == "true"
        return source_schema(include)

    def reader(self, schema: StructType) -> DataSourceReader:
        return ReplogBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return ReplogStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> ReplogBatchWriter:
        if overwrite:
            raise OptionError(
                "save mode 'overwrite' is not supported by replog: a log is only appended to "
                "(use mode 'append')"
            )
        # A batch write is one "micro-batch" 0 of a query id drawn here, once per write.
        return ReplogBatchWriter(self._write_settings(schema), uuid.uuid4().hex)

    def streamWriter(self, schema: StructType, overwrite: bool) -> ReplogStreamWriter:
        return ReplogStreamWriter(self._write_settings(schema))

    def _write_settings(self, schema: StructType) -> WriteSettings:
        sink = parse_sink_options(self.options)
        check_sink_schema(schema, has_topic_option=sink.topic is not None)
        exactly_once = sink.delivery_guarantee is DeliveryGuarantee.EXACTLY_ONCE
        return WriteSettings(
            sink.bootstrap_servers,
            sink.topic,
            dict(sink.client_config),
            sink.transactional_id_prefix if exactly_once else None,
        )


def check_sink_schema(schema: StructType, *, has_topic_option: bool) -> None:
    """Column checks of Spark's Kafka sink, each a one-line error naming the column."""
    types: dict[str, DataType] = {f.name.lower(): f.dataType for f in schema.fields}
    binary_or_string = (BinaryType, StringType)
    if "value" not in types:
        raise OptionError("replog sink: the DataFrame needs a 'value' column (binary or string)")
    if not isinstance(types["value"], binary_or_string):
        raise OptionError(
            f"replog sink: column 'value' must be binary or string, not {types['value'].simpleString()}"
        )
    if "key" in types and not isinstance(types["key"], binary_or_string):
        raise OptionError(
            f"replog sink: column 'key' must be binary or string, not {types['key'].simpleString()}"
        )
    if "topic" in types and not isinstance(types["topic"], StringType):
        raise OptionError("replog sink: column 'topic' must be a string")
    if "topic" not in types and not has_topic_option:
        raise OptionError("replog sink: set option 'topic' or give the DataFrame a 'topic' column")
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise OptionError("replog sink: column 'partition' must be an int")
    if "headers" in types and not _is_headers_type(types["headers"]):
        raise OptionError(
            "replog sink: column 'headers' must be array<struct<key:string,value:binary>>"
        )


def _is_headers_type(data_type: DataType) -> bool:
    """``array<struct<key:string,value:binary>>``, whatever its nullability."""
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    fields = [(f.name, type(f.dataType)) for f in data_type.elementType.fields]
    return fields == [("key", StringType), ("value", BinaryType)]


class RangePartition(InputPartition):
    """One Spark input partition: an offset range of one topic-partition."""

    def __init__(self, rng: OffsetRange) -> None:
        super().__init__(rng)
        self.range = rng


def _settings(opts: SourceOptions) -> ReadSettings:
    return ReadSettings(
        bootstrap_servers=opts.bootstrap_servers,
        client_config=dict(opts.client_config),
        fail_on_data_loss=opts.fail_on_data_loss,
        include_headers=opts.include_headers,
        poll_timeout_ms=opts.poll_timeout_ms,
        isolation_level=opts.isolation_level.value,
    )


class _MetadataMixin:
    """Lazily created driver-side broker client, dropped when pickled to executors."""

    opts: SourceOptions
    _metadata: BrokerMetadata | None

    @property
    def metadata(self) -> BrokerMetadata:
        if self._metadata is None:
            self._metadata = BrokerMetadata(
                self.opts.bootstrap_servers, self.opts.client_config, self.opts.isolation_level
            )
        return self._metadata

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_metadata"] = None
        return state

    def _committed(self, parts: list[TopicPartition]) -> PartitionOffsets | None:
        """The group's committed offsets when ``startingOffsets=committed``."""
        if self.opts.group_id is None:
            return None
        return self.metadata.committed(self.opts.group_id, parts)


class ReplogBatchReader(_MetadataMixin, DataSourceReader):
    """``spark.read.format("replog")``: from ``startingOffsets`` to ``endingOffsets``."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.settings = _settings(opts)
        self._metadata = None

    def partitions(self) -> list[InputPartition]:
        parts = self.metadata.partitions(self.opts.subscription, self.opts.fail_on_data_loss)
        earliest = self.metadata.earliest(parts)
        latest = self.metadata.latest(parts)
        start = resolve(
            self.opts.starting, "startingOffsets", parts, earliest, latest, self._committed(parts)
        )
        end = resolve(self.opts.ending, "endingOffsets", parts, earliest, latest)
        backwards = sorted(tp for tp in parts if end[tp] < start[tp])
        if backwards:
            t, p = backwards[0]
            raise OptionError(
                f"option 'startingOffsets' ({start[(t, p)]}) is after option 'endingOffsets' "
                f"({end[(t, p)]}) for {t}-{p}"
            )
        ranges, _ = plan_ranges(start, end, {})
        return list(map(RangePartition, split_ranges(ranges, self.opts.min_partitions)))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):
            return iter(())  # Spark's stand-in partition when there is nothing to read
        return read_range(partition.range, self.settings)


class ReplogStreamReader(_MetadataMixin, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("replog")``: micro-batches of offset ranges.

    Offsets are Spark Kafka's JSON (``{"topic": {"0": 42}}``), checkpointed by Spark, so a
    restarted query resumes where it stopped. Topics and partitions are re-listed at every
    ``latestOffset``, so new ones (``subscribePattern``, added partitions) are picked up and
    read from their earliest offset. ``maxOffsetsPerTrigger`` caps the records of a batch.
    """

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.settings = _settings(opts)
        self._metadata = None
        self._available_now: PartitionOffsets | None = None
        self._latest: PartitionOffsets | None = None

    def initialOffset(self) -> dict:
        parts = self.metadata.partitions(self.opts.subscription, self.opts.fail_on_data_loss)
        earliest = self.metadata.earliest(parts)
        latest = self.metadata.latest(parts)
        return to_json(
            resolve(
                self.opts.starting,
                "startingOffsets",
                parts,
                earliest,
                latest,
                self._committed(parts),
            )
        )

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        parts = self.metadata.partitions(self.opts.subscription, self.opts.fail_on_data_loss)
        self._available_now = self.metadata.latest(parts)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = from_json(start)
        parts = self.metadata.partitions(self.opts.subscription, self.opts.fail_on_data_loss)
        latest = self.metadata.latest(parts)
        self._latest = dict(latest)
        if self._available_now is not None:
            latest = cap_offsets(latest, self._available_now)
        new = [tp for tp in latest if tp not in begin]
        base = {**self.metadata.earliest(new), **begin}
        if isinstance(limit, ReadMaxRows):
            latest = limit_offsets(base, latest, limit.max_rows)
        return to_json(latest)

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest is None else to_json(self._latest)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, until = from_json(start), from_json(end)
        new = [tp for tp in until if tp not in begin]
        ranges, losses = plan_ranges(begin, until, self.metadata.earliest(new))
        report_data_loss(losses, self.opts.fail_on_data_loss)
        return list(map(RangePartition, split_ranges(ranges, self.opts.min_partitions)))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):
            return iter(())  # Spark's stand-in partition when there is nothing to read
        return read_range(partition.range, self.settings)

    def commit(self, end: dict) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, never in a consumer group."""

    def stop(self) -> None:
        self._metadata = None


@dataclass
class ReplogCommitMessage(WriterCommitMessage):
    """How many records one write task had acknowledged (exactlyOnce: committed), and
    whether it found its micro-batch written already (a replay)."""

    records: int
    replayed: bool = False


#: Local properties Spark's micro-batch engine sets on every task of a batch
#: (``StreamExecution.QUERY_ID_KEY``, ``MicroBatchExecution.BATCH_ID_KEY``).
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


def _task_write(
    iterator: Iterator[pa.RecordBatch], settings: WriteSettings, batch_query_id: str | None
) -> ReplogCommitMessage:
    """Write one task's rows: at-least-once, or in the task's fenced transaction."""
    if settings.transactional_id_prefix is None:
        return ReplogCommitMessage(write_batches(iterator, settings))
    outcome = write_batches_exactly_once(iterator, settings, _task_transaction(batch_query_id))
    return ReplogCommitMessage(outcome.records, outcome.replayed)


def _task_transaction(batch_query_id: str | None) -> TaskTransaction:
    """This task's query, micro-batch and partition, from Spark's TaskContext: a stream's
    query id is kept in its checkpoint, so a restarted query has the same one."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise RuntimeError("replog sink: exactlyOnce writes run only inside a Spark task")
    if batch_query_id is not None:
        return TaskTransaction(batch_query_id, 0, context.partitionId())
    query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
    batch_id = context.getLocalProperty(BATCH_ID_PROPERTY)
    if not query_id or batch_id is None:
        raise RuntimeError(
            "replog sink: exactlyOnce needs a micro-batch query (Spark set no "
            f"{QUERY_ID_PROPERTY!r}/{BATCH_ID_PROPERTY!r} on the task); continuous "
            "processing is not supported"
        )
    return TaskTransaction(query_id, int(batch_id), context.partitionId())


class ReplogBatchWriter(DataSourceArrowWriter):
    """``df.write.format("replog")``: each task produces its rows and flushes (or, with
    exactlyOnce, commits its transaction; a retried or speculative task fences the
    others and writes nothing twice)."""

    def __init__(self, settings: WriteSettings, write_id: str) -> None:
        self.settings = settings
        self.write_id = write_id

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ReplogCommitMessage:
        return _task_write(iterator, self.settings, self.write_id)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("replog sink: wrote %d records", _count(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning(
            "replog sink: write aborted; %d records of tasks that succeeded stay in the log",
            _count(messages),
        )


class ReplogStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("replog")``: at-least-once, or exactly-once with
    ``deliveryGuarantee=exactlyOnce``; see README.md."""

    def __init__(self, settings: WriteSettings) -> None:
        self.settings = settings

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ReplogCommitMessage:
        return _task_write(iterator, self.settings, None)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        replayed = sum(1 for m in messages if isinstance(m, ReplogCommitMessage) and m.replayed)
        log.info(
            "replog sink: micro-batch %d wrote %d records (%d tasks found it written already)",
            batchId,
            _count(messages),
            replayed,
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.settings.transactional_id_prefix is not None:
            log.warning(
                "replog sink: micro-batch %d aborted; the transactions of tasks that "
                "succeeded (%d records) are committed and recorded, so the retried batch "
                "writes only the other tasks' rows",
                batchId,
                _count(messages),
            )
            return
        log.warning(
            "replog sink: micro-batch %d aborted; %d records of tasks that succeeded stay in "
            "the log and will be written again when the batch is retried",
            batchId,
            _count(messages),
        )


def _count(messages: list[WriterCommitMessage | None]) -> int:
    return sum(m.records for m in messages if isinstance(m, ReplogCommitMessage))
