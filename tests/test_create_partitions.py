"""Adding partitions on real broker processes (CreatePartitions 0-3, Kafka's
``PartitionModifications`` on the topic znode).

confluent-kafka's ``create_partitions`` adds partitions placed like the topic's
existing ones; the controller notices them at once (leaders elected, LeaderAndIsr and
UpdateMetadata), so a producer writes to them right after the call returns and a
consumer reads it back. Reducing the count, the same count, unknown topics, bad
assignments and validate_only are refused or change nothing; ``replog topics alter``
does the same from the command line.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions

from clients_util import wait_for_leaders
from cluster_util import ZkView, consume_all, create_topic, producer, wait_for

pytestmark = pytest.mark.timeout(300)

TOPIC = "orders"


def assignment(zk: ZkView, topic: str) -> dict[int, list[int]]:
    data = json.loads(zk.client.get(f"/brokers/topics/{topic}")[0])
    return {int(p): r for p, r in data["partitions"].items()}


def create_partitions(admin: AdminClient, new: NewPartitions, **kwargs) -> None:
    admin.create_partitions([new], operation_timeout=30, **kwargs)[new.topic].result(timeout=60)


def refused(admin: AdminClient, new: NewPartitions, **kwargs) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        create_partitions(admin, new, **kwargs)
    return info.value.args[0]


def test_create_partitions_online_at_once_and_bad_input(cluster_factory) -> None:
    cluster = cluster_factory(3)
    bootstrap = cluster.bootstrap_servers()
    create_topic(bootstrap, TOPIC, 2, 2)
    zk = ZkView(cluster)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        before = assignment(zk, TOPIC)
        topic_id = json.loads(zk.client.get(f"/brokers/topics/{TOPIC}")[0])["topic_id"]

        # validate_only: accepted, nothing written.
        create_partitions(admin, NewPartitions(TOPIC, 6), validate_only=True)
        assert assignment(zk, TOPIC) == before

        # 2 -> 5 partitions, placed by the controller's rules; online when the call returns.
        create_partitions(admin, NewPartitions(TOPIC, 5))
        after = assignment(zk, TOPIC)
        assert sorted(after) == [0, 1, 2, 3, 4]
        assert {p: after[p] for p in before} == before
        for p in (2, 3, 4):
            assert len(after[p]) == 2 and len(set(after[p])) == 2
            state = zk.partition_state(TOPIC, p)
            assert state is not None and state["leader"] == after[p][0], (p, state)
            assert sorted(state["isr"]) == sorted(after[p])
        # preferred leaders spread over the brokers, as placement does
        assert {after[p][0] for p in range(5)} == {0, 1, 2}
        # the topic id is kept
        assert json.loads(zk.client.get(f"/brokers/topics/{TOPIC}")[0])["topic_id"] == topic_id

        # The new partitions take writes at once, once each broker's metadata has them
        # (the controller's UpdateMetadata reaches brokers independently, as in Kafka).
        for broker in cluster.broker_ids:
            wait_for_leaders(f"127.0.0.1:{cluster.port(broker)}", {TOPIC: 5})
        prod = producer(bootstrap)
        errors: list[object] = []
        for p in range(5):
            for i in range(20):
                prod.produce(
                    TOPIC,
                    value=f"{p}-{i}".encode(),
                    partition=p,
                    on_delivery=lambda err, _m: err and errors.append(err),
                )
        assert prod.flush(60) == 0
        assert errors == []
        read = consume_all(bootstrap, TOPIC, 5, expected=100)
        assert sorted((m.partition(), m.value().decode()) for m in read) == sorted(
            (p, f"{p}-{i}") for p in range(5) for i in range(20)
        )

        # Given assignments are used as given.
        create_partitions(admin, NewPartitions(TOPIC, 6, replica_assignment=[[2, 0]]))
        assert assignment(zk, TOPIC)[5] == [2, 0]
        wait_for(lambda: (zk.partition_state(TOPIC, 5) or {}).get("leader") == 2, what="p5 leader")

        # Refused, nothing changed.
        snapshot = assignment(zk, TOPIC)
        err = refused(admin, NewPartitions(TOPIC, 3))
        assert err.code() == KafkaError.INVALID_PARTITIONS
        assert "Topic currently has 6 partitions, which is higher than the requested 3" in err.str()
        err = refused(admin, NewPartitions(TOPIC, 6))
        assert err.code() == KafkaError.INVALID_PARTITIONS
        err = refused(admin, NewPartitions(TOPIC, 7, replica_assignment=[[0, 0]]))
        assert err.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
        err = refused(admin, NewPartitions(TOPIC, 7, replica_assignment=[[0, 9]]))
        assert err.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
        err = refused(admin, NewPartitions(TOPIC, 7, replica_assignment=[[0]]))
        assert err.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
        err = refused(admin, NewPartitions(TOPIC, 8, replica_assignment=[[0, 1]]))
        assert err.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
        err = refused(admin, NewPartitions("no-such-topic", 3))
        assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        assert assignment(zk, TOPIC) == snapshot

        # replog topics alter: adds, and refuses to reduce with a one-line reason.
        cli = [sys.executable, "-m", "replog.cli.main", "topics", "alter"]
        ok = subprocess.run(
            [*cli, "--bootstrap-server", bootstrap, "--topic", TOPIC, "--partitions", "8"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert ok.returncode == 0, ok.stderr
        assert sorted(assignment(zk, TOPIC)) == list(range(8))
        wait_for(lambda: (zk.partition_state(TOPIC, 7) or {}).get("leader", -1) >= 0, what="p7")
        bad = subprocess.run(
            [*cli, "--bootstrap-server", bootstrap, "--topic", TOPIC, "--partitions", "4"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert bad.returncode == 1
        assert "which is higher than the requested 4" in bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1
        assert sorted(assignment(zk, TOPIC)) == list(range(8))
    finally:
        zk.close()


def test_a_retry_racing_its_own_timed_out_attempt_is_told_the_count_is_reached() -> None:
    """The fault campaign's create-partitions: a first attempt timed out on the client's
    side but its znode write landed while the retry was between its read and its write.
    The retry is answered as if it came after (INVALID_PARTITIONS, which a client retrying
    takes as done), not REASSIGNMENT_IN_PROGRESS; a concurrent change that does not reach
    the count still is REASSIGNMENT_IN_PROGRESS."""
    import asyncio
    from types import SimpleNamespace

    from kio.schema.errors import ErrorCode

    from replog.config import KafkaConfig
    from replog.server.admin import AdminManager
    from replog.zk.data import ReplicaAssignment

    class RacingZk:
        def __init__(self, reached: int) -> None:
            self.partitions = {0: ReplicaAssignment((0, 1))}
            self.reached = reached  # partitions the other attempt wrote meanwhile

        def get_replica_assignments(self, topics):
            return {t: (dict(self.partitions), 1) for t in topics if t == "t"}

        def get_topics_marked_for_deletion(self):
            return set()

        def set_replica_assignments(self, topic, change, version):
            self.partitions = {p: ReplicaAssignment((0, 1)) for p in range(self.reached)}
            return change(self.partitions)  # raises: changed since the read

    brokers = {b: SimpleNamespace(broker_id=b, rack=None) for b in (0, 1, 2)}
    config = KafkaConfig.from_properties({"zookeeper.connect": "zk"})

    def create(zk: RacingZk, count: int) -> tuple:
        admin = AdminManager(config, zk, SimpleNamespace(brokers=brokers))  # type: ignore[arg-type]
        return asyncio.run(admin.create_partitions("t", count, None, 0, False))

    error, message = create(RacingZk(reached=2), 2)
    assert error == ErrorCode.invalid_partitions and "already has 2 partitions" in message
    error, _ = create(RacingZk(reached=2), 3)  # changed, yet short of the count
    assert error == ErrorCode.reassignment_in_progress
