"""The segments of one partition's log on local disk (Kafka ``LocalLog``).

``LocalLog`` holds the ordered ``LogSegment``s and what is done to them alone: when to
roll and the new active segment, reads of whole batches across segments, cutting them
at an offset, deleting the oldest, swapping a cleaned segment in, and the fsyncs of the
segments and of the directory. ``Log`` (``replog.storage.log``, Kafka ``UnifiedLog``)
builds on it: offsets and leader epochs assigned, producer state, the log start offset,
the recovery point, the high watermark and retention.

Concurrency: owned by its ``Log``'s owner; no method awaits. ``flush`` may run in a
worker thread while the owner appends and reads; it must not overlap ``truncate_to``,
``truncate_fully_and_start_at``, ``delete_oldest``, ``replace_segments`` or ``close``.
"""

from __future__ import annotations

import bisect
import logging
import zlib
from dataclasses import dataclass
from pathlib import Path

from replog.storage.checkpoints import fsync_dir
from replog.storage.log_config import LogConfig
from replog.storage.segment import CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX, LogSegment

__all__ = ["FetchDataInfo", "LocalLog"]

# The log's logger: these lines were ``Log``'s own before they moved here.
log = logging.getLogger("replog.storage.log")

_INT32_MAX = 0x7FFFFFFF


@dataclass
class FetchDataInfo:
    records: bytes  # whole batches
    first_offset: int  # base offset of the first batch returned (the requested offset if none)


class LocalLog:
    """One partition's segments, the last one active; never empty."""

    def __init__(self, dir: Path, name: str, config: LogConfig, segments: list[LogSegment]):
        self.dir = dir
        self.name = name
        self.config = config
        self.segments = segments
        self._dir_dirty = False  # segment files created since the last flush

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        for segment in self.segments:
            segment.index_interval_bytes = config.index_interval_bytes

    def segment_index(self, offset: int) -> int:
        """Index of the segment whose base offset is the largest <= ``offset`` (0 if none)."""
        i = bisect.bisect_right(self.segments, offset, key=_base_offset) - 1
        return max(i, 0)

    # -- roll ------------------------------------------------------------
    def should_roll(
        self, now_ms: int, *, messages_size: int, max_timestamp: int, max_offset: int
    ) -> bool:
        """Whether Kafka would roll the active segment before this append."""
        segment = self.active_segment
        if segment.size == 0:
            return False  # Kafka would replace an empty segment with an identical one
        config = self.config
        return (
            segment.size > config.segment_bytes - messages_size
            or segment.time_waited_for_roll(now_ms, max_timestamp)
            > config.segment_ms - self._roll_jitter_ms(segment)
            or max_offset - segment.base_offset > _INT32_MAX
        )

    def _roll_jitter_ms(self, segment: LogSegment) -> int:
        """Kafka's ``segment.jitter.ms``: how much before ``segment.ms`` this segment
        rolls. Kafka draws it at random per segment, below min(jitter, segment.ms); here
        it is a hash of the log's name and the segment's base offset: as spread over the
        logs, and the same on every replay."""
        bound = min(self.config.segment_jitter_ms, self.config.segment_ms)
        if bound <= 0:
            return 0
        return zlib.crc32(f"{self.name}@{segment.base_offset}".encode()) % bound

    def roll(self, now_ms: int) -> LogSegment:
        """A new active segment at the log end offset (the older ones already flushed)."""
        new_base = self.log_end_offset
        segment = LogSegment(
            self.dir,
            new_base,
            index_interval_bytes=self.config.index_interval_bytes,
            created_ms=now_ms,
            fresh=True,
        )
        self.segments.append(segment)
        self._dir_dirty = True
        log.info("%s: rolled new segment at offset %d", self.name, new_base)
        return segment

    # -- read ------------------------------------------------------------
    def read(
        self, start_offset: int, max_bytes: int, *, max_offset: int | None, min_one_batch: bool
    ) -> FetchDataInfo:
        """Whole batches from the one containing ``start_offset`` (see ``Log.read``)."""
        if start_offset == self.log_end_offset or (
            max_offset is not None and start_offset >= max_offset
        ):
            return FetchDataInfo(b"", start_offset)
        for segment in self.segments[self.segment_index(start_offset) :]:
            result = segment.read(
                start_offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch
            )
            if result is not None:
                data, first = result
                return FetchDataInfo(data, first if data else start_offset)
        return FetchDataInfo(b"", start_offset)

    # -- truncation and deletion -----------------------------------------
    def truncate_to(self, offset: int) -> int:
        """Delete the segments past the one holding ``offset`` and cut that one at it (a
        batch straddling it goes whole); returns the bytes cut from it."""
        keep = self.segment_index(offset)
        for segment in self.segments[keep + 1 :]:
            segment.delete()
        del self.segments[keep + 1 :]
        return self.active_segment.truncate_to(offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment; one empty segment at ``offset`` takes their place."""
        for segment in self.segments:
            segment.delete()
        self.segments = [
            LogSegment(
                self.dir,
                offset,
                index_interval_bytes=self.config.index_interval_bytes,
                created_ms=self.segments[-1].created_ms,
                fresh=True,
            )
        ]
        self._dir_dirty = True

    def delete_oldest(self, count: int) -> None:
        """Delete the ``count`` oldest segments, never the active one."""
        assert count < len(self.segments), "a log always keeps one segment"
        for segment in self.segments[:count]:
            segment.delete()
        del self.segments[:count]

    def replace_segments(self, new: LogSegment, old: list[LogSegment]) -> None:
        """Swap a ``.cleaned`` segment in for the consecutive closed segments ``old`` it was
        cleaned from (Kafka ``LocalLog.replaceSegments``): ``.cleaned`` -> ``.swap``, the
        old segments deleted, ``.swap`` -> live. A kill at any point is finished by
        ``log_loader`` (a ``.swap`` replaces the segments it overlaps).
        """
        first = next(i for i, s in enumerate(self.segments) if s is old[0])
        live = self.segments[first : first + len(old)]
        if len(live) != len(old) or any(a is not b for a, b in zip(live, old, strict=True)):
            raise ValueError(f"{self.name}: segments to replace are not consecutive live ones")
        if first + len(old) >= len(self.segments):
            raise ValueError(f"{self.name}: the active segment is never replaced")
        if new.base_offset != old[0].base_offset or new.suffix != CLEANED_FILE_SUFFIX:
            raise ValueError(f"{self.name}: {new.log_path} cannot replace {old[0].log_path}")
        try:
            new.change_file_suffixes(CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX)
            fsync_dir(self.dir)
        except BaseException:
            new.delete()  # nothing was replaced yet: the swap did not happen
            raise
        self.segments[first : first + len(old)] = [new]
        for segment in old:
            segment.delete()
        new.change_file_suffixes(SWAP_FILE_SUFFIX, "")
        fsync_dir(self.dir)
        log.info(
            "%s: swapped in cleaned segment %d for %d segment(s) (%d -> %d bytes)",
            self.name,
            new.base_offset,
            len(old),
            sum(s.size for s in old),
            new.size,
        )

    # -- durability ------------------------------------------------------
    def flush(self, from_offset: int) -> None:
        """fsync the segment holding ``from_offset``, every later one, and the directory
        if segment files were created since the last flush."""
        for segment in self.segments[self.segment_index(from_offset) :]:
            segment.flush()
        if self._dir_dirty:
            self._dir_dirty = False  # before the fsync: a concurrent roll sets it again
            fsync_dir(self.dir)

    def close(self) -> None:
        for segment in self.segments:
            segment.close()

    def delete_files(self) -> None:
        for segment in self.segments:
            segment.delete()


def _base_offset(segment: LogSegment) -> int:
    return segment.base_offset
