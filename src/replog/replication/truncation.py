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
functions work on the storage cache and on in-memory copies alike. The cache's
own rules (``end_offset_for_epoch``, ``assign_epoch``, ``truncate_epochs_from_end``)
live in ``replog.storage.epoch_entries`` and are re-exported from here.

Concurrency: pure functions over immutable inputs; safe anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

# The epoch-cache rules live in storage (one copy, shared with LeaderEpochFileCache);
# re-exported here for the replication layer and the simulator.
from replog.protocol.epochs import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_END_OFFSET,
    UNDEFINED_EPOCH_OFFSET,
    EpochEndOffset,
)
from replog.storage.epoch_entries import (
    EpochEntries,
    assign_epoch,
    check_epoch_entries,
    end_offset_for_epoch,
    latest_epoch,
    truncate_epochs_from_end,
)

__all__ = [
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_END_OFFSET",
    "UNDEFINED_EPOCH_OFFSET",
    "EpochEndOffset",
    "EpochEntries",
    "TruncationDecision",
    "assign_epoch",
    "check_epoch_entries",
    "end_offset_for_epoch",
    "high_watermark_truncation",
    "latest_epoch",
    "truncate_epochs_from_end",
    "truncation_offset",
]


@dataclass(frozen=True, slots=True)
class TruncationDecision:
    """Truncate the local log to ``offset`` (a no-op if it is already that short).

    ``completed`` False means: truncate, then ask the leader again with the
    (new) latest local epoch (KIP-279's iteration).
    """

    offset: int
    completed: bool


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
