"""KIP-848's online upgrade and downgrade: a classic group becomes a consumer group and
back, as pure functions of the group (Kafka ``GroupMetadataManager.convertToConsumerGroup``
/ ``convertToClassicGroup``, ``ConsumerGroup.fromClassicGroup``,
``ClassicGroup.fromConsumerGroup``).

``group.consumer.migration.policy`` says which ways are allowed: ``bidirectional``
(Kafka 4.0's default), ``upgrade``, ``downgrade`` or ``disabled``.

- **Upgrade.** A ConsumerGroupHeartbeat joining a non-empty classic group converts it,
  if the policy allows, the group uses the consumer protocol and it is not larger than
  ``group.consumer.max.size``; otherwise GROUP_ID_NOT_FOUND with Kafka's message. Each
  classic member becomes a consumer group member using the classic protocol, at the
  classic generation as its member epoch, Stable, holding its last assignment (which
  is also its target); the group epoch and the assignment epoch are the generation.
  The records: the classic group's tombstone, then the consumer group's records
  (``upgrade_records``), then the joining member's heartbeat on top.
- **Downgrade.** When a member using the consumer protocol leaves (or is fenced) and
  every remaining member uses the classic protocol, the policy allows it and they fit
  in ``group.max.size``, the group becomes a classic group at the group epoch as its
  generation, Stable, each member with its target assignment serialized in its
  subscription's version; the records are the consumer group's tombstones and the
  classic GroupMetadata record (``downgrade``). The caller then starts a rebalance so
  the members rejoin as a classic group.

An empty classic group is simply replaced by a consumer group (and the reverse), which
any policy allows (Kafka ``maybeDeleteEmptyClassicGroup``).

Concurrency: pure; the caller owns the groups.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Set

from replog.coordinator.group import consumer_records_codec as cr
from replog.coordinator.group.classic_group import ClassicGroup, GroupMember, GroupState
from replog.coordinator.group.consumer_group import ConsumerGroup, ConsumerGroupMember
from replog.coordinator.group.consumer_group_heartbeat import TopicImage, subscription_metadata
from replog.coordinator.group.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    assigned_partitions,
    decode_subscription,
    encode_assignment,
)
from replog.coordinator.group.group import Record
from replog.coordinator.group.reconciliation import MemberAssignment, MemberState
from replog.protocol.wire import CodecError


class ConsumerGroupMigrationPolicy(enum.Enum):
    BIDIRECTIONAL = "bidirectional"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    DISABLED = "disabled"

    @classmethod
    def parse(cls, value: str) -> ConsumerGroupMigrationPolicy:
        """Case-insensitive, as Kafka's ``CaseInsensitiveValidString``."""
        return cls(value.strip().lower())

    @property
    def upgrade_enabled(self) -> bool:
        return self in (
            ConsumerGroupMigrationPolicy.BIDIRECTIONAL,
            ConsumerGroupMigrationPolicy.UPGRADE,
        )

    @property
    def downgrade_enabled(self) -> bool:
        return self in (
            ConsumerGroupMigrationPolicy.BIDIRECTIONAL,
            ConsumerGroupMigrationPolicy.DOWNGRADE,
        )


class UpgradeRefused(Exception):
    """The classic group stays classic; the heartbeat gets GROUP_ID_NOT_FOUND."""


# -- upgrade -------------------------------------------------------------------------------


def validate_online_upgrade(
    group: ClassicGroup, policy: ConsumerGroupMigrationPolicy, consumer_max_size: int
) -> None:
    """Kafka ``validateOnlineUpgrade``; raises UpgradeRefused with Kafka's message."""
    gid = group.group_id
    if not policy.upgrade_enabled:
        raise UpgradeRefused(
            f"Cannot upgrade classic group {gid} to consumer group because online upgrade "
            "is disabled."
        )
    if group.protocol_type_name != CONSUMER_PROTOCOL_TYPE:
        raise UpgradeRefused(
            f"Cannot upgrade classic group {gid} to consumer group because the group does not "
            "use the consumer embedded protocol."
        )
    if len(group.members) > consumer_max_size:
        raise UpgradeRefused(
            f"Cannot upgrade classic group {gid} to consumer group because the group size "
            "exceeds the consumer group maximum size."
        )


def classic_metadata(member: GroupMember) -> cr.ClassicMemberMetadata:
    return cr.ClassicMemberMetadata(member.session_timeout_ms, tuple(member.protocols))


def upgrade_records(group: ClassicGroup, topics: TopicImage) -> list[cr.ConsumerGroupRecord]:
    """The consumer group records describing ``group`` (Kafka ``fromClassicGroup`` then
    ``createConsumerGroupRecords``). A partition claimed twice (a client assignor's
    mistake) stays with the first member. Raises UpgradeRefused when a member's
    embedded protocol does not parse."""
    gid = group.group_id
    generation = group.generation_id
    members: list[ConsumerGroupMember] = []
    taken: set[tuple[uuid.UUID, int]] = set()
    for m in group.members.values():
        try:
            metadata = m.metadata(group.protocol_name) if group.protocol_name else m.protocols[0][1]
            subscription = decode_subscription(metadata)
        except (CodecError, KeyError, IndexError) as exc:
            raise UpgradeRefused(
                f"Cannot upgrade classic group {gid} to consumer group because the embedded "
                "consumer protocol is malformed."
            ) from exc
        assigned: dict[uuid.UUID, set[int]] = {}
        for topic, partition in assigned_partitions(m.assignment):
            image = topics.topic(topic)
            if image is None or (image.topic_id, partition) in taken:
                continue
            taken.add((image.topic_id, partition))
            assigned.setdefault(image.topic_id, set()).add(partition)
        members.append(
            ConsumerGroupMember(
                m.member_id,
                instance_id=m.group_instance_id,
                rack_id=subscription.rack_id,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=subscription.topics,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                assignment=MemberAssignment(
                    generation,
                    generation,
                    MemberState.STABLE,
                    {t: frozenset(ps) for t, ps in assigned.items()},
                ),
                classic=classic_metadata(m),
            )
        )
    records = [cr.member_metadata_record(gid, m.member_id, m.metadata_value()) for m in members]
    records.append(
        cr.subscription_metadata_record(gid, subscription_metadata(members, topics).values())
    )
    records.append(cr.group_epoch_record(gid, generation))
    records += [cr.target_assignment_record(gid, m.member_id, m.assigned) for m in members]
    records.append(cr.assignment_epoch_record(gid, generation))
    records += [
        cr.current_assignment_record(gid, m.member_id, m.assignment_value()) for m in members
    ]
    return records


def replayed(group_id: str, records: list[cr.ConsumerGroupRecord]) -> ConsumerGroup:
    """A consumer group built from ``records`` (what a coordinator loading them has)."""
    group = ConsumerGroup(group_id)
    for record in records:
        group.replay(record)
    return group


# -- downgrade -----------------------------------------------------------------------------


def can_downgrade(
    group: ConsumerGroup,
    leaving: Set[str],
    policy: ConsumerGroupMigrationPolicy,
    classic_max_size: int,
) -> bool:
    """Kafka ``validateOnlineDowngradeWithFencedMembers``: every member but the leaving
    ones uses the classic protocol, some remain, the policy allows it, they fit."""
    remaining = [m for mid, m in group.members.items() if mid not in leaving]
    if not remaining or not all(m.classic is not None for m in remaining):
        return False
    common = set.intersection(
        *({name for name, _ in m.classic.supported_protocols} for m in remaining if m.classic)
    )
    if not common:  # no protocol to select (JoinGroup keeps one in common; a guard)
        return False
    return policy.downgrade_enabled and len(remaining) <= classic_max_size


def downgrade(
    group: ConsumerGroup, leaving: Set[str], now_ms: int
) -> tuple[ClassicGroup, list[Record]]:
    """The classic group the consumer group becomes without ``leaving``, and the records
    to write: the consumer group's tombstones, then the classic generation."""
    classic = ClassicGroup(
        group.group_id,
        state=GroupState.STABLE,
        state_timestamp_ms=now_ms,
        generation_id=group.group_epoch,
    )
    for member_id, member in group.members.items():
        if member_id in leaving:
            continue
        assert member.classic is not None
        classic.add_member(
            GroupMember(
                member_id,
                member.instance_id,
                member.client_id,
                member.client_host,
                member.rebalance_timeout_ms,
                member.classic.session_timeout_ms,
                CONSUMER_PROTOCOL_TYPE,
                list(member.classic.supported_protocols),
            )
        )
    classic.protocol_name = classic.select_protocol()
    for member_id, member in classic.members.items():
        target = group.target_assignment.get(member_id, {})
        by_name = {
            name: sorted(ps)
            for topic_id, ps in target.items()
            if (name := group.topic_name(topic_id)) is not None
        }
        try:
            version = decode_subscription(member.metadata(classic.protocol_name)).version
        except CodecError:
            version = 0
        member.assignment = encode_assignment(version, by_name)
    records = [r.encode() for r in group.tombstone_records()]
    records.append(
        classic.metadata_record(
            {m.member_id: m.assignment for m in classic.members.values()}, now_ms
        )
    )
    return classic, records
