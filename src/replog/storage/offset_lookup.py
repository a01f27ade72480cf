"""ListOffsets by time over a log's segments (Kafka ``UnifiedLog.fetchOffsetByTimestamp``).

Each segment answers for itself from its time index (``LogSegment``); these rules pick
the segment to ask. The special ListOffsets values (-1 latest, -2 earliest, -3 max
timestamp) are the caller's.

Reads the segments' files, changes nothing; called by the log's owner.
"""

from __future__ import annotations

from collections.abc import Sequence

from replog.storage.segment import LogSegment, TimestampAndOffset

__all__ = ["max_timestamp_and_offset", "offset_for_timestamp"]


def offset_for_timestamp(
    segments: Sequence[LogSegment], timestamp: int, log_start_offset: int
) -> TimestampAndOffset | None:
    """The earliest record at or after the log start whose timestamp is >= ``timestamp``
    (Kafka ``searchOffsetInLocalLog``): the first segment whose largest timestamp
    reaches it is searched."""
    for segment in segments:
        if segment.max_timestamp_so_far >= timestamp and segment.next_offset > log_start_offset:
            found = segment.find_offset_by_timestamp(timestamp, log_start_offset)
            if found is not None:
                return found
    return None


def max_timestamp_and_offset(segments: Sequence[LogSegment]) -> TimestampAndOffset | None:
    """The first record carrying the log's largest timestamp (KIP-734); None if empty.

    As Kafka's ``MAX_TIMESTAMP`` lookup, the segment with the largest timestamp is
    searched whole, without regard to the log start offset.
    """
    best: LogSegment | None = None
    for segment in segments:
        if segment.size and (
            best is None or segment.max_timestamp_so_far > best.max_timestamp_so_far
        ):
            best = segment
    return best.exact_max_timestamp() if best is not None else None
