"""Where a follower truncates its log: leader epochs (KIP-101, KIP-279), pure functions.

A follower that starts following a new leader (or restarts) may hold records
the new leader does not have. Truncating to the high watermark (the pre-KIP-101
rule) can throw away committed records, because a follower learns the HW one
fetch late (seed 003, scenario 1), and can leave replicas diverged when the
follower's HW is above where the logs agree (scenario 2). Instead the follower
asks the leader, with ``OffsetsForLeaderEpoch``, where the follower's latest
epoch ends in the leader's log, and truncates there.

Epoch caches are passed in as sequences of ``(epoch, start_offset)`` pairs, both
strictly increasing (``LeaderEpochFileCache.entries()`` has this shape), so the
functions work on the storage cache and on in-memory copies alike.

Concurrency: pure functions over immutable inputs; safe anywhere.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

EpochEntries = Sequence[tuple[int, int]]
"""``(leader_epoch, start_offset)`` pairs, both strictly increasing."""


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """One partition of an ``OffsetsForLeaderEpoch`` answer.

    ``leader_epoch`` is the largest epoch <= the requested one that the
    answering log knows, ``end_offset`` the offset where that epoch ends
    (the start of the next epoch, or the log end offset for the latest).
    Both are ``-1`` (UNDEFINED) when the answering log has no usable entry.
    """

    leader_epoch: int
    end_offset: int

    @property
    def is_undefined(self) -> bool:
        return self.end_offset == UNDEFINED_EPOCH_OFFSET


UNDEFINED_EPOCH_END_OFFSET = EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


@dataclass(frozen=True, slots=True)
class TruncationDecision:
    """Truncate the local log to ``offset`` (a no-op if it is already that short).

    ``completed`` False means: truncate, then ask the leader again with the
    (new) latest local epoch (KIP-279's iteration).
    """

    offset: int
    completed: bool


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
    epochs = [e for e, _ in entries]
    if requested_epoch == epochs[-1]:
        return EpochEndOffset(requested_epoch, log_end_offset)
    higher = bisect.bisect_right(epochs, requested_epoch)
    if higher == len(epochs):
        return UNDEFINED_EPOCH_END_OFFSET
    if higher == 0:
        return EpochEndOffset(requested_epoch, entries[0][1])
    return EpochEndOffset(epochs[higher - 1], entries[higher][1])


def assign_epoch(
    entries: EpochEntries, epoch: int, start_offset: int
) -> tuple[tuple[int, int], ...]:
    """The cache after recording that ``epoch`` starts at ``start_offset``.

    Same rule as ``LeaderEpochFileCache.assign``: an older epoch, or the latest
    one again at a later offset, changes nothing; entries at or past the new
    one (by epoch or by start offset) are dropped first.
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


def truncate_epochs_from_end(entries: EpochEntries, end_offset: int) -> tuple[tuple[int, int], ...]:
    """The cache after the log was truncated to ``end_offset``: entries starting there or later go."""
    return tuple((e, o) for e, o in entries if o < end_offset)


def truncation_offset(
    follower_entries: EpochEntries,
    follower_log_end_offset: int,
    follower_high_watermark: int,
    leader_answer: EpochEndOffset,
) -> TruncationDecision:
    """Where the follower truncates, given the leader's answer for the follower's latest epoch.

    Mirrors Kafka's ``AbstractFetcherThread.getOffsetTruncationState``:

    * the leader had nothing to say (UNDEFINED end offset: no epoch information,
      or an epoch the leader has never seen): fall back to the high watermark;
    * the leader answered without an epoch (an old-format answer): truncate to
      ``min(end_offset, LEO)``;
    * the follower knows the epoch the leader answered with: truncate to
      ``min(leader end offset, follower's own end offset for that epoch, LEO)``;
    * the follower does not know that epoch (the leader answered with a smaller
      epoch that the follower skipped): truncate to where the follower's largest
      epoch below it ends and ask again (``completed=False``);
    * the follower has no epoch at or below the answer: trust the leader's offset.
    """
    leo = follower_log_end_offset
    if leader_answer.is_undefined:
        return TruncationDecision(min(follower_high_watermark, leo), completed=True)
    if leader_answer.leader_epoch == UNDEFINED_EPOCH:
        return TruncationDecision(min(leader_answer.end_offset, leo), completed=True)
    own = end_offset_for_epoch(follower_entries, leo, leader_answer.leader_epoch)
    if own.is_undefined or own.leader_epoch == UNDEFINED_EPOCH:
        # No local epoch at or below the leader's: nothing local to compare against.
        return TruncationDecision(min(leader_answer.end_offset, leo), completed=True)
    if own.leader_epoch != leader_answer.leader_epoch:
        return TruncationDecision(min(own.end_offset, leo), completed=False)
    return TruncationDecision(min(own.end_offset, leader_answer.end_offset, leo), completed=True)


def high_watermark_truncation(
    follower_log_end_offset: int, follower_high_watermark: int
) -> TruncationDecision:
    """The pre-KIP-101 rule: truncate to the high watermark. Kept to show why it loses data."""
    return TruncationDecision(min(follower_high_watermark, follower_log_end_offset), completed=True)
