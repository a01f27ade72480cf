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

``PartitionMachine`` applies them to its state. Concurrency: pure; safe anywhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

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
