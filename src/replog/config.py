"""Broker configuration: Kafka's ``server.properties`` names and defaults.

Only keys replog understands are accepted; an unknown key or a bad value raises
``ConfigError`` with a one-line message naming the key, so ``replog broker start``
can exit non-zero with that line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replog.security.sasl import MECHANISMS as SASL_MECHANISMS


class ConfigError(ValueError):
    """A configuration problem, described in one line."""


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError("expected true or false")


def _int(value: str) -> int:
    return int(value.strip())


def _str(value: str) -> str:
    return value.strip()


def _float(value: str) -> float:
    return float(value.strip())


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


_LISTENER = re.compile(r"^(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[^\]]*\]|[^:/]*):(?P<port>\d+)$")
LISTENER_PREFIX = "listener.name."
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def parse_listeners(value: str) -> list[Listener]:
    listeners = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        # (not urlsplit: listener names such as SASL_SSL are not URL schemes)
        match = _LISTENER.match(item)
        if match is None or int(match["port"]) > 65535:
            raise ValueError(f"listener {item!r} is not of the form NAME://host:port")
        listeners.append(
            Listener(match["name"].upper(), match["host"].strip("[]"), int(match["port"]))
        )
    if not listeners:
        raise ValueError("no listener given")
    return listeners


# key -> (attribute, parser, default as it would appear in server.properties)
_KEYS: dict[str, tuple[str, Callable[[str], Any], str]] = {
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
    "log.segment.bytes": ("log_segment_bytes", _int, "1073741824"),
    "log.roll.ms": ("log_roll_ms", _int, "604800000"),
    "log.retention.ms": ("log_retention_ms", _int, "604800000"),
    "log.retention.bytes": ("log_retention_bytes", _int, "-1"),
    "log.retention.check.interval.ms": ("log_retention_check_interval_ms", _int, "300000"),
    "log.flush.offset.checkpoint.interval.ms": (
        "log_flush_offset_checkpoint_interval_ms",
        _int,
        "60000",
    ),
    "log.index.interval.bytes": ("log_index_interval_bytes", _int, "4096"),
    # Kafka's: threads per log dir that flush and close the logs at shutdown (Kafka also
    # loads them with it at startup; replog loads them one by one)
    "num.recovery.threads.per.data.dir": ("num_recovery_threads_per_data_dir", _int, "1"),
    "log.cleanup.policy": ("log_cleanup_policy", _str, "delete"),
    # The log cleaner (Kafka CleanerConfig), with Kafka's defaults; the last four are the
    # broker defaults of the topic keys min.cleanable.dirty.ratio ... delete.retention.ms.
    "log.cleaner.enable": ("log_cleaner_enable", _bool, "true"),
    "log.cleaner.threads": ("log_cleaner_threads", _int, "1"),
    "log.cleaner.io.max.bytes.per.second": (
        "log_cleaner_io_max_bytes_per_second",
        _float,
        "1.7976931348623157E308",
    ),
    "log.cleaner.dedupe.buffer.size": ("log_cleaner_dedupe_buffer_size", _int, "134217728"),
    "log.cleaner.backoff.ms": ("log_cleaner_backoff_ms", _int, "15000"),
    "log.cleaner.min.cleanable.ratio": ("log_cleaner_min_cleanable_ratio", _float, "0.5"),
    "log.cleaner.min.compaction.lag.ms": ("log_cleaner_min_compaction_lag_ms", _int, "0"),
    "log.cleaner.max.compaction.lag.ms": (
        "log_cleaner_max_compaction_lag_ms",
        _int,
        "9223372036854775807",
    ),
    "log.cleaner.delete.retention.ms": ("log_cleaner_delete_retention_ms", _int, "86400000"),
    "log.message.timestamp.type": ("log_message_timestamp_type", _str, "CreateTime"),
    "message.max.bytes": ("message_max_bytes", _int, "1048588"),
    "socket.request.max.bytes": ("socket_request_max_bytes", _int, "104857600"),
    "min.insync.replicas": ("min_insync_replicas", _int, "1"),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", _bool, "false"),
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
}

KNOWN_KEYS = frozenset(_KEYS)
# Each key's default as server.properties would spell it (DescribeConfigs' DEFAULT_CONFIG).
DEFAULT_VALUES: dict[str, str] = {key: default for key, (_, _, default) in _KEYS.items()}
# Each key's Kafka ConfigDef type name (DescribeConfigs v3+ reports it).
_LONG_KEYS = frozenset(
    {
        "log.roll.ms",
        "log.retention.ms",
        "log.retention.bytes",
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
        "log.cleaner.min.compaction.lag.ms",
        "log.cleaner.max.compaction.lag.ms",
        "log.cleaner.delete.retention.ms",
    }
)
KEY_TYPES: dict[str, str] = {
    key: "LIST"
    if key in ("log.cleanup.policy", "group.coordinator.rebalance.protocols")
    or key == "group.consumer.assignors"
    else "LONG"
    if key in _LONG_KEYS
    else {_int: "INT", _bool: "BOOLEAN", _str: "STRING", _float: "DOUBLE"}[parse]
    for key, (_, parse, _) in _KEYS.items()
}


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
    log_roll_ms: int
    log_retention_ms: int
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
    listeners: list[Listener] = field(default_factory=list)
    advertised_listeners: list[Listener] = field(default_factory=list)
    log_dirs: list[Path] = field(default_factory=list)
    static_properties: dict[str, str] = field(default_factory=dict, compare=False)
    """The keys given in server.properties (and overrides), as given."""

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> KafkaConfig:
        values: dict[str, Any] = {}
        for key in props:
            if key not in _KEYS and not key.startswith(LISTENER_PREFIX):
                raise ConfigError(f"unknown configuration key {key!r}")
        for key, (attr, parse, default) in _KEYS.items():
            raw = props.get(key, default)
            try:
                values[attr] = parse(raw)
            except ValueError as exc:
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
        if key in _KEYS:
            return str(self.static_properties.get(key, _KEYS[key][2]))
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
        need(self.log_segment_bytes >= 14, "log.segment.bytes", "must be >= 14")
        need(self.log_roll_ms >= 1, "log.roll.ms", "must be >= 1")
        need(
            self.num_recovery_threads_per_data_dir >= 1,
            "num.recovery.threads.per.data.dir",
            "must be >= 1",
        )
        need(self.message_max_bytes >= 0, "message.max.bytes", "must be >= 0")
        need(self.socket_request_max_bytes >= 1, "socket.request.max.bytes", "must be >= 1")
        need(self.min_insync_replicas >= 1, "min.insync.replicas", "must be >= 1")
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
        need(
            self.log_message_timestamp_type in ("CreateTime", "LogAppendTime"),
            "log.message.timestamp.type",
            "must be CreateTime or LogAppendTime",
        )
        policies = [p.strip() for p in self.log_cleanup_policy.split(",") if p.strip()]
        need(
            bool(policies) and all(p in ("delete", "compact") for p in policies),
            "log.cleanup.policy",
            "must be delete, compact or both",
        )
        need(self.log_cleaner_threads >= 0, "log.cleaner.threads", "must be >= 0")
        need(self.log_cleaner_backoff_ms >= 0, "log.cleaner.backoff.ms", "must be >= 0")
        need(
            self.log_cleaner_io_max_bytes_per_second > 0,
            "log.cleaner.io.max.bytes.per.second",
            "must be > 0",
        )
        need(
            0 <= self.log_cleaner_min_cleanable_ratio <= 1,
            "log.cleaner.min.cleanable.ratio",
            "must be between 0 and 1",
        )
        need(
            0 <= self.log_cleaner_min_compaction_lag_ms <= self.log_cleaner_max_compaction_lag_ms,
            "log.cleaner.min.compaction.lag.ms",
            "must be >= 0 and <= log.cleaner.max.compaction.lag.ms",
        )
        need(
            self.log_cleaner_delete_retention_ms >= 0,
            "log.cleaner.delete.retention.ms",
            "must be >= 0",
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
        names = [listener.name for listener in self.listeners]
        need(len(set(names)) == len(names), "listeners", "listener names must be unique")

    def topic_defaults(self) -> dict[str, str]:
        """Broker-level defaults for the topic-level keys, as topic configs."""
        return {
            "segment.bytes": str(self.log_segment_bytes),
            "segment.ms": str(self.log_roll_ms),
            "retention.ms": str(self.log_retention_ms),
            "retention.bytes": str(self.log_retention_bytes),
            "max.message.bytes": str(self.message_max_bytes),
            "index.interval.bytes": str(self.log_index_interval_bytes),
            "message.timestamp.type": self.log_message_timestamp_type,
            "min.insync.replicas": str(self.min_insync_replicas),
            "unclean.leader.election.enable": str(self.unclean_leader_election_enable).lower(),
            "cleanup.policy": self.log_cleanup_policy,
            "min.cleanable.dirty.ratio": str(self.log_cleaner_min_cleanable_ratio),
            "min.compaction.lag.ms": str(self.log_cleaner_min_compaction_lag_ms),
            "max.compaction.lag.ms": str(self.log_cleaner_max_compaction_lag_ms),
            "delete.retention.ms": str(self.log_cleaner_delete_retention_ms),
        }

    def as_properties(self) -> dict[str, str]:
        """Every known key with its effective value (for DescribeConfigs on a broker)."""
        out = {}
        for key, (attr, _, _) in _KEYS.items():
            value = getattr(self, attr)
            out[key] = str(value).lower() if isinstance(value, bool) else str(value)
        return out


def read_properties(path: Path) -> dict[str, str]:
    """Parse a Java-style ``.properties`` file (``key=value``, ``#`` comments)."""
    props: dict[str, str] = {}
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            raise ConfigError(f"{path}:{number}: expected key=value, got {line!r}")
        props[line[:sep].strip()] = line[sep + 1 :].strip()
    return props


def parse_overrides(overrides: list[str]) -> dict[str, str]:
    out = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form key=value")
        key, value = item.split("=", 1)
        out[key.strip()] = value.strip()
    return out
