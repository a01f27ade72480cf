"""One cleaning of one log (Kafka ``Cleaner``): the offset map of its dirty section, then
its closed segments rewritten, group by group, into ``.cleaned`` segments.

The input is a ``CleaningTask``: a snapshot of what the log's owner knows (segment
files and sizes, the cleanable range, the topic settings, the producers' last offsets,
the time), made on the owner by ``LogCleanerManager``. The ``Cleaner`` reads segment
files by path with its own file descriptors (a segment deleted meanwhile stays
readable), never touches the ``Log`` object, and so runs in any thread or process: the
broker runs it in a worker process (``cleaner_worker``), out of the event loop's way
and of its GIL.

1. ``build_offset_map``: key -> latest offset over ``[first_dirty_offset,
   first_uncleanable_offset)``, as far as the map holds; ``end_offset`` is one past the
   latest offset mapped.
2. The segments below ``end_offset`` (the clean section too: the dirty section may
   supersede its keys) are grouped up to ``segment.bytes`` per group
   (``group_segments_by_size``) and each group is filtered (``cleaner_filter``) into one
   ``.cleaned`` segment, fsynced, with rebuilt indexes and the last old segment's mtime.
   Transactions (``cleaner_txn``): the aborted ones overlapping the segments (the
   task's ``aborted_transactions``, from their ``.txnindex``) never count in the map,
   their batches are removed, and markers stay until no data of their transaction is
   left and their delete horizon has passed; the ABORT markers kept give the cleaned
   segment its ``.txnindex``. The cleanable range never reaches an open transaction
   (``cleaner_manager``: the last stable offset bounds it).
3. Each cleaned group goes to ``swap`` (the owner swaps it in, or refuses because the
   log changed); a refusal aborts the cleaning (``CleaningAborted``).

Errors: a bad batch (CRC, framing) raises ``InvalidRecordBatch`` (or
``CorruptRecordBatch``): the caller decides whether the log changed under the read or
the segment is corrupt. Any error deletes the ``.cleaned`` segment being written;
segments already swapped in are complete cleanings of their own.

Concurrency: a ``Cleaner`` (and its offset map) is used by one thread at a time.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from replog.protocol.records import (
    HEADER_SIZE,
    BatchHeader,
    EndTxnMarker,
    InvalidRecordBatch,
    iter_record_spans,
    read_end_txn_marker,
    read_header,
    verify_crc,
)
from replog.storage.cleaner_filter import (
    empty_or_none,
    filter_batch,
    filter_control_batch,
    records_section,
)
from replog.storage.cleaner_throttler import Throttler
from replog.storage.cleaner_txn import CleanedTransactions
from replog.storage.offset_map import OffsetMap
from replog.storage.segment import CLEANED_FILE_SUFFIX, LogSegment, segment_paths
from replog.storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)

IO_BUFFER_SIZE = 512 * 1024  # Kafka log.cleaner.io.buffer.size
_INT32_MAX = 0x7FFFFFFF


class CleaningAborted(Exception):
    """The cleaning stopped: the log changed under it, it was deleted, or the cleaner is
    shutting down (Kafka ``LogCleaningAbortedException``)."""


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """A closed segment as the owner saw it when planning the cleaning."""

    base_offset: int
    next_offset: int
    size: int


@dataclass(frozen=True)
class CleaningTask:
    """Everything a cleaning needs to know about its log (Kafka ``LogToClean`` plus the
    log's settings); picklable, for the worker process."""

    name: str  # "<topic>-<partition>"
    dir: str
    segments: tuple[SegmentRef, ...]  # every closed segment below first_uncleanable_offset
    first_dirty_offset: int
    first_uncleanable_offset: int
    segment_bytes: int
    index_interval_bytes: int
    delete_retention_ms: int
    last_offsets_of_active_producers: dict[int, int]
    now_ms: int
    # the aborted transactions overlapping the segments, from their .txnindex files
    aborted_transactions: tuple[AbortedTxn, ...] = ()


@dataclass(frozen=True)
class CleanedGroup:
    """A ``.cleaned`` segment ready to replace ``replaced``."""

    replaced: tuple[SegmentRef, ...]
    base_offset: int
    next_offset: int
    size: int


@dataclass
class CleanerStats:
    """What a cleaning read and wrote (Kafka ``CleanerStats``)."""

    map_bytes_read: int = 0
    map_records_read: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    invalid_records: int = 0
    buffer_utilization: float = 0.0
    started: float = field(default_factory=time.monotonic)
    map_done: float = 0.0
    done: float = 0.0

    def summary(self, name: str) -> str:
        elapsed = max(self.done - self.started, 1e-9)
        mb = 1024 * 1024
        return (
            f"{name}: cleaned in {elapsed:.2f} s: offset map of {self.map_records_read} records "
            f"({self.map_bytes_read / mb:.1f} MB) in {self.map_done - self.started:.2f} s, "
            f"{self.records_retained}/{self.records_read} records kept, "
            f"{self.bytes_read / mb:.1f} MB -> {self.bytes_written / mb:.1f} MB, "
            f"{(self.map_bytes_read + self.bytes_read) / mb / elapsed:.1f} MB/s read, "
            f"map {100 * self.buffer_utilization:.1f}% full"
        )


@dataclass(frozen=True)
class CleanResult:
    end_offset: int  # the next cleaning's first dirty offset (cleaner-offset-checkpoint)
    stats: CleanerStats
    tombstone_horizon: int | None  # earliest delete horizon of a kept tombstone


def group_segments_by_size(
    segments: list[SegmentRef], max_size: int, first_uncleanable_offset: int
) -> list[list[SegmentRef]]:
    """Consecutive segments totalling at most ``max_size`` bytes, their offsets within
    2^31 of the group's base (Kafka ``groupSegmentsBySize``; replog's indexes have no size
    limit, so only the data counts)."""
    groups: list[list[SegmentRef]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        size = segments[i].size
        i += 1
        while i < len(segments) and size + segments[i].size <= max_size:
            last = (
                segments[i + 1].base_offset - 1
                if i + 1 < len(segments)
                else first_uncleanable_offset - 1
            )
            if segments[i].size and last - group[0].base_offset > _INT32_MAX:
                break
            group.append(segments[i])
            size += segments[i].size
            i += 1
        groups.append(group)
    return groups


class Cleaner:
    def __init__(
        self,
        offset_map: OffsetMap,
        *,
        throttler: Throttler | None = None,
        check_done: Callable[[], None] = lambda: None,
        io_buffer_size: int = IO_BUFFER_SIZE,
    ) -> None:
        """``check_done`` is called between chunks and raises ``CleaningAborted`` to stop."""
        self.offset_map = offset_map
        self.throttler = throttler
        self.check_done = check_done
        self.io_buffer_size = io_buffer_size

    def clean(self, task: CleaningTask, swap: Callable[[CleanedGroup], bool]) -> CleanResult:
        stats = CleanerStats()
        self.build_offset_map(task, stats)
        end_offset = self.offset_map.latest_offset + 1
        stats.map_done = time.monotonic()
        horizon: int | None = None
        below = [s for s in task.segments if s.base_offset < end_offset]
        for group in group_segments_by_size(
            below, task.segment_bytes, task.first_uncleanable_offset
        ):
            cleaned, group_horizon = self.clean_segments(task, group, stats)
            if not swap(cleaned):
                raise CleaningAborted(f"{task.name}: the log changed; cleaning stops")
            if group_horizon is not None and (horizon is None or group_horizon < horizon):
                horizon = group_horizon
        stats.buffer_utilization = self.offset_map.utilization
        stats.done = time.monotonic()
        return CleanResult(end_offset, stats, horizon)

    # -- reading ---------------------------------------------------------------
    def _batches(
        self, task: CleaningTask, segment: SegmentRef
    ) -> Iterator[tuple[BatchHeader, memoryview]]:
        """Every batch of ``segment`` (up to its planned size), CRC-checked, read in chunks
        of ``io_buffer_size`` (more for a bigger batch), throttled."""
        path = segment_paths(Path(task.dir), segment.base_offset)[0]
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise CleaningAborted(f"{task.name}: segment {segment.base_offset} is gone") from None
        try:
            position = 0
            while position < segment.size:
                self.check_done()
                want = min(self.io_buffer_size, segment.size - position)
                chunk = os.pread(fd, want, position)
                if self.throttler is not None:
                    self.throttler.maybe_throttle(len(chunk))
                view = memoryview(chunk)
                pos = 0
                while len(chunk) - pos >= HEADER_SIZE:
                    header = read_header(view, pos)
                    if pos + header.size > len(chunk):
                        break
                    verify_crc(view, pos, header)
                    yield header, view[pos : pos + header.size]
                    pos += header.size
                if pos == 0:  # a batch bigger than the buffer: read it whole
                    header = read_header(view, 0) if len(chunk) >= HEADER_SIZE else None
                    if header is None or position + header.size > segment.size:
                        raise InvalidRecordBatch(
                            f"{task.name}: segment {segment.base_offset} ends in a partial "
                            f"batch at position {position}"
                        )
                    big = os.pread(fd, header.size, position)
                    if len(big) != header.size:
                        raise InvalidRecordBatch(f"{task.name}: short read at {position}")
                    verify_crc(big, 0, header)
                    yield header, memoryview(big)
                    pos = header.size
                position += pos
        finally:
            os.close(fd)

    # -- the offset map ----------------------------------------------------------
    def build_offset_map(self, task: CleaningTask, stats: CleanerStats) -> None:
        """Map the dirty section ``[first_dirty_offset, first_uncleanable_offset)``; stop
        when the map is full. Everything below the first dirty offset counts as mapped
        (it was cleaned against every key up to there)."""
        m = self.offset_map
        m.clear()
        start = task.first_dirty_offset
        m.update_latest_offset(start - 1)
        dirty = [s for s in task.segments if s.next_offset > start]
        # an aborted transaction's records never count (Kafka buildOffsetMapForSegment)
        txns = CleanedTransactions(t for t in task.aborted_transactions if t.last_offset >= start)
        for i, segment in enumerate(dirty):
            next_start = (
                dirty[i + 1].base_offset if i + 1 < len(dirty) else task.first_uncleanable_offset
            )
            if self._map_segment(task, segment, start, next_start, stats, txns):
                log.debug("%s: offset map full in segment %d", task.name, segment.base_offset)
                return

    def _map_segment(
        self,
        task: CleaningTask,
        segment: SegmentRef,
        start: int,
        next_start: int,
        stats: CleanerStats,
        txns: CleanedTransactions,
    ) -> bool:
        """Add a segment's keys to the map; True if the map filled up on the way."""
        m = self.offset_map
        for header, batch in self._batches(task, segment):
            stats.map_bytes_read += header.size
            if header.last_offset < start:
                continue
            if header.is_control:
                txns.on_control_batch_read(header, _marker(batch, header))
            elif not txns.on_batch_read(header):
                base = header.base_offset
                section = records_section(batch, header)
                for span in iter_record_spans(section, header.record_count):
                    stats.map_records_read += 1
                    key = span[4]
                    offset = base + span[3]
                    if key is None or offset < start:
                        continue
                    if m.full and m.get(key) < 0:
                        return True
                    m.put(key, offset)
            m.update_latest_offset(header.last_offset)
        m.update_latest_offset(next_start - 1)
        return False

    # -- rewriting ---------------------------------------------------------------
    def clean_segments(
        self, task: CleaningTask, group: list[SegmentRef], stats: CleanerStats
    ) -> tuple[CleanedGroup, int | None]:
        """Filter ``group`` into one fsynced ``.cleaned`` segment; returns it and the
        earliest delete horizon of the tombstones it keeps."""
        cleaned = LogSegment(
            Path(task.dir),
            group[0].base_offset,
            index_interval_bytes=task.index_interval_bytes,
            created_ms=task.now_ms,
            fresh=True,
            suffix=CLEANED_FILE_SUFFIX,
        )
        horizon: int | None = None
        base = group[0].base_offset
        txns = CleanedTransactions(t for t in task.aborted_transactions if t.last_offset >= base)
        try:
            for segment in group:
                segment_horizon = self._clean_into(task, segment, cleaned, stats, txns)
                if segment_horizon is not None and (horizon is None or segment_horizon < horizon):
                    horizon = segment_horizon
            for txn in txns.cleaned_index:  # the ABORT markers kept, with data removed
                cleaned.txn_index.append(txn)
            cleaned.on_become_inactive()
            cleaned.flush()
            cleaned.close()
            # Keep the last old segment's mtime (retention of records without timestamps).
            with contextlib.suppress(FileNotFoundError):
                mtime = os.stat(segment_paths(Path(task.dir), group[-1].base_offset)[0]).st_mtime_ns
                os.utime(cleaned.log_path, ns=(mtime, mtime))
        except BaseException:
            cleaned.delete()
            raise
        result = CleanedGroup(tuple(group), cleaned.base_offset, cleaned.next_offset, cleaned.size)
        return result, horizon

    def _clean_into(
        self,
        task: CleaningTask,
        segment: SegmentRef,
        cleaned: LogSegment,
        stats: CleanerStats,
        txns: CleanedTransactions,
    ) -> int | None:
        producers = task.last_offsets_of_active_producers
        horizon: int | None = None
        out = bytearray()
        out_batches: list[tuple[int, BatchHeader]] = []
        for header, batch in self._batches(task, segment):
            stats.bytes_read += header.size
            stats.records_read += header.record_count
            retain_empty = header.next_offset == task.first_uncleanable_offset or (
                header.has_producer_id and producers.get(header.producer_id) == header.last_offset
            )
            if header.is_control:
                result = filter_control_batch(
                    batch,
                    header,
                    can_discard=txns.on_control_batch_read(header, _marker(batch, header)),
                    retain_empty=retain_empty,
                    now_ms=task.now_ms,
                    delete_retention_ms=task.delete_retention_ms,
                )
            elif txns.on_batch_read(header):  # an aborted transaction's
                result = empty_or_none(header, retain_empty=retain_empty)
            else:
                result = filter_batch(
                    batch,
                    header,
                    self.offset_map,
                    retain_empty=retain_empty,
                    now_ms=task.now_ms,
                    delete_retention_ms=task.delete_retention_ms,
                )
            if result.data is None:
                continue
            stats.records_retained += result.retained
            if result.tombstone_horizon is not None and (
                horizon is None or result.tombstone_horizon < horizon
            ):
                horizon = result.tombstone_horizon
            out_batches.append((len(out), read_header(result.data)))
            out += result.data
            if len(out) >= self.io_buffer_size:
                self._write(cleaned, out, out_batches, stats)
                out, out_batches = bytearray(), []
        if out:
            self._write(cleaned, out, out_batches, stats)
        return horizon

    def _write(
        self,
        cleaned: LogSegment,
        out: bytearray,
        batches: list[tuple[int, BatchHeader]],
        stats: CleanerStats,
    ) -> None:
        cleaned.append(out, batches)
        stats.bytes_written += len(out)
        if self.throttler is not None:
            self.throttler.maybe_throttle(len(out))


def _marker(batch: memoryview, header: BatchHeader) -> EndTxnMarker | None:
    """A control batch's COMMIT/ABORT marker (None: emptied, or another control type)."""
    if header.record_count == 0 or not header.has_producer_id:
        return None
    return read_end_txn_marker(batch, header)
