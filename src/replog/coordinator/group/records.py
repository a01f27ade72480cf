"""The records of ``__consumer_offsets``: Kafka's key/value schemas, byte for byte.

Every key starts with an int16 version that names the record type (Kafka
``CoordinatorRecordType``): 0 and 1 an offset commit, 2 a classic group's metadata,
3 to 8 a KIP-848 consumer group's records (``consumer_records``). Values carry their
own int16 version. Keys are never flexible; values are from the version Kafka made
flexible. This module holds the key dispatch and the offset commit codecs; the
classic and KIP-848 modules hold theirs.
"""

from __future__ import annotations

from dataclasses import dataclass

from replog.protocol import wire
from replog.protocol.wire import I16 as _I16
from replog.protocol.wire import I32 as _I32
from replog.protocol.wire import I64 as _I64
from replog.protocol.wire import CodecError

OFFSET_COMMIT_KEY_V0 = 0
OFFSET_COMMIT_KEY = 1  # the version Kafka writes
GROUP_METADATA_KEY = 2
FIRST_CONSUMER_GROUP_KEY = 3
LAST_CONSUMER_GROUP_KEY = 8

OFFSET_COMMIT_VALUE_VERSION = 3  # Kafka writes v3 unless an expire timestamp is set (v1)

NO_LEADER_EPOCH = -1
NO_EXPIRE_TIMESTAMP = -1
MAX_STRING_BYTES = 32767  # a key's strings are int16-length: a longer group id cannot be stored


def storable(text: str) -> bool:
    """Whether ``text`` fits a record key's int16-length string."""
    return len(text.encode()) <= MAX_STRING_BYTES


def key_version(key: bytes) -> int:
    if len(key) < 2:
        raise CodecError("a __consumer_offsets key shorter than its version")
    return _I16.unpack_from(key, 0)[0]


def read_int16(data: bytes, pos: int) -> tuple[int, int]:
    _need(data, pos, 2)
    return _I16.unpack_from(data, pos)[0], pos + 2


def read_int32(data: bytes, pos: int) -> tuple[int, int]:
    _need(data, pos, 4)
    return _I32.unpack_from(data, pos)[0], pos + 4


def read_int64(data: bytes, pos: int) -> tuple[int, int]:
    _need(data, pos, 8)
    return _I64.unpack_from(data, pos)[0], pos + 8


def _need(data: bytes, pos: int, size: int) -> None:
    if pos + size > len(data):
        raise CodecError("a __consumer_offsets record ends early")


# -- offset commits -------------------------------------------------------------------


@dataclass(frozen=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = NO_EXPIRE_TIMESTAMP


def encode_offset_commit_key(key: OffsetCommitKey) -> bytes:
    return (
        _I16.pack(OFFSET_COMMIT_KEY)
        + wire.string(key.group)
        + wire.string(key.topic)
        + _I32.pack(key.partition)
    )


def decode_offset_commit_key(data: bytes) -> OffsetCommitKey:
    version, pos = read_int16(data, 0)
    if version not in (OFFSET_COMMIT_KEY_V0, OFFSET_COMMIT_KEY):
        raise CodecError(f"not an offset commit key (version {version})")
    group, pos = wire.read_string(data, pos)
    topic, pos = wire.read_string(data, pos)
    partition, pos = read_int32(data, pos)
    return OffsetCommitKey(group, topic, partition)


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    if value.expire_timestamp != NO_EXPIRE_TIMESTAMP:  # only v1 has the field
        return (
            _I16.pack(1)
            + _I64.pack(value.offset)
            + wire.string(value.metadata)
            + _I64.pack(value.commit_timestamp)
            + _I64.pack(value.expire_timestamp)
        )
    return (
        _I16.pack(OFFSET_COMMIT_VALUE_VERSION)
        + _I64.pack(value.offset)
        + _I32.pack(value.leader_epoch)
        + wire.string(value.metadata)
        + _I64.pack(value.commit_timestamp)
    )


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    """Versions 0 to 4 (v4 is flexible: compact metadata string and tagged fields)."""
    version, pos = read_int16(data, 0)
    if not 0 <= version <= 4:
        raise CodecError(f"unknown offset commit value version {version}")
    offset, pos = read_int64(data, pos)
    leader_epoch = NO_LEADER_EPOCH
    if version >= 3:
        leader_epoch, pos = read_int32(data, pos)
    if version >= 4:
        metadata, pos = wire.read_compact_string(data, pos)
    else:
        metadata, pos = wire.read_string(data, pos)
    commit_timestamp, pos = read_int64(data, pos)
    expire_timestamp = NO_EXPIRE_TIMESTAMP
    if version == 1:
        expire_timestamp, pos = read_int64(data, pos)
    if version >= 4:
        pos = wire.skip_tagged_fields(data, pos)
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


# -- transaction markers ----------------------------------------------------------------

CONTROL_TYPE_ABORT = 0
CONTROL_TYPE_COMMIT = 1


def end_transaction_marker(key: bytes | None) -> bool | None:
    """The key of a control batch's record (Kafka ``ControlRecordType``: int16 version,
    int16 type), as the loader reads COMMIT and ABORT markers of transactional offset
    commits: True for COMMIT, False for ABORT, None for anything else."""
    if key is None or len(key) < 4:
        return None
    kind = int.from_bytes(key[2:4], "big", signed=True)
    if kind == CONTROL_TYPE_COMMIT:
        return True
    if kind == CONTROL_TYPE_ABORT:
        return False
    return None


# -- group metadata keys (the values are the classic module's) --------------------------


def encode_group_metadata_key(group: str) -> bytes:
    return _I16.pack(GROUP_METADATA_KEY) + wire.string(group)


def decode_group_metadata_key(data: bytes) -> str:
    version, pos = read_int16(data, 0)
    if version != GROUP_METADATA_KEY:
        raise CodecError(f"not a group metadata key (version {version})")
    group, _ = wire.read_string(data, pos)
    return group


# -- classic group metadata values ----------------------------------------------------

GROUP_METADATA_VALUE_VERSION = 3  # what Kafka writes (v4 only adds flexible encoding)


@dataclass(frozen=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberMetadata, ...]


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    out = bytearray(_I16.pack(GROUP_METADATA_VALUE_VERSION))
    out += wire.string(value.protocol_type)
    out += _I32.pack(value.generation)
    out += wire.nullable_string(value.protocol)
    out += wire.nullable_string(value.leader)
    out += _I64.pack(value.current_state_timestamp)
    out += _I32.pack(len(value.members))
    for m in value.members:
        out += wire.string(m.member_id)
        out += wire.nullable_string(m.group_instance_id)
        out += wire.string(m.client_id)
        out += wire.string(m.client_host)
        out += _I32.pack(m.rebalance_timeout_ms)
        out += _I32.pack(m.session_timeout_ms)
        out += _I32.pack(len(m.subscription)) + m.subscription
        out += _I32.pack(len(m.assignment)) + m.assignment
    return bytes(out)


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    """Versions 0 to 4 (v4 is flexible: compact strings, arrays and bytes, tagged fields)."""
    version, pos = read_int16(data, 0)
    if not 0 <= version <= 4:
        raise CodecError(f"unknown group metadata value version {version}")
    flexible = version >= 4
    text = wire.read_compact_string if flexible else wire.read_string
    nullable = wire.read_compact_nullable_string if flexible else wire.read_nullable_string

    def blob(pos: int) -> tuple[bytes, int]:
        raw, pos = (
            wire.read_compact_nullable_bytes(data, pos)
            if flexible
            else wire.read_nullable_bytes(data, pos)
        )
        return raw or b"", pos

    protocol_type, pos = text(data, pos)
    generation, pos = read_int32(data, pos)
    protocol, pos = nullable(data, pos)
    leader, pos = nullable(data, pos)
    timestamp = -1
    if version >= 2:
        timestamp, pos = read_int64(data, pos)
    if flexible:
        count, pos = wire.read_compact_array_count(data, pos)
    else:
        count, pos = wire.read_array_count(data, pos)
    members = []
    for _ in range(max(count, 0)):
        member_id, pos = text(data, pos)
        instance_id = None
        if version >= 3:
            instance_id, pos = nullable(data, pos)
        client_id, pos = text(data, pos)
        client_host, pos = text(data, pos)
        rebalance_timeout = -1
        if version >= 1:
            rebalance_timeout, pos = read_int32(data, pos)
        session_timeout, pos = read_int32(data, pos)
        subscription, pos = blob(pos)
        assignment, pos = blob(pos)
        if flexible:
            pos = wire.skip_tagged_fields(data, pos)
        if rebalance_timeout < 0:
            rebalance_timeout = session_timeout  # v0 had none: Kafka uses the session's
        members.append(
            MemberMetadata(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                subscription,
                assignment,
            )
        )
    if flexible:
        pos = wire.skip_tagged_fields(data, pos)
    return GroupMetadataValue(
        protocol_type, generation, protocol, leader, timestamp, tuple(members)
    )
