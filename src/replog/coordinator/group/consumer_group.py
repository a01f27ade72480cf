"""A KIP-848 consumer group: its members, epochs and assignments (Kafka ``ConsumerGroup``).

The group's state changes only by replaying its records (``consumer_records``): the
heartbeat path computes records from this state without changing it
(``consumer_group_heartbeat``), the runtime writes them to ``__consumer_offsets`` and,
once they are committed, replays them here; loading a partition after a failover
replays the same records, so the new coordinator has the same group.

What it holds:

- the group epoch, bumped whenever a member joins, leaves or changes its subscription,
  or a subscribed topic changes;
- the members: each with its subscription (topic names and/or a regular expression),
  instance id (static members), rack, client id and host, rebalance timeout and
  preferred assignor, and its current assignment (member epoch, previous epoch,
  reconciliation state, assigned partitions and those pending revocation);
- the subscription metadata: id, name and partition count of every subscribed topic the
  target assignment was computed from;
- the target assignment and its epoch (the assignment epoch);
- derived: which member epoch holds each partition (assigned or pending revocation),
  which member holds each instance id.

States (Kafka ``ConsumerGroupState``): Empty (no members), Assigning (the group epoch
moved past the assignment epoch), Reconciling (some member is not yet at the target
epoch with its target partitions), Stable, Dead (deleted or unloaded).

Invariants, checked on every replay: a partition is held by at most one member; a
member's instance id maps back to it.

Concurrency: owned by the event loop (the shard's); no method awaits.
"""

from __future__ import annotations

import enum
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache

from kio.schema.errors import ErrorCode

from replog.common.topics import INTERNAL_TOPICS
from replog.coordinator.group import consumer_records_codec as cr
from replog.coordinator.group.group import Record
from replog.coordinator.group.reconciliation import (
    NO_PARTITION_EPOCH,
    Assignment,
    MemberAssignment,
    MemberState,
)

FIRST_MEMBER_EPOCH_OFFSET_COMMIT = 9  # OffsetCommit v9+: the member epoch (KIP-848)


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class IllegalStateError(ValueError):
    """A record that contradicts the group's state (Kafka ``IllegalStateException``)."""


@lru_cache(maxsize=256)
def compile_regex(pattern: str) -> re.Pattern[str] | None:
    """A subscription regex (RE2/J syntax, read with Python ``re`` for what the two
    share), or None when Python cannot read it."""
    try:
        return re.compile(pattern)
    except re.error:
        return None


def regex_topics(pattern: str | None, topic_names: Iterable[str]) -> set[str]:
    """The topics a subscription regex selects: whole-name matches, internal topics
    never."""
    if not pattern:
        return set()
    compiled = compile_regex(pattern)
    if compiled is None:
        return set()
    return {t for t in topic_names if t not in INTERNAL_TOPICS and compiled.fullmatch(t)}


@dataclass(frozen=True)
class ConsumerGroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    assignment: MemberAssignment = field(default_factory=lambda: MemberAssignment(0, 0))
    classic: cr.ClassicMemberMetadata | None = None  # a member using the classic protocol

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    @property
    def member_epoch(self) -> int:
        return self.assignment.member_epoch

    @property
    def previous_member_epoch(self) -> int:
        return self.assignment.previous_member_epoch

    @property
    def state(self) -> MemberState:
        return self.assignment.state

    @property
    def assigned(self) -> Assignment:
        return self.assignment.assigned

    def metadata_value(self) -> cr.MemberMetadataValue:
        return cr.MemberMetadataValue(
            self.instance_id,
            self.rack_id,
            self.client_id,
            self.client_host,
            self.subscribed_topic_names,
            self.subscribed_topic_regex,
            self.rebalance_timeout_ms,
            self.server_assignor,
            self.classic,
        )

    def assignment_value(self) -> cr.CurrentMemberAssignmentValue:
        a = self.assignment
        return cr.CurrentMemberAssignmentValue(
            a.member_epoch,
            a.previous_member_epoch,
            int(a.state),
            a.assigned,
            a.pending_revocation,
        )

    def with_metadata(self, value: cr.MemberMetadataValue) -> ConsumerGroupMember:
        return replace(
            self,
            instance_id=value.instance_id,
            rack_id=value.rack_id,
            client_id=value.client_id,
            client_host=value.client_host,
            subscribed_topic_names=tuple(value.subscribed_topic_names),
            subscribed_topic_regex=value.subscribed_topic_regex,
            rebalance_timeout_ms=value.rebalance_timeout_ms,
            server_assignor=value.server_assignor,
            classic=value.classic,
        )

    def with_assignment_value(self, value: cr.CurrentMemberAssignmentValue) -> ConsumerGroupMember:
        try:
            state = MemberState(value.state)
        except ValueError:
            state = MemberState.UNKNOWN
        return replace(
            self,
            assignment=MemberAssignment(
                value.member_epoch,
                value.previous_member_epoch,
                state,
                {t: frozenset(ps) for t, ps in value.assigned.items() if ps},
                {t: frozenset(ps) for t, ps in value.pending_revocation.items() if ps},
            ),
        )

    def subscribed_topics(self, topic_names: Iterable[str]) -> set[str]:
        """Names it subscribes to, and existing topics its regex selects."""
        return set(self.subscribed_topic_names) | regex_topics(
            self.subscribed_topic_regex, topic_names
        )


class ConsumerGroup:
    """One KIP-848 group; see the module docstring.

    Concurrency: owned by the shard's event loop; changed only by ``replay``.
    """

    group_type = "consumer"
    protocol_type = "consumer"

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.subscription_metadata: dict[str, cr.TopicMetadata] = {}
        self.assignment_epoch = 0
        self.target_assignment: dict[str, Assignment] = {}
        self._partition_epochs: dict[tuple[uuid.UUID, int], int] = {}
        self.dead = False

    # -- state ---------------------------------------------------------------------------

    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for member in self.members.values():
            if not member.assignment.is_reconciled_to(self.assignment_epoch):
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        """The epoch of the member holding the partition, or -1 when it is free."""
        return self._partition_epochs.get((topic_id, partition), NO_PARTITION_EPOCH)

    def static_member(self, instance_id: str | None) -> ConsumerGroupMember | None:
        member_id = self.static_members.get(instance_id) if instance_id is not None else None
        return self.members.get(member_id) if member_id is not None else None

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        for topic in self.subscription_metadata.values():
            if topic.topic_id == topic_id:
                return topic.name
        return None

    def subscribed_topic_names(self) -> set[str]:
        """Topics some member subscribes to, by name or (existing topics) by regex."""
        names: set[str] = set(self.subscription_metadata)
        for member in self.members.values():
            names.update(member.subscribed_topic_names)
        return names

    # -- replay ----------------------------------------------------------------------------

    def replay(self, record: cr.ConsumerGroupRecord) -> None:
        """Apply one of this group's records (log order)."""
        assert record.group_id == self.group_id
        value = record.value
        kind = record.key_version
        if kind == cr.GROUP_METADATA:
            if value is None:
                if self.members:
                    raise IllegalStateError(
                        f"group {self.group_id} deleted with {len(self.members)} members"
                    )
                return  # the caller removes the group
            assert isinstance(value, cr.GroupMetadataValue)
            self.group_epoch = value.epoch
        elif kind == cr.PARTITION_METADATA:
            assert value is None or isinstance(value, cr.PartitionMetadataValue)
            self.subscription_metadata = {} if value is None else {t.name: t for t in value.topics}
        elif kind == cr.TARGET_ASSIGNMENT_METADATA:
            assert value is None or isinstance(value, cr.TargetAssignmentMetadataValue)
            self.assignment_epoch = -1 if value is None else value.assignment_epoch
        elif kind == cr.TARGET_ASSIGNMENT_MEMBER:
            assert record.member_id is not None
            if value is None:
                self.target_assignment.pop(record.member_id, None)
            else:
                assert isinstance(value, cr.TargetAssignmentMemberValue)
                self.target_assignment[record.member_id] = {
                    t: frozenset(ps) for t, ps in value.partitions.items() if ps
                }
        elif kind == cr.MEMBER_METADATA:
            self._replay_member_metadata(record.member_id, value)
        elif kind == cr.CURRENT_MEMBER_ASSIGNMENT:
            self._replay_current_assignment(record.member_id, value)

    def _replay_member_metadata(self, member_id: str | None, value) -> None:
        assert member_id is not None
        old = self.members.get(member_id)
        if value is None:
            if old is None:
                return
            if old.member_epoch != -1:
                raise IllegalStateError(
                    f"member {member_id} of {self.group_id} deleted before its assignment"
                )
            self._update_member(old, None)
            return
        assert isinstance(value, cr.MemberMetadataValue)
        base = old if old is not None else ConsumerGroupMember(member_id)
        self._update_member(old, base.with_metadata(value))

    def _replay_current_assignment(self, member_id: str | None, value) -> None:
        assert member_id is not None
        old = self.members.get(member_id)
        if value is None:
            if old is not None:
                self._update_member(
                    old, replace(old, assignment=MemberAssignment(-1, -1, MemberState.STABLE))
                )
            return
        assert isinstance(value, cr.CurrentMemberAssignmentValue)
        base = old if old is not None else ConsumerGroupMember(member_id)
        self._update_member(old, base.with_assignment_value(value))

    def _update_member(
        self, old: ConsumerGroupMember | None, new: ConsumerGroupMember | None
    ) -> None:
        released = set(_held(old)) if old is not None else set()
        if new is not None:
            for tp in _held(new):
                holder = self._partition_epochs.get(tp)
                if holder is not None and tp not in released:
                    raise IllegalStateError(
                        f"{self.group_id}: partition {tp} given to {new.member_id} at epoch "
                        f"{new.member_epoch} is still held at epoch {holder}"
                    )
        if old is not None:
            for tp in released:
                self._partition_epochs.pop(tp, None)
            if self.static_members.get(old.instance_id or "") == old.member_id:
                del self.static_members[old.instance_id or ""]
            del self.members[old.member_id]
        if new is None:
            return
        for tp in _held(new):
            self._partition_epochs[tp] = new.member_epoch
        self.members[new.member_id] = new
        if new.instance_id is not None:
            self.static_members[new.instance_id] = new.member_id

    def on_deleted_by_replay(self) -> None:
        self.dead = True

    # -- the Group protocol --------------------------------------------------------------

    def state_name(self) -> str:
        return self.state().value

    def is_empty(self) -> bool:
        return not self.members

    def validate_offset_commit(
        self,
        member_id: str,
        generation_id_or_member_epoch: int,
        group_instance_id: str | None,
        api_version: int,
    ) -> ErrorCode:
        """Kafka ``ConsumerGroup.validateOffsetCommit``: a commit from outside group
        management (epoch < 0) only while the group is empty; otherwise a known member
        at its current epoch, with OffsetCommit v9+ unless it uses the classic protocol
        (its generation is its member epoch: ILLEGAL_GENERATION when they differ)."""
        epoch = generation_id_or_member_epoch
        if epoch < 0 and not self.members:
            return ErrorCode.none
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if member.uses_classic_protocol:
            if epoch != member.member_epoch:
                return ErrorCode.illegal_generation
            return ErrorCode.none
        if api_version < FIRST_MEMBER_EPOCH_OFFSET_COMMIT:
            return ErrorCode.unsupported_version
        if epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none

    def validate_txn_offset_commit(
        self, member_id: str, generation_id: int, group_instance_id: str | None
    ) -> ErrorCode:
        """Kafka ``ConsumerGroup.validateOffsetCommit`` for TxnOffsetCommit (KIP-447 with
        KIP-848's member epoch as the generation): a commit from outside group management
        while the group is empty, or one naming no member at all, is accepted; otherwise a
        known member at its current epoch. A wrong epoch is ILLEGAL_GENERATION, for
        members of either protocol: Kafka turns STALE_MEMBER_EPOCH into it for
        TxnOffsetCommit, which transactional producers know."""
        if generation_id < 0 and not self.members:
            return ErrorCode.none
        if generation_id == -1 and not member_id and group_instance_id is None:
            return ErrorCode.none
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if generation_id != member.member_epoch:
            return ErrorCode.illegal_generation
        return ErrorCode.none

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode:
        """Kafka ``ConsumerGroup.validateOffsetFetch``: epoch -1 (admin clients) reads
        freely; a member must be known and at its epoch."""
        if member_epoch < 0:
            return ErrorCode.none
        member = self.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return topic in self.subscribed_topic_names()

    def validate_delete_group(self) -> ErrorCode:
        return ErrorCode.non_empty_group if self.members else ErrorCode.none

    def tombstone_records(self) -> list[cr.ConsumerGroupRecord]:
        records: list[cr.ConsumerGroupRecord] = []
        for member_id in sorted(self.members):
            records += cr.member_tombstones(self.group_id, member_id)
        for member_id in sorted(set(self.target_assignment) - set(self.members)):
            records.append(
                cr.ConsumerGroupRecord(cr.TARGET_ASSIGNMENT_MEMBER, self.group_id, member_id, None)
            )
        return records + cr.group_tombstones(self.group_id)

    def metadata_tombstones(self) -> list[Record]:
        return [r.encode() for r in self.tombstone_records()]

    def empty_since_ms(self) -> int | None:
        # Kafka expires a consumer group's offsets from each commit's timestamp.
        return None

    def on_deleted(self, error: ErrorCode) -> None:
        # No request waits on a consumer group; its members' timers are the shard's,
        # cancelled when it unloads and ignored once the group is gone.
        self.dead = True


def _held(member: ConsumerGroupMember) -> Iterable[tuple[uuid.UUID, int]]:
    for assignment in (member.assignment.assigned, member.assignment.pending_revocation):
        for topic_id, partitions in assignment.items():
            for p in partitions:
                yield (topic_id, p)


def topic_partitions(
    assignment: Mapping[uuid.UUID, Iterable[int]],
) -> list[tuple[uuid.UUID, list[int]]]:
    """An assignment as [(topic id, sorted partitions)], topics in a stable order."""
    return [
        (topic_id, sorted(partitions))
        for topic_id, partitions in sorted(assignment.items(), key=lambda kv: str(kv[0]))
        if partitions
    ]
