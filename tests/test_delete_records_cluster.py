"""DeleteRecords and KIP-320 truncation detection on replicated topics: real brokers,
real ZooKeeper, confluent-kafka.

* DeleteRecords on an RF 3 topic answers only once every replica's log start has
  moved (the low watermark); every replica deletes the segments below it; a new
  leader still starts there; so does every replica after all of them restart.
* A consumer that read records an unclean election then lost learns it from the
  new leader's OffsetForLeaderEpoch answer (librdkafka: "log truncation detected").
"""

from __future__ import annotations

import asyncio
import time

from confluent_kafka import OFFSET_END, Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v10 import request as list_v10
from kio.schema.offset_for_leader_epoch.v4 import request as epoch_v4

from clients_util import segment_bases, wait_for_leaders
from cluster_util import ZkView, create_topic, producer, wait_for
from replog.protocol.client import KafkaConnection
from test_admin_offset_apis import _timeout

TOPIC = "purge"
RECORDS = 200
TARGET = 125  # inside a segment: only the checkpoint remembers it across a restart
FAST = {"zookeeper.session.timeout.ms": "6000", "replica.lag.time.max.ms": "10000"}


def _ask(port: int, request):
    async def go():
        conn = KafkaConnection("127.0.0.1", port, client_id="replog-tests")
        await conn.connect()
        try:
            return await conn.request(request, timeout_s=30)
        finally:
            await conn.close()

    return asyncio.run(go())


def replica_log_start(cluster, broker_id: int, topic: str = TOPIC) -> int | None:
    """The log start offset of ``broker_id``'s replica, asked as a debugging client
    (replica id -2, which any replica answers); None until it hosts the partition."""
    response = _ask(
        cluster.port(broker_id),
        list_v10.ListOffsetsRequest(
            replica_id=-2,
            isolation_level=0,
            timeout=_timeout(1000),
            topics=(
                list_v10.ListOffsetsTopic(
                    name=topic,
                    partitions=(list_v10.ListOffsetsPartition(partition_index=0, timestamp=-2),),
                ),
            ),
        ),
    )
    answer = response.topics[0].partitions[0]
    return int(answer.offset) if answer.error_code is ErrorCode.none else None


def earliest(bootstrap: str, topic: str = TOPIC) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(topic, 0)
    return admin.list_offsets({tp: OffsetSpec.earliest()}, request_timeout=30)[tp].result(30).offset


def read_from_beginning(bootstrap: str, expected: int) -> list:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "replog-tests",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0, -2)])  # OFFSET_BEGINNING
        out = []
        deadline = time.monotonic() + 60
        while len(out) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                out.append(msg)
        return out
    finally:
        consumer.close()


def test_delete_records_on_a_replicated_topic(cluster_factory) -> None:
    cluster = cluster_factory(3, overrides=FAST)
    bootstrap = cluster.bootstrap_servers()
    create_topic(bootstrap, TOPIC, partitions=1, replication=3, config={"segment.bytes": "2048"})
    wait_for_leaders(bootstrap, {TOPIC: 1})
    p = producer(bootstrap)
    for i in range(RECORDS):
        p.produce(TOPIC, value=f"v{i}".encode().ljust(100, b"."), partition=0)
        if i % 10 == 9:
            p.flush(30)  # batches of about 1 KB: a segment holds two
    assert p.flush(60) == 0
    zk = ZkView(cluster)
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        tp = TopicPartition(TOPIC, 0, TARGET)
        deleted = admin.delete_records([tp], request_timeout=60, operation_timeout=30)
        # The answer waits for the low watermark: every live replica has moved its log start.
        assert deleted[tp].result(timeout=60).low_watermark == TARGET
        for broker_id in cluster.broker_ids:
            assert replica_log_start(cluster, broker_id) == TARGET, broker_id
            bases = segment_bases(cluster.broker_dir(broker_id), TOPIC, 0)
            # the segment holding TARGET is the first one left; everything wholly below is gone
            assert 0 < bases[0] <= TARGET and (len(bases) == 1 or bases[1] > TARGET), bases
        assert earliest(bootstrap) == TARGET

        # A leader change: the new leader (a former follower) starts at TARGET too.
        before = zk.partition_state(TOPIC, 0)
        old_leader = int(before["leader"])
        cluster.stop_broker(old_leader)
        after = wait_for(
            lambda: (
                (s := zk.partition_state(TOPIC, 0)) and s["leader"] not in (old_leader, -1) and s
            ),
            what="a new leader",
        )
        live = [b for b in cluster.broker_ids if b != old_leader]
        assert earliest(cluster.bootstrap_servers(live)) == TARGET
        records = read_from_beginning(cluster.bootstrap_servers(live), RECORDS - TARGET)
        assert [m.offset() for m in records] == list(range(TARGET, RECORDS))
        assert records[0].value() == f"v{TARGET}".encode().ljust(100, b".")
        # KIP-320, as a consumer with the old leader epoch would ask the new leader
        response = _ask(
            cluster.port(int(after["leader"])),
            epoch_v4.OffsetForLeaderEpochRequest(
                replica_id=-1,
                topics=(
                    epoch_v4.OffsetForLeaderTopic(
                        topic=TOPIC,
                        partitions=(
                            epoch_v4.OffsetForLeaderPartition(
                                partition=0,
                                current_leader_epoch=int(before["leader_epoch"]),
                                leader_epoch=int(before["leader_epoch"]),
                            ),
                        ),
                    ),
                ),
            ),
        )
        assert response.topics[0].partitions[0].error_code is ErrorCode.fenced_leader_epoch
        answer = (
            _ask(
                cluster.port(int(after["leader"])),
                epoch_v4.OffsetForLeaderEpochRequest(
                    replica_id=-1,
                    topics=(
                        epoch_v4.OffsetForLeaderTopic(
                            topic=TOPIC,
                            partitions=(
                                epoch_v4.OffsetForLeaderPartition(
                                    partition=0,
                                    current_leader_epoch=int(after["leader_epoch"]),
                                    leader_epoch=int(before["leader_epoch"]),
                                ),
                            ),
                        ),
                    ),
                ),
            )
            .topics[0]
            .partitions[0]
        )
        # the old epoch ended where the new leader's epoch began: after every record
        assert (answer.error_code, answer.leader_epoch, answer.end_offset) == (
            ErrorCode.none,
            int(before["leader_epoch"]),
            RECORDS,
        )

        # Every broker restarts: the log start offset comes back from the checkpoint.
        cluster.start_broker(old_leader)
        for broker_id in cluster.broker_ids:
            cluster.stop_broker(broker_id)
        for broker_id in cluster.broker_ids:
            cluster.start_broker(broker_id, wait=False)
        cluster.wait_until_ready(cluster.broker_ids, 60)
        wait_for_leaders(bootstrap, {TOPIC: 1})
        for broker_id in cluster.broker_ids:
            start = wait_for(
                lambda b=broker_id: replica_log_start(cluster, b),
                what=f"broker {broker_id} hosting",
            )
            assert start == TARGET, broker_id
        records = read_from_beginning(bootstrap, RECORDS - TARGET)
        assert [m.offset() for m in records][:1] == [TARGET]

        # -1: delete up to the high watermark (a new client: leaders moved in the restart)
        fresh = AdminClient({"bootstrap.servers": bootstrap})
        to_end = TopicPartition(TOPIC, 0, OFFSET_END)
        deleted = fresh.delete_records([to_end], request_timeout=60, operation_timeout=30)
        assert next(iter(deleted.values())).result(timeout=60).low_watermark == RECORDS
        assert earliest(bootstrap) == RECORDS
    finally:
        zk.close()


def test_consumer_detects_truncation_after_an_unclean_election(cluster_factory) -> None:
    cluster = cluster_factory(2, overrides=FAST)
    bootstrap = cluster.bootstrap_servers()
    topic = "diverge"
    create_topic(
        bootstrap,
        topic,
        partitions=1,
        replication=2,
        config={"unclean.leader.election.enable": "true", "min.insync.replicas": "1"},
    )
    wait_for_leaders(bootstrap, {topic: 1})
    zk = ZkView(cluster)
    consumer = None
    try:
        state = wait_for(
            lambda: (s := zk.partition_state(topic, 0)) and len(s["isr"]) == 2 and s,
            what="both replicas in sync",
        )
        leader = int(state["leader"])
        follower = next(b for b in cluster.broker_ids if b != leader)
        p = producer(bootstrap)
        for i in range(10):
            p.produce(topic, value=f"kept-{i}".encode(), partition=0)
        assert p.flush(60) == 0
        # The follower leaves; the leader goes on alone and takes 10 more records.
        cluster.stop_broker(follower)
        wait_for(lambda: zk.partition_state(topic, 0)["isr"] == [leader], what="ISR [leader]")
        for i in range(10):
            p.produce(topic, value=f"lost-{i}".encode(), partition=0)
        assert p.flush(60) == 0
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "replog-tests",
                "enable.auto.commit": False,
                "auto.offset.reset": "error",
                "topic.metadata.refresh.interval.ms": 500,
            }
        )
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen = []
        deadline = time.monotonic() + 60
        while len(seen) < 20 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                seen.append(msg.offset())
        assert seen == list(range(20))
        # The leader dies; the stale follower comes back and is elected uncleanly: it never
        # had offsets 10-19, which the consumer has read.
        cluster.kill_broker(leader)
        cluster.start_broker(follower)
        wait_for(
            lambda: zk.partition_state(topic, 0)["leader"] == follower,
            what="the unclean election of the follower",
        )
        errors = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                errors.append(msg.error())
                if "truncation" in msg.error().str():
                    break
            else:
                raise AssertionError(f"read offset {msg.offset()} past the truncation")
        truncation = [e for e in errors if "truncation" in e.str()]
        assert truncation, errors
        assert truncation[0].code() == KafkaError._AUTO_OFFSET_RESET
        # the new leader's answer: the consumer's epoch ended at offset 10
        assert "broker end offset is 10" in truncation[0].str(), truncation[0].str()
    finally:
        if consumer is not None:
            consumer.close()
        zk.close()
