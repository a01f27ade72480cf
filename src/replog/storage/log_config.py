"""Topic-level log configuration, with Kafka's keys, types, defaults and validators.

``LogConfig`` is an immutable value: a topic config change builds a new one and
hands it to ``Log.update_config``. Keys are spelled as Kafka spells them
(``segment.bytes``, ``retention.ms`` ...). ``TOPIC_CONFIGS`` is the one table of
them: each key's type, validator, documentation and broker synonyms, for
DescribeConfigs and for the incremental alter rules (APPEND/SUBTRACT apply to LIST
keys only).

The broker keys that give a topic key its default (``log.segment.bytes``,
``log.retention.hours`` ...) come from the same table: ``BROKER_LOG_KEYS`` holds
each one's type, default and check, which ``replog.config`` uses for
``server.properties``, and ``topic_defaults_from_broker`` maps them to topic keys.
As in Kafka (``ServerTopicConfigSynonyms``), a time key may be given in hours,
minutes or milliseconds: the most precise unit given wins, and Kafka's default sits
on the coarsest unit (``log.retention.hours=168``; ``log.retention.ms`` has none).

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


_UPPER = {"INT": INT_MAX, "LONG": LONG_MAX}


@dataclass(frozen=True)
class _Number:
    """An INT or LONG, at least ``minimum`` if given (Kafka ``ConfigDef.Range.atLeast``)."""

    type_name: str
    minimum: int | None = None

    def __call__(self, key: str, raw: str) -> int:
        upper = _UPPER[self.type_name]
        try:
            value = int(str(raw).strip())
        except ValueError:
            raise _invalid(key, raw, f"Not a number of type {self.type_name}") from None
        if not -upper - 1 <= value <= upper:
            raise _invalid(key, raw, f"Not a number of type {self.type_name}")
        if self.minimum is not None and value < self.minimum:
            raise _invalid(key, raw, f"Value must be at least {self.minimum}")
        return value


def _number(type_name: str, minimum: int | None) -> _Number:
    return _Number(type_name, minimum)


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


def parse_bool(raw: str) -> bool:
    """Kafka's BOOLEAN: ``true`` or ``false``, any case, spaces around ignored; a
    ValueError otherwise. The one boolean parser of broker, topic and znode configs."""
    text = str(raw).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise ValueError("Expected value to be either true or false")


def _parse_bool(key: str, raw: str) -> bool:
    try:
        return parse_bool(raw)
    except ValueError as exc:
        raise _invalid(key, raw, str(exc)) from None


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
    one first, then its coarser units (Kafka ``ServerTopicConfigSynonyms``:
    ``log.retention.ms``, ``log.retention.minutes``, ``log.retention.hours``).
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
            "segment.bytes", "segment_bytes", _number("INT", 14), "INT",
            ["log.segment.bytes"],
            "The segment file size for the log: retention and cleaning work a whole "
            "segment at a time.",
        ),
        _key(
            "segment.ms", "segment_ms", _number("LONG", 1), "LONG",
            ["log.roll.ms", "log.roll.hours"],
            "The time after which the log rolls a new segment even if the current one is "
            "not full, so that retention can delete or compact old data.",
        ),
        _key(
            "segment.jitter.ms", "segment_jitter_ms", _number("LONG", 0), "LONG",
            ["log.roll.jitter.ms", "log.roll.jitter.hours"],
            "The most a segment's time-based roll comes before segment.ms, different per "
            "segment, so that the logs created together do not all roll at once.",
        ),
        _key(
            "retention.ms", "retention_ms", _number("LONG", -1), "LONG",
            ["log.retention.ms", "log.retention.minutes", "log.retention.hours"],
            "The longest time a log keeps a segment before discarding it, with the delete "
            "cleanup policy; -1 means no time limit.",
        ),
        _key(
            "retention.bytes", "retention_bytes", _number("LONG", None), "LONG",
            ["log.retention.bytes"],
            "The largest size a partition's log may grow to before old segments are "
            "discarded, with the delete cleanup policy; -1 means no size limit.",
        ),
        _key(
            "max.message.bytes", "max_message_bytes", _number("INT", 0), "INT",
            ["message.max.bytes"],
            "The largest record batch size the log accepts.",
        ),
        _key(
            "index.interval.bytes", "index_interval_bytes", _number("INT", 0), "INT",
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
            "min.insync.replicas", "min_insync_replicas", _number("INT", 1), "INT",
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
            "min.compaction.lag.ms", "min_compaction_lag_ms", _number("LONG", 0),
            "LONG", ["log.cleaner.min.compaction.lag.ms"],
            "The least time a record stays uncompacted in the log (compacted logs only).",
        ),
        _key(
            "max.compaction.lag.ms", "max_compaction_lag_ms", _number("LONG", 1),
            "LONG", ["log.cleaner.max.compaction.lag.ms"],
            "The most time a record may stay uncompacted: a compacted log with older dirty "
            "records is cleaned whatever its dirty ratio.",
        ),
        _key(
            "delete.retention.ms", "delete_retention_ms", _number("LONG", 0),
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

_UNIT_MS = {".hours": 3_600_000, ".minutes": 60_000}


@dataclass(frozen=True)
class BrokerLogKey:
    """A broker key that gives a topic key's default (``log.retention.hours`` gives
    ``retention.ms``'s), with Kafka's type and default.

    ``unit_ms`` is 3600000 for an ``.hours`` key, 60000 for ``.minutes``, else 1.
    ``default`` is None for every synonym but the last of its topic key (Kafka sets
    ``log.retention.hours=168`` and leaves ``log.retention.ms`` null).
    """

    name: str
    topic_key: str
    type: str
    unit_ms: int
    default: str | None

    def parse(self, raw: str) -> Any:
        """The value of ``raw`` for this key, checked as its topic key's value would be;
        a ValueError names this key. Retention given in any negative amount is
        unlimited (-1), as in Kafka."""
        topic = TOPIC_CONFIGS[self.topic_key]
        if self.unit_ms == 1 and self.topic_key != "retention.ms":
            return topic.parse(self.name, raw)
        minimum = topic.parse.minimum if isinstance(topic.parse, _Number) else None
        if minimum is not None and minimum < 0:
            minimum = None  # a negative retention in any unit means unlimited
        value = _number(self.type, minimum)(self.name, raw)
        if value * self.unit_ms > LONG_MAX:
            raise _invalid(self.name, raw, "Not a number of type LONG once in milliseconds")
        return value

    def topic_value(self, value: Any) -> Any:
        """``value`` (as ``parse`` returns it) in its topic key's unit."""
        if self.topic_key == "retention.ms" and value < 0:
            return -1
        return value * self.unit_ms if self.unit_ms != 1 else value


def _broker_keys() -> dict[str, BrokerLogKey]:
    keys: dict[str, BrokerLogKey] = {}
    defaults = LogConfig().to_properties()
    for topic in TOPIC_CONFIGS.values():
        for name in topic.broker_synonyms:
            unit_ms = next((ms for end, ms in _UNIT_MS.items() if name.endswith(end)), 1)
            last = name == topic.broker_synonyms[-1]
            default = None
            if last:
                value = int(defaults[topic.name]) // unit_ms if unit_ms != 1 else None
                default = str(value) if value is not None else defaults[topic.name]
            type_name = "INT" if unit_ms != 1 else topic.type
            keys[name] = BrokerLogKey(name, topic.name, type_name, unit_ms, default)
    return keys


def topic_defaults_from_broker(values: Mapping[str, Any]) -> dict[str, str]:
    """The topic keys' defaults given by broker keys' parsed ``values`` (None or absent:
    not set); of a topic key's synonyms the first set wins (the most precise unit)."""
    out: dict[str, str] = {}
    for topic in TOPIC_CONFIGS.values():
        for name in topic.broker_synonyms:
            value = values.get(name)
            if value is not None:
                value = BROKER_LOG_KEYS[name].topic_value(value)
                out[topic.name] = (
                    ("true" if value else "false") if isinstance(value, bool) else str(value)
                )
                break
    return out


def unknown_topic_config(key: str) -> ValueError:
    return ValueError(f"Unknown topic config name: {key}")


@dataclass(frozen=True)
class LogConfig:
    """Per-log settings. Immutable; safe to share between threads and tasks."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
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
        """Broker defaults from ``log.segment.bytes``, ``log.roll.hours`` and friends,
        Kafka's defaults for those not given (``BROKER_LOG_KEYS``).

        Keys that are not log defaults are ignored (the broker config has many).
        Raises ValueError, naming the broker key, on a bad value.
        """
        values = {
            name: key.parse(props[name] if name in props else key.default)
            for name, key in BROKER_LOG_KEYS.items()
            if name in props or key.default is not None
        }
        return cls.from_properties(topic_defaults_from_broker(values))

    def to_properties(self) -> dict[str, str]:
        """Topic keys and string values, as stored in ZooKeeper's topic config znode."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        out: dict[str, str] = {}
        for key, entry in TOPIC_CONFIGS.items():
            value = values[entry.field]
            out[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
        return out


BROKER_LOG_KEYS: dict[str, BrokerLogKey] = _broker_keys()
"""Every broker key that gives a topic key its default, in ``TOPIC_CONFIGS`` order."""
