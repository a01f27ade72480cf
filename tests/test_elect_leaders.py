"""Preferred leader election on real broker processes (KIP-460 ElectLeaders, the
ZooKeeper path ``/admin/preferred_replica_election``, ``auto.leader.rebalance.enable``).

After a broker restarts it follows everything it used to lead. confluent-kafka's
``AdminClient.elect_leaders`` moves leadership back to the preferred replicas (and says
ELECTION_NOT_NEEDED when asked again, UNKNOWN_TOPIC_OR_PARTITION for a partition that
does not exist); a kazoo write of ``/admin/preferred_replica_election`` does the same and
the controller deletes the znode; ``replog elect-leaders`` prints Kafka's lines; and
with a short ``leader.imbalance.check.interval.seconds`` leadership goes back without
anyone asking.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import subprocess
import sys

import pytest
from confluent_kafka import ElectionType, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from cluster_util import ZkView, create_topic, leader_of, wait_for
from replog.cluster.launcher import LocalCluster
from replog.protocol.apis import ApiKey, nested, request_schema
from replog.protocol.client import KafkaConnection

pytestmark = pytest.mark.timeout(300)

TOPIC = "payments"
PARTITIONS = 3


def preferred(zk: ZkView, p: int) -> int:
    return json.loads(zk.client.get(f"/brokers/topics/{TOPIC}")[0])["partitions"][str(p)][0]


async def _elect_raw(port: int, topic: str, partition: int):
    """ElectLeaders v2 (preferred) for one partition, sent to the broker at ``port``."""
    cls = request_schema(ApiKey.ELECT_LEADERS, 2)
    body = cls(
        election_type=0,
        topic_partitions=(nested(cls, "TopicPartitions")(topic=topic, partitions=(partition,)),),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
    )
    conn = KafkaConnection("127.0.0.1", port)
    await conn.connect()
    try:
        return await conn.request(body)
    finally:
        await conn.close()


def at_preferred(zk: ZkView) -> bool:
    return all(leader_of(zk, TOPIC, p) == preferred(zk, p) for p in range(PARTITIONS))


def bounce_and_catch_up(cluster: LocalCluster, zk: ZkView, broker_id: int) -> list[int]:
    """Stop ``broker_id`` (its leaderships move away), start it again and wait until it
    is back in every ISR; returns the partitions it is the preferred replica of."""
    mine = [p for p in range(PARTITIONS) if preferred(zk, p) == broker_id]
    assert mine, "every broker is some partition's preferred replica"
    cluster.stop_broker(broker_id)
    cluster.start_broker(broker_id)
    wait_for(
        lambda: all(
            broker_id in (zk.partition_state(TOPIC, p) or {}).get("isr", [])
            for p in range(PARTITIONS)
        ),
        timeout_s=60,
        what=f"broker {broker_id} back in every ISR",
    )
    return mine


def test_elect_leaders_through_admin_client_zookeeper_and_cli(cluster_factory) -> None:
    cluster = cluster_factory(3, overrides={"auto.leader.rebalance.enable": "false"})
    bootstrap = cluster.bootstrap_servers()
    create_topic(bootstrap, TOPIC, PARTITIONS, 3)
    zk = ZkView(cluster)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        wait_for(lambda: at_preferred(zk), what="initial leaders")
        mine = bounce_and_catch_up(cluster, zk, 0)
        assert all(leader_of(zk, TOPIC, p) != 0 for p in mine)
        epochs = {p: zk.partition_state(TOPIC, p)["leader_epoch"] for p in mine}

        # 1. AdminClient (ElectLeaders v2 to the controller). The bounce may have moved
        # the controller: librdkafka sends to the one its metadata names (and takes a
        # NOT_CONTROLLER answer as final), so its metadata must name the current one.
        wait_for(
            lambda: admin.list_topics(timeout=10).controller_id == zk.controller()[0],
            what="the admin client's metadata naming the current controller",
        )
        asked = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        result = admin.elect_leaders(ElectionType.PREFERRED, asked).result(timeout=60)
        errors = {tp.partition: err for tp, err in result.items()}
        for p in range(PARTITIONS):
            if p in mine:
                assert errors[p] is None, errors[p]
            else:
                assert errors[p].code() == KafkaError.ELECTION_NOT_NEEDED
        assert at_preferred(zk)
        for p in mine:
            assert zk.partition_state(TOPIC, p)["leader_epoch"] == epochs[p] + 1
        again = admin.elect_leaders(ElectionType.PREFERRED, asked).result(timeout=60)
        assert {err.code() for err in again.values()} == {KafkaError.ELECTION_NOT_NEEDED}
        unknown = admin.elect_leaders(
            ElectionType.PREFERRED, [TopicPartition(TOPIC, 99), TopicPartition("nope", 0)]
        ).result(timeout=60)
        assert {err.code() for err in unknown.values()} == {KafkaError.UNKNOWN_TOPIC_OR_PART}

        # A broker that is not the controller answers NOT_CONTROLLER per partition (the
        # answer's own error stays NONE, as in Kafka's ZooKeeper mode).
        controller = zk.controller()[0]
        other = next(b for b in cluster.broker_ids if b != controller)
        refused = asyncio.run(_elect_raw(cluster.port(other), TOPIC, 0))
        assert refused.error_code == ErrorCode.none
        assert refused.replica_election_results[0].partition_result[0].error_code == (
            ErrorCode.not_controller
        )

        # 2. The ZooKeeper path, as kafka-preferred-replica-election.sh --zookeeper wrote it.
        mine = bounce_and_catch_up(cluster, zk, 1)
        assert not at_preferred(zk)
        entries = [{"topic": TOPIC, "partition": p} for p in mine]
        zk.client.create(
            "/admin/preferred_replica_election",
            json.dumps({"version": 1, "partitions": entries}).encode(),
            makepath=True,
        )
        wait_for(lambda: at_preferred(zk), what="leaders back after the znode")
        wait_for(
            lambda: zk.client.exists("/admin/preferred_replica_election") is None,
            what="the controller deleting the znode",
        )

        # 3. The command line.
        mine = bounce_and_catch_up(cluster, zk, 2)
        cli = [sys.executable, "-m", "replog.cli.main", "elect-leaders"]
        run = subprocess.run(
            [*cli, "--bootstrap-server", bootstrap, "--election-type", "preferred",
             "--all-topic-partitions"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        moved = ", ".join(f"{TOPIC}-{p}" for p in mine)
        assert f"Successfully completed leader election (PREFERRED) for partitions {moved}" in (
            run.stdout
        )
        assert at_preferred(zk)
        run = subprocess.run(
            [*cli, "--bootstrap-server", bootstrap, "--election-type", "PREFERRED",
             "--topic", TOPIC, "--partition", str(mine[0])],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert f"Valid replica already elected for partitions {TOPIC}-{mine[0]}" in run.stdout
        run = subprocess.run(
            [*cli, "--bootstrap-server", bootstrap, "--election-type", "unclean",
             "--topic", TOPIC, "--partition", "99"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert run.returncode == 1
        assert f"for partition: {TOPIC}-99: UNKNOWN_TOPIC_OR_PARTITION" in run.stdout
        assert run.stderr.strip().count("\n") == 0
        assert "1 replica(s) could not be elected" in run.stderr
    finally:
        zk.close()


def test_auto_leader_rebalance_after_a_broker_returns(cluster_factory) -> None:
    cluster = cluster_factory(
        3,
        overrides={
            "auto.leader.rebalance.enable": "true",
            "leader.imbalance.check.interval.seconds": "1",
        },
    )
    bootstrap = cluster.bootstrap_servers()
    create_topic(bootstrap, TOPIC, PARTITIONS, 3)
    zk = ZkView(cluster)
    try:
        wait_for(lambda: at_preferred(zk), what="initial leaders")
        mine = [p for p in range(PARTITIONS) if preferred(zk, p) == 0]
        epochs = {p: zk.partition_state(TOPIC, p)["leader_epoch"] for p in mine}
        cluster.stop_broker(0)
        assert all(leader_of(zk, TOPIC, p) != 0 for p in mine)
        cluster.start_broker(0)
        wait_for(lambda: at_preferred(zk), timeout_s=60, what="leaders back without an operator")
        # Moved away once (controlled shutdown), back once (the rebalance), maybe a
        # failure of the ISR in between: the epoch grew, and broker 0 leads again.
        assert all(zk.partition_state(TOPIC, p)["leader_epoch"] >= epochs[p] + 2 for p in mine)
    finally:
        zk.close()
