"""Task-side writing for ``deliveryGuarantee=exactlyOnce``: one Kafka transaction per
write task, fenced per Spark partition, that also records the micro-batch it wrote.

The design, and why it is correct across task retries, speculative copies and driver
crashes, is in ``README.md`` beside this file. In short, the task for partition ``P`` of
micro-batch ``B`` of query ``Q``:

1. opens a transactional producer with the id ``prefix + Q + "-" + P``
   (:func:`transactional_id`) and calls ``init_transactions``: InitProducerId bumps the
   epoch, which fences every earlier producer with that id (a failed attempt, a
   speculative copy, a task of a killed driver) and aborts its open transaction;
2. reads the batch last committed for ``P``: the offsets the group named like the
   transactional id has committed (:func:`last_batch_written`). After step 1 no
   transaction of this id is pending, so what it reads is settled;
3. if ``B`` is not after it, the batch is a replay whose rows for ``P`` are already in
   the log: it writes nothing;
4. otherwise writes its rows in one transaction that also commits, through
   ``send_offsets_to_transaction`` (TxnOffsetCommit), offset ``B + 1`` for partition 0 of
   each topic written (:func:`progress_offsets`), then commits it. The rows and the record
   of ``B`` become visible together, or neither does.

The pure rules are plain functions; :func:`write_batches_exactly_once` carries them out
with confluent-kafka (the same batched ``produce_batch`` path as the at-least-once sink).

Concurrency: a write call is used by one thread; its clients are closed before it returns.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa

from replog.spark.producer import (
    DeliveryError,
    DeliveryReport,
    WriteSettings,
    producer_config,
    queue_batches,
)

log = logging.getLogger("replog.spark")

#: How long InitProducerId, the offset reads and EndTxn may take before the task fails.
TRANSACTION_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class TaskTransaction:
    """Which write this task is: the query (stable across restarts from a checkpoint),
    the micro-batch, and the Spark partition. A batch write is one "batch" 0 of a query
    id drawn when the write was planned."""

    query_id: str
    batch_id: int
    partition_id: int


@dataclass(frozen=True)
class ExactlyOnceOutcome:
    """What one task did: rows written in its committed transaction, or a replay."""

    records: int
    transactional_id: str | None
    replayed: bool


def transactional_id(prefix: str, query_id: str, partition_id: int) -> str:
    """The transactional id of a Spark partition's writes in one query: every attempt of
    every micro-batch's task for that partition shares it, so each fences the previous."""
    return f"{prefix}{query_id}-{partition_id}"


def progress_group(transactional_id: str) -> str:
    """The consumer group whose committed offsets record the last batch written with
    ``transactional_id`` (never joined by any consumer)."""
    return transactional_id


def progress_offsets(topics: Iterable[str], batch_id: int) -> dict[tuple[str, int], int]:
    """What a transaction commits to its progress group: ``batch_id + 1`` (Kafka's "next"
    convention) on partition 0 of every topic it wrote, a partition that always exists."""
    return {(topic, 0): batch_id + 1 for topic in sorted(set(topics))}


def last_batch_written(committed: Mapping[tuple[str, int], int]) -> int | None:
    """The last batch the progress group records, or ``None`` if it records none."""
    offsets = [offset for offset in committed.values() if offset > 0]
    return max(offsets) - 1 if offsets else None


def is_replay(batch_id: int, last_written: int | None) -> bool:
    """A batch at or before the last one committed was written already."""
    return last_written is not None and batch_id <= last_written


def _first_rows(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch] | None:
    """The batches from the first non-empty one on, or ``None`` if there are no rows."""
    it = iter(batches)
    for batch in it:
        if batch.num_rows:
            return itertools.chain([batch], it)
    return None


def write_batches_exactly_once(
    batches: Iterable[pa.RecordBatch], settings: WriteSettings, task: TaskTransaction
) -> ExactlyOnceOutcome:
    """Write the task's rows in one transaction recording ``task.batch_id``, unless the
    batch was written already. A task without rows opens no transaction."""
    from confluent_kafka import Producer

    if settings.transactional_id_prefix is None:
        raise ValueError("exactly-once writing needs a transactional id prefix")
    rows = _first_rows(batches)
    if rows is None:
        return ExactlyOnceOutcome(0, None, replayed=False)
    tid = transactional_id(settings.transactional_id_prefix, task.query_id, task.partition_id)
    config = producer_config(settings)
    config["transactional.id"] = tid
    producer = Producer(config)
    # Fences earlier attempts and aborts their open transaction (their late writes are
    # refused with PRODUCER_FENCED / INVALID_PRODUCER_EPOCH).
    producer.init_transactions(TRANSACTION_TIMEOUT_S)
    last = last_batch_written(_committed_progress(settings, tid))
    if is_replay(task.batch_id, last):
        for _ in rows:  # Spark hands the rows over regardless; they are in the log already
            pass
        log.info("replog sink: %s already wrote batch %d (last %s)", tid, task.batch_id, last)
        return ExactlyOnceOutcome(0, tid, replayed=True)
    producer.begin_transaction()
    report = DeliveryReport()
    try:
        sent, topics = queue_batches(producer, config, rows, settings.topic, report)
        if report.failed:
            raise DeliveryError(
                f"replog sink: {report.failed} of {sent} records failed delivery; "
                f"first errors: {report.errors}"
            )
        _send_progress(producer, settings, tid, progress_offsets(topics, task.batch_id))
        producer.commit_transaction(TRANSACTION_TIMEOUT_S)  # flushes, then EndTxn(commit)
    except BaseException:
        _abort_quietly(producer)
        raise
    return ExactlyOnceOutcome(sent, tid, replayed=False)


def _committed_progress(settings: WriteSettings, tid: str) -> dict[tuple[str, int], int]:
    """Every offset the progress group committed (OffsetFetch for all its partitions)."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    config = {
        k: v
        for k, v in settings.client_config.items()
        if k.startswith(("security.", "sasl.", "ssl.", "client.", "socket."))
    }
    admin = AdminClient({**config, "bootstrap.servers": settings.bootstrap_servers})
    group = progress_group(tid)
    result = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)],
        require_stable=True,
        request_timeout=TRANSACTION_TIMEOUT_S,
    )[group].result()
    return {
        (tp.topic, tp.partition): int(tp.offset)
        for tp in result.topic_partitions
        if tp.error is None and tp.offset >= 0
    }


def _send_progress(
    producer: object, settings: WriteSettings, tid: str, offsets: Mapping[tuple[str, int], int]
) -> None:
    """AddOffsetsToTxn + TxnOffsetCommit of ``offsets`` for the progress group, as a
    producer outside any group membership (generation -1) commits them."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "group.id": progress_group(tid),
            "enable.auto.commit": False,
        }
    )
    try:
        metadata = consumer.consumer_group_metadata()
    finally:
        consumer.close()
    producer.send_offsets_to_transaction(  # type: ignore[attr-defined]
        [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())],
        metadata,
        TRANSACTION_TIMEOUT_S,
    )


def _abort_quietly(producer: object) -> None:
    """Abort after a failure; a fenced producer cannot, and needs not (its successor's
    InitProducerId aborted the transaction)."""
    try:
        producer.abort_transaction(TRANSACTION_TIMEOUT_S)  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001 - the original error is what the task reports
        log.warning("replog sink: aborting the transaction failed too: %s", exc)
