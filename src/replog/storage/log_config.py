"""Topic-level log configuration, with Kafka's keys and defaults.

``LogConfig`` is an immutable value: a topic config change builds a new one and
hands it to ``Log.update_config``. Keys are spelled as Kafka spells them
(``segment.bytes``, ``retention.ms`` ...); broker-level defaults
(``log.segment.bytes``, ``log.roll.ms`` ...) are mapped by
``LogConfig.from_broker_properties``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
_TIMESTAMP_TYPES = frozenset({CREATE_TIME, LOG_APPEND_TIME})
_CLEANUP_POLICIES = frozenset({"delete", "compact"})


def _parse_int(key: str, raw: str, minimum: int | None) -> int:
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"invalid value {raw!r} for {key}: not an integer") from None
    if minimum is not None and value < minimum:
        raise ValueError(f"invalid value {raw!r} for {key}: must be at least {minimum}")
    return value


def _parse_bool(key: str, raw: str) -> bool:
    text = str(raw).strip().lower()
    if text == "true":
        return True
    if text == "false":
        return False
    raise ValueError(f"invalid value {raw!r} for {key}: expected true or false")


def _parse_timestamp_type(key: str, raw: str) -> str:
    text = str(raw).strip()
    if text not in _TIMESTAMP_TYPES:
        raise ValueError(f"invalid value {raw!r} for {key}: expected CreateTime or LogAppendTime")
    return text


def _parse_cleanup_policy(key: str, raw: str) -> str:
    parts = [p.strip().lower() for p in str(raw).split(",") if p.strip()]
    if not parts or any(p not in _CLEANUP_POLICIES for p in parts):
        raise ValueError(f"invalid value {raw!r} for {key}: expected delete, compact or both")
    return ",".join(sorted(set(parts), key=["compact", "delete"].index))


def _int(minimum: int | None) -> Callable[[str, str], Any]:
    return lambda key, raw: _parse_int(key, raw, minimum)


# Kafka topic key -> (LogConfig field, parser). Minimums follow Kafka's TopicConfig validators.
_TOPIC_KEYS: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "segment.bytes": ("segment_bytes", _int(14)),
    "segment.ms": ("segment_ms", _int(1)),
    "retention.ms": ("retention_ms", _int(-1)),
    "retention.bytes": ("retention_bytes", _int(None)),
    "max.message.bytes": ("max_message_bytes", _int(0)),
    "index.interval.bytes": ("index_interval_bytes", _int(0)),
    "message.timestamp.type": ("message_timestamp_type", _parse_timestamp_type),
    "min.insync.replicas": ("min_insync_replicas", _int(1)),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", _parse_bool),
    "cleanup.policy": ("cleanup_policy", _parse_cleanup_policy),
}

TOPIC_CONFIG_KEYS: frozenset[str] = frozenset(_TOPIC_KEYS)

# Broker key -> topic key it provides the default for (Kafka's LogConfig synonyms).
_BROKER_SYNONYMS: dict[str, str] = {
    "log.segment.bytes": "segment.bytes",
    "log.retention.bytes": "retention.bytes",
    "message.max.bytes": "max.message.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.message.timestamp.type": "message.timestamp.type",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "log.cleanup.policy": "cleanup.policy",
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

    @property
    def delete_enabled(self) -> bool:
        """Whether time/size retention applies (Kafka: cleanup.policy contains delete)."""
        return "delete" in self.cleanup_policy.split(",")

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
            entry = _TOPIC_KEYS.get(key)
            if entry is None:
                raise ValueError(f"unknown topic config key {key}")
            field_name, parse = entry
            if raw is None:
                raise ValueError(f"invalid value None for {key}")
            changes[field_name] = parse(key, raw)
        return replace(base if base is not None else cls(), **changes)

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
                    value = _parse_int(broker_key, props[broker_key], None)
                    topic_props[topic_key] = str(value * scale if value >= 0 else value)
                    break
        return cls.from_properties(topic_props)

    def to_properties(self) -> dict[str, str]:
        """Topic keys and string values, as stored in ZooKeeper's topic config znode."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        out: dict[str, str] = {}
        for key, (field_name, _) in _TOPIC_KEYS.items():
            value = values[field_name]
            out[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
        return out
