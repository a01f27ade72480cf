"""Dynamic topic and broker configs, the ZooKeeper-mode Kafka way: the pure rules.

* Which broker keys may change at run time (Kafka ``DynamicBrokerConfig``): the broker
  defaults of the topic configs (``log.retention.ms``, ``min.insync.replicas`` ...),
  per broker (``/config/brokers/<id>``) or cluster-wide (``/config/brokers/<default>``).
* A broker's config in layers, most precedent first: dynamic per-broker, dynamic
  cluster default, static ``server.properties``, Kafka's default
  (``BrokerConfigLayers``); a topic's config is its overrides on that. A dynamic name
  the broker does not know is kept as Kafka keeps it (stored, listed by
  DescribeConfigs as a sensitive read-only entry, used by nothing).
* DescribeConfigs entries with their sources and synonyms (Kafka ``ConfigHelper``).
* The checks and the merge of AlterConfigs and IncrementalAlterConfigs (Kafka
  ``ConfigAdminManager.preprocess``/``prepareIncrementalConfigs``,
  ``ZkAdminManager.alterConfigs``), raising ``ConfigRejected`` with Kafka's error code.

No IO: ZooKeeper reads and writes are ``replog.server.config_manager``'s.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from kio.schema.errors import ErrorCode

from replog.config import DEFAULT_VALUES, KEY_TYPES, KNOWN_KEYS, ConfigError, KafkaConfig
from replog.storage.log_config import TOPIC_CONFIGS, LogConfig, unknown_topic_config


class ResourceType(enum.IntEnum):
    """Kafka ``ConfigResource.Type``."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8


class ConfigSource(enum.IntEnum):
    """Kafka ``DescribeConfigsResponse.ConfigSource``."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


class ConfigType(enum.IntEnum):
    """Kafka ``DescribeConfigsResponse.ConfigType`` (DescribeConfigs v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class OpType(enum.IntEnum):
    """Kafka ``AlterConfigOp.OpType`` (IncrementalAlterConfigs)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ConfigRejected(Exception):
    """A request's resource refused with a Kafka error code and a one-line message."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


# Topic key -> its broker synonyms (primary first); broker key -> its unit variants.
_TOPIC_SYNONYMS: dict[str, tuple[str, ...]] = {
    name: key.broker_synonyms for name, key in TOPIC_CONFIGS.items()
}
_BROKER_SYNONYMS: dict[str, tuple[str, ...]] = {
    broker_key: key.broker_synonyms
    for key in TOPIC_CONFIGS.values()
    for broker_key in key.broker_synonyms
}
_BROKER_DOCS: dict[str, str] = {
    key.broker_synonyms[0]: key.documentation
    for key in TOPIC_CONFIGS.values()
    if key.broker_synonyms
}

# Kafka DynamicLogConfig.ReconfigurableConfigs: each topic key's primary broker synonym.
# The thread pools Kafka also reconfigures (num.replica.fetchers ...) are static here.
# Kafka DynamicConfig.Broker adds the replication throttles (KIP-73).
DYNAMIC_BROKER_CONFIGS: frozenset[str] = (
    frozenset(key.broker_synonyms[0] for key in TOPIC_CONFIGS.values() if key.broker_synonyms)
    | {"leader.replication.throttled.rate", "follower.replication.throttled.rate"}
) & KNOWN_KEYS
# Kafka's per-broker-only keys (listeners, keystores) are not dynamic in replog.
PER_BROKER_CONFIGS: frozenset[str] = frozenset()

# Kafka's staticDefaultConfigs: keys whose default is not null (empty here).
_DEFAULTS = {key: value for key, value in DEFAULT_VALUES.items() if value != ""}


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One DescribeConfigs result entry."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    config_type: ConfigType
    synonyms: tuple[ConfigSynonym, ...] = ()
    documentation: str | None = None
    is_sensitive: bool = False


# --- a broker's config in layers ------------------------------------------------------


def unknown_broker_config(name: str) -> bool:
    """A name no broker config has. Kafka stores such a dynamic config unchecked (a
    plugin or a later version may read it: ``DynamicBrokerConfig.validate`` only refuses
    known static names) and its DescribeConfigs lists it, treated as sensitive."""
    return name not in KNOWN_KEYS


def _known(props: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in props.items() if not unknown_broker_config(k)}


def sanitize_broker_config(
    static: Mapping[str, str], props: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """The dynamic broker configs of ``props`` that apply, and why the others do not
    (Kafka ``DynamicBrokerConfig.removeInvalidConfigs``: a znode written by hand may hold
    a key that cannot change at run time or a bad value; it is logged and skipped). An
    unknown name is kept, as Kafka keeps it; nothing reads it."""
    kept: dict[str, str] = {}
    problems: list[str] = []
    for key, value in sorted(props.items()):
        if unknown_broker_config(key):
            kept[key] = value
        elif key not in DYNAMIC_BROKER_CONFIGS:
            problems.append(f"{key} cannot be updated dynamically")
        else:
            try:
                KafkaConfig.from_properties({**static, key: value})
            except ConfigError as exc:
                problems.append(str(exc))
            else:
                kept[key] = value
    return kept, problems


def sanitize_topic_config(props: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The topic overrides of ``props`` that parse, and why the others do not."""
    kept: dict[str, str] = {}
    problems: list[str] = []
    for key, value in sorted(props.items()):
        try:
            LogConfig.from_properties({key: value})
        except ValueError as exc:
            problems.append(str(exc))
        else:
            kept[key] = value
    return kept, problems


@dataclass(frozen=True)
class BrokerConfigLayers:
    """One broker's configuration: ``static`` (server.properties as given), then the
    dynamic cluster defaults and this broker's dynamic configs, each already sanitized.

    Immutable: a change builds new layers (``with_dynamic``). The dynamic layers may
    hold names no broker config has (``unknown_broker_config``): described, not applied.
    """

    broker_id: int
    static: Mapping[str, str]
    dynamic_default: Mapping[str, str] = field(default_factory=dict)
    dynamic_broker: Mapping[str, str] = field(default_factory=dict)

    def with_dynamic(self, per_broker: bool, props: Mapping[str, str]) -> BrokerConfigLayers:
        """These layers with one dynamic layer replaced by the valid keys of ``props``."""
        kept, _ = sanitize_broker_config(self.static, props)
        if per_broker:
            return BrokerConfigLayers(self.broker_id, self.static, self.dynamic_default, kept)
        return BrokerConfigLayers(self.broker_id, self.static, kept, self.dynamic_broker)

    @cached_property
    def kafka_config(self) -> KafkaConfig:
        """The effective broker config."""
        return KafkaConfig.from_properties(
            {**self.static, **_known(self.dynamic_default), **_known(self.dynamic_broker)}
        )

    @cached_property
    def effective(self) -> dict[str, str]:
        return self.kafka_config.as_properties()

    @cached_property
    def log_defaults(self) -> LogConfig:
        """The topic config of a topic without overrides on this broker."""
        return LogConfig.from_properties(self.kafka_config.topic_defaults())

    @property
    def unclean_leader_election_enable(self) -> bool:
        return self.kafka_config.unclean_leader_election_enable

    def _sources(self) -> tuple[tuple[ConfigSource, Mapping[str, str]], ...]:
        return (
            (ConfigSource.DYNAMIC_BROKER_CONFIG, self.dynamic_broker),
            (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, self.dynamic_default),
            (ConfigSource.STATIC_BROKER_CONFIG, self.static),
            (ConfigSource.DEFAULT_CONFIG, _DEFAULTS),
        )

    def synonyms(self, name: str) -> list[ConfigSynonym]:
        """Kafka ``ConfigHelper.configSynonyms`` for broker key ``name``: every source
        (most precedent first) of ``name`` and its unit variants, from ``name`` on."""
        names = _BROKER_SYNONYMS.get(name, (name,))
        found = [
            ConfigSynonym(n, values[n], source)
            for source, values in self._sources()
            for n in names
            if n in values
        ]
        while found and found[0].name != name:
            found.pop(0)
        return found


# --- DescribeConfigs ------------------------------------------------------------------


def _wanted(names: Iterable[str], keys: Iterable[str] | None) -> list[str]:
    """All names, or those asked for (Kafka: a null or empty key list means all)."""
    keys = None if keys is None else set(keys)
    return sorted(n for n in names if not keys or n in keys)


def describe_topic(
    layers: BrokerConfigLayers,
    overrides: Mapping[str, str],
    keys: Iterable[str] | None = None,
    include_synonyms: bool = False,
    include_documentation: bool = False,
) -> list[ConfigEntry]:
    """Kafka ``ConfigHelper.createTopicConfigEntry`` for every topic key (or ``keys``).

    ``overrides`` must be sanitized (``sanitize_topic_config``).
    """
    values = LogConfig.from_properties(overrides, base=layers.log_defaults).to_properties()
    entries = []
    for name in _wanted(TOPIC_CONFIGS, keys):
        key = TOPIC_CONFIGS[name]
        synonyms = layers.synonyms(key.broker_synonyms[0]) if key.broker_synonyms else []
        if name in overrides:
            synonyms.insert(0, ConfigSynonym(name, values[name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        entries.append(
            ConfigEntry(
                name=name,
                value=values[name],
                source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
                read_only=False,
                config_type=ConfigType[key.type],
                synonyms=tuple(synonyms) if include_synonyms else (),
                documentation=key.documentation if include_documentation else None,
            )
        )
    return entries


def describe_broker(
    layers: BrokerConfigLayers,
    per_broker: bool,
    keys: Iterable[str] | None = None,
    include_synonyms: bool = False,
    include_documentation: bool = False,
) -> list[ConfigEntry]:
    """Kafka ``ConfigHelper.createBrokerConfigEntry``: every key of this broker
    (``per_broker``), or the dynamic cluster defaults only (the empty resource name).

    A dynamic name no broker config has is listed as Kafka lists it: its type unknown,
    so sensitive (no value), read-only (not a dynamic config Kafka knows), its source
    the dynamic layer that holds it."""
    if per_broker:
        names = KNOWN_KEYS | layers.dynamic_default.keys() | layers.dynamic_broker.keys()
        values = layers.effective
    else:
        names, values = frozenset(layers.dynamic_default), dict(layers.dynamic_default)
    entries = []
    for name in _wanted(names, keys):
        synonyms = layers.synonyms(name)
        if not per_broker:
            synonyms = [
                s for s in synonyms if s.source is ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
            ]
        if unknown_broker_config(name):
            entries.append(
                ConfigEntry(
                    name=name,
                    value=None,
                    source=synonyms[0].source if synonyms else ConfigSource.UNKNOWN,
                    read_only=True,
                    config_type=ConfigType.UNKNOWN,
                    synonyms=tuple(ConfigSynonym(s.name, None, s.source) for s in synonyms)
                    if include_synonyms
                    else (),
                    is_sensitive=True,
                )
            )
            continue
        entries.append(
            ConfigEntry(
                name=name,
                value=values[name],
                source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
                read_only=name not in DYNAMIC_BROKER_CONFIGS,
                config_type=ConfigType[KEY_TYPES[name]],
                synonyms=tuple(synonyms) if include_synonyms else (),
                documentation=_BROKER_DOCS.get(name) if include_documentation else None,
            )
        )
    return entries


# --- AlterConfigs and IncrementalAlterConfigs -----------------------------------------


@dataclass(frozen=True, slots=True)
class AlterOp:
    """One config of an alter request; ``op`` is SET for the legacy AlterConfigs."""

    name: str
    op: int
    value: str | None


def duplicate_resources(resources: Sequence[tuple[int, str]]) -> set[tuple[int, str]]:
    """Resources named more than once: each of them is refused (Kafka: INVALID_REQUEST,
    "Each resource must appear at most once.")."""
    seen: set[tuple[int, str]] = set()
    twice: set[tuple[int, str]] = set()
    for resource in resources:
        (twice if resource in seen else seen).add(resource)
    return twice


def check_ops(ops: Sequence[AlterOp], incremental: bool) -> None:
    """Kafka ``ConfigAdminManager.preprocess``: no key twice, no null value (but for
    DELETE), a known operation."""
    names = [op.name for op in ops]
    if len(set(names)) != len(names):
        raise ConfigRejected(ErrorCode.invalid_request, "Error due to duplicate config keys")
    nulls = [op.name for op in ops if op.value is None and op.op != OpType.DELETE]
    if nulls:
        raise ConfigRejected(
            ErrorCode.invalid_request, "Null value not supported for : " + ", ".join(nulls)
        )
    if incremental:
        for op in ops:
            if op.op not in {int(o) for o in OpType}:
                raise ConfigRejected(ErrorCode.invalid_request, f"Unknown operations type {op.op}")


def _list_default(resource_type: ResourceType, name: str) -> tuple[str, str | None]:
    """(config type, default value) of ``name``; INVALID_CONFIG if it is unknown."""
    if resource_type is ResourceType.TOPIC:
        key = TOPIC_CONFIGS.get(name)
        if key is None:
            raise ConfigRejected(ErrorCode.invalid_config, str(unknown_topic_config(name)))
        return key.type, LogConfig().to_properties()[name]
    if name not in KNOWN_KEYS:
        raise ConfigRejected(ErrorCode.invalid_config, f"Unknown broker config name: {name}")
    return KEY_TYPES[name], _DEFAULTS.get(name)


def apply_incremental(
    resource_type: ResourceType, current: Mapping[str, str], ops: Sequence[AlterOp]
) -> dict[str, str]:
    """Kafka ``prepareIncrementalConfigs``: SET and DELETE a key; APPEND to or SUBTRACT
    from a LIST key (starting from its default when unset). Returns the new dynamic
    config of the resource; ``current`` is not changed."""
    props = dict(current)
    for op in ops:
        if op.op == OpType.SET:
            props[op.name] = str(op.value)
        elif op.op == OpType.DELETE:
            props.pop(op.name, None)
        else:
            config_type, default = _list_default(resource_type, op.name)
            verb = "append" if op.op == OpType.APPEND else "subtract"
            if config_type != "LIST":
                raise ConfigRejected(
                    ErrorCode.invalid_config,
                    f"Config value {verb} is not allowed for config key: {op.name}",
                )
            old = props.get(op.name, default) or ""
            items = [v for v in old.split(",") if v]
            given = [v for v in str(op.value).split(",") if v]
            if op.op == OpType.APPEND:
                items += [v for v in given if v not in items]
            else:
                items = [v for v in items if v not in given]
            props[op.name] = ",".join(items)
    return props


def _resource_text(resource_type: ResourceType, name: str) -> str:
    return f"ConfigResource(type={resource_type.name}, name='{name}')"


def validate_topic_config(topic: str, props: Mapping[str, str]) -> LogConfig:
    """Kafka ``AdminZkClient.validateTopicConfig``: every key known, every value valid."""
    for key in props:
        if key not in TOPIC_CONFIGS:
            raise ConfigRejected(ErrorCode.invalid_config, str(unknown_topic_config(key)))
    try:
        return LogConfig.from_properties(props)
    except ValueError as exc:
        raise ConfigRejected(
            ErrorCode.invalid_config,
            f"Invalid config value for resource {_resource_text(ResourceType.TOPIC, topic)}: {exc}",
        ) from None


def broker_entity(broker_id: int, resource_name: str) -> int | None:
    """The broker a BROKER resource names: this one (its id) or the cluster defaults
    (None, the empty name); INVALID_REQUEST for another broker (Kafka in ZooKeeper
    mode does not forward; clients send a broker's resource to that broker)."""
    if resource_name == "":
        return None
    try:
        named = int(resource_name)
    except ValueError:
        raise ConfigRejected(
            ErrorCode.invalid_request, f"Broker id must be an integer, but it is: {resource_name}"
        ) from None
    if named != broker_id:
        raise ConfigRejected(
            ErrorCode.invalid_request,
            f"Unexpected broker id, expected {broker_id} or empty string, but received "
            f"{resource_name}",
        )
    return named


def validate_broker_config(
    layers: BrokerConfigLayers, per_broker: bool, props: Mapping[str, str]
) -> BrokerConfigLayers:
    """Kafka ``DynamicBrokerConfig.validate``: only dynamic keys, valid values, and the
    whole resulting config valid. Returns the layers ``props`` would make.

    Kafka's codes: INVALID_REQUEST for a key that cannot change at run time or a bad
    value (KAFKA-13609 keeps it so). A name no broker config has passes unchecked and is
    stored, as Kafka stores it (``unknown_broker_config``).
    """
    static_only = sorted(
        k for k in props if not unknown_broker_config(k) and k not in DYNAMIC_BROKER_CONFIGS
    )
    if static_only:
        raise ConfigRejected(
            ErrorCode.invalid_request,
            f"Cannot update these configs dynamically: {', '.join(static_only)}",
        )
    if not per_broker:
        per_broker_only = sorted(k for k in props if k in PER_BROKER_CONFIGS)
        if per_broker_only:
            raise ConfigRejected(
                ErrorCode.invalid_request,
                "Cannot update these configs at default cluster level, broker id must be "
                f"specified: {', '.join(per_broker_only)}",
            )
    dynamic_default = layers.dynamic_default if per_broker else props
    dynamic_broker = props if per_broker else layers.dynamic_broker
    try:
        KafkaConfig.from_properties(
            {**layers.static, **_known(dynamic_default), **_known(dynamic_broker)}
        )
    except ConfigError as exc:
        raise ConfigRejected(ErrorCode.invalid_request, str(exc)) from None
    return layers.with_dynamic(per_broker, props)
