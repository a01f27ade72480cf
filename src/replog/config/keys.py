"""The broker's keys: Kafka's ``server.properties`` names, types and defaults.

One table, ``BROKER_KEYS``: each key's ``KafkaConfig`` attribute, parser and default.
The keys that give the topic keys their defaults (``log.segment.bytes``,
``log.retention.hours`` ...) are not restated here: they come from storage's
``BROKER_LOG_KEYS``, beside the topic keys they feed, with Kafka's unit synonyms.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from replog.storage.log_config import BROKER_LOG_KEYS, parse_bool

_bool = parse_bool


def _int(value: str) -> int:
    return int(value.strip())


def _str(value: str) -> str:
    return value.strip()


def _float(value: str) -> float:
    return float(value.strip())


# key -> (attribute, parser, default as it would appear in server.properties, or None
# for Kafka's null default). The broker defaults of the topic keys (log.segment.bytes,
# log.retention.hours ...) come from storage's table, BROKER_LOG_KEYS.
BROKER_KEYS: dict[str, tuple[str, Callable[[str], Any], str | None]] = {
    "broker.id": ("broker_id", _int, "0"),
    "broker.rack": ("broker_rack", _str, ""),
    "listeners": ("listeners_raw", _str, "PLAINTEXT://127.0.0.1:9092"),
    "advertised.listeners": ("advertised_listeners_raw", _str, ""),
    # Security (Kafka's names). Per-listener values go in listener.name.<name>.<key>.
    "listener.security.protocol.map": (
        "listener_security_protocol_map_raw",
        _str,
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
    ),
    "inter.broker.listener.name": ("inter_broker_listener_name", _str, "PLAINTEXT"),
    # Kafka's default is GSSAPI, which replog does not offer.
    "sasl.enabled.mechanisms": (
        "sasl_enabled_mechanisms",
        _str,
        "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    ),
    "ssl.keystore.location": ("ssl_keystore_location", _str, ""),
    "ssl.keystore.type": ("ssl_keystore_type", _str, "PEM"),
    "ssl.key.password": ("ssl_key_password", _str, ""),
    "ssl.truststore.location": ("ssl_truststore_location", _str, ""),
    "ssl.truststore.type": ("ssl_truststore_type", _str, "PEM"),
    "ssl.client.auth": ("ssl_client_auth", _str, "none"),
    "ssl.enabled.protocols": ("ssl_enabled_protocols", _str, "TLSv1.2,TLSv1.3"),
    # How this broker's own connections to other brokers authenticate (Kafka's names and
    # defaults: GSSAPI is not offered, so a SASL inter-broker listener must name one).
    "sasl.mechanism.inter.broker.protocol": (
        "sasl_mechanism_inter_broker_protocol",
        _str,
        "GSSAPI",
    ),
    "ssl.endpoint.identification.algorithm": (
        "ssl_endpoint_identification_algorithm",
        _str,
        "https",
    ),
    "connections.max.reauth.ms": ("connections_max_reauth_ms", _int, "0"),
    # ACLs (Kafka's AclAuthorizer): empty = no authorizer, everything allowed
    "authorizer.class.name": ("authorizer_class_name", _str, ""),
    "super.users": ("super_users", _str, ""),
    "allow.everyone.if.no.acl.found": ("allow_everyone_if_no_acl_found", _bool, "false"),
    "log.dirs": ("log_dirs_raw", _str, "/tmp/replog-logs"),
    "zookeeper.connect": ("zookeeper_connect", _str, ""),
    "zookeeper.session.timeout.ms": ("zookeeper_session_timeout_ms", _int, "18000"),
    # Kafka's ZkData.defaultAcls on every znode created (needs a SASL login to ZooKeeper)
    "zookeeper.set.acl": ("zookeeper_set_acl", _bool, "false"),
    "zookeeper.connection.timeout.ms": ("zookeeper_connection_timeout_ms", _int, "18000"),
    "num.partitions": ("num_partitions", _int, "1"),
    "default.replication.factor": ("default_replication_factor", _int, "1"),
    "auto.create.topics.enable": ("auto_create_topics_enable", _bool, "true"),
    "delete.topic.enable": ("delete_topic_enable", _bool, "true"),
    "log.retention.check.interval.ms": ("log_retention_check_interval_ms", _int, "300000"),
    "log.flush.offset.checkpoint.interval.ms": (
        "log_flush_offset_checkpoint_interval_ms",
        _int,
        "60000",
    ),
    # Kafka's: threads per log dir that flush and close the logs at shutdown (Kafka also
    # loads them with it at startup; replog loads them one by one)
    "num.recovery.threads.per.data.dir": ("num_recovery_threads_per_data_dir", _int, "1"),
    # The log cleaner (Kafka CleanerConfig), with Kafka's defaults.
    "log.cleaner.enable": ("log_cleaner_enable", _bool, "true"),
    "log.cleaner.threads": ("log_cleaner_threads", _int, "1"),
    "log.cleaner.io.max.bytes.per.second": (
        "log_cleaner_io_max_bytes_per_second",
        _float,
        "1.7976931348623157E308",
    ),
    "log.cleaner.dedupe.buffer.size": ("log_cleaner_dedupe_buffer_size", _int, "134217728"),
    "log.cleaner.backoff.ms": ("log_cleaner_backoff_ms", _int, "15000"),
    "socket.request.max.bytes": ("socket_request_max_bytes", _int, "104857600"),
    "replica.lag.time.max.ms": ("replica_lag_time_max_ms", _int, "30000"),
    "replica.fetch.max.bytes": ("replica_fetch_max_bytes", _int, "1048576"),
    "replica.fetch.wait.max.ms": ("replica_fetch_wait_max_ms", _int, "500"),
    "replica.fetch.min.bytes": ("replica_fetch_min_bytes", _int, "1"),
    "replica.fetch.backoff.ms": ("replica_fetch_backoff_ms", _int, "1000"),
    "replica.high.watermark.checkpoint.interval.ms": (
        "replica_high_watermark_checkpoint_interval_ms",
        _int,
        "5000",
    ),
    "num.replica.fetchers": ("num_replica_fetchers", _int, "1"),
    # Incremental fetch sessions (KIP-227). Kafka has the first key; the second is
    # KIP-227's name for the eviction time Kafka fixes at its default (120 s).
    "max.incremental.fetch.session.cache.slots": (
        "max_incremental_fetch_session_cache_slots",
        _int,
        "1000",
    ),
    "min.incremental.fetch.session.eviction.ms": (
        "min_incremental_fetch_session_eviction_ms",
        _int,
        "120000",
    ),
    # Replication throttling (KIP-73): dynamic per broker; Long.MAX_VALUE is unthrottled.
    "leader.replication.throttled.rate": (
        "leader_replication_throttled_rate",
        _int,
        "9223372036854775807",
    ),
    "follower.replication.throttled.rate": (
        "follower_replication_throttled_rate",
        _int,
        "9223372036854775807",
    ),
    "replication.quota.window.num": ("replication_quota_window_num", _int, "11"),
    "replication.quota.window.size.seconds": ("replication_quota_window_size_seconds", _int, "1"),
    "request.timeout.ms": ("request_timeout_ms", _int, "30000"),
    "controller.socket.timeout.ms": ("controller_socket_timeout_ms", _int, "30000"),
    "controlled.shutdown.enable": ("controlled_shutdown_enable", _bool, "true"),
    # replog's own: the Prometheus endpoint (-1: off; 0: any free port)
    "metrics.port": ("metrics_port", _int, "-1"),
    "controlled.shutdown.max.retries": ("controlled_shutdown_max_retries", _int, "3"),
    "controlled.shutdown.retry.backoff.ms": ("controlled_shutdown_retry_backoff_ms", _int, "5000"),
    "auto.leader.rebalance.enable": ("auto_leader_rebalance_enable", _bool, "true"),
    "leader.imbalance.check.interval.seconds": (
        "leader_imbalance_check_interval_seconds",
        _int,
        "300",
    ),
    "leader.imbalance.per.broker.percentage": (
        "leader_imbalance_per_broker_percentage",
        _int,
        "10",
    ),
    "offsets.topic.replication.factor": ("offsets_topic_replication_factor", _int, "3"),
    "offsets.topic.num.partitions": ("offsets_topic_num_partitions", _int, "50"),
    "group.initial.rebalance.delay.ms": ("group_initial_rebalance_delay_ms", _int, "3000"),
    # The group coordinator (Kafka GroupCoordinatorConfig), with Kafka's defaults.
    "offsets.topic.segment.bytes": ("offsets_topic_segment_bytes", _int, "104857600"),
    "offsets.commit.timeout.ms": ("offsets_commit_timeout_ms", _int, "5000"),
    "offsets.retention.minutes": ("offsets_retention_minutes", _int, "10080"),
    "offsets.retention.check.interval.ms": (
        "offsets_retention_check_interval_ms",
        _int,
        "600000",
    ),
    "offset.metadata.max.bytes": ("offset_metadata_max_bytes", _int, "4096"),
    "group.min.session.timeout.ms": ("group_min_session_timeout_ms", _int, "6000"),
    "group.max.session.timeout.ms": ("group_max_session_timeout_ms", _int, "1800000"),
    "group.max.size": ("group_max_size", _int, "2147483647"),
    "group.coordinator.rebalance.protocols": (
        "group_coordinator_rebalance_protocols",
        _str,
        "classic,consumer",
    ),
    "group.consumer.session.timeout.ms": ("group_consumer_session_timeout_ms", _int, "45000"),
    "group.consumer.min.session.timeout.ms": (
        "group_consumer_min_session_timeout_ms",
        _int,
        "45000",
    ),
    "group.consumer.max.session.timeout.ms": (
        "group_consumer_max_session_timeout_ms",
        _int,
        "60000",
    ),
    "group.consumer.heartbeat.interval.ms": (
        "group_consumer_heartbeat_interval_ms",
        _int,
        "5000",
    ),
    "group.consumer.min.heartbeat.interval.ms": (
        "group_consumer_min_heartbeat_interval_ms",
        _int,
        "5000",
    ),
    "group.consumer.max.heartbeat.interval.ms": (
        "group_consumer_max_heartbeat_interval_ms",
        _int,
        "15000",
    ),
    "group.consumer.max.size": ("group_consumer_max_size", _int, "2147483647"),
    "group.consumer.assignors": ("group_consumer_assignors", _str, "uniform,range"),
    # KIP-848 online conversion of a group between the classic and consumer protocols:
    # bidirectional (Kafka 4.0's default), upgrade, downgrade or disabled.
    "group.consumer.migration.policy": (
        "group_consumer_migration_policy",
        _str,
        "bidirectional",
    ),
    # The transaction coordinator (Kafka TransactionStateManagerConfig, TransactionLogConfig),
    # with Kafka's defaults; replog.coordinator.transaction.TransactionConfig reads them.
    "transactional.id.expiration.ms": ("transactional_id_expiration_ms", _int, "604800000"),
    "transaction.max.timeout.ms": ("transaction_max_timeout_ms", _int, "900000"),
    "transaction.state.log.num.partitions": ("transaction_state_log_num_partitions", _int, "50"),
    "transaction.state.log.replication.factor": (
        "transaction_state_log_replication_factor",
        _int,
        "3",
    ),
    "transaction.state.log.segment.bytes": (
        "transaction_state_log_segment_bytes",
        _int,
        "104857600",
    ),
    "transaction.state.log.load.buffer.size": (
        "transaction_state_log_load_buffer_size",
        _int,
        "5242880",
    ),
    "transaction.state.log.min.isr": ("transaction_state_log_min_isr", _int, "2"),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
        "transaction_abort_timed_out_transaction_cleanup_interval_ms",
        _int,
        "10000",
    ),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (
        "transaction_remove_expired_transaction_cleanup_interval_ms",
        _int,
        "3600000",
    ),
    # KIP-890 part 1: partition leaders verify a transaction's first batch with its
    # coordinator (AddPartitionsToTxn verify_only) before appending it.
    "transaction.partition.verification.enable": (
        "transaction_partition_verification_enable",
        _bool,
        "true",
    ),
    **{
        name: (name.replace(".", "_"), key.parse, key.default)
        for name, key in BROKER_LOG_KEYS.items()
    },
}

KNOWN_KEYS = frozenset(BROKER_KEYS)
# Each key's default as server.properties would spell it (DescribeConfigs' DEFAULT_CONFIG);
# keys whose default is null (log.retention.ms ...) are left out.
DEFAULT_VALUES: dict[str, str] = {
    key: default for key, (_, _, default) in BROKER_KEYS.items() if default is not None
}
# Each key's Kafka ConfigDef type name (DescribeConfigs v3+ reports it).
_LONG_KEYS = frozenset(
    {
        "log.retention.check.interval.ms",
        "log.flush.offset.checkpoint.interval.ms",
        "replica.lag.time.max.ms",
        "replica.high.watermark.checkpoint.interval.ms",
        "replica.fetch.backoff.ms",
        "min.incremental.fetch.session.eviction.ms",
        "controlled.shutdown.retry.backoff.ms",
        "leader.imbalance.check.interval.seconds",
        "leader.replication.throttled.rate",
        "follower.replication.throttled.rate",
        "offsets.retention.check.interval.ms",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.backoff.ms",
    }
)
KEY_TYPES: dict[str, str] = {
    key: BROKER_LOG_KEYS[key].type
    if key in BROKER_LOG_KEYS
    else "LIST"
    if key in ("group.coordinator.rebalance.protocols", "group.consumer.assignors")
    else "LONG"
    if key in _LONG_KEYS
    else {_int: "INT", _bool: "BOOLEAN", _str: "STRING", _float: "DOUBLE"}[parse]
    for key, (_, parse, _) in BROKER_KEYS.items()
}
