"""Leader epoch entries (KIP-101, KIP-279): the lookup and update rules, as pure functions.

A log's leader epoch cache is a sequence of ``(leader_epoch, start_offset)``
pairs, both strictly increasing: epoch ``e`` started at ``start_offset`` and
lasted until the next entry's start (or the log end). These functions are the
only copy of Kafka's ``LeaderEpochFileCache`` rules (``endOffsetFor``,
``assign``, ``truncateFromEnd``, ``truncateFromStart``): the storage cache
(``leader_epoch.LeaderEpochFileCache``) keeps its entries as a tuple and calls
them, and the replication layer (``replication/truncation.py``, the simulator)
calls them on in-memory copies.

Concurrency: pure functions over immutable inputs; safe anywhere.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from replog.protocol.epochs import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_END_OFFSET,
    EpochEndOffset,
)

__all__ = [
    "EpochEntries",
    "assign_epoch",
    "check_epoch_entries",
    "end_offset_for_epoch",
    "epoch_for_offset",
    "latest_epoch",
    "truncate_epochs_from_end",
    "truncate_epochs_from_start",
]

EpochEntries = Sequence[tuple[int, int]]
"""``(leader_epoch, start_offset)`` pairs, both strictly increasing."""

Entries = tuple[tuple[int, int], ...]


def _epoch(entry: tuple[int, int]) -> int:
    return entry[0]


def _start(entry: tuple[int, int]) -> int:
    return entry[1]


def check_epoch_entries(entries: EpochEntries) -> None:
    """Raise ``ValueError`` unless epochs and start offsets both strictly increase."""
    for (e1, o1), (e2, o2) in zip(entries, entries[1:], strict=False):
        if not (e2 > e1 and o2 > o1):
            raise ValueError(f"epoch entries not strictly increasing: {list(entries)!r}")
    for epoch, start in entries:
        if epoch < 0 or start < 0:
            raise ValueError(f"negative epoch entry ({epoch}, {start})")


def latest_epoch(entries: EpochEntries) -> int | None:
    return entries[-1][0] if entries else None


def end_offset_for_epoch(
    entries: EpochEntries, log_end_offset: int, requested_epoch: int
) -> EpochEndOffset:
    """Answer ``OffsetsForLeaderEpoch`` from a log's epoch cache (Kafka ``endOffsetFor``).

    * undefined requested epoch, empty cache, or an epoch above every known one -> UNDEFINED;
    * the latest epoch -> ``(epoch, log_end_offset)``;
    * an epoch below every known one -> ``(requested_epoch, start of the first epoch)``;
    * otherwise ``(largest epoch <= requested, start offset of the next epoch)``.
    """
    if requested_epoch == UNDEFINED_EPOCH or not entries:
        return UNDEFINED_EPOCH_END_OFFSET
    if requested_epoch == entries[-1][0]:
        return EpochEndOffset(requested_epoch, log_end_offset)
    higher = bisect.bisect_right(entries, requested_epoch, key=_epoch)
    if higher == len(entries):
        return UNDEFINED_EPOCH_END_OFFSET
    if higher == 0:
        return EpochEndOffset(requested_epoch, entries[0][1])
    return EpochEndOffset(entries[higher - 1][0], entries[higher][1])


def epoch_for_offset(entries: EpochEntries, offset: int) -> int | None:
    """The epoch in force at ``offset`` (the last entry starting at or before it), if any."""
    i = bisect.bisect_right(entries, offset, key=_start)
    return entries[i - 1][0] if i else None


def assign_epoch(entries: EpochEntries, epoch: int, start_offset: int) -> Entries:
    """The cache after recording that ``epoch`` starts at ``start_offset``.

    An older epoch, or the latest one again at the same or a later offset,
    changes nothing; entries at or past the new one (by epoch or by start
    offset) are dropped first, so both columns stay strictly increasing (Kafka's
    ``maybeTruncateNonMonotonicEntries``). Raises ``ValueError`` on a negative entry.
    """
    if epoch < 0 or start_offset < 0:
        raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
    out = list(entries)
    if out:
        latest, latest_start = out[-1]
        if epoch < latest or (epoch == latest and start_offset >= latest_start):
            return tuple(out)
    while out and (out[-1][0] >= epoch or out[-1][1] >= start_offset):
        out.pop()
    out.append((epoch, start_offset))
    return tuple(out)


def truncate_epochs_from_end(entries: EpochEntries, end_offset: int) -> Entries:
    """The cache after the log was truncated to ``end_offset``: entries starting there or
    later go. A negative ``end_offset`` (undefined) changes nothing, as in Kafka."""
    if end_offset < 0:
        return tuple(entries)
    return tuple(entries[: bisect.bisect_left(entries, end_offset, key=_start)])


def truncate_epochs_from_start(entries: EpochEntries, start_offset: int) -> Entries:
    """The cache after the log start moved up to ``start_offset``: entries before it go,
    and the epoch in force there stays as the first entry, moved up to ``start_offset``."""
    i = bisect.bisect_right(entries, start_offset, key=_start)
    if i == 0:
        return tuple(entries)
    return ((entries[i - 1][0], start_offset), *entries[i:])
