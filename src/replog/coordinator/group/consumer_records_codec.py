"""The records of a KIP-848 consumer group in ``__consumer_offsets``, byte for byte as
Kafka writes them: their types, codecs and builders (``consumer_records`` replays them).

Key versions (Kafka ``CoordinatorRecordType``; keys are not flexible: int16 version,
then int16-length strings):

- 3 ``ConsumerGroupMetadata`` (group id): the group epoch.
- 4 ``ConsumerGroupPartitionMetadata`` (group id): the subscribed topics' ids, names and
  partition counts the target assignment was computed from.
- 5 ``ConsumerGroupMemberMetadata`` (group id, member id): a member's subscription,
  instance and rack ids, client id and host, rebalance timeout, assignor.
- 6 ``ConsumerGroupTargetAssignmentMetadata`` (group id): the assignment epoch.
- 7 ``ConsumerGroupTargetAssignmentMember`` (group id, member id): a member's target.
- 8 ``ConsumerGroupCurrentMemberAssignment`` (group id, member id): a member's epoch,
  previous epoch, reconciliation state, assigned partitions and those it must revoke.

Values are version 0, flexible (compact strings and arrays, tagged-field sections after
every struct), with Kafka 4.0's fields. The one tagged field replog reads and writes is
the member metadata's ``ClassicMemberMetadata`` (tag 0: the session timeout and the
JoinGroup protocols of a member that uses the classic protocol inside a consumer
group); tagged fields a later Kafka adds (the metadata hash, the creation time) are
skipped when read and not written. A null value is a tombstone: when a member leaves its 8, 7 and 5 records are
tombstoned in that order, and a deleted group's 6, 4 and 3 records after its members'.

"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from replog.coordinator.group import records as rec
from replog.coordinator.group.group import Record
from replog.protocol import wire
from replog.protocol.wire import I16, I32, CodecError

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8

GROUP_KEYS = frozenset({GROUP_METADATA, PARTITION_METADATA, TARGET_ASSIGNMENT_METADATA})
MEMBER_KEYS = frozenset({MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT})

VALUE_VERSION = 0
_I8 = struct.Struct(">b")
_EMPTY_TAGS = b"\x00"

Assignment = Mapping[uuid.UUID, frozenset[int]]


# -- values ------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupMetadataValue:
    epoch: int


@dataclass(frozen=True)
class TopicMetadata:
    topic_id: uuid.UUID
    name: str
    num_partitions: int
    # (partition, racks of its replicas); replog writes none (no rack-aware assignor).
    partition_racks: tuple[tuple[int, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class PartitionMetadataValue:
    topics: tuple[TopicMetadata, ...]


@dataclass(frozen=True)
class ClassicMemberMetadata:
    """A member using the classic protocol inside a consumer group (KIP-848's upgrade
    path): its JoinGroup session timeout and protocols ``(name, metadata)``."""

    session_timeout_ms: int
    supported_protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMemberMetadata | None = None  # tagged field 0


@dataclass(frozen=True)
class TargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True)
class TargetAssignmentMemberValue:
    partitions: Assignment = field(default_factory=dict)


@dataclass(frozen=True)
class CurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # MemberState's byte (reconciliation.MemberState)
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)


Value = (
    GroupMetadataValue
    | PartitionMetadataValue
    | MemberMetadataValue
    | TargetAssignmentMetadataValue
    | TargetAssignmentMemberValue
    | CurrentMemberAssignmentValue
)

_VALUE_TYPES: dict[int, type] = {
    GROUP_METADATA: GroupMetadataValue,
    PARTITION_METADATA: PartitionMetadataValue,
    MEMBER_METADATA: MemberMetadataValue,
    TARGET_ASSIGNMENT_METADATA: TargetAssignmentMetadataValue,
    TARGET_ASSIGNMENT_MEMBER: TargetAssignmentMemberValue,
    CURRENT_MEMBER_ASSIGNMENT: CurrentMemberAssignmentValue,
}


@dataclass(frozen=True)
class ConsumerGroupRecord:
    """One consumer group record, decoded: its type (key version), key and value
    (None: a tombstone)."""

    key_version: int
    group_id: str
    member_id: str | None
    value: Value | None

    def __post_init__(self) -> None:
        assert (self.member_id is not None) == (self.key_version in MEMBER_KEYS), self
        assert self.value is None or isinstance(self.value, _VALUE_TYPES[self.key_version])

    def encode(self) -> Record:
        return Record(encode_key(self), None if self.value is None else encode_value(self.value))


# -- record builders (Kafka GroupCoordinatorRecordHelpers) --------------------------------


def group_epoch_record(group_id: str, epoch: int) -> ConsumerGroupRecord:
    return ConsumerGroupRecord(GROUP_METADATA, group_id, None, GroupMetadataValue(epoch))


def subscription_metadata_record(
    group_id: str, topics: Iterable[TopicMetadata]
) -> ConsumerGroupRecord:
    ordered = tuple(sorted(topics, key=lambda t: t.name))
    return ConsumerGroupRecord(PARTITION_METADATA, group_id, None, PartitionMetadataValue(ordered))


def member_metadata_record(
    group_id: str, member_id: str, value: MemberMetadataValue
) -> ConsumerGroupRecord:
    return ConsumerGroupRecord(MEMBER_METADATA, group_id, member_id, value)


def assignment_epoch_record(group_id: str, epoch: int) -> ConsumerGroupRecord:
    return ConsumerGroupRecord(
        TARGET_ASSIGNMENT_METADATA, group_id, None, TargetAssignmentMetadataValue(epoch)
    )


def target_assignment_record(
    group_id: str, member_id: str, partitions: Assignment
) -> ConsumerGroupRecord:
    return ConsumerGroupRecord(
        TARGET_ASSIGNMENT_MEMBER, group_id, member_id, TargetAssignmentMemberValue(partitions)
    )


def current_assignment_record(
    group_id: str, member_id: str, value: CurrentMemberAssignmentValue
) -> ConsumerGroupRecord:
    return ConsumerGroupRecord(CURRENT_MEMBER_ASSIGNMENT, group_id, member_id, value)


def member_tombstones(group_id: str, member_id: str) -> list[ConsumerGroupRecord]:
    """A member's records deleted, in Kafka's order (current, target, metadata)."""
    return [
        ConsumerGroupRecord(CURRENT_MEMBER_ASSIGNMENT, group_id, member_id, None),
        ConsumerGroupRecord(TARGET_ASSIGNMENT_MEMBER, group_id, member_id, None),
        ConsumerGroupRecord(MEMBER_METADATA, group_id, member_id, None),
    ]


def group_tombstones(group_id: str) -> list[ConsumerGroupRecord]:
    """A group's own records deleted (after its members'), in Kafka's order."""
    return [
        ConsumerGroupRecord(TARGET_ASSIGNMENT_METADATA, group_id, None, None),
        ConsumerGroupRecord(PARTITION_METADATA, group_id, None, None),
        ConsumerGroupRecord(GROUP_METADATA, group_id, None, None),
    ]


# -- codecs --------------------------------------------------------------------------------


def encode_key(record: ConsumerGroupRecord) -> bytes:
    key = I16.pack(record.key_version) + wire.string(record.group_id)
    if record.member_id is not None:
        key += wire.string(record.member_id)
    return key


def decode_key(data: bytes) -> tuple[int, str, str | None]:
    version, pos = rec.read_int16(data, 0)
    if version not in _VALUE_TYPES:
        raise CodecError(f"not a consumer group record key (version {version})")
    group_id, pos = wire.read_string(data, pos)
    member_id = None
    if version in MEMBER_KEYS:
        member_id, pos = wire.read_string(data, pos)
    return version, group_id, member_id


def _compact_array(items: list[bytes]) -> bytes:
    return wire.uvarint(len(items) + 1) + b"".join(items)


def _topic_partitions(assignment: Assignment) -> bytes:
    return _compact_array(
        [
            topic_id.bytes + _compact_array([I32.pack(p) for p in sorted(partitions)]) + _EMPTY_TAGS
            for topic_id, partitions in sorted(assignment.items(), key=lambda kv: str(kv[0]))
        ]
    )


def encode_value(value: Value) -> bytes:
    out = [I16.pack(VALUE_VERSION)]
    if isinstance(value, GroupMetadataValue):
        out.append(I32.pack(value.epoch))
    elif isinstance(value, PartitionMetadataValue):
        out.append(
            _compact_array(
                [
                    t.topic_id.bytes
                    + wire.compact_string(t.name)
                    + I32.pack(t.num_partitions)
                    + _compact_array(
                        [
                            I32.pack(p)
                            + _compact_array([wire.compact_string(r) for r in racks])
                            + _EMPTY_TAGS
                            for p, racks in t.partition_racks
                        ]
                    )
                    + _EMPTY_TAGS
                    for t in value.topics
                ]
            )
        )
    elif isinstance(value, MemberMetadataValue):
        out += [
            wire.compact_nullable_string(value.instance_id),
            wire.compact_nullable_string(value.rack_id),
            wire.compact_string(value.client_id),
            wire.compact_string(value.client_host),
            _compact_array([wire.compact_string(n) for n in value.subscribed_topic_names]),
            wire.compact_nullable_string(value.subscribed_topic_regex),
            I32.pack(value.rebalance_timeout_ms),
            wire.compact_nullable_string(value.server_assignor),
        ]
        if value.classic is not None:
            # A nullable struct in a tagged field: a presence byte, then the struct.
            out.append(wire.tagged_fields([(0, b"\x01" + _classic_metadata(value.classic))]))
            return b"".join(out)
    elif isinstance(value, TargetAssignmentMetadataValue):
        out.append(I32.pack(value.assignment_epoch))
    elif isinstance(value, TargetAssignmentMemberValue):
        out.append(_topic_partitions(value.partitions))
    elif isinstance(value, CurrentMemberAssignmentValue):
        out += [
            I32.pack(value.member_epoch),
            I32.pack(value.previous_member_epoch),
            _I8.pack(value.state),
            _topic_partitions(value.assigned),
            _topic_partitions(value.pending_revocation),
        ]
    else:  # pragma: no cover - the Value union is closed
        raise TypeError(f"not a consumer group record value: {value!r}")
    out.append(_EMPTY_TAGS)
    return b"".join(out)


def _classic_metadata(classic: ClassicMemberMetadata) -> bytes:
    return (
        I32.pack(classic.session_timeout_ms)
        + _compact_array(
            [
                wire.compact_string(name) + wire.uvarint(len(data) + 1) + data + _EMPTY_TAGS
                for name, data in classic.supported_protocols
            ]
        )
        + _EMPTY_TAGS
    )


def _read_classic_metadata(data: bytes, pos: int, end: int) -> ClassicMemberMetadata | None:
    """Tag 0 of a member's metadata, in ``data[pos:end]``: None when marked null."""
    if pos >= end:
        raise CodecError("an empty ClassicMemberMetadata field")
    present, pos = wire.read_uvarint(data, pos)
    if present == 0:
        wire.check_field_end(0, pos, end)
        return None
    timeout, pos = rec.read_int32(data, pos)

    def protocol(data: bytes, pos: int):
        name, pos = wire.read_compact_string(data, pos)
        metadata, pos = wire.read_compact_nullable_bytes(data, pos)
        pos = wire.skip_tagged_fields(data, pos)
        return (name, metadata or b""), pos

    protocols, pos = _read_array(data, pos, protocol)
    pos = wire.skip_tagged_fields(data, pos)
    wire.check_field_end(0, pos, end)
    return ClassicMemberMetadata(timeout, tuple(protocols))


def _read_array(data: bytes, pos: int, read_item) -> tuple[list, int]:
    count, pos = wire.read_compact_array_count(data, pos)
    items = []
    for _ in range(count):
        item, pos = read_item(data, pos)
        items.append(item)
    return items, pos


def _read_int32(data: bytes, pos: int) -> tuple[int, int]:
    return rec.read_int32(data, pos)


def _read_topic_partitions(data: bytes, pos: int) -> tuple[dict[uuid.UUID, frozenset[int]], int]:
    def item(data: bytes, pos: int):
        topic_id, pos = wire.read_uuid(data, pos)
        partitions, pos = _read_array(data, pos, _read_int32)
        pos = wire.skip_tagged_fields(data, pos)
        return (topic_id, frozenset(partitions)), pos

    items, pos = _read_array(data, pos, item)
    return dict(items), pos


def _read_topic_metadata(data: bytes, pos: int) -> tuple[TopicMetadata, int]:
    topic_id, pos = wire.read_uuid(data, pos)
    name, pos = wire.read_compact_string(data, pos)
    num_partitions, pos = rec.read_int32(data, pos)

    def rack_item(data: bytes, pos: int):
        partition, pos = rec.read_int32(data, pos)
        racks, pos = _read_array(data, pos, wire.read_compact_string)
        pos = wire.skip_tagged_fields(data, pos)
        return (partition, tuple(racks)), pos

    racks, pos = _read_array(data, pos, rack_item)
    pos = wire.skip_tagged_fields(data, pos)
    return TopicMetadata(topic_id, name, num_partitions, tuple(racks)), pos


def decode_value(key_version: int, data: bytes) -> Value:
    version, pos = rec.read_int16(data, 0)
    if version != VALUE_VERSION:
        raise CodecError(f"unknown value version {version} of record type {key_version}")
    value: Value
    if key_version == GROUP_METADATA:
        epoch, pos = rec.read_int32(data, pos)
        value = GroupMetadataValue(epoch)
    elif key_version == PARTITION_METADATA:
        topics, pos = _read_array(data, pos, _read_topic_metadata)
        value = PartitionMetadataValue(tuple(topics))
    elif key_version == MEMBER_METADATA:
        instance_id, pos = wire.read_compact_nullable_string(data, pos)
        rack_id, pos = wire.read_compact_nullable_string(data, pos)
        client_id, pos = wire.read_compact_string(data, pos)
        client_host, pos = wire.read_compact_string(data, pos)
        names, pos = _read_array(data, pos, wire.read_compact_string)
        regex, pos = wire.read_compact_nullable_string(data, pos)
        rebalance_timeout_ms, pos = rec.read_int32(data, pos)
        assignor, pos = wire.read_compact_nullable_string(data, pos)
        classic = None
        fields, pos = wire.read_tagged_fields(data, pos)
        for tag, start, end in fields:
            if tag == 0:
                classic = _read_classic_metadata(data, start, end)
        value = MemberMetadataValue(
            instance_id,
            rack_id,
            client_id,
            client_host,
            tuple(names),
            regex,
            rebalance_timeout_ms,
            assignor,
            classic,
        )
        if pos != len(data):
            raise CodecError(f"{len(data) - pos} bytes after a consumer group record value")
        return value
    elif key_version == TARGET_ASSIGNMENT_METADATA:
        epoch, pos = rec.read_int32(data, pos)
        value = TargetAssignmentMetadataValue(epoch)
    elif key_version == TARGET_ASSIGNMENT_MEMBER:
        partitions, pos = _read_topic_partitions(data, pos)
        value = TargetAssignmentMemberValue(partitions)
    elif key_version == CURRENT_MEMBER_ASSIGNMENT:
        member_epoch, pos = rec.read_int32(data, pos)
        previous, pos = rec.read_int32(data, pos)
        if pos >= len(data):
            raise CodecError("a consumer group record ends early")
        (state,) = _I8.unpack_from(data, pos)
        pos += 1
        assigned, pos = _read_topic_partitions(data, pos)
        pending, pos = _read_topic_partitions(data, pos)
        value = CurrentMemberAssignmentValue(member_epoch, previous, state, assigned, pending)
    else:
        raise CodecError(f"not a consumer group record type: {key_version}")
    pos = wire.skip_tagged_fields(data, pos)
    if pos != len(data):
        raise CodecError(f"{len(data) - pos} bytes after a consumer group record value")
    return value


def decode(key: bytes, value: bytes | None) -> ConsumerGroupRecord:
    key_version, group_id, member_id = decode_key(key)
    return ConsumerGroupRecord(
        key_version,
        group_id,
        member_id,
        None if value is None else decode_value(key_version, value),
    )
