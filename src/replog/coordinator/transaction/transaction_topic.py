"""``__transaction_state``: its settings, and which partition holds a transactional id.

A transactional id lives in partition ``Utils.abs(transactionalId.hashCode) %
transaction.state.log.num.partitions`` (Kafka ``TransactionStateManager.partitionFor``):
Java's ``String.hashCode`` and Kafka's ``abs``, which maps Integer.MIN_VALUE to 0. The
rule is the one ``__consumer_offsets`` uses for a group id, so it is shared with
``coordinator.group.offsets_topic`` rather than copied.

The configuration keys and defaults are Kafka's (``TransactionLogConfig``,
``TransactionStateManagerConfig``).
"""

from __future__ import annotations

from dataclasses import dataclass

from replog.common.topics import TRANSACTION_STATE_TOPIC_NAME
from replog.coordinator.group.offsets_topic import java_string_hash, kafka_abs

__all__ = [
    "TRANSACTION_STATE_TOPIC_NAME",
    "TransactionConfig",
    "partition_for",
    "transaction_topic_configs",
]

TRANSACTIONAL_ID_EXPIRATION_MS = "transactional.id.expiration.ms"
TRANSACTION_MAX_TIMEOUT_MS = "transaction.max.timeout.ms"
TRANSACTION_STATE_LOG_NUM_PARTITIONS = "transaction.state.log.num.partitions"
TRANSACTION_STATE_LOG_REPLICATION_FACTOR = "transaction.state.log.replication.factor"
TRANSACTION_STATE_LOG_SEGMENT_BYTES = "transaction.state.log.segment.bytes"
TRANSACTION_STATE_LOG_LOAD_BUFFER_SIZE = "transaction.state.log.load.buffer.size"
TRANSACTION_STATE_LOG_MIN_ISR = "transaction.state.log.min.isr"
TRANSACTION_ABORT_TIMED_OUT_CLEANUP_INTERVAL_MS = (
    "transaction.abort.timed.out.transaction.cleanup.interval.ms"
)
TRANSACTION_REMOVE_EXPIRED_CLEANUP_INTERVAL_MS = (
    "transaction.remove.expired.transaction.cleanup.interval.ms"
)


@dataclass(frozen=True)
class TransactionConfig:
    """The transaction coordinator's settings, with Kafka's defaults (Kafka
    ``TransactionConfig``). ``transaction_version`` is the finalized
    ``transaction.version`` feature level: 1 writes ``TransactionLogValue`` v1; 2
    (KIP-890 part 2's epoch bump per transaction) is not implemented here."""

    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    transaction_max_timeout_ms: int = 15 * 60 * 1000
    transaction_log_num_partitions: int = 50
    transaction_log_replication_factor: int = 3
    transaction_log_segment_bytes: int = 100 * 1024 * 1024
    transaction_log_load_buffer_size: int = 5 * 1024 * 1024
    transaction_log_min_isr: int = 2
    abort_timed_out_transactions_interval_ms: int = 10_000
    remove_expired_transactional_ids_interval_ms: int = 3600 * 1000
    request_timeout_ms: int = 30_000
    transaction_version: int = 1

    def __post_init__(self) -> None:
        assert self.transaction_log_num_partitions > 0, self
        assert self.transaction_version in (0, 1), "transaction.version 2 is not implemented"

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> TransactionConfig:
        """From broker properties spelled as Kafka spells them; absent keys keep Kafka's
        defaults."""
        keys = {
            TRANSACTIONAL_ID_EXPIRATION_MS: "transactional_id_expiration_ms",
            TRANSACTION_MAX_TIMEOUT_MS: "transaction_max_timeout_ms",
            TRANSACTION_STATE_LOG_NUM_PARTITIONS: "transaction_log_num_partitions",
            TRANSACTION_STATE_LOG_REPLICATION_FACTOR: "transaction_log_replication_factor",
            TRANSACTION_STATE_LOG_SEGMENT_BYTES: "transaction_log_segment_bytes",
            TRANSACTION_STATE_LOG_LOAD_BUFFER_SIZE: "transaction_log_load_buffer_size",
            TRANSACTION_STATE_LOG_MIN_ISR: "transaction_log_min_isr",
            TRANSACTION_ABORT_TIMED_OUT_CLEANUP_INTERVAL_MS: (
                "abort_timed_out_transactions_interval_ms"
            ),
            TRANSACTION_REMOVE_EXPIRED_CLEANUP_INTERVAL_MS: (
                "remove_expired_transactional_ids_interval_ms"
            ),
            "request.timeout.ms": "request_timeout_ms",
        }
        return cls(**{field: int(props[key]) for key, field in keys.items() if key in props})

    def valid_transaction_timeout(self, timeout_ms: int) -> bool:
        """Kafka ``validateTransactionTimeoutMs``: positive and at most the maximum."""
        return 0 < timeout_ms <= self.transaction_max_timeout_ms


def partition_for(transactional_id: str, num_partitions: int) -> int:
    """The ``__transaction_state`` partition that holds ``transactional_id``."""
    return kafka_abs(java_string_hash(transactional_id)) % num_partitions


def transaction_topic_configs(config: TransactionConfig) -> dict[str, str]:
    """The topic configs Kafka creates ``__transaction_state`` with
    (``TransactionStateManager.transactionTopicConfigs``); its
    ``compression.type=uncompressed`` is left out: replog has no such topic config, and
    the coordinator's own appends are uncompressed (as ``offsets_topic_configs``)."""
    return {
        "unclean.leader.election.enable": "false",
        "cleanup.policy": "compact",
        "min.insync.replicas": str(config.transaction_log_min_isr),
        "segment.bytes": str(config.transaction_log_segment_bytes),
    }
