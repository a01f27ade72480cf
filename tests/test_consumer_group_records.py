"""The KIP-848 records of ``__consumer_offsets`` (key versions 3 to 8): Kafka's bytes,
Hypothesis round trips, tolerance of tagged fields a later Kafka adds, and replay."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replog.coordinator.group import consumer_records
from replog.coordinator.group import consumer_records_codec as cr
from replog.protocol.wire import CodecError

names = st.text(min_size=0, max_size=12)
ids = st.uuids()
epochs = st.integers(-(2**31), 2**31 - 1)
assignments = st.dictionaries(ids, st.frozensets(st.integers(0, 2**31 - 1), min_size=1), max_size=4)

values = {
    cr.GROUP_METADATA: st.builds(cr.GroupMetadataValue, epochs),
    cr.PARTITION_METADATA: st.builds(
        cr.PartitionMetadataValue,
        st.lists(
            st.builds(
                cr.TopicMetadata,
                ids,
                names,
                st.integers(0, 10_000),
                st.lists(
                    st.tuples(st.integers(0, 100), st.lists(names, max_size=3).map(tuple)),
                    max_size=3,
                ).map(tuple),
            ),
            max_size=4,
        ).map(tuple),
    ),
    cr.MEMBER_METADATA: st.builds(
        cr.MemberMetadataValue,
        st.none() | names,
        st.none() | names,
        names,
        names,
        st.lists(names, max_size=4).map(tuple),
        st.none() | names,
        epochs,
        st.none() | names,
        st.none()
        | st.builds(
            cr.ClassicMemberMetadata,
            epochs,
            st.lists(st.tuples(names, st.binary(max_size=8)), max_size=3).map(tuple),
        ),
    ),
    cr.TARGET_ASSIGNMENT_METADATA: st.builds(cr.TargetAssignmentMetadataValue, epochs),
    cr.TARGET_ASSIGNMENT_MEMBER: st.builds(cr.TargetAssignmentMemberValue, assignments),
    cr.CURRENT_MEMBER_ASSIGNMENT: st.builds(
        cr.CurrentMemberAssignmentValue,
        epochs,
        epochs,
        st.sampled_from([0, 1, 2, 127]),
        assignments,
        assignments,
    ),
}


@st.composite
def records(draw):
    version = draw(st.sampled_from(sorted(values)))
    member = draw(names) if version in cr.MEMBER_KEYS else None
    value = draw(st.none() | values[version])
    return cr.ConsumerGroupRecord(version, draw(names), member, value)


@given(records())
def test_records_round_trip(record) -> None:
    encoded = record.encode()
    assert cr.decode(encoded.key, encoded.value) == record


@given(records())
def test_values_skip_tagged_fields_they_do_not_know(record) -> None:
    if record.value is None or getattr(record.value, "classic", None) is not None:
        return  # (a value with a tagged field of its own ends otherwise)
    encoded = record.encode()
    # A later Kafka adds a tagged field at the end of the value's top-level struct.
    with_tag = encoded.value[:-1] + b"\x01\x07\x02\xab\xcd"
    assert cr.decode(encoded.key, with_tag) == record


def test_bytes_are_kafkas() -> None:
    epoch = cr.group_epoch_record("g1", 5).encode()
    assert epoch.key == b"\x00\x03\x00\x02g1"
    assert epoch.value == b"\x00\x00" + b"\x00\x00\x00\x05" + b"\x00"
    topic = uuid.UUID(int=7)
    current = cr.current_assignment_record(
        "g",
        "m",
        cr.CurrentMemberAssignmentValue(3, 2, 1, {topic: frozenset({1, 0})}, {}),
    ).encode()
    assert current.key == b"\x00\x08\x00\x01g\x00\x01m"
    assert current.value == (
        b"\x00\x00"  # value version 0
        + b"\x00\x00\x00\x03\x00\x00\x00\x02\x01"  # epoch, previous epoch, state
        + b"\x02"
        + topic.bytes
        + b"\x03\x00\x00\x00\x00\x00\x00\x00\x01\x00"  # one topic
        + b"\x01"  # no partitions pending revocation
        + b"\x00"  # tagged fields
    )
    member = cr.member_metadata_record(
        "g", "m", cr.MemberMetadataValue(None, "r1", "c", "/h", ("t",), None, 300000, "uniform")
    ).encode()
    assert member.value == (
        b"\x00\x00\x00\x03r1\x02c\x03/h\x02\x02t\x00"
        + (300000).to_bytes(4, "big")
        + b"\x08uniform\x00"
    )


def test_bad_records_are_codec_errors() -> None:
    epoch = cr.group_epoch_record("g", 1).encode()
    with pytest.raises(CodecError):
        cr.decode(epoch.key, epoch.value[:-2])
    with pytest.raises(CodecError):
        cr.decode(epoch.key, b"\x00\x01" + epoch.value[2:])  # unknown value version
    with pytest.raises(CodecError):
        cr.decode(b"\x00\x09\x00\x01g", None)


def test_replay_builds_and_deletes_a_group() -> None:
    class Shard:
        groups: dict = {}

    shard = Shard()
    shard.groups = {}
    topic = uuid.UUID(int=1)
    log = [
        cr.member_metadata_record(
            "g", "m", cr.MemberMetadataValue(None, None, "c", "h", ("t",), None, 1000, None)
        ),
        cr.subscription_metadata_record("g", [cr.TopicMetadata(topic, "t", 2)]),
        cr.group_epoch_record("g", 1),
        cr.target_assignment_record("g", "m", {topic: frozenset({0, 1})}),
        cr.assignment_epoch_record("g", 1),
        cr.current_assignment_record(
            "g", "m", cr.CurrentMemberAssignmentValue(1, 0, 0, {topic: frozenset({0, 1})}, {})
        ),
    ]
    for record in log:
        encoded = record.encode()
        consumer_records.replay(shard, record.key_version, encoded.key, encoded.value)
    group = shard.groups["g"]
    assert group.state_name() == "Stable"
    assert group.partition_epoch(topic, 1) == 1
    for record in cr.member_tombstones("g", "m") + cr.group_tombstones("g"):
        encoded = record.encode()
        consumer_records.replay(shard, record.key_version, encoded.key, encoded.value)
    assert shard.groups == {} and group.state_name() == "Dead"
