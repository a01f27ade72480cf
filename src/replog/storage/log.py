"""A partition's log: ordered segments, appends, reads, retention, truncation.

``Log`` is Kafka's ``UnifiedLog`` without tiered storage. Record batches stay bytes: a
leader append validates every batch header and CRC32C first (all or nothing), patches
base offsets and the partition leader epoch in place and writes the request's bytes
with one ``pwrite``. Beside it, by role: the segments themselves, their rolls, reads,
cuts and swaps (``local_log.py``, Kafka ``LocalLog``), the checks of an append
(``log_validator.py``), the retention rules (``retention.py``), ListOffsets by time
(``offset_lookup.py``), and opening a log, recovery of a torn tail and of an
interrupted cleaner swap included (``log_loader.py``).

A compacted log (``cleanup.policy`` with ``compact``) refuses records without a key
and is rewritten by the log cleaner (``cleaner*.py``): offsets then have gaps, which
reads step over (a read inside a gap starts at the next batch) and follower appends
accept (a fetched batch may start past the log end offset, never before it).

Concurrency: a ``Log`` is owned by one asyncio task (or one thread); no method
awaits, so each call is atomic with respect to the event loop. The one exception
is ``flush``, which does fsyncs and may run in a worker thread while the owner
keeps appending and reading; it must not overlap ``truncate_to``,
``truncate_fully_and_start_at``, ``delete_old_segments``, ``replace_segments`` or
``close``. The log cleaner reads closed segments' files from its own thread or
process and writes ``.cleaned`` files beside them, but only the owner swaps them in
(``replace_segments``), after checking that the segments cleaned are still the live
ones and that no truncation happened since (``truncations``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from replog.protocol.errors import OffsetOutOfRange
from replog.protocol.records import (
    BatchHeader,
    EndTxnMarker,
    InvalidRecord,
    end_txn_marker_batch,
    read_end_txn_marker,
    read_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from replog.storage import offset_lookup, retention
from replog.storage.leader_epoch import LeaderEpochFileCache
from replog.storage.local_log import FetchDataInfo, LocalLog
from replog.storage.log_config import LogConfig
from replog.storage.log_loader import load_log, parse_topic_partition, rebuild_producer_state
from replog.storage.log_validator import (
    UnexpectedAppendOffset,
    check_follower_offsets,
    check_keys,
    validate_batches,
)
from replog.storage.producer_state import (
    ProducerStateManager,
    VerificationGuard,
    last_stable_offset,
    list_snapshots,
)
from replog.storage.segment import LogSegment, TimestampAndOffset
from replog.storage.txn_index import AbortedTxn, collect_aborted_transactions

__all__ = [
    "AppendInfo",
    "FetchDataInfo",
    "Log",
    "TimestampAndOffset",
    "UnexpectedAppendOffset",
    "parse_topic_partition",
]

log = logging.getLogger(__name__)


@dataclass
class AppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    num_batches: int
    duplicate: bool = False


class Log:
    """One partition's segments and state. Construct with ``Log.open``."""

    def __init__(
        self,
        dir: Path,
        config: LogConfig,
        segments: list[LogSegment],
        *,
        log_start_offset: int,
        recovery_point: int,
        leader_epoch_cache: LeaderEpochFileCache,
        producer_state: ProducerStateManager,
    ) -> None:
        self.dir = Path(dir)
        self.topic, self.partition = parse_topic_partition(self.dir.name)
        self._local = LocalLog(self.dir, self.name, config, segments)
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self.leader_epoch_cache = leader_epoch_cache
        self.producer_state = producer_state
        self.high_watermark: int | None = None  # set by replication; bounds retention
        self._closed = False
        # For the log cleaner: every truncation bumps ``truncations`` (a cleaning planned
        # before it is stale) and lowers ``min_truncation_offset`` until the cleaner takes
        # it (its checkpoint must not stay past a truncation, Kafka maybeTruncateCheckpoint).
        self.truncations = 0
        self.min_truncation_offset: int | None = None

    @classmethod
    def open(
        cls,
        dir: Path,
        config: LogConfig,
        *,
        recovery_point: int,
        log_start_offset: int,
        now_ms: int,
        clean_shutdown: bool,
    ) -> Log:
        """Load (or create) the log in ``dir``; unflushed segments are recovered unless clean."""
        loaded = load_log(
            Path(dir),
            config,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            now_ms=now_ms,
            clean_shutdown=clean_shutdown,
        )
        return cls(
            dir,
            config,
            loaded.segments,
            log_start_offset=loaded.log_start_offset,
            recovery_point=loaded.recovery_point,
            leader_epoch_cache=loaded.leader_epoch_cache,
            producer_state=loaded.producer_state,
        )

    # -- state -----------------------------------------------------------
    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def config(self) -> LogConfig:
        return self._local.config

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._local.segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._local.active_segment

    @property
    def log_end_offset(self) -> int:
        return self._local.log_end_offset

    @property
    def closed(self) -> bool:
        return self._closed

    def size_in_bytes(self) -> int:
        return self._local.size_in_bytes()

    def update_config(self, config: LogConfig) -> None:
        self._local.update_config(config)

    def update_high_watermark(self, high_watermark: int) -> None:
        """Retention never deletes past this offset (Kafka deletes only below the HW)."""
        self.high_watermark = high_watermark

    # -- append ----------------------------------------------------------
    def append_as_leader(
        self,
        records: bytes | bytearray,
        *,
        leader_epoch: int,
        now_ms: int,
        verification_required: bool = False,
        verification_guard: VerificationGuard | None = None,
        from_coordinator: bool = False,
    ) -> AppendInfo:
        """Assign offsets and append a client's batches; raises before writing anything.
        ``from_coordinator``: a coordinator's own transactional batch (no sequence check:
        ``ProducerStateManager.validate_client_batches``).

        Raises InvalidRecordBatch, CorruptRecordBatch, RecordTooLarge,
        OutOfOrderSequence, InvalidProducerEpoch or InvalidTxnState. A retried batch from
        an idempotent producer returns its original offsets with ``duplicate=True``.
        With ``verification_required`` (KIP-890), a transactional batch that opens a
        transaction needs ``verification_guard``, still current (``ProducerStateManager
        .check_verified``).
        """
        if not isinstance(records, bytearray):
            records = bytearray(records)
        batches = validate_batches(
            records, name=self.name, max_message_bytes=self.config.max_message_bytes
        )
        if not batches:
            return AppendInfo(-1, -1, -1, -1, 0)
        if any(h.is_control for _, h in batches):
            raise InvalidRecord(f"{self.name}: clients are not allowed to write control records")
        if self.config.compact:
            check_keys(records, batches, name=self.name)
        duplicate = self.producer_state.validate_client_batches(
            [h for _, h in batches], from_coordinator=from_coordinator
        )
        if duplicate is not None:
            return AppendInfo(
                duplicate.first_offset,
                duplicate.last_offset,
                duplicate.timestamp,
                -1,
                len(batches),
                duplicate=True,
            )
        if verification_required:
            self.producer_state.check_verified([h for _, h in batches], verification_guard)
        log_append_time = now_ms if self.config.log_append_time else -1
        first_offset = offset = self.log_end_offset
        patched: list[tuple[int, BatchHeader]] = []
        for pos, h in batches:
            set_base_offset(records, pos, offset)
            set_partition_leader_epoch(records, pos, leader_epoch)
            if log_append_time >= 0:
                set_log_append_time(records, pos, h.size, log_append_time)
            patched.append((pos, read_header(records, pos)))
            offset += h.last_offset_delta + 1
        max_timestamp = max(h.max_timestamp for _, h in patched)
        latest = self.leader_epoch_cache.latest_epoch
        if latest is None or leader_epoch > latest:
            self.leader_epoch_cache.assign(leader_epoch, first_offset)
        self._append(records, patched, now_ms, max_timestamp)
        return AppendInfo(first_offset, offset - 1, max_timestamp, log_append_time, len(patched))

    def append_as_follower(
        self, records: bytes | bytearray | memoryview, *, now_ms: int | None = None
    ) -> AppendInfo:
        """Append batches fetched from the leader, offsets and epochs as sent.

        The first batch must not start below ``log_end_offset`` (else
        UnexpectedAppendOffset); it may start past it, after a gap the leader's cleaner left.
        ``now_ms`` is used for time-based rolls of segments whose records carry no
        timestamps; without it the batches' max timestamp stands in.
        """
        batches = validate_batches(records, name=self.name, max_message_bytes=None)
        if not batches:
            return AppendInfo(-1, -1, -1, -1, 0)
        check_follower_offsets(batches, self.log_end_offset, name=self.name)
        for _, h in batches:
            if h.partition_leader_epoch >= 0:
                latest = self.leader_epoch_cache.latest_epoch
                if latest is None or h.partition_leader_epoch > latest:
                    self.leader_epoch_cache.assign(h.partition_leader_epoch, h.base_offset)
        max_timestamp = max(h.max_timestamp for _, h in batches)
        self._append(records, batches, max_timestamp if now_ms is None else now_ms, max_timestamp)
        return AppendInfo(
            batches[0][1].base_offset, batches[-1][1].last_offset, max_timestamp, -1, len(batches)
        )

    def _append(
        self,
        records: bytes | bytearray | memoryview,
        batches: list[tuple[int, BatchHeader]],
        now_ms: int,
        max_timestamp: int,
    ) -> None:
        if self._local.should_roll(
            now_ms,
            messages_size=len(records),
            max_timestamp=max_timestamp,
            max_offset=batches[-1][1].last_offset,
        ):
            self.roll(now_ms)
        segment = self.active_segment
        segment.append(records, batches)
        for pos, h in batches:
            marker = None
            if h.is_control and h.has_producer_id:
                marker = read_end_txn_marker(memoryview(records)[pos : pos + h.size], h)
            completed = self.producer_state.update(h, marker)
            if completed is not None and completed.is_aborted:
                # Kafka ``LogSegment.updateTxnIndex``: the marker's segment indexes it.
                segment.txn_index.append(
                    AbortedTxn(
                        completed.producer_id,
                        completed.first_offset,
                        completed.last_offset,
                        self.producer_state.last_stable_offset(completed),
                    )
                )

    def append_marker_as_leader(
        self,
        producer_id: int,
        producer_epoch: int,
        marker: EndTxnMarker,
        *,
        leader_epoch: int,
        now_ms: int,
    ) -> AppendInfo:
        """Append a COMMIT or ABORT marker from the transaction coordinator (Kafka
        ``appendAsLeader`` with origin COORDINATOR): it ends the producer's open
        transaction, and an ABORT is indexed in ``.txnindex``. Raises
        InvalidProducerEpoch or TransactionCoordinatorFenced before writing."""
        self.producer_state.validate_marker(producer_id, producer_epoch, marker)
        offset = self.log_end_offset
        batch = end_txn_marker_batch(
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            commit=marker.commit,
            coordinator_epoch=marker.coordinator_epoch,
            timestamp=now_ms,
            base_offset=offset,
            partition_leader_epoch=leader_epoch,
        )
        latest = self.leader_epoch_cache.latest_epoch
        if latest is None or leader_epoch > latest:
            self.leader_epoch_cache.assign(leader_epoch, offset)
        self._append(batch, [(0, read_header(batch))], now_ms, now_ms)
        return AppendInfo(offset, offset, now_ms, -1, 1)

    # -- transactions ----------------------------------------------------
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction (None: none is open)."""
        return self.producer_state.first_unstable_offset()

    def last_stable_offset(self) -> int:
        """The LSO: the first offset of the oldest open transaction, never past the high
        watermark nor below the log start (Kafka ``UnifiedLog.lastStableOffset``)."""
        high_watermark = self.log_end_offset if self.high_watermark is None else self.high_watermark
        return last_stable_offset(
            high_watermark, self.log_start_offset, self.producer_state.first_unstable_offset()
        )

    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]:
        """The aborted transactions a read of ``[start_offset, upper_bound_offset)`` overlaps."""
        first = self._local.segment_index(start_offset)
        indexes = [s.txn_index for s in self._local.segments[first:]]
        return collect_aborted_transactions(indexes, start_offset, upper_bound_offset)

    # -- roll ------------------------------------------------------------
    def maybe_roll(self, now_ms: int) -> None:
        """Roll the active segment if Kafka would on an append at ``now_ms`` of nothing."""
        if self._local.should_roll(
            now_ms, messages_size=0, max_timestamp=now_ms, max_offset=self.log_end_offset
        ):
            self.roll(now_ms)

    def roll(self, now_ms: int) -> LogSegment:
        """Start a new active segment at the log end offset."""
        old = self.active_segment
        if old.base_offset == self.log_end_offset:
            return old  # empty active segment: nothing to roll
        old.on_become_inactive()
        self.producer_state.write_snapshot(self.dir)
        # Every older segment is made durable before the new one exists (Kafka flushes on
        # roll too, ``flushUptoOffsetExclusive``, but from its scheduler): a crash that loses
        # what was never fsynced can then cut only the last segment. Without it a closed
        # segment could lose its tail while the next one kept its batches (the page cache
        # writes files back in no promised order), and recovery, which cuts a log only at a
        # bad batch, kept that hole in the middle of the log.
        self.flush()
        return self._local.roll(now_ms)

    # -- read ------------------------------------------------------------
    def _check_offset(self, offset: int) -> None:
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRange(
                f"{self.name}: offset {offset} outside [{self.log_start_offset}, "
                f"{self.log_end_offset}]"
            )

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> FetchDataInfo:
        """Whole batches from the one containing ``start_offset``.

        Stops before a batch whose base offset is >= ``max_offset`` (e.g. the high
        watermark) and before exceeding ``max_bytes``, except that the first batch is
        returned whole when ``min_one_batch`` (KIP-74). Empty at the log end.
        """
        self._check_offset(start_offset)
        return self._local.read(
            start_offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch
        )

    def offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets by time: see ``offset_lookup.offset_for_timestamp``."""
        return offset_lookup.offset_for_timestamp(
            self._local.segments, timestamp, self.log_start_offset
        )

    def max_timestamp_and_offset(self) -> TimestampAndOffset | None:
        """ListOffsets MAX_TIMESTAMP (KIP-734): see ``offset_lookup``."""
        return offset_lookup.max_timestamp_and_offset(self._local.segments)

    def earliest_epoch(self) -> int | None:
        """The leader epoch of the record at the log start offset, if the epoch cache says
        (Kafka: its earliest entry, when that starts at or before the log start)."""
        first = self.leader_epoch_cache.earliest_entry
        if first is not None and first[1] <= self.log_start_offset:
            return first[0]
        return None

    # -- truncation ------------------------------------------------------
    def truncate_to(self, offset: int) -> None:
        """Drop everything at or after ``offset`` (a batch straddling it goes whole)."""
        if offset >= self.log_end_offset:
            return
        if offset < self._local.segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return
        self._note_truncation(offset)
        removed = self._local.truncate_to(offset)
        end = self.log_end_offset
        log.info(
            "%s: truncated to offset %d (%d bytes in the last segment)", self.name, end, removed
        )
        self.leader_epoch_cache.truncate_from_end(end)
        self.log_start_offset = min(self.log_start_offset, end)
        self.recovery_point = min(self.recovery_point, end)
        if self.high_watermark is not None:
            self.high_watermark = min(self.high_watermark, end)
        self._reload_producer_state()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start an empty log at ``offset``."""
        self._note_truncation(offset)
        self._local.truncate_fully_and_start_at(offset)
        self.leader_epoch_cache.clear()
        for _, path in list_snapshots(self.dir):
            path.unlink(missing_ok=True)
        self.producer_state.reset(offset)
        self.log_start_offset = offset
        self.recovery_point = offset
        if self.high_watermark is not None:
            self.high_watermark = offset
        log.info("%s: truncated fully, log starts at %d", self.name, offset)

    def _note_truncation(self, offset: int) -> None:
        self.truncations += 1
        if self.min_truncation_offset is None or offset < self.min_truncation_offset:
            self.min_truncation_offset = offset

    def _reload_producer_state(self) -> None:
        rebuild_producer_state(self.producer_state, self.dir, self._local.segments)

    # -- retention -------------------------------------------------------
    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start offset up (DeleteRecords, or a follower following its leader).

        Records below it are no longer readable at once; the segments wholly below it
        go with ``delete_segments_below_log_start`` (or the next retention pass). The
        new offset reaches ``log-start-offset-checkpoint`` with the log manager's next
        checkpoint, as in Kafka.
        """
        offset = min(offset, self.log_end_offset)
        if offset <= self.log_start_offset:
            return False
        self.log_start_offset = offset
        self.leader_epoch_cache.truncate_from_start(offset)
        log.info("%s: log start offset moved up to %d", self.name, offset)
        return True

    def delete_segments_below_log_start(self) -> int:
        """Delete the segments that end at or below the log start offset (Kafka
        ``deleteLogStartOffsetBreachedSegments``); returns the count. The active segment
        is never one of them."""
        return self._delete_segments(None, retention.below_log_start(self.log_start_offset))

    def delete_old_segments(self, now_ms: int) -> int:
        """Retention: whole segments below the log start offset, past ``retention.ms``
        or beyond ``retention.bytes``; never past the high watermark. Returns the count."""
        deleted = self.delete_segments_below_log_start()
        if not self.config.delete_enabled:
            return deleted
        over_size = retention.over_retention_bytes(
            self.size_in_bytes(), self.config.retention_bytes
        )
        if over_size is not None:
            deleted += self._delete_segments(now_ms, over_size)
        if self.config.retention_ms >= 0:
            rule = retention.past_retention_ms(now_ms, self.config.retention_ms)
            deleted += self._delete_segments(now_ms, rule)
        return deleted

    def _delete_segments(self, now_ms: int | None, rule: retention.Rule) -> int:
        """Delete leading segments while ``rule`` holds, never past the high watermark.
        ``now_ms`` stamps the new active segment when every segment goes (None: the
        rule never takes the active segment)."""
        high_watermark = self.log_end_offset if self.high_watermark is None else self.high_watermark
        segments = self._local.segments
        count = retention.deletable_count(segments, self.log_end_offset, high_watermark, rule)
        if count == 0:
            return 0
        if count == len(segments):
            assert now_ms is not None, "deleting the active segment needs the time of the roll"
            self.roll(now_ms)  # a log always keeps one segment
        self._local.delete_oldest(count)
        first_base = self._local.segments[0].base_offset
        for offset, path in list_snapshots(self.dir):
            if offset < first_base:
                path.unlink(missing_ok=True)
        if first_base > self.log_start_offset:
            self.log_start_offset = first_base
            self.leader_epoch_cache.truncate_from_start(first_base)
        self.recovery_point = max(self.recovery_point, self.log_start_offset)
        log.info(
            "%s: deleted %d old segment(s), log start offset %d",
            self.name,
            count,
            self.log_start_offset,
        )
        return count

    # -- compaction ------------------------------------------------------
    def last_offsets_of_active_producers(self) -> dict[int, int]:
        """Producer id -> last offset of its last batch: the cleaner keeps that batch, even
        emptied, so the producer's sequence survives (Kafka ``lastRecordsOfActiveProducers``)."""
        return {
            pid: entry.batches[-1].last_offset
            for pid, entry in self.producer_state.producers.items()
            if entry.batches
        }

    def replace_segments(self, new: LogSegment, old: list[LogSegment]) -> None:
        """Swap a ``.cleaned`` segment in for the closed segments ``old`` it was cleaned
        from: see ``LocalLog.replace_segments``."""
        self._local.replace_segments(new, old)

    # -- durability ------------------------------------------------------
    def flush(self) -> None:
        """fsync every segment past the recovery point, then move it to the log end offset.

        The segment holding the offset just below the recovery point is flushed too: a
        roll since the last flush may have completed it (its final time index entry)
        after its data was already covered by the recovery point.
        """
        end = self.log_end_offset
        self._local.flush(max(self.recovery_point - 1, self.log_start_offset, 0))
        self.leader_epoch_cache.flush()
        self.recovery_point = end

    def close(self) -> None:
        """Snapshot producer state and close the files (no fsync: ``flush`` first)."""
        if self._closed:
            return
        self._closed = True
        self.producer_state.map_end_offset = self.log_end_offset
        self.producer_state.write_snapshot(self.dir)
        self._local.close()

    def delete_files(self) -> None:
        """Close and remove every segment file (the directory itself is the caller's)."""
        self._closed = True
        self._local.delete_files()
