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
* read_uncommitted consumers (confluent-kafka) see every data record, markers skipped.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from clients_util import consume_confluent, create_topic
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
NOW = 1_700_000_000_000


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


def produce(port: int, partition: int, records: bytes, transactional_id: str | None) -> ErrorCode:
    cls = request_schema(ApiKey.PRODUCE, 9)
    part = nested(cls, "PartitionProduceData")(index=partition, records=records)
    body = cls(
        transactional_id=transactional_id,
        acks=-1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(nested(cls, "TopicProduceData")(name=TOPIC, partition_data=(part,)),),
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
def port(replog_broker: LocalCluster) -> int:
    create_topic(replog_broker.bootstrap_servers(), TOPIC, partitions=2)
    return _port(replog_broker)


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
    read = consume_confluent(replog_broker.bootstrap_servers(), TOPIC, {0: 4, 1: 2})
    values = sorted((r.partition, r.value) for r in read)
    assert values == [(0, b"c1"), (0, b"c2"), (0, b"e1"), (1, b"a1"), (1, b"a2")]
