"""The hand-written Produce response codec (v3-v12) against kio's schemas, and the broker's
reading of Produce requests (kio's reader, backed by one that skips unknown tags).

* What our encoder writes, kio reads back field for field at every version, KIP-951's
  ``current_leader`` and ``node_endpoints`` included from v10.
* Requests in kio's encoding decode on the broker's path to the same records; flexible
  requests built by hand with unknown tagged fields in every tagged section decode as if
  the tags were not there.
* Malformed requests (a varint past 5 bytes, a negative compact length, a truncated tagged
  field, any truncation) are ``InvalidFrame``: the connection closes. Bytes after the body
  are ignored, as Kafka does.
"""

from __future__ import annotations

import datetime
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader

from replog.protocol import frames, produce_codec, wire
from replog.protocol.apis import ApiKey, nested, request_schema, response_schema
from replog.protocol.wire import LeaderIdAndEpoch, NodeEndpoint

VERSIONS = range(produce_codec.MIN_VERSION, produce_codec.MAX_VERSION + 1)
FLEXIBLE = range(produce_codec.FIRST_FLEXIBLE, produce_codec.MAX_VERSION + 1)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
topics = st.text(alphabet="abcxyz._-", min_size=1, max_size=10)

results = st.lists(
    st.builds(
        produce_codec.ProducePartitionResult,
        topic=topics,
        partition=st.integers(0, 5000),
        error_code=st.sampled_from([0, 6, 19, 20, 45, 47]),
        base_offset=i64,
        log_append_time_ms=st.one_of(st.just(-1), st.integers(0, 2**41)),
        log_start_offset=i64,
        error_message=st.one_of(st.none(), st.text(max_size=40)),
        current_leader=st.one_of(
            st.none(), st.just(LeaderIdAndEpoch()), st.builds(LeaderIdAndEpoch, i32, i32)
        ),
    ),
    max_size=8,
)
endpoints = st.lists(
    st.builds(
        NodeEndpoint,
        node_id=st.integers(0, 10_000),
        host=st.text(min_size=1, max_size=20),
        port=st.integers(1, 65535),
        rack=st.one_of(st.none(), st.text(max_size=8)),
    ),
    max_size=3,
)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=30, deadline=None)
@given(parts=results, throttle=st.integers(0, 2**31 - 1), nodes=endpoints)
def test_produce_response_decodes_with_kio(version, parts, throttle, nodes) -> None:
    data = produce_codec.encode_produce_response(
        version, parts, throttle_time_ms=throttle, node_endpoints=nodes
    )
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
        if version >= produce_codec.FIRST_LEADER_DISCOVERY:
            leader = want.current_leader or LeaderIdAndEpoch()
            assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (
                leader.leader_id,
                leader.leader_epoch,
            )
    if version >= produce_codec.FIRST_LEADER_DISCOVERY:
        assert [(n.node_id, n.host, n.port, n.rack) for n in decoded.node_endpoints] == [
            (n.node_id, n.host, n.port, n.rack) for n in nodes
        ]


@pytest.mark.parametrize("version", FLEXIBLE)
def test_leader_discovery_fields_are_written_only_when_set(version) -> None:
    """Tagged fields at their default are left out (Kafka writes them only when set)."""
    plain = produce_codec.ProducePartitionResult("t", 0, 6, -1, -1, -1)
    bare = produce_codec.encode_produce_response(version, [plain])
    assert bare.endswith(b"\x00" + struct.pack(">i", 0) + b"\x00")  # partition, top level
    with_leader = produce_codec.encode_produce_response(
        version,
        [produce_codec.ProducePartitionResult("t", 0, 6, -1, -1, -1, None, LeaderIdAndEpoch(2, 5))],
        node_endpoints=[NodeEndpoint(2, "h", 9092)],
    )
    if version >= produce_codec.FIRST_LEADER_DISCOVERY:
        assert len(with_leader) > len(bare)
    else:  # v9 has no such fields: the bytes are the plain answer's
        assert with_leader == bare


def test_versions_outside_the_codec_are_refused() -> None:
    for version in (2, 13):
        with pytest.raises(ValueError):
            produce_codec.encode_produce_response(version, [])


# -- the broker's request path --------------------------------------------------------------


def kio_request_frame(version: int, batches: dict[tuple[str, int], bytes], acks: int = -1):
    cls = request_schema(ApiKey.PRODUCE, version)
    topic_cls = nested(cls, "TopicProduceData")
    part_cls = nested(cls, "PartitionProduceData")
    by_topic: dict[str, list] = {}
    for (topic, partition), records in batches.items():
        by_topic.setdefault(topic, []).append(part_cls(index=partition, records=records))
    body = cls(
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(milliseconds=1500),
        topic_data=tuple(topic_cls(name=t, partition_data=tuple(ps)) for t, ps in by_topic.items()),
    )
    return frames.encode_request(ApiKey.PRODUCE, version, 3, "producer-1", body)[4:]


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=20, deadline=None)
@given(
    batches=st.dictionaries(
        st.tuples(topics, st.integers(0, 100)), st.binary(min_size=1, max_size=200), max_size=4
    ),
    acks=st.sampled_from([0, 1, -1]),
)
def test_broker_reads_produce_requests_at_every_version(version, batches, acks) -> None:
    request = frames.decode_request(kio_request_frame(version, batches, acks))
    assert (request.api_key, request.api_version, request.client_id) == (0, version, "producer-1")
    body = request.body
    assert int(body.acks) == acks
    assert body.timeout == datetime.timedelta(milliseconds=1500)
    got = {
        (str(t.name), int(p.index)): bytes(p.records)
        for t in body.topic_data
        for p in t.partition_data
    }
    assert got == batches


uv = wire.uvarint
UNKNOWN = (5, b"\x01\x02\x03")  # a tag no version of Produce declares


def cstr(s: str) -> bytes:
    return uv(len(s.encode()) + 1) + s.encode()


def tags(*fields: tuple[int, bytes]) -> bytes:
    return uv(len(fields)) + b"".join(uv(t) + uv(len(v)) + v for t, v in fields)


def flexible_request(version: int, *, unknown: bool) -> bytes:
    """Header v2 and body: two partitions of one topic; with ``unknown``, an unknown tag in
    every tagged section (the header, the request, the topic, each partition)."""
    extra = (UNKNOWN,) if unknown else ()
    client = b"producer-1"
    header = struct.pack(">hhih", ApiKey.PRODUCE, version, 8, len(client)) + client + tags(*extra)
    parts = b"".join(
        struct.pack(">i", index) + uv(len(records) + 1) + records + tags(*extra)
        for index, records in ((0, b"batch-zero"), (1, b"batch-one"))
    )
    topic = cstr("t") + uv(3) + parts + tags(*extra)
    body = b"\x00" + struct.pack(">hi", -1, 3000) + uv(2) + topic + tags(*extra)
    return header + body


@pytest.mark.parametrize("version", FLEXIBLE)
def test_broker_reads_requests_with_unknown_tags_in_every_section(version) -> None:
    plain = frames.decode_request(flexible_request(version, unknown=False))
    tagged = frames.decode_request(flexible_request(version, unknown=True))
    assert tagged.body == plain.body
    assert tagged.client_id == "producer-1"
    [topic] = plain.body.topic_data
    assert str(topic.name) == "t"
    assert [(int(p.index), bytes(p.records)) for p in topic.partition_data] == [
        (0, b"batch-zero"),
        (1, b"batch-one"),
    ]
    assert int(plain.body.acks) == -1


def _fixed(data: bytes, old: bytes, new: bytes) -> bytes:
    assert data.count(old) == 1, (old, data)
    return data.replace(old, new)


@pytest.mark.parametrize(
    "mangle",
    [
        pytest.param(
            lambda f: _fixed(f, b"\x02\x02t\x03", b"\x80\x80\x80\x80\x80\x01\x02t\x03"),
            id="varint-past-5-bytes",
        ),
        pytest.param(
            lambda f: _fixed(f, b"\x0bbatch-zero", b"\xff\xff\xff\xff\x0fbatch-zero"),
            id="negative-compact-length",
        ),
        pytest.param(lambda f: _fixed(f, b"\x02t\x03", b"\x00t\x03"), id="null-topic-name"),
        pytest.param(lambda f: f[:-1] + b"\x01\x05\x30abc", id="truncated-tagged-field"),
    ],
)
def test_malformed_requests_close_the_connection(mangle) -> None:
    frame = flexible_request(9, unknown=False)
    frames.decode_request(frame)
    with pytest.raises(frames.InvalidFrame):
        frames.decode_request(mangle(frame))


def test_bytes_after_a_request_are_ignored_as_kafka_does() -> None:
    frame = flexible_request(9, unknown=False)
    assert frames.decode_request(frame + b"\x00\x07").body == frames.decode_request(frame).body


@pytest.mark.parametrize("version", [8, 9, 12])
def test_every_truncation_of_a_request_closes_the_connection(version) -> None:
    if version >= produce_codec.FIRST_FLEXIBLE:
        frame = flexible_request(version, unknown=True)
    else:
        frame = kio_request_frame(version, {("t", 0): b"batch"})
    frames.decode_request(frame)
    for cut in range(len(frame)):
        with pytest.raises(frames.InvalidFrame):
            frames.decode_request(frame[:cut])
