"""New topics and partitions reach every broker's metadata when CreateTopics and
CreatePartitions return (Kafka's ``DelayedCreatePartitions`` on the receiving broker,
UpdateMetadata to every live broker in the controller's same round).

One 4-broker cluster for the file. Right after each call returns through one broker, a
new client asks every broker in turn, each on a new connection (the project's protocol
client, so the answer is that broker's own, not one librdkafka picked), and a
confluent-kafka producer bootstrapped on another broker writes to the new partitions
(the issue: "Local: Unknown partition"). With the controller stopped (SIGSTOP), the
receiving broker waits the request's timeout and answers REQUEST_TIMED_OUT for the new
topic only, as Kafka does.
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import Iterator
from datetime import timedelta
from functools import partial

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode

from cluster_util import ZkView, wait_for
from replog.cluster.launcher import LocalCluster
from replog.controller import decisions
from replog.controller.context import TopicPartition
from replog.controller.partition_modifications import on_partition_modifications
from replog.protocol.apis import ApiKey, make, nested, request_schema
from replog.protocol.client import KafkaConnection
from replog.protocol.controller_schemas import LeaderAndIsrRequest, UpdateMetadataRequest
from replog.server.delayed_topic_operations import delayed_create_partitions, delayed_delete_topics
from replog.server.metadata_cache import MetadataCache, PartitionInfo
from test_controller_decisions import apply, requests_by_type, um_partitions
from test_controller_decisions import cluster as controller_cluster

pytestmark = pytest.mark.timeout(300)

BROKERS = 4


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory) -> Iterator[LocalCluster]:
    made = LocalCluster(tmp_path_factory.mktemp("metadata-propagation"))
    try:
        made.up(BROKERS, zookeeper=f"{zookeeper.connect}/replog-{uuid.uuid4().hex[:8]}")
        yield made
    finally:
        made.down()


def create_topics_request(topics: dict[str, int], timeout_ms: int = 30_000) -> object:
    cls = request_schema(ApiKey.CREATE_TOPICS, 7)
    entries = tuple(
        make(
            nested(cls, "CreatableTopic"),
            name=name,
            num_partitions=count,
            replication_factor=3,
            assignments=(),
            configs=(),
        )
        for name, count in topics.items()
    )
    return make(
        cls, topics=entries, timeout=timedelta(milliseconds=timeout_ms), validate_only=False
    )


def create_partitions_request(topic: str, count: int, timeout_ms: int = 30_000) -> object:
    cls = request_schema(ApiKey.CREATE_PARTITIONS, 3)
    entry = make(nested(cls, "CreatePartitionsTopic"), name=topic, count=count, assignments=None)
    return make(
        cls, topics=(entry,), timeout=timedelta(milliseconds=timeout_ms), validate_only=False
    )


def metadata_request(topic: str) -> object:
    cls = request_schema(ApiKey.METADATA, 12)
    return make(
        cls,
        topics=(make(nested(cls, "MetadataRequestTopic"), name=topic, topic_id=None),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


async def _call(port: int, body: object) -> object:
    conn = KafkaConnection("127.0.0.1", port, client_id="test-metadata-propagation")
    await conn.connect()
    try:
        return await conn.request(body, timeout_s=60)
    finally:
        await conn.close()


def call(port: int, body: object) -> object:
    return asyncio.run(_call(port, body))


def led_partitions(port: int, topic: str) -> dict[int, int]:
    """Partition -> leader, as this broker's metadata answers for ``topic`` (empty when
    it does not know the topic)."""
    [answer] = call(port, metadata_request(topic)).topics
    if answer.error_code != ErrorCode.none:
        return {}
    return {p.partition_index: p.leader_id for p in answer.partitions}


def assert_every_broker_shows(cluster: LocalCluster, topic: str, count: int) -> None:
    for broker in cluster.broker_ids:
        shown = led_partitions(cluster.port(broker), topic)
        assert sorted(shown) == list(range(count)), (broker, shown)
        assert all(leader >= 0 for leader in shown.values()), (broker, shown)


def produce_to_each(bootstrap: str, topic: str, partitions: range) -> list[object]:
    """One acks=all record to each of ``partitions`` by a new producer; the errors."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 30_000}
    )
    outcomes: list[object] = []
    for partition in partitions:
        producer.produce(
            topic, b"x", partition=partition, on_delivery=lambda err, _m: outcomes.append(err)
        )
    assert producer.flush(60) == 0
    return [err for err in outcomes if err is not None]


def _info(topic: str, partition: int, leader: int) -> PartitionInfo:
    return PartitionInfo(topic, partition, leader, 0, (1, 2), (1, 2))


def test_delayed_create_completes_on_the_cache_update_and_expires_per_topic() -> None:
    """Kafka ``DelayedCreatePartitions``: the cache's update completes it (no polling);
    at the timeout, the topics still without leaders are the answer."""

    async def scenario() -> None:
        cache = MetadataCache()
        update = partial(cache.update, controller_id=1, controller_epoch=1, brokers=[])
        op = delayed_create_partitions({"a": {0, 1}, "b": {0}})
        waiting = asyncio.ensure_future(op.wait(cache, 60_000))
        await asyncio.sleep(0)
        update(partitions=[_info("a", 0, 1), _info("a", 1, -1)])
        await asyncio.sleep(0)
        assert not waiting.done() and op.waiting == {"a", "b"}
        update(partitions=[_info("a", 1, 2), _info("b", 0, 1)])
        assert await waiting == set()
        assert not cache._watchers, "a completed operation leaves the cache"
        late = delayed_create_partitions({"a": {0}, "c": {0, 1}})
        assert await late.wait(cache, 10) == {"c"}
        assert not cache._watchers, "an expired one too"
        gone = delayed_delete_topics(["a", "b"])
        deleting = asyncio.ensure_future(gone.wait(cache, 60_000))
        await asyncio.sleep(0)
        deleting.cancel()  # the request's connection went away
        with pytest.raises(asyncio.CancelledError):
            await deleting
        assert not cache._watchers

    asyncio.run(scenario())


def test_new_partitions_reach_every_live_broker_in_the_leader_and_isr_round() -> None:
    """Kafka ``onNewPartitionCreation``: the decision that elects the new partitions'
    leaders sends UpdateMetadata with them to every live broker, those holding no
    replica too, in the same batch as the LeaderAndIsr."""
    ctx = controller_cluster([1, 2, 3, 4], {})
    created = decisions.on_new_topics(ctx, {"t": {0: [1, 2], 1: [2, 3]}})
    added = on_partition_modifications(
        apply(created), "t", {0: [1, 2], 1: [2, 3], 2: [3, 1], 3: [1, 3]}
    )
    for d, partitions, replicas in (
        (created, {0, 1}, {1, 2, 3}),
        (added, {2, 3}, {1, 3}),
    ):
        requests = requests_by_type(d)
        assert set(requests) == {1, 2, 3, 4}
        for broker, sent in requests.items():
            told = um_partitions(sent[UpdateMetadataRequest])
            assert set(told) == {TopicPartition("t", p) for p in partitions}, broker
            assert all(p.leader >= 0 for p in told.values())
            assert (LeaderAndIsrRequest in sent) == (broker in replicas), broker


def test_every_broker_knows_new_topics_and_partitions_when_the_call_returns(
    cluster: LocalCluster,
) -> None:
    ids = cluster.broker_ids
    for round_ in range(2 * BROKERS):
        receiver, other = ids[round_ % BROKERS], ids[(round_ + 1) % BROKERS]
        topic = f"prop-{uuid.uuid4().hex[:8]}"
        [created] = call(cluster.port(receiver), create_topics_request({topic: 2})).topics
        assert created.error_code == ErrorCode.none, created
        assert_every_broker_shows(cluster, topic, 2)
        [added] = call(cluster.port(receiver), create_partitions_request(topic, 5)).results
        assert added.error_code == ErrorCode.none, added
        assert_every_broker_shows(cluster, topic, 5)
        # the client: a producer bootstrapped on another broker, at once
        assert produce_to_each(f"127.0.0.1:{cluster.port(other)}", topic, range(2, 5)) == []


def test_create_answers_request_timed_out_when_no_leader_comes(cluster: LocalCluster) -> None:
    """The controller stopped: no UpdateMetadata comes, so the receiving broker answers
    after the request's timeout, REQUEST_TIMED_OUT for the waiting topic only (Kafka
    ``DelayedCreatePartitions.onComplete``); the topic is created all the same once the
    controller runs again."""
    zk = ZkView(cluster)
    try:
        controller, _ = zk.controller()
    finally:
        zk.close()
    assert controller is not None
    receiver = next(b for b in cluster.broker_ids if b != controller)
    existing = f"prop-old-{uuid.uuid4().hex[:6]}"
    [made] = call(cluster.port(receiver), create_topics_request({existing: 1})).topics
    assert made.error_code == ErrorCode.none
    topic = f"prop-late-{uuid.uuid4().hex[:6]}"
    pid = cluster.broker_pid(controller)
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        answer = call(
            cluster.port(receiver),
            create_topics_request({topic: 2, existing: 1}, timeout_ms=1000),
        )
        errors = {t.name: (t.error_code, t.num_partitions) for t in answer.topics}
        assert errors == {
            topic: (ErrorCode.request_timed_out, -1),
            existing: (ErrorCode.topic_already_exists, -1),
        }
        [late] = call(
            cluster.port(receiver), create_partitions_request(existing, 3, timeout_ms=1000)
        ).results
        assert late.error_code == ErrorCode.request_timed_out
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for(
        lambda: (
            len(led_partitions(cluster.port(receiver), topic)) == 2
            and len(led_partitions(cluster.port(receiver), existing)) == 3
        ),
        60,
        "the topics to be created once the controller runs",
    )
