"""Test helpers for the KIP-848 group core: a topic image, a shard stand-in holding the
groups, and a driver that applies each decision's records the way the runtime does
(encoded, decoded, replayed), keeping the log for replay checks."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from replog.coordinator.group import consumer_records
from replog.coordinator.group import consumer_records_codec as cr
from replog.coordinator.group.assignors import configured_assignors
from replog.coordinator.group.consumer_group import ConsumerGroup
from replog.coordinator.group.consumer_group_heartbeat import (
    Decision,
    GroupSettings,
    HeartbeatRequest,
    heartbeat,
    rebalance_timed_out,
    session_expired,
)
from replog.coordinator.group.group import Record

SETTINGS = GroupSettings(
    assignors=configured_assignors("uniform,range"),
    max_size=1000,
    heartbeat_interval_ms=500,
    session_timeout_ms=6000,
)


class Topics:
    """A TopicImage: topic name -> (id, partition count)."""

    def __init__(self, **counts: int) -> None:
        self.ids: dict[str, uuid.UUID] = {}
        self.counts: dict[str, int] = {}
        for name, count in counts.items():
            self.create(name, count)

    def create(self, name: str, count: int) -> uuid.UUID:
        self.ids[name] = uuid.uuid5(uuid.NAMESPACE_URL, f"{name}-{len(self.ids)}")
        self.counts[name] = count
        return self.ids[name]

    def delete(self, name: str) -> None:
        del self.ids[name]
        del self.counts[name]

    def topic(self, name: str) -> cr.TopicMetadata | None:
        if name not in self.ids:
            return None
        return cr.TopicMetadata(self.ids[name], name, self.counts[name])

    def topic_names(self):
        return list(self.ids)


@dataclass
class Shard:
    groups: dict = field(default_factory=dict)
    log: list[Record] = field(default_factory=list)


class Driver:
    """Runs heartbeats against one group id, applying each decision's records."""

    def __init__(self, topics: Topics, settings: GroupSettings = SETTINGS, group_id: str = "g"):
        self.topics = topics
        self.settings = settings
        self.group_id = group_id
        self.shard = Shard()
        self._ids = 0

    @property
    def group(self) -> ConsumerGroup:
        return self.shard.groups[self.group_id]

    def apply(self, records: list[cr.ConsumerGroupRecord]) -> None:
        for record in records:
            encoded = record.encode()
            self.shard.log.append(encoded)
            decoded = cr.decode(encoded.key, encoded.value)
            assert decoded == record
            consumer_records.apply(self.shard, decoded)

    def heartbeat(self, member_id: str, member_epoch: int, **fields) -> Decision:
        self._ids += 1
        request = HeartbeatRequest(self.group_id, member_id, member_epoch, **fields)
        decision = heartbeat(
            self.shard.groups.get(self.group_id),
            request,
            self.settings,
            self.topics,
            f"generated-{self._ids}",
        )
        if decision.replaces_classic_group:
            del self.shard.groups[self.group_id]
        self.apply(decision.records)
        return decision

    def join(self, member_id: str, topics=("orders",), **fields) -> Decision:
        fields.setdefault("rebalance_timeout_ms", 30_000)
        fields.setdefault("owned", ())
        return self.heartbeat(member_id, 0, subscribed_topic_names=tuple(topics), **fields)

    def expire(self, member_id: str) -> None:
        records, _ = session_expired(self.group, member_id, self.topics)
        self.apply(records)

    def rebalance_timeout(self, member_id: str, epoch: int) -> list:
        records, _ = rebalance_timed_out(self.group, member_id, epoch, self.topics)
        self.apply(records)
        return records

    def replayed(self) -> ConsumerGroup | None:
        """The group as a new coordinator would load it from the log."""
        shard = Shard()
        for record in self.shard.log:
            consumer_records.replay(
                shard, int.from_bytes(record.key[:2], "big"), record.key, record.value
            )
        return shard.groups.get(self.group_id)


def owned(assignment) -> tuple:
    """A response assignment as the owned partitions a client reports next."""
    return tuple((t, tuple(sorted(ps))) for t, ps in sorted((assignment or {}).items(), key=str))


def snapshot(group: ConsumerGroup | None):
    """Everything the records carry, for comparing a live group with a replayed one."""
    if group is None:
        return None
    return (
        group.group_epoch,
        group.assignment_epoch,
        dict(group.subscription_metadata),
        dict(group.target_assignment),
        dict(group.members),
        dict(group.static_members),
        dict(group._partition_epochs),
    )
