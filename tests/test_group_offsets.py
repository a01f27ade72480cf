"""Committed offsets on replicated ``__consumer_offsets``, through real clients.

FindCoordinator creates the offsets topic on first use; OffsetCommit is acknowledged
after the commit is on every in-sync replica; OffsetFetch, OffsetDelete and
DeleteGroups answer as Kafka does; a commit survives a kill -9 of the coordinator.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from kio.static.primitive import i8

from group_util import commit
from replog.common.topics import GROUP_METADATA_TOPIC_NAME
from replog.coordinator.group.offsets_topic import partition_for

TOPIC = "orders"


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    from replog.cluster.launcher import LocalCluster

    c = LocalCluster(tmp_path_factory.mktemp("group-offsets"))
    try:
        c.up(
            3,
            zookeeper=f"{zookeeper.connect}/replog-{uuid.uuid4().hex[:8]}",
            overrides={"offsets.topic.num.partitions": "6"},
        )
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers()})
        admin.create_topics([NewTopic(TOPIC, 4, 3)])[TOPIC].result(30)
        yield c
    finally:
        c.down()


def _consumer(cluster, group: str, **extra) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers(),
            "group.id": group,
            "enable.auto.commit": False,
            **extra,
        }
    )


def test_commit_then_fetch_across_consumers(cluster) -> None:
    group = f"g-{uuid.uuid4().hex[:6]}"
    first = _consumer(cluster, group)
    try:
        result = commit(first, [TopicPartition(TOPIC, 0, 42), TopicPartition(TOPIC, 3, 7)])
        assert all(tp.error is None for tp in result)
    finally:
        first.close()
    second = _consumer(cluster, group)
    try:
        got = second.committed([TopicPartition(TOPIC, p) for p in range(4)], timeout=30)
        assert {tp.partition: tp.offset for tp in got} == {0: 42, 1: -1001, 2: -1001, 3: 7}
    finally:
        second.close()


def test_offsets_topic_is_internal_compacted_and_replicated(cluster) -> None:
    consumer = _consumer(cluster, f"g-{uuid.uuid4().hex[:6]}")
    try:
        commit(consumer, [TopicPartition(TOPIC, 0, 1)])  # the first commit creates the topic
    finally:
        consumer.close()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()})
    meta = admin.list_topics(timeout=30)
    assert GROUP_METADATA_TOPIC_NAME in meta.topics
    topic = meta.topics[GROUP_METADATA_TOPIC_NAME]
    assert len(topic.partitions) == 6
    assert all(len(p.replicas) == 3 for p in topic.partitions.values())
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource("topic", GROUP_METADATA_TOPIC_NAME)
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["cleanup.policy"].value == "compact"


def _find_coordinator(cluster, group: str):
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest

    from replog.protocol.client import KafkaConnection

    async def ask():
        conn = KafkaConnection("127.0.0.1", cluster.port(cluster.broker_ids[0]))
        await conn.connect()
        try:
            response = await conn.request(
                FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(group,))
            )
        finally:
            await conn.close()
        return response.coordinators[0]

    return asyncio.run(ask())


def test_coordinator_is_the_leader_of_the_groups_partition(cluster) -> None:
    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = _consumer(cluster, group)
    try:
        commit(consumer, [TopicPartition(TOPIC, 1, 5)])
    finally:
        consumer.close()
    meta = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()}).list_topics(timeout=30)
    leader = meta.topics[GROUP_METADATA_TOPIC_NAME].partitions[partition_for(group, 6)].leader
    coordinator = _find_coordinator(cluster, group)
    assert coordinator.error_code == 0
    assert (int(coordinator.node_id), int(coordinator.port)) == (leader, cluster.port(leader))


def test_commit_to_unknown_partition_is_refused(cluster) -> None:
    consumer = _consumer(cluster, f"g-{uuid.uuid4().hex[:6]}")
    try:
        with pytest.raises(KafkaException) as err:
            commit(consumer, [TopicPartition("no-such-topic", 0, 1)])
        assert "UNKNOWN_TOPIC_OR_PART" in str(err.value)
    finally:
        consumer.close()


def test_delete_group_removes_its_offsets(cluster) -> None:
    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = _consumer(cluster, group)
    try:
        commit(consumer, [TopicPartition(TOPIC, 2, 9)])
    finally:
        consumer.close()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()})

    def committed() -> dict[tuple[str, int], int]:
        request = [ConsumerGroupTopicPartitions(group)]
        result = admin.list_consumer_group_offsets(request)[group].result(30)
        return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions}

    assert committed() == {(TOPIC, 2): 9}
    admin.delete_consumer_groups([group])[group].result(30)
    assert committed() == {}
    with pytest.raises(KafkaException) as err:
        admin.delete_consumer_groups([group])[group].result(30)
    assert err.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND


def test_committed_offsets_survive_a_coordinator_kill(cluster) -> None:
    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = _consumer(cluster, group)
    try:
        commit(consumer, [TopicPartition(TOPIC, 0, 1234)])
    finally:
        consumer.close()
    meta = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()}).list_topics(timeout=30)
    leader = meta.topics[GROUP_METADATA_TOPIC_NAME].partitions[partition_for(group, 6)].leader
    cluster.kill_broker(leader)
    try:
        consumer = _consumer(cluster, group)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    [tp] = consumer.committed([TopicPartition(TOPIC, 0)], timeout=10)
                    if tp.offset == 1234:
                        break
                except KafkaException:
                    pass
                assert time.monotonic() < deadline, "the new coordinator never served the group"
                time.sleep(0.2)
        finally:
            consumer.close()
    finally:
        cluster.start_broker(leader)


def test_offset_delete_removes_only_the_partitions_named(cluster) -> None:
    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartition as KafkaTopicPartition

    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = _consumer(cluster, group)
    try:
        commit(consumer, [TopicPartition(TOPIC, p, 10 + p) for p in range(3)])
    finally:
        consumer.close()
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers())
    try:
        result = admin.delete_group_offsets(group, [KafkaTopicPartition(TOPIC, 1)])
        assert all(error is None or error.errno == 0 for error in result.values()), result
    finally:
        admin.close()
    reader = _consumer(cluster, group)
    try:
        got = reader.committed([TopicPartition(TOPIC, p) for p in range(3)], timeout=30)
        assert {tp.partition: tp.offset for tp in got} == {0: 10, 1: -1001, 2: 12}
    finally:
        reader.close()


def test_clients_cannot_write_the_offsets_topic(cluster) -> None:
    from confluent_kafka import Producer

    consumer = _consumer(cluster, f"g-{uuid.uuid4().hex[:6]}")
    try:
        commit(consumer, [TopicPartition(TOPIC, 0, 1)])  # the topic exists
    finally:
        consumer.close()
    errors = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers()})
    producer.produce(
        GROUP_METADATA_TOPIC_NAME,
        key=b"\x00\x01garbage",
        value=b"garbage",
        partition=0,
        on_delivery=lambda err, _msg: errors.append(err),
    )
    producer.flush(30)
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == KafkaError.TOPIC_EXCEPTION
