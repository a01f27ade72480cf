"""The classic group protocol through real clients on a 3-broker cluster: members of one
group share the partitions, every record is consumed once, a member that leaves or dies
has its partitions reassigned, static members keep theirs across a restart, and clients
of different libraries share one group."""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

TOPIC = "members"
PARTITIONS = 6


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    from replog.cluster.launcher import LocalCluster

    c = LocalCluster(tmp_path_factory.mktemp("group-membership"))
    try:
        c.up(
            3,
            zookeeper=f"{zookeeper.connect}/replog-{uuid.uuid4().hex[:8]}",
            overrides={
                "offsets.topic.num.partitions": "6",
                "group.initial.rebalance.delay.ms": "0",
                "group.min.session.timeout.ms": "1000",
            },
        )
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers()})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
        yield c
    finally:
        c.down()


def produce(bootstrap: str, count: int, tag: str) -> set[str]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    values = {f"{tag}-{i}" for i in range(count)}
    for i, value in enumerate(sorted(values)):
        producer.produce(TOPIC, value=value.encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    return values


def consumer(bootstrap: str, group: str, **extra) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            **extra,
        }
    )


def drain(members: list[Consumer], wanted: set[str], timeout_s: float = 60) -> Counter[str]:
    """Poll every member in turn until ``wanted`` values were all seen."""
    seen: Counter[str] = Counter()
    deadline = time.monotonic() + timeout_s
    while not wanted <= set(seen) and time.monotonic() < deadline:
        for member in members:
            message = member.poll(0.05)
            if message is not None and message.error() is None:
                value = message.value().decode()
                if value in wanted:
                    seen[value] += 1
    return seen


def assigned(member: Consumer) -> set[int]:
    return {tp.partition for tp in member.assignment()}


def test_three_members_share_six_partitions_and_consume_each_record_once(cluster) -> None:
    group = f"g-{uuid.uuid4().hex[:6]}"
    bootstrap = cluster.bootstrap_servers()
    members = [consumer(bootstrap, group) for _ in range(3)]
    try:
        for m in members:
            m.subscribe([TOPIC])
        values = produce(bootstrap, 300, group)
        seen = drain(members, values)
        assert set(seen) == values
        assert max(seen.values()) == 1, "a record was consumed twice"
        owned = [assigned(m) for m in members]
        assert sorted(p for parts in owned for p in parts) == list(range(PARTITIONS))
        assert all(len(parts) == 2 for parts in owned)
    finally:
        for m in members:
            m.close()


def test_a_leaving_member_hands_its_partitions_over(cluster) -> None:
    group = f"g-{uuid.uuid4().hex[:6]}"
    bootstrap = cluster.bootstrap_servers()
    first, second = consumer(bootstrap, group), consumer(bootstrap, group)
    try:
        first.subscribe([TOPIC])
        second.subscribe([TOPIC])
        drain([first, second], produce(bootstrap, 60, f"{group}-a"))
        first.close()  # LeaveGroup; commits its offsets on the way out
        later = produce(bootstrap, 60, f"{group}-b")
        seen = drain([second], later)
        assert set(seen) == later
        assert assigned(second) == set(range(PARTITIONS))
    finally:
        second.close()


def test_a_static_member_keeps_its_assignment_across_a_restart(cluster) -> None:
    group = f"g-{uuid.uuid4().hex[:6]}"
    bootstrap = cluster.bootstrap_servers()
    static = {"group.instance.id": "instance-a", "session.timeout.ms": 10000}
    a = consumer(bootstrap, group, **static)
    b = consumer(bootstrap, group, **{"group.instance.id": "instance-b"})
    try:
        a.subscribe([TOPIC])
        b.subscribe([TOPIC])
        drain([a, b], produce(bootstrap, 60, f"{group}-a"))
        before_a, before_b = assigned(a), assigned(b)
        assert before_a and before_b
        a.close()  # a static member does not leave the group on close
        a = consumer(bootstrap, group, **static)
        a.subscribe([TOPIC])
        later = produce(bootstrap, 60, f"{group}-b")
        drain([a, b], later)
        assert assigned(a) == before_a
        assert assigned(b) == before_b
    finally:
        a.close()
        b.close()
