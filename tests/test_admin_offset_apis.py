"""The admin and offset APIs clients call, against a real broker process.

confluent-kafka's AdminClient (describe_cluster, list_offsets, delete_records),
kafka-python's KafkaAdminClient (describe_log_dirs, describe_producers) and, where
no client sends what Kafka's rules turn on, requests written with kio through
``replog.protocol.client.KafkaConnection``. One broker for the module; the
replicated DeleteRecords tests are in ``test_delete_records_cluster.py``.
"""

from __future__ import annotations

import asyncio
import datetime
import os
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AclOperation, AdminClient, OffsetSpec
from kafka import TopicPartition as KafkaPythonTopicPartition
from kafka.admin import KafkaAdminClient
from kio.schema.delete_records.v2 import request as delete_v2
from kio.schema.describe_cluster.v0 import request as cluster_v0
from kio.schema.describe_cluster.v2 import request as cluster_v2
from kio.schema.describe_log_dirs.v4 import request as log_dirs_v4
from kio.schema.describe_producers.v0 import request as producers_v0
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4 import request as init_v4
from kio.schema.list_offsets.v1 import request as list_v1
from kio.schema.list_offsets.v6 import request as list_v6
from kio.schema.list_offsets.v10 import request as list_v10
from kio.schema.list_offsets.v11 import request as list_v11
from kio.schema.offset_for_leader_epoch.v4 import request as epoch_v4
from kio.static.primitive import i32Timedelta

from clients_util import create_topic
from replog.protocol.client import KafkaConnection

TOPIC = "offsets-apis"
# (timestamp, value): the largest timestamp sits in the middle of the log (KIP-734).
TIMESTAMPED = [(1_000, b"a"), (5_000, b"b"), (3_000, b"c"), (5_000, b"d"), (2_000, b"e")]


def _run(port: int, *requests: Any) -> list[Any]:
    async def go() -> list[Any]:
        conn = KafkaConnection("127.0.0.1", port, client_id="replog-tests")
        await conn.connect()
        try:
            return [await conn.request(r, timeout_s=30) for r in requests]
        finally:
            await conn.close()

    return asyncio.run(go())


def _timeout(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


@pytest.fixture(scope="module")
def broker(replog_broker):
    """The module's broker with TOPIC (1 partition) holding TIMESTAMPED, written by one
    idempotent producer."""
    bootstrap = replog_broker.bootstrap_servers()
    create_topic(bootstrap, TOPIC, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for ts, value in TIMESTAMPED:
        producer.produce(TOPIC, value=value, partition=0, timestamp=ts)
        producer.flush(30)  # one batch per record: each keeps its own max timestamp
    assert producer.flush(30) == 0
    return replog_broker


def _port(cluster) -> int:
    return cluster.port(cluster.broker_ids[0])


# -- DescribeCluster -----------------------------------------------------------------------


def test_describe_cluster_with_confluent(broker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers()})
    described = admin.describe_cluster(include_authorized_operations=True).result(timeout=30)
    assert [n.id for n in described.nodes] == [0]
    assert described.nodes[0].port == _port(broker)
    assert described.controller is not None and described.controller.id == 0
    assert described.cluster_id == admin.list_topics(timeout=10).cluster_id
    assert described.cluster_id
    # No authorizer: every operation Kafka supports on a cluster is allowed.
    assert set(described.authorized_operations) == {
        AclOperation.CREATE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
    }
    plain = admin.describe_cluster().result(timeout=30)
    assert plain.authorized_operations is None


def test_describe_cluster_endpoint_types_and_operations_not_asked(broker) -> None:
    v0, controllers, unknown, brokers = _run(
        _port(broker),
        cluster_v0.DescribeClusterRequest(include_cluster_authorized_operations=False),
        cluster_v2.DescribeClusterRequest(
            include_cluster_authorized_operations=False,
            endpoint_type=2,
            include_fenced_brokers=True,
        ),
        cluster_v2.DescribeClusterRequest(
            include_cluster_authorized_operations=False,
            endpoint_type=7,
            include_fenced_brokers=True,
        ),
        cluster_v2.DescribeClusterRequest(
            include_cluster_authorized_operations=False,
            endpoint_type=1,
            include_fenced_brokers=True,
        ),
    )
    assert v0.error_code is ErrorCode.none
    assert v0.cluster_authorized_operations == -2147483648
    assert [(b.broker_id, b.port) for b in v0.brokers] == [(0, _port(broker))]
    assert controllers.error_code is ErrorCode.mismatched_endpoint_type
    assert unknown.error_code is ErrorCode.unsupported_endpoint_type
    assert brokers.error_code is ErrorCode.none and brokers.controller_id == 0
    assert [(b.broker_id, b.is_fenced) for b in brokers.brokers] == [(0, False)]


# -- ListOffsets ------------------------------------------------------------------------------


def _list_offsets(admin: AdminClient, spec: OffsetSpec, partition: int = 0):
    tp = TopicPartition(TOPIC, partition)
    return admin.list_offsets({tp: spec}, request_timeout=30)[tp].result(timeout=30)


def test_list_offsets_with_confluent(broker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers()})
    earliest = _list_offsets(admin, OffsetSpec.earliest())
    latest = _list_offsets(admin, OffsetSpec.latest())
    assert (earliest.offset, latest.offset) == (0, len(TIMESTAMPED))
    newest = _list_offsets(admin, OffsetSpec.max_timestamp())
    # the first record carrying the largest timestamp (offset 1, not 3)
    assert (newest.offset, newest.timestamp) == (1, 5_000)
    at = _list_offsets(admin, OffsetSpec.for_timestamp(2_500))
    assert (at.offset, at.timestamp) == (1, 5_000)  # the first record at or after 2500
    assert _list_offsets(admin, OffsetSpec.for_timestamp(5_001)).offset == -1
    assert _list_offsets(admin, OffsetSpec.for_timestamp(0)).offset == 0


def test_list_offsets_answers_by_version_and_timestamp(broker) -> None:
    def ask(version_module, timestamps, replica_id=-1, **extra):
        partitions = tuple(
            version_module.ListOffsetsPartition(partition_index=0, timestamp=ts, **extra)
            for ts in timestamps
        )
        fields = {"replica_id": replica_id, "topics": ()}
        if "isolation_level" in version_module.ListOffsetsRequest.__dataclass_fields__:
            fields["isolation_level"] = 0
        if "timeout" in version_module.ListOffsetsRequest.__dataclass_fields__:
            fields["timeout"] = _timeout(1000)
        requests = [
            version_module.ListOffsetsRequest(
                **{
                    **fields,
                    "topics": (version_module.ListOffsetsTopic(name=TOPIC, partitions=(p,)),),
                }
            )
            for p in partitions
        ]
        return [r.topics[0].partitions[0] for r in _run(_port(broker), *requests)]

    end = len(TIMESTAMPED)
    latest, earliest, newest, local, tiered, bad = ask(
        list_v10, [-1, -2, -3, -4, -5, -7], current_leader_epoch=-1
    )
    assert (latest.error_code, latest.offset, latest.leader_epoch) == (ErrorCode.none, end, 0)
    assert (earliest.offset, earliest.timestamp, earliest.leader_epoch) == (0, -1, 0)
    assert (newest.offset, newest.timestamp, newest.leader_epoch) == (1, 5_000, 0)
    assert (local.error_code, local.offset) == (ErrorCode.none, 0)
    assert (tiered.error_code, tiered.offset, tiered.leader_epoch) == (ErrorCode.none, -1, -1)
    assert bad.error_code is ErrorCode.unsupported_version
    # v11 (KIP-1023): the earliest offset pending upload to tiered storage; none here
    (pending,) = ask(list_v11, [-6], current_leader_epoch=-1)
    assert (pending.error_code, pending.offset, pending.timestamp, pending.leader_epoch) == (
        ErrorCode.none,
        -1,
        -1,
        -1,
    )
    # each special timestamp from the version that introduced it
    (early_pending,) = ask(list_v10, [-6], current_leader_epoch=-1)
    assert early_pending.error_code is ErrorCode.unsupported_version
    assert [p.error_code for p in ask(list_v6, [-3, -4, -5], current_leader_epoch=-1)] == [
        ErrorCode.unsupported_version
    ] * 3
    (old_latest,) = ask(list_v1, [-1])
    assert (old_latest.error_code, old_latest.offset) == (ErrorCode.none, end)
    # KIP-320 fencing of the request's leader epoch (the partition is at epoch 0)
    (unknown,) = ask(list_v10, [-1], current_leader_epoch=1)
    assert unknown.error_code is ErrorCode.unknown_leader_epoch
    # a debugging client (replica id -2) and a follower see the log end too
    (debug,) = ask(list_v10, [-1], replica_id=-2, current_leader_epoch=0)
    assert (debug.error_code, debug.offset) == (ErrorCode.none, end)


def test_list_offsets_duplicates_and_unknown_partitions(broker) -> None:
    (response,) = _run(
        _port(broker),
        list_v10.ListOffsetsRequest(
            replica_id=-1,
            isolation_level=0,
            timeout=_timeout(1000),
            topics=(
                list_v10.ListOffsetsTopic(
                    name=TOPIC,
                    partitions=(
                        list_v10.ListOffsetsPartition(partition_index=0, timestamp=-1),
                        list_v10.ListOffsetsPartition(partition_index=0, timestamp=-2),
                        list_v10.ListOffsetsPartition(partition_index=5, timestamp=-1),
                    ),
                ),
                list_v10.ListOffsetsTopic(
                    name="no-such-topic",
                    partitions=(list_v10.ListOffsetsPartition(partition_index=0, timestamp=-1),),
                ),
            ),
        ),
    )
    answers = {(t.name, p.partition_index): p for t in response.topics for p in t.partitions}
    assert set(answers) == {(TOPIC, 0), (TOPIC, 5), ("no-such-topic", 0)}
    assert answers[(TOPIC, 0)].error_code is ErrorCode.invalid_request
    assert answers[(TOPIC, 5)].error_code is ErrorCode.unknown_topic_or_partition
    assert answers[("no-such-topic", 0)].error_code is ErrorCode.unknown_topic_or_partition


# -- OffsetForLeaderEpoch (KIP-320, as a consumer asks) ----------------------------------------


def test_offset_for_leader_epoch_for_a_consumer(broker) -> None:
    def ask(current: int, epoch: int, partition: int = 0, topic: str = TOPIC):
        (response,) = _run(
            _port(broker),
            epoch_v4.OffsetForLeaderEpochRequest(
                replica_id=-1,
                topics=(
                    epoch_v4.OffsetForLeaderTopic(
                        topic=topic,
                        partitions=(
                            epoch_v4.OffsetForLeaderPartition(
                                partition=partition,
                                current_leader_epoch=current,
                                leader_epoch=epoch,
                            ),
                        ),
                    ),
                ),
            ),
        )
        return response.topics[0].partitions[0]

    current = ask(0, 0)
    assert (current.error_code, current.leader_epoch, current.end_offset) == (
        ErrorCode.none,
        0,
        len(TIMESTAMPED),
    )
    assert ask(1, 0).error_code is ErrorCode.unknown_leader_epoch
    # an epoch above the leader's own: the leader is stale, not the log truncated (Kafka
    # answers UNDEFINED, which librdkafka takes for truncation and resets the consumer)
    newer_epoch = ask(-1, 3)
    assert (newer_epoch.error_code, newer_epoch.leader_epoch, newer_epoch.end_offset) == (
        ErrorCode.unknown_leader_epoch,
        -1,
        -1,
    )
    assert ask(-1, 0, partition=9).error_code is ErrorCode.unknown_topic_or_partition
    assert ask(-1, 0, topic="nope").error_code is ErrorCode.unknown_topic_or_partition


# -- DescribeLogDirs -------------------------------------------------------------------------


def test_describe_log_dirs_with_kafka_python(broker) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers())
    try:
        (answer,) = admin.describe_log_dirs()
    finally:
        admin.close()
    data_dir = Path(broker.broker_dir(0)) / "data"
    assert answer["broker"] == 0
    (log_dir,) = answer["log_dirs"]
    assert log_dir["error_code"] == 0
    assert log_dir["log_dir"] == os.path.abspath(data_dir)
    topics = {t["name"]: t["partitions"] for t in log_dir["topics"]}
    (partition,) = topics[TOPIC]
    on_disk = sum(f.stat().st_size for f in (data_dir / f"{TOPIC}-0").glob("*.log"))
    assert partition["partition_index"] == 0
    assert partition["partition_size"] == on_disk > 0
    assert partition["offset_lag"] == 0 and partition["is_future_key"] is False


def test_describe_log_dirs_v4_sizes_and_filters(broker) -> None:
    everything, only, empty = _run(
        _port(broker),
        log_dirs_v4.DescribeLogDirsRequest(topics=None),
        log_dirs_v4.DescribeLogDirsRequest(
            topics=(log_dirs_v4.DescribableLogDirTopic(topic=TOPIC, partitions=(0, 3)),)
        ),
        log_dirs_v4.DescribeLogDirsRequest(topics=()),
    )
    (result,) = everything.results
    statvfs = os.statvfs(broker.broker_dir(0) / "data")
    assert result.total_bytes == statvfs.f_blocks * statvfs.f_frsize
    assert 0 < result.usable_bytes <= result.total_bytes
    assert TOPIC in {t.name for t in result.topics}
    (filtered,) = only.results
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in filtered.topics] == [
        (TOPIC, [0])
    ]
    assert empty.results[0].topics == ()


# -- DescribeProducers and InitProducerId --------------------------------------------------------


def test_describe_producers_with_kafka_python(broker) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers())
    try:
        states = admin.describe_producers([KafkaPythonTopicPartition(TOPIC, 0)])
    finally:
        admin.close()
    (producer,) = states[KafkaPythonTopicPartition(TOPIC, 0)].active_producers
    assert producer.producer_id >= 0 and producer.producer_epoch == 0
    assert producer.last_sequence == len(TIMESTAMPED) - 1
    assert producer.last_timestamp == max(ts for ts, _ in TIMESTAMPED)
    assert producer.coordinator_epoch == -1
    assert producer.current_transaction_start_offset == -1


def test_describe_producers_errors(broker) -> None:
    (response,) = _run(
        _port(broker),
        producers_v0.DescribeProducersRequest(
            topics=(
                producers_v0.TopicRequest(name=TOPIC, partition_indexes=(0, 4)),
                producers_v0.TopicRequest(name="nope", partition_indexes=(0,)),
            )
        ),
    )
    errors = {
        (t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions
    }
    assert errors == {
        (TOPIC, 0): ErrorCode.none,
        (TOPIC, 4): ErrorCode.unknown_topic_or_partition,
        ("nope", 0): ErrorCode.unknown_topic_or_partition,
    }


def test_init_producer_id_v4(broker) -> None:
    def request(transactional_id=None, producer_id=-1, producer_epoch=-1):
        return init_v4.InitProducerIdRequest(
            transactional_id=transactional_id,
            transaction_timeout=_timeout(60_000),
            producer_id=producer_id,
            producer_epoch=producer_epoch,
        )

    fresh, bump, half, other_half, empty_txn, txn = _run(
        _port(broker),
        request(),
        request(producer_id=0, producer_epoch=0),
        request(producer_id=7),
        request(producer_epoch=3),
        request(transactional_id=""),
        request(transactional_id="payments"),
    )
    assert fresh.error_code is ErrorCode.none and fresh.producer_epoch == 0
    # KIP-360 without transactions: Kafka hands an idempotent producer a new id at epoch 0
    assert bump.error_code is ErrorCode.none and bump.producer_epoch == 0
    assert bump.producer_id > fresh.producer_id >= 0
    for refused in (half, other_half, empty_txn):
        assert (refused.error_code, refused.producer_id, refused.producer_epoch) == (
            ErrorCode.invalid_request,
            -1,
            -1,
        )
    # A transactional id goes to its transaction coordinator; with no __transaction_state
    # yet (no FindCoordinator asked for it), no broker is that coordinator
    assert txn.error_code is ErrorCode.not_coordinator


# -- DeleteRecords on one broker: bad input -------------------------------------------------------


def test_delete_records_bad_input(broker) -> None:
    bootstrap = broker.bootstrap_servers()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    end = len(TIMESTAMPED)
    beyond = admin.delete_records([TopicPartition(TOPIC, 0, end + 1)], request_timeout=30)
    with pytest.raises(KafkaException) as info:
        next(iter(beyond.values())).result(timeout=30)
    assert "OFFSET_OUT_OF_RANGE" in str(info.value) or "out of range" in str(info.value).lower()

    def delete(topic: str, offset: int, partition: int = 0):
        (response,) = _run(
            _port(broker),
            delete_v2.DeleteRecordsRequest(
                topics=(
                    delete_v2.DeleteRecordsTopic(
                        name=topic,
                        partitions=(
                            delete_v2.DeleteRecordsPartition(
                                partition_index=partition, offset=offset
                            ),
                        ),
                    ),
                ),
                timeout=_timeout(5000),
            ),
        )
        (part,) = response.topics[0].partitions
        return part.error_code, part.low_watermark

    assert delete("no-such-topic", 1) == (ErrorCode.unknown_topic_or_partition, -1)
    assert delete(TOPIC, 1, partition=3) == (ErrorCode.unknown_topic_or_partition, -1)
    for negative in (-2, -3, -100):
        assert delete(TOPIC, negative) == (ErrorCode.offset_out_of_range, -1)
    assert delete(TOPIC, end + 1) == (ErrorCode.offset_out_of_range, -1)
    # nothing moved
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "t", "enable.auto.commit": False}
    )
    try:
        assert consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=20) == (0, end)
    finally:
        consumer.close()
