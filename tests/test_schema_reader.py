"""The tolerant schema reader: same answers as kio, and unknown tagged fields skipped.

Kafka's rule for flexible versions (KIP-482) is that a receiver skips tagged
fields it does not know. kio's native reader raises instead, so
``frames.decode_request`` falls back to ``replog.protocol.schema_reader``.
"""

from __future__ import annotations

import datetime
import io
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.create_topics.v5.request import CreateTopicsRequest
from kio.schema.fetch.v12.request import FetchRequest
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records, i32Timedelta, i64Timedelta

from replog.protocol import apis, frames, schema_reader, wire
from replog.protocol.apis import ApiKey

# Every request schema the broker decodes through kio (Fetch has a hand codec too, but
# its kio schemas are the reference the codec is tested against).
SERVED = sorted(
    (key, version)
    for key, (lo, hi) in apis.supported_versions().items()
    for version in range(lo, hi + 1)
)


# Records fields are opaque bytes to the schema reader.
st.register_type_strategy(Records, st.binary(max_size=64).map(Records))
# kio writes an i64 duration up to Long.MAX ms but reads it back as a Python timedelta,
# which ends near 8.6e16 ms (OffsetCommit v2-4's retention_time is the first served
# request with one): draw the durations both sides can hold.
st.register_type_strategy(
    i64Timedelta,
    st.integers(-(10**15), 10**15).map(
        lambda ms: i64Timedelta.parse(datetime.timedelta(milliseconds=ms))
    ),
)


def _encode(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


@pytest.mark.parametrize(("api_key", "version"), SERVED)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_reads_what_kio_reads(api_key: int, version: int, data: st.DataObject) -> None:
    schema = apis.request_schema(api_key, version)
    entity = data.draw(st.from_type(schema))
    encoded = _encode(entity)
    native, native_used = entity_reader(schema)(encoded, 0)
    ours, used = schema_reader.read_entity(schema, encoded)
    assert (ours, used) == (native, native_used) == (native, len(encoded))


@pytest.mark.parametrize(("api_key", "version"), SERVED)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), client_id=st.none() | st.text(max_size=40))
def test_decode_request_reads_the_header_as_kio_writes_it(
    api_key: int, version: int, data: st.DataObject, client_id: str | None
) -> None:
    """decode_request reads the header's client_id itself: what kio's writer put in
    the frame (header v1 or v2, any client id) comes back, and so does the body."""
    schema = apis.request_schema(api_key, version)
    entity = data.draw(st.from_type(schema))
    frame = frames.encode_request(api_key, version, 77, client_id, entity)[4:]
    request = frames.decode_request(frame)
    assert (request.api_key, request.api_version, request.correlation_id) == (
        api_key,
        version,
        77,
    )
    assert request.client_id == client_id
    assert request.body == entity_reader(schema)(frame, len(frame) - len(_encode(entity)))[0]


def test_a_client_id_longer_than_the_frame_is_an_invalid_frame() -> None:
    frame = struct.pack(">hhih", ApiKey.API_VERSIONS, 3, 9, 200) + b"short"
    with pytest.raises(frames.InvalidFrame):
        frames.decode_request(frame)


_uvarint = wire.uvarint
_compact_string = wire.compact_string


def _tags(*tags: tuple[int, bytes]) -> bytes:
    return wire.tagged_fields(tags)


UNKNOWN = (_tags(), _tags((99, b"\xab\xcd")), _tags((7, b""), (1000, b"x" * 300)))


def _create_topics_v5(topic_tags: bytes, config_tags: bytes, body_tags: bytes) -> bytes:
    """CreateTopics v5 by hand: nested tagged sections at three depths."""
    config = _compact_string("retention.ms") + _compact_string("1000") + config_tags
    topic = (
        _compact_string("t1")
        + struct.pack(">ih", 3, 2)
        + _uvarint(1)  # assignments: empty compact array
        + _uvarint(2)
        + config
        + topic_tags
    )
    return _uvarint(2) + topic + struct.pack(">i?", 30000, False) + body_tags


@pytest.mark.parametrize("topic_tags", UNKNOWN)
@pytest.mark.parametrize("config_tags", UNKNOWN)
@pytest.mark.parametrize("body_tags", UNKNOWN)
def test_unknown_tags_are_skipped_at_every_depth(
    topic_tags: bytes, config_tags: bytes, body_tags: bytes
) -> None:
    schema = CreateTopicsRequest
    data = _create_topics_v5(topic_tags, config_tags, body_tags)
    request, used = schema_reader.read_entity(schema, data)
    assert used == len(data)
    [topic] = request.topics
    assert (topic.name, int(topic.num_partitions), int(topic.replication_factor)) == ("t1", 3, 2)
    assert [(c.name, c.value) for c in topic.configs] == [("retention.ms", "1000")]
    assert int(request.timeout.total_seconds()) == 30
    plain = _create_topics_v5(_tags(), _tags(), _tags())
    assert request == entity_reader(schema)(plain, 0)[0]


def _api_versions_v3_frame(header_tags: bytes, body_tags: bytes, correlation_id: int = 9) -> bytes:
    client = b"tagged-client"
    head = (
        struct.pack(">hhih", ApiKey.API_VERSIONS, 3, correlation_id, len(client))
        + client
        + header_tags
    )
    return head + _compact_string("replog-test") + _compact_string("1.0") + body_tags


@pytest.mark.parametrize("header_tags", UNKNOWN)
@pytest.mark.parametrize("body_tags", UNKNOWN)
def test_decode_request_skips_unknown_tags_in_header_and_body(
    header_tags: bytes, body_tags: bytes
) -> None:
    request = frames.decode_request(_api_versions_v3_frame(header_tags, body_tags))
    assert (request.api_key, request.api_version, request.correlation_id) == (18, 3, 9)
    assert request.client_id == "tagged-client"
    assert request.body.client_software_name == "replog-test"
    assert request.body.client_software_version == "1.0"


def test_known_tagged_field_is_read() -> None:
    # RequestHeader v2 declares no tagged fields, but FetchRequest v12 declares
    # cluster_id as tag 0: a known tag must land in its field, not be skipped.
    entity = FetchRequest(
        cluster_id="abc",
        replica_id=-1,
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=500)),
        min_bytes=1,
        max_bytes=100,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(),
        forgotten_topics_data=(),
        rack_id="",
    )
    data = _encode(entity)
    # Add an unknown tag after the known one (tags in ascending order: 0, then 5).
    assert data.endswith(_tags((0, _compact_string("abc"))))
    data = data[: -len(_tags((0, _compact_string("abc"))))] + _tags(
        (0, _compact_string("abc")), (5, b"zz")
    )
    decoded, used = schema_reader.read_entity(FetchRequest, data)
    assert used == len(data)
    assert decoded == entity


MALFORMED = {
    # six continuation bytes: a varint longer than Kafka's 5-byte limit in the tag count
    "varint overflow": _api_versions_v3_frame(_tags(), b"\xff\xff\xff\xff\xff\x01"),
    # a compact string whose length says null (0) where the schema forbids null
    "null compact string": (
        struct.pack(">hhih", ApiKey.API_VERSIONS, 3, 9, 1) + b"c" + _tags() + b"\x00"
    ),
    # a tagged field that announces 50 bytes and ends after 2
    "truncated tagged field": _api_versions_v3_frame(_tags(), b"\x01\x63\x32ab"),
    # a tag count with no tags after it
    "missing tags": _api_versions_v3_frame(b"\x02", b""),
    # a compact string longer than the frame
    "string overruns": (
        struct.pack(">hhih", ApiKey.API_VERSIONS, 3, 9, 1) + b"c" + _tags() + b"\x7fab"
    ),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_flexible_encodings_are_invalid_frames(name: str) -> None:
    with pytest.raises(frames.InvalidFrame, match="malformed API_VERSIONS v3 request"):
        frames.decode_request(MALFORMED[name])


def test_header_v2_with_unknown_tags_decodes_alone() -> None:
    buf = io.BytesIO()
    entity_writer(RequestHeaderV2)(
        buf,
        RequestHeaderV2(request_api_key=3, request_api_version=12, correlation_id=5, client_id="x"),
    )
    data = buf.getvalue()[:-1] + _tags((3, b"\x01"))
    header, used = schema_reader.read_entity(RequestHeaderV2, data)
    assert used == len(data)
    assert (int(header.correlation_id), header.client_id) == (5, "x")


def test_bytes_after_the_body_are_ignored_as_kafka_does() -> None:
    # librdkafka's all-topics Metadata v9+ leaves 3 bytes of a 4-byte array-count
    # placeholder after the body (librdkafka issue 5049); Kafka's parser ignores them.
    request = frames.decode_request(_api_versions_v3_frame(_tags(), _tags()) + b"\0\0\0")
    assert request.body.client_software_name == "replog-test"
