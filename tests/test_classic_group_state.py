"""The classic group's pure state (``ClassicGroup``) and its record codec."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from replog.coordinator.group import records as rec
from replog.coordinator.group.classic_group import (
    ClassicGroup,
    GroupMember,
    GroupState,
    IllegalGroupTransition,
)
from replog.coordinator.group.consumer_protocol import assigned_partitions, subscribed_topics


def member(member_id: str, protocols: list[str], instance: str | None = None) -> GroupMember:
    return GroupMember(
        member_id,
        instance,
        "client",
        "/127.0.0.1",
        30000,
        10000,
        "consumer",
        [(name, name.encode()) for name in protocols],
    )


def test_transitions_follow_kafkas_valid_previous_states() -> None:
    g = ClassicGroup("g")
    with pytest.raises(IllegalGroupTransition):
        g.transition_to(GroupState.STABLE, 1)
    with pytest.raises(IllegalGroupTransition):
        g.transition_to(GroupState.COMPLETING_REBALANCE, 1)
    g.transition_to(GroupState.PREPARING_REBALANCE, 1)
    with pytest.raises(IllegalGroupTransition):
        g.transition_to(GroupState.STABLE, 2)
    g.transition_to(GroupState.COMPLETING_REBALANCE, 2)
    g.transition_to(GroupState.STABLE, 3)
    g.transition_to(GroupState.PREPARING_REBALANCE, 4)
    g.transition_to(GroupState.EMPTY, 5)
    assert g.empty_since_ms() == 5
    g.transition_to(GroupState.DEAD, 6)  # from anywhere


def test_protocol_selection_takes_the_most_preferred_common_protocol() -> None:
    g = ClassicGroup("g")
    g.add_member(member("a", ["range", "roundrobin"]))
    g.add_member(member("b", ["roundrobin", "range"]))
    g.add_member(member("c", ["roundrobin", "sticky", "range"]))
    assert g.candidate_protocols() == {"range", "roundrobin"}
    assert g.select_protocol() == "roundrobin"  # two votes to one
    assert g.supports("consumer", [("range", b"")])
    assert not g.supports("consumer", [("sticky", b"")])  # not common to every member
    assert not g.supports("connect", [("range", b"")])


def test_generations_and_leaders() -> None:
    g = ClassicGroup("g")
    g.add_member(member("a", ["range"]))
    g.add_member(member("b", ["range"]))
    assert g.leader_id == "a"
    g.transition_to(GroupState.PREPARING_REBALANCE, 1)
    g.init_next_generation(2)
    assert (g.generation_id, g.state, g.protocol_name) == (
        1,
        GroupState.COMPLETING_REBALANCE,
        "range",
    )
    g.remove_member("a")
    assert g.leader_id == "b"
    g.remove_member("b")
    g.transition_to(GroupState.STABLE, 3)
    g.transition_to(GroupState.PREPARING_REBALANCE, 4)
    g.init_next_generation(5)
    assert (g.generation_id, g.state, g.protocol_name) == (2, GroupState.EMPTY, None)


def test_offset_commit_validation() -> None:
    g = ClassicGroup("g")
    assert g.validate_offset_commit("", -1, None, 8) == ErrorCode.none  # simple consumer
    g.add_member(member("a", ["range"], instance="i-a"))
    g.transition_to(GroupState.PREPARING_REBALANCE, 1)
    g.init_next_generation(2)
    assert g.validate_offset_commit("a", 1, None, 8) == ErrorCode.rebalance_in_progress
    g.transition_to(GroupState.STABLE, 3)
    assert g.validate_offset_commit("a", 1, None, 8) == ErrorCode.none
    assert g.validate_offset_commit("a", 0, None, 8) == ErrorCode.illegal_generation
    assert g.validate_offset_commit("x", 1, None, 8) == ErrorCode.unknown_member_id
    assert g.validate_offset_commit("x", 1, "i-a", 8) == ErrorCode.fenced_instance_id
    assert g.validate_delete_group() == ErrorCode.non_empty_group


def _subscription(topics: list[str]) -> bytes:
    out = (0).to_bytes(2, "big") + len(topics).to_bytes(4, "big")
    for t in topics:
        out += len(t).to_bytes(2, "big") + t.encode()
    return out + (-1).to_bytes(4, "big", signed=True)


def _assignment(parts: dict[str, list[int]]) -> bytes:
    out = (0).to_bytes(2, "big") + len(parts).to_bytes(4, "big")
    for t, ps in parts.items():
        out += len(t).to_bytes(2, "big") + t.encode() + len(ps).to_bytes(4, "big")
        out += b"".join(p.to_bytes(4, "big") for p in ps)
    return out + (-1).to_bytes(4, "big", signed=True)


def test_consumer_protocol_bytes_are_read() -> None:
    assert subscribed_topics(_subscription(["a", "b"])) == {"a", "b"}
    assert assigned_partitions(_assignment({"a": [0, 2], "b": [1]})) == [
        ("a", 0),
        ("a", 2),
        ("b", 1),
    ]
    assert subscribed_topics(b"\x00") == set()  # not the consumer protocol's bytes
    assert assigned_partitions(b"\x00\x00\xff\xff\xff\x7f") == []


def test_a_stable_consumer_group_is_subscribed_to_its_members_topics() -> None:
    g = ClassicGroup("g")
    m = member("a", [])
    m.protocols = [("range", _subscription(["orders"]))]
    g.add_member(m)
    g.transition_to(GroupState.PREPARING_REBALANCE, 1)
    g.init_next_generation(2)
    g.transition_to(GroupState.STABLE, 3)
    assert g.is_subscribed_to_topic("orders")
    assert not g.is_subscribed_to_topic("payments")


TEXT = st.text(max_size=12)
MEMBERS = st.lists(
    st.builds(
        rec.MemberMetadata,
        TEXT,
        st.none() | TEXT,
        TEXT,
        TEXT,
        st.integers(0, 2**31 - 1),
        st.integers(0, 2**31 - 1),
        st.binary(max_size=20),
        st.binary(max_size=20),
    ),
    max_size=4,
)


@given(TEXT, st.integers(-1, 2**31 - 1), st.none() | TEXT, st.none() | TEXT, MEMBERS)
def test_group_metadata_value_round_trips(protocol_type, generation, protocol, leader, members):
    value = rec.GroupMetadataValue(protocol_type, generation, protocol, leader, 123, tuple(members))
    assert rec.decode_group_metadata_value(rec.encode_group_metadata_value(value)) == value


def test_a_group_comes_back_from_its_record() -> None:
    g = ClassicGroup("g")
    g.add_member(member("a", ["range"], instance="i-a"))
    g.add_member(member("b", ["range"]))
    g.transition_to(GroupState.PREPARING_REBALANCE, 1)
    g.init_next_generation(2)
    record = g.metadata_record({"a": b"A", "b": b"B"}, 7)
    value = rec.decode_group_metadata_value(record.value)
    back = ClassicGroup.from_record("g", value)
    assert (back.state, back.generation_id, back.protocol_name, back.leader_id) == (
        GroupState.STABLE,
        1,
        "range",
        "a",
    )
    assert {m: x.assignment for m, x in back.members.items()} == {"a": b"A", "b": b"B"}
    assert back.static_members == {"i-a": "a"}
    assert rec.key_version(record.key) == rec.GROUP_METADATA_KEY
