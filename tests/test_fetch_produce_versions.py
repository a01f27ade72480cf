"""Produce and Fetch at their current versions against real brokers.

* confluent-kafka (librdkafka 2.16) produces and consumes at its highest versions
  (ProduceRequest v10+, FetchRequest v12+, by its own ``debug=protocol`` log), and reads
  back exactly what it wrote.
* Fetch v13+ names topics by id: a known id reads the records a v11 fetch by name reads,
  an unknown id is UNKNOWN_TOPIC_ID for each of its partitions, echoing the id.
* KIP-595: a consumer whose ``last_fetched_epoch`` ends in the leader's log before its
  fetch offset is answered with ``diverging_epoch`` and no records, at once (a long poll
  would outlast the client's timeout); an epoch the leader never had is
  OFFSET_OUT_OF_RANGE; a fetch within its epoch is read as usual.
* KIP-951: a follower, or a broker with no replica of a partition the cluster knows,
  answers Produce v10+ and Fetch v16+ NOT_LEADER_OR_FOLLOWER with the leader's id, epoch
  and endpoint; older versions carry none of it.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import re
import uuid
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from clients_util import (
    consume_confluent,
    create_topic,
    end_offsets,
    make_records,
    produce_confluent,
    wait_for_leaders,
)
from cluster_util import wait_for
from fixtures.cluster import INTERNAL_TOPICS
from replog.cluster.launcher import LocalCluster
from replog.protocol.apis import ApiKey, make, nested, request_schema
from replog.protocol.client import KafkaConnection
from replog.protocol.records import simple_batch

_SENT = re.compile(r"Sent (?P<name>Produce|Fetch)Request \(v(?P<version>\d+),")


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _librdkafka_logger() -> tuple[logging.Logger, _Lines]:
    logger = logging.getLogger(f"replog-tests.rdkafka.{uuid.uuid4().hex[:8]}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    lines = _Lines()
    logger.addHandler(lines)
    return logger, lines


def _sent_versions(lines: list[str], name: str) -> set[int]:
    return {int(m["version"]) for line in lines if (m := _SENT.search(line)) and m["name"] == name}


# -- raw requests ---------------------------------------------------------------------------


def _call(port: int, body: Any, timeout_s: float = 30) -> Any:
    async def go() -> Any:
        conn = KafkaConnection("127.0.0.1", port, client_id="fetch-produce-versions")
        await conn.connect()
        try:
            return await conn.request(body, timeout_s=timeout_s)
        finally:
            await conn.close()

    return asyncio.run(go())


def _metadata_v12(port: int, topic: str) -> Any:
    cls = request_schema(ApiKey.METADATA, 12)
    body = make(
        cls,
        topics=(make(nested(cls, "MetadataRequestTopic"), name=topic, topic_id=None),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    return _call(port, body)


def _metadata(port: int, topic: str) -> tuple[uuid.UUID, dict[int, tuple[int, int]], dict]:
    """``(topic id, {partition: (leader, leader epoch)}, {broker id: (host, port)})``."""
    response = _metadata_v12(port, topic)
    [t] = response.topics
    assert t.error_code == ErrorCode.none, t
    assert t.topic_id is not None, f"Metadata v12 names no topic id for {topic}"
    partitions = {
        int(p.partition_index): (int(p.leader_id), int(p.leader_epoch)) for p in t.partitions
    }
    brokers = {int(b.node_id): (b.host, int(b.port)) for b in response.brokers}
    return t.topic_id, partitions, brokers


def _knows_leader(port: int, topic: str) -> bool:
    """Whether the broker at ``port`` names a leader for every partition of ``topic``."""
    [t] = _metadata_v12(port, topic).topics
    return t.error_code == ErrorCode.none and all(p.leader_id >= 0 for p in t.partitions)


def _fetch_request(
    version: int,
    partitions: list[tuple[str | uuid.UUID, int, int]],
    *,
    last_fetched_epoch: int = -1,
    max_wait_ms: int = 100,
    min_bytes: int = 1,
) -> Any:
    """A consumer's Fetch of ``(topic name or id, partition, offset)`` at ``version``."""
    cls = request_schema(ApiKey.FETCH, version)
    by_topic: dict[str | uuid.UUID, list] = {}
    for topic, partition, offset in partitions:
        by_topic.setdefault(topic, []).append(
            make(
                nested(cls, "FetchPartition"),
                partition=partition,
                current_leader_epoch=-1,
                fetch_offset=offset,
                last_fetched_epoch=last_fetched_epoch,
                log_start_offset=-1,
                partition_max_bytes=1 << 20,
            )
        )
    topics = tuple(
        make(
            nested(cls, "FetchTopic"),
            topic=key if isinstance(key, str) else None,
            topic_id=key if isinstance(key, uuid.UUID) else None,
            partitions=tuple(parts),
        )
        for key, parts in by_topic.items()
    )
    return make(
        cls,
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=min_bytes,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=topics,
        forgotten_topics_data=(),
        rack_id="",
    )


def _produce_request(
    version: int, topic: str, partition: int, records: bytes, acks: int = 1
) -> Any:
    cls = request_schema(ApiKey.PRODUCE, version)
    part = nested(cls, "PartitionProduceData")(index=partition, records=records)
    return cls(
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(nested(cls, "TopicProduceData")(name=topic, partition_data=(part,)),),
    )


def _partitions(response: Any) -> list[tuple[Any, Any]]:
    return [(t, p) for t in response.responses for p in t.partitions]


# -- one broker -----------------------------------------------------------------------------


def test_confluent_produces_and_consumes_at_its_highest_versions(
    replog_broker: LocalCluster,
) -> None:
    bootstrap = replog_broker.bootstrap_servers()
    topic = "versions-confluent"
    create_topic(bootstrap, topic, partitions=3)
    records = make_records("current", 300, 3, ts_base=1_700_000_000_000)
    logger, produce_log = _librdkafka_logger()
    acked = produce_confluent(
        bootstrap, topic, records, debug="protocol", logger=logger, acks="all"
    )
    logger, consume_log = _librdkafka_logger()
    read = consume_confluent(bootstrap, topic, end_offsets(acked), debug="protocol", logger=logger)
    assert sorted(read, key=lambda r: (r.partition, r.offset)) == sorted(
        acked, key=lambda r: (r.partition, r.offset)
    )
    produce_versions = _sent_versions(produce_log.lines, "Produce")
    fetch_versions = _sent_versions(consume_log.lines, "Fetch")
    assert produce_versions and min(produce_versions) >= 10, produce_versions
    assert fetch_versions and min(fetch_versions) >= 12, fetch_versions
    # With topic ids in Metadata, librdkafka fetches by id (v13+), at its highest: 16.
    assert fetch_versions == {16}, fetch_versions


@pytest.mark.parametrize("version", [13, 14, 15, 16, 17])
def test_fetch_by_topic_id_reads_what_a_fetch_by_name_reads(
    replog_broker: LocalCluster, version: int
) -> None:
    port = replog_broker.port(replog_broker.broker_ids[0])
    topic = f"versions-by-id-{version}"
    create_topic(replog_broker.bootstrap_servers(), topic, partitions=2)
    for partition in (0, 1):
        batch = simple_batch([f"p{partition}-{i}".encode() for i in range(3)])
        response = _call(port, _produce_request(11, topic, partition, batch))
        [answer] = response.responses[0].partition_responses
        assert answer.error_code == ErrorCode.none
    topic_id, _, _ = _metadata(port, topic)

    by_name = _partitions(_call(port, _fetch_request(11, [(topic, 0, 0), (topic, 1, 1)])))
    by_id = _partitions(_call(port, _fetch_request(version, [(topic_id, 0, 0), (topic_id, 1, 1)])))
    assert [t.topic_id for t, _ in by_id] == [topic_id, topic_id]
    assert [
        (int(p.partition_index), p.error_code, int(p.high_watermark), bytes(p.records))
        for _, p in by_id
    ] == [
        (int(p.partition_index), p.error_code, int(p.high_watermark), bytes(p.records))
        for _, p in by_name
    ]
    assert [p.error_code for _, p in by_id] == [ErrorCode.none, ErrorCode.none]
    assert [int(p.high_watermark) for _, p in by_id] == [3, 3]
    assert all(len(bytes(p.records)) > 0 for _, p in by_id)


@pytest.mark.parametrize("version", [13, 16, 17])
def test_unknown_topic_id_is_answered_per_partition_echoing_the_id(
    replog_broker: LocalCluster, version: int
) -> None:
    port = replog_broker.port(replog_broker.broker_ids[0])
    unknown = uuid.uuid4()
    response = _call(port, _fetch_request(version, [(unknown, 0, 0), (unknown, 3, 5)]))
    answers = _partitions(response)
    assert [(t.topic_id, int(p.partition_index)) for t, p in answers] == [
        (unknown, 0),
        (unknown, 3),
    ]
    assert [p.error_code for _, p in answers] == [ErrorCode.unknown_topic_id] * 2
    assert [int(p.high_watermark) for _, p in answers] == [-1, -1]


def test_last_fetched_epoch_is_checked_before_reading(replog_broker: LocalCluster) -> None:
    port = replog_broker.port(replog_broker.broker_ids[0])
    topic = "versions-diverging"
    create_topic(replog_broker.bootstrap_servers(), topic, partitions=1)
    batch = simple_batch([b"a", b"b", b"c", b"d"])
    _call(port, _produce_request(11, topic, 0, batch))
    topic_id, leaders, _ = _metadata(port, topic)
    [(_, epoch)] = leaders.values()

    # The consumer's last record had the leader's epoch, but its position is past where that
    # epoch ends (Kafka: endOffset < fetchOffset): its log diverges at (epoch, 4). A long poll
    # (60 s) would outlast the client's 20 s timeout: the answer must come at once.
    for version, key in ((12, topic), (16, topic_id)):
        response = _call(
            port,
            _fetch_request(version, [(key, 0, 6)], last_fetched_epoch=epoch, max_wait_ms=60_000),
            timeout_s=20,
        )
        [(_, p)] = _partitions(response)
        assert p.error_code == ErrorCode.none
        assert (int(p.diverging_epoch.epoch), int(p.diverging_epoch.end_offset)) == (epoch, 4)
        assert bytes(p.records or b"") == b""
        assert int(p.high_watermark) == 4

    # An epoch above every one the leader knows has no end offset: OFFSET_OUT_OF_RANGE.
    response = _call(port, _fetch_request(12, [(topic, 0, 4)], last_fetched_epoch=epoch + 5))
    [(_, p)] = _partitions(response)
    assert p.error_code == ErrorCode.offset_out_of_range
    assert (int(p.diverging_epoch.epoch), int(p.diverging_epoch.end_offset)) == (-1, -1)

    # An epoch the leader has, up to where it ends: read as usual.
    response = _call(port, _fetch_request(12, [(topic, 0, 1)], last_fetched_epoch=epoch))
    [(_, p)] = _partitions(response)
    assert p.error_code == ErrorCode.none
    assert (int(p.diverging_epoch.epoch), int(p.diverging_epoch.end_offset)) == (-1, -1)
    assert len(bytes(p.records)) > 0


# -- two brokers: leader discovery ---------------------------------------------------------


@pytest.fixture(scope="module")
def two_brokers(zookeeper, tmp_path_factory) -> Any:
    cluster = LocalCluster(tmp_path_factory.mktemp("two-brokers"))
    try:
        cluster.up(
            2,
            zookeeper=f"{zookeeper.connect}/replog-{uuid.uuid4().hex[:8]}",
            overrides=INTERNAL_TOPICS,
        )
        yield cluster
    finally:
        cluster.down()


def _replicated_topic(cluster: LocalCluster, topic: str) -> tuple[int, int, int, uuid.UUID]:
    """An RF 2 topic of one partition: ``(leader, follower, leader epoch, topic id)``."""
    bootstrap = cluster.bootstrap_servers()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 2)], operation_timeout=30)[topic].result(timeout=40)
    wait_for_leaders(bootstrap, {topic: 1})
    # The bootstrap broker may have had its UpdateMetadata before the others: the leader
    # discovery below asks each broker, so wait until every one of them names the leader.
    for broker_id in cluster.broker_ids:
        wait_for(
            lambda broker_id=broker_id: _knows_leader(cluster.port(broker_id), topic),
            30,
            f"broker {broker_id} to name the leader of {topic}",
            interval_s=0.1,
        )
    topic_id, leaders, _ = _metadata(cluster.port(cluster.broker_ids[0]), topic)
    [(leader, epoch)] = leaders.values()
    [follower] = [b for b in cluster.broker_ids if b != leader]
    return leader, follower, epoch, topic_id


@pytest.mark.parametrize("version", [9, 10, 11, 12])
def test_a_follower_names_the_leader_in_produce_answers(
    two_brokers: LocalCluster, version: int
) -> None:
    leader, follower, epoch, _ = _replicated_topic(two_brokers, f"versions-produce-{version}")
    response = _call(
        two_brokers.port(follower),
        _produce_request(version, f"versions-produce-{version}", 0, simple_batch([b"x"])),
    )
    [answer] = response.responses[0].partition_responses
    assert answer.error_code == ErrorCode.not_leader_or_follower
    if version >= 10:
        assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch) == (
            leader,
            epoch,
        )
        assert [(n.node_id, n.host, n.port) for n in response.node_endpoints] == [
            (leader, "127.0.0.1", two_brokers.port(leader))
        ]
    else:
        assert not hasattr(response, "node_endpoints")


@pytest.mark.parametrize("version", [15, 16, 17])
def test_a_follower_names_the_leader_in_fetch_answers(
    two_brokers: LocalCluster, version: int
) -> None:
    topic = f"versions-fetch-{version}"
    leader, follower, epoch, topic_id = _replicated_topic(two_brokers, topic)
    response = _call(two_brokers.port(follower), _fetch_request(version, [(topic_id, 0, 0)]))
    [(t, p)] = _partitions(response)
    assert t.topic_id == topic_id
    assert p.error_code == ErrorCode.not_leader_or_follower
    if version >= 16:
        assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (leader, epoch)
        assert [(n.node_id, n.host, n.port) for n in response.node_endpoints] == [
            (leader, "127.0.0.1", two_brokers.port(leader))
        ]
    else:  # v15 has the field (KIP-595) but Kafka fills it from v16 on (KIP-951)
        assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (-1, -1)
    # The leader itself answers with records (acks=all: below the HW) and no leader hint.
    response = _call(
        two_brokers.port(leader), _produce_request(11, topic, 0, simple_batch([b"y"]), acks=-1)
    )
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
    response = _call(two_brokers.port(leader), _fetch_request(version, [(topic_id, 0, 0)]))
    [(_, p)] = _partitions(response)
    assert p.error_code == ErrorCode.none
    assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (-1, -1)
    assert len(bytes(p.records)) > 0


def test_a_broker_without_a_replica_sends_clients_to_the_leader(two_brokers: LocalCluster) -> None:
    """Stale metadata (the partition lives elsewhere): NOT_LEADER_OR_FOLLOWER and where the
    leader is, as Kafka's getPartitionOrError; a partition nobody knows stays unknown."""
    topic = "versions-elsewhere"
    leader, other = two_brokers.broker_ids
    bootstrap = two_brokers.bootstrap_servers()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, 1, replica_assignment=[[leader]])
    admin.create_topics([new], operation_timeout=30)[topic].result(timeout=40)
    wait_for_leaders(bootstrap, {topic: 1})
    topic_id, leaders, _ = _metadata(two_brokers.port(other), topic)
    assert leaders == {0: (leader, leaders[0][1])}
    epoch = leaders[0][1]
    endpoint = [(leader, "127.0.0.1", two_brokers.port(leader))]

    response = _call(
        two_brokers.port(other), _produce_request(10, topic, 0, simple_batch([b"lost?"]))
    )
    [answer] = response.responses[0].partition_responses
    assert answer.error_code == ErrorCode.not_leader_or_follower
    assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch) == (leader, epoch)
    assert [(n.node_id, n.host, n.port) for n in response.node_endpoints] == endpoint

    response = _call(two_brokers.port(other), _fetch_request(16, [(topic_id, 0, 0)]))
    [(_, p)] = _partitions(response)
    assert p.error_code == ErrorCode.not_leader_or_follower
    assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (leader, epoch)
    assert [(n.node_id, n.host, n.port) for n in response.node_endpoints] == endpoint

    response = _call(
        two_brokers.port(other), _produce_request(10, topic, 7, simple_batch([b"nowhere"]))
    )
    [answer] = response.responses[0].partition_responses
    assert answer.error_code == ErrorCode.unknown_topic_or_partition
    assert not response.node_endpoints
