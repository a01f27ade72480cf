"""The retention rules as pure functions (``storage/retention.py``): which of a log's
oldest segments may go. ``Log.delete_old_segments`` is tested on real files in
``test_storage_log.py``; here the rules meet every shape of segment list."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from replog.storage import retention


@dataclass
class Seg:
    """Stands in for a ``LogSegment``: the rules read only these."""

    base_offset: int
    size: int
    timestamp: int = 0

    def largest_timestamp(self) -> int:
        return self.timestamp


def log_of(sizes: list[int], counts: list[int]) -> tuple[list[Seg], int]:
    """Segments of ``sizes`` bytes holding ``counts`` records each; and the log end."""
    segments, offset = [], 0
    for size, count in zip(sizes, counts, strict=True):
        segments.append(Seg(offset, size, timestamp=offset))
        offset += count
    return segments, offset


shapes = st.integers(1, 8).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(0, 100), min_size=n, max_size=n),
        st.lists(st.integers(1, 5), min_size=n, max_size=n),
    )
)


@given(shapes, st.integers(0, 60), st.integers(-1, 400))
def test_size_rule_keeps_retention_bytes_and_the_high_watermark(shape, hw, retention_bytes):
    sizes, counts = shape
    segments, end = log_of(sizes, counts)
    high_watermark = min(hw, end)
    rule = retention.over_retention_bytes(sum(sizes), retention_bytes)
    if rule is None:
        assert retention_bytes < 0 or sum(sizes) <= retention_bytes
        return
    n = retention.deletable_count(segments, end, high_watermark, rule)
    assert sum(sizes[n:]) >= retention_bytes  # never below retention.bytes
    upper = segments[n].base_offset if n < len(segments) else end
    assert n == 0 or upper <= high_watermark  # nothing at or past the HW goes
    if n < len(segments) - 1 and segments[n + 1].base_offset <= high_watermark:
        assert sum(sizes[n + 1 :]) < retention_bytes  # it stopped for a reason


def test_an_empty_active_segment_and_the_high_watermark_stop_every_rule() -> None:
    segments, end = log_of([10, 10, 0], [2, 2, 0])
    take_all = lambda _seg, _nxt: True  # noqa: E731
    assert retention.deletable_count(segments, end, end, take_all) == 2  # not the empty one
    assert retention.deletable_count(segments, end, 3, take_all) == 1  # HW inside the 2nd
    assert retention.deletable_count(segments, end, 1, take_all) == 0


def test_log_start_and_time_rules() -> None:
    segments, end = log_of([10, 10, 10], [5, 5, 5])
    assert retention.deletable_count(segments, end, end, retention.below_log_start(10)) == 2
    assert retention.deletable_count(segments, end, end, retention.below_log_start(9)) == 1
    assert retention.deletable_count(segments, end, end, retention.below_log_start(99)) == 2
    old = retention.past_retention_ms(now_ms=100, retention_ms=95)  # timestamps 0, 5, 10
    assert retention.deletable_count(segments, end, end, old) == 1
