"""The transaction coordinator's runtime: the IO around the sans-IO core
(``coordinator.TransactionCoordinator``), as ``coordinator.group.coordinator`` is for groups.

It carries out the core's ``Outcome`` effects (``effects``):

- **Leadership.** LeaderAndIsr for a ``__transaction_state`` partition that makes this
  broker its leader calls ``on_partition_role``: the core starts loading the partition at
  the leader epoch (the coordinator epoch); the runtime waits until the high watermark
  reaches the log end offset it had on election (everything a former leader acknowledged
  is then in the ISR), reads the records up to the high watermark and hands them to
  ``complete_loading``, then sends the markers of the transactions a former coordinator
  left in PrepareCommit/PrepareAbort. Resignation (a LeaderAndIsr making it a follower,
  StopReplica) unloads the partition.
- **Appends** of ``__transaction_state`` records: with acks=-1, uncompressed, bounded by
  the effect's timeout, and ``can_append`` checked immediately before the append with no
  await in between; then ``append_completed``. A CompleteCommit/CompleteAbort the core
  asks to append again (COORDINATOR_NOT_AVAILABLE) waits ``COMPLETE_RETRY_BACKOFF_S``.
- **Markers**: through ``marker_channel``, whose answers come back to the core here.
- **Producer ids**: ``needs_producer_id`` gets one from the broker's
  ``ProducerIdManager`` and the call is made again.
- **Timers**: ``abort_timed_out_transactions`` every
  ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` and
  ``expire_transactional_ids`` every
  ``transaction.remove.expired.transaction.cleanup.interval.ms``.

A request's answer is whatever the core gives first: at once (an error, a retry of a
completed EndTxn), or after the one append its decision waits for.

Concurrency: owned by the event loop. The core never awaits; the runtime awaits only
appends, acks, producer ids and loads, and the core checks its state again after each
(its transitions stay pending across the await).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from replog.common.clock import now_ms
from replog.common.topics import TRANSACTION_STATE_TOPIC_NAME
from replog.coordinator.transaction.coordinator import TransactionCoordinator
from replog.coordinator.transaction.describe import (
    TransactionDescription,
    TransactionList,
    describe_transaction,
    list_transactions,
)
from replog.coordinator.transaction.effects import (
    Answer,
    AppendPurpose,
    AppendTombstones,
    AppendTxnState,
    Outcome,
    SendTxnMarkers,
)
from replog.coordinator.transaction.marker_channel import TransactionMarkerChannel
from replog.coordinator.transaction.transaction_topic import TransactionConfig
from replog.protocol.records import build_batch, encode_record, iter_batches
from replog.replication.delayed_operations import DelayedHighWatermark
from replog.storage.record_reader import iter_records

if TYPE_CHECKING:
    from replog.config import KafkaConfig
    from replog.replication.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
LOAD_RECHECK_S = 1.0
COMPLETE_RETRY_BACKOFF_S = 0.1
TOPIC = TRANSACTION_STATE_TOPIC_NAME


def transaction_config(config: KafkaConfig) -> TransactionConfig:
    """The core's settings from the broker's (``replog.config.keys``' transaction rows)."""
    return TransactionConfig(
        transactional_id_expiration_ms=config.transactional_id_expiration_ms,
        transaction_max_timeout_ms=config.transaction_max_timeout_ms,
        transaction_log_num_partitions=config.transaction_state_log_num_partitions,
        transaction_log_replication_factor=config.transaction_state_log_replication_factor,
        transaction_log_segment_bytes=config.transaction_state_log_segment_bytes,
        transaction_log_load_buffer_size=config.transaction_state_log_load_buffer_size,
        transaction_log_min_isr=config.transaction_state_log_min_isr,
        abort_timed_out_transactions_interval_ms=(
            config.transaction_abort_timed_out_transaction_cleanup_interval_ms
        ),
        remove_expired_transactional_ids_interval_ms=(
            config.transaction_remove_expired_transaction_cleanup_interval_ms
        ),
        request_timeout_ms=config.request_timeout_ms,
    )


class TransactionCoordinatorRuntime:
    """This broker's transaction coordinator. Concurrency: see the module docstring."""

    def __init__(
        self,
        config: TransactionConfig,
        replica_manager: ReplicaManager,
        generate_producer_id: Callable[[], Awaitable[int]],
        offsets_partition_count: Callable[[], int],
        channel_factory: Callable[[TransactionCoordinatorRuntime], TransactionMarkerChannel],
        clock: Callable[[], int] = now_ms,
        state_partition_count: Callable[[], int] = lambda: 0,
    ) -> None:
        """``state_partition_count``: ``__transaction_state``'s partitions as the cluster
        knows them (0 while unknown)."""
        self.config = config
        self.replica_manager = replica_manager
        self._generate_producer_id = generate_producer_id
        self._offsets_partition_count = offsets_partition_count
        self.clock = clock
        self._state_partition_count = state_partition_count
        self.core = TransactionCoordinator(config, offsets_partition_count())
        self.channel = channel_factory(self)
        self._terms: dict[int, int] = {}  # partition -> leader epoch being loaded or led
        # Metrics (Kafka's names in ``server.metrics``)
        self.completions_to_retry = 0  # LogAppendRetryQueueSize
        self.load_time_max_ms = 0.0  # transaction-coordinator-metrics partition-load-time-max
        self.load_time_total_ms = 0.0
        self.loads = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._loops: list[asyncio.Task[None]] = []

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """The periodic duties (Kafka's scheduler tasks in ``TransactionCoordinator``)."""
        loop = asyncio.get_running_loop()
        self._loops = [
            loop.create_task(
                self._every(
                    self.config.abort_timed_out_transactions_interval_ms,
                    lambda: self.core.abort_timed_out_transactions(self.clock()),
                )
            ),
            loop.create_task(
                self._every(
                    self.config.remove_expired_transactional_ids_interval_ms,
                    lambda: self.core.expire_transactional_ids(self.clock()),
                )
            ),
        ]

    async def _every(self, interval_ms: int, duty: Callable[[], Outcome]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                self._carry_out(duty())
            except Exception:
                log.exception("transaction coordinator: a periodic duty failed")

    async def shutdown(self) -> None:
        for task in self._loops:
            task.cancel()
        for partition in list(self._terms):
            self._resign(partition)
        await self.channel.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def transaction_counts(self) -> dict[str, int]:
        """Transactional ids coordinated here, by state (Kafka's state names)."""
        counts: dict[str, int] = {}
        for entry in self.core.state.loaded():
            for md in entry.metadata.values():
                counts[md.state.kafka_name] = counts.get(md.state.kafka_name, 0) + 1
        return counts

    def partition_for(self, transactional_id: str) -> int:
        self._sync_partition_count()
        return self.core.state.partition_for(transactional_id)

    def _sync_partition_count(self) -> None:
        count = self._state_partition_count()
        if count and count != self.core.config.transaction_log_num_partitions:
            self.core.set_partition_count(count)

    # -- leadership of __transaction_state --------------------------------------------------

    def on_partition_role(self, partition: int, is_leader: bool, leader_epoch: int) -> None:
        """A LeaderAndIsr (or StopReplica: not leader) for ``__transaction_state-partition``
        was applied (Kafka ``onElection`` / ``onResignation``)."""
        if not is_leader:
            self._resign(partition)
            return
        self._sync_partition_count()
        if self._terms.get(partition) == leader_epoch:
            return  # the same term told again
        self._terms[partition] = leader_epoch
        self.core.on_election(partition, leader_epoch)
        self._spawn(self._load(partition, leader_epoch))

    def _resign(self, partition: int) -> None:
        epoch = self._terms.pop(partition, None)
        if epoch is not None:
            log.info("%s-%d: unloading (epoch %d)", TOPIC, partition, epoch)
            self.core.on_resignation(partition, epoch)

    def _led_partition(self, partition: int, leader_epoch: int):
        part = self.replica_manager.get_partition(TOPIC, partition)
        if (
            part is None
            or not part.is_leader
            or part.leader_epoch != leader_epoch
            or self._terms.get(partition) != leader_epoch
        ):
            return None
        return part

    async def _load(self, partition: int, leader_epoch: int) -> None:
        started = time.monotonic()
        part = self._led_partition(partition, leader_epoch)
        if part is None:
            return
        target = part.log_end_offset
        while part.high_watermark < target:
            await DelayedHighWatermark(part, target).wait([part], LOAD_RECHECK_S)
            part = self._led_partition(partition, leader_epoch)
            if part is None:
                return
        high_watermark = part.high_watermark
        offset = part.log_start_offset
        records: list[tuple[bytes, bytes | None]] = []
        try:
            while offset < high_watermark:
                data = part.read_records(
                    offset, self.config.transaction_log_load_buffer_size, high_watermark
                )
                if not data:
                    break
                for pos, header in iter_batches(data):
                    offset = header.next_offset
                    if header.is_control:
                        continue
                    for record in iter_records(memoryview(data)[pos : pos + header.size], header):
                        if record.offset < high_watermark and record.key is not None:
                            records.append((bytes(record.key), _bytes_or_none(record.value)))
                await asyncio.sleep(0)  # a large partition does not hold the loop
                part = self._led_partition(partition, leader_epoch)
                if part is None:
                    return
            outcome = self.core.complete_loading(partition, leader_epoch, records, self.clock())
        except Exception:  # an unreadable record (CodecError), a state the core refuses
            log.exception("%s-%d: loading failed; not coordinating it", TOPIC, partition)
            self._resign(partition)
            return
        took_s = time.monotonic() - started
        log.info(
            "%s-%d: loaded %d records at epoch %d in %.3f s",
            TOPIC,
            partition,
            len(records),
            leader_epoch,
            took_s,
        )
        self.loads += 1
        self.load_time_total_ms += took_s * 1000
        self.load_time_max_ms = max(self.load_time_max_ms, took_s * 1000)
        self._carry_out(outcome)

    # -- requests ---------------------------------------------------------------------------

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> Answer:
        self._sync_partition_count()
        outcome = self.core.handle_init_producer_id(
            transactional_id, timeout_ms, producer_id, producer_epoch, self.clock()
        )
        if outcome.needs_producer_id:
            new_id = await self._generate_producer_id()
            outcome = self.core.handle_init_producer_id(
                transactional_id, timeout_ms, producer_id, producer_epoch, self.clock(), new_id
            )
        return await self._answer(outcome)

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> Answer:
        outcome = self.core.handle_add_partitions_to_txn(
            transactional_id, producer_id, producer_epoch, partitions, self.clock()
        )
        return await self._answer(outcome)

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> Answer:
        return self.core.handle_verify_partitions_in_txn(
            transactional_id, producer_id, producer_epoch, partitions
        )

    async def add_offsets(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> Answer:
        self.core.offsets_topic_partitions = self._offsets_partition_count()
        outcome = self.core.handle_add_offsets_to_txn(
            transactional_id, producer_id, producer_epoch, group_id, self.clock()
        )
        return await self._answer(outcome)

    async def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, committed: bool
    ) -> Answer:
        outcome = self.core.handle_end_txn(
            transactional_id, producer_id, producer_epoch, committed, self.clock()
        )
        return await self._answer(outcome)

    def describe(self, transactional_id: str) -> TransactionDescription:
        return describe_transaction(self.core.state, transactional_id)

    def list(
        self, producer_ids: Iterable[int], states: Iterable[str], duration_ms: int
    ) -> TransactionList:
        return list_transactions(
            self.core.state, set(producer_ids), list(states), duration_ms, self.clock()
        )

    # -- carrying out outcomes ----------------------------------------------------------------

    async def _answer(self, outcome: Outcome) -> Answer:
        """Carry out a request's outcome until the core gives its answer; what follows
        the answer (markers, a completion) goes on in the background."""
        while True:
            for marker in outcome.markers:
                self.channel.send(marker)
            if outcome.answer is not None or not outcome.appends:
                for effect in outcome.appends:
                    self._spawn(self._append_in_background(effect))
                if outcome.answer is None:
                    log.error("transaction coordinator: an outcome without an answer")
                    return Answer(ErrorCode.unknown_server_error)
                return outcome.answer
            first, *rest = outcome.appends
            for effect in rest:
                self._spawn(self._append_in_background(effect))
            outcome = await self._append(first)

    def _carry_out(self, outcome: Outcome) -> None:
        """An outcome nobody waits for (timers, loads, marker answers)."""
        for marker in outcome.markers:
            self.channel.send(marker)
        for effect in outcome.appends:
            self._spawn(self._append_in_background(effect))

    async def _append_in_background(self, effect: AppendTxnState | AppendTombstones) -> None:
        outcome = await self._append(effect)
        if (
            isinstance(effect, AppendTxnState)
            and effect.purpose is AppendPurpose.COMPLETE_TXN
            and effect in outcome.appends
        ):
            # The core asks for the completion again (COORDINATOR_NOT_AVAILABLE: Kafka's
            # txnLogAppendRetryQueue): not at once.
            self.completions_to_retry += 1
            try:
                await asyncio.sleep(COMPLETE_RETRY_BACKOFF_S)
            finally:
                self.completions_to_retry -= 1
        self._carry_out(outcome)

    async def _append(self, effect: AppendTxnState | AppendTombstones) -> Outcome:
        if isinstance(effect, AppendTxnState):
            error = await self._write(effect, [(effect.key, effect.value)])
            return self.core.append_completed(effect, error, self.clock())
        error = await self._write(effect, [(key, None) for key in effect.keys])
        removed = self.core.tombstones_appended(effect, error)
        if removed:
            log.info("%s-%d: expired %d transactional ids", TOPIC, effect.partition, len(removed))
        return Outcome()

    async def _write(
        self,
        effect: AppendTxnState | AppendTombstones,
        records: list[tuple[bytes, bytes | None]],
    ) -> ErrorCode:
        """Append ``records`` as one batch with acks=-1; the append's error."""
        part = self._led_partition(effect.partition, effect.coordinator_epoch)
        if part is None:
            return ErrorCode.not_leader_or_follower
        now = self.clock()
        body = b"".join(encode_record(i, 0, k, v) for i, (k, v) in enumerate(records))
        batch = build_batch(
            base_offset=0,
            partition_leader_epoch=-1,
            attributes=0,
            last_offset_delta=len(records) - 1,
            base_timestamp=now,
            max_timestamp=now,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            record_count=len(records),
            records=body,
        )
        if not self.core.can_append(effect):  # no await between this and the append
            return ErrorCode.not_coordinator
        rm = self.replica_manager
        result = rm.append_to_leader(TOPIC, effect.partition, batch, -1, now)
        if result.error == ErrorCode.none:
            await rm.wait_for_acks_all({(TOPIC, effect.partition): result}, effect.timeout_ms)
        return ErrorCode(result.error)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("transaction coordinator task failed", exc_info=task.exception())

    # -- the marker channel's answers (TransactionMarkerChannel's listener) -----------------------

    def markers_written(
        self, marker: SendTxnMarkers, errors: Mapping[TopicPartition, ErrorCode]
    ) -> None:
        self._carry_out(self.core.markers_written(marker, errors))

    def markers_undelivered(self, marker: SendTxnMarkers) -> None:
        self._carry_out(self.core.markers_undelivered(marker))

    def markers_partitions_deleted(
        self, marker: SendTxnMarkers, partitions: Iterable[TopicPartition]
    ) -> None:
        self._carry_out(self.core.markers_partitions_deleted(marker, partitions))


def _bytes_or_none(value) -> bytes | None:
    return None if value is None else bytes(value)
