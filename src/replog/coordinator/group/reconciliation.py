"""Incremental reconciliation of a KIP-848 member towards its target assignment
(Kafka ``CurrentAssignmentBuilder``).

A member moves from its current assignment to the target one in steps that never let
two members own a partition at once:

1. It first revokes the partitions that are no longer its own: it stays at its epoch in
   ``UNREVOKED_PARTITIONS`` with them listed as pending revocation, until a heartbeat
   reports its owned partitions without them (a heartbeat that does not list its owned
   partitions proves nothing and leaves it waiting).
2. It then moves to the target epoch and gets the new partitions that are free: a
   partition still held by another member (its "partition epoch" is set) is withheld,
   and the member waits in ``UNRELEASED_PARTITIONS`` until the owner releases it.
3. With everything it should have, it is ``STABLE`` at the target epoch.

Every step is a pure function of the member's assignment, the target, the partition
epochs of the group and the partitions the member reported owning.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

Assignment = Mapping[uuid.UUID, frozenset[int]]
# What a member reports owning: [(topic id, partitions)], or None when not sent.
OwnedPartitions = Sequence[tuple[uuid.UUID, Sequence[int]]] | None
# The epoch of the member that holds a partition (assigned or pending revocation), or -1.
PartitionEpoch = Callable[[uuid.UUID, int], int]

NO_PARTITION_EPOCH = -1


class MemberState(enum.IntEnum):
    """Kafka ``MemberState`` with its record byte values."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


@dataclass(frozen=True)
class MemberAssignment:
    """The reconciliation part of a member (what record 8 stores)."""

    member_epoch: int
    previous_member_epoch: int
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch

    def moved_to(
        self, epoch: int, state: MemberState, assigned: Assignment, pending: Assignment
    ) -> MemberAssignment:
        """The next step; the epoch becomes the previous one only if it changes (Kafka
        ``updateMemberEpoch`` keeps it when equal)."""
        previous = self.member_epoch if epoch != self.member_epoch else self.previous_member_epoch
        return MemberAssignment(epoch, previous, state, _clean(assigned), _clean(pending))


def _clean(assignment: Mapping[uuid.UUID, set[int] | frozenset[int]]) -> Assignment:
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}


def owns_any(owned: OwnedPartitions, partitions: Assignment) -> bool:
    """Whether the member's report still lists any of ``partitions``; an absent report
    counts as still owning them."""
    if owned is None:
        return True
    for topic_id, reported in owned:
        pending = partitions.get(topic_id)
        if pending and any(p in pending for p in reported):
            return True
    return False


def reconcile(
    member: MemberAssignment,
    target_epoch: int,
    target: Assignment,
    partition_epoch: PartitionEpoch,
    owned: OwnedPartitions,
    subscribed_topic_ids: frozenset[uuid.UUID] | None = None,
) -> MemberAssignment:
    """The member's next step towards ``target`` at ``target_epoch``; ``member`` itself
    when there is nothing to do yet. Partitions of topics outside
    ``subscribed_topic_ids`` (when given) are revoked even if the target, computed
    before the member changed its subscription, still has them."""
    step = _Step(member, target_epoch, target, partition_epoch, owned, subscribed_topic_ids)
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return step.next(member.member_epoch)
        return member
    if state is MemberState.UNREVOKED_PARTITIONS:
        if owns_any(owned, member.pending_revocation):
            return member
        # Revoked: it may now take the next epoch (not past the target's).
        return step.next(min(member.member_epoch + 1, target_epoch))
    if state is MemberState.UNRELEASED_PARTITIONS:
        return step.next(member.member_epoch)
    raise ValueError(f"member in state {state!r} cannot be reconciled")


@dataclass(frozen=True)
class _Step:
    member: MemberAssignment
    target_epoch: int
    target: Assignment
    partition_epoch: PartitionEpoch
    owned: OwnedPartitions
    subscribed_topic_ids: frozenset[uuid.UUID] | None

    def next(self, epoch: int) -> MemberAssignment:
        return _next(self, epoch)


def _next(step: _Step, epoch: int) -> MemberAssignment:
    member, target, owned = step.member, step.target, step.owned
    target_epoch = step.target_epoch
    assigned: dict[uuid.UUID, set[int]] = {}
    revoke: dict[uuid.UUID, set[int]] = {}
    to_assign: dict[uuid.UUID, set[int]] = {}
    unreleased = False
    for topic_id in set(target) | set(member.assigned):
        wanted = target.get(topic_id, frozenset())
        if step.subscribed_topic_ids is not None and topic_id not in step.subscribed_topic_ids:
            wanted = frozenset()
        current = member.assigned.get(topic_id, frozenset())
        keep = current & wanted
        assigned[topic_id] = set(keep)
        revoke[topic_id] = set(current - keep)
        new = set(wanted - keep)
        own_pending = member.pending_revocation.get(topic_id, frozenset())
        held = {
            p
            for p in new
            if step.partition_epoch(topic_id, p) != NO_PARTITION_EPOCH and p not in own_pending
        }
        if held:
            unreleased = True
            new -= held
        to_assign[topic_id] = new
    revoke = {t: ps for t, ps in revoke.items() if ps}
    to_assign = {t: ps for t, ps in to_assign.items() if ps}

    if revoke and owns_any(owned, _clean(revoke)):
        # Revoke first; the epoch stays until the member acknowledges.
        return member.moved_to(epoch, MemberState.UNREVOKED_PARTITIONS, assigned, revoke)
    for topic_id, partitions in to_assign.items():
        assigned.setdefault(topic_id, set()).update(partitions)
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return member.moved_to(target_epoch, state, assigned, {})
