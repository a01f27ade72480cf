"""The partition side of transactions on a real broker, without a transaction
coordinator: transactional batches produced with a transactional id, COMMIT/ABORT
markers written with WriteTxnMarkers (as a coordinator does, through replog's own
protocol client), and what consumers of each isolation level read.

* WriteTxnMarkers answers NONE for a partition led here, UNKNOWN_TOPIC_OR_PARTITION for
  one that does not exist, TRANSACTION_COORDINATOR_FENCED for a coordinator epoch older
  than the partition saw, INVALID_PRODUCER_EPOCH for an older producer epoch.
* Produce: a transactional batch without a transactional id is
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED; a plain batch from a producer whose
  transaction is open INVALID_TXN_STATE; a forged control batch INVALID_RECORD.
* read_uncommitted consumers (confluent-kafka) see every data record, markers skipped;
  read_committed ones (confluent-kafka, kafka-python, aiokafka, kcat) only committed records, and
  nothing at or after the first offset of a transaction still open (the last stable
  offset), which ListOffsets with isolation_level=1 answers for LATEST. A long poll of a
  read_committed consumer is answered when the transaction's marker moves the LSO.
* The LSO lag gauge (Kafka's LastStableOffsetLag) and DescribeProducers' open
  transactions' start offsets.
"""

from __future__ import annotations

import asyncio
import datetime
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from prometheus_client.parser import text_string_to_metric_families

from clients_util import KCAT, consume_confluent, consumer_confluent, create_topic
from fixtures.cluster import INTERNAL_TOPICS
from replog.cluster.launcher import LocalCluster
from replog.protocol.apis import ApiKey, make, nested, request_schema
from replog.protocol.client import KafkaConnection
from replog.protocol.records import (
    ATTR_TRANSACTIONAL,
    build_batch,
    encode_record,
    end_txn_marker_batch,
)

TOPIC = "txn-part"
# No transaction coordinator answers here: its verification of a transaction's first
# batch (KIP-890, on by default) is off; test_txn_partition_failover has it on.
NO_VERIFICATION = {"transaction.partition.verification.enable": "false"}
NOW = int(time.time() * 1000)  # old timestamps would roll segments (segment.ms)


def _call(port: int, body: Any) -> Any:
    async def go() -> Any:
        conn = KafkaConnection("127.0.0.1", port, client_id="txn-partition-test")
        await conn.connect()
        try:
            return await conn.request(body, timeout_s=30)
        finally:
            await conn.close()

    return asyncio.run(go())


def _port(cluster: LocalCluster) -> int:
    return int(cluster.bootstrap_servers().split(",")[0].rsplit(":", 1)[1])


def txn_records(pid: int, seq: int, values: list[bytes], *, epoch: int = 0, txn: bool = True):
    return build_batch(
        base_offset=0,
        partition_leader_epoch=-1,
        attributes=ATTR_TRANSACTIONAL if txn else 0,
        last_offset_delta=len(values) - 1,
        base_timestamp=NOW,
        max_timestamp=NOW,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        record_count=len(values),
        records=b"".join(encode_record(i, 0, None, v) for i, v in enumerate(values)),
    )


def produce(
    port: int, partition: int, records: bytes, transactional_id: str | None, topic: str = TOPIC
) -> ErrorCode:
    cls = request_schema(ApiKey.PRODUCE, 9)
    part = nested(cls, "PartitionProduceData")(index=partition, records=records)
    body = cls(
        transactional_id=transactional_id,
        acks=-1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(nested(cls, "TopicProduceData")(name=topic, partition_data=(part,)),),
    )
    [topic] = _call(port, body).responses
    [answer] = topic.partition_responses
    return answer.error_code


def write_markers(
    port: int, markers: list[tuple[int, int, bool, int, dict[str, list[int]]]]
) -> list[dict[tuple[str, int], ErrorCode]]:
    """``(producer id, producer epoch, commit, coordinator epoch, {topic: partitions})``
    for each marker; the errors of each."""
    cls = request_schema(ApiKey.WRITE_TXN_MARKERS, 1)
    body = make(
        cls,
        markers=tuple(
            make(
                nested(cls, "WritableTxnMarker"),
                producer_id=pid,
                producer_epoch=epoch,
                transaction_result=commit,
                coordinator_epoch=coordinator_epoch,
                topics=tuple(
                    make(
                        nested(cls, "WritableTxnMarkerTopic"),
                        name=name,
                        partition_indexes=tuple(parts),
                    )
                    for name, parts in topics.items()
                ),
            )
            for pid, epoch, commit, coordinator_epoch, topics in markers
        ),
    )
    response = _call(port, body)
    assert [int(m.producer_id) for m in response.markers] == [m[0] for m in markers]
    return [
        {
            (str(t.name), int(p.partition_index)): p.error_code
            for t in m.topics
            for p in t.partitions
        }
        for m in response.markers
    ]


@pytest.fixture(scope="module")
def replog_broker(zookeeper, tmp_path_factory) -> Iterator[LocalCluster]:
    """One broker with its Prometheus metrics on, shared by this module's tests."""
    cluster = LocalCluster(tmp_path_factory.mktemp("txn-partition"))
    try:
        cluster.up(
            1,
            zookeeper=f"{zookeeper.connect}/replog-{uuid.uuid4().hex[:8]}",
            metrics=True,
            overrides={**INTERNAL_TOPICS, **NO_VERIFICATION},
        )
        yield cluster
    finally:
        cluster.down()


@pytest.fixture(scope="module")
def port(replog_broker: LocalCluster) -> int:
    create_topic(replog_broker.bootstrap_servers(), TOPIC, partitions=2)
    return _port(replog_broker)


def lso_lag(cluster: LocalCluster, partition: int) -> float | None:
    url = cluster.metrics_url(cluster.broker_ids[0])
    assert url is not None
    with urllib.request.urlopen(url, timeout=20) as response:
        text = response.read().decode()
    labels = {"topic": TOPIC, "partition": str(partition)}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "kafka_cluster_partition_laststableoffsetlag" and s.labels == labels:
                return s.value
    return None


def open_transactions(port: int, partition: int) -> dict[int, int]:
    """DescribeProducers: producer id -> its open transaction's first offset (-1: none)."""
    cls = request_schema(ApiKey.DESCRIBE_PRODUCERS, 0)
    body = make(
        cls,
        topics=(make(nested(cls, "TopicRequest"), name=TOPIC, partition_indexes=(partition,)),),
    )
    [topic] = _call(port, body).topics
    [answer] = topic.partitions
    assert answer.error_code == ErrorCode.none
    return {int(p.producer_id): int(p.current_txn_start_offset) for p in answer.active_producers}


def test_markers_end_transactions_and_their_errors(replog_broker: LocalCluster, port: int) -> None:
    assert produce(port, 0, txn_records(1000, 0, [b"c1", b"c2"]), "tx-a") == ErrorCode.none
    assert produce(port, 1, txn_records(1001, 0, [b"a1", b"a2"]), "tx-b") == ErrorCode.none
    # a plain batch inside an open transaction
    assert (
        produce(port, 0, txn_records(1000, 2, [b"x"], txn=False), None)
        == ErrorCode.invalid_txn_state
    )
    # transactional records need a transactional id
    assert (
        produce(port, 0, txn_records(1002, 0, [b"y"]), None)
        == ErrorCode.transactional_id_authorization_failed
    )
    forged = end_txn_marker_batch(
        producer_id=1000, producer_epoch=0, commit=True, coordinator_epoch=3, timestamp=NOW
    )
    assert produce(port, 0, forged, "tx-a") == ErrorCode.invalid_record

    answers = write_markers(
        port,
        [
            (1000, 0, True, 3, {TOPIC: [0], "no-such-topic": [0]}),
            (1001, 0, False, 3, {TOPIC: [1]}),
        ],
    )
    assert answers == [
        {(TOPIC, 0): ErrorCode.none, ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition},
        {(TOPIC, 1): ErrorCode.none},
    ]
    # a stale coordinator, then a fenced producer epoch: nothing written
    assert write_markers(port, [(1000, 0, False, 2, {TOPIC: [0]})]) == [
        {(TOPIC, 0): ErrorCode.transaction_coordinator_fenced}
    ]
    assert produce(port, 0, txn_records(1000, 0, [b"e1"], epoch=1), "tx-a") == ErrorCode.none
    assert write_markers(port, [(1000, 0, False, 3, {TOPIC: [0]})]) == [
        {(TOPIC, 0): ErrorCode.invalid_producer_epoch}
    ]
    assert write_markers(port, [(1000, 1, False, 3, {TOPIC: [0]})]) == [
        {(TOPIC, 0): ErrorCode.none}
    ]

    # partition 0: c1 c2 COMMIT e1 ABORT; partition 1: a1 a2 ABORT
    # (librdkafka reads read_committed unless told otherwise)
    read = consume_confluent(
        replog_broker.bootstrap_servers(),
        TOPIC,
        {0: 4, 1: 2},
        **{"isolation.level": "read_uncommitted"},
    )
    values = sorted((r.partition, r.value) for r in read)
    assert values == [(0, b"c1"), (0, b"c2"), (0, b"e1"), (1, b"a1"), (1, b"a2")]


def list_latest(port: int, partition: int, isolation_level: int, topic: str = TOPIC) -> int:
    cls = request_schema(ApiKey.LIST_OFFSETS, 7)
    part = make(
        nested(cls, "ListOffsetsPartition"),
        partition_index=partition,
        current_leader_epoch=-1,
        timestamp=-1,
    )
    body = make(
        cls,
        replica_id=-1,
        isolation_level=isolation_level,
        topics=(make(nested(cls, "ListOffsetsTopic"), name=topic, partitions=(part,)),),
    )
    [topic] = _call(port, body).topics
    [answer] = topic.partitions
    assert answer.error_code == ErrorCode.none
    return int(answer.offset)


def read_committed_confluent(
    bootstrap: str, partitions: list[int], topic: str = TOPIC
) -> list[tuple[int, bytes]]:
    """Everything a read_committed confluent-kafka consumer reads up to the end (its EOF
    comes at the last stable offset)."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    consumer = consumer_confluent(bootstrap, **{"isolation.level": "read_committed"})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        out = []
        at_end: set[int] = set()
        deadline = time.monotonic() + 60
        while at_end != set(partitions):
            assert time.monotonic() < deadline, f"read_committed read stuck: {out}"
            for msg in consumer.consume(num_messages=100, timeout=0.5):
                if msg.error() is not None:
                    assert msg.error().code() == -191, msg.error()  # _PARTITION_EOF
                    at_end.add(msg.partition())
                    continue
                out.append((msg.partition(), msg.value()))
        return sorted(out)
    finally:
        consumer.close()


def read_committed_kafka_python(bootstrap: str, ends: dict[int, int]) -> list[tuple[int, bytes]]:
    """What a read_committed kafka-python consumer reads until its position reaches ``ends``."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    try:
        parts = {p: KTopicPartition(TOPIC, p) for p in ends}
        consumer.assign(list(parts.values()))
        for tp in parts.values():
            consumer.seek(tp, 0)
        out = []
        deadline = time.monotonic() + 60
        while any(consumer.position(parts[p]) < end for p, end in ends.items()):
            assert time.monotonic() < deadline, f"kafka-python read_committed stuck: {out}"
            for tp, msgs in consumer.poll(timeout_ms=500).items():
                out.extend((tp.partition, m.value) for m in msgs)
        return sorted(out)
    finally:
        consumer.close()


def read_committed_aiokafka(bootstrap: str, ends: dict[int, int]) -> list[tuple[int, bytes]]:
    """What a read_committed aiokafka consumer reads until its position reaches ``ends``."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATopicPartition

    async def run() -> list[tuple[int, bytes]]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed",
        )
        await consumer.start()
        try:
            parts = {p: ATopicPartition(TOPIC, p) for p in ends}
            consumer.assign(list(parts.values()))
            await consumer.seek_to_beginning(*parts.values())
            out = []
            deadline = time.monotonic() + 60
            while True:
                positions = {p: await consumer.position(tp) for p, tp in parts.items()}
                if all(positions[p] >= end for p, end in ends.items()):
                    return sorted(out)
                assert time.monotonic() < deadline, f"aiokafka read_committed stuck: {out}"
                for tp, msgs in (await consumer.getmany(timeout_ms=500)).items():
                    out.extend((tp.partition, m.value) for m in msgs)
        finally:
            await consumer.stop()

    return asyncio.run(run())


def read_committed_kcat(bootstrap: str, partition: int) -> list[tuple[int, bytes]]:
    """``kcat -C -e -X isolation.level=read_committed``: one partition to its end."""
    args = [KCAT, "-C", "-b", bootstrap, "-t", TOPIC, "-p", str(partition), "-o", "beginning"]
    args += ["-e", "-q", "-f", "%s\\n", "-X", "isolation.level=read_committed"]
    done = subprocess.run(args, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, f"kcat failed ({done.returncode}): {done.stderr.decode()}"
    return [(partition, line.encode()) for line in done.stdout.decode().splitlines()]


def test_read_committed_stops_at_the_last_stable_offset(
    replog_broker: LocalCluster, port: int
) -> None:
    bootstrap = replog_broker.bootstrap_servers()
    # After the first test: partition 0 c1 c2 COMMIT e1 ABORT (LSO 5), partition 1 a1 a2
    # ABORT (3). Now an open transaction on partition 1, and a later one committed.
    assert produce(port, 1, txn_records(1003, 0, [b"o1"]), "tx-c") == ErrorCode.none  # 3
    assert produce(port, 1, txn_records(1004, 0, [b"k1"]), "tx-d") == ErrorCode.none  # 4
    assert write_markers(port, [(1004, 0, True, 0, {TOPIC: [1]})]) == [{(TOPIC, 1): ErrorCode.none}]
    assert list_latest(port, 1, 0) == 6
    assert list_latest(port, 1, 1) == 3
    assert list_latest(port, 0, 1) == 5
    assert lso_lag(replog_broker, 1) == 3
    assert lso_lag(replog_broker, 0) == 0
    assert open_transactions(port, 1) == {1001: -1, 1003: 3, 1004: -1}
    committed = [(0, b"c1"), (0, b"c2")]
    assert read_committed_confluent(bootstrap, [0, 1]) == committed
    assert read_committed_kafka_python(bootstrap, {0: 5, 1: 3}) == committed
    assert read_committed_aiokafka(bootstrap, {0: 5, 1: 3}) == committed
    assert read_committed_kcat(bootstrap, 0) + read_committed_kcat(bootstrap, 1) == committed

    # A read_committed long poll at the LSO is answered once the marker moves it.
    answered: list[Any] = []

    def long_poll() -> None:
        cls = request_schema(ApiKey.FETCH, 11)
        part = make(
            nested(cls, "FetchPartition"),
            partition=1,
            current_leader_epoch=-1,
            fetch_offset=3,
            log_start_offset=-1,
            partition_max_bytes=1 << 20,
        )
        body = make(
            cls,
            replica_id=-1,
            max_wait=datetime.timedelta(seconds=25),
            min_bytes=1,
            max_bytes=1 << 20,
            isolation_level=1,
            session_id=0,
            session_epoch=-1,
            topics=(make(nested(cls, "FetchTopic"), topic=TOPIC, partitions=(part,)),),
            forgotten_topics_data=(),
            rack_id="",
        )
        answered.append(_call(port, body))

    poller = threading.Thread(target=long_poll)
    poller.start()
    try:
        time.sleep(0.5)  # let the fetch reach the broker and wait there
        assert not answered, "a read_committed fetch at the LSO answered before the marker"
        assert write_markers(port, [(1003, 0, True, 0, {TOPIC: [1]})]) == [
            {(TOPIC, 1): ErrorCode.none}
        ]
    finally:
        poller.join(timeout=30)
    [response] = answered
    [p] = response.responses[0].partitions
    assert p.error_code == ErrorCode.none
    assert (p.high_watermark, p.last_stable_offset) == (7, 7)
    assert p.records, "the long poll got no records"
    assert p.aborted_transactions == ()  # none in [3, 7)
    assert list_latest(port, 1, 1) == 7
    assert lso_lag(replog_broker, 1) == 0
    assert read_committed_confluent(bootstrap, [0, 1]) == sorted(
        committed + [(1, b"o1"), (1, b"k1")]
    )


def test_read_committed_fetch_lists_aborted_transactions(port: int) -> None:
    cls = request_schema(ApiKey.FETCH, 11)
    parts = tuple(
        make(
            nested(cls, "FetchPartition"),
            partition=p,
            current_leader_epoch=-1,
            fetch_offset=0,
            log_start_offset=-1,
            partition_max_bytes=1 << 20,
        )
        for p in (0, 1)
    )
    body = make(
        cls,
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=10),
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=1,
        session_id=0,
        session_epoch=-1,
        topics=(make(nested(cls, "FetchTopic"), topic=TOPIC, partitions=parts),),
        forgotten_topics_data=(),
        rack_id="",
    )
    answers = {int(p.partition_index): p for p in _call(port, body).responses[0].partitions}
    aborted = {
        p: sorted((int(t.producer_id), int(t.first_offset)) for t in a.aborted_transactions)
        for p, a in answers.items()
    }
    assert aborted == {0: [(1000, 3)], 1: [(1001, 0)]}
