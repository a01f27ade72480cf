"""Topic ids (KIP-516) end to end: real brokers, a real ZooKeeper, confluent-kafka and
replog's own protocol client.

* The id written in ``/brokers/topics/<t>`` at creation is what confluent-kafka's
  ``describe_topics`` (Metadata v10+) shows and what every replica's ``partition.metadata``
  holds; it survives a broker restart and the controller's death (SIGKILL by pid).
* A topic deleted and created again under its name gets a new id everywhere; the old id is
  UNKNOWN_TOPIC_ID to Metadata v12 and DeleteTopics v6; CreateTopics v7 answers the id.
* A LeaderAndIsr naming another id than a partition's ``partition.metadata`` gets
  INCONSISTENT_TOPIC_ID and is not applied.

Processes are stopped by pid by the cluster fixtures, pass or fail.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import uuid
from typing import Any

from confluent_kafka import Consumer, TopicCollection
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.create_topics.v7 import request as create_v7
from kio.schema.delete_topics.v6 import request as delete_v6
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as metadata_v12
from kio.static.primitive import i32Timedelta

from cluster_util import ZkView, create_topic, producer, wait_for
from replog.cluster.launcher import LocalCluster
from replog.protocol import apis
from replog.protocol import controller_schemas as cs
from replog.protocol.apis import ApiKey
from replog.protocol.client import KafkaConnection
from replog.protocol.controller_schemas.leader_and_isr import TYPE_INCREMENTAL
from replog.storage.partition_metadata import read_partition_metadata
from replog.zk import data as zd

TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=30))


def znode_topic_id(zk: ZkView, topic: str) -> uuid.UUID | None:
    data, _ = zk.client.get(zd.topic_path(topic))
    return zd.decode_topic_id(data)


def described_topic_id(bootstrap: str, topic: str) -> uuid.UUID:
    """The id confluent-kafka's ``describe_topics`` reports (librdkafka prints ids in
    standard base64, Kafka in url-safe base64: compare the bits, not the text)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    found = admin.describe_topics(TopicCollection([topic]))[topic].result(timeout=30)
    kafka_uuid = found.topic_id
    high = kafka_uuid.get_most_significant_bits() & (2**64 - 1)
    low = kafka_uuid.get_least_significant_bits() & (2**64 - 1)
    return uuid.UUID(int=high << 64 | low)


def replica_topic_ids(cluster: LocalCluster, topic: str) -> dict[tuple[int, int], uuid.UUID | None]:
    """(broker, partition) -> the id in that replica's ``partition.metadata``."""
    found: dict[tuple[int, int], uuid.UUID | None] = {}
    for broker_id in cluster.broker_ids:
        for partition_dir in (cluster.broker_dir(broker_id) / "data").glob(f"{topic}-*"):
            partition = int(partition_dir.name.rsplit("-", 1)[1])
            found[(broker_id, partition)] = read_partition_metadata(partition_dir)
    return found


def request(cluster: LocalCluster, broker_id: int, body: Any) -> Any:
    async def go() -> Any:
        conn = KafkaConnection("127.0.0.1", cluster.port(broker_id), client_id="test-topic-ids")
        await conn.connect()
        try:
            return await conn.request(body, timeout_s=60)
        finally:
            await conn.close()

    return asyncio.run(go())


def metadata_by_id(cluster: LocalCluster, broker_id: int, topic_id: uuid.UUID) -> Any:
    body = metadata_v12.MetadataRequest(
        topics=(metadata_v12.MetadataRequestTopic(topic_id=topic_id, name=None),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    (topic,) = request(cluster, broker_id, body).topics
    return topic


def test_topic_id_survives_restart_and_controller_failover(cluster_factory) -> None:
    cluster = cluster_factory(brokers=2)
    zk = ZkView(cluster)
    try:
        create_topic(cluster.bootstrap_servers(), "ids", partitions=2, replication=2)
        topic_id = znode_topic_id(zk, "ids")
        assert topic_id is not None
        assert described_topic_id(cluster.bootstrap_servers(), "ids") == topic_id
        expected_files = {(b, p): topic_id for b in (0, 1) for p in (0, 1)}
        wait_for(
            lambda: replica_topic_ids(cluster, "ids") == expected_files,
            what="partition.metadata with the topic's id on every replica",
        )

        controller, _ = zk.controller()
        assert controller in (0, 1)
        other = 1 - controller
        # A clean restart of the broker that is not controller: it reads its files back.
        cluster.stop_broker(other)
        cluster.start_broker(other)
        assert described_topic_id(cluster.bootstrap_servers([other]), "ids") == topic_id

        # The controller dies (SIGKILL): the survivor takes over and keeps the id.
        cluster.kill_broker(controller)
        wait_for(lambda: zk.controller()[0] == other, what=f"broker {other} to be controller")
        # ... and until its failover told it so (before, its metadata still names the dead
        # broker, and librdkafka may send the describe there and wait out its timeout)
        survivor = AdminClient({"bootstrap.servers": cluster.bootstrap_servers([other])})
        wait_for(
            lambda: survivor.list_topics(timeout=10).controller_id == other,
            what=f"broker {other}'s metadata naming itself controller",
        )
        assert znode_topic_id(zk, "ids") == topic_id
        assert described_topic_id(cluster.bootstrap_servers([other]), "ids") == topic_id
        cluster.start_broker(controller)
        assert described_topic_id(cluster.bootstrap_servers([controller]), "ids") == topic_id
        assert replica_topic_ids(cluster, "ids") == expected_files
        assert znode_topic_id(zk, "ids") == topic_id
    finally:
        zk.close()


def test_recreated_topic_gets_a_new_id_everywhere(cluster_factory) -> None:
    cluster = cluster_factory(brokers=2)
    zk = ZkView(cluster)
    bootstrap = cluster.bootstrap_servers()
    try:
        # CreateTopics v7 answers the id it wrote; v5+ the topic's configuration.
        created = request(
            cluster,
            0,
            create_v7.CreateTopicsRequest(
                topics=(
                    create_v7.CreatableTopic(
                        name="again",
                        num_partitions=2,
                        replication_factor=2,
                        assignments=(),
                        configs=(
                            create_v7.CreatableTopicConfig(name="retention.ms", value="1234"),
                        ),
                    ),
                ),
                timeout=TIMEOUT,
                validate_only=False,
            ),
        )
        (result,) = created.topics
        assert result.error_code == ErrorCode.none
        first_id = znode_topic_id(zk, "again")
        assert first_id is not None and result.topic_id == first_id
        assert (result.num_partitions, result.replication_factor) == (2, 2)
        configs = {c.name: (c.value, c.config_source) for c in result.configs}
        assert configs["retention.ms"] == ("1234", 1)  # an override: TOPIC_CONFIG
        assert configs["cleanup.policy"] == ("delete", 5)  # a default: DEFAULT_CONFIG

        wait_for(
            lambda: set(replica_topic_ids(cluster, "again").values()) == {first_id},
            what="the first id in partition.metadata",
        )
        # A live producer refreshes its topics' metadata; one allowed to auto-create would
        # bring "again" back after each deletion below (as against Kafka).
        p = producer(bootstrap, **{"allow.auto.create.topics": False})
        p.produce("again", b"old", partition=0)
        assert p.flush(30) == 0

        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.delete_topics(["again"], operation_timeout=30)["again"].result(timeout=60)
        wait_for(lambda: "again" not in zk.topics(), what="the deletion to finish")
        wait_for(lambda: not replica_topic_ids(cluster, "again"), what="the old replicas to go")
        # Its id is now unknown to Metadata v12 and DeleteTopics v6.
        for broker_id in cluster.broker_ids:
            wait_for(
                lambda b=broker_id: (
                    metadata_by_id(cluster, b, first_id).error_code == ErrorCode.unknown_topic_id
                ),
                what=f"broker {broker_id} to forget the old id",
            )

        create_topic(bootstrap, "again", partitions=2, replication=2)
        second_id = znode_topic_id(zk, "again")
        assert second_id is not None and second_id != first_id
        expected_files = {(b, p): second_id for b in (0, 1) for p in (0, 1)}
        wait_for(
            lambda: replica_topic_ids(cluster, "again") == expected_files,
            what="partition.metadata with the new id on every replica",
        )
        for broker_id in cluster.broker_ids:
            one = cluster.bootstrap_servers([broker_id])
            wait_for(
                lambda one=one: described_topic_id(one, "again") == second_id,
                what=f"Metadata from broker {broker_id} to name the new id",
            )
            # The admin client above may have asked another broker: wait until this one
            # has the new topic's partitions too (its UpdateMetadata can come later).
            by_id = wait_for(
                lambda b=broker_id: (
                    answer
                    if (answer := metadata_by_id(cluster, b, second_id)).error_code
                    != ErrorCode.unknown_topic_or_partition
                    else None
                ),
                what=f"broker {broker_id} to have the new topic's partitions",
            )
            assert (by_id.error_code, by_id.name, by_id.topic_id) == (
                ErrorCode.none,
                "again",
                second_id,
            )
            assert sorted(p.partition_index for p in by_id.partitions) == [0, 1]
            assert metadata_by_id(cluster, broker_id, first_id).error_code == (
                ErrorCode.unknown_topic_id
            )
        # The new topic starts empty: nothing of the old one's log is served.
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ids"})
        try:
            low, high = consumer.get_watermark_offsets(KafkaTopicPartition("again", 0), timeout=30)
        finally:
            consumer.close()
        assert (low, high) == (0, 0)

        # DeleteTopics v6 by id: the old id is unknown, the new one deletes the topic.
        deleted = request(
            cluster,
            1,
            delete_v6.DeleteTopicsRequest(
                topics=(
                    delete_v6.DeleteTopicState(name=None, topic_id=first_id),
                    delete_v6.DeleteTopicState(name=None, topic_id=second_id),
                ),
                timeout=TIMEOUT,
            ),
        )
        outcome = {r.topic_id: (r.error_code, r.name) for r in deleted.responses}
        assert outcome == {
            first_id: (ErrorCode.unknown_topic_id, None),
            second_id: (ErrorCode.none, "again"),
        }
        wait_for(lambda: "again" not in zk.topics(), what="deletion by id to finish")
    finally:
        zk.close()


def test_every_metadata_version_answers_and_v10_on_carry_the_id(cluster_factory) -> None:
    cluster = cluster_factory(brokers=1)
    zk = ZkView(cluster)
    try:
        create_topic(cluster.bootstrap_servers(), "versions", partitions=2, replication=1)
        topic_id = znode_topic_id(zk, "versions")
        lo, hi = apis.CLIENT_API_VERSIONS[ApiKey.METADATA]
        assert (lo, hi) == (0, 13)
        for version in range(lo, hi + 1):
            cls = apis.request_schema(ApiKey.METADATA, version)
            topic_cls = apis.nested(cls, "MetadataRequestTopic")
            asked = apis.make(topic_cls, name="versions", topic_id=None)
            body = apis.make(
                cls,
                topics=(asked,),
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
            (topic,) = request(cluster, 0, body).topics
            assert (topic.error_code, topic.name) == (ErrorCode.none, "versions"), version
            assert sorted(p.partition_index for p in topic.partitions) == [0, 1], version
            assert getattr(topic, "topic_id", None) == (topic_id if version >= 10 else None)
            if version in (10, 11):  # ids are for v12+ requests only (Kafka: INVALID_REQUEST)
                by_id = apis.make(topic_cls, name="versions", topic_id=topic_id)
                body = dataclasses.replace(body, topics=(by_id,))
                (topic,) = request(cluster, 0, body).topics
                assert topic.error_code == ErrorCode.invalid_request, version
        # DeleteTopics v6 names a topic by name or by id, never both.
        both = request(
            cluster,
            0,
            delete_v6.DeleteTopicsRequest(
                topics=(delete_v6.DeleteTopicState(name="versions", topic_id=topic_id),),
                timeout=TIMEOUT,
            ),
        )
        assert [r.error_code for r in both.responses] == [ErrorCode.invalid_request]
        assert "versions" in zk.topics()
    finally:
        zk.close()


def test_leader_and_isr_with_another_topic_id_is_refused(cluster_factory) -> None:
    cluster = cluster_factory(brokers=1)
    zk = ZkView(cluster)
    try:
        create_topic(cluster.bootstrap_servers(), "clash", partitions=1, replication=1)
        topic_id = znode_topic_id(zk, "clash")
        partition_dir = cluster.broker_dir(0) / "data" / "clash-0"
        wait_for(
            lambda: read_partition_metadata(partition_dir) == topic_id,
            what="partition.metadata of clash-0",
        )
        state = zk.partition_state("clash", 0)
        assert state is not None
        controller, controller_epoch = zk.controller()
        assert controller == 0

        def leader_and_isr(sent_id: uuid.UUID) -> Any:
            """What the controller would send next (one leader epoch on), but for ``sent_id``."""
            return cs.LeaderAndIsrRequest(
                controller_id=controller,
                controller_epoch=controller_epoch,
                broker_epoch=-1,
                type=TYPE_INCREMENTAL,
                topic_states=(
                    cs.LeaderAndIsrTopicState(
                        topic_name="clash",
                        topic_id=sent_id,
                        partition_states=(
                            cs.LeaderAndIsrPartitionState(
                                partition_index=0,
                                controller_epoch=controller_epoch,
                                leader=0,
                                leader_epoch=state["leader_epoch"] + 1,
                                isr=(0,),
                                zk_version=state["zk_version"] + 1,
                                replicas=(0,),
                                is_new=False,
                            ),
                        ),
                    ),
                ),
                live_leaders=(
                    cs.LeaderAndIsrLiveLeader(
                        broker_id=0, host_name="127.0.0.1", port=cluster.port(0)
                    ),
                ),
            )

        stranger = uuid.uuid4()
        response = request(cluster, 0, leader_and_isr(stranger))
        assert response.error_code == ErrorCode.none
        ((topic_error,),) = [t.partition_errors for t in response.topics]
        assert response.topics[0].topic_id == stranger
        assert topic_error.error_code == ErrorCode.inconsistent_topic_id
        assert int(ErrorCode.inconsistent_topic_id) == 103
        assert read_partition_metadata(partition_dir) == topic_id  # untouched

        # Not applied: records still go in at the leader epoch ZooKeeper holds.
        p = producer(cluster.bootstrap_servers())
        p.produce("clash", b"after", partition=0)
        assert p.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers(), "group.id": "c"})
        try:
            consumer.assign([KafkaTopicPartition("clash", 0, 0)])
            message = wait_for(lambda: _poll_one(consumer), what="the record back")
        finally:
            consumer.close()
        assert message.value() == b"after"
        assert message.leader_epoch() == state["leader_epoch"]
    finally:
        zk.close()


def _poll_one(consumer: Consumer) -> Any:
    message = consumer.poll(0.5)
    return message if message is not None and message.error() is None else None
