"""kafkajs, a pure-JavaScript client, against a real broker: admin calls and an idempotent producer.

kafkajs speaks older, non-flexible versions of most APIs (Metadata v6, ListOffsets v3,
DeleteRecords v1, DescribeConfigs v2...), so these tests also hold the lower ends of the
version ranges to what clients in the wild still send.
"""

from __future__ import annotations

import pytest

from clients_util import create_topic, watermarks
from kafkajs_util import KafkajsError, kafkajs, require_kafkajs
from replog.cluster.launcher import LocalCluster

TOPIC = "kafkajs-admin"


@pytest.fixture(scope="module")
def bootstrap(replog_broker: LocalCluster) -> str:
    require_kafkajs()
    servers = replog_broker.bootstrap_servers()
    create_topic(servers, TOPIC, partitions=3, config={"retention.ms": "3600000"})
    return servers


def test_describe_cluster(bootstrap: str, replog_broker: LocalCluster) -> None:
    cluster = kafkajs(bootstrap, "describeCluster")
    [broker_id] = replog_broker.broker_ids
    assert [b["nodeId"] for b in cluster["brokers"]] == [broker_id]
    assert cluster["brokers"][0]["port"] == replog_broker.port(broker_id)
    assert cluster["controller"] == broker_id
    assert cluster["clusterId"]


def test_topic_metadata_and_offsets_after_producing(bootstrap: str) -> None:
    [meta] = kafkajs(bootstrap, "fetchTopicMetadata", topics=[TOPIC])["topics"]
    assert meta["name"] == TOPIC
    assert sorted(p["partitionId"] for p in meta["partitions"]) == [0, 1, 2]
    before = {
        int(o["partition"]): int(o["high"])
        for o in kafkajs(bootstrap, "fetchTopicOffsets", topic=TOPIC)
    }
    sent = kafkajs(
        bootstrap,
        "produce",
        topic=TOPIC,
        messages=[{"key": f"k{i}", "value": f"v{i}", "partition": i % 3} for i in range(30)],
    )
    assert {r["errorCode"] for r in sent} == {0}
    offsets = kafkajs(bootstrap, "fetchTopicOffsets", topic=TOPIC)
    after = {int(o["partition"]): (int(o["low"]), int(o["high"])) for o in offsets}
    assert {p: high - before[p] for p, (_low, high) in after.items()} == {0: 10, 1: 10, 2: 10}
    # The same answer through librdkafka.
    assert {p: watermarks(bootstrap, TOPIC, p) for p in range(3)} == after


def test_describe_configs(bootstrap: str) -> None:
    result = kafkajs(bootstrap, "describeConfigs", topic=TOPIC, configNames=["retention.ms"])
    [resource] = result["resources"]
    assert resource["errorCode"] == 0
    entries = {e["configName"]: e["configValue"] for e in resource["configEntries"]}
    assert entries == {"retention.ms": "3600000"}


def test_unknown_topic_is_an_error(bootstrap: str) -> None:
    with pytest.raises(KafkajsError, match="does not host this topic-partition|UNKNOWN_TOPIC"):
        kafkajs(bootstrap, "fetchTopicOffsets", topic="kafkajs-no-such-topic")
