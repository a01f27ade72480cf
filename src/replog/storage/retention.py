"""Which old segments retention deletes (Kafka ``UnifiedLog.deleteOldSegments``).

A log deletes a run of its oldest segments while a rule holds for each: wholly below
the log start offset, past ``retention.ms`` (by the segment's largest timestamp), or
beyond ``retention.bytes``; never a segment that reaches past the high watermark, and
never an empty active segment. The rules are here; the deleting is ``Log``'s.

Pure but for ``LogSegment.largest_timestamp``, which reads a file's mtime when its
records carry no timestamps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from replog.storage.segment import LogSegment

__all__ = [
    "Rule",
    "below_log_start",
    "deletable_count",
    "over_retention_bytes",
    "past_retention_ms",
]

Rule = Callable[[LogSegment, LogSegment | None], bool]
"""``(segment, the next one or None for the active segment) -> delete it?``"""


def deletable_count(
    segments: Sequence[LogSegment], log_end_offset: int, high_watermark: int, rule: Rule
) -> int:
    """How many of the oldest ``segments`` go: while ``rule`` holds and each segment
    ends at or below ``high_watermark``."""
    count = 0
    for i, segment in enumerate(segments):
        nxt = segments[i + 1] if i + 1 < len(segments) else None
        upper = nxt.base_offset if nxt is not None else log_end_offset
        if nxt is None and segment.size == 0:
            break
        if not (high_watermark >= upper and rule(segment, nxt)):
            break
        count += 1
    return count


def below_log_start(log_start_offset: int) -> Rule:
    """Segments that end at or below the log start offset (Kafka
    ``deleteLogStartOffsetBreachedSegments``); never the active segment."""
    return lambda segment, nxt: nxt is not None and nxt.base_offset <= log_start_offset


def over_retention_bytes(size_in_bytes: int, retention_bytes: int) -> Rule | None:
    """The oldest segments whose removal keeps the log at or above ``retention.bytes``
    (Kafka ``deleteRetentionSizeBreachedSegments``); None if nothing is over."""
    excess = size_in_bytes - retention_bytes
    if retention_bytes < 0 or excess <= 0:
        return None

    def over(segment: LogSegment, _nxt: LogSegment | None) -> bool:
        nonlocal excess
        if excess - segment.size < 0:
            return False
        excess -= segment.size
        return True

    return over


def past_retention_ms(now_ms: int, retention_ms: int) -> Rule:
    """Segments whose newest record is older than ``retention.ms`` (Kafka
    ``deleteRetentionMsBreachedSegments``)."""
    return lambda segment, _nxt: now_ms - segment.largest_timestamp() > retention_ms
