"""Leader epoch cache (KIP-101): which leader epoch started at which offset.

Persisted to ``<partition dir>/leader-epoch-checkpoint`` in Kafka's checkpoint
format (``0\\n<count>\\n<epoch> <start_offset>\\n...``), rewritten atomically on
every change. Followers ask the leader ``end_offset_for(epoch)`` to find where
their log diverges and truncate there instead of to the high watermark.

Concurrency: owned by its ``Log``; same rules (one task, no awaits inside).
"""

from __future__ import annotations

import bisect
import logging
from pathlib import Path

from replog.storage.checkpoints import (
    CheckpointError,
    read_checkpoint_lines,
    write_checkpoint_lines,
)

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

log = logging.getLogger(__name__)


class LeaderEpochFileCache:
    """Ordered ``(epoch, start_offset)`` entries, both strictly increasing."""

    def __init__(self, path: Path, *, topic_partition: str = "") -> None:
        self.path = Path(path)
        self._name = topic_partition or self.path.parent.name
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        self._dirty = False  # written since the last fsync
        lines = read_checkpoint_lines(self.path)
        for fields in lines or ():
            if len(fields) != 2:
                raise CheckpointError(f"{self.path}: malformed line {' '.join(fields)!r}")
            epoch, start = int(fields[0]), int(fields[1])
            if self._epochs and (epoch <= self._epochs[-1] or start < self._offsets[-1]):
                raise CheckpointError(f"{self.path}: entries are not monotonic at epoch {epoch}")
            self._epochs.append(epoch)
            self._offsets.append(start)

    # -- queries ---------------------------------------------------------
    @property
    def latest_epoch(self) -> int | None:
        return self._epochs[-1] if self._epochs else None

    @property
    def earliest_entry(self) -> tuple[int, int] | None:
        return (self._epochs[0], self._offsets[0]) if self._epochs else None

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._offsets, strict=True))

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's ``endOffsetFor``.

        * undefined requested epoch, or one above every known epoch -> ``(-1, -1)``;
        * the latest epoch -> ``(epoch, log_end_offset)``;
        * below every known epoch -> ``(requested_epoch, start offset of the first epoch)``;
        * otherwise ``(largest epoch <= requested, start offset of the next higher epoch)``.
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._epochs[-1]:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._offsets[0]
        return self._epochs[higher - 1], self._offsets[higher]

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch in force at ``offset`` (largest entry with start <= offset)."""
        i = bisect.bisect_right(self._offsets, offset)
        return self._epochs[i - 1] if i else None

    # -- changes ---------------------------------------------------------
    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset``.

        An epoch below the latest is ignored (with a warning), and so is the
        latest epoch again unless it moves its start earlier. Entries whose
        start offset is at or past ``start_offset`` are dropped first so both
        columns stay strictly increasing (Kafka's maybeTruncateNonMonotonicEntries).
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        if self._epochs:
            latest, latest_start = self._epochs[-1], self._offsets[-1]
            if epoch < latest:
                log.warning(
                    "%s: ignoring leader epoch %d at offset %d below the latest epoch %d",
                    self._name,
                    epoch,
                    start_offset,
                    latest,
                )
                return
            if epoch == latest and start_offset >= latest_start:
                return
        while self._epochs and (self._epochs[-1] >= epoch or self._offsets[-1] >= start_offset):
            removed = (self._epochs.pop(), self._offsets.pop())
            if removed[1] != start_offset:
                log.warning(
                    "%s: leader epoch entry %s removed by new entry (%d, %d)",
                    self._name,
                    removed,
                    epoch,
                    start_offset,
                )
        self._epochs.append(epoch)
        self._offsets.append(start_offset)
        self._flush()

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after ``end_offset`` (the log was truncated there)."""
        if end_offset < 0 or not self._offsets or self._offsets[-1] < end_offset:
            return
        cut = bisect.bisect_left(self._offsets, end_offset)
        del self._epochs[cut:], self._offsets[cut:]
        self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: drop entries before it, keeping the
        epoch in force there as the first entry, moved up to ``start_offset``."""
        i = bisect.bisect_right(self._offsets, start_offset)
        if i == 0:
            return
        epoch = self._epochs[i - 1]
        if i == 1 and self._offsets[0] == start_offset:
            return
        del self._epochs[:i], self._offsets[:i]
        self._epochs.insert(0, epoch)
        self._offsets.insert(0, start_offset)
        self._flush()

    def clear(self) -> None:
        if self._epochs:
            self._epochs.clear()
            self._offsets.clear()
        self._flush()

    def _flush(self) -> None:
        """Note a change; ``flush`` writes it (tmp, fsync, rename), at the latest with
        the next ``Log.flush`` and always before the recovery point passes it.

        Writing at every change made a LeaderAndIsr for thousands of partitions
        spend most of its time creating files (Kafka moved this write off the
        request path too, KAFKA-15046). A change lost in a crash is harmless: the
        loader truncates the cache to the log end and rebuilds the entries past the
        recovery point from the batches, which carry their leader epochs.
        """
        self._dirty = True

    def _write(self, *, durable: bool) -> None:
        write_checkpoint_lines(
            self.path,
            (f"{e} {o}" for e, o in zip(self._epochs, self._offsets, strict=True)),
            durable=durable,
        )

    def flush(self) -> None:
        """Write the checkpoint durably if it changed (called by ``Log.flush``)."""
        if self._dirty:
            self._write(durable=True)
            self._dirty = False
