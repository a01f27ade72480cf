"""Dynamic configs, the pure parts: the znode codecs of ``/config/...`` and
``/config/changes``, the layers and synonyms of a broker's config, DescribeConfigs
entries, the AlterConfigs/IncrementalAlterConfigs checks and merge, a partition's live
``min.insync.replicas``, and the controller's decision when unclean election is allowed."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from replog.config import ConfigError, KafkaConfig
from replog.controller import decisions
from replog.controller.context import NO_LEADER, TopicPartition
from replog.replication.machine import PartitionLeadership, PartitionMachine
from replog.server.dynamic_config import (
    DYNAMIC_BROKER_CONFIGS,
    AlterOp,
    BrokerConfigLayers,
    ConfigRejected,
    ConfigSource,
    ConfigType,
    OpType,
    ResourceType,
    apply_incremental,
    broker_entity,
    check_ops,
    describe_broker,
    describe_topic,
    duplicate_resources,
    sanitize_broker_config,
    sanitize_topic_config,
    validate_broker_config,
    validate_topic_config,
)
from replog.storage.log_config import TOPIC_CONFIG_KEYS, LogConfig
from replog.zk import config_znodes as cz
from replog.zk import data as zd
from test_controller_decisions import apply, broker, cluster

STATIC = {
    "broker.id": "1",
    "zookeeper.connect": "127.0.0.1:2181",
    "log.dirs": "/tmp/x",
    "log.retention.ms": "86400000",
}
S = ConfigSource


def layers(default: dict | None = None, mine: dict | None = None) -> BrokerConfigLayers:
    return (
        BrokerConfigLayers(1, STATIC)
        .with_dynamic(False, default or {})
        .with_dynamic(True, mine or {})
    )


def rejected(call, *args) -> ConfigRejected:
    with pytest.raises(ConfigRejected) as err:
        call(*args)
    assert "\n" not in err.value.message
    return err.value


# --- znode codecs -------------------------------------------------------------------------


def test_config_change_notification_is_what_kafka_writes() -> None:
    data = cz.encode_config_change(cz.ConfigChange("topics", "orders"))
    assert json.loads(data) == {"version": 2, "entity_path": "topics/orders"}
    assert cz.decode_config_change(data) == cz.ConfigChange("topics", "orders")
    # Kafka before 1.1 wrote version 1; brokers still read it.
    old = b'{"version":1,"entity_type":"brokers","entity_name":"<default>"}'
    assert cz.decode_config_change(old) == cz.ConfigChange("brokers", cz.DEFAULT_ENTITY)
    for bad in (b"", b"[]", b"{", b'{"version":3}', b'{"version":2,"entity_path":"nope"}',
                b'{"version":2,"entity_path":"widgets/x"}'):  # fmt: skip
        with pytest.raises(zd.ZkDataError):
            cz.decode_config_change(bad)


@given(
    st.sampled_from(zd.CONFIG_TYPES),
    st.text(st.characters(blacklist_characters="/", min_codepoint=33), min_size=1),
)
def test_config_change_round_trips(entity_type: str, entity_name: str) -> None:
    change = cz.ConfigChange(entity_type, entity_name)
    assert cz.decode_config_change(cz.encode_config_change(change)) == change


@given(st.dictionaries(st.text(min_size=1), st.text()))
def test_entity_config_round_trips_in_kafkas_format(config: dict[str, str]) -> None:
    data = cz.encode_entity_config(config)
    assert json.loads(data) == {"version": 1, "config": config}
    assert cz.decode_entity_config(data) == config


def test_paths_and_sequences() -> None:
    assert cz.entity_config_path("topics", "t") == "/config/topics/t"
    assert cz.entity_config_path("brokers", cz.broker_entity_name(None)) == (
        "/config/brokers/<default>"
    )
    assert cz.entity_config_path("brokers", cz.broker_entity_name(3)) == "/config/brokers/3"
    with pytest.raises(ValueError):
        cz.entity_config_path("widgets", "x")
    names = ["config_change_0000000010", "config_change_0000000002", "junk", "config_change_x"]
    assert cz.changes_after(names, -1) == ["config_change_0000000002", "config_change_0000000010"]
    assert cz.changes_after(names, 2) == ["config_change_0000000010"]
    assert cz.expired_changes(
        [("a", 1000), ("b", 5000)], now_ms=1000 + cz.CHANGE_EXPIRATION_MS + 1
    ) == ["a"]


# --- layers, synonyms, DescribeConfigs ----------------------------------------------------


def test_layers_take_precedence_per_broker_then_default_then_static() -> None:
    base = layers()
    assert base.log_defaults.retention_ms == 86400000  # static
    assert layers({"log.retention.ms": "5000"}).log_defaults.retention_ms == 5000
    both = layers({"log.retention.ms": "5000"}, {"log.retention.ms": "7000"})
    assert both.log_defaults.retention_ms == 7000
    assert [(s.name, s.value, s.source) for s in both.synonyms("log.retention.ms")] == [
        ("log.retention.ms", "7000", S.DYNAMIC_BROKER_CONFIG),
        ("log.retention.ms", "5000", S.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.ms", "86400000", S.STATIC_BROKER_CONFIG),
        # Kafka's default sits on the coarsest unit; log.retention.ms has none
        ("log.retention.hours", "168", S.DEFAULT_CONFIG),
    ]


def test_time_keys_in_any_unit_the_most_precise_winning() -> None:
    """Kafka's log.retention.{ms,minutes,hours} and log.roll.{ms,hours}: the broker
    accepts each, the smallest unit given wins, across the dynamic layers too."""
    static = {k: v for k, v in STATIC.items() if k != "log.retention.ms"}
    hours = BrokerConfigLayers(1, {**static, "log.retention.hours": "2", "log.roll.hours": "3"})
    assert hours.log_defaults.retention_ms == 2 * 3_600_000
    assert hours.log_defaults.segment_ms == 3 * 3_600_000
    minutes = BrokerConfigLayers(
        1, {**static, "log.retention.hours": "2", "log.retention.minutes": "5"}
    )
    assert minutes.log_defaults.retention_ms == 5 * 60_000
    # a dynamic log.retention.ms beats the static hours; deleting it brings them back
    dynamic = minutes.with_dynamic(False, {"log.retention.ms": "700"})
    assert dynamic.log_defaults.retention_ms == 700
    assert dynamic.with_dynamic(False, {}).log_defaults.retention_ms == 5 * 60_000
    # only the most precise unit changes at run time (Kafka's ReconfigurableConfigs)
    assert {"log.retention.ms", "log.roll.ms", "log.roll.jitter.ms"} <= DYNAMIC_BROKER_CONFIGS
    assert not {"log.retention.hours", "log.retention.minutes", "log.roll.hours"} & (
        DYNAMIC_BROKER_CONFIGS
    )
    # DescribeConfigs: a key left at Kafka's null default has no value, DEFAULT_CONFIG
    entries = {e.name: e for e in describe_broker(hours, per_broker=True, include_synonyms=True)}
    assert (entries["log.retention.ms"].value, entries["log.retention.ms"].source) == (
        None,
        S.DEFAULT_CONFIG,
    )
    assert entries["log.retention.ms"].synonyms == ()  # the hours come before it: dropped
    assert [(x.name, x.value, x.source) for x in entries["log.retention.hours"].synonyms] == [
        ("log.retention.hours", "2", S.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", S.DEFAULT_CONFIG),
    ]
    assert entries["log.retention.hours"].config_type is ConfigType.INT
    assert entries["log.retention.hours"].read_only
    with pytest.raises(ConfigError, match="log.roll.hours"):
        KafkaConfig.from_properties({**static, "log.roll.hours": "0"})


def test_layers_skip_what_cannot_change_at_run_time() -> None:
    kept, problems = sanitize_broker_config(
        STATIC, {"broker.id": "7", "min.insync.replicas": "0", "log.roll.ms": "10", "x.y": "1"}
    )
    # an unknown name is kept, as Kafka keeps it; nothing reads it
    assert kept == {"log.roll.ms": "10", "x.y": "1"}
    assert len(problems) == 2
    assert layers(mine={"x.y": "1"}).kafka_config.log_roll_ms == layers().kafka_config.log_roll_ms
    assert layers({"broker.id": "7"}).kafka_config.broker_id == 1
    kept, problems = sanitize_topic_config({"retention.ms": "x", "segment.ms": "5", "no.such": "1"})
    assert kept == {"segment.ms": "5"} and len(problems) == 2


def test_describe_topic_sources_and_synonyms() -> None:
    entries = {
        e.name: e
        for e in describe_topic(
            layers({"min.insync.replicas": "2"}),
            {"retention.ms": "1000", "cleanup.policy": "compact,delete"},
            include_synonyms=True,
            include_documentation=True,
        )
    }
    assert set(entries) == TOPIC_CONFIG_KEYS
    retention = entries["retention.ms"]
    assert (retention.value, retention.source, retention.read_only) == (
        "1000",
        S.DYNAMIC_TOPIC_CONFIG,
        False,
    )
    assert [(s.name, s.source) for s in retention.synonyms] == [
        ("retention.ms", S.DYNAMIC_TOPIC_CONFIG),
        ("log.retention.ms", S.STATIC_BROKER_CONFIG),
        ("log.retention.hours", S.DEFAULT_CONFIG),
    ]
    assert retention.config_type is ConfigType.LONG and retention.documentation
    isr = entries["min.insync.replicas"]
    assert (isr.value, isr.source, isr.config_type) == (
        "2",
        S.DYNAMIC_DEFAULT_BROKER_CONFIG,
        ConfigType.INT,
    )
    assert entries["segment.bytes"].source is S.DEFAULT_CONFIG
    assert entries["cleanup.policy"].config_type is ConfigType.LIST
    assert entries["unclean.leader.election.enable"].config_type is ConfigType.BOOLEAN
    only = describe_topic(layers(), {}, keys=["segment.ms"])
    assert [e.name for e in only] == ["segment.ms"] and only[0].synonyms == ()
    assert only[0].documentation is None


def test_describe_broker_read_only_flags_and_default_resource() -> None:
    mine = {e.name: e for e in describe_broker(layers({"log.roll.ms": "99"}), per_broker=True)}
    assert mine["broker.id"].read_only and mine["broker.id"].source is S.STATIC_BROKER_CONFIG
    assert not mine["log.retention.ms"].read_only
    assert mine["log.roll.ms"].value == "99"
    assert mine["log.roll.ms"].source is S.DYNAMIC_DEFAULT_BROKER_CONFIG
    assert mine["num.partitions"].source is S.DEFAULT_CONFIG
    assert mine["log.retention.ms"].config_type is ConfigType.LONG
    assert {n for n, e in mine.items() if not e.read_only} == DYNAMIC_BROKER_CONFIGS
    default = describe_broker(
        layers({"log.roll.ms": "99"}, {"log.roll.ms": "5"}), per_broker=False, include_synonyms=True
    )
    assert [(e.name, e.value, e.source) for e in default] == [
        ("log.roll.ms", "99", S.DYNAMIC_DEFAULT_BROKER_CONFIG)
    ]
    assert [s.source for s in default[0].synonyms] == [S.DYNAMIC_DEFAULT_BROKER_CONFIG]


# --- AlterConfigs / IncrementalAlterConfigs rules -----------------------------------------


def op(name: str, kind: OpType, value: str | None = None) -> AlterOp:
    return AlterOp(name, int(kind), value)


def test_incremental_set_delete_append_subtract() -> None:
    current = {"retention.ms": "1000", "segment.ms": "5"}
    new = apply_incremental(
        ResourceType.TOPIC,
        current,
        [op("retention.ms", OpType.SET, "2000"), op("segment.ms", OpType.DELETE),
         op("cleanup.policy", OpType.APPEND, "compact")],
    )  # fmt: skip
    assert new == {"retention.ms": "2000", "cleanup.policy": "delete,compact"}
    assert current == {"retention.ms": "1000", "segment.ms": "5"}, "not changed in place"
    again = apply_incremental(
        ResourceType.TOPIC, new, [op("cleanup.policy", OpType.APPEND, "delete")]
    )
    assert again["cleanup.policy"] == "delete,compact"
    less = apply_incremental(
        ResourceType.TOPIC, new, [op("cleanup.policy", OpType.SUBTRACT, "delete")]
    )
    assert less["cleanup.policy"] == "compact"
    assert apply_incremental(ResourceType.TOPIC, {}, [op("no.such", OpType.DELETE)]) == {}
    err = rejected(
        apply_incremental, ResourceType.TOPIC, {}, [op("retention.ms", OpType.APPEND, "1")]
    )
    assert err.error == ErrorCode.invalid_config and "append is not allowed" in err.message
    err = rejected(apply_incremental, ResourceType.TOPIC, {}, [op("x", OpType.SUBTRACT, "1")])
    assert err.error == ErrorCode.invalid_config and "x" in err.message
    broker_side = apply_incremental(
        ResourceType.BROKER, {}, [op("log.cleanup.policy", OpType.APPEND, "compact")]
    )
    assert broker_side == {"log.cleanup.policy": "delete,compact"}


def test_request_checks() -> None:
    err = rejected(check_ops, [op("a", OpType.SET, "1"), op("a", OpType.DELETE)], True)
    assert (err.error, err.message) == (
        ErrorCode.invalid_request,
        "Error due to duplicate config keys",
    )
    err = rejected(check_ops, [op("a", OpType.SET), op("b", OpType.APPEND)], True)
    assert err.error == ErrorCode.invalid_request and err.message.endswith(": a, b")
    check_ops([op("a", OpType.DELETE)], True)
    err = rejected(check_ops, [AlterOp("a", 7, "1")], True)
    assert err.error == ErrorCode.invalid_request and "7" in err.message
    assert duplicate_resources([(2, "a"), (4, ""), (2, "a"), (2, "b")]) == {(2, "a")}


def test_topic_validation_errors_are_kafkas() -> None:
    assert validate_topic_config("t", {"retention.ms": "5"}).retention_ms == 5
    err = rejected(validate_topic_config, "t", {"retention.mss": "5"})
    assert (err.error, err.message) == (
        ErrorCode.invalid_config,
        "Unknown topic config name: retention.mss",
    )
    err = rejected(validate_topic_config, "t", {"retention.ms": "soon"})
    assert err.error == ErrorCode.invalid_config
    assert err.message == (
        "Invalid config value for resource ConfigResource(type=TOPIC, name='t'): "
        "Invalid value soon for configuration retention.ms: Not a number of type LONG"
    )
    for props in ({"segment.bytes": "3000000000"}, {"min.insync.replicas": "0"},
                  {"cleanup.policy": "archive"}, {"message.timestamp.type": "Now"}):  # fmt: skip
        assert rejected(validate_topic_config, "t", props).error == ErrorCode.invalid_config


def test_broker_resource_names_and_validation() -> None:
    assert broker_entity(1, "") is None
    assert broker_entity(1, "1") == 1
    assert rejected(broker_entity, 1, "2").error == ErrorCode.invalid_request
    assert rejected(broker_entity, 1, "one").error == ErrorCode.invalid_request
    base = layers()
    new = validate_broker_config(base, False, {"min.insync.replicas": "2"})
    assert new.log_defaults.min_insync_replicas == 2 and base.log_defaults.min_insync_replicas == 1
    err = rejected(validate_broker_config, base, True, {"broker.id": "3", "listeners": "x"})
    assert err.error == ErrorCode.invalid_request
    assert err.message == "Cannot update these configs dynamically: broker.id, listeners"
    err = rejected(validate_broker_config, base, True, {"min.insync.replicas": "zero"})
    assert err.error == ErrorCode.invalid_request and "min.insync.replicas" in err.message
    # Kafka ``DynamicBrokerConfig.validate`` refuses only known static names: an unknown
    # one is stored as given (a plugin or a later version may read it)
    stored = validate_broker_config(base, True, {"log.retention.mss": "1", "log.roll.ms": "7"})
    assert stored.dynamic_broker == {"log.retention.mss": "1", "log.roll.ms": "7"}
    assert stored.kafka_config.log_roll_ms == 7
    stored = validate_broker_config(base, False, {"custom.plugin.setting": "on"})
    assert stored.dynamic_default == {"custom.plugin.setting": "on"}


def test_describe_broker_lists_unknown_names_as_kafka() -> None:
    """Kafka ``ConfigHelper.createBrokerConfigEntry``: a name without a known type is
    sensitive (no value, in its synonyms too), read-only, of type UNKNOWN."""
    both = layers({"custom.a": "1"}, {"custom.b": "2", "log.roll.ms": "5"})
    mine = {e.name: e for e in describe_broker(both, per_broker=True, include_synonyms=True)}
    for name, source in (
        ("custom.a", S.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("custom.b", S.DYNAMIC_BROKER_CONFIG),
    ):
        entry = mine[name]
        assert (entry.value, entry.source, entry.is_sensitive, entry.read_only) == (
            None,
            source,
            True,
            True,
        )
        assert entry.config_type is ConfigType.UNKNOWN
        assert [(s.name, s.value, s.source) for s in entry.synonyms] == [(name, None, source)]
    assert mine["log.roll.ms"].value == "5" and not mine["log.roll.ms"].is_sensitive
    default = describe_broker(both, per_broker=False)
    assert [(e.name, e.value, e.is_sensitive) for e in default] == [("custom.a", None, True)]


def test_static_config_keeps_what_server_properties_gave() -> None:
    config = KafkaConfig.from_properties(STATIC)
    assert config.static_properties == STATIC
    assert config.topic_defaults()["cleanup.policy"] == "delete"


# --- live min.insync.replicas, unclean election decision -----------------------------------


class _Log:
    log_start_offset = 0
    log_end_offset = 0
    high_watermark = 0

    def epoch_entries(self):
        return []


def test_min_insync_replicas_change_reaches_a_leading_partition() -> None:
    machine = PartitionMachine(
        1, _Log(), high_watermark=0, replica_lag_time_max_ms=30000, min_insync_replicas=1
    )
    state = PartitionLeadership(
        leader=1, leader_epoch=0, isr=(1, 2), replicas=(1, 2), zk_version=0, controller_epoch=1
    )
    machine.on_leader_and_isr(state, now_ms=0)
    assert machine.leader_state.can_accept_acks_all() is None
    machine.set_min_insync_replicas(3)
    assert machine.leader_state.can_accept_acks_all() == ErrorCode.not_enough_replicas
    machine.set_min_insync_replicas(2)
    assert machine.leader_state.can_accept_acks_all() is None
    with pytest.raises(ValueError):
        machine.set_min_insync_replicas(0)


def test_unclean_election_allowed_later_elects_the_offline_partition() -> None:
    ctx = cluster([1, 2, 3], {"t": {0: [1, 2]}, "u": {0: [1, 2]}})
    ctx = apply(decisions.on_broker_failure(ctx, [2]))
    ctx = apply(decisions.on_broker_failure(ctx, [1]))
    ctx = apply(decisions.on_broker_startup(ctx, [broker(2, epoch=300)]))
    t0, u0 = TopicPartition("t", 0), TopicPartition("u", 0)
    assert ctx.partition_leadership[t0].leader_and_isr.leader == NO_LEADER
    ctx = ctx.copy()
    ctx.unclean_leader_election_enable["t"] = True
    d = decisions.on_unclean_leader_election_enable(ctx, topics={"t"})
    after = apply(d)
    assert d.unclean_elections == [t0]
    assert after.partition_leadership[t0].leader_and_isr.leader == 2
    assert after.partition_leadership[u0].leader_and_isr.leader == NO_LEADER
    # The default turned on: every topic's offline partitions.
    after = after.copy()
    after.default_unclean_leader_election_enable = True
    again = apply(decisions.on_unclean_leader_election_enable(after))
    assert again.partition_leadership[u0].leader_and_isr.leader == 2


def test_log_config_round_trips_every_topic_key() -> None:
    cfg = LogConfig.from_properties({"cleanup.policy": "compact", "segment.ms": "10"})
    assert LogConfig.from_properties(cfg.to_properties()) == cfg
