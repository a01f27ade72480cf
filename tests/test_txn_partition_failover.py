"""Transactions across a leader change and a crash, on two real brokers (RF 2).

Followers replicate transactional batches and COMMIT/ABORT markers and build the same
producer state and ``.txnindex`` as the leader: after the leader is SIGKILLed, the new
leader answers the same last stable offset, still holds the open transaction (a
read_committed consumer stops at it) and lists the aborted one (confluent-kafka skips
its record); a marker written to the new leader completes the open transaction. The
killed broker, restarted (an unclean start: its indexes were never flushed), catches up
and, leading again after the other one is killed, answers the same.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from cluster_util import create_topic, wait_for
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
        c.up(2, zookeeper=f"{zookeeper.connect}/replog-{uuid.uuid4().hex[:8]}")
        yield c
    finally:
        c.down()


def leader(cluster: LocalCluster, among: list[int]) -> int:
    """The partition's leader, once the metadata of a broker in ``among`` names one of them."""

    def current() -> tuple[int] | None:  # a tuple: broker 0 is falsy
        for broker_id in among:
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.port(broker_id)}"})
            try:
                md = admin.list_topics(TOPIC, timeout=5)
            except Exception:
                continue
            found = md.topics[TOPIC].partitions[0].leader
            if found in among:
                return (found,)
        return None

    return wait_for(current, timeout_s=60, what=f"a leader of {TOPIC}-0 among {among}")[0]


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
    create_topic(cluster.bootstrap_servers(), TOPIC, partitions=1, replication=2)
    first = leader(cluster, cluster.broker_ids)
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
