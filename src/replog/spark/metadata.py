"""Driver-side broker queries for the ``replog`` source: partitions and earliest/latest offsets.

A thin I/O shell around ``confluent_kafka.admin.AdminClient`` (Metadata and ListOffsets
requests, with the source's isolation level; OffsetFetch for ``startingOffsets=committed``;
no commits). The decisions live in
:mod:`replog.spark.offsets`.

Concurrency: one :class:`BrokerMetadata` per driver-side reader, used from one thread.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from replog.spark.offsets import PartitionOffsets, TopicPartition
from replog.spark.options import IsolationLevel, OptionError, Subscription, SubscriptionKind

log = logging.getLogger("replog.spark")

#: How long one metadata or ListOffsets request may take before the query fails.
REQUEST_TIMEOUT_S = 30.0


class DataLossError(RuntimeError):
    """Records a query should have read are gone, and ``failOnDataLoss`` is true."""


def report_data_loss(losses: Iterable[str], fail_on_data_loss: bool) -> None:
    """Raise :class:`DataLossError` for the first loss, or log each as a warning."""
    for loss in losses:
        if fail_on_data_loss:
            raise DataLossError(
                f"{loss}. Set option failOnDataLoss=false to skip lost records with a warning."
            )
        log.warning("replog source: %s (failOnDataLoss=false: skipping ahead)", loss)


class BrokerMetadata:
    """Lists a subscription's partitions and their earliest/latest offsets."""

    def __init__(
        self,
        bootstrap_servers: str,
        client_config: Mapping[str, str],
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> None:
        from confluent_kafka.admin import AdminClient

        config = {k: v for k, v in client_config.items() if k != "isolation.level"}
        config["bootstrap.servers"] = bootstrap_servers
        self._admin = AdminClient(config)
        self._isolation_level = isolation_level

    def partitions(
        self, subscription: Subscription, fail_on_data_loss: bool
    ) -> list[TopicPartition]:
        """The partitions a subscription covers now (never auto-creates a topic).

        A subscribed or assigned topic that does not exist is an error when
        ``fail_on_data_loss`` is set, otherwise it is skipped with a warning.
        """
        metadata = self._admin.list_topics(timeout=REQUEST_TIMEOUT_S)
        existing = {
            name: sorted(topic.partitions)
            for name, topic in metadata.topics.items()
            if topic.error is None
        }
        option = subscription.kind.value
        if subscription.kind is SubscriptionKind.SUBSCRIBE_PATTERN:
            return [
                (t, p) for t in sorted(existing) if subscription.matches(t) for p in existing[t]
            ]
        if subscription.kind is SubscriptionKind.SUBSCRIBE:
            wanted = [(t, p) for t in subscription.topics for p in existing.get(t, [])]
            missing = [t for t in subscription.topics if t not in existing]
        else:
            wanted = [(t, p) for t, p in subscription.partitions if p in existing.get(t, [])]
            missing = [f"{t}-{p}" for t, p in subscription.partitions if (t, p) not in wanted]
        if missing:
            message = f"option '{option}': unknown topic or partition {', '.join(missing)}"
            if fail_on_data_loss:
                raise OptionError(f"{message} (set failOnDataLoss=false to wait for it)")
            log.warning("replog source: %s; reading the others", message)
        return sorted(wanted)

    def earliest(self, partitions: Iterable[TopicPartition]) -> PartitionOffsets:
        """Each partition's log start offset."""
        from confluent_kafka.admin import OffsetSpec

        return self._list_offsets(partitions, OffsetSpec.earliest())

    def latest(self, partitions: Iterable[TopicPartition]) -> PartitionOffsets:
        """Where reading stops: each partition's high watermark, or under read_committed
        its last stable offset (ListOffsets with the isolation level, as Spark's
        ``KafkaOffsetReaderAdmin`` asks)."""
        from confluent_kafka.admin import OffsetSpec

        return self._list_offsets(partitions, OffsetSpec.latest())

    def committed(self, group_id: str, partitions: Iterable[TopicPartition]) -> PartitionOffsets:
        """``group_id``'s committed offsets of ``partitions`` (those it never committed
        are left out)."""
        from confluent_kafka import ConsumerGroupTopicPartitions
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        wanted = [KafkaTopicPartition(t, p) for t, p in sorted(set(partitions))]
        request = [ConsumerGroupTopicPartitions(group_id, wanted)]
        result = self._admin.list_consumer_group_offsets(
            request, request_timeout=REQUEST_TIMEOUT_S
        )[group_id].result()
        return {
            (tp.topic, tp.partition): int(tp.offset)
            for tp in result.topic_partitions
            if tp.error is None and tp.offset >= 0
        }

    def _list_offsets(self, partitions: Iterable[TopicPartition], spec: object) -> PartitionOffsets:
        from confluent_kafka import IsolationLevel as KafkaIsolationLevel
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        request = {KafkaTopicPartition(t, p): spec for t, p in wanted}
        level = (
            KafkaIsolationLevel.READ_COMMITTED
            if self._isolation_level is IsolationLevel.READ_COMMITTED
            else KafkaIsolationLevel.READ_UNCOMMITTED
        )
        futures = self._admin.list_offsets(
            request,
            isolation_level=level,
            request_timeout=REQUEST_TIMEOUT_S,
        )
        out: PartitionOffsets = {}
        for tp, future in futures.items():
            out[(tp.topic, tp.partition)] = int(future.result().offset)
        return out
