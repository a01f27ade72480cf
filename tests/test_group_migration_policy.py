"""``group.consumer.migration.policy=disabled`` against real clients (one broker): a
librdkafka ``group.protocol=consumer`` member joining a classic group of a kafka-python
member is refused with GROUP_ID_NOT_FOUND ("online upgrade is disabled"), a fatal error
for librdkafka, and the group stays classic; a consumer group whose last new-protocol
member leaves stays a consumer group, its classic member holding every partition. The
policy's other values are tested on the coordinator core (``test_group_conversion.py``).
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, KafkaError
from confluent_kafka.admin import AdminClient, NewTopic

from mixed_group_util import TOPIC, ClassicMember, NewMember, poll_until, wait_type

PARTITIONS = 6


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    from replog.cluster.launcher import LocalCluster

    c = LocalCluster(tmp_path_factory.mktemp("policy"))
    try:
        c.up(
            1,
            zookeeper=f"{zookeeper.connect}/replog-{uuid.uuid4().hex[:8]}",
            overrides={
                "offsets.topic.num.partitions": "1",
                "offsets.topic.replication.factor": "1",
                "group.consumer.migration.policy": "disabled",
                "group.consumer.session.timeout.ms": "3000",
                "group.consumer.min.session.timeout.ms": "1000",
                "group.consumer.heartbeat.interval.ms": "300",
                "group.consumer.min.heartbeat.interval.ms": "100",
                "group.initial.rebalance.delay.ms": "0",
            },
        )
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers()})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        yield c
    finally:
        c.down()


def _everything(member) -> bool:
    return member.assigned == set(range(PARTITIONS))


def test_disabled_refuses_the_upgrade_with_group_id_not_found(cluster) -> None:
    bootstrap = cluster.bootstrap_servers()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    group = f"policy-{uuid.uuid4().hex[:6]}"
    classic = ClassicMember("kafka-python", bootstrap, group, "kafka-python")
    consumer = None
    try:
        poll_until([], lambda: _everything(classic), 60, "the classic group")
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 30
        error = None
        while error is None:
            assert time.monotonic() < deadline, "no error for the refused member"
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is not None:
                error = msg.error()
        # GROUP_ID_NOT_FOUND, fatal to librdkafka, as against Kafka.
        assert error.code() == KafkaError._FATAL, error
        assert "The group id does not exist" in str(error), error
        assert not consumer.assignment()
        assert _everything(classic)
        wait_type([], admin, group, ConsumerGroupType.CLASSIC)
    finally:
        if consumer is not None:
            consumer.close()
        classic.stop()


def test_disabled_keeps_a_consumer_group_when_its_new_members_leave(cluster) -> None:
    bootstrap = cluster.bootstrap_servers()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    group = f"policy-{uuid.uuid4().hex[:6]}"
    new = NewMember(bootstrap, group, "new-0")
    classic = None
    try:
        poll_until([new], lambda: _everything(new), 60, "the consumer group")
        classic = ClassicMember("aiokafka", bootstrap, group, "aiokafka")
        poll_until(
            [new],
            lambda: (
                new.assigned
                and classic.assigned
                and new.assigned | classic.assigned == set(range(PARTITIONS))
                and not new.assigned & classic.assigned
            ),
            60,
            "the classic member inside the consumer group",
        )
        new.close()
        poll_until([], lambda: _everything(classic), 60, "the classic member takes all")
        wait_type([], admin, group, ConsumerGroupType.CONSUMER)
    finally:
        new.close()
        if classic is not None:
            classic.stop()
