"""The cluster layer on real processes: ZooKeeper, broker processes, confluent-kafka.

Leader failover, controller failover (kill and SIGSTOP past the session), broker
restart recovering its role, topic deletion with a broker down, and bad
controller/admin input leaving ZooKeeper unchanged.
"""

from __future__ import annotations

import asyncio
import datetime

import pytest
from confluent_kafka.admin import AdminClient
from kio.schema.create_topics.v4 import request as create_req
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from cluster_util import ZkView, consume_all, create_topic, leader_of, producer, wait_for
from replog.protocol import controller_schemas as cs
from replog.protocol.client import KafkaConnection

FAST = {
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "10000",
}


def test_leader_failover_keeps_producer_and_consumer_going(cluster_factory):
    cluster = cluster_factory(3, overrides=FAST)
    bootstrap = cluster.bootstrap_servers()
    create_topic(bootstrap, "orders", partitions=1, replication=3)
    zk = ZkView(cluster)
    try:
        before = wait_for(lambda: zk.partition_state("orders", 0), what="partition state")
        p = producer(bootstrap)
        for i in range(200):
            p.produce("orders", value=f"before-{i}".encode())
        assert p.flush(60) == 0
        leader = int(before["leader"])
        cluster.kill_broker(leader)
        after = wait_for(
            lambda: (
                (s := zk.partition_state("orders", 0)) and s["leader"] not in (leader, -1) and s
            ),
            timeout_s=30,
            what="a new leader",
        )
        assert after["leader"] in before["isr"]
        assert after["leader_epoch"] > before["leader_epoch"]
        errors = []
        for i in range(200):
            p.produce(
                "orders",
                value=f"after-{i}".encode(),
                callback=lambda err, _msg: err and errors.append(err),
            )
        assert p.flush(90) == 0
        assert errors == []
        live = [b for b in cluster.broker_ids if b != leader]
        records = consume_all(cluster.bootstrap_servers(live), "orders", 1, 400)
        values = [m.value().decode() for m in records]
        assert values == [f"before-{i}" for i in range(200)] + [f"after-{i}" for i in range(200)]
    finally:
        zk.close()


def test_controller_failover_and_paused_controller_is_fenced(cluster_factory):
    cluster = cluster_factory(3, overrides=FAST)
    zk = ZkView(cluster)
    try:
        first, epoch = wait_for(
            lambda: (c := zk.controller())[0] is not None and c, what="a controller"
        )
        cluster.kill_broker(first)
        second, epoch2 = wait_for(
            lambda: (c := zk.controller())[0] not in (None, first) and c, what="a new controller"
        )
        assert epoch2 > epoch
        cluster.start_broker(first)
        # Pause the current controller until ZooKeeper expires its session.
        cluster.pause_broker(second)
        try:
            third, epoch3 = wait_for(
                lambda: (c := zk.controller())[0] not in (None, second) and c,
                timeout_s=40,
                what="a controller after the pause",
            )
            assert epoch3 > epoch2
        finally:
            cluster.resume_broker(second)
        # Every broker rejects a command carrying the paused controller's epoch, even one
        # the new controller has not reached yet.
        for broker_id in cluster.broker_ids:
            code = asyncio.run(_send_leader_and_isr(cluster.port(broker_id), second, epoch2))
            assert code == ErrorCode.stale_controller_epoch, broker_id
    finally:
        zk.close()


async def _send_leader_and_isr(port: int, controller_id: int, controller_epoch: int) -> ErrorCode:
    conn = KafkaConnection("127.0.0.1", port)
    await conn.connect()
    try:
        request = cs.LeaderAndIsrRequest(
            controller_id=controller_id,
            controller_epoch=controller_epoch,
            broker_epoch=-1,
            type=0,
            topic_states=(
                cs.LeaderAndIsrTopicState(
                    topic_name="hijack",
                    topic_id=None,
                    partition_states=(
                        cs.LeaderAndIsrPartitionState(
                            partition_index=0,
                            controller_epoch=controller_epoch,
                            leader=controller_id,
                            leader_epoch=99,
                            isr=(controller_id,),
                            zk_version=0,
                            replicas=(controller_id,),
                            adding_replicas=(),
                            removing_replicas=(),
                            is_new=True,
                            leader_recovery_state=0,
                        ),
                    ),
                ),
            ),
            live_leaders=(),
        )
        response = await conn.request(request)
        return response.error_code
    finally:
        await conn.close()


def test_unknown_controller_is_rejected_and_nothing_changes(cluster_factory):
    cluster = cluster_factory(1, overrides=FAST)
    zk = ZkView(cluster)
    try:
        controller, epoch = wait_for(
            lambda: (c := zk.controller())[0] is not None and c, what="controller"
        )
        # A broker id that is not the controller, at a future epoch: not believed.
        code = asyncio.run(_send_leader_and_isr(cluster.port(0), 42, epoch + 5))
        assert code == ErrorCode.stale_controller_epoch
        assert "hijack" not in zk.topics()
        assert not (cluster.broker_dir(0) / "data" / "hijack-0").exists()
    finally:
        zk.close()


def test_broker_restart_recovers_role_and_drops_deleted_topic(cluster_factory):
    cluster = cluster_factory(3, overrides=FAST)
    bootstrap = cluster.bootstrap_servers()
    create_topic(bootstrap, "keep", partitions=3, replication=3)
    create_topic(bootstrap, "gone", partitions=3, replication=3)
    zk = ZkView(cluster)
    try:
        wait_for(lambda: all(zk.partition_state("gone", p) for p in range(3)), what="states")
        victim = 2
        data_dir = cluster.broker_dir(victim) / "data"
        wait_for(lambda: (data_dir / "gone-0").exists(), what="local replica of gone-0")
        cluster.stop_broker(victim)
        live = cluster.bootstrap_servers([0, 1])
        admin = AdminClient({"bootstrap.servers": live})
        admin.delete_topics(["gone"], operation_timeout=5)["gone"].exception(timeout=30)
        cluster.start_broker(victim)
        wait_for(lambda: "gone" not in zk.topics(), timeout_s=60, what="topic deletion to finish")
        wait_for(
            lambda: not (data_dir / "gone-0").exists(),
            what="the deleted partition's directory to go",
        )
        assert (data_dir / "keep-0").exists()
        # The restarted broker is a replica of `keep` again and in the ISR once caught up.
        wait_for(
            lambda: all(victim in zk.partition_state("keep", p)["isr"] for p in range(3)),
            timeout_s=60,
            what="the restarted broker back in the ISR",
        )
        # Recreating a deleted topic's name works.
        create_topic(cluster.bootstrap_servers(), "gone", partitions=1, replication=3)
        wait_for(lambda: leader_of(zk, "gone", 0) >= 0, what="leader of recreated topic")
    finally:
        zk.close()


@pytest.mark.parametrize(
    ("name", "partitions", "replication", "code"),
    [
        ("bad name!", 1, 1, ErrorCode.invalid_topic_exception),
        ("..", 1, 1, ErrorCode.invalid_topic_exception),
        ("zero-partitions", 0, 1, ErrorCode.invalid_partitions),
        ("negative-partitions", -5, 1, ErrorCode.invalid_partitions),
        ("too-many-replicas", 1, 4, ErrorCode.invalid_replication_factor),
        ("zero-replicas", 1, 0, ErrorCode.invalid_replication_factor),
    ],
)
def test_create_topics_bad_input_leaves_zookeeper_unchanged(
    replog_broker, name, partitions, replication, code
):
    zk = ZkView(replog_broker)
    try:
        before = zk.topics()
        got = asyncio.run(_create_topic_raw(replog_broker.port(0), name, partitions, replication))
        assert got == code
        assert zk.topics() == before
    finally:
        zk.close()


async def _create_topic_raw(port: int, name: str, partitions: int, replication: int) -> ErrorCode:
    conn = KafkaConnection("127.0.0.1", port)
    await conn.connect()
    try:
        request = create_req.CreateTopicsRequest(
            topics=(
                create_req.CreatableTopic(
                    name=name,
                    num_partitions=partitions,
                    replication_factor=replication,
                    assignments=(),
                    configs=(),
                ),
            ),
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
            validate_only=False,
        )
        response = await conn.request(request)
        return response.topics[0].error_code
    finally:
        await conn.close()


def test_deleted_topic_disappears_from_metadata(replog_broker):
    bootstrap = replog_broker.bootstrap_servers()
    create_topic(bootstrap, "short-lived", partitions=2)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert "short-lived" in admin.list_topics(timeout=10).topics
    admin.delete_topics(["short-lived"], operation_timeout=30)["short-lived"].result(timeout=60)
    wait_for(
        lambda: "short-lived" not in admin.list_topics(timeout=10).topics,
        what="topic gone from metadata",
    )
