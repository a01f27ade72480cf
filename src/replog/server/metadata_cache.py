"""The broker's view of the cluster, kept from the controller's UpdateMetadata.

Every broker answers Metadata for the whole cluster from this cache.
Concurrency: owned by the event loop; updates replace whole entries.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    broker_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


@dataclass
class MetadataCache:
    controller_id: int | None = None
    controller_epoch: int = -1
    brokers: dict[int, BrokerEndpoint] = field(default_factory=dict)
    partitions: dict[str, dict[int, PartitionInfo]] = field(default_factory=dict)
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)

    def update(
        self,
        *,
        controller_id: int,
        controller_epoch: int,
        brokers: list[BrokerEndpoint],
        partitions: list[PartitionInfo],
        deleted: set[str] = frozenset(),  # type: ignore[assignment]
    ) -> None:
        self.controller_id = controller_id
        self.controller_epoch = controller_epoch
        self.brokers = {b.broker_id: b for b in brokers}
        for info in partitions:
            self.partitions.setdefault(info.topic, {})[info.partition] = info
        for topic in deleted:
            self.partitions.pop(topic, None)
            self.topic_configs.pop(topic, None)

    def remove_topic(self, topic: str) -> None:
        self.partitions.pop(topic, None)
        self.topic_configs.pop(topic, None)

    def topics(self) -> list[str]:
        return sorted(self.partitions)

    def has_topic(self, topic: str) -> bool:
        return topic in self.partitions

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        return self.partitions.get(topic, {}).get(partition)
