"""The demo's verdict logic (replog.demo.check) and event generator, without any process.

The full demo (cluster, Spark, a broker killed) is ``make demo``; here the pure functions
that decide whether it passed are checked against brute-force versions.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replog.demo import check
from replog.demo.workload import PAGES, AckLog, EventGenerator

MINUTE = 60_000

records = st.lists(
    st.tuples(
        st.sampled_from(PAGES[:4]),
        st.integers(0, 5 * MINUTE),
        st.booleans(),  # acknowledged?
    ),
    max_size=200,
)


@given(records)
def test_expected_counts_counts_only_acknowledged_records_per_page_and_minute(recs) -> None:
    pages = [r[0] for r in recs]
    ts = [r[1] for r in recs]
    acks = [1.0 if r[2] else math.nan for r in recs]
    counts = check.expected_counts(pages, ts, acks)
    for page in PAGES[:4]:
        for minute in range(6):
            want = sum(1 for p, t, a in recs if a and p == page and t // MINUTE == minute)
            assert counts.get((page, minute * MINUTE), 0) == want
    assert sum(counts.values()) == sum(1 for r in recs if r[2])


def test_window_start_matches_spark_tumbling_windows() -> None:
    assert check.window_start(0) == 0
    assert check.window_start(59_999) == 0
    assert check.window_start(60_000) == 60_000
    assert check.window_start(1_795_301_569_647) == 1_795_301_520_000


def test_final_counts_take_the_latest_batch_and_tolerate_a_repeated_batch() -> None:
    rows = [
        check.ResultRow("/", 0, 5, batch_id=1),
        check.ResultRow("/", 0, 9, batch_id=3),
        check.ResultRow("/cart", 0, 2, batch_id=2),
        check.ResultRow("/", 0, 7, batch_id=2),
        check.ResultRow("/", 0, 9, batch_id=3),  # batch 3 written twice (at-least-once sink)
    ]
    assert check.final_counts(rows) == {("/", 0): 9, ("/cart", 0): 2}


def test_final_counts_reject_one_batch_with_two_counts() -> None:
    rows = [check.ResultRow("/", 0, 5, batch_id=1), check.ResultRow("/", 0, 6, batch_id=1)]
    with pytest.raises(check.InconsistentOutput):
        check.final_counts(rows)


@given(
    st.dictionaries(st.tuples(st.sampled_from(PAGES), st.integers(0, 3)), st.integers(0, 50)),
    st.dictionaries(st.tuples(st.sampled_from(PAGES), st.integers(0, 3)), st.integers(0, 50)),
)
def test_compare_splits_differences_into_lost_and_duplicated(expected, counted) -> None:
    result = check.compare(expected, counted)
    assert result.expected_total - result.lost + result.duplicated == result.counted_total
    assert result.ok == (
        {k: v for k, v in expected.items() if v} == {k: v for k, v in counted.items() if v}
    )


def test_failover_figures_on_a_stalled_partition() -> None:
    # Partitions 0 and 1 ack every 0.1 s; partition 0's leader dies at t=10 and its
    # records are acknowledged again from t=18 (the retried ones in a burst).
    send, ack, part = [], [], []
    for i in range(300):
        t = i * 0.1
        for p in (0, 1):
            send.append(t)
            part.append(p)
            if p == 0 and 10 <= t < 18:
                ack.append(18.0 + (t - 10) / 1000)
            else:
                ack.append(t + 0.01)
    figures = check.failover_figures(
        send,
        ack,
        part,
        kill_time=10.0,
        until=25.0,
        led_partitions=[0],
        all_partitions=[0, 1],
    )
    assert figures.gap_partition == 0
    assert figures.longest_gap_s == pytest.approx(18.0 - 9.91, abs=1e-6)
    assert figures.producer_gap_s == pytest.approx(0.1, abs=1e-6)
    assert figures.first_ack_led_s == pytest.approx(8.0, abs=1e-6)
    assert figures.first_ack_all_s == pytest.approx(8.0, abs=1e-6)


def test_failover_figures_without_acks_after_the_kill() -> None:
    figures = check.failover_figures(
        [0.0, 1.0],
        [0.5, math.nan],
        [0, -1],
        kill_time=0.8,
        until=math.inf,
        led_partitions=[0],
        all_partitions=[0],
    )
    assert figures.longest_gap_s is None
    assert figures.first_ack_led_s is None


@given(st.lists(st.floats(0, 99.999), max_size=300))
def test_rate_series_keeps_every_event_in_range(times) -> None:
    bins = check.rate_series(times, 0.0, 100.0, bin_s=2.0)
    assert len(bins) == 50
    assert sum(bins) * 2.0 == pytest.approx(len(times))


@given(
    st.lists(
        st.tuples(st.floats(0, 50), st.floats(0, 40), st.integers(0, 10_000)),
        max_size=30,
    )
)
def test_spread_rate_keeps_rows_of_batches_inside_the_range(batches) -> None:
    intervals = [(begin, begin + length, n) for begin, length, n in batches]
    bins = check.spread_rate(intervals, 0.0, 100.0)
    assert sum(bins) == pytest.approx(sum(n for *_, n in intervals), rel=1e-6, abs=1e-6)


def test_event_generator_is_deterministic_and_emits_valid_json() -> None:
    one = [EventGenerator(7).next(1000 + i) for i in range(50)]
    two = [EventGenerator(7).next(1000 + i) for i in range(50)]
    assert one == two
    decoded = json.loads(one[3].to_json())
    assert decoded == {"page": one[3].page, "user": one[3].user, "ts": 1003}
    assert {v.page for v in one} <= set(PAGES)


def test_ack_log_records_sends_and_deliveries() -> None:
    log = AckLog()
    view = EventGenerator(1).next(5)
    i = log.sent(view, now=1.0)
    j = log.sent(view, now=2.0)
    log.delivered(j, now=2.5, partition=3, offset=17)
    assert (log.count, log.acked) == (2, 1)
    assert math.isnan(log.ack_time[i]) and log.ack_time[j] == 2.5
    assert (log.partition[j], log.offset[j]) == (3, 17)
