"""Topic-level log configuration, with Kafka's keys, types, defaults and validators.

``LogConfig`` is an immutable value: a topic config change builds a new one and
hands it to ``Log.update_config``. Keys are spelled as Kafka spells them
(``segment.bytes``, ``retention.ms`` ...); broker-level defaults
(``log.segment.bytes``, ``log.roll.ms`` ...) are mapped by
``LogConfig.from_broker_properties``. ``TOPIC_CONFIGS`` describes every key
(its type, documentation and broker synonyms) for DescribeConfigs and for the
incremental alter rules (APPEND/SUBTRACT apply to LIST keys only).

Errors are ``ValueError`` with Kafka's one-line wording: ``Unknown topic config
name: x``, ``Invalid value abc for configuration retention.ms: Not a number of
type LONG``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
_TIMESTAMP_TYPES = (CREATE_TIME, LOG_APPEND_TIME)
_CLEANUP_POLICIES = ("compact", "delete")

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


def _invalid(key: str, raw: object, why: str) -> ValueError:
    return ValueError(f"Invalid value {raw} for configuration {key}: {why}")


def _number(type_name: str, upper: int, minimum: int | None) -> Callable[[str, str], int]:
    def parse(key: str, raw: str) -> int:
        try:
            value = int(str(raw).strip())
        except ValueError:
            raise _invalid(key, raw, f"Not a number of type {type_name}") from None
        if not -upper - 1 <= value <= upper:
            raise _invalid(key, raw, f"Not a number of type {type_name}")
        if minimum is not None and value < minimum:
            raise _invalid(key, raw, f"Value must be at least {minimum}")
        return value

    return parse


def _ratio(key: str, raw: str) -> float:
    """A DOUBLE between 0 and 1 (Kafka ``between(0, 1)``)."""
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise _invalid(key, raw, "Not a number of type DOUBLE") from None
    if not value >= 0:  # also NaN
        raise _invalid(key, raw, "Value must be at least 0")
    if value > 1:
        raise _invalid(key, raw, "Value must be no more than 1")
    return value


def _parse_bool(key: str, raw: str) -> bool:
    text = str(raw).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise _invalid(key, raw, "Expected value to be either true or false")


def _parse_timestamp_type(key: str, raw: str) -> str:
    text = str(raw).strip()
    if text not in _TIMESTAMP_TYPES:
        raise _invalid(key, raw, f"String must be one of: {', '.join(_TIMESTAMP_TYPES)}")
    return text


def _parse_cleanup_policy(key: str, raw: str) -> str:
    parts = [p.strip().lower() for p in str(raw).split(",") if p.strip()]
    if not parts or any(p not in _CLEANUP_POLICIES for p in parts):
        raise _invalid(key, raw, f"String must be one of: {', '.join(_CLEANUP_POLICIES)}")
    return ",".join(sorted(set(parts), key=_CLEANUP_POLICIES.index))


def _parse_throttled_replicas(key: str, raw: str) -> str:
    """Kafka ``ThrottledReplicaListValidator``: ``*`` or ``partition:broker,...`` (or empty)."""
    entries = [e.strip() for e in str(raw).split(",") if e.strip()]
    if entries == ["*"]:
        return "*"
    for entry in entries:
        partition, sep, broker = entry.partition(":")
        if not (sep and partition.strip().isdigit() and broker.strip().isdigit()):
            raise _invalid(
                key,
                raw,
                "must be the literal '*' or a list of replicas in the following format: "
                "[partitionId]:[brokerId],[partitionId]:[brokerId],...",
            )
    return ",".join(f"{e.partition(':')[0].strip()}:{e.partition(':')[2].strip()}" for e in entries)


@dataclass(frozen=True)
class TopicConfigKey:
    """One topic config key: Kafka's name, ``LogConfig`` field, type and broker synonyms.

    ``broker_synonyms`` are the broker keys that give this key's default, the primary
    one first (Kafka ``ServerTopicConfigSynonyms``; the time keys have unit variants).
    """

    name: str
    field: str
    parse: Callable[[str, str], Any]
    type: str  # Kafka ConfigDef.Type: INT, LONG, DOUBLE, BOOLEAN, STRING, LIST
    broker_synonyms: tuple[str, ...]
    documentation: str


def _key(name, field_name, parse, type_name, synonyms, doc) -> TopicConfigKey:
    return TopicConfigKey(name, field_name, parse, type_name, tuple(synonyms), doc)


# Minimums follow Kafka's TopicConfig validators.
TOPIC_CONFIGS: dict[str, TopicConfigKey] = {
    k.name: k
    for k in (
        _key(
            "segment.bytes", "segment_bytes", _number("INT", INT_MAX, 14), "INT",
            ["log.segment.bytes"],
            "The segment file size for the log: retention and cleaning work a whole "
            "segment at a time.",
        ),
        _key(
            "segment.ms", "segment_ms", _number("LONG", LONG_MAX, 1), "LONG",
            ["log.roll.ms", "log.roll.hours"],
            "The time after which the log rolls a new segment even if the current one is "
            "not full, so that retention can delete or compact old data.",
        ),
        _key(
            "retention.ms", "retention_ms", _number("LONG", LONG_MAX, -1), "LONG",
            ["log.retention.ms", "log.retention.minutes", "log.retention.hours"],
            "The longest time a log keeps a segment before discarding it, with the delete "
            "cleanup policy; -1 means no time limit.",
        ),
        _key(
            "retention.bytes", "retention_bytes", _number("LONG", LONG_MAX, None), "LONG",
            ["log.retention.bytes"],
            "The largest size a partition's log may grow to before old segments are "
            "discarded, with the delete cleanup policy; -1 means no size limit.",
        ),
        _key(
            "max.message.bytes", "max_message_bytes", _number("INT", INT_MAX, 0), "INT",
            ["message.max.bytes"],
            "The largest record batch size the log accepts.",
        ),
        _key(
            "index.interval.bytes", "index_interval_bytes", _number("INT", INT_MAX, 0), "INT",
            ["log.index.interval.bytes"],
            "How often an entry is added to the offset index (in bytes of the log).",
        ),
        _key(
            "message.timestamp.type", "message_timestamp_type", _parse_timestamp_type,
            "STRING", ["log.message.timestamp.type"],
            "Whether a record's timestamp is the producer's create time or the time the "
            "log appended it: CreateTime or LogAppendTime.",
        ),
        _key(
            "min.insync.replicas", "min_insync_replicas", _number("INT", INT_MAX, 1), "INT",
            ["min.insync.replicas"],
            "The fewest replicas that must acknowledge a write with acks=all; fewer in "
            "sync and the producer gets NOT_ENOUGH_REPLICAS.",
        ),
        _key(
            "unclean.leader.election.enable", "unclean_leader_election_enable", _parse_bool,
            "BOOLEAN", ["unclean.leader.election.enable"],
            "Whether a replica not in the ISR may be elected leader as a last resort, even "
            "though that may lose data.",
        ),
        _key(
            "cleanup.policy", "cleanup_policy", _parse_cleanup_policy, "LIST",
            ["log.cleanup.policy"],
            "delete (discard old segments by time or size), compact (keep the last value "
            "per key) or both.",
        ),
        _key(
            "min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", _ratio, "DOUBLE",
            ["log.cleaner.min.cleanable.ratio"],
            "The log cleaner cleans a compacted log once its dirty (not yet cleaned) bytes "
            "are more than this share of the log.",
        ),
        _key(
            "min.compaction.lag.ms", "min_compaction_lag_ms", _number("LONG", LONG_MAX, 0),
            "LONG", ["log.cleaner.min.compaction.lag.ms"],
            "The least time a record stays uncompacted in the log (compacted logs only).",
        ),
        _key(
            "max.compaction.lag.ms", "max_compaction_lag_ms", _number("LONG", LONG_MAX, 1),
            "LONG", ["log.cleaner.max.compaction.lag.ms"],
            "The most time a record may stay uncompacted: a compacted log with older dirty "
            "records is cleaned whatever its dirty ratio.",
        ),
        _key(
            "delete.retention.ms", "delete_retention_ms", _number("LONG", LONG_MAX, 0),
            "LONG", ["log.cleaner.delete.retention.ms"],
            "How long a tombstone (a record with a null value) stays in a compacted log "
            "after the cleaner first keeps it, so that consumers can see the delete.",
        ),
        _key(
            "leader.replication.throttled.replicas", "leader_replication_throttled_replicas",
            _parse_throttled_replicas, "LIST", [],
            "Replicas whose log replication the leader throttles (leader.replication."
            "throttled.rate): partitionId:brokerId,... or * for every replica of the topic.",
        ),
        _key(
            "follower.replication.throttled.replicas", "follower_replication_throttled_replicas",
            _parse_throttled_replicas, "LIST", [],
            "Replicas whose log replication the follower throttles (follower.replication."
            "throttled.rate): partitionId:brokerId,... or * for every replica of the topic.",
        ),
    )
}  # fmt: skip

TOPIC_CONFIG_KEYS: frozenset[str] = frozenset(TOPIC_CONFIGS)

# Broker key -> topic key it provides the default for (Kafka's LogConfig synonyms).
_BROKER_SYNONYMS: dict[str, str] = {
    k.broker_synonyms[0]: k.name for k in TOPIC_CONFIGS.values() if len(k.broker_synonyms) == 1
}
# Time keys with unit synonyms, most precise first (Kafka: log.retention.ms wins over .minutes/.hours).
_BROKER_TIME_SYNONYMS: dict[str, tuple[tuple[str, int], ...]] = {
    "retention.ms": (
        ("log.retention.ms", 1),
        ("log.retention.minutes", 60_000),
        ("log.retention.hours", 3_600_000),
    ),
    "segment.ms": (("log.roll.ms", 1), ("log.roll.hours", 3_600_000)),
}


def unknown_topic_config(key: str) -> ValueError:
    return ValueError(f"Unknown topic config name: {key}")


@dataclass(frozen=True)
class LogConfig:
    """Per-log settings. Immutable; safe to share between threads and tasks."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    retention_ms: int = 604800000
    retention_bytes: int = -1
    max_message_bytes: int = 1048588
    index_interval_bytes: int = 4096
    message_timestamp_type: str = CREATE_TIME
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    cleanup_policy: str = "delete"
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    delete_retention_ms: int = 86400000
    leader_replication_throttled_replicas: str = ""
    follower_replication_throttled_replicas: str = ""

    @property
    def delete_enabled(self) -> bool:
        """Whether time/size retention applies (Kafka: cleanup.policy contains delete)."""
        return "delete" in self.cleanup_policy.split(",")

    @property
    def compact(self) -> bool:
        """Whether the log cleaner compacts this log (Kafka: cleanup.policy contains compact)."""
        return "compact" in self.cleanup_policy.split(",")

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == LOG_APPEND_TIME

    @classmethod
    def from_properties(cls, props: Mapping[str, str], base: LogConfig | None = None) -> LogConfig:
        """Overlay topic-level ``props`` on ``base`` (defaults if None).

        Raises ValueError, with a one-line message naming the key, on an unknown
        key or a bad value.
        """
        changes: dict[str, Any] = {}
        for key, raw in props.items():
            entry = TOPIC_CONFIGS.get(key)
            if entry is None:
                raise unknown_topic_config(key)
            if raw is None:
                raise _invalid(key, raw, "a value is required")
            changes[entry.field] = entry.parse(key, raw)
        config = replace(base if base is not None else cls(), **changes)
        if config.min_compaction_lag_ms > config.max_compaction_lag_ms:
            raise ValueError(
                f"conflict topic config setting min.compaction.lag.ms "
                f"({config.min_compaction_lag_ms}) > max.compaction.lag.ms "
                f"({config.max_compaction_lag_ms})"
            )
        return config

    @classmethod
    def from_broker_properties(cls, props: Mapping[str, str]) -> LogConfig:
        """Broker defaults from ``log.segment.bytes``, ``log.roll.ms`` and friends.

        Keys that are not log defaults are ignored (the broker config has many).
        """
        topic_props: dict[str, str] = {}
        for broker_key, topic_key in _BROKER_SYNONYMS.items():
            if broker_key in props:
                topic_props[topic_key] = props[broker_key]
        for topic_key, synonyms in _BROKER_TIME_SYNONYMS.items():
            for broker_key, scale in synonyms:
                if broker_key in props:
                    value = _number("LONG", LONG_MAX, None)(broker_key, props[broker_key])
                    topic_props[topic_key] = str(value * scale if value >= 0 else value)
                    break
        return cls.from_properties(topic_props)

    def to_properties(self) -> dict[str, str]:
        """Topic keys and string values, as stored in ZooKeeper's topic config znode."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        out: dict[str, str] = {}
        for key, entry in TOPIC_CONFIGS.items():
            value = values[entry.field]
            out[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
        return out
