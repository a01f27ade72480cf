"""The hand-written Produce response codec (v3-v8) against kio's schemas."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader

from replog.protocol import produce_codec
from replog.protocol.apis import ApiKey, response_schema

VERSIONS = range(produce_codec.MIN_VERSION, produce_codec.MAX_VERSION + 1)
i64 = st.integers(-(2**63), 2**63 - 1)

results = st.lists(
    st.builds(
        produce_codec.ProducePartitionResult,
        topic=st.text(alphabet="abcxyz._-", min_size=1, max_size=10),
        partition=st.integers(0, 5000),
        error_code=st.sampled_from([0, 6, 19, 20, 45, 47]),
        base_offset=i64,
        log_append_time_ms=st.one_of(st.just(-1), st.integers(0, 2**41)),
        log_start_offset=i64,
        error_message=st.one_of(st.none(), st.text(max_size=40)),
    ),
    max_size=8,
)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=30, deadline=None)
@given(parts=results, throttle=st.integers(0, 2**31 - 1))
def test_produce_response_decodes_with_kio(version, parts, throttle) -> None:
    data = produce_codec.encode_produce_response(version, parts, throttle_time_ms=throttle)
    decoded, used = entity_reader(response_schema(ApiKey.PRODUCE, version))(data, 0)
    assert used == len(data)
    assert decoded.throttle_time == datetime.timedelta(milliseconds=throttle)
    order: dict[str, list] = {}
    for p in parts:
        order.setdefault(p.topic, []).append(p)
    expected = [p for group in order.values() for p in group]
    got = [(t, p) for t in decoded.responses for p in t.partition_responses]
    assert len(got) == len(expected)
    for (t, p), want in zip(got, expected, strict=True):
        assert str(t.name) == want.topic
        assert int(p.index) == want.partition
        assert int(p.error_code) == want.error_code
        assert int(p.base_offset) == want.base_offset
        append_time = p.log_append_time
        if want.log_append_time_ms == -1:
            assert append_time is None
        else:
            assert round(append_time.timestamp() * 1000) == want.log_append_time_ms
        if version >= 5:
            assert int(p.log_start_offset) == want.log_start_offset
        if version >= 8:
            assert p.record_errors == ()
            assert p.error_message == want.error_message


def test_versions_outside_the_codec_are_refused() -> None:
    with pytest.raises(ValueError):
        produce_codec.encode_produce_response(9, [])
