"""Sparse offset index (``.index``) and time index (``.timeindex``) of a segment.

On-disk formats are Kafka's: offset index entries are 8 bytes
``(relative offset int32, position int32)``, time index entries 12 bytes
``(timestamp int64, relative offset int32)``, relative to the segment's base
offset. Files are plain and append-only (no preallocation).

Entries live in memory (two Python lists per index; lookups are ``bisect``)
and new ones are written to the file on ``flush`` / ``close``. That is safe
because every segment past the recovery point has its indexes rebuilt on an
unclean start, and ``Log.flush`` flushes indexes before moving the recovery
point.

Concurrency: owned by the segment's ``Log``; not thread-safe.
"""

from __future__ import annotations

import bisect
import os
import struct
from pathlib import Path

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class CorruptIndex(ValueError):
    """An index file whose contents cannot be trusted; the caller rebuilds it."""


class _IndexFile:
    """Shared file handling: a sorted in-memory copy plus pending appends."""

    entry_size = 0

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self._written = 0  # entries already in the file
        self._dirty = True  # the file may differ from _written entries, or is not fsynced

    def __len__(self) -> int:
        raise NotImplementedError

    def _complete_entries(self) -> int:
        """Entries fully appended (both columns): safe to read while another thread appends."""
        raise NotImplementedError

    def _encode(self, start: int, end: int) -> bytes:
        raise NotImplementedError

    def _file_size(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return -1

    def _read_raw(self) -> bytes:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return b""
        return raw[: len(raw) - len(raw) % self.entry_size]

    def flush(self, *, fsync: bool = True) -> None:
        """Write entries added since the last flush, then fsync the file.

        May run in a worker thread while the owner appends entries (not while it truncates).
        """
        end = self._complete_entries()
        pending = self._encode(self._written, end)
        if not pending and not self._dirty:
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if pending or os.fstat(fd).st_size != self._written * self.entry_size:
                os.ftruncate(fd, self._written * self.entry_size)
                os.pwrite(fd, pending, self._written * self.entry_size)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        self._written = end
        self._dirty = not fsync

    def _truncated_entries(self, keep: int) -> None:
        if keep < self._written or keep == 0:
            self._written = keep
            self._dirty = True
            if self.path.exists():
                os.truncate(self.path, keep * self.entry_size)

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)


class OffsetIndex(_IndexFile):
    """Maps offsets to file positions, one entry every ``index.interval.bytes``."""

    entry_size = _OFFSET_ENTRY.size

    def __init__(self, path: Path, base_offset: int, *, load: bool = True) -> None:
        super().__init__(path, base_offset)
        self._offsets: list[int] = []
        self._positions: list[int] = []
        if load:
            raw = self._read_raw()
            for rel, pos in _OFFSET_ENTRY.iter_unpack(raw):
                offset = base_offset + rel
                if rel < 0 or pos < 0:
                    raise CorruptIndex(f"{self.path}: negative entry ({rel}, {pos})")
                if self._offsets and (offset <= self._offsets[-1] or pos < self._positions[-1]):
                    raise CorruptIndex(f"{self.path}: entries out of order at offset {offset}")
                self._offsets.append(offset)
                self._positions.append(pos)
            self._written = len(self._offsets)
            self._dirty = self._file_size() != self._written * self.entry_size

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def last_offset(self) -> int:
        return self._offsets[-1] if self._offsets else self.base_offset

    @property
    def last_position(self) -> int:
        return self._positions[-1] if self._positions else 0

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._offsets, self._positions, strict=True))

    def append(self, offset: int, position: int) -> None:
        if self._offsets and offset <= self._offsets[-1]:
            raise ValueError(f"index entry offset {offset} not above {self._offsets[-1]}")
        if offset - self.base_offset > 0x7FFFFFFF or offset < self.base_offset:
            raise ValueError(f"offset {offset} not relative to base {self.base_offset}")
        self._offsets.append(offset)
        self._positions.append(position)

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """Largest entry with offset <= target, else ``(base_offset, 0)``."""
        i = bisect.bisect_right(self._offsets, target_offset)
        if i == 0:
            return self.base_offset, 0
        return self._offsets[i - 1], self._positions[i - 1]

    def position_floor(self, position: int) -> int:
        """Largest indexed batch position <= ``position`` (0 if none): a batch boundary."""
        i = bisect.bisect_right(self._positions, position)
        return self._positions[i - 1] if i else 0

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= ``offset``."""
        keep = bisect.bisect_left(self._offsets, offset)
        del self._offsets[keep:], self._positions[keep:]
        self._truncated_entries(keep)

    def reset(self) -> None:
        self._offsets.clear()
        self._positions.clear()
        self._truncated_entries(0)

    def _complete_entries(self) -> int:
        return min(len(self._offsets), len(self._positions))

    def _encode(self, start: int, end: int) -> bytes:
        base = self.base_offset
        return b"".join(
            _OFFSET_ENTRY.pack(o - base, p)
            for o, p in zip(self._offsets[start:end], self._positions[start:end], strict=True)
        )


class TimeIndex(_IndexFile):
    """Maps max-timestamp-so-far to the offset holding it; timestamps strictly increase."""

    entry_size = _TIME_ENTRY.size

    def __init__(self, path: Path, base_offset: int, *, load: bool = True) -> None:
        super().__init__(path, base_offset)
        self._timestamps: list[int] = []
        self._offsets: list[int] = []
        if load:
            raw = self._read_raw()
            for ts, rel in _TIME_ENTRY.iter_unpack(raw):
                offset = base_offset + rel
                if rel < 0:
                    raise CorruptIndex(f"{self.path}: negative relative offset {rel}")
                if self._timestamps and (ts <= self._timestamps[-1] or offset < self._offsets[-1]):
                    raise CorruptIndex(f"{self.path}: entries out of order at offset {offset}")
                self._timestamps.append(ts)
                self._offsets.append(offset)
            self._written = len(self._offsets)
            self._dirty = self._file_size() != self._written * self.entry_size

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def last_entry(self) -> tuple[int, int]:
        """``(timestamp, offset)`` of the last entry, else ``(-1, base_offset)``."""
        if not self._offsets:
            return -1, self.base_offset
        return self._timestamps[-1], self._offsets[-1]

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._timestamps, self._offsets, strict=True))

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Append unless ``timestamp`` is not above the last entry's (Kafka's maybeAppend)."""
        if self._offsets:
            if offset < self._offsets[-1]:
                raise ValueError(f"time index offset {offset} below {self._offsets[-1]}")
            if timestamp <= self._timestamps[-1]:
                return
        if offset - self.base_offset > 0x7FFFFFFF or offset < self.base_offset:
            raise ValueError(f"offset {offset} not relative to base {self.base_offset}")
        self._timestamps.append(timestamp)
        self._offsets.append(offset)

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """Largest entry with timestamp <= target, else ``(-1, base_offset)``."""
        i = bisect.bisect_right(self._timestamps, target_timestamp)
        if i == 0:
            return -1, self.base_offset
        return self._timestamps[i - 1], self._offsets[i - 1]

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= ``offset``."""
        keep = bisect.bisect_left(self._offsets, offset)
        del self._timestamps[keep:], self._offsets[keep:]
        self._truncated_entries(keep)

    def reset(self) -> None:
        self._timestamps.clear()
        self._offsets.clear()
        self._truncated_entries(0)

    def _complete_entries(self) -> int:
        return min(len(self._offsets), len(self._timestamps))

    def _encode(self, start: int, end: int) -> bytes:
        base = self.base_offset
        return b"".join(
            _TIME_ENTRY.pack(t, o - base)
            for t, o in zip(self._timestamps[start:end], self._offsets[start:end], strict=True)
        )
