"""Options of the ``replog`` Spark data source, parsed and checked without any I/O.

Names follow Spark's own Kafka source (``subscribe``, ``subscribePattern``, ``assign``,
``startingOffsets``, ``endingOffsets``, ``maxOffsetsPerTrigger``, ``minPartitions``,
``failOnDataLoss``, ``includeHeaders``, ``kafka.``-prefixed client settings), so a Spark
Kafka user can switch ``format("kafka")`` to ``format("replog")`` and keep the rest.

Every error is an :class:`OptionError` whose one-line message names the option at fault.
Everything here is pure and immutable; safe to share between threads.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

#: Special per-partition offsets in offset JSON, as Spark's Kafka source spells them.
EARLIEST = -2
LATEST = -1

#: Client settings that the source owns and a ``kafka.`` option may not override.
_RESERVED_CONSUMER_KEYS = frozenset(
    {"enable.auto.commit", "auto.offset.reset", "key.deserializer", "value.deserializer"}
)


class OptionError(ValueError):
    """A ``replog`` option is missing, contradictory or malformed. The message names it."""


class SubscriptionKind(Enum):
    """How the set of topic-partitions to read is chosen: exactly one per query."""

    SUBSCRIBE = "subscribe"
    SUBSCRIBE_PATTERN = "subscribePattern"
    ASSIGN = "assign"


@dataclass(frozen=True)
class Subscription:
    """The topic-partitions a query reads: fixed topics, a regex, or explicit partitions."""

    kind: SubscriptionKind
    topics: tuple[str, ...] = ()
    pattern: str = ""
    partitions: tuple[tuple[str, int], ...] = ()

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` belongs to this subscription (for ASSIGN: any assigned partition)."""
        if self.kind is SubscriptionKind.SUBSCRIBE:
            return topic in self.topics
        if self.kind is SubscriptionKind.SUBSCRIBE_PATTERN:
            return re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.partitions)


class OffsetKind(Enum):
    """A starting or ending offset specification."""

    EARLIEST = "earliest"
    LATEST = "latest"
    SPECIFIC = "specific"
    COMMITTED = "committed"  # a consumer group's committed offsets (startingOffsets only)


class IsolationLevel(Enum):
    """``kafka.isolation.level``, as Kafka's consumer spells it (default read_uncommitted,
    as in Spark's Kafka source): read_committed reads up to the last stable offset and
    skips aborted transactions' records."""

    READ_UNCOMMITTED = "read_uncommitted"
    READ_COMMITTED = "read_committed"


class DeliveryGuarantee(Enum):
    """The sink's ``deliveryGuarantee`` (Flink's ``DeliveryGuarantee`` names)."""

    AT_LEAST_ONCE = "atLeastOnce"
    EXACTLY_ONCE = "exactlyOnce"


@dataclass(frozen=True)
class OffsetSpec:
    """``earliest``, ``latest`` or per-partition offsets (``-2`` earliest, ``-1`` latest)."""

    kind: OffsetKind
    offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)


@dataclass(frozen=True)
class SourceOptions:
    """Checked read options. Build with :func:`parse_source_options`."""

    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    fail_on_data_loss: bool
    include_headers: bool
    poll_timeout_ms: int
    client_config: Mapping[str, str]
    group_id: str | None = None  # ``kafka.group.id`` with ``startingOffsets=committed``
    isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED


#: The sink's transactional ids start with this unless ``transactionalIdPrefix`` is set.
DEFAULT_TRANSACTIONAL_ID_PREFIX = "spark-replog-"


@dataclass(frozen=True)
class SinkOptions:
    """Checked write options. Build with :func:`parse_sink_options`."""

    bootstrap_servers: str
    topic: str | None
    client_config: Mapping[str, str]
    delivery_guarantee: DeliveryGuarantee = DeliveryGuarantee.AT_LEAST_ONCE
    transactional_id_prefix: str = DEFAULT_TRANSACTIONAL_ID_PREFIX


def normalize(options: Mapping[str, str]) -> dict[str, str]:
    """Option names lower-cased (Spark treats them case-insensitively)."""
    return {str(k).lower(): str(v) for k, v in options.items()}


def bootstrap_servers(opts: Mapping[str, str]) -> str:
    """``bootstrap.servers`` (or Spark's ``kafka.bootstrap.servers``); required."""
    value = opts.get("bootstrap.servers") or opts.get("kafka.bootstrap.servers")
    if not value:
        raise OptionError(
            "option 'bootstrap.servers' (or 'kafka.bootstrap.servers') must be set, "
            "e.g. .option('bootstrap.servers', 'host:9092')"
        )
    return value


def client_config(opts: Mapping[str, str], reserved: frozenset[str]) -> dict[str, str]:
    """librdkafka settings given as ``kafka.<key>`` options, minus those the source owns."""
    config: dict[str, str] = {}
    for key, value in opts.items():
        if not key.startswith("kafka.") or key == "kafka.bootstrap.servers":
            continue
        name = key[len("kafka.") :]
        if name in reserved or name == "group.id":
            raise OptionError(f"option '{key}' is not supported: replog manages it")
        config[name] = value
    return config


def parse_subscription(opts: Mapping[str, str]) -> Subscription:
    """Exactly one of ``subscribe``, ``subscribePattern`` and ``assign``."""
    given = [k for k in SubscriptionKind if k.value.lower() in opts]
    if len(given) != 1:
        names = ", ".join(f"'{k.value}'" for k in SubscriptionKind)
        found = ", ".join(f"'{k.value}'" for k in given) or "none"
        raise OptionError(f"exactly one of options {names} must be set (got {found})")
    kind = given[0]
    raw = opts[kind.value.lower()].strip()
    if kind is SubscriptionKind.SUBSCRIBE:
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise OptionError("option 'subscribe' must list at least one topic")
        return Subscription(kind, topics=topics)
    if kind is SubscriptionKind.SUBSCRIBE_PATTERN:
        if not raw:
            raise OptionError("option 'subscribePattern' must not be empty")
        try:
            re.compile(raw)
        except re.error as exc:
            raise OptionError(f"option 'subscribePattern' is not a valid regex: {exc}") from None
        return Subscription(kind, pattern=raw)
    return Subscription(kind, partitions=_parse_assign(raw))


def _parse_assign(raw: str) -> tuple[tuple[str, int], ...]:
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(
            f"option 'assign' is not valid JSON like {{\"topicA\":[0,1]}}: {exc}"
        ) from None
    if not isinstance(parsed, dict) or not parsed:
        raise OptionError("option 'assign' must be a JSON object like {\"topicA\":[0,1]}")
    out: list[tuple[str, int]] = []
    for topic, parts in parsed.items():
        if not isinstance(parts, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts
        ):
            raise OptionError(f"option 'assign': topic {topic!r} needs a list of partition numbers")
        out.extend((topic, p) for p in parts)
    return tuple(sorted(set(out)))


def parse_offset_spec(opts: Mapping[str, str], name: str, default: OffsetKind) -> OffsetSpec:
    """``earliest``, ``latest`` or Spark's JSON ``{"topic":{"0":23,"1":-2}}``."""
    raw = opts.get(name.lower())
    if raw is None:
        return OffsetSpec(default)
    text = raw.strip()
    if text.lower() in ("earliest", "latest"):
        return OffsetSpec(OffsetKind(text.lower()))
    if text.lower() == "committed" and name == "startingOffsets":
        if not opts.get("kafka.group.id", "").strip():
            raise OptionError(
                "option 'startingOffsets' committed needs the group: set 'kafka.group.id'"
            )
        return OffsetSpec(OffsetKind.COMMITTED)
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(
            f"option '{name}' must be 'earliest', 'latest' or JSON like "
            f'{{"topic":{{"0":23,"1":-2}}}}: {exc}'
        ) from None
    if not isinstance(parsed, dict) or not parsed:
        raise OptionError(f"option '{name}' JSON must be an object of topics")
    offsets: dict[tuple[str, int], int] = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict):
            raise OptionError(f"option '{name}': topic {topic!r} needs an object of partitions")
        for part, offset in parts.items():
            if not str(part).isdigit():
                raise OptionError(
                    f"option '{name}': partition {part!r} of {topic!r} is not a number"
                )
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < EARLIEST:
                raise OptionError(
                    f"option '{name}': offset {offset!r} of {topic}-{part} must be >= 0, "
                    "-2 (earliest) or -1 (latest)"
                )
            offsets[(topic, int(part))] = offset
    return OffsetSpec(OffsetKind.SPECIFIC, offsets)


def _parse_bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise OptionError(f"option '{name}' must be 'true' or 'false', got {raw!r}")


def _parse_positive(opts: Mapping[str, str], name: str) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option '{name}' must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise OptionError(f"option '{name}' must be a positive integer, got {raw!r}")
    return value


def parse_isolation_level(opts: Mapping[str, str]) -> IsolationLevel:
    """``kafka.isolation.level``: read_uncommitted (default) or read_committed."""
    raw = opts.get("kafka.isolation.level")
    if raw is None:
        return IsolationLevel.READ_UNCOMMITTED
    try:
        return IsolationLevel(raw.strip().lower())
    except ValueError:
        raise OptionError(
            f"option 'kafka.isolation.level' must be 'read_uncommitted' or 'read_committed', "
            f"got {raw!r}"
        ) from None


def _group_id(opts: dict[str, str], starting: OffsetSpec) -> str | None:
    """``kafka.group.id``, taken out of ``opts``: the group whose committed offsets
    ``startingOffsets=committed`` starts from (the source's own consumers stay out of it)."""
    if starting.kind is not OffsetKind.COMMITTED:
        return None
    return opts.pop("kafka.group.id").strip()


def check_read_options(options: Mapping[str, str]) -> None:
    """The checks common to batch and streaming reads (run when a query is defined)."""
    opts = normalize(options)
    bootstrap_servers(opts)
    parse_subscription(opts)
    _group_id(opts, parse_offset_spec(opts, "startingOffsets", OffsetKind.EARLIEST))
    parse_offset_spec(opts, "endingOffsets", OffsetKind.LATEST)
    _parse_positive(opts, "maxOffsetsPerTrigger")
    _parse_positive(opts, "minPartitions")
    _parse_positive(opts, "kafkaConsumer.pollTimeoutMs")
    _parse_bool(opts, "failOnDataLoss", True)
    _parse_bool(opts, "includeHeaders", False)
    parse_isolation_level(opts)
    client_config(opts, _RESERVED_CONSUMER_KEYS)


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Check read options; batch queries default to earliest..latest, streams start at latest."""
    opts = normalize(options)
    servers = bootstrap_servers(opts)
    subscription = parse_subscription(opts)
    starting = parse_offset_spec(
        opts, "startingOffsets", OffsetKind.LATEST if streaming else OffsetKind.EARLIEST
    )
    group_id = _group_id(opts, starting)
    ending = parse_offset_spec(opts, "endingOffsets", OffsetKind.LATEST)
    if streaming and "endingoffsets" in opts:
        raise OptionError("option 'endingOffsets' is for batch queries only, not streams")
    if not streaming:
        if starting.kind is OffsetKind.LATEST or LATEST in starting.offsets.values():
            raise OptionError("option 'startingOffsets' may not be latest (-1) for batch queries")
        if ending.kind is OffsetKind.EARLIEST or EARLIEST in ending.offsets.values():
            raise OptionError("option 'endingOffsets' may not be earliest (-2) for batch queries")
    if not streaming and "maxoffsetspertrigger" in opts:
        raise OptionError("option 'maxOffsetsPerTrigger' is for streams only, not batch queries")
    poll = _parse_positive(opts, "kafkaConsumer.pollTimeoutMs")
    return SourceOptions(
        bootstrap_servers=servers,
        subscription=subscription,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=_parse_positive(opts, "maxOffsetsPerTrigger"),
        min_partitions=_parse_positive(opts, "minPartitions"),
        fail_on_data_loss=_parse_bool(opts, "failOnDataLoss", True),
        include_headers=_parse_bool(opts, "includeHeaders", False),
        poll_timeout_ms=poll if poll is not None else 120_000,
        client_config=client_config(opts, _RESERVED_CONSUMER_KEYS),
        group_id=group_id,
        isolation_level=parse_isolation_level(opts),
    )


#: Client settings the sink owns; a ``kafka.`` option may not set them.
_RESERVED_PRODUCER_KEYS = frozenset(
    {"enable.idempotence", "acks", "delivery.report.only.error", "transactional.id"}
)


def parse_delivery_guarantee(opts: Mapping[str, str]) -> DeliveryGuarantee:
    """``deliveryGuarantee``: ``atLeastOnce`` (default) or ``exactlyOnce``; Flink's
    spellings ``at-least-once``/``exactly-once`` (any case, ``_`` or ``-``) too."""
    raw = opts.get("deliveryguarantee")
    if raw is None:
        return DeliveryGuarantee.AT_LEAST_ONCE
    squashed = raw.strip().lower().replace("-", "").replace("_", "")
    for guarantee in DeliveryGuarantee:
        if guarantee.value.lower() == squashed:
            return guarantee
    raise OptionError(
        f"option 'deliveryGuarantee' must be 'atLeastOnce' or 'exactlyOnce', got {raw!r}"
    )


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Check write options: ``bootstrap.servers``, an optional default ``topic``, the
    ``deliveryGuarantee`` and, for exactlyOnce, ``transactionalIdPrefix``."""
    opts = normalize(options)
    for name in ("subscribe", "subscribepattern", "assign"):
        if name in opts:
            raise OptionError(f"option '{name}' is for reading; a write takes 'topic'")
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise OptionError("option 'topic' must not be empty")
    guarantee = parse_delivery_guarantee(opts)
    prefix = opts.get("transactionalidprefix")
    if prefix is not None:
        if guarantee is not DeliveryGuarantee.EXACTLY_ONCE:
            raise OptionError(
                "option 'transactionalIdPrefix' needs option 'deliveryGuarantee' exactlyOnce"
            )
        if not prefix.strip():
            raise OptionError("option 'transactionalIdPrefix' must not be empty")
    return SinkOptions(
        bootstrap_servers=bootstrap_servers(opts),
        topic=topic.strip() if topic else None,
        client_config=client_config(opts, _RESERVED_PRODUCER_KEYS),
        delivery_guarantee=guarantee,
        transactional_id_prefix=(prefix or DEFAULT_TRANSACTIONAL_ID_PREFIX).strip(),
    )
