"""One group shared by old and new consumers (KIP-848's online upgrade and downgrade,
``group.consumer.migration.policy`` at Kafka 4.0's default, bidirectional) on a 3-broker
cluster and a 6-partition RF 3 topic: a kafka-python and an aiokafka member (classic
protocol, each in a process of its own, ``classic_member_child.py``) form a classic
group; three librdkafka ``group.protocol=consumer`` members join it, which converts it
to a consumer group, and the five share the partitions, each held by exactly one; the
coordinator's broker is SIGKILLed part way and the group resumes on the new
coordinator; when the new-protocol members leave, the group goes back to classic and
the classic members take every partition. Every record produced is consumed, and the
commits are kept.

The brokers run with a short consumer session (3 s, its minimum lowered) and heartbeat
interval (300 ms) so the losses are noticed quickly.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from mixed_group_util import (
    TOPIC,
    ClassicMember,
    NewMember,
    each_partition_once,
    poll_until,
    wait_type,
)
from replog.common.topics import GROUP_METADATA_TOPIC_NAME
from replog.coordinator.group.offsets_topic import partition_for

PARTITIONS = 6
OFFSETS_PARTITIONS = 3


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    from replog.cluster.launcher import LocalCluster

    c = LocalCluster(tmp_path_factory.mktemp("mixed"))
    try:
        c.up(
            3,
            zookeeper=f"{zookeeper.connect}/replog-{uuid.uuid4().hex[:8]}",
            overrides={
                "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
                "group.consumer.session.timeout.ms": "3000",
                "group.consumer.min.session.timeout.ms": "1000",
                "group.consumer.heartbeat.interval.ms": "300",
                "group.consumer.min.heartbeat.interval.ms": "100",
                "group.initial.rebalance.delay.ms": "0",
            },
        )
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers()})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
        yield c
    finally:
        c.down()


def _produce(bootstrap: str, tag: str, count: int) -> set[str]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    values = [f"{tag}-{i}" for i in range(count)]
    for i, value in enumerate(values):  # every partition gets records
        producer.produce(TOPIC, value=value.encode(), partition=i % PARTITIONS)
    assert producer.flush(60) == 0
    return set(values)


def test_a_mixed_group_converts_both_ways_and_survives_its_coordinator(cluster) -> None:
    bootstrap = cluster.bootstrap_servers()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    group = f"mixed-{uuid.uuid4().hex[:6]}"
    classic = [
        ClassicMember("kafka-python", bootstrap, group, "kafka-python"),
        ClassicMember("aiokafka", bootstrap, group, "aiokafka"),
    ]
    new: list[NewMember] = []
    killed = None
    produced: set[str] = set()

    def consumed() -> set[str]:
        return {v for m in [*classic, *new] for v in m.values}

    try:
        # 1. A classic group of the two classic clients.
        poll_until([], lambda: each_partition_once(classic), 60, "the classic group")
        wait_type([], admin, group, ConsumerGroupType.CLASSIC)

        # 2. Three new-protocol members join: the group is converted and the five share.
        new = [NewMember(bootstrap, group, f"new-{i}") for i in range(3)]
        everyone = [*classic, *new]

        # Reconciling passes through uneven shares (a partition moves once released):
        # wait for the uniform assignor's 2/1/1/1/1.
        def shared() -> bool:
            sizes = sorted(len(m.assigned) for m in everyone)
            return each_partition_once(everyone) and sizes == [1, 1, 1, 1, 2]

        poll_until(new, shared, 90, "five members share")
        wait_type(new, admin, group, ConsumerGroupType.CONSUMER)

        produced |= _produce(bootstrap, f"{group}-a", 300)
        poll_until(new, lambda: produced <= consumed(), 60, "the first records read")

        # 3. The coordinator's broker is SIGKILLed; the group resumes on another one.
        meta = admin.list_topics(timeout=30)
        offsets_partition = partition_for(group, OFFSETS_PARTITIONS)
        killed = meta.topics[GROUP_METADATA_TOPIC_NAME].partitions[offsets_partition].leader
        cluster.kill_broker(killed)
        produced |= _produce(bootstrap, f"{group}-b", 300)
        poll_until(new, lambda: produced <= consumed(), 120, "the records after the kill")
        poll_until(new, shared, 90, "five share after the kill")
        wait_type(new, admin, group, ConsumerGroupType.CONSUMER)
        leader = admin.list_topics(timeout=30).topics[GROUP_METADATA_TOPIC_NAME]
        assert leader.partitions[offsets_partition].leader not in (killed, -1)

        # 4. The new-protocol members leave one by one; after the last, the group is
        # classic again and the classic members hold every partition.
        for i, member in enumerate(new):
            member.close()
            rest = [*classic, *new[i + 1 :]]
            poll_until(new, lambda rest=rest: each_partition_once(rest), 90, f"{i + 1} left")
        wait_type([], admin, group, ConsumerGroupType.CLASSIC)
        produced |= _produce(bootstrap, f"{group}-c", 100)
        poll_until([], lambda: produced <= consumed(), 60, "the records after the downgrade")

        # 5. The commits are kept: the group's committed offsets reach every partition's end.
        reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        try:
            tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
            ends = {p: reader.get_watermark_offsets(tps[p], timeout=30)[1] for p in range(6)}

            committed: dict[int, int] = {}

            def committed_to_the_end() -> bool:
                got = reader.committed(tps, timeout=30)
                committed.update({tp.partition: tp.offset for tp in got})
                return committed == ends

            try:
                poll_until([], committed_to_the_end, 60, "commits at the end offsets")
            except AssertionError:
                errors = [line for m in classic for line in m.lines if '"error"' in line]
                raise AssertionError(f"committed {committed}, ends {ends}; {errors[-5:]}") from None
        finally:
            reader.close()
        # Each coordinator says what it converted (the killed one's log included).
        logs = "".join(
            (cluster.broker_dir(b) / "broker.log").read_text(errors="replace")
            for b in cluster.broker_ids
        )
        assert f"group {group}: converted from a classic group to a consumer group" in logs
        assert f"group {group}: converted from a consumer group to a classic group" in logs
    finally:
        for member in new:
            member.close()
        for member in classic:
            member.stop()
        if killed is not None:
            cluster.start_broker(killed)
