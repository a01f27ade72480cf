"""A classic consumer group's state (Kafka ``ClassicGroup``).

The group protocol of JoinGroup/SyncGroup/Heartbeat/LeaveGroup: members join, one
generation is formed, the leader (a client) computes the assignment and hands it over in
SyncGroup, members heartbeat until the next rebalance. This module holds the state and
the rules that need no clock or I/O: the state machine with Kafka's table of valid
previous states, members and static members, protocol selection, generation changes,
offset-commit validation, and the record that persists a generation. The asyncio side
(parked JoinGroup/SyncGroup responses, timers, writes) is ``classic_group_service``.

Concurrency: owned by the event loop, through its shard; no method awaits.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from replog.coordinator.group import records as rec
from replog.coordinator.group.group import Record


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = GroupState
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    _S.PREPARING_REBALANCE: frozenset({_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY}),
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
    _S.DEAD: frozenset(GroupState),
}


class IllegalGroupTransition(Exception):
    pass


@dataclass
class GroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata), in the member's preference order
    assignment: bytes = b""
    awaiting_join: bool = False
    awaiting_sync: bool = False
    is_new: bool = False

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise KeyError(protocol)

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols


@dataclass
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    previous_state: GroupState | None = None  # a rebalance begun in Empty is the initial one
    state_timestamp_ms: int = -1
    generation_id: int = 0
    protocol_type_name: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, GroupMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: set[str] = field(default_factory=set)  # KIP-394: id given, not joined
    new_member_added: bool = False
    empty_since: int | None = None

    # -- the Group protocol -------------------------------------------------------------

    @property
    def group_type(self) -> str:
        return "classic"

    @property
    def protocol_type(self) -> str:
        return self.protocol_type_name or ""

    def state_name(self) -> str:
        return self.state.value

    def is_empty(self) -> bool:
        return self.state is GroupState.EMPTY

    def empty_since_ms(self) -> int | None:
        return self.empty_since

    def validate_offset_commit(
        self,
        member_id: str,
        generation_id_or_member_epoch: int,
        group_instance_id: str | None,
        api_version: int,
    ) -> ErrorCode:
        """Kafka ``ClassicGroup.validateOffsetCommit``."""
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        generation = generation_id_or_member_epoch
        if generation < 0 and self.state is GroupState.EMPTY:
            return ErrorCode.none  # a commit from outside group management
        if group_instance_id is not None:
            known = self.static_members.get(group_instance_id)
            if known is not None and known != member_id:
                return ErrorCode.fenced_instance_id
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        if generation != self.generation_id:
            return ErrorCode.illegal_generation
        if self.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def validate_txn_offset_commit(
        self, member_id: str, generation_id: int, group_instance_id: str | None
    ) -> ErrorCode:
        """Kafka ``ClassicGroup.validateOffsetCommit`` for TxnOffsetCommit (KIP-447): the
        member fields are checked only when given (v3+ sends them; older versions and
        producers outside a group do not), and a rebalance in progress does not refuse
        the commit (the transaction decides it)."""
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and self.state is GroupState.EMPTY:
            return ErrorCode.none
        if generation_id < 0 and not member_id and group_instance_id is None:
            return ErrorCode.none
        if group_instance_id is not None:
            known = self.static_members.get(group_instance_id)
            if known is None:
                return ErrorCode.unknown_member_id
            if known != member_id:
                return ErrorCode.fenced_instance_id
        elif member_id not in self.members:
            return ErrorCode.unknown_member_id
        if generation_id != self.generation_id:
            return ErrorCode.illegal_generation
        return ErrorCode.none

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode:
        return ErrorCode.none

    def is_subscribed_to_topic(self, topic: str) -> bool:
        if self.state is not GroupState.STABLE or self.protocol_type_name != "consumer":
            return False
        from replog.coordinator.group.consumer_protocol import subscribed_topics

        return any(
            topic in subscribed_topics(m.metadata(self.protocol_name or ""))
            for m in self.members.values()
            if any(name == self.protocol_name for name, _ in m.protocols)
        )

    def validate_delete_group(self) -> ErrorCode:
        if self.state is GroupState.DEAD:
            return ErrorCode.group_id_not_found
        if self.state is not GroupState.EMPTY:
            return ErrorCode.non_empty_group
        return ErrorCode.none

    def metadata_tombstones(self) -> list[Record]:
        return [Record(rec.encode_group_metadata_key(self.group_id), None)]

    def on_deleted(self, error: ErrorCode) -> None:
        # The service answers parked requests; here the group only dies.
        self.state = GroupState.DEAD

    # -- state ---------------------------------------------------------------------------

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalGroupTransition(
                f"group {self.group_id}: {self.state.value} -> {target.value} is not allowed"
            )
        self.previous_state, self.state = self.state, target
        self.state_timestamp_ms = now_ms
        if target is GroupState.EMPTY:
            self.empty_since = now_ms

    def add_member(self, member: GroupMember) -> None:
        if not self.members:
            self.protocol_type_name = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_members.discard(member.member_id)

    def remove_member(self, member_id: str) -> GroupMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None:
            if self.static_members.get(member.group_instance_id) == member_id:
                del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> GroupMember:
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        return member

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Kafka ``supportsProtocols``: an empty group takes any; otherwise the protocol
        type must match and at least one protocol be common to every member."""
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        if protocol_type != self.protocol_type_name:
            return False
        names = {name for name, _ in protocols}
        return bool(names & self.candidate_protocols())

    def candidate_protocols(self) -> set[str]:
        common: set[str] | None = None
        for m in self.members.values():
            names = {name for name, _ in m.protocols}
            common = names if common is None else common & names
        return common or set()

    def select_protocol(self) -> str:
        """Kafka ``selectProtocol``: each member votes for its most preferred candidate;
        the most votes wins (ties: the first candidate in the first member's order)."""
        candidates = self.candidate_protocols()
        votes: Counter[str] = Counter()
        for m in self.members.values():
            for name, _ in m.protocols:
                if name in candidates:
                    votes[name] += 1
                    break
        first = next(iter(self.members.values()))
        order = [name for name, _ in first.protocols if name in candidates]
        return max(order, key=lambda name: (votes[name], -order.index(name)))

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def elect_joined_leader(self) -> bool:
        """Kafka ``maybeElectNewJoinedLeader``: a leader that did not rejoin (a static
        member kept in the group) hands over to a member that did; False if none did."""
        leader = self.members.get(self.leader_id) if self.leader_id is not None else None
        if leader is not None and leader.awaiting_join:
            return True
        for member in self.members.values():
            if member.awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def init_next_generation(self, now_ms: int) -> None:
        """Kafka ``initNextGeneration``: the next generation, with a protocol when members
        remain (CompletingRebalance) or none (Empty)."""
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)
        self.new_member_added = False
        for m in self.members.values():
            m.is_new = False

    # -- persistence ------------------------------------------------------------------

    def metadata_record(self, assignments: dict[str, bytes], now_ms: int) -> Record:
        """The GroupMetadataValue of this generation with ``assignments``."""
        protocol = self.protocol_name
        members = tuple(
            rec.MemberMetadata(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                m.metadata(protocol) if protocol else b"",
                assignments.get(m.member_id, b""),
            )
            for m in self.members.values()
        )
        value = rec.GroupMetadataValue(
            self.protocol_type,
            self.generation_id,
            protocol,
            self.leader_id,
            now_ms,
            members,
        )
        return Record(
            rec.encode_group_metadata_key(self.group_id), rec.encode_group_metadata_value(value)
        )

    @classmethod
    def from_record(cls, group_id: str, value: rec.GroupMetadataValue) -> ClassicGroup:
        """The group as a generation's record left it (Kafka ``GroupMetadata.loadGroup``)."""
        group = cls(group_id)
        group.generation_id = value.generation
        group.protocol_type_name = value.protocol_type or None
        group.protocol_name = value.protocol
        group.state_timestamp_ms = value.current_state_timestamp
        for m in value.members:
            group.members[m.member_id] = GroupMember(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                value.protocol_type,
                [(value.protocol or "", m.subscription)],
                m.assignment,
            )
            if m.group_instance_id is not None:
                group.static_members[m.group_instance_id] = m.member_id
        group.leader_id = value.leader if value.leader in group.members else None
        if group.members:
            group.state = GroupState.STABLE
        else:
            group.state = GroupState.EMPTY
            group.empty_since = value.current_state_timestamp
        return group
