"""The log cleaner's pure parts: the record walker, the offset map, the batch filter,
the throttle (Hypothesis where there is a codec or a rule over many inputs)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replog.protocol.records import (
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    InvalidRecordBatch,
    build_batch,
    encode_record,
    iter_batches,
    iter_record_spans,
    read_header,
    with_timestamp_delta,
)
from replog.storage.cleaner import SegmentRef, group_segments_by_size
from replog.storage.cleaner_filter import compress, empty_batch, filter_batch
from replog.storage.cleaner_throttler import Throttler
from replog.storage.offset_map import ENTRY_BYTES, OffsetMap
from replog.storage.record_reader import iter_records

CODECS = [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD]
NOW = 1_700_000_000_000

keys = st.one_of(st.none(), st.binary(max_size=40))
values = st.one_of(st.none(), st.binary(max_size=60))
headers = st.lists(
    st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))), max_size=3
).map(tuple)
records = st.lists(
    st.tuples(keys, values, headers, st.integers(-(2**40), 2**40)), min_size=1, max_size=20
)


@given(records)
@settings(max_examples=200, deadline=None)
def test_record_spans_read_what_encode_record_wrote(recs) -> None:
    section = b"".join(encode_record(i, ts, k, v, h) for i, (k, v, h, ts) in enumerate(recs))
    spans = list(iter_record_spans(section, len(recs)))
    assert [(s[2], s[3], s[4], s[5]) for s in spans] == [
        (ts, i, k, v is not None) for i, (k, v, _, ts) in enumerate(recs)
    ]
    assert b"".join(section[s[0] : s[1]] for s in spans) == section
    # Another timestamp delta changes only the timestamp delta.
    for span, (k, v, h, _) in zip(spans, recs, strict=True):
        again = with_timestamp_delta(section, span, -7)
        assert again == encode_record(span[3], -7, k, v, h)


@given(st.binary(min_size=1, max_size=30), st.integers(1, 5))
def test_record_spans_refuse_truncated_or_trailing_bytes(raw: bytes, count: int) -> None:
    section = b"".join(encode_record(i, 0, b"k", b"v") for i in range(count))
    with pytest.raises(InvalidRecordBatch):
        list(iter_record_spans(section[:-1], count))
    with pytest.raises(InvalidRecordBatch):
        list(iter_record_spans(section + raw, count))


def test_offset_map_keeps_the_latest_offset_and_honours_its_memory() -> None:
    m = OffsetMap(ENTRY_BYTES * 10)
    assert (m.slots, m.max_entries, m.latest_offset) == (10, 9, -1)
    long_key = b"x" * 100
    m.put(b"a", 3)
    m.put(long_key, 4)
    m.put(b"a", 7)
    assert (m.get(b"a"), m.get(long_key), m.get(b"b"), len(m), m.latest_offset) == (7, 4, -1, 2, 7)
    m.update_latest_offset(5)
    assert m.latest_offset == 7
    m.update_latest_offset(20)
    assert m.latest_offset == 20
    for i in range(7):
        m.put(b"k%d" % i, 21 + i)
    assert m.full and m.utilization == 0.9
    m.clear()
    assert (len(m), m.latest_offset, m.full) == (0, -1, False)


@given(
    st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c", None]), values), min_size=1, max_size=12),
    st.dictionaries(st.sampled_from([b"a", b"b", b"c"]), st.integers(0, 40)),
    st.integers(0, 40),
    st.sampled_from(CODECS),
    st.booleans(),
    st.booleans(),
)
@settings(max_examples=300, deadline=None)
def test_filter_keeps_exactly_what_kafka_keeps(
    recs, mapped, latest, codec, log_append_time, retain_empty
) -> None:
    base_offset, base_ts = 10, NOW - 1000
    section = b"".join(encode_record(i * 2, i, k, v) for i, (k, v) in enumerate(recs))
    attributes = codec | (ATTR_TIMESTAMP_TYPE if log_append_time else 0)
    batch = build_batch(
        base_offset=base_offset,
        partition_leader_epoch=4,
        attributes=attributes,
        last_offset_delta=2 * len(recs),  # a gap after the last record, as after a cleaning
        base_timestamp=base_ts,
        max_timestamp=NOW + 5,
        producer_id=9,
        producer_epoch=2,
        base_sequence=100,
        record_count=len(recs),
        records=compress(codec, section),
    )
    header = read_header(batch)
    m = OffsetMap(1 << 20)
    for key, offset in mapped.items():
        m.put(key, base_offset + offset)
    m.update_latest_offset(base_offset + latest)

    result = filter_batch(
        batch, header, m, retain_empty=retain_empty, now_ms=NOW, delete_retention_ms=500
    )

    def kept(i: int, key: bytes | None, value: bytes | None) -> bool:
        offset = base_offset + 2 * i
        if offset > m.latest_offset:
            return True
        return key is not None and offset >= m.get(key)  # no horizon yet: tombstones stay

    expected = [(base_offset + 2 * i, k, v) for i, (k, v) in enumerate(recs) if kept(i, k, v)]
    if not expected:
        if retain_empty:
            assert result.data == empty_batch(header)
            assert read_header(result.data).record_count == 0
        else:
            assert result.data is None
        return
    assert result.data is not None
    [(_, out)] = list(iter_batches(result.data))  # one batch, CRC valid
    for field in ("base_offset", "last_offset_delta", "partition_leader_epoch", "producer_id",
                  "producer_epoch", "base_sequence", "compression"):  # fmt: skip
        assert getattr(out, field) == getattr(header, field), field
    got = [(r.offset, r.key, r.value, r.timestamp) for r in iter_records(bytes(result.data), out)]
    assert [g[:3] for g in got] == expected
    tombstones = any(v is None for _, _, v in expected)
    if tombstones:  # stamped with the delete horizon; record timestamps unchanged
        assert out.attributes & ATTR_DELETE_HORIZON and out.delete_horizon_ms == NOW + 500
        assert result.tombstone_horizon == NOW + 500
    else:
        assert result.tombstone_horizon is None and out.delete_horizon_ms is None
    for offset, _, _, ts in got:
        i = (offset - base_offset) // 2
        assert ts == (NOW + 5 if log_append_time else base_ts + i)


def test_tombstones_go_once_their_batch_horizon_has_passed() -> None:
    section = encode_record(0, 0, b"a", None) + encode_record(1, 0, b"b", b"v")
    fields = dict(
        base_offset=0, partition_leader_epoch=0, last_offset_delta=1, max_timestamp=NOW,
        producer_id=-1, producer_epoch=-1, base_sequence=-1, record_count=2, records=section,
    )  # fmt: skip
    m = OffsetMap(1 << 20)
    m.update_latest_offset(1)
    plain = build_batch(attributes=0, base_timestamp=NOW, **fields)
    first = filter_batch(
        plain, read_header(plain), m, retain_empty=False, now_ms=NOW, delete_retention_ms=100
    )
    stamped = bytes(first.data)
    assert read_header(stamped).delete_horizon_ms == NOW + 100 == first.tombstone_horizon
    before = filter_batch(
        stamped,
        read_header(stamped),
        m,
        retain_empty=False,
        now_ms=NOW + 99,
        delete_retention_ms=100,
    )
    assert before.data == stamped and before.retained == 2  # written as it was
    after = filter_batch(
        stamped,
        read_header(stamped),
        m,
        retain_empty=False,
        now_ms=NOW + 100,
        delete_retention_ms=100,
    )
    out = bytes(after.data)
    assert [(r.key, r.value, r.timestamp) for r in iter_records(out, read_header(out))] == [
        (b"b", b"v", NOW)
    ]
    assert after.tombstone_horizon is None


@pytest.mark.parametrize("codec", CODECS)
def test_compress_round_trips_through_the_reader(codec: int) -> None:
    section = b"".join(encode_record(i, 0, b"k%d" % i, b"v" * 200) for i in range(500))
    batch = build_batch(
        base_offset=0, partition_leader_epoch=0, attributes=codec, last_offset_delta=499,
        base_timestamp=NOW, max_timestamp=NOW, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, record_count=500, records=compress(codec, section),
    )  # fmt: skip
    assert len(list(iter_records(batch, read_header(batch)))) == 500


def test_groups_stay_under_segment_bytes_and_within_int32_offsets() -> None:
    refs = [SegmentRef(b, b + 10, size) for b, size in [(0, 40), (10, 40), (20, 30), (30, 90)]]
    assert [[r.base_offset for r in g] for g in group_segments_by_size(refs, 100, 40)] == [
        [0, 10],
        [20],
        [30],
    ]
    far = [SegmentRef(0, 10, 1), SegmentRef(10, 2**31 + 5, 1), SegmentRef(2**31 + 5, 2**31 + 6, 1)]
    assert [len(g) for g in group_segments_by_size(far, 100, 2**31 + 6)] == [1, 2]


def test_throttler_sleeps_to_the_desired_rate() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    throttler = Throttler(1000.0, check_interval_ms=100, clock=lambda: now[0], sleep=sleep)
    throttler.maybe_throttle(500)  # within the first interval: no check yet
    now[0] = 0.2
    throttler.maybe_throttle(500)  # 1000 bytes in 0.2 s: sleep 0.8 s
    assert slept == [pytest.approx(0.8)]
    now[0] += 0.5
    throttler.maybe_throttle(100)  # 100 bytes in 0.5 s: under the rate
    assert len(slept) == 1
