"""KIP-848 consumer groups through librdkafka's ``group.protocol=consumer`` on a 3-broker
cluster: assignment, every record consumed once, rebalances when a member closes or is
killed (its session runs out), and a group that resumes on a new coordinator after
the old one is killed, with its committed offsets and without a rebalance.

The brokers run with a short consumer session (3 s, its minimum lowered) and heartbeat
interval (300 ms) so the losses are noticed quickly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from group_util import commit
from replog.common.topics import GROUP_METADATA_TOPIC_NAME
from replog.coordinator.group.offsets_topic import partition_for

TOPIC = "kip848"
PARTITIONS = 6
OFFSETS_PARTITIONS = 3
SESSION_TIMEOUT_MS = 3000


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    from replog.cluster.launcher import LocalCluster

    c = LocalCluster(tmp_path_factory.mktemp("kip848"))
    try:
        c.up(
            3,
            zookeeper=f"{zookeeper.connect}/replog-{uuid.uuid4().hex[:8]}",
            overrides={
                "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
                "group.consumer.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                "group.consumer.min.session.timeout.ms": "1000",
                "group.consumer.heartbeat.interval.ms": "300",
                "group.consumer.min.heartbeat.interval.ms": "100",
            },
        )
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers()})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
        yield c
    finally:
        c.down()


def _consumer(cluster, group: str, **extra) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers(),
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **extra,
        }
    )


def _produce(cluster, count: int, tag: str) -> set[bytes]:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers(), "linger.ms": 5})
    values = {f"{tag}-{i}".encode() for i in range(count)}
    for value in sorted(values):
        producer.produce(TOPIC, value=value, key=value)
    assert producer.flush(30) == 0
    return values


def _assigned(consumer: Consumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def _poll_until(consumers, condition, timeout_s: float, on_message=None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for c in consumers:
            msg = c.poll(0.05)
            if msg is not None and msg.error() is None and on_message is not None:
                on_message(c, msg)
        if condition():
            return
    raise AssertionError("condition not met in time")


def _split(consumers) -> bool:
    sets = [_assigned(c) for c in consumers]
    every = [p for s in sets for p in s]
    return all(sets) and len(every) == PARTITIONS and len(set(every)) == PARTITIONS


def test_members_share_the_partitions_and_read_every_record_once(cluster, capsys) -> None:
    group = f"g-{uuid.uuid4().hex[:6]}"
    members = [_consumer(cluster, group, **{"client.id": f"m{i}"}) for i in range(3)]
    try:
        for m in members:
            m.subscribe([TOPIC])

        # Reconciling passes through shares like 3/2/1 (a partition moves once released):
        # wait for the assignor's 2/2/2.
        def balanced() -> bool:
            return _split(members) and sorted(len(_assigned(m)) for m in members) == [2, 2, 2]

        _poll_until(members, balanced, 30)
        values = _produce(cluster, 300, group)
        seen: list[tuple[int, bytes]] = []

        def record(consumer, msg) -> None:
            assert msg.partition() in _assigned(consumer)
            if msg.value().startswith(group.encode()):  # the topic holds other tests' records
                seen.append((msg.partition(), msg.value()))

        _poll_until(members, lambda: len(seen) >= len(values), 30, record)
        assert len(seen) == len(values) and {v for _, v in seen} == values

        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()})
        described = admin.describe_consumer_groups([group])[group].result(30)
        assert described.state == ConsumerGroupState.STABLE
        assert len(described.members) == 3
        assert {m.client_id for m in described.members} == {"m0", "m1", "m2"}
        assert sorted(len(m.assignment.topic_partitions) for m in described.members) == [2, 2, 2]

        # replog groups describes a KIP-848 group through ConsumerGroupDescribe.
        from replog.cli.main import main

        bootstrap = cluster.bootstrap_servers()
        assert main(["groups", "--bootstrap-server", bootstrap, "describe", group]) == 0
        out = capsys.readouterr().out
        assert "Stable, 3 members" in out
        rows = [line.split() for line in out.splitlines() if line.startswith(group)]
        assert sorted(int(r[2]) for r in rows) == list(range(PARTITIONS))
        assert all(r[6] != "-" for r in rows)  # each partition has its owner
    finally:
        for m in members:
            m.close()


def test_a_regex_subscription_is_resolved_by_the_coordinator(cluster) -> None:
    group = f"g-{uuid.uuid4().hex[:6]}"
    prefix = f"rx{uuid.uuid4().hex[:4]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()})
    for name in (f"{prefix}-a", f"{prefix}-b", f"other-{prefix}"):
        admin.create_topics([NewTopic(name, 2, 1)])[name].result(30)
    member = _consumer(cluster, group)
    try:
        member.subscribe([f"^{prefix}-.*"])  # sent as SubscribedTopicRegex (v1)

        def topics() -> set[str]:
            return {tp.topic for tp in member.assignment()}

        _poll_until([member], lambda: topics() == {f"{prefix}-a", f"{prefix}-b"}, 30)
        # A topic created later that matches joins the subscription on a later heartbeat.
        admin.create_topics([NewTopic(f"{prefix}-c", 1, 1)])[f"{prefix}-c"].result(30)
        _poll_until([member], lambda: f"{prefix}-c" in topics(), 30)
        assert len(member.assignment()) == 5
    finally:
        member.close()


_KILLABLE = """
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
              "group.protocol": "consumer", "auto.offset.reset": "earliest"})
c.subscribe([sys.argv[3]])
while True:
    c.poll(0.1)
    if c.assignment():
        print("assigned", flush=True)
"""


def test_members_closing_or_killed_hand_their_partitions_over(cluster) -> None:
    group = f"g-{uuid.uuid4().hex[:6]}"
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLABLE, cluster.bootstrap_servers(), group, TOPIC],
        stdout=subprocess.PIPE,
        text=True,
    )
    first, second = _consumer(cluster, group), _consumer(cluster, group)
    try:
        assert child.stdout is not None and child.stdout.readline().startswith("assigned")
        first.subscribe([TOPIC])
        second.subscribe([TOPIC])
        _poll_until(
            [first, second], lambda: len(_assigned(first)) == len(_assigned(second)) == 2, 30
        )
        # A member that closes leaves at once (epoch -1): the others take its share.
        second.close()
        _poll_until([first], lambda: len(_assigned(first)) == 3, 15)
        # A member killed -9 is removed when its session times out.
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        _poll_until([first], lambda: len(_assigned(first)) == PARTITIONS, 20)
    finally:
        if child.poll() is None:
            child.kill()
        first.close()


def test_a_group_resumes_on_a_new_coordinator_with_its_offsets(cluster) -> None:
    group = f"g-{uuid.uuid4().hex[:6]}"
    values = _produce(cluster, 120, group)
    member = _consumer(cluster, group)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()})
    seen: list[bytes] = []
    killed = None

    def record(_consumer, msg) -> None:
        if msg.value().startswith(group.encode()):  # the topic holds other tests' records
            seen.append(msg.value())

    try:
        member.subscribe([TOPIC])
        _poll_until([member], lambda: len(seen) >= 60, 30, record)
        positions = member.position([TopicPartition(TOPIC, p) for p in _assigned(member)])
        commit(member, positions)
        before = admin.describe_consumer_groups([group])[group].result(30)
        (described_member,) = before.members

        meta = admin.list_topics(timeout=30)
        partition = partition_for(group, OFFSETS_PARTITIONS)
        killed = meta.topics[GROUP_METADATA_TOPIC_NAME].partitions[partition].leader
        cluster.kill_broker(killed)

        # The new coordinator loaded the group: same member, no rebalance needed.
        deadline = time.monotonic() + 30
        while True:
            msg = member.poll(0.1)
            if msg is not None and msg.error() is None:
                record(member, msg)
            try:
                after = admin.describe_consumer_groups([group])[group].result(5)
                if after.coordinator.id != killed and after.members:
                    break
            except Exception:
                pass
            assert time.monotonic() < deadline, "the group did not come back"
        assert [m.member_id for m in after.members] == [described_member.member_id]
        assert after.state == ConsumerGroupState.STABLE
        committed = member.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], 30)
        assert {(tp.partition, tp.offset) for tp in committed} == {
            (tp.partition, tp.offset) for tp in positions
        }
        # The member keeps reading where it was, and a commit after failover is taken.
        _poll_until([member], lambda: len(seen) >= len(values), 30, record)
        assert set(seen) == values and len(seen) == len(values)
        commit(member, member.position(positions))
    finally:
        member.close()
        if killed is not None:
            cluster.start_broker(killed)
