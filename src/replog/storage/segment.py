"""One log segment: ``<base>.log`` plus its ``.index``, ``.timeindex`` and ``.txnindex``
(the aborted transactions whose marker it holds, ``txn_index.py``).

The ``.log`` file holds whole record batches exactly as they were appended.
Appends are one ``pwrite`` of the caller's bytes; indexes get an entry only
every ``index.interval.bytes``. Reads find a start position through the sparse
offset index (or a small cache of recently seen positions) and return whole
batches with as few ``pread`` calls and copies as possible.

A segment the log cleaner writes carries a file suffix (``.cleaned``, then
``.swap``) on all three files until it replaces the segments it was cleaned from
(``change_file_suffixes``; Kafka ``LogSegment.changeFileSuffixes``).

Concurrency: owned by its ``Log``; not thread-safe, no awaits inside. A ``.cleaned``
segment belongs to the cleaner that writes it until the log's owner swaps it in.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from replog.protocol.records import (
    HEADER_SIZE,
    BatchHeader,
    InvalidRecordBatch,
    read_header,
    verify_crc,
)
from replog.storage.index import CorruptIndex, OffsetIndex, TimeIndex
from replog.storage.record_reader import iter_record_timestamps
from replog.storage.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
CLEANED_FILE_SUFFIX = ".cleaned"  # written by the log cleaner, not yet swapped in
SWAP_FILE_SUFFIX = ".swap"  # a cleaned segment being swapped in (completed on load)
_SCAN_CHUNK = 1 << 20
_HEADER_CHUNK = 8192
_POSITION_CACHE_LIMIT = 64


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    """A record found by timestamp (Kafka ``FileRecords.TimestampAndOffset``).

    ``leader_epoch`` is the partition leader epoch of the batch holding the record,
    -1 when the batch carries none.
    """

    timestamp: int
    offset: int
    leader_epoch: int = -1


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def txn_index_path(dir: Path, base_offset: int, suffix: str = "") -> Path:
    return Path(dir) / f"{base_offset:020d}{TXN_INDEX_SUFFIX}{suffix}"


def segment_paths(dir: Path, base_offset: int, suffix: str = "") -> tuple[Path, Path, Path]:
    """The ``.log``, ``.index`` and ``.timeindex`` paths of a segment, with ``suffix``."""
    stem = f"{base_offset:020d}"
    return (
        Path(dir) / f"{stem}{LOG_SUFFIX}{suffix}",
        Path(dir) / f"{stem}{INDEX_SUFFIX}{suffix}",
        Path(dir) / f"{stem}{TIME_INDEX_SUFFIX}{suffix}",
    )


class LogSegment:
    """A segment file and its indexes. ``next_offset`` is one past its last batch."""

    def __init__(
        self,
        dir: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        created_ms: int,
        fresh: bool,
        suffix: str = "",
    ) -> None:
        self.dir = Path(dir)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = created_ms
        self.suffix = suffix
        self.log_path, index_path, time_path = segment_paths(self.dir, base_offset, suffix)
        flags = os.O_RDWR | os.O_CREAT | (os.O_TRUNC if fresh else 0)
        self._fd: int | None = os.open(self.log_path, flags, 0o644)
        self.size = os.fstat(self._fd).st_size
        if fresh:
            index_path.unlink(missing_ok=True)
            time_path.unlink(missing_ok=True)
        self.txn_index = TransactionIndex(
            txn_index_path(self.dir, base_offset, suffix), load=not fresh
        )
        # An index that is missing, torn or inconsistent is rebuilt by recover().
        self.needs_recovery = False
        try:
            self.offset_index = OffsetIndex(index_path, base_offset, load=not fresh)
            self.time_index = TimeIndex(time_path, base_offset, load=not fresh)
        except CorruptIndex:
            self.offset_index = OffsetIndex(index_path, base_offset, load=False)
            self.time_index = TimeIndex(time_path, base_offset, load=False)
            self.needs_recovery = True
        if not fresh and self.size > 0:
            if not index_path.exists() or not time_path.exists():
                self.needs_recovery = True
            elif self.offset_index.last_position >= self.size:
                self.needs_recovery = True
        self.next_offset = base_offset
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp = base_offset
        self._bytes_since_last_index_entry = 0
        self._rolling_based_timestamp: int | None = None
        self._positions: dict[int, int] = {}  # batch base offset -> file position
        if not fresh:
            self.max_timestamp_so_far, self.offset_of_max_timestamp = self.time_index.last_entry

    # -- file helpers ----------------------------------------------------
    @property
    def fd(self) -> int:
        if self._fd is None:
            raise ValueError(f"segment {self.log_path} is closed")
        return self._fd

    def pread(self, size: int, position: int) -> bytes:
        """Exactly ``size`` bytes at ``position`` (fewer only at end of file)."""
        data = os.pread(self.fd, size, position)
        if len(data) == size or len(data) == 0:
            return data
        parts = [data]
        got = len(data)
        while got < size:
            more = os.pread(self.fd, size - got, position + got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def iter_batches(
        self,
        start_position: int = 0,
        *,
        verify: bool = False,
        headers_only: bool = False,
        end_position: int | None = None,
    ) -> Iterator[tuple[int, BatchHeader, memoryview | None]]:
        """Yield ``(position, header, batch bytes)`` from ``start_position``.

        With ``headers_only`` the bytes are None and only headers are read (small
        preads). Raises InvalidRecordBatch (or CorruptRecordBatch with ``verify``)
        at the first bad or truncated batch; the caller decides whether that is a
        torn tail to drop.
        """
        end = self.size if end_position is None else end_position
        chunk = _HEADER_CHUNK if headers_only else _SCAN_CHUNK
        pos = start_position
        buf = b""
        buf_start = pos
        while pos < end:
            off = pos - buf_start
            if len(buf) - off < HEADER_SIZE:
                buf, buf_start, off = self.pread(min(chunk, end - pos), pos), pos, 0
            header = read_header(buf, off)
            if pos + header.size > end:
                raise InvalidRecordBatch(
                    f"batch at position {pos} claims {header.size} bytes, {end - pos} left"
                )
            if headers_only:
                yield pos, header, None
            else:
                if len(buf) - off < header.size:
                    want = max(_SCAN_CHUNK, header.size)
                    buf, buf_start, off = self.pread(min(want, end - pos), pos), pos, 0
                if verify:
                    verify_crc(buf, off, header)
                yield pos, header, memoryview(buf)[off : off + header.size]
            pos += header.size

    # -- append ----------------------------------------------------------
    def append(self, data: bytes | bytearray, batches: list[tuple[int, BatchHeader]]) -> None:
        """Write ``data`` (whole batches, offsets final) at the end; index every interval.

        ``batches`` are ``(position in data, header)`` for each batch of ``data``.
        """
        position = self.size
        view = memoryview(data)
        written = 0
        try:
            while written < len(view):
                written += os.pwrite(self.fd, view[written:], position + written)
        except OSError:
            # A full disk (or an I/O error) mid-write: cut the partial batch off so the file
            # ends where the segment does, and let the caller answer KAFKA_STORAGE_ERROR.
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, position)
            raise
        if self.size == 0 and batches:
            self._rolling_based_timestamp = batches[0][1].max_timestamp
        self._positions_add(batches[0][1].base_offset, position)
        for rel, h in batches:
            self._index_batch(h, position + rel)
        self.size += len(view)
        self.next_offset = batches[-1][1].next_offset

    def _index_batch(self, h: BatchHeader, position: int) -> None:
        if h.max_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far = h.max_timestamp
            self.offset_of_max_timestamp = h.last_offset
        if self._bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(h.last_offset, position)
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += h.size

    def _positions_add(self, offset: int, position: int) -> None:
        if len(self._positions) >= _POSITION_CACHE_LIMIT:
            self._positions.clear()
        self._positions[offset] = position

    # -- read ------------------------------------------------------------
    def find_batch(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset``."""
        position = self._positions.get(offset)
        if position is None:
            position = self.offset_index.lookup(offset)[1]
        for pos, header, _ in self.iter_batches(position, headers_only=True):
            if header.last_offset >= offset:
                return pos, header
        return None

    def read(
        self, start_offset: int, max_bytes: int, *, max_offset: int | None, min_one_batch: bool
    ) -> tuple[bytes, int] | None:
        """Whole batches from the one holding ``start_offset``: ``(bytes, first base offset)``.

        None if no batch here has an offset >= ``start_offset``. Stops before a batch with
        base offset >= ``max_offset`` and before exceeding ``max_bytes``, except that the
        first batch is returned whole when ``min_one_batch``.
        """
        if start_offset >= self.next_offset:
            return None
        located = self.find_batch(start_offset)
        if located is None:
            return None
        start, first = located
        if max_offset is not None and first.base_offset >= max_offset:
            return b"", first.base_offset
        if first.size > max_bytes:
            if not min_one_batch:
                return b"", first.base_offset
            limit = first.size
        else:
            limit = max_bytes
        end, next_offset = self._end_of_read(start, first, start + limit, max_offset)
        data = self.pread(end - start, start)
        if next_offset < self.next_offset:
            self._positions_add(next_offset, end)
        return data, first.base_offset

    def _end_of_read(
        self, start: int, first: BatchHeader, limit_position: int, max_offset: int | None
    ) -> tuple[int, int]:
        """File position where a read from ``start`` stops, and the offset found there.

        The end is a batch boundary: before the first batch with base offset >= ``max_offset``
        and not past ``limit_position`` (the first batch always fits). Found through the
        sparse index and a few header reads, so the data itself is read (and copied) once.
        """
        end, next_offset = self.size, self.next_offset
        if max_offset is not None and max_offset < self.next_offset:
            located = self.find_batch(max_offset)
            if located is not None:
                pos, header = located
                if header.base_offset >= max_offset:
                    end, next_offset = pos, header.base_offset
                else:  # max_offset inside a batch: that batch is still returned
                    end, next_offset = pos + header.size, header.next_offset
        if end <= limit_position:
            return end, next_offset
        # Walk batch headers from the last indexed batch start at or before the limit.
        pos = max(start, self.offset_index.position_floor(limit_position))
        if pos == start:
            pos, next_offset = start + first.size, first.next_offset
        for batch_pos, header, _ in self.iter_batches(pos, headers_only=True):
            if batch_pos + header.size > limit_position:
                return batch_pos, header.base_offset
            next_offset = header.next_offset
        return self.size, next_offset

    # -- timestamps ------------------------------------------------------
    @property
    def rolling_based_timestamp(self) -> int | None:
        """maxTimestamp of the first batch (Kafka rolls by record time when it is known)."""
        if self._rolling_based_timestamp is None and self.size > 0:
            self._rolling_based_timestamp = read_header(self.pread(HEADER_SIZE, 0)).max_timestamp
        return self._rolling_based_timestamp

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        first = self.rolling_based_timestamp
        if first is not None and first >= 0:
            return message_timestamp - first
        return now_ms - self.created_ms

    def largest_timestamp(self) -> int:
        """Max record timestamp, or the file's mtime when records carry none (Kafka)."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        return int(os.stat(self.log_path).st_mtime * 1000)

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int
    ) -> TimestampAndOffset | None:
        """The first record at or after ``starting_offset`` whose timestamp is >= ``timestamp``
        (Kafka ``LogSegment.findOffsetByTimestamp``); decodes only the batch that holds it."""
        indexed_offset = self.time_index.lookup(timestamp)[1]
        position = self.offset_index.lookup(max(indexed_offset, starting_offset))[1]
        for _, header, batch in self.iter_batches(position):
            if header.max_timestamp < timestamp or header.last_offset < starting_offset:
                continue
            for offset, ts in iter_record_timestamps(bytes(batch), header):
                if ts >= timestamp and offset >= starting_offset:
                    return TimestampAndOffset(ts, offset, header.partition_leader_epoch)
        return None

    def exact_max_timestamp(self) -> TimestampAndOffset | None:
        """The first record carrying the segment's largest timestamp; None if empty."""
        if self.size == 0 or self.max_timestamp_so_far < 0:
            return None
        return self.find_offset_by_timestamp(self.max_timestamp_so_far, self.base_offset)

    # -- recovery and truncation ------------------------------------------
    def recover(self, on_batch: Callable[[BatchHeader], None] | None = None) -> int:
        """Rescan the whole file, verifying CRCs and offsets; rebuild the indexes; cut a bad tail.

        Returns the number of bytes truncated.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self._positions.clear()
        self.max_timestamp_so_far, self.offset_of_max_timestamp = -1, self.base_offset
        self._bytes_since_last_index_entry = 0
        self._rolling_based_timestamp = None
        valid = 0
        next_offset = self.base_offset
        try:
            for pos, header, _ in self.iter_batches(0, verify=True):
                if (
                    header.base_offset < next_offset
                    or header.last_offset - self.base_offset > 0x7FFFFFFF
                ):
                    raise InvalidRecordBatch(
                        f"batch at position {pos} has offset {header.base_offset}, "
                        f"expected at least {next_offset}"
                    )
                if valid == 0:
                    self._rolling_based_timestamp = header.max_timestamp
                self._index_batch(header, pos)
                if on_batch is not None:
                    on_batch(header)
                valid = pos + header.size
                next_offset = header.next_offset
        except InvalidRecordBatch:
            pass
        self.needs_recovery = False
        self.txn_index.truncate_to(next_offset)
        truncated = self.size - valid
        if truncated:
            os.ftruncate(self.fd, valid)
            self.size = valid
        self.next_offset = next_offset
        self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp)
        return truncated

    def load_next_offset(self) -> None:
        """Compute ``next_offset`` by scanning from the last offset index entry (load path)."""
        next_offset = self.base_offset
        for _, header, _ in self.iter_batches(self.offset_index.last_position, headers_only=True):
            next_offset = header.next_offset
        self.next_offset = next_offset
        if next_offset > self.base_offset:
            self._positions_add(next_offset, self.size)

    def truncate_to(self, offset: int) -> int:
        """Drop every batch with last offset >= ``offset`` (a batch holding it goes whole).

        Returns the bytes removed.
        """
        located = self.find_batch(offset) if offset < self.next_offset else None
        self.txn_index.truncate_to(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self._positions.clear()
        self._bytes_since_last_index_entry = 0
        if located is None:
            return 0
        position = located[0]
        removed = self.size - position
        os.ftruncate(self.fd, position)
        self.size = position
        self._recompute_after_truncate()
        return removed

    def _recompute_after_truncate(self) -> None:
        """Max timestamp and next offset from the surviving index entries plus a short scan."""
        ts, ts_offset = self.time_index.last_entry
        self.max_timestamp_so_far, self.offset_of_max_timestamp = ts, ts_offset
        start = min(self.offset_index.lookup(ts_offset)[1], self.offset_index.last_position)
        next_offset = self.base_offset
        for _, header, _ in self.iter_batches(start, headers_only=True):
            if header.max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far = header.max_timestamp
                self.offset_of_max_timestamp = header.last_offset
            next_offset = header.next_offset
        self.next_offset = next_offset
        if self.size == 0:
            self._rolling_based_timestamp = None

    # -- lifecycle -------------------------------------------------------
    def change_file_suffixes(self, old: str, new: str) -> None:
        """Rename the three files from suffix ``old`` to ``new`` (indexes first, the log
        last). A crash in between leaves files that ``log_loader`` knows how to finish."""
        if self.suffix != old:
            raise ValueError(f"segment {self.log_path} has suffix {self.suffix!r}, not {old!r}")
        log_path, index_path, time_path = segment_paths(self.dir, self.base_offset, new)
        for index, path in ((self.offset_index, index_path), (self.time_index, time_path)):
            if index.path.exists():
                os.replace(index.path, path)
            index.path = path
        self.txn_index.rename(txn_index_path(self.dir, self.base_offset, new))
        os.replace(self.log_path, log_path)
        self.log_path = log_path
        self.suffix = new

    def on_become_inactive(self) -> None:
        """Called when a newer segment takes over: the time index gets its final entry."""
        self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp)

    def flush(self) -> None:
        os.fsync(self.fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        if self._fd is None:
            return
        self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()
        os.close(self._fd)
        self._fd = None

    def delete(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.log_path.unlink(missing_ok=True)
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
