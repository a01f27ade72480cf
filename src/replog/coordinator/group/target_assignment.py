"""What a consumer group's target assignment is computed from, and its computation: the
broker's view of the topics, the group settings, the subscription metadata (the
subscribed topics' ids and partition counts) and the assignor's run over the members
(Kafka ``TargetAssignmentBuilder``). Shared by ConsumerGroupHeartbeat's decisions and
the conversion of classic groups.

Concurrency: pure.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from replog.coordinator.group import consumer_records_codec as cr
from replog.coordinator.group.assignors import Assignor, MemberSpec, TopicSpec
from replog.coordinator.group.consumer_group import ConsumerGroupMember
from replog.coordinator.group.reconciliation import Assignment


class TopicImage(Protocol):
    """What the coordinator knows of the cluster's topics (the broker's metadata cache)."""

    def topic(self, name: str) -> cr.TopicMetadata | None: ...

    def topic_names(self) -> Iterable[str]: ...


@dataclass(frozen=True)
class GroupSettings:
    assignors: Mapping[str, Assignor]  # group.consumer.assignors; the first is the default
    max_size: int  # group.consumer.max.size
    heartbeat_interval_ms: int  # group.consumer.heartbeat.interval.ms
    session_timeout_ms: int  # group.consumer.session.timeout.ms

    @property
    def default_assignor(self) -> str:
        return next(iter(self.assignors))


def subscription_metadata(
    members: Iterable[ConsumerGroupMember], topics: TopicImage
) -> dict[str, cr.TopicMetadata]:
    members = list(members)
    names: set[str] = set()
    all_names: list[str] | None = None
    for member in members:
        names.update(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            if all_names is None:
                all_names = list(topics.topic_names())
            names |= member.subscribed_topics(all_names) - set(member.subscribed_topic_names)
    result: dict[str, cr.TopicMetadata] = {}
    for name in sorted(names):
        topic = topics.topic(name)
        if topic is not None:
            result[name] = topic
    return result


def preferred_assignor(members: Iterable[ConsumerGroupMember], settings: GroupSettings) -> str:
    """The assignor most members ask for (ties by name), else the default."""
    counts: dict[str, int] = {}
    for member in members:
        if member.server_assignor is not None:
            counts[member.server_assignor] = counts.get(member.server_assignor, 0) + 1
    if not counts:
        return settings.default_assignor
    return min(counts, key=lambda name: (-counts[name], name))


def compute_target_assignment(
    members: Mapping[str, ConsumerGroupMember],
    metadata: Mapping[str, cr.TopicMetadata],
    targets: Mapping[str, Assignment],
    settings: GroupSettings,
) -> dict[str, Assignment]:
    """Every member's target from the group's assignor (Kafka ``TargetAssignmentBuilder``);
    PartitionAssignorError when it cannot assign."""
    specs: dict[uuid.UUID, TopicSpec] = {
        t.topic_id: TopicSpec(t.topic_id, t.name, t.num_partitions) for t in metadata.values()
    }
    members_specs = {
        member_id: MemberSpec(
            frozenset(
                metadata[name].topic_id
                for name in member.subscribed_topics(metadata)
                if name in metadata
            ),
            member.rack_id,
            targets.get(member_id, {}),
        )
        for member_id, member in members.items()
    }
    assignor = settings.assignors[preferred_assignor(members.values(), settings)]
    return assignor(members_specs, specs)
