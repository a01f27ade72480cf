"""Classic members inside a consumer group: JoinGroup, SyncGroup, Heartbeat and LeaveGroup
answered from the consumer group's state (Kafka ``classicGroupJoinToConsumerGroup``,
``classicGroupSyncToConsumerGroup``, ``classicGroupHeartbeatToConsumerGroup``,
``classicGroupLeaveToConsumerGroup``), as pure decisions like ConsumerGroupHeartbeat's.

- **JoinGroup** makes or updates the member as a heartbeat would (the three steps of
  ``consumer_group_heartbeat``), its subscription and rack taken from its JoinGroup
  protocol metadata (``ConsumerProtocolSubscription``), its owned partitions from v1
  subscriptions (none before: an eager client revoked everything before rejoining),
  its session timeout and protocols kept as its classic metadata. It is answered at
  once: the generation is its member epoch, the protocol its first one, and it is
  never the leader (the server-side assignor assigns).
- **SyncGroup** hands the member its current assignment, serialized as a
  ``ConsumerProtocolAssignment`` in its subscription's version; REBALANCE_IN_PROGRESS
  when the group moved on since it joined.
- **Heartbeat** restarts its session and answers REBALANCE_IN_PROGRESS when it must
  rejoin: the group epoch moved past its member epoch, it holds partitions it must
  revoke, or partitions it waits for were released.
- **LeaveGroup** removes members (tombstones, the group epoch bumped once).

Errors as Kafka's: UNKNOWN_MEMBER_ID (also for a member that uses the consumer
protocol), FENCED_INSTANCE_ID, ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL,
GROUP_MAX_SIZE_REACHED, MEMBER_ID_REQUIRED.

Concurrency: pure; ``ConsumerGroupRuntime`` writes and applies the records.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

from kio.schema.errors import ErrorCode

from replog.coordinator.group import consumer_group_heartbeat as hb
from replog.coordinator.group import consumer_records_codec as cr
from replog.coordinator.group.classic_group_rebalance import JoinRequest
from replog.coordinator.group.consumer_group import ConsumerGroup, ConsumerGroupMember
from replog.coordinator.group.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    decode_subscription,
    encode_assignment,
)
from replog.coordinator.group.reconciliation import NO_PARTITION_EPOCH, MemberState
from replog.protocol.wire import CodecError

UNKNOWN_MEMBER = ""


@dataclass
class JoinDecision:
    error: ErrorCode = ErrorCode.none
    member_id: str = UNKNOWN_MEMBER
    generation_id: int = -1
    protocol_name: str | None = None
    records: list[cr.ConsumerGroupRecord] = field(default_factory=list)
    effects: list[hb.Effect] = field(default_factory=list)


def _supports(group: ConsumerGroup, member_id: str, request: JoinRequest) -> bool:
    """Kafka ``supportsClassicProtocols``: protocol type ``consumer`` and a protocol
    every other classic member supports."""
    if request.protocol_type != CONSUMER_PROTOCOL_TYPE or not request.protocols:
        return False
    others = [
        m.classic for mid, m in group.members.items() if mid != member_id and m.classic is not None
    ]
    counts: Counter[str] = Counter()
    for classic in others:
        counts.update({name for name, _ in classic.supported_protocols})
    return any(counts[name] == len(others) for name, _ in request.protocols)


def _member(
    group: ConsumerGroup, member_id: str, request: JoinRequest
) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None]:
    """The member joining, and for a static member taking an instance id over, the one
    it replaces (Kafka ``getOrMaybeSubscribeStaticConsumerGroupMember``)."""
    instance = request.group_instance_id
    existing = group.static_member(instance) if instance is not None else None
    if existing is None or existing.member_id == member_id:
        member = group.members.get(member_id)
        return (member if member is not None else ConsumerGroupMember(member_id)), None
    if request.member_id != UNKNOWN_MEMBER:
        raise hb.Refused(
            ErrorCode.fenced_instance_id,
            f"Static member {member_id} with instance id {instance} was fenced by member "
            f"{existing.member_id}.",
        )
    successor = replace(
        existing,
        member_id=member_id,
        assignment=replace(existing.assignment, member_epoch=0, previous_member_epoch=0),
    )
    return successor, existing


def join(
    group: ConsumerGroup,
    request: JoinRequest,
    settings: hb.GroupSettings,
    topics: hb.TopicImage,
    new_member_id: str,
) -> JoinDecision:
    member_id = request.member_id or new_member_id
    if len(group.members) >= settings.max_size and member_id not in group.members:
        return JoinDecision(ErrorCode.group_max_size_reached, request.member_id)
    if not _supports(group, member_id, request):
        return JoinDecision(ErrorCode.inconsistent_group_protocol, request.member_id)
    if (
        request.require_known_member_id
        and request.member_id == UNKNOWN_MEMBER
        and request.group_instance_id is None
    ):
        return JoinDecision(ErrorCode.member_id_required, member_id)
    try:
        subscription = decode_subscription(request.protocols[0][1])
    except CodecError:
        return JoinDecision(ErrorCode.inconsistent_group_protocol, request.member_id)
    owned = []
    for topic, partitions in subscription.owned_partitions:
        image = topics.topic(topic)
        if image is not None:
            owned.append((image.topic_id, tuple(partitions)))
    try:
        member, replaced = _member(group, member_id, request)
        classic = hb.ClassicJoin(
            member,
            replaced,
            cr.ClassicMemberMetadata(request.session_timeout_ms, tuple(request.protocols)),
        )
        decision = hb.heartbeat_steps(
            group,
            hb.HeartbeatRequest(
                group_id=group.group_id,
                member_id=member_id,
                member_epoch=member.member_epoch,
                instance_id=request.group_instance_id,
                rack_id=subscription.rack_id,
                rebalance_timeout_ms=request.rebalance_timeout_ms,
                subscribed_topic_names=subscription.topics,
                owned=tuple(owned),
                client_id=request.client_id,
                client_host=request.client_host,
            ),
            settings,
            topics,
            new_member_id,
            classic,
        )
    except hb.Refused as refused:
        return JoinDecision(refused.error, request.member_id)
    return JoinDecision(
        ErrorCode.none,
        member_id,
        decision.member_epoch,
        request.protocols[0][0],
        decision.records,
        decision.effects,
    )


def classic_member(
    group: ConsumerGroup, member_id: str, instance_id: str | None
) -> tuple[ErrorCode, ConsumerGroupMember | None]:
    """Kafka ``validateConsumerGroupMember`` + ``throwIfMemberDoesNotUseClassicProtocol``."""
    if instance_id is not None:
        member = group.static_member(instance_id)
        if member is None:
            return ErrorCode.unknown_member_id, None
        if member.member_id != member_id:
            return ErrorCode.fenced_instance_id, None
    else:
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id, None
    if not member.uses_classic_protocol:
        return ErrorCode.unknown_member_id, None
    return ErrorCode.none, member


def must_rejoin(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
    """Kafka's heartbeat rule for a classic member: the group epoch moved on, it must
    revoke partitions, or partitions it waits for are free now."""
    if member.member_epoch < group.group_epoch:
        return True
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        return True
    if member.state is MemberState.UNRELEASED_PARTITIONS:
        target = group.target_assignment.get(member.member_id, {})
        for topic_id, partitions in target.items():
            held = member.assigned.get(topic_id, frozenset())
            for p in partitions - held:
                if group.partition_epoch(topic_id, p) == NO_PARTITION_EPOCH:
                    return True
    return False


def heartbeat(
    group: ConsumerGroup, member_id: str, instance_id: str | None, generation_id: int
) -> ErrorCode:
    """The error to answer a classic Heartbeat with (the caller restarts the session
    when it is NONE or REBALANCE_IN_PROGRESS)."""
    error, member = classic_member(group, member_id, instance_id)
    if member is None:
        return error
    if generation_id != member.member_epoch:
        return ErrorCode.illegal_generation
    if must_rejoin(group, member):
        return ErrorCode.rebalance_in_progress
    return ErrorCode.none


def sync(
    group: ConsumerGroup,
    member_id: str,
    instance_id: str | None,
    generation_id: int,
    protocol_type: str | None,
    protocol_name: str | None,
) -> tuple[ErrorCode, bytes]:
    """The member's assignment for SyncGroup, serialized in its subscription's version."""
    error, member = classic_member(group, member_id, instance_id)
    if member is None:
        return error, b""
    assert member.classic is not None
    if generation_id != member.member_epoch:
        return ErrorCode.illegal_generation, b""
    name, metadata = member.classic.supported_protocols[0]
    if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
        protocol_name is not None and protocol_name != name
    ):
        return ErrorCode.inconsistent_group_protocol, b""
    # Kafka ``throwIfRebalanceInProgress``: the group moved on since it joined (unless it
    # is still revoking: it rejoins once done).
    revoking = member.state is MemberState.UNREVOKED_PARTITIONS
    if group.group_epoch > member.member_epoch and not revoking:
        return ErrorCode.rebalance_in_progress, b""
    by_name: dict[str, list[int]] = {}
    for topic_id, partitions in member.assigned.items():
        topic = group.topic_name(topic_id)
        if topic is not None:
            by_name[topic] = sorted(partitions)
    try:
        version = decode_subscription(metadata).version
    except CodecError:
        version = 0
    return ErrorCode.none, encode_assignment(version, by_name)


def leave(
    group: ConsumerGroup, members: list[tuple[str, str | None]], topics: hb.TopicImage
) -> tuple[list[cr.ConsumerGroupRecord], list[tuple[str, str | None, ErrorCode]], set[str]]:
    """Records, per-member results ``(member id, instance id, error)``, and the ids of
    the members removed."""
    results = []
    leaving: dict[str, ConsumerGroupMember] = {}
    for member_id, instance_id in members:
        if instance_id is not None and member_id == UNKNOWN_MEMBER:
            # Removal by instance id alone (an admin's LeaveGroup).
            found = group.static_member(instance_id)
            member_id = found.member_id if found is not None else member_id
        error, member = classic_member(group, member_id, instance_id)
        if member is None:
            results.append((member_id, instance_id, error))
            continue
        leaving[member.member_id] = member
        results.append((member.member_id, instance_id, ErrorCode.none))
    records: list[cr.ConsumerGroupRecord] = []
    if leaving:
        gid = group.group_id
        for member_id in leaving:
            records += cr.member_tombstones(gid, member_id)
        rest = [m for mid, m in group.members.items() if mid not in leaving]
        metadata = hb.subscription_metadata(rest, topics)
        if metadata != group.subscription_metadata:
            records.append(cr.subscription_metadata_record(gid, metadata.values()))
        records.append(cr.group_epoch_record(gid, group.group_epoch + 1))
    return records, results, set(leaving)
