"""The broker's view of the cluster, kept from the controller's UpdateMetadata.

Every broker answers Metadata for the whole cluster from this cache. Work that waits
for the cache to show something (CreateTopics and CreatePartitions waiting for their
partitions' leaders, DeleteTopics for the topics to go: Kafka's ``DelayedCreatePartitions``
and ``DelayedDeleteTopics``) is a ``MetadataWatcher`` handed to ``watch``; every
``update`` offers itself to the watchers, which complete when it satisfies them.

Concurrency: owned by the event loop; updates replace whole entries; watchers run in
``update``, on the loop, and must not block.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    broker_id: int
    host: str
    port: int
    rack: str | None = None
    # (listener name, host, port) of each of its listeners, from UpdateMetadata
    listeners: tuple[tuple[str, str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


class MetadataWatcher(Protocol):
    """Work waiting for the cache (Kafka ``DelayedOperation.tryComplete``)."""

    def try_complete(self, cache: MetadataCache) -> bool:
        """Complete if ``cache`` now satisfies it; True once complete."""
        ...


@dataclass
class MetadataCache:
    controller_id: int | None = None
    controller_epoch: int = -1
    brokers: dict[int, BrokerEndpoint] = field(default_factory=dict)
    partitions: dict[str, dict[int, PartitionInfo]] = field(default_factory=dict)
    # KIP-516 topic ids, both ways; filled from UpdateMetadata (v7 carries them).
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    topic_names: dict[uuid.UUID, str] = field(default_factory=dict)
    # This broker's id while its ZooKeeper session is surely expired (the broker fenced
    # itself): the leaderships the cache still gives it are not to be believed, so the
    # broker answers no client until the controller's next UpdateMetadata.
    fenced_leader: int | None = None
    _watchers: list[MetadataWatcher] = field(default_factory=list, repr=False)

    def watch(self, watcher: MetadataWatcher) -> bool:
        """Try ``watcher`` now; if the cache does not satisfy it yet, each ``update``
        tries it again until it completes or is ``unwatch``-ed. True: completed now."""
        if watcher.try_complete(self):
            return True
        self._watchers.append(watcher)
        return False

    def unwatch(self, watcher: MetadataWatcher) -> None:
        """Forget ``watcher`` (it expired, or its request went away)."""
        if watcher in self._watchers:
            self._watchers.remove(watcher)

    def _complete_watchers(self) -> None:
        if self._watchers:
            self._watchers = [w for w in self._watchers if not w.try_complete(self)]

    def update(
        self,
        *,
        controller_id: int,
        controller_epoch: int,
        brokers: list[BrokerEndpoint],
        partitions: list[PartitionInfo],
        deleted: set[str] = frozenset(),  # type: ignore[assignment]
        topic_ids: Mapping[str, uuid.UUID] | None = None,
    ) -> None:
        """Apply one UpdateMetadata: ``partitions`` replace their entries, ``deleted``
        topics go (their ids with them), ``topic_ids`` are the ids it carried. It comes from
        the controller, so whatever the cache says of this broker is current again."""
        self.fenced_leader = None
        self.controller_id = controller_id
        self.controller_epoch = controller_epoch
        self.brokers = {b.broker_id: b for b in brokers}
        for info in partitions:
            self.partitions.setdefault(info.topic, {})[info.partition] = info
        for topic in deleted:
            self.remove_topic(topic)
        for topic, topic_id in (topic_ids or {}).items():
            if topic not in deleted:
                self.set_topic_id(topic, topic_id)
        self._complete_watchers()

    def brokers_for(self, listener: str) -> dict[int, BrokerEndpoint]:
        """The live brokers as a client of ``listener`` reaches them: Kafka answers with
        the endpoints of the listener a request came in on, and leaves out brokers
        without one."""
        out = {}
        for b in self.brokers.values():
            if not b.listeners:
                out[b.broker_id] = b
                continue
            for name, host, port in b.listeners:
                if name == listener:
                    out[b.broker_id] = replace(b, host=host, port=port)
                    break
        return out

    def remove_topic(self, topic: str) -> None:
        self.partitions.pop(topic, None)
        topic_id = self.topic_ids.pop(topic, None)
        if topic_id is not None:
            self.topic_names.pop(topic_id, None)

    def set_topic_id(self, topic: str, topic_id: uuid.UUID) -> None:
        """Learn a topic's id; a name now bearing a new id (the topic was deleted and
        created again) forgets the old one."""
        old = self.topic_ids.get(topic)
        if old is not None and old != topic_id:
            self.topic_names.pop(old, None)
        self.topic_ids[topic] = topic_id
        self.topic_names[topic_id] = topic

    def topic_id(self, topic: str) -> uuid.UUID | None:
        """The topic's id (KIP-516), or None while the broker has not learnt it."""
        return self.topic_ids.get(topic)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with this id, or None (UNKNOWN_TOPIC_ID)."""
        return self.topic_names.get(topic_id)

    def topics(self) -> list[str]:
        return sorted(self.partitions)

    def has_topic(self, topic: str) -> bool:
        return topic in self.partitions

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        return self.partitions.get(topic, {}).get(partition)

    def missing_leaders(self, topic: str, partitions: set[int]) -> int:
        """How many of ``partitions`` of ``topic`` the cache lacks or knows no leader of
        (Kafka ``DelayedCreatePartitions.missingLeaderCount``)."""
        known = self.partitions.get(topic, {})
        return sum(1 for p in partitions if p not in known or known[p].leader < 0)
