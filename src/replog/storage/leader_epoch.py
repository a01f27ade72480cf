"""Leader epoch cache (KIP-101): which leader epoch started at which offset.

Persisted to ``<partition dir>/leader-epoch-checkpoint`` in Kafka's checkpoint
format (``0\\n<count>\\n<epoch> <start_offset>\\n...``), rewritten atomically
at the next ``flush`` after a change. The lookup and update rules are the pure
functions of ``epoch_entries``. Followers ask the leader ``end_offset_for(epoch)`` to find where
their log diverges and truncate there instead of to the high watermark.

Concurrency: owned by its ``Log``; same rules (one task, no awaits inside).
"""

from __future__ import annotations

import logging
from pathlib import Path

from replog.storage.checkpoints import (
    CheckpointError,
    read_checkpoint_lines,
    write_checkpoint_lines,
)
from replog.storage.epoch_entries import (
    assign_epoch,
    end_offset_for_epoch,
    epoch_for_offset,
    truncate_epochs_from_end,
    truncate_epochs_from_start,
)

__all__ = [
    "LEADER_EPOCH_CHECKPOINT",
    "LeaderEpochFileCache",
]

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"

log = logging.getLogger(__name__)


class LeaderEpochFileCache:
    """Ordered ``(epoch, start_offset)`` entries, both strictly increasing.

    The rules are ``epoch_entries``' pure functions; this class holds the
    current entries, logs what a change drops and persists the checkpoint.
    """

    def __init__(self, path: Path, *, topic_partition: str = "") -> None:
        self.path = Path(path)
        self._name = topic_partition or self.path.parent.name
        self._entries: tuple[tuple[int, int], ...] = ()
        self._dirty = False  # written since the last fsync
        lines = read_checkpoint_lines(self.path)
        entries: list[tuple[int, int]] = []
        for fields in lines or ():
            if len(fields) != 2:
                raise CheckpointError(f"{self.path}: malformed line {' '.join(fields)!r}")
            epoch, start = int(fields[0]), int(fields[1])
            if entries and (epoch <= entries[-1][0] or start < entries[-1][1]):
                raise CheckpointError(f"{self.path}: entries are not monotonic at epoch {epoch}")
            entries.append((epoch, start))
        self._entries = tuple(entries)

    # -- queries ---------------------------------------------------------
    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1][0] if self._entries else None

    @property
    def earliest_entry(self) -> tuple[int, int] | None:
        return self._entries[0] if self._entries else None

    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's ``endOffsetFor`` as ``(epoch, end_offset)``; see ``end_offset_for_epoch``."""
        answer = end_offset_for_epoch(self._entries, log_end_offset, requested_epoch)
        return answer.leader_epoch, answer.end_offset

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch in force at ``offset`` (largest entry with start <= offset)."""
        return epoch_for_offset(self._entries, offset)

    # -- changes ---------------------------------------------------------
    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (``assign_epoch``'s rule).

        An epoch below the latest is ignored with a warning; entries the new
        one displaces are logged. Raises ``ValueError`` on a negative entry.
        """
        old = self._entries
        new = assign_epoch(old, epoch, start_offset)
        if new == old:
            if old and epoch < old[-1][0]:
                log.warning(
                    "%s: ignoring leader epoch %d at offset %d below the latest epoch %d",
                    self._name,
                    epoch,
                    start_offset,
                    old[-1][0],
                )
            return
        kept = len(new) - 1  # every new entry but the last was already there
        for removed in old[kept:]:
            if removed[1] != start_offset:
                log.warning(
                    "%s: leader epoch entry %s removed by new entry (%d, %d)",
                    self._name,
                    removed,
                    epoch,
                    start_offset,
                )
        self._set(new)

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after ``end_offset`` (the log was truncated there)."""
        self._set(truncate_epochs_from_end(self._entries, end_offset))

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: drop entries before it, keeping the
        epoch in force there as the first entry, moved up to ``start_offset``."""
        self._set(truncate_epochs_from_start(self._entries, start_offset))

    def clear(self) -> None:
        self._entries = ()
        self._flush()

    def _set(self, entries: tuple[tuple[int, int], ...]) -> None:
        if entries != self._entries:
            self._entries = entries
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
            (f"{e} {o}" for e, o in self._entries),
            durable=durable,
        )

    @property
    def dirty(self) -> bool:
        """Changed since the checkpoint was last written durably."""
        return self._dirty

    def flush(self) -> None:
        """Write the checkpoint durably if it changed (called by ``Log.flush``)."""
        if self._dirty:
            self._write(durable=True)
            self._dirty = False
