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


# -- group metadata keys (the values are the classic module's) --------------------------


def encode_group_metadata_key(group: str) -> bytes:
    return _I16.pack(GROUP_METADATA_KEY) + wire.string(group)


def decode_group_metadata_key(data: bytes) -> str:
    version, pos = read_int16(data, 0)
    if version != GROUP_METADATA_KEY:
        raise CodecError(f"not a group metadata key (version {version})")
    group, _ = wire.read_string(data, pos)
    return group
