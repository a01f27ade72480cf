"""Transactions across a leader change and a crash, on two real brokers (RF 2).

Followers replicate transactional batches and COMMIT/ABORT markers and build the same
producer state and ``.txnindex`` as the leader: after the leader is SIGKILLed, the new
leader answers the same last stable offset, still holds the open transaction (a
read_committed consumer stops at it) and lists the aborted one (confluent-kafka skips
its record); a marker written to the new leader completes the open transaction. The
killed broker, restarted (an unclean start: its indexes were never flushed), catches up
and, leading again after the other one is killed, answers the same.

KIP-890 part 1 on broker 1 only (no transaction coordinator runs here, so broker 0 does
not verify): a transactional batch that would open a transaction on a partition it
leads is refused with NOT_ENOUGH_REPLICAS (the coordinator is not available, which
producers retry) and nothing is written; plain batches go on.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from cluster_util import wait_for
from fixtures.cluster import INTERNAL_TOPICS
from replog.cluster.launcher import LocalCluster
from test_txn_partition_cluster import (
    list_latest,
    produce,
    read_committed_confluent,
    txn_records,
    write_markers,
)

TOPIC = "txn-failover"


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("txn-failover"))
    try:
        c.up(
            2,
            zookeeper=f"{zookeeper.connect}/replog-{uuid.uuid4().hex[:8]}",
            overrides={**INTERNAL_TOPICS, "transaction.partition.verification.enable": "false"},
            broker_overrides={1: {"transaction.partition.verification.enable": "true"}},
        )
        yield c
    finally:
        c.down()


def create_with_replicas(cluster: LocalCluster, topic: str, replicas: list[int]) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()})
    futures = admin.create_topics([NewTopic(topic, 1, replica_assignment=[replicas])])
    futures[topic].result(timeout=60)


def leader(cluster: LocalCluster, among: list[int], topic: str = TOPIC) -> int:
    """The partition's leader, once the metadata of a broker in ``among`` names one of them."""

    def current() -> tuple[int] | None:  # a tuple: broker 0 is falsy
        for broker_id in among:
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.port(broker_id)}"})
            try:
                md = admin.list_topics(topic, timeout=5)
            except Exception:
                continue
            if topic not in md.topics or 0 not in md.topics[topic].partitions:
                continue
            found = md.topics[topic].partitions[0].leader
            if found in among:
                return (found,)
        return None

    return wait_for(current, timeout_s=60, what=f"a leader of {topic}-0 among {among}")[0]


def committed_view(cluster: LocalCluster, broker_id: int) -> tuple[int, int, list[bytes]]:
    """(LATEST read_uncommitted, LATEST read_committed, what read_committed reads)."""
    port = cluster.port(broker_id)
    read = read_committed_confluent(f"127.0.0.1:{port}", [0], topic=TOPIC)
    return (
        list_latest(port, 0, 0, topic=TOPIC),
        list_latest(port, 0, 1, topic=TOPIC),
        [value for _, value in read],
    )


def test_a_new_leader_serves_the_same_transactions(cluster: LocalCluster) -> None:
    create_with_replicas(cluster, TOPIC, [0, 1])
    first = leader(cluster, cluster.broker_ids)
    assert first == 0  # (broker 1 would verify the transactions with a coordinator)
    [other] = [b for b in cluster.broker_ids if b != first]
    cluster.wait_full_isr(60)
    port = cluster.port(first)

    def ok(pid: int, values: list[bytes]) -> None:
        assert produce(port, 0, txn_records(pid, 0, values), f"tx-{pid}", topic=TOPIC) == (
            ErrorCode.none
        )

    def marker(at: int, pid: int, commit: bool) -> None:
        assert write_markers(cluster.port(at), [(pid, 0, commit, 1, {TOPIC: [0]})]) == [
            {(TOPIC, 0): ErrorCode.none}
        ]

    ok(2000, [b"a1"])  # 0, aborted below
    ok(2001, [b"c1"])  # 1
    marker(first, 2001, True)  # 2
    ok(2002, [b"o1"])  # 3, left open
    marker(first, 2000, False)  # 4
    assert committed_view(cluster, first) == (5, 3, [b"c1"])

    cluster.kill_broker(first)
    assert leader(cluster, [other]) == other
    assert committed_view(cluster, other) == (5, 3, [b"c1"])
    marker(other, 2002, True)  # 5
    assert committed_view(cluster, other) == (6, 6, [b"c1", b"o1"])

    cluster.start_broker(first)
    cluster.wait_full_isr(120)
    cluster.kill_broker(other)
    assert leader(cluster, [first]) == first
    assert committed_view(cluster, first) == (6, 6, [b"c1", b"o1"])
    cluster.start_broker(other)


def test_a_transaction_unverified_by_its_coordinator_is_refused(cluster: LocalCluster) -> None:
    create_with_replicas(cluster, "txn-verify", [1])
    assert leader(cluster, [1], topic="txn-verify") == 1
    port = cluster.port(1)
    refused = produce(port, 0, txn_records(3000, 0, [b"t1"]), "tx-3000", topic="txn-verify")
    assert refused == ErrorCode.not_enough_replicas
    plain = txn_records(3001, 0, [b"p1"], txn=False)
    assert produce(port, 0, plain, None, topic="txn-verify") == ErrorCode.none
    assert list_latest(port, 0, 0, topic="txn-verify") == 1  # only the plain record
    assert list_latest(port, 0, 1, topic="txn-verify") == 1  # no transaction opened
