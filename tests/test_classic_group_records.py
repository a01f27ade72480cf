"""GroupMetadataKey (v2) and GroupMetadataValue v0-v4 as Kafka's schema lays them out
(``GroupMetadataValue.json``: v1 adds rebalanceTimeout, v2 currentStateTimestamp, v3
groupInstanceId, v4 is flexible). The encoder here is written from the schema, apart
from the one under test, so that a record written by any Kafka version is read right;
replog writes v3, as Kafka does."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from replog.coordinator.group import records as rec

TEXT = st.text(max_size=12)
INT32 = st.integers(0, 2**31 - 1)
MEMBER = st.builds(
    rec.MemberMetadata,
    TEXT,
    st.none() | TEXT,
    TEXT,
    TEXT,
    INT32,
    INT32,
    st.binary(max_size=16),
    st.binary(max_size=16),
)
VALUE = st.builds(
    rec.GroupMetadataValue,
    TEXT,
    st.integers(-1, 2**31 - 1),
    st.none() | TEXT,
    st.none() | TEXT,
    st.integers(-1, 2**62),
    st.lists(MEMBER, max_size=4).map(tuple),
)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _encode(value: rec.GroupMetadataValue, version: int, unknown_tag: bool = False) -> bytes:
    """GroupMetadataValue ``version`` from Kafka's JSON schema."""
    flexible = version >= 4

    def string(s: str | None) -> bytes:
        if s is None:
            return _uvarint(0) if flexible else struct.pack(">h", -1)
        raw = s.encode()
        return _uvarint(len(raw) + 1) + raw if flexible else struct.pack(">h", len(raw)) + raw

    def blob(b: bytes) -> bytes:
        return _uvarint(len(b) + 1) + b if flexible else struct.pack(">i", len(b)) + b

    def tags() -> bytes:
        if not unknown_tag:
            return _uvarint(0)
        return _uvarint(1) + _uvarint(7) + _uvarint(3) + b"xyz"  # one tag Kafka may add

    out = struct.pack(">h", version) + string(value.protocol_type)
    out += struct.pack(">i", value.generation) + string(value.protocol) + string(value.leader)
    if version >= 2:
        out += struct.pack(">q", value.current_state_timestamp)
    count = len(value.members)
    out += _uvarint(count + 1) if flexible else struct.pack(">i", count)
    for m in value.members:
        out += string(m.member_id)
        if version >= 3:
            out += string(m.group_instance_id)
        out += string(m.client_id) + string(m.client_host)
        if version >= 1:
            out += struct.pack(">i", m.rebalance_timeout_ms)
        out += struct.pack(">i", m.session_timeout_ms)
        out += blob(m.subscription) + blob(m.assignment)
        if flexible:
            out += tags()
    if flexible:
        out += tags()
    return out


def _as_read_at(value: rec.GroupMetadataValue, version: int) -> rec.GroupMetadataValue:
    """What a version keeps of ``value``: fields it lacks take Kafka's defaults (v0's
    rebalance timeout is the session timeout, as Kafka's loader reads it)."""
    members = tuple(
        rec.MemberMetadata(
            m.member_id,
            m.group_instance_id if version >= 3 else None,
            m.client_id,
            m.client_host,
            m.rebalance_timeout_ms if version >= 1 else m.session_timeout_ms,
            m.session_timeout_ms,
            m.subscription,
            m.assignment,
        )
        for m in value.members
    )
    timestamp = value.current_state_timestamp if version >= 2 else -1
    return rec.GroupMetadataValue(
        value.protocol_type, value.generation, value.protocol, value.leader, timestamp, members
    )


@given(VALUE, st.integers(0, 4), st.booleans())
def test_every_version_kafka_wrote_is_read(value, version, unknown_tag) -> None:
    data = _encode(value, version, unknown_tag and version >= 4)
    assert rec.decode_group_metadata_value(data) == _as_read_at(value, version)


@given(VALUE)
def test_replog_writes_version_3_as_kafka_does(value) -> None:
    data = rec.encode_group_metadata_value(value)
    assert data == _encode(value, 3)
    assert rec.decode_group_metadata_value(data) == value


@given(st.text(max_size=40))
def test_the_key_is_version_2_and_the_group_id(group) -> None:
    key = rec.encode_group_metadata_key(group)
    raw = group.encode()
    assert key == struct.pack(">hh", 2, len(raw)) + raw
    assert rec.key_version(key) == rec.GROUP_METADATA_KEY == 2
    assert rec.decode_group_metadata_key(key) == group
