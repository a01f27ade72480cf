"""The demo's verdict, from plain data: counts compared, failover times, rates over time.

Everything here is a pure function of the producer's :class:`~replog.demo.workload.AckLog`
columns, the rows the query wrote, and timestamps passed in (seconds since the epoch).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: (page, start of its one-minute event-time window in ms since the epoch)
Key = tuple[str, int]

WINDOW_MS = 60_000


def window_start(ts_ms: int, window_ms: int = WINDOW_MS) -> int:
    """Start of the tumbling window holding ``ts_ms`` (Spark's ``window()`` with no offset)."""
    return ts_ms - ts_ms % window_ms


def expected_counts(
    pages: Sequence[str],
    ts: Sequence[int],
    ack_time: Sequence[float],
    window_ms: int = WINDOW_MS,
) -> dict[Key, int]:
    """Views per page per window of the records the cluster acknowledged."""
    counts: Counter[Key] = Counter()
    for page, event_ms, acked in zip(pages, ts, ack_time, strict=True):
        if not math.isnan(acked):
            counts[(page, window_start(event_ms, window_ms))] += 1
    return dict(counts)


@dataclass(frozen=True)
class ResultRow:
    """One row the query wrote in micro-batch ``batch_id`` (update mode: the new count)."""

    page: str
    window_start_ms: int
    views: int
    batch_id: int


class InconsistentOutput(ValueError):
    """One micro-batch wrote two different counts for the same page and window."""


def final_counts(rows: Iterable[ResultRow]) -> dict[Key, int]:
    """Each key's count from the last micro-batch that updated it.

    A batch may appear more than once (an at-least-once sink writes a re-run batch again)
    but must then repeat the same counts.
    """
    latest: dict[Key, tuple[int, int]] = {}
    for row in rows:
        key = (row.page, row.window_start_ms)
        seen = latest.get(key)
        if seen is None or row.batch_id > seen[0]:
            latest[key] = (row.batch_id, row.views)
        elif row.batch_id == seen[0] and row.views != seen[1]:
            raise InconsistentOutput(
                f"batch {row.batch_id} wrote {seen[1]} and {row.views} views for {key}"
            )
    return {key: views for key, (_, views) in latest.items()}


@dataclass(frozen=True)
class Comparison:
    expected_total: int
    counted_total: int
    lost: int  # acknowledged but not counted
    duplicated: int  # counted more often than acknowledged
    mismatched: tuple[tuple[Key, int, int], ...]  # (key, expected, counted)

    @property
    def ok(self) -> bool:
        return not self.mismatched


def compare(expected: dict[Key, int], counted: dict[Key, int]) -> Comparison:
    mismatched = []
    lost = duplicated = 0
    for key in sorted(set(expected) | set(counted)):
        want, got = expected.get(key, 0), counted.get(key, 0)
        if want != got:
            mismatched.append((key, want, got))
            lost += max(0, want - got)
            duplicated += max(0, got - want)
    return Comparison(
        expected_total=sum(expected.values()),
        counted_total=sum(counted.values()),
        lost=lost,
        duplicated=duplicated,
        mismatched=tuple(mismatched),
    )


@dataclass(frozen=True)
class FailoverFigures:
    """What the producer saw of a broker failure at ``kill_time`` (seconds).

    ``longest_gap_s``: the longest time one partition went without an acknowledgement,
    over gaps ending after the kill (and starting before ``until``); ``gap_partition`` is
    that partition. ``producer_gap_s``: the same over all partitions together.
    ``first_ack_led_s``: from the kill until every partition the killed broker led had
    acknowledged a record sent after the kill. ``first_ack_all_s``: the same for every
    partition. ``None`` where no such acknowledgement came.
    """

    longest_gap_s: float | None
    gap_partition: int | None
    producer_gap_s: float | None
    first_ack_led_s: float | None
    first_ack_all_s: float | None


def _longest_gap(times: list[float], after: float, until: float) -> float | None:
    best: float | None = None
    for earlier, later in zip(times, times[1:], strict=False):
        if later > after and earlier < until:
            gap = later - earlier
            best = gap if best is None else max(best, gap)
    return best


def _first_ack_after(
    send_time: Sequence[float],
    ack_time: Sequence[float],
    partition: Sequence[int],
    kill_time: float,
    partitions: Iterable[int],
) -> float | None:
    first: dict[int, float] = {}
    for sent, acked, p in zip(send_time, ack_time, partition, strict=True):
        if sent >= kill_time and not math.isnan(acked):
            first[p] = min(acked, first.get(p, math.inf))
    wanted = list(partitions)
    if not wanted or any(p not in first for p in wanted):
        return None
    return max(first[p] for p in wanted) - kill_time


def failover_figures(
    send_time: Sequence[float],
    ack_time: Sequence[float],
    partition: Sequence[int],
    *,
    kill_time: float,
    until: float,
    led_partitions: Iterable[int],
    all_partitions: Iterable[int],
) -> FailoverFigures:
    by_partition: dict[int, list[float]] = {}
    for acked, p in zip(ack_time, partition, strict=True):
        if not math.isnan(acked):
            by_partition.setdefault(p, []).append(acked)
    longest: float | None = None
    longest_p: int | None = None
    for p, times in sorted(by_partition.items()):
        times.sort()
        gap = _longest_gap(times, kill_time, until)
        if gap is not None and (longest is None or gap > longest):
            longest, longest_p = gap, p
    everything = sorted(t for times in by_partition.values() for t in times)
    return FailoverFigures(
        longest_gap_s=longest,
        gap_partition=longest_p,
        producer_gap_s=_longest_gap(everything, kill_time, until),
        first_ack_led_s=_first_ack_after(send_time, ack_time, partition, kill_time, led_partitions),
        first_ack_all_s=_first_ack_after(send_time, ack_time, partition, kill_time, all_partitions),
    )


def rate_series(
    times: Iterable[float], start: float, end: float, bin_s: float = 1.0
) -> list[float]:
    """Events per second in consecutive bins of ``bin_s`` from ``start`` to ``end``."""
    bins = [0.0] * max(1, math.ceil((end - start) / bin_s))
    for t in times:
        if not math.isnan(t) and start <= t < end:
            bins[int((t - start) / bin_s)] += 1
    return [n / bin_s for n in bins]


def spread_rate(
    intervals: Iterable[tuple[float, float, int]], start: float, end: float, bin_s: float = 1.0
) -> list[float]:
    """Events per second when ``n`` events are spread evenly over each ``(begin, finish)``.

    Used for a micro-batch's input rows, read somewhere during its execution.
    """
    bins = [0.0] * max(1, math.ceil((end - start) / bin_s))
    for begin, finish, n in intervals:
        if n <= 0:
            continue
        finish = max(finish, begin + 1e-3)
        per_s = n / (finish - begin)
        first = max(0, int((begin - start) / bin_s))
        last = min(len(bins) - 1, int((finish - start) / bin_s))
        for b in range(first, last + 1):
            lo = max(begin, start + b * bin_s)
            hi = min(finish, start + (b + 1) * bin_s)
            if hi > lo:
                bins[b] += per_s * (hi - lo)
    return [n / bin_s for n in bins]
