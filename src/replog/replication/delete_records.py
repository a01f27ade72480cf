"""DeleteRecords' rules, pure functions (Kafka ``Partition.deleteRecordsOnLeader``,
``Partition.lowWatermarkIfLeader``, ``DelayedDeleteRecords``).

* A leader moves its log start offset up to the requested offset: -1 means the
  high watermark; any other offset below 0 or above the high watermark is
  OFFSET_OUT_OF_RANGE; a topic whose ``cleanup.policy`` lacks ``delete`` refuses
  (POLICY_VIOLATION). An offset at or below the current log start changes
  nothing and succeeds.
* The low watermark is the least log start offset over the leader and its live
  followers, as their fetches last reported it (-1 for a follower that has not
  fetched in this leadership).
* The DeleteRecords answer waits until the low watermark reaches the requested
  offset (or the leadership ends, or the request times out).

``PartitionMachine`` asks them of its ``LeaderState``. Concurrency: pure; safe anywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from replog.replication.actions import Action, AdvanceLogStart
from replog.replication.core import LeaderState

DELETE_TO_HIGH_WATERMARK = -1  # DeleteRecords' offset meaning "up to the high watermark"
UNKNOWN_LOW_WATERMARK = -1  # Kafka ``DeleteRecordsResponse.INVALID_LOW_WATERMARK``


@dataclass(frozen=True, slots=True)
class DeleteRecordsStatus:
    """Where a waiting DeleteRecords stands (Kafka ``DelayedDeleteRecords.tryComplete``)."""

    done: bool
    error: ErrorCode = ErrorCode.none
    low_watermark: int = UNKNOWN_LOW_WATERMARK


def delete_records_target(
    offset: int, high_watermark: int, *, delete_allowed: bool
) -> tuple[ErrorCode, int]:
    """``(error, offset the log start moves to)`` for a leader asked to delete below ``offset``."""
    if not delete_allowed:
        return ErrorCode.policy_violation, -1
    target = high_watermark if offset == DELETE_TO_HIGH_WATERMARK else offset
    if target < 0 or target > high_watermark:
        return ErrorCode.offset_out_of_range, -1
    return ErrorCode.none, target


def low_watermark(leader_log_start: int, live_follower_log_starts: Iterable[int]) -> int:
    """The least log start offset over the leader and its live followers."""
    return min((leader_log_start, *live_follower_log_starts))


def delete_records_progress(low: int, requested_offset: int) -> DeleteRecordsStatus:
    """Done once the low watermark has reached the requested offset."""
    return DeleteRecordsStatus(low >= requested_offset, ErrorCode.none, low)


@dataclass(frozen=True, slots=True)
class DeleteRecordsDecision:
    """The leader's answer to one partition of a DeleteRecords (Kafka ``deleteRecordsOnLeader``).

    On ``ErrorCode.none`` the driver carries out ``actions`` (the log start moves
    up to ``requested_offset``), then answers at once if ``low_watermark`` has
    reached it, or waits (``delete_records_status``) until every live replica has
    followed.
    """

    error: ErrorCode
    requested_offset: int = -1
    low_watermark: int = UNKNOWN_LOW_WATERMARK
    actions: tuple[Action, ...] = ()


def decide_delete_records(
    ls: LeaderState,
    log_start_offset: int,
    offset: int,
    *,
    delete_allowed: bool,
    is_live: Callable[[int], bool],
) -> DeleteRecordsDecision:
    """DeleteRecords at leader ``ls`` (Kafka ``deleteRecordsOnLeader``): move the log
    start up to ``offset``, and the low watermark that leaves."""
    error, target = delete_records_target(offset, ls.high_watermark, delete_allowed=delete_allowed)
    if error is not ErrorCode.none:
        return DeleteRecordsDecision(error)
    actions: tuple[Action, ...] = (AdvanceLogStart(target),) if target > log_start_offset else ()
    low = leader_low_watermark(ls, max(log_start_offset, target), is_live)
    return DeleteRecordsDecision(ErrorCode.none, target, low, actions)


def leader_low_watermark(
    ls: LeaderState, leader_log_start: int, is_live: Callable[[int], bool]
) -> int:
    """The low watermark of leader ``ls``: its live followers count."""
    return low_watermark(
        leader_log_start,
        (
            ls.follower_log_start_offset(r)
            for r in ls.assigned_replicas
            if r != ls.broker_id and is_live(r)
        ),
    )
