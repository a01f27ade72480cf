"""The hand-written Fetch codec (v4-v11) against kio's schemas, in both directions."""

from __future__ import annotations

import datetime
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from replog.protocol import fetch_codec, frames
from replog.protocol.apis import ApiKey, make, nested, request_schema, response_schema

VERSIONS = range(fetch_codec.MIN_VERSION, fetch_codec.MAX_VERSION + 1)

i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
topics = st.text(alphabet="abcdefghij._-", min_size=1, max_size=12)
errors = st.sampled_from(
    [ErrorCode.none, ErrorCode.offset_out_of_range, ErrorCode.fenced_leader_epoch]
)

request_partitions = st.lists(
    st.builds(
        fetch_codec.FetchRequestPartitionData,
        topic=topics,
        partition=st.integers(0, 1000),
        current_leader_epoch=i32,
        fetch_offset=i64,
        log_start_offset=i64,
        partition_max_bytes=i32,
    ),
    max_size=6,
)
response_partitions = st.lists(
    st.builds(
        fetch_codec.FetchResponsePartitionData,
        topic=topics,
        partition=st.integers(0, 1000),
        error_code=errors.map(int),
        high_watermark=i64,
        last_stable_offset=i64,
        log_start_offset=i64,
        records=st.one_of(st.none(), st.binary(max_size=300)),
    ),
    max_size=6,
)


def _grouped_order(items):
    """The codec groups partitions by topic, first appearance first."""
    order: dict[str, list] = {}
    for item in items:
        order.setdefault(item.topic, []).append(item)
    return [item for group in order.values() for item in group]


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=40, deadline=None)
@given(parts=request_partitions, replica=i32, wait=st.integers(0, 2**31 - 1), iso=st.integers(0, 1))
def test_request_decodes_with_kio(version, parts, replica, wait, iso) -> None:
    body = fetch_codec.encode_fetch_request(
        version,
        replica_id=replica,
        max_wait_ms=wait,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=iso,
        partitions=parts,
        rack_id="r1",
    )
    decoded, used = entity_reader(request_schema(ApiKey.FETCH, version))(body, 0)
    assert used == len(body)
    assert int(decoded.replica_id) == replica
    assert decoded.max_wait == datetime.timedelta(milliseconds=wait)
    assert int(decoded.isolation_level) == iso
    got = [
        (str(t.topic), int(p.partition), int(p.fetch_offset), int(p.partition_max_bytes))
        + ((int(p.log_start_offset),) if version >= 5 else ())
        + ((int(p.current_leader_epoch),) if version >= 9 else ())
        for t in decoded.topics
        for p in t.partitions
    ]
    want = [
        (p.topic, p.partition, p.fetch_offset, p.partition_max_bytes)
        + ((p.log_start_offset,) if version >= 5 else ())
        + ((p.current_leader_epoch,) if version >= 9 else ())
        for p in _grouped_order(parts)
    ]
    assert got == want
    if version >= 11:
        assert decoded.rack_id == "r1"


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=40, deadline=None)
@given(parts=response_partitions)
def test_response_round_trips_through_kio(version, parts) -> None:
    ours = fetch_codec.encode_fetch_response(version, parts)
    decoded, used = entity_reader(response_schema(ApiKey.FETCH, version))(ours, 0)
    assert used == len(ours)
    flat = [(t, p) for t in decoded.responses for p in t.partitions]
    expected = _grouped_order(parts)
    assert len(flat) == len(expected)
    for (t, p), want in zip(flat, expected, strict=True):
        assert str(t.topic) == want.topic
        assert int(p.partition_index) == want.partition
        assert int(p.error_code) == want.error_code
        assert int(p.high_watermark) == want.high_watermark
        assert int(p.last_stable_offset) == want.last_stable_offset
        if version >= 5:
            assert int(p.log_start_offset) == want.log_start_offset
        assert p.aborted_transactions is None
        assert (None if p.records is None else bytes(p.records)) == want.records

    # and kio's encoding of the same response decodes to the same partitions with ours
    cls = response_schema(ApiKey.FETCH, version)
    buf = io.BytesIO()
    entity_writer(cls)(buf, decoded)
    _, back = fetch_codec.decode_fetch_response(version, buf.getvalue())
    assert [(b.topic, b.partition, b.records) for b in back] == [
        (w.topic, w.partition, w.records) for w in expected
    ]
    if version >= 5:
        assert [b.log_start_offset for b in back] == [w.log_start_offset for w in expected]


def test_decoder_skips_aborted_transactions_kio_sends() -> None:
    cls = response_schema(ApiKey.FETCH, 11)
    part_cls = nested(cls, "PartitionData")
    aborted_cls = nested(part_cls, "AbortedTransaction")
    body = make(
        cls,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=0,
        responses=(
            make(
                nested(cls, "FetchableTopicResponse"),
                topic="t",
                partitions=(
                    make(
                        part_cls,
                        partition_index=3,
                        error_code=ErrorCode.none,
                        high_watermark=10,
                        last_stable_offset=10,
                        log_start_offset=0,
                        aborted_transactions=(make(aborted_cls, producer_id=7, first_offset=2),),
                        preferred_read_replica=-1,
                        records=b"abc",
                    ),
                ),
            ),
        ),
    )
    buf = io.BytesIO()
    entity_writer(cls)(buf, body)
    _, parts = fetch_codec.decode_fetch_response(11, buf.getvalue())
    assert [(p.partition, p.records) for p in parts] == [(3, b"abc")]


@pytest.mark.parametrize("cut", [1, 5, 11, 20])
def test_truncated_response_is_an_error_not_a_crash(cut) -> None:
    data = fetch_codec.encode_fetch_response(
        11,
        [fetch_codec.FetchResponsePartitionData("t", 0, 0, 5, 5, 0, b"x" * 10)],
    )
    with pytest.raises(fetch_codec.FetchCodecError):
        fetch_codec.decode_fetch_response(11, data[: len(data) - cut])


def test_encoded_body_gets_response_header_v0() -> None:
    frame = frames.encode_response(ApiKey.FETCH, 42, frames.EncodedBody(b"body"))
    assert frame == (8).to_bytes(4, "big") + (42).to_bytes(4, "big") + b"body"


def test_encoded_request_frame_decodes_with_the_broker_decoder() -> None:
    body = fetch_codec.encode_fetch_request(
        11,
        replica_id=2,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        partitions=[fetch_codec.FetchRequestPartitionData("t", 1, 4, 100, 0, 1 << 20)],
    )
    frame = frames.encode_request_body(ApiKey.FETCH, 11, 9, "replica-2", body)
    request = frames.decode_request(frame[4:])
    assert (request.api_key, request.api_version, request.correlation_id) == (1, 11, 9)
    assert request.client_id == "replica-2"
    assert int(request.body.topics[0].partitions[0].fetch_offset) == 100
