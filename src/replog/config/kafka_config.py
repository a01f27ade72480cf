"""``KafkaConfig``: a broker's settings, parsed and checked.

Only keys replog understands are accepted (``replog.config.keys``); an unknown key or a
bad value raises ``ConfigError`` with a one-line message naming the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replog.config.keys import BROKER_KEYS
from replog.config.listeners import LISTENER_PREFIX, SECURITY_PROTOCOLS, Listener, parse_listeners
from replog.config.properties import ConfigError
from replog.security.sasl import MECHANISMS as SASL_MECHANISMS
from replog.storage.log_config import BROKER_LOG_KEYS, topic_defaults_from_broker


@dataclass(frozen=True)
class KafkaConfig:
    broker_id: int
    broker_rack: str
    listeners_raw: str
    advertised_listeners_raw: str
    listener_security_protocol_map_raw: str
    inter_broker_listener_name: str
    sasl_enabled_mechanisms: str
    ssl_keystore_location: str
    ssl_keystore_type: str
    ssl_key_password: str
    ssl_truststore_location: str
    ssl_truststore_type: str
    ssl_client_auth: str
    ssl_enabled_protocols: str
    sasl_mechanism_inter_broker_protocol: str
    ssl_endpoint_identification_algorithm: str
    connections_max_reauth_ms: int
    authorizer_class_name: str
    super_users: str
    allow_everyone_if_no_acl_found: bool
    log_dirs_raw: str
    zookeeper_connect: str
    zookeeper_session_timeout_ms: int
    zookeeper_set_acl: bool
    zookeeper_connection_timeout_ms: int
    num_partitions: int
    default_replication_factor: int
    auto_create_topics_enable: bool
    delete_topic_enable: bool
    log_segment_bytes: int
    log_roll_ms: int | None  # Kafka's null default: log.roll.hours applies
    log_roll_hours: int
    log_roll_jitter_ms: int | None
    log_roll_jitter_hours: int
    log_retention_ms: int | None  # Kafka's null default: .minutes, then .hours apply
    log_retention_minutes: int | None
    log_retention_hours: int
    log_retention_bytes: int
    log_retention_check_interval_ms: int
    log_flush_offset_checkpoint_interval_ms: int
    log_index_interval_bytes: int
    num_recovery_threads_per_data_dir: int
    log_message_timestamp_type: str
    log_cleanup_policy: str
    log_cleaner_enable: bool
    log_cleaner_threads: int
    log_cleaner_io_max_bytes_per_second: float
    log_cleaner_dedupe_buffer_size: int
    log_cleaner_backoff_ms: int
    log_cleaner_min_cleanable_ratio: float
    log_cleaner_min_compaction_lag_ms: int
    log_cleaner_max_compaction_lag_ms: int
    log_cleaner_delete_retention_ms: int
    message_max_bytes: int
    socket_request_max_bytes: int
    min_insync_replicas: int
    unclean_leader_election_enable: bool
    replica_lag_time_max_ms: int
    replica_fetch_max_bytes: int
    replica_fetch_wait_max_ms: int
    replica_fetch_min_bytes: int
    replica_fetch_backoff_ms: int
    replica_high_watermark_checkpoint_interval_ms: int
    num_replica_fetchers: int
    max_incremental_fetch_session_cache_slots: int
    min_incremental_fetch_session_eviction_ms: int
    leader_replication_throttled_rate: int
    follower_replication_throttled_rate: int
    replication_quota_window_num: int
    replication_quota_window_size_seconds: int
    request_timeout_ms: int
    controller_socket_timeout_ms: int
    controlled_shutdown_enable: bool
    metrics_port: int
    controlled_shutdown_max_retries: int
    controlled_shutdown_retry_backoff_ms: int
    auto_leader_rebalance_enable: bool
    leader_imbalance_check_interval_seconds: int
    leader_imbalance_per_broker_percentage: int
    offsets_topic_replication_factor: int
    offsets_topic_num_partitions: int
    group_initial_rebalance_delay_ms: int
    offsets_topic_segment_bytes: int
    offsets_commit_timeout_ms: int
    offsets_retention_minutes: int
    offsets_retention_check_interval_ms: int
    offset_metadata_max_bytes: int
    group_min_session_timeout_ms: int
    group_max_session_timeout_ms: int
    group_max_size: int
    group_coordinator_rebalance_protocols: str
    group_consumer_session_timeout_ms: int
    group_consumer_min_session_timeout_ms: int
    group_consumer_max_session_timeout_ms: int
    group_consumer_heartbeat_interval_ms: int
    group_consumer_min_heartbeat_interval_ms: int
    group_consumer_max_heartbeat_interval_ms: int
    group_consumer_max_size: int
    group_consumer_assignors: str
    group_consumer_migration_policy: str = "bidirectional"
    # The transaction coordinator's keys (replog.config.keys; Kafka's defaults).
    transactional_id_expiration_ms: int = 604800000
    transaction_max_timeout_ms: int = 900000
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_segment_bytes: int = 104857600
    transaction_state_log_load_buffer_size: int = 5242880
    transaction_state_log_min_isr: int = 2
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3600000
    transaction_partition_verification_enable: bool = True
    listeners: list[Listener] = field(default_factory=list)
    advertised_listeners: list[Listener] = field(default_factory=list)
    log_dirs: list[Path] = field(default_factory=list)
    static_properties: dict[str, str] = field(default_factory=dict, compare=False)
    """The keys given in server.properties (and overrides), as given."""

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> KafkaConfig:
        values: dict[str, Any] = {}
        for key in props:
            if key not in BROKER_KEYS and not key.startswith(LISTENER_PREFIX):
                raise ConfigError(f"unknown configuration key {key!r}")
        for key, (attr, parse, default) in BROKER_KEYS.items():
            raw = props.get(key, default)
            try:
                values[attr] = None if raw is None else parse(raw)
            except ValueError as exc:
                if key in BROKER_LOG_KEYS:  # its message names the key (Kafka's wording)
                    raise ConfigError(str(exc)) from None
                raise ConfigError(f"invalid value {raw!r} for {key}: {exc}") from None
        try:
            listeners = parse_listeners(values["listeners_raw"])
        except ValueError as exc:
            raise ConfigError(f"invalid value for listeners: {exc}") from None
        advertised = listeners
        if values["advertised_listeners_raw"]:
            try:
                advertised = parse_listeners(values["advertised_listeners_raw"])
            except ValueError as exc:
                raise ConfigError(f"invalid value for advertised.listeners: {exc}") from None
        log_dirs = [Path(p.strip()) for p in values["log_dirs_raw"].split(",") if p.strip()]
        config = cls(
            **values,
            listeners=listeners,
            advertised_listeners=advertised,
            log_dirs=log_dirs,
            static_properties=dict(props),
        )
        config._validate()
        return config

    @property
    def security_protocol_map(self) -> dict[str, str]:
        """Listener name -> security protocol (``listener.security.protocol.map``)."""
        out = {}
        for item in self.listener_security_protocol_map_raw.split(","):
            name, sep, protocol = item.strip().partition(":")
            if sep:
                out[name.strip().upper()] = protocol.strip().upper()
        return out

    def security_protocol(self, listener_name: str) -> str:
        return self.security_protocol_map.get(listener_name.upper(), "")

    def listener_setting(self, listener_name: str, key: str) -> str:
        """``listener.name.<listener>.<key>`` if set, else the broker-wide ``key`` (Kafka's
        per-listener overrides), else ""."""
        prefixed = f"{LISTENER_PREFIX}{listener_name.lower()}.{key}"
        if prefixed in self.static_properties:
            return self.static_properties[prefixed]
        if key in BROKER_KEYS:
            return str(self.static_properties.get(key, BROKER_KEYS[key][2] or ""))
        return ""

    def _validate(self) -> None:
        def need(cond: bool, key: str, what: str) -> None:
            if not cond:
                raise ConfigError(f"invalid value for {key}: {what}")

        need(
            self.group_consumer_migration_policy.strip().lower()
            in ("bidirectional", "upgrade", "downgrade", "disabled"),
            "group.consumer.migration.policy",
            "one of bidirectional, upgrade, downgrade, disabled (Kafka's values)",
        )
        protocols = self.security_protocol_map
        for listener in self.listeners:
            need(
                protocols.get(listener.name) in SECURITY_PROTOCOLS,
                "listener.security.protocol.map",
                f"listener {listener.name} maps to no security protocol of "
                f"{', '.join(SECURITY_PROTOCOLS)}",
            )
        names = {listener.name for listener in self.listeners}
        need(
            self.inter_broker_listener_name.upper() in names,
            "inter.broker.listener.name",
            f"{self.inter_broker_listener_name} is not one of the listeners {sorted(names)}",
        )
        if protocols.get(self.inter_broker_listener_name.upper(), "").startswith("SASL_"):
            need(
                self.sasl_mechanism_inter_broker_protocol.upper() in SASL_MECHANISMS,
                "sasl.mechanism.inter.broker.protocol",
                f"{self.sasl_mechanism_inter_broker_protocol} is not offered; a SASL "
                f"inter-broker listener needs one of {', '.join(SASL_MECHANISMS)}",
            )
        for key in self.static_properties:
            if key.startswith(LISTENER_PREFIX):
                listener = key[len(LISTENER_PREFIX) :].split(".", 1)[0].upper()
                need(listener in names, key, f"{listener} is not one of the listeners")
        need(
            self.ssl_client_auth in ("none", "requested", "required"),
            "ssl.client.auth",
            "must be none, requested or required",
        )
        for key, value in (
            ("ssl.keystore.type", self.ssl_keystore_type),
            ("ssl.truststore.type", self.ssl_truststore_type),
        ):
            need(value.upper() == "PEM", key, "replog reads PEM files only")

        need(self.broker_id >= 0, "broker.id", "must be >= 0")
        need(bool(self.log_dirs), "log.dirs", "must name at least one directory")
        need(bool(self.zookeeper_connect), "zookeeper.connect", "is required")
        need(self.num_partitions >= 1, "num.partitions", "must be >= 1")
        need(self.default_replication_factor >= 1, "default.replication.factor", "must be >= 1")
        need(
            self.num_recovery_threads_per_data_dir >= 1,
            "num.recovery.threads.per.data.dir",
            "must be >= 1",
        )
        need(self.socket_request_max_bytes >= 1, "socket.request.max.bytes", "must be >= 1")
        need(self.replica_lag_time_max_ms >= 1, "replica.lag.time.max.ms", "must be >= 1")
        need(self.num_replica_fetchers >= 1, "num.replica.fetchers", "must be >= 1")
        need(
            self.max_incremental_fetch_session_cache_slots >= 0,
            "max.incremental.fetch.session.cache.slots",
            "must be >= 0",
        )
        need(
            self.min_incremental_fetch_session_eviction_ms >= 0,
            "min.incremental.fetch.session.eviction.ms",
            "must be >= 0",
        )
        need(-1 <= self.metrics_port <= 65535, "metrics.port", "must be -1 (off) or a port")
        for key, rate in (
            ("leader.replication.throttled.rate", self.leader_replication_throttled_rate),
            ("follower.replication.throttled.rate", self.follower_replication_throttled_rate),
        ):
            need(rate >= 0, key, "must be >= 0")
        need(self.replication_quota_window_num >= 2, "replication.quota.window.num", "must be >= 2")
        need(
            self.replication_quota_window_size_seconds >= 1,
            "replication.quota.window.size.seconds",
            "must be >= 1",
        )
        need(self.log_cleaner_threads >= 0, "log.cleaner.threads", "must be >= 0")
        need(self.log_cleaner_backoff_ms >= 0, "log.cleaner.backoff.ms", "must be >= 0")
        need(
            self.log_cleaner_io_max_bytes_per_second > 0,
            "log.cleaner.io.max.bytes.per.second",
            "must be > 0",
        )
        # Each log key was checked as its topic key is (BROKER_LOG_KEYS); the pairs here.
        need(
            self.log_cleaner_min_compaction_lag_ms <= self.log_cleaner_max_compaction_lag_ms,
            "log.cleaner.min.compaction.lag.ms",
            "must be <= log.cleaner.max.compaction.lag.ms",
        )
        # The group coordinator (Kafka GroupCoordinatorConfig's checks).
        need(self.offsets_topic_num_partitions >= 1, "offsets.topic.num.partitions", "must be >= 1")
        need(
            self.offsets_topic_replication_factor >= 1,
            "offsets.topic.replication.factor",
            "must be >= 1",
        )
        need(
            self.group_min_session_timeout_ms <= self.group_max_session_timeout_ms,
            "group.min.session.timeout.ms",
            "must be <= group.max.session.timeout.ms",
        )
        for name, value, low, high in (
            (
                "group.consumer.session.timeout.ms",
                self.group_consumer_session_timeout_ms,
                self.group_consumer_min_session_timeout_ms,
                self.group_consumer_max_session_timeout_ms,
            ),
            (
                "group.consumer.heartbeat.interval.ms",
                self.group_consumer_heartbeat_interval_ms,
                self.group_consumer_min_heartbeat_interval_ms,
                self.group_consumer_max_heartbeat_interval_ms,
            ),
        ):
            need(low <= value <= high, name, f"must be between {low} and {high}")
        need(
            self.group_consumer_heartbeat_interval_ms < self.group_consumer_session_timeout_ms,
            "group.consumer.heartbeat.interval.ms",
            "must be less than group.consumer.session.timeout.ms",
        )
        protocols = {p.strip() for p in self.group_coordinator_rebalance_protocols.split(",")}
        need(
            "classic" in protocols and protocols <= {"classic", "consumer"},
            "group.coordinator.rebalance.protocols",
            "must include classic; the others known are consumer",
        )
        # The transaction coordinator (Kafka TransactionStateManagerConfig's checks).
        for name in (
            "transaction.state.log.num.partitions",
            "transaction.state.log.replication.factor",
            "transaction.state.log.min.isr",
            "transaction.max.timeout.ms",
        ):
            need(getattr(self, BROKER_KEYS[name][0]) >= 1, name, "must be >= 1")
        names = [listener.name for listener in self.listeners]
        need(len(set(names)) == len(names), "listeners", "listener names must be unique")

    def topic_defaults(self) -> dict[str, str]:
        """Broker-level defaults for the topic-level keys, as topic configs (of each
        time key's units the most precise one set: log.retention.ms, .minutes, .hours)."""
        return topic_defaults_from_broker(
            {name: getattr(self, BROKER_KEYS[name][0]) for name in BROKER_LOG_KEYS}
        )

    def as_properties(self) -> dict[str, str | None]:
        """Every known key with its effective value (for DescribeConfigs on a broker);
        None for a key left at Kafka's null default (log.retention.ms ...)."""
        out: dict[str, str | None] = {}
        for key, (attr, _, _) in BROKER_KEYS.items():
            value = getattr(self, attr)
            if value is None:
                out[key] = None
            else:
                out[key] = str(value).lower() if isinstance(value, bool) else str(value)
        return out
