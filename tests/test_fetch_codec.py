"""The hand-written Fetch codec (v4-v17) against kio's schemas, in both directions, and the
broker's reading of Fetch requests (kio's reader, backed by one that skips unknown tags).

* What our encoders write, kio reads back field for field, at every version; what kio
  writes (aborted transactions, every tagged field set), our response decoder reads.
* Flexible frames built by hand with unknown tagged fields in every tagged section decode
  as if the tags were not there: our response decoder (the follower's) and the broker's
  request path (``frames.decode_request``).
* Malformed input (a varint past 5 bytes, a negative or overrunning compact length, a
  truncated tagged field, any truncation) is ``FetchCodecError`` from our decoder and
  ``InvalidFrame`` (the connection closes) on the broker's request path. Trailing bytes
  are an error in a response; after a request they are ignored, as Kafka does.
"""

from __future__ import annotations

import asyncio
import datetime
import io
import struct
import uuid
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from replog.protocol import fetch_codec, frames, wire
from replog.protocol.apis import ApiKey, make, nested, request_schema, response_schema
from replog.protocol.epochs import EpochEndOffset
from replog.protocol.fetch_codec import (
    FetchRequestPartitionData,
    FetchResponsePartitionData,
    LeaderIdAndEpoch,
    NodeEndpoint,
    SnapshotId,
)
from replog.replication.fetch_rules import FetchPartitionRequest
from replog.replication.leader_endpoint import FETCH_VERSION_BY_NAME, RemoteLeaderEndpoint

VERSIONS = range(fetch_codec.MIN_VERSION, fetch_codec.MAX_VERSION + 1)
FLEXIBLE = range(fetch_codec.FIRST_FLEXIBLE, fetch_codec.MAX_VERSION + 1)

i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
topics = st.text(alphabet="abcdefghij._-", min_size=1, max_size=12)
errors = st.sampled_from(
    [ErrorCode.none, ErrorCode.offset_out_of_range, ErrorCode.fenced_leader_epoch]
).map(int)


def topic_id_of(topic: str) -> uuid.UUID:
    """One id per topic name, as a broker's metadata cache has (never the zero id)."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"replog-test/{topic}")


request_partitions = st.lists(
    st.builds(
        FetchRequestPartitionData,
        topic=topics,
        partition=st.integers(0, 1000),
        current_leader_epoch=i32,
        fetch_offset=i64,
        log_start_offset=i64,
        partition_max_bytes=i32,
        last_fetched_epoch=i32,
    ).map(lambda p: replace(p, topic_id=topic_id_of(p.topic))),
    max_size=6,
)
pairs_i32 = st.tuples(i32, i32)
response_partitions = st.lists(
    st.builds(
        FetchResponsePartitionData,
        topic=topics,
        partition=st.integers(0, 1000),
        error_code=errors,
        high_watermark=i64,
        last_stable_offset=i64,
        log_start_offset=i64,
        records=st.one_of(st.none(), st.binary(max_size=300)),
        preferred_read_replica=i32,
        diverging_epoch=st.one_of(
            st.none(),
            st.just(EpochEndOffset(-1, -1)),
            st.builds(EpochEndOffset, i32, i64),
        ),
        current_leader=st.one_of(st.none(), st.builds(LeaderIdAndEpoch, i32, i32)),
        snapshot_id=st.one_of(st.none(), st.builds(SnapshotId, i64, i32)),
    ).map(lambda p: replace(p, topic_id=topic_id_of(p.topic))),
    max_size=6,
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


def _grouped_order(items, by_id: bool):
    """The codec groups partitions by topic (by id from v13), first appearance first."""
    order: dict = {}
    for item in items:
        order.setdefault(item.topic_id if by_id else item.topic, []).append(item)
    return [item for group in order.values() for item in group]


def _tag_or_none(value, default):
    """A tagged field at its default is not written, so it reads back as absent."""
    return None if value is None or value == default else value


def _as_decoded(version: int, p: FetchResponsePartitionData) -> FetchResponsePartitionData:
    """What a partition reads back as at ``version``: the fields it has there."""
    flexible = version >= fetch_codec.FIRST_FLEXIBLE
    by_id = version >= fetch_codec.FIRST_TOPIC_ID
    return FetchResponsePartitionData(
        topic="" if by_id else p.topic,
        partition=p.partition,
        error_code=p.error_code,
        high_watermark=p.high_watermark,
        last_stable_offset=p.last_stable_offset,
        log_start_offset=p.log_start_offset if version >= 5 else -1,
        records=p.records,
        preferred_read_replica=p.preferred_read_replica if version >= 11 else -1,
        topic_id=p.topic_id if by_id else None,
        diverging_epoch=_tag_or_none(p.diverging_epoch, EpochEndOffset(-1, -1))
        if flexible
        else None,
        current_leader=_tag_or_none(p.current_leader, LeaderIdAndEpoch()) if flexible else None,
        snapshot_id=_tag_or_none(p.snapshot_id, SnapshotId(-1, -1)) if flexible else None,
    )


# -- both directions against kio ---------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=40, deadline=None)
@given(
    parts=request_partitions,
    replica=i32,
    replica_epoch=i64,
    wait=st.integers(0, 2**31 - 1),
    iso=st.integers(0, 1),
    cluster_id=st.one_of(st.none(), st.text(max_size=10)),
)
def test_request_decodes_with_kio(
    version, parts, replica, replica_epoch, wait, iso, cluster_id
) -> None:
    body = fetch_codec.encode_fetch_request(
        version,
        replica_id=replica,
        max_wait_ms=wait,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=iso,
        partitions=parts,
        rack_id="r1",
        replica_epoch=replica_epoch,
        cluster_id=cluster_id,
    )
    decoded, used = entity_reader(request_schema(ApiKey.FETCH, version))(body, 0)
    assert used == len(body)
    if version >= fetch_codec.FIRST_REPLICA_STATE:
        assert int(decoded.replica_state.replica_id) == replica
        assert int(decoded.replica_state.replica_epoch) == replica_epoch
    else:
        assert int(decoded.replica_id) == replica
    if version >= fetch_codec.FIRST_FLEXIBLE:
        assert decoded.cluster_id == cluster_id
    assert decoded.max_wait == datetime.timedelta(milliseconds=wait)
    assert int(decoded.isolation_level) == iso
    by_id = version >= fetch_codec.FIRST_TOPIC_ID
    got = [
        (t.topic_id if by_id else str(t.topic), int(p.partition), int(p.fetch_offset))
        + (int(p.partition_max_bytes),)
        + ((int(p.log_start_offset),) if version >= 5 else ())
        + ((int(p.current_leader_epoch),) if version >= 9 else ())
        + ((int(p.last_fetched_epoch),) if version >= 12 else ())
        for t in decoded.topics
        for p in t.partitions
    ]
    want = [
        (p.topic_id if by_id else p.topic, p.partition, p.fetch_offset, p.partition_max_bytes)
        + ((p.log_start_offset,) if version >= 5 else ())
        + ((p.current_leader_epoch,) if version >= 9 else ())
        + ((p.last_fetched_epoch,) if version >= 12 else ())
        for p in _grouped_order(parts, by_id)
    ]
    assert got == want
    if version >= 7:
        assert decoded.forgotten_topics_data == ()
    if version >= 11:
        assert decoded.rack_id == "r1"


forgotten_lists = st.lists(
    st.tuples(topics, st.lists(st.integers(0, 1000), max_size=5)).map(
        lambda t: fetch_codec.ForgottenTopic(t[0], tuple(t[1]), topic_id_of(t[0]))
    ),
    max_size=4,
)


@pytest.mark.parametrize("version", range(7, fetch_codec.MAX_VERSION + 1))
@settings(max_examples=30, deadline=None)
@given(parts=request_partitions, forgotten=forgotten_lists, session=i32, epoch=i32)
def test_session_fields_and_forgotten_topics_decode_with_kio(
    version, parts, forgotten, session, epoch
) -> None:
    """KIP-227: a request's session id and epoch, and the partitions it forgets (by name,
    by id from v13), read back by kio as written."""
    body = fetch_codec.encode_fetch_request(
        version,
        replica_id=1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        partitions=parts,
        session_id=session,
        session_epoch=epoch,
        forgotten=forgotten,
    )
    decoded, used = entity_reader(request_schema(ApiKey.FETCH, version))(body, 0)
    assert used == len(body)
    assert (int(decoded.session_id), int(decoded.session_epoch)) == (session, epoch)
    by_id = version >= fetch_codec.FIRST_TOPIC_ID
    assert [
        (f.topic_id if by_id else str(f.topic), tuple(int(p) for p in f.partitions))
        for f in decoded.forgotten_topics_data
    ] == [(f.topic_id if by_id else f.topic, f.partitions) for f in forgotten]
    assert len([p for t in decoded.topics for p in t.partitions]) == len(parts)


def test_forgotten_topics_group_by_topic_and_old_versions_refuse_sessions() -> None:
    grouped = fetch_codec.forgotten_topics([("a", 1), ("b", 0), ("a", 3)])
    assert [(f.topic, f.partitions) for f in grouped] == [("a", (1, 3)), ("b", (0,))]
    with pytest.raises(ValueError, match="no sessions"):
        fetch_codec.encode_fetch_request(
            6,
            replica_id=1,
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=1,
            isolation_level=0,
            partitions=[],
            session_id=5,
            session_epoch=1,
        )


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=40, deadline=None)
@given(parts=response_partitions, nodes=endpoints, throttle=i32, session=i32)
def test_response_round_trips_through_kio(version, parts, nodes, throttle, session) -> None:
    ours = fetch_codec.encode_fetch_response(
        version,
        parts,
        throttle_time_ms=throttle,
        error_code=0,
        session_id=session,
        node_endpoints=nodes,
    )
    cls = response_schema(ApiKey.FETCH, version)
    decoded, used = entity_reader(cls)(ours, 0)
    assert used == len(ours)
    assert decoded.throttle_time == datetime.timedelta(milliseconds=throttle)
    by_id = version >= fetch_codec.FIRST_TOPIC_ID
    expected = _grouped_order(parts, by_id)
    flat = [(t, p) for t in decoded.responses for p in t.partitions]
    assert len(flat) == len(expected)
    for (t, p), want in zip(flat, expected, strict=True):
        if by_id:
            assert t.topic_id == want.topic_id
        else:
            assert str(t.topic) == want.topic
        assert int(p.partition_index) == want.partition
        assert int(p.error_code) == want.error_code
        assert int(p.high_watermark) == want.high_watermark
        assert int(p.last_stable_offset) == want.last_stable_offset
        if version >= 5:
            assert int(p.log_start_offset) == want.log_start_offset
        if version >= 11:
            assert int(p.preferred_read_replica) == want.preferred_read_replica
        assert p.aborted_transactions is None
        assert (None if p.records is None else bytes(p.records)) == want.records
        if version >= fetch_codec.FIRST_FLEXIBLE:
            d = want.diverging_epoch or EpochEndOffset(-1, -1)
            assert (p.diverging_epoch.epoch, p.diverging_epoch.end_offset) == (
                d.leader_epoch,
                d.end_offset,
            )
            c = want.current_leader or LeaderIdAndEpoch()
            assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (
                c.leader_id,
                c.leader_epoch,
            )
            s = want.snapshot_id or SnapshotId(-1, -1)
            assert (p.snapshot_id.end_offset, p.snapshot_id.epoch) == (s.end_offset, s.epoch)
    if version >= fetch_codec.FIRST_NODE_ENDPOINTS:
        assert [(n.node_id, n.host, n.port, n.rack) for n in decoded.node_endpoints] == [
            (n.node_id, n.host, n.port, n.rack) for n in nodes
        ]

    # Our decoder reads our bytes and kio's encoding of the same response alike.
    want_back = [_as_decoded(version, p) for p in expected]
    buf = io.BytesIO()
    entity_writer(cls)(buf, decoded)
    for data in (ours, buf.getvalue()):
        back = fetch_codec.decode_fetch_response(version, data)
        assert back.partitions == want_back
        assert back.throttle_time_ms == throttle
        if version >= 7:
            assert back.session_id == session
        if version >= fetch_codec.FIRST_NODE_ENDPOINTS and nodes:
            assert back.node_endpoints == nodes
        else:
            assert not back.node_endpoints


@pytest.mark.parametrize("version", VERSIONS)
def test_decoder_skips_aborted_transactions_kio_sends(version) -> None:
    cls = response_schema(ApiKey.FETCH, version)
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
                topic_id=topic_id_of("t"),
                partitions=(
                    make(
                        part_cls,
                        partition_index=3,
                        error_code=ErrorCode.none,
                        high_watermark=10,
                        last_stable_offset=10,
                        log_start_offset=0,
                        aborted_transactions=(
                            make(aborted_cls, producer_id=7, first_offset=2),
                            make(aborted_cls, producer_id=8, first_offset=4),
                        ),
                        preferred_read_replica=-1,
                        records=b"abc",
                    ),
                ),
            ),
        ),
    )
    buf = io.BytesIO()
    entity_writer(cls)(buf, body)
    parts = fetch_codec.decode_fetch_response(version, buf.getvalue()).partitions
    assert [(p.partition, p.high_watermark, p.records) for p in parts] == [(3, 10, b"abc")]


# -- flexible frames built by hand ----------------------------------------------------------

uv = wire.uvarint
UNKNOWN = (9, b"\x07junk")  # a tag no version of Fetch declares


def cstr(s: str) -> bytes:
    return uv(len(s.encode()) + 1) + s.encode()


def tags(*fields: tuple[int, bytes]) -> bytes:
    return uv(len(fields)) + b"".join(uv(t) + uv(len(v)) + v for t, v in fields)


def flexible_response(version: int, *, unknown: bool, leader_tag_extra: bytes = b"") -> bytes:
    """One topic, one partition with an aborted transaction and a current_leader, one node
    endpoint (v16+); with ``unknown``, an unknown tag in every tagged section."""
    extra = (UNKNOWN,) if unknown else ()
    by_id = version >= fetch_codec.FIRST_TOPIC_ID
    leader = struct.pack(">ii", 2, 7) + tags(*extra) + leader_tag_extra
    partition = (
        struct.pack(">ihqqq", 0, 6, 50, 50, 3)
        + uv(2)
        + struct.pack(">qq", 11, 12)
        + tags(*extra)  # the aborted transaction's own section
        + struct.pack(">i", -1)
        + uv(4)
        + b"rec"
        + tags(*((1, leader), *extra))
    )
    topic = (topic_id_of("t").bytes if by_id else cstr("t")) + uv(2) + partition + tags(*extra)
    top_tags: list[tuple[int, bytes]] = []
    if version >= fetch_codec.FIRST_NODE_ENDPOINTS:
        node = struct.pack(">i", 2) + cstr("h2") + struct.pack(">i", 9093) + b"\x00"
        top_tags.append((0, uv(2) + node + tags(*extra)))
    elif unknown:
        top_tags.append((0, b"\xff"))  # node_endpoints' tag, unknown before v16: skipped
    return struct.pack(">ihi", 0, 0, 0) + uv(2) + topic + tags(*top_tags, *extra)


@pytest.mark.parametrize("version", FLEXIBLE)
def test_response_decoder_skips_unknown_tags_in_every_section(version) -> None:
    plain = fetch_codec.decode_fetch_response(version, flexible_response(version, unknown=False))
    tagged = fetch_codec.decode_fetch_response(version, flexible_response(version, unknown=True))
    assert tagged == plain
    [p] = plain.partitions
    assert (p.partition, p.error_code, p.high_watermark, p.log_start_offset) == (0, 6, 50, 3)
    assert p.records == b"rec"
    assert p.current_leader == LeaderIdAndEpoch(2, 7)
    assert p.topic_id == (topic_id_of("t") if version >= fetch_codec.FIRST_TOPIC_ID else None)
    if version >= fetch_codec.FIRST_NODE_ENDPOINTS:
        assert plain.node_endpoints == [NodeEndpoint(2, "h2", 9093, None)]


def _fixed(data: bytes, old: bytes, new: bytes) -> bytes:
    assert data.count(old) == 1, (old, data)
    return data.replace(old, new)


@pytest.mark.parametrize("version", [11, 12, 13, 16, 17])
def test_every_truncation_of_a_response_is_an_error(version) -> None:
    if version >= fetch_codec.FIRST_FLEXIBLE:
        data = flexible_response(version, unknown=True)
    else:
        data = fetch_codec.encode_fetch_response(
            version, [FetchResponsePartitionData("t", 0, 0, 5, 5, 0, b"x" * 10)]
        )
    fetch_codec.decode_fetch_response(version, data)
    for cut in range(len(data)):
        with pytest.raises(fetch_codec.FetchCodecError):
            fetch_codec.decode_fetch_response(version, data[:cut])
    with pytest.raises(fetch_codec.FetchCodecError, match="trailing"):
        fetch_codec.decode_fetch_response(version, data + b"\x00")


@pytest.mark.parametrize(
    "mangle",
    [
        # the topics array count as a varint of 6 bytes
        pytest.param(
            lambda d: _fixed(d, b"\x02\x02t\x02", b"\x80\x80\x80\x80\x80\x01\x02t\x02"),
            id="varint-past-5-bytes",
        ),
        # the topic name's compact length 0: null, where the schema forbids it
        pytest.param(lambda d: _fixed(d, b"\x02\x02t\x02", b"\x02\x00t\x02"), id="null-string"),
        # the records' compact length as 2**32 - 1: past the frame ("negative" as an int32)
        pytest.param(
            lambda d: _fixed(d, b"\x04rec", b"\xff\xff\xff\xff\x0frec"),
            id="negative-compact-length",
        ),
        # the current_leader tag declares 40 bytes; fewer are left
        pytest.param(
            lambda d: _fixed(d, b"\x01\x01\x09", b"\x01\x01\x28"), id="tag-overruns-frame"
        ),
        # an unknown tag's size past the end of the frame
        pytest.param(lambda d: d[:-1] + b"\x01\x09\x7f", id="unknown-tag-overruns"),
    ],
)
def test_malformed_flexible_response_is_an_error(mangle) -> None:
    data = flexible_response(12, unknown=False)
    fetch_codec.decode_fetch_response(12, data)
    with pytest.raises(fetch_codec.FetchCodecError):
        fetch_codec.decode_fetch_response(12, mangle(data))


def test_a_known_tag_whose_content_disagrees_with_its_size_is_an_error() -> None:
    # current_leader's declared size counts 2 bytes past the end of its structure
    data = flexible_response(12, unknown=False, leader_tag_extra=b"\x00\x00")
    assert b"\x01\x01\x0b\x00\x00\x00\x02" in data
    with pytest.raises(fetch_codec.FetchCodecError, match="tagged field 1"):
        fetch_codec.decode_fetch_response(12, data)


def test_legacy_response_with_a_negative_array_length_is_an_error() -> None:
    data = fetch_codec.encode_fetch_response(
        11, [FetchResponsePartitionData("t", 0, 0, 5, 5, 0, b"x")]
    )
    assert data[10:14] == b"\x00\x00\x00\x01"  # the topics array count
    with pytest.raises(fetch_codec.FetchCodecError):
        fetch_codec.decode_fetch_response(11, data[:10] + b"\xff\xff\xff\xfe" + data[14:])


def test_versions_outside_the_codec_are_refused() -> None:
    for version in (3, 18):
        with pytest.raises(ValueError):
            fetch_codec.encode_fetch_response(version, [])
        with pytest.raises(ValueError):
            fetch_codec.decode_fetch_response(version, b"")


# -- the broker's request path --------------------------------------------------------------


def header_v2(version: int, correlation_id: int, *extra: tuple[int, bytes]) -> bytes:
    client = b"consumer-1"
    return (
        struct.pack(">hhih", ApiKey.FETCH, version, correlation_id, len(client))
        + client
        + tags(*extra)
    )


def flexible_request(version: int, *, unknown: bool) -> bytes:
    """A consumer's (or, from v15, a follower's) request body; with ``unknown``, an unknown
    tag in every tagged section (the request, each topic, partition and forgotten topic,
    replica_state's own section)."""
    extra = (UNKNOWN,) if unknown else ()
    by_id = version >= fetch_codec.FIRST_TOPIC_ID
    head = struct.pack(">iiib", 500, 1, 1 << 20, 0)
    if version < fetch_codec.FIRST_REPLICA_STATE:
        head = struct.pack(">i", -1) + head
    partition = struct.pack(">iiqiqi", 2, 5, 100, 4, -1, 65536)
    if version >= fetch_codec.FIRST_DIRECTORY_ID:
        part_tags = tags((0, uuid.UUID(int=77).bytes), *extra)
    else:
        part_tags = tags(*extra)
    key = topic_id_of("t").bytes if by_id else cstr("t")
    topic = key + uv(2) + partition + part_tags + tags(*extra)
    forgotten = key + uv(3) + struct.pack(">ii", 7, 8) + tags(*extra)
    top = [(0, cstr("cluster-x"))]
    if version >= fetch_codec.FIRST_REPLICA_STATE:
        top.append((1, struct.pack(">iq", 3, 41) + tags(*extra)))
    elif unknown:
        top.append((1, b"\xff"))  # replica_state's tag, unknown before v15: skipped
    return (
        head
        + struct.pack(">ii", 0, -1)
        + uv(2)
        + topic
        + uv(2)
        + forgotten
        + cstr("rack-a")
        + tags(*top, *extra)
    )


@pytest.mark.parametrize("version", FLEXIBLE)
def test_broker_reads_requests_with_unknown_tags_in_every_section(version) -> None:
    plain = frames.decode_request(header_v2(version, 5) + flexible_request(version, unknown=False))
    tagged = frames.decode_request(
        header_v2(version, 5, UNKNOWN) + flexible_request(version, unknown=True)
    )
    assert (tagged.api_key, tagged.api_version, tagged.correlation_id) == (1, version, 5)
    assert tagged.client_id == plain.client_id == "consumer-1"
    assert tagged.body == plain.body
    body = plain.body
    assert body.cluster_id == "cluster-x"
    assert body.rack_id == "rack-a"
    [topic] = body.topics
    [part] = topic.partitions
    assert (int(part.partition), int(part.current_leader_epoch)) == (2, 5)
    assert (int(part.fetch_offset), int(part.last_fetched_epoch)) == (100, 4)
    assert int(part.partition_max_bytes) == 65536
    if version >= fetch_codec.FIRST_TOPIC_ID:
        assert topic.topic_id == topic_id_of("t")
    else:
        assert topic.topic == "t"
    if version >= fetch_codec.FIRST_REPLICA_STATE:
        assert (body.replica_state.replica_id, body.replica_state.replica_epoch) == (3, 41)
    else:
        assert body.replica_id == -1
    [forgotten] = body.forgotten_topics_data
    assert forgotten.partitions == (7, 8)


@pytest.mark.parametrize(
    "mangle",
    [
        pytest.param(
            lambda b: _fixed(b, b"\x02\x02t\x02", b"\x02\x80\x80\x80\x80\x80\x01t\x02"),
            id="varint-past-5-bytes",
        ),
        pytest.param(
            lambda b: _fixed(b, b"\x07rack-a", b"\xff\xff\xff\xff\x0frack-a"),
            id="negative-compact-length",
        ),
        pytest.param(lambda b: _fixed(b, b"\x02t\x02", b"\x00t\x02"), id="null-topic-name"),
        # a second, unknown tag declares 64 bytes; 5 are left
        pytest.param(
            lambda b: (
                _fixed(b, b"\x01\x00\x0a\x0acluster-x", b"\x02\x00\x0a\x0acluster-x")
                + b"\x09\x40junk!"
            ),
            id="truncated-tagged-field",
        ),
    ],
)
def test_malformed_requests_close_the_connection(mangle) -> None:
    body = flexible_request(12, unknown=False)
    frames.decode_request(header_v2(12, 1) + body)
    with pytest.raises(frames.InvalidFrame):
        frames.decode_request(header_v2(12, 1) + mangle(body))


def test_bytes_after_a_request_are_ignored_as_kafka_does() -> None:
    """Kafka's parseRequest reads the body and leaves the rest (librdkafka relies on it)."""
    frame = header_v2(12, 1) + flexible_request(12, unknown=False)
    assert frames.decode_request(frame + b"\x01\x00\x00").body == frames.decode_request(frame).body


@pytest.mark.parametrize("version", [11, 12, 16])
def test_every_truncation_of_a_request_closes_the_connection(version) -> None:
    if version >= fetch_codec.FIRST_FLEXIBLE:
        frame = header_v2(version, 1, UNKNOWN) + flexible_request(version, unknown=True)
    else:
        body = fetch_codec.encode_fetch_request(
            version,
            replica_id=2,
            max_wait_ms=500,
            min_bytes=1,
            max_bytes=1 << 20,
            isolation_level=0,
            partitions=[FetchRequestPartitionData("t", 1, 4, 100, 0, 1 << 20)],
        )
        frame = frames.encode_request_body(ApiKey.FETCH, version, 9, "replica-2", body)[4:]
    frames.decode_request(frame)
    for cut in range(len(frame)):
        with pytest.raises(frames.InvalidFrame):
            frames.decode_request(frame[:cut])


def test_encoded_body_gets_response_header_v0_or_v1() -> None:
    frame = frames.encode_response(ApiKey.FETCH, 42, frames.EncodedBody(b"body"))
    assert frame == (8).to_bytes(4, "big") + (42).to_bytes(4, "big") + b"body"
    frame = frames.encode_response(ApiKey.FETCH, 42, frames.EncodedBody(b"body", flexible=True))
    assert frame == (9).to_bytes(4, "big") + (42).to_bytes(4, "big") + b"\x00body"


def test_follower_request_frame_decodes_with_the_broker_decoder() -> None:
    body = fetch_codec.encode_fetch_request(
        11,
        replica_id=2,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        partitions=[FetchRequestPartitionData("t", 1, 4, 100, 0, 1 << 20)],
    )
    frame = frames.encode_request_body(ApiKey.FETCH, 11, 9, "replica-2", body)
    request = frames.decode_request(frame[4:])
    assert (request.api_key, request.api_version, request.correlation_id) == (1, 11, 9)
    assert request.client_id == "replica-2"
    assert int(request.body.replica_id) == 2
    assert int(request.body.topics[0].partitions[0].fetch_offset) == 100


def test_a_follower_drops_a_leader_connection_that_answers_garbage() -> None:
    """A malformed response closes that one connection; the fetcher sees a ConnectionError
    (and backs off) instead of a crash."""

    async def go() -> None:
        closed = asyncio.Event()

        async def leader(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            _, _, correlation_id = frames.peek_header(await reader.readexactly(size))
            # The follower fetches "t" (no topic id) by name: a flexible answer, header v1.
            good = fetch_codec.encode_fetch_response(
                FETCH_VERSION_BY_NAME, [FetchResponsePartitionData("t", 0, 0, 5, 5, 0, b"x" * 10)]
            )
            bad = good[:-4]  # cut inside the record set: shorter than its length
            writer.write(struct.pack(">iib", len(bad) + 5, correlation_id, 0) + bad)
            await writer.drain()
            if await reader.read() == b"":
                closed.set()
            writer.close()

        server = await asyncio.start_server(leader, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        endpoint = RemoteLeaderEndpoint(2, "127.0.0.1", port, timeout_ms=5000)
        try:
            with pytest.raises(ConnectionError, match="malformed Fetch response"):
                await endpoint.fetch(
                    [FetchPartitionRequest("t", 0, fetch_offset=0, max_bytes=1 << 20)],
                    max_wait_ms=0,
                    min_bytes=1,
                    max_bytes=1 << 20,
                )
            await asyncio.wait_for(closed.wait(), 10)
        finally:
            await endpoint.close()
            server.close()
            await server.wait_closed()

    asyncio.run(go())
