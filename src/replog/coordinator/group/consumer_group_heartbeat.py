"""ConsumerGroupHeartbeat's decisions (Kafka ``GroupMetadataManager.consumerGroupHeartbeat``
and its timers), as pure functions of a ``ConsumerGroup``.

Each takes the group as it is (never changing it), the request, the settings, a view
of the topics and the ids it may need (a member id for a v0 member that brings none),
and returns a ``Decision``: the response fields or an error, the records to write, and
timer effects to carry out once the records are committed. The runtime applies the
records by replaying them into the group.

A heartbeat, in Kafka's three steps:

1. The member is created or updated; its metadata record is written when anything in it
   changed. The group epoch is bumped when a member joins, changes its subscription,
   or a subscribed topic appears, disappears or gains partitions (the subscription
   metadata is recomputed on every heartbeat against the broker's metadata).
2. When the group epoch is past the assignment epoch, the group's assignor (the one
   most members ask for, else the first of ``group.consumer.assignors``) computes a new
   target assignment; the members whose target changed get a record, then the epoch.
3. The member's current assignment moves one step towards its target
   (``reconciliation.reconcile``); the response carries its assignment when it changed
   or the request was a full one (a join, or every field set).

Leaving: epoch -1 removes the member (tombstones, group epoch bumped); epoch -2 (a static
member restarting) keeps it and its partitions at epoch -2 until the same instance id
joins again with a new member id, which takes its place and its assignment, or its
session times out.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace

from kio.schema.errors import ErrorCode

from replog.coordinator.group import consumer_records_codec as cr
from replog.coordinator.group.assignors import PartitionAssignorError
from replog.coordinator.group.consumer_group import (
    ConsumerGroup,
    ConsumerGroupMember,
    compile_regex,
)
from replog.coordinator.group.group import Group
from replog.coordinator.group.reconciliation import (
    Assignment,
    MemberAssignment,
    MemberState,
    reconcile,
)
from replog.coordinator.group.target_assignment import (
    GroupSettings,
    TopicImage,
    compute_target_assignment,
    subscription_metadata,
)
from replog.coordinator.group.target_assignment import (
    preferred_assignor as preferred_assignor,  # the handlers' ConsumerGroupDescribe
)

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION = 1

OwnedPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


@dataclass(frozen=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: OwnedPartitions | None = None
    client_id: str = ""
    client_host: str = ""
    api_version: int = 1


# -- effects on the shard's timers, carried out after the records are committed ---------


@dataclass(frozen=True)
class ScheduleSessionTimeout:
    member_id: str
    delay_ms: int


@dataclass(frozen=True)
class ScheduleRebalanceTimeout:
    member_id: str
    member_epoch: int
    delay_ms: int


@dataclass(frozen=True)
class CancelRebalanceTimeout:
    member_id: str


@dataclass(frozen=True)
class CancelMemberTimers:
    member_id: str


Effect = (
    ScheduleSessionTimeout | ScheduleRebalanceTimeout | CancelRebalanceTimeout | CancelMemberTimers
)


@dataclass
class Decision:
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    assignment: Assignment | None = None  # None: not sent in the response
    records: list[cr.ConsumerGroupRecord] = field(default_factory=list)
    effects: list[Effect] = field(default_factory=list)
    replaces_classic_group: bool = False


@dataclass(frozen=True)
class ClassicJoin:
    """A JoinGroup to a consumer group (``classic_members``): the member it joins as
    (new, existing, or a static member's successor and the member it replaces) and the
    classic metadata it brings."""

    member: ConsumerGroupMember
    replaced: ConsumerGroupMember | None
    metadata: cr.ClassicMemberMetadata


class Refused(Exception):
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def _refuse(error: ErrorCode, message: str) -> Decision:
    return Decision(error=error, message=message)


# -- validation ------------------------------------------------------------------------------


def validate_request(request: HeartbeatRequest, settings: GroupSettings) -> Decision | None:
    """Kafka ``throwIfConsumerGroupHeartbeatRequestIsInvalid``: a refusal, or None."""

    def blank(value: str | None) -> bool:
        return value is not None and not value.strip()

    invalid = ErrorCode.invalid_request
    epoch = request.member_epoch
    if (
        request.api_version >= CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION
        or epoch > 0
        or epoch == LEAVE_GROUP_MEMBER_EPOCH
    ) and not request.member_id.strip():
        return _refuse(invalid, "MemberId can't be empty.")
    if not request.group_id.strip():
        return _refuse(invalid, "GroupId can't be empty.")
    if blank(request.instance_id):
        return _refuse(invalid, "InstanceId can't be empty.")
    if blank(request.rack_id):
        return _refuse(invalid, "RackId can't be empty.")
    if epoch == 0:
        if request.rebalance_timeout_ms == -1:
            return _refuse(invalid, "RebalanceTimeoutMs must be provided in first request.")
        if request.owned is None or request.owned:
            return _refuse(invalid, "TopicPartitions must be empty when (re-)joining.")
        if not request.subscribed_topic_names and not request.subscribed_topic_regex:
            return _refuse(
                invalid,
                "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
            )
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if request.instance_id is None:
            return _refuse(invalid, "InstanceId can't be null.")
    elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        return _refuse(invalid, "MemberEpoch is invalid.")
    if request.server_assignor is not None and request.server_assignor not in settings.assignors:
        return _refuse(
            ErrorCode.unsupported_assignor,
            f"ServerAssignor {request.server_assignor} is not supported. Supported assignors: "
            f"{', '.join(settings.assignors)}.",
        )
    regex = request.subscribed_topic_regex
    if regex and compile_regex(regex) is None:
        return _refuse(
            ErrorCode.invalid_regular_expression,
            f"SubscribedTopicRegex `{regex}` is not a valid regular expression.",
        )
    return None


def _is_subset(owned: OwnedPartitions | None, assigned: Assignment) -> bool:
    if owned is None:
        return False
    return all(set(ps) <= assigned.get(t, frozenset()) for t, ps in owned)


def _check_member_epoch(member: ConsumerGroupMember, received: int, owned) -> None:
    """Kafka ``throwIfConsumerGroupMemberEpochIsInvalid``: the member's epoch, or its
    previous one with a subset of its partitions (the answer that bumped it was lost)."""
    if received > member.member_epoch:
        raise Refused(
            ErrorCode.fenced_member_epoch,
            f"The consumer group member has a greater member epoch ({received}) than the one "
            f"known by the group coordinator ({member.member_epoch}). The member must abandon "
            "all its partitions and rejoin.",
        )
    if received < member.member_epoch and (
        received != member.previous_member_epoch or not _is_subset(owned, member.assigned)
    ):
        raise Refused(
            ErrorCode.fenced_member_epoch,
            f"The consumer group member has a smaller member epoch ({received}) than the one "
            f"known by the group coordinator ({member.member_epoch}). The member must abandon "
            "all its partitions and rejoin.",
        )


# -- the heartbeat -------------------------------------------------------------------------


def heartbeat(
    existing: Group | None,
    request: HeartbeatRequest,
    settings: GroupSettings,
    topics: TopicImage,
    new_member_id: str,
) -> Decision:
    """A ConsumerGroupHeartbeat to the group ``existing`` (None: no group has this id;
    a classic group: refused unless it is empty and the member joins, in which case
    the decision replaces it). ``new_member_id`` names a v0 member that brings none."""
    invalid = validate_request(request, settings)
    if invalid is not None:
        return invalid
    joining = request.member_epoch == 0
    replaces_classic = False
    if existing is None:
        if not joining:
            return _refuse(
                ErrorCode.group_id_not_found, f"Consumer group {request.group_id} not found."
            )
        group = ConsumerGroup(request.group_id)
    elif isinstance(existing, ConsumerGroup):
        group = existing
    elif joining and existing.is_empty():
        group = ConsumerGroup(request.group_id)
        replaces_classic = True
    else:
        return _refuse(
            ErrorCode.group_id_not_found, f"Group {request.group_id} is not a consumer group."
        )
    try:
        if request.member_epoch < 0:
            return leave(group, request, topics)
        decision = heartbeat_steps(group, request, settings, topics, new_member_id)
    except Refused as refused:
        return _refuse(refused.error, refused.message)
    decision.replaces_classic_group = replaces_classic
    return decision


def heartbeat_steps(
    group: ConsumerGroup,
    request: HeartbeatRequest,
    settings: GroupSettings,
    topics: TopicImage,
    new_member_id: str,
    classic: ClassicJoin | None = None,
) -> Decision:
    """The three steps; ``classic`` when the member uses the classic protocol (a
    JoinGroup to this group): the member it is, and its JoinGroup protocols."""
    records: list[cr.ConsumerGroupRecord] = []
    effects: list[Effect] = []
    gid = group.group_id
    if len(group.members) >= settings.max_size and request.member_id not in group.members:
        raise Refused(
            ErrorCode.group_max_size_reached,
            f"The consumer group has reached its maximum capacity of {settings.max_size} members.",
        )
    member_id = request.member_id or new_member_id
    if classic is None:
        member, replaced = _get_or_subscribe(group, request, member_id)
    else:
        member, replaced = classic.member, classic.replaced
    if replaced is not None:
        # A static member comes back with a new member id: it takes the place (and the
        # assignment) of the one that left with epoch -2.
        records += cr.member_tombstones(gid, replaced.member_id)
        effects.append(CancelMemberTimers(replaced.member_id))

    # 1. The member, and the group epoch.
    updated = replace(
        member,
        instance_id=request.instance_id if request.instance_id is not None else member.instance_id,
        rack_id=request.rack_id if request.rack_id is not None else member.rack_id,
        rebalance_timeout_ms=request.rebalance_timeout_ms
        if request.rebalance_timeout_ms != -1
        else member.rebalance_timeout_ms,
        server_assignor=request.server_assignor
        if request.server_assignor is not None
        else member.server_assignor,
        subscribed_topic_names=tuple(request.subscribed_topic_names)
        if request.subscribed_topic_names is not None
        else member.subscribed_topic_names,
        subscribed_topic_regex=request.subscribed_topic_regex
        if request.subscribed_topic_regex is not None
        else member.subscribed_topic_regex,
        client_id=request.client_id,
        client_host=request.client_host,
        classic=None if classic is None else classic.metadata,
    )
    bump = group.group_epoch == 0
    is_new = member_id not in group.members
    if is_new or updated.metadata_value() != member.metadata_value():
        records.append(cr.member_metadata_record(gid, member_id, updated.metadata_value()))
        if (
            updated.subscribed_topic_names != member.subscribed_topic_names
            or updated.subscribed_topic_regex != member.subscribed_topic_regex
        ):
            bump = True
    if replaced is not None:
        records.append(
            cr.target_assignment_record(
                gid, member_id, group.target_assignment.get(replaced.member_id, {})
            )
        )
        records.append(cr.current_assignment_record(gid, member_id, member.assignment_value()))
    members = {
        m: v for m, v in group.members.items() if replaced is None or m != replaced.member_id
    }
    members[member_id] = updated
    metadata = subscription_metadata(members.values(), topics)
    if metadata != group.subscription_metadata:
        bump = True
        records.append(cr.subscription_metadata_record(gid, metadata.values()))
    group_epoch = group.group_epoch + 1 if bump else group.group_epoch
    if bump:
        records.append(cr.group_epoch_record(gid, group_epoch))

    # 2. The target assignment.
    targets = dict(group.target_assignment)
    if replaced is not None:
        targets[member_id] = targets.pop(replaced.member_id, {})
    assignment_epoch = group.assignment_epoch
    if group_epoch > assignment_epoch:
        try:
            new_targets = compute_target_assignment(members, metadata, targets, settings)
        except PartitionAssignorError as exc:
            raise Refused(
                ErrorCode.unknown_server_error, f"Failed to compute an assignment: {exc}"
            ) from exc
        for m in sorted(new_targets):
            if new_targets[m] != targets.get(m):
                records.append(cr.target_assignment_record(gid, m, new_targets[m]))
        records.append(cr.assignment_epoch_record(gid, group_epoch))
        targets = new_targets
        assignment_epoch = group_epoch

    # 3. The member's next step towards its target.
    current = updated.assignment
    if not current.is_reconciled_to(assignment_epoch):
        subscribed_ids = frozenset(
            metadata[name].topic_id
            for name in updated.subscribed_topics(metadata)
            if name in metadata
        )
        nxt = reconcile(
            current,
            assignment_epoch,
            targets.get(member_id, {}),
            group.partition_epoch,
            request.owned,
            subscribed_ids,
        )
        if nxt != current:
            updated = replace(updated, assignment=nxt)
            records.append(cr.current_assignment_record(gid, member_id, updated.assignment_value()))
            if nxt.state is MemberState.UNREVOKED_PARTITIONS:
                effects.append(
                    ScheduleRebalanceTimeout(
                        member_id, nxt.member_epoch, updated.rebalance_timeout_ms
                    )
                )
            else:
                effects.append(CancelRebalanceTimeout(member_id))
    session_ms = (
        settings.session_timeout_ms if classic is None else classic.metadata.session_timeout_ms
    )
    effects.append(ScheduleSessionTimeout(member_id, session_ms))

    full = request.member_epoch == 0 or (
        request.rebalance_timeout_ms != -1
        and request.subscribed_topic_names is not None
        and request.owned is not None
    )
    changed = updated.assigned != member.assigned
    return Decision(
        member_id=member_id,
        member_epoch=updated.member_epoch,
        assignment=updated.assigned if full or changed else None,
        records=records,
        effects=effects,
    )


def _get_or_subscribe(
    group: ConsumerGroup, request: HeartbeatRequest, member_id: str
) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None]:
    """The member the heartbeat is from (new when joining) and, for a static member
    rejoining with a new id, the member it replaces (Kafka
    ``getOrMaybeSubscribe{Dynamic,Static}ConsumerGroupMember``)."""
    joining = request.member_epoch == 0
    if request.instance_id is None:
        member = group.members.get(member_id)
        if member is None:
            if not joining:
                raise Refused(
                    ErrorCode.unknown_member_id,
                    f"Member {member_id} is not a member of group {group.group_id}.",
                )
            return ConsumerGroupMember(member_id), None
        _check_member_epoch(member, request.member_epoch, request.owned)
        return member, None
    existing = group.static_member(request.instance_id)
    if joining:
        if existing is None:
            member = group.members.get(member_id)
            if member is not None:
                _check_member_epoch(member, request.member_epoch, request.owned)
                return member, None
            return ConsumerGroupMember(member_id), None
        if existing.member_id == member_id:
            _check_member_epoch(existing, request.member_epoch, request.owned)
            return existing, None
        if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise Refused(
                ErrorCode.unreleased_instance_id,
                f"Static member {member_id} with instance id {request.instance_id} cannot join "
                f"the group because the instance id is owned by {existing.member_id} member.",
            )
        successor = replace(
            existing,
            member_id=member_id,
            assignment=replace(existing.assignment, member_epoch=0, previous_member_epoch=0),
        )
        return successor, existing
    if existing is None:
        raise Refused(ErrorCode.unknown_member_id, f"Instance id {request.instance_id} is unknown.")
    if existing.member_id != member_id:
        raise Refused(
            ErrorCode.fenced_instance_id,
            f"Static member {member_id} with instance id {request.instance_id} was fenced by "
            f"member {existing.member_id}.",
        )
    _check_member_epoch(existing, request.member_epoch, request.owned)
    return existing, None


# -- leaving and fencing ---------------------------------------------------------------------


def leave(group: ConsumerGroup, request: HeartbeatRequest, topics: TopicImage) -> Decision:
    """Epoch -1 (leave) or -2 (a static member leaving for now)."""
    member_id = request.member_id
    if request.instance_id is None:
        member = group.members.get(member_id)
        if member is None:
            return _refuse(
                ErrorCode.unknown_member_id,
                f"Member {member_id} is not a member of group {group.group_id}.",
            )
    else:
        member = group.static_member(request.instance_id)
        if member is None:
            return _refuse(
                ErrorCode.unknown_member_id, f"Instance id {request.instance_id} is unknown."
            )
        if member.member_id != member_id:
            return _refuse(
                ErrorCode.fenced_instance_id,
                f"Static member {member_id} with instance id {request.instance_id} was fenced "
                f"by member {member.member_id}.",
            )
        if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            leaving = MemberAssignment(
                LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                member.previous_member_epoch,
                member.state,
                member.assigned,
                {},
            )
            value = replace(member, assignment=leaving).assignment_value()
            return Decision(
                member_id=member_id,
                member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                records=[cr.current_assignment_record(group.group_id, member_id, value)],
            )
    records, effects = fence(group, member.member_id, topics)
    return Decision(
        member_id=member_id,
        member_epoch=request.member_epoch,
        records=records,
        effects=effects,
    )


def fence(
    group: ConsumerGroup, member_id: str, topics: TopicImage
) -> tuple[list[cr.ConsumerGroupRecord], list[Effect]]:
    """Remove a member (Kafka ``consumerGroupFenceMember``): its tombstones, the
    subscription metadata without it, the group epoch bumped. Nothing if it is gone."""
    if member_id not in group.members:
        return [], []
    gid = group.group_id
    records = cr.member_tombstones(gid, member_id)
    rest = [m for mid, m in group.members.items() if mid != member_id]
    metadata = subscription_metadata(rest, topics)
    if metadata != group.subscription_metadata:
        records.append(cr.subscription_metadata_record(gid, metadata.values()))
    records.append(cr.group_epoch_record(gid, group.group_epoch + 1))
    return records, [CancelMemberTimers(member_id)]


def session_expired(
    group: ConsumerGroup, member_id: str, topics: TopicImage
) -> tuple[list[cr.ConsumerGroupRecord], list[Effect]]:
    """The member's session timed out: fence it."""
    return fence(group, member_id, topics)


def rebalance_timed_out(
    group: ConsumerGroup, member_id: str, member_epoch: int, topics: TopicImage
) -> tuple[list[cr.ConsumerGroupRecord], list[Effect]]:
    """The member did not revoke within its rebalance timeout: fence it, if it is still
    revoking at that epoch."""
    member = group.members.get(member_id)
    if (
        member is None
        or member.state is not MemberState.UNREVOKED_PARTITIONS
        or member.member_epoch != member_epoch
    ):
        return [], []
    return fence(group, member_id, topics)
