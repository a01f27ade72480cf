"""Dynamic topic and broker configs on real brokers, with real clients.

confluent-kafka's AdminClient describes and alters topic and broker configs; a change
made through one broker reaches every replica (retention deletes segments on the
followers too; a higher ``min.insync.replicas`` makes acks=all produce fail), survives a
restart, and the controller acts on ``unclean.leader.election.enable``. A config and
notification written straight into ZooKeeper with kazoo (as the old
``kafka-configs.sh --zookeeper`` did) is applied too. Refused requests change nothing.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)
from kio.schema.alter_configs.v2 import request as alter_v2
from kio.schema.describe_configs.v1 import request as describe_v1
from kio.schema.describe_configs.v4 import request as describe_v4
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as incremental_v1
from kio.static.primitive import i8

from clients_util import Rec, create_topic, produce_confluent, segment_bases, wait_for_leaders
from cluster_util import ZkView, leader_of, wait_for
from replog.cli.configs_cmd import CommandError, parse_add_config
from replog.protocol.client import KafkaConnection
from replog.storage.log_config import TOPIC_CONFIGS

TOPIC, BROKER = ConfigResource.Type.TOPIC, ConfigResource.Type.BROKER
SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
APPEND, SUBTRACT = AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def describe(bootstrap: str, rtype, name: str) -> dict:
    resource = ConfigResource(rtype, name)
    client = admin(bootstrap)  # kept alive until the answer is in
    return client.describe_configs([resource])[resource].result(timeout=30)


def incremental(bootstrap: str, rtype, name: str, *ops, validate_only: bool = False) -> None:
    resource = ConfigResource(
        rtype,
        name,
        incremental_configs=[
            ConfigEntry(key, value, incremental_operation=op) for key, op, value in ops
        ],
    )
    client = admin(bootstrap)
    futures = client.incremental_alter_configs(
        [resource], validate_only=validate_only, request_timeout=30
    )
    futures[resource].result(timeout=30)


def refused(call, *args, **kwargs) -> KafkaError:
    with pytest.raises(KafkaException) as err:
        call(*args, **kwargs)
    return err.value.args[0]


def zk_config(zk: ZkView, path: str) -> tuple[dict | None, int | None]:
    stat = zk.client.exists(path)
    if stat is None:
        return None, None
    data, stat = zk.client.get(path)
    return json.loads(data), stat.version


def notifications(zk: ZkView) -> list[str]:
    return sorted(zk.client.get_children("/config/changes"))


def produce_error(bootstrap: str, topic: str, value: bytes = b"probe") -> KafkaError | None:
    """One acks=all record, no retries: the broker's answer (None when acknowledged)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": False,
            "retries": 0,
            "message.timeout.ms": 20000,
        }
    )
    outcome: list[KafkaError | None] = []
    producer.produce(topic, value, on_delivery=lambda err, _msg: outcome.append(err))
    assert producer.flush(30) == 0
    return outcome[0]


async def _request(port: int, body):
    conn = KafkaConnection("127.0.0.1", port, client_id="test-configs")
    await conn.connect()
    try:
        return await conn.request(body, timeout_s=30)
    finally:
        await conn.close()


def request(port: int, body):
    return asyncio.run(_request(port, body))


# --- one broker -------------------------------------------------------------------------


def test_describe_topic_sources_synonyms_and_documentation(replog_broker) -> None:
    bootstrap = replog_broker.bootstrap_servers()
    topic = unique("described")
    create_topic(bootstrap, topic, config={"retention.ms": "123456"})
    configs = describe(bootstrap, TOPIC, topic)
    retention = configs["retention.ms"]
    assert (retention.value, retention.source) == (
        "123456",
        ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
    )
    assert not retention.is_read_only and not retention.is_sensitive
    # Kafka: log.retention.ms has no default (log.retention.hours=168 has), so no broker
    # synonym follows the topic's own (ConfigHelper drops the synonyms before its name).
    assert [(s.name, s.source) for s in retention.synonyms.values()] == [
        ("retention.ms", ConfigSource.DYNAMIC_TOPIC_CONFIG.value),
    ]
    cleanup = configs["cleanup.policy"]
    assert [(s.name, s.source) for s in cleanup.synonyms.values()] == [
        ("log.cleanup.policy", ConfigSource.DEFAULT_CONFIG.value),
    ]
    segment = configs["segment.bytes"]
    assert (segment.value, segment.source) == ("1073741824", ConfigSource.DEFAULT_CONFIG.value)
    # The broker's static settings show as such (the launcher sets this one), the
    # others as defaults.
    broker = describe(bootstrap, BROKER, "0")
    assert broker["zookeeper.session.timeout.ms"].source == (
        ConfigSource.STATIC_BROKER_CONFIG.value
    )
    assert broker["offsets.topic.replication.factor"].source == (ConfigSource.DEFAULT_CONFIG.value)
    assert broker["broker.id"].is_read_only and not broker["log.retention.ms"].is_read_only
    # Kafka's time keys in three units: the default on the hours, none on the others
    assert (broker["log.retention.hours"].value, broker["log.retention.hours"].source) == (
        "168",
        ConfigSource.DEFAULT_CONFIG.value,
    )
    assert broker["log.retention.ms"].value is None
    assert broker["log.retention.minutes"].value is None
    assert broker["log.roll.hours"].value == "168" and broker["log.roll.ms"].value is None

    # v4 (flexible) with documentation and types; v1 without.
    port = replog_broker.port(0)
    v4 = request(
        port,
        describe_v4.DescribeConfigsRequest(
            resources=(
                describe_v4.DescribeConfigsResource(
                    resource_type=i8(2), resource_name=topic, configuration_keys=("retention.ms",)
                ),
            ),
            include_synonyms=False,
            include_documentation=True,
        ),
    )
    [entry] = v4.results[0].configs
    assert (entry.name, entry.value, entry.config_source, entry.config_type) == (
        "retention.ms",
        "123456",
        1,
        5,  # LONG
    )
    assert entry.documentation == TOPIC_CONFIGS["retention.ms"].documentation
    assert entry.synonyms == ()
    v1 = request(
        port,
        describe_v1.DescribeConfigsRequest(
            resources=(
                describe_v1.DescribeConfigsResource(
                    resource_type=i8(2), resource_name=topic, configuration_keys=None
                ),
            ),
            include_synonyms=True,
        ),
    )
    assert {c.name: c.value for c in v1.results[0].configs}["retention.ms"] == "123456"


def test_incremental_alter_writes_kafkas_znodes_and_applies(replog_broker) -> None:
    bootstrap = replog_broker.bootstrap_servers()
    topic = unique("incremental")
    create_topic(bootstrap, topic, config={"segment.ms": "100000"})
    zk = ZkView(replog_broker)
    try:
        before = set(notifications(zk))
        incremental(
            bootstrap,
            TOPIC,
            topic,
            ("retention.ms", SET, "5000"),
            ("segment.ms", DELETE, None),
            ("cleanup.policy", APPEND, "compact"),
        )
        config, _ = zk_config(zk, f"/config/topics/{topic}")
        assert config == {
            "version": 1,
            "config": {"retention.ms": "5000", "cleanup.policy": "delete,compact"},
        }
        new = sorted(set(notifications(zk)) - before)
        assert new and all(n.startswith("config_change_") for n in new)
        bodies = [json.loads(zk.client.get(f"/config/changes/{n}")[0]) for n in new]
        assert {"version": 2, "entity_path": f"topics/{topic}"} in bodies
        configs = describe(bootstrap, TOPIC, topic)
        assert configs["retention.ms"].value == "5000"
        assert configs["segment.ms"].source == ConfigSource.DEFAULT_CONFIG.value
        assert configs["cleanup.policy"].value == "compact,delete"
        incremental(bootstrap, TOPIC, topic, ("cleanup.policy", SUBTRACT, "compact"))
        assert describe(bootstrap, TOPIC, topic)["cleanup.policy"].value == "delete"
        # A record bigger than a lowered max.message.bytes is refused at once.
        incremental(bootstrap, TOPIC, topic, ("max.message.bytes", SET, "200"))
        big = b"x" * 1000
        wait_for(
            lambda: produce_error(bootstrap, topic, big) is not None,
            30,
            "max.message.bytes to apply",
            interval_s=0.5,
        )
        assert produce_error(bootstrap, topic, big).code() == KafkaError.MSG_SIZE_TOO_LARGE
        assert produce_error(bootstrap, topic) is None, "a small record still fits"
    finally:
        zk.close()


def test_alter_configs_replaces_the_whole_config(replog_broker) -> None:
    bootstrap = replog_broker.bootstrap_servers()
    topic = unique("replaced")
    create_topic(bootstrap, topic, config={"retention.ms": "100000", "segment.ms": "200000"})
    resource = ConfigResource(TOPIC, topic, set_config={"retention.bytes": "4096"})
    client = admin(bootstrap)
    with pytest.warns(DeprecationWarning):
        futures = client.alter_configs([resource], request_timeout=30)
    futures[resource].result(timeout=30)
    configs = describe(bootstrap, TOPIC, topic)
    assert configs["retention.bytes"].value == "4096"
    dynamic = {n for n, c in configs.items() if c.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
    assert dynamic == {"retention.bytes"}, "the earlier overrides are gone"


def test_refused_requests_change_nothing(replog_broker) -> None:
    bootstrap = replog_broker.bootstrap_servers()
    topic = unique("guarded")
    create_topic(bootstrap, topic, config={"retention.ms": "100000"})
    zk = ZkView(replog_broker)
    try:
        path = f"/config/topics/{topic}"
        before, version = zk_config(zk, path)
        changes = notifications(zk)

        missing = unique("missing")
        err = refused(describe, bootstrap, TOPIC, missing)
        assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        err = refused(incremental, bootstrap, TOPIC, missing, ("retention.ms", SET, "1"))
        assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        assert zk.client.exists(f"/config/topics/{missing}") is None

        err = refused(incremental, bootstrap, TOPIC, topic, ("retention.mss", SET, "1"))
        assert err.code() == KafkaError.INVALID_CONFIG
        assert "Unknown topic config name: retention.mss" in err.str()
        err = refused(
            incremental,
            bootstrap,
            TOPIC,
            topic,
            ("segment.ms", SET, "1000"),  # valid, but the request fails as a whole
            ("min.insync.replicas", SET, "none"),
        )
        assert err.code() == KafkaError.INVALID_CONFIG
        assert "min.insync.replicas" in err.str()
        err = refused(incremental, bootstrap, TOPIC, topic, ("segment.ms", APPEND, "5"))
        assert err.code() == KafkaError.INVALID_CONFIG
        # validate_only: a valid change is accepted and not made.
        incremental(bootstrap, TOPIC, topic, ("retention.ms", SET, "1"), validate_only=True)
        err = refused(
            incremental, bootstrap, TOPIC, topic, ("retention.ms", SET, "x"), validate_only=True
        )
        assert err.code() == KafkaError.INVALID_CONFIG

        # Broker configs Kafka cannot change at run time; another broker's configs.
        err = refused(incremental, bootstrap, BROKER, "0", ("broker.id", SET, "7"))
        assert err.code() == KafkaError.INVALID_REQUEST
        assert "Cannot update these configs dynamically: broker.id" in err.str()
        err = refused(incremental, bootstrap, BROKER, "0", ("log.retention.ms", SET, "soon"))
        assert err.code() == KafkaError.INVALID_REQUEST
        other = request(
            replog_broker.port(0),
            incremental_v1.IncrementalAlterConfigsRequest(
                resources=(
                    incremental_v1.AlterConfigsResource(
                        resource_type=i8(4),
                        resource_name="5",
                        configs=(
                            incremental_v1.AlterableConfig(
                                name="log.retention.ms", config_operation=i8(0), value="1"
                            ),
                        ),
                    ),
                ),
                validate_only=False,
            ),
        )
        assert other.responses[0].error_code == ErrorCode.invalid_request
        assert "Unexpected broker id" in other.responses[0].error_message

        assert zk_config(zk, path) == (before, version)
        assert zk.client.exists("/config/brokers/0") is None
        assert notifications(zk) == changes
        assert describe(bootstrap, TOPIC, topic)["retention.ms"].value == "100000"
    finally:
        zk.close()


# --- a cluster ----------------------------------------------------------------------------


def segment_counts(cluster, topic: str) -> dict[int, int]:
    return {b: len(segment_bases(cluster.broker_dir(b), topic, 0)) for b in cluster.broker_ids}


def test_a_change_reaches_every_replica_and_survives_restarts(cluster_factory) -> None:
    cluster = cluster_factory(3, overrides={"log.retention.check.interval.ms": "300"})
    bootstrap = cluster.bootstrap_servers()
    topic = unique("replicated")
    client = admin(bootstrap)
    futures = client.create_topics(
        [NewTopic(topic, 1, 3, config={"segment.bytes": "1024"})], operation_timeout=30
    )
    futures[topic].result(timeout=60)
    wait_for_leaders(bootstrap, {topic: 1})
    now = int(time.time() * 1000)
    records = [Rec(0, -1, None, b"x" * 200, (), now) for _ in range(60)]
    produce_confluent(bootstrap, topic, records, acks="all", **{"batch.num.messages": 1})
    wait_for(
        lambda: min(segment_counts(cluster, topic).values()) >= 5,
        60,
        "segments on every replica",
    )
    assert produce_error(bootstrap, topic) is None

    # Through broker 2 only: every replica applies it.
    incremental(cluster.bootstrap_servers([2]), TOPIC, topic, ("retention.ms", SET, "1000"))
    wait_for(
        lambda: max(segment_counts(cluster, topic).values()) <= 2,
        60,
        "retention to delete segments on the leader and both followers",
    )
    incremental(cluster.bootstrap_servers([1]), TOPIC, topic, ("min.insync.replicas", SET, "4"))
    wait_for(
        lambda: produce_error(bootstrap, topic) is not None,
        30,
        "min.insync.replicas=4 to apply",
        interval_s=0.5,
    )
    assert produce_error(bootstrap, topic).code() == KafkaError.NOT_ENOUGH_REPLICAS

    for broker_id in cluster.broker_ids:
        cluster.stop_broker(broker_id)
    for broker_id in cluster.broker_ids:
        cluster.start_broker(broker_id, wait=False)
    cluster.wait_until_ready(cluster.broker_ids, 60)
    wait_for_leaders(bootstrap, {topic: 1})
    err = produce_error(bootstrap, topic)
    assert err is not None and err.code() == KafkaError.NOT_ENOUGH_REPLICAS
    for broker_id in cluster.broker_ids:
        configs = describe(cluster.bootstrap_servers([broker_id]), TOPIC, topic)
        assert configs["min.insync.replicas"].value == "4"
        assert configs["retention.ms"].value == "1000"

    incremental(bootstrap, TOPIC, topic, ("min.insync.replicas", DELETE, None))
    wait_for(
        lambda: produce_error(bootstrap, topic) is None,
        30,
        "acks=all produce to work again",
        interval_s=0.5,
    )


def test_configs_written_straight_to_zookeeper_are_applied(cluster_factory) -> None:
    cluster = cluster_factory(2)
    bootstrap = cluster.bootstrap_servers()
    topic = unique("kazoo")
    client = admin(bootstrap)
    futures = client.create_topics([NewTopic(topic, 1, 2)], operation_timeout=30)
    futures[topic].result(timeout=60)
    wait_for_leaders(bootstrap, {topic: 1})
    assert produce_error(bootstrap, topic) is None
    zk = ZkView(cluster)

    def write(path: str, config: dict, note: dict) -> None:
        zk.client.set(path, json.dumps({"version": 1, "config": config}).encode())
        zk.client.create("/config/changes/config_change_", json.dumps(note).encode(), sequence=True)

    try:
        # What kafka-configs.sh --zookeeper wrote: the config, then a v2 notification.
        write(
            f"/config/topics/{topic}",
            {"min.insync.replicas": "3"},
            {"version": 2, "entity_path": f"topics/{topic}"},
        )
        wait_for(
            lambda: produce_error(bootstrap, topic) is not None,
            30,
            "the topic's new config to apply",
            interval_s=0.5,
        )
        assert produce_error(bootstrap, topic).code() == KafkaError.NOT_ENOUGH_REPLICAS
        # Kafka before 1.1 wrote version 1 notifications.
        write(
            f"/config/topics/{topic}",
            {},
            {"version": 1, "entity_type": "topics", "entity_name": topic},
        )
        wait_for(
            lambda: produce_error(bootstrap, topic) is None,
            30,
            "the override to go",
            interval_s=0.5,
        )
        # The cluster-wide broker default, for topics without an override.
        zk.client.create(
            "/config/brokers/<default>",
            json.dumps({"version": 1, "config": {"min.insync.replicas": "3"}}).encode(),
        )
        zk.client.create(
            "/config/changes/config_change_",
            json.dumps({"version": 2, "entity_path": "brokers/<default>"}).encode(),
            sequence=True,
        )
        wait_for(
            lambda: produce_error(bootstrap, topic) is not None,
            30,
            "the broker default to apply",
            interval_s=0.5,
        )
        assert produce_error(bootstrap, topic).code() == KafkaError.NOT_ENOUGH_REPLICAS
        isr = describe(bootstrap, TOPIC, topic)["min.insync.replicas"]
        assert (isr.value, isr.source) == ("3", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    finally:
        zk.close()


def test_unclean_leader_election_enabled_live_elects_a_leader(cluster_factory) -> None:
    cluster = cluster_factory(3)
    bootstrap = cluster.bootstrap_servers()
    topic = unique("unclean")
    client = admin(bootstrap)
    futures = client.create_topics(
        [NewTopic(topic, 1, replica_assignment=[[0, 1]])], operation_timeout=30
    )
    futures[topic].result(timeout=60)
    wait_for_leaders(bootstrap, {topic: 1})
    produce_confluent(bootstrap, topic, [Rec(0, -1, None, b"v", (), int(time.time() * 1000))])
    zk = ZkView(cluster)
    try:
        cluster.stop_broker(1)  # the follower leaves the ISR
        wait_for(lambda: zk.partition_state(topic, 0)["isr"] == [0], 30, "ISR [0]")
        cluster.stop_broker(0)  # the only in-sync replica: the partition goes offline
        wait_for(lambda: leader_of(zk, topic, 0) == -1, 30, "no leader")
        cluster.start_broker(1)
        time.sleep(3)
        assert leader_of(zk, topic, 0) == -1, "no unclean election while the topic forbids it"
        incremental(
            cluster.bootstrap_servers([2]),
            TOPIC,
            topic,
            ("unclean.leader.election.enable", SET, "true"),
        )
        wait_for(lambda: leader_of(zk, topic, 0) == 1, 30, "broker 1 elected uncleanly")
        assert zk.partition_state(topic, 0)["isr"] == [1]
    finally:
        zk.close()


# --- replog configs (kafka-configs.sh) ------------------------------------------------------


def replog_configs(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "replog.cli.main", "configs", "--bootstrap-server", bootstrap,
         *args],
        capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip


def test_parse_add_config_keeps_bracketed_lists() -> None:
    assert parse_add_config("retention.ms=1000, cleanup.policy=[compact,delete],x=a=b") == {
        "retention.ms": "1000",
        "cleanup.policy": "compact,delete",
        "x": "a=b",
    }
    with pytest.raises(CommandError):
        parse_add_config("retention.ms")


def test_configs_command(replog_broker) -> None:
    bootstrap = replog_broker.bootstrap_servers()
    topic = unique("cli")
    create_topic(bootstrap, topic, config={"segment.ms": "100000"})
    entity = ("--entity-type", "topics", "--entity-name", topic)

    done = replog_configs(
        bootstrap, *entity, "--alter",
        "--add-config", "retention.ms=60000,cleanup.policy=[compact,delete]",
        "--delete-config", "segment.ms",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"Completed updating config for topic {topic}.\n"
    shown = replog_configs(bootstrap, *entity, "--describe")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == f"Dynamic configs for topic {topic} are:"
    assert sorted(lines[1:]) == [
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
        "cleanup.policy=compact,delete, DEFAULT_CONFIG:log.cleanup.policy=delete}",
        "  retention.ms=60000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=60000}",
    ]
    every = replog_configs(bootstrap, *entity, "--describe", "--all")
    assert every.stdout.splitlines()[0] == f"All configs for topic {topic} are:"
    assert any(line.startswith("  segment.bytes=1073741824 ") for line in every.stdout.splitlines())

    # The cluster-wide broker default, then this broker's own.
    default = ("--entity-type", "brokers", "--entity-default")
    try:
        done = replog_configs(bootstrap, *default, "--alter", "--add-config", "log.roll.ms=3600000")
        assert done.returncode == 0, done.stderr
        assert done.stdout == "Completed updating default config for brokers in the cluster.\n"
        # DescribeConfigs answers the applied configs (Kafka): once the change
        # notification has reached the broker
        wait_for(
            lambda: describe(bootstrap, TOPIC, topic)["segment.ms"].value == "3600000",
            30,
            "the broker default to apply",
        )
        shown = replog_configs(bootstrap, *default, "--describe")
        assert shown.stdout.splitlines() == [
            "Default configs for brokers in the cluster are:",
            "  log.roll.ms=3600000 sensitive=false "
            "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.roll.ms=3600000}",
        ]
        mine = replog_configs(
            bootstrap, "--entity-type", "brokers", "--entity-name", "0", "--describe", "--all"
        )
        assert mine.returncode == 0, mine.stderr
        assert mine.stdout.splitlines()[0] == "All configs for broker 0 are:"
        assert "  log.roll.ms=3600000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:" in (
            mine.stdout
        )
    finally:
        replog_configs(bootstrap, *default, "--alter", "--delete-config", "log.roll.ms")
    wait_for(
        lambda: describe(bootstrap, TOPIC, topic)["segment.ms"].value == "604800000",
        30,
        "the broker default to go",
    )

    # Failures: one line, exit 1, nothing changed.
    for args, reason in [
        (("--entity-type", "topics", "--entity-name", unique("nope"), "--describe"),
         "UNKNOWN_TOPIC_OR_PARTITION"),
        ((*entity, "--alter", "--add-config", "retention.ms=soon"), "INVALID_CONFIG"),
        ((*entity, "--alter", "--add-config", "no.such.key=1"), "INVALID_CONFIG"),
        (("--entity-type", "brokers", "--entity-name", "0", "--alter", "--add-config",
          "broker.id=3"), "INVALID_REQUEST"),
        (("--entity-type", "brokers", "--entity-name", "9", "--describe"), "not in the cluster"),
        ((*entity, "--alter"), "--add-config or --delete-config"),
    ]:  # fmt: skip
        failed = replog_configs(bootstrap, *args)
        assert failed.returncode == 1, (args, failed.stdout)
        assert len(failed.stderr.strip().splitlines()) == 1, failed.stderr
        assert reason in failed.stderr, (args, failed.stderr)
    assert describe(bootstrap, TOPIC, topic)["retention.ms"].value == "60000"


def test_unknown_broker_config_names_are_stored_and_described_as_kafka(replog_broker) -> None:
    """Kafka ``DynamicBrokerConfig.validate`` refuses only known static names: an unknown
    one is written to ZooKeeper as given, and DescribeConfigs lists it as sensitive and
    read-only (``ConfigHelper``: a config without a known type may be a secret)."""
    bootstrap = replog_broker.bootstrap_servers()
    zk = ZkView(replog_broker)
    try:
        incremental(
            bootstrap,
            BROKER,
            "0",
            ("custom.plugin.setting", SET, "on"),
            ("log.index.interval.bytes", SET, "8192"),
        )
        config, _ = zk_config(zk, "/config/brokers/0")
        assert config == {
            "version": 1,
            "config": {"custom.plugin.setting": "on", "log.index.interval.bytes": "8192"},
        }
        entry = wait_for(
            lambda: describe(bootstrap, BROKER, "0").get("custom.plugin.setting"),
            30,
            "the unknown name to be applied",
        )
        assert (entry.value, entry.is_sensitive, entry.is_read_only) == (None, True, True)
        assert entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
        # the legacy AlterConfigs (the whole config) takes one too, at the default level
        # (the empty resource name, which confluent-kafka cannot send)
        altered = request(
            replog_broker.port(0),
            alter_v2.AlterConfigsRequest(
                resources=(
                    alter_v2.AlterConfigsResource(
                        resource_type=i8(4),
                        resource_name="",
                        configs=(alter_v2.AlterableConfig(name="another.unknown", value="x"),),
                    ),
                ),
                validate_only=False,
            ),
        )
        assert altered.responses[0].error_code == ErrorCode.none
        config, _ = zk_config(zk, "/config/brokers/<default>")
        assert config == {"version": 1, "config": {"another.unknown": "x"}}

        def described_default():
            answer = request(
                replog_broker.port(0),
                describe_v4.DescribeConfigsRequest(
                    resources=(
                        describe_v4.DescribeConfigsResource(
                            resource_type=i8(4), resource_name="", configuration_keys=None
                        ),
                    ),
                ),
            )
            entries = {c.name: c for c in answer.results[0].configs}
            return entries.get("another.unknown")

        default = wait_for(described_default, 30, "the default-level unknown name to apply")
        assert (default.value, default.is_sensitive, default.read_only) == (None, True, True)
        assert default.config_source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    finally:
        zk.close()


def test_describe_configs_answers_the_applied_broker_config(replog_broker) -> None:
    """Kafka answers a broker's DescribeConfigs from the config it runs with: a znode
    changed without a change notification is not applied, so not described; its
    notification applies and shows it."""
    bootstrap = replog_broker.bootstrap_servers()
    zk = ZkView(replog_broker)
    path = "/config/brokers/0"
    try:
        before = describe(bootstrap, BROKER, "0")["log.index.interval.bytes"].value
        body = json.dumps({"version": 1, "config": {"log.index.interval.bytes": "8000"}})
        if zk.client.exists(path) is None:
            zk.client.create(path, body.encode())
        else:
            zk.client.set(path, body.encode())
        assert describe(bootstrap, BROKER, "0")["log.index.interval.bytes"].value == before
        zk.client.create(
            "/config/changes/config_change_",
            json.dumps({"version": 2, "entity_path": "brokers/0"}).encode(),
            sequence=True,
        )
        applied = wait_for(
            lambda: (
                describe(bootstrap, BROKER, "0")["log.index.interval.bytes"].value == "8000"
                and describe(bootstrap, BROKER, "0")["log.index.interval.bytes"]
            ),
            30,
            "the notified change to apply",
        )
        assert applied.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    finally:
        zk.close()
