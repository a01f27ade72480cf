"""TxnOffsetCommit and OffsetFetch ``require_stable`` against a real broker process.

Requests are written with kio through ``replog.protocol.client.KafkaConnection`` (no
client library sends a TxnOffsetCommit without the transaction coordinator's
InitProducerId / AddOffsetsToTxn first), with real producers opened by raw requests
(or a made-up producer id, which KIP-890's verification refuses). One broker for the
module.

What is checked now: the API is offered (v0-v4); the request's own refusals
(INVALID_GROUP_ID, UNKNOWN_TOPIC_OR_PARTITION) and KIP-447's fencing against a classic
group formed through JoinGroup/SyncGroup (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
FENCED_INSTANCE_ID) and a KIP-848 consumer group formed through ConsumerGroupHeartbeat
(a stale member epoch is ILLEGAL_GENERATION, as Kafka answers TxnOffsetCommit); that a
transactional commit is never visible to OffsetFetch, and that ``require_stable``
(librdkafka's default, read_committed) reads committed offsets.

A transactional commit is pending until its marker (OffsetFetch ``require_stable``
answers UNSTABLE_OFFSET_COMMIT, a plain OffsetFetch the previous offset), and KIP-890's
verification keeps a late TxnOffsetCommit from opening an ended transaction again.
Markers (WriteTxnMarkers) and ``send_offsets_to_transaction`` end to end are tested where
those are served.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.add_offsets_to_txn.v3 import request as add_offsets_v3
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.consumer_group_heartbeat.v0 import request as heartbeat_v0
from kio.schema.end_txn.v3 import request as end_v3
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as find_v4
from kio.schema.init_producer_id.v5 import request as init_v5
from kio.schema.join_group.v5 import request as join_v5
from kio.schema.offset_fetch.v7 import request as fetch_v7
from kio.schema.sync_group.v3 import request as sync_v3
from kio.schema.txn_offset_commit.v0 import request as txn_v0
from kio.schema.txn_offset_commit.v3 import request as txn_v3
from kio.static.primitive import i32Timedelta

from clients_util import create_topic
from cluster_util import wait_for
from group_util import commit_offsets
from replog.protocol import describe_transactions_codec
from replog.protocol.apis import ApiKey
from replog.protocol.client import KafkaConnection

TOPIC = "txn-offsets"
PRODUCER_ID = 4242

# How the partition refuses the coordinator's transactional batch of a made-up producer:
# before the partition side serves transactions, its producer-state check refuses a
# batch with a producer id and no sequence (CORRUPT_MESSAGE); with KIP-890's
# verification, a producer the transaction coordinator does not know
# (INVALID_TXN_STATE).


def _ms(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


def _run(port: int, *requests: Any) -> list[Any]:
    async def go() -> list[Any]:
        conn = KafkaConnection("127.0.0.1", port, client_id="replog-txn-offsets-tests")
        await conn.connect()
        try:
            return [await conn.request(r, timeout_s=30) for r in requests]
        finally:
            await conn.close()

    return asyncio.run(go())


@pytest.fixture(scope="module")
def broker(zookeeper, tmp_path_factory):
    """The module's broker with TOPIC (2 partitions) and ``__consumer_offsets`` whose
    coordinators are loaded. ``transaction.state.log.min.isr`` 1, as Kafka's
    single-broker configurations set it, so that one broker can coordinate transactions
    (the default 2 refuses every ``__transaction_state`` append with one replica)."""
    from replog.cluster.launcher import LocalCluster

    cluster = LocalCluster(tmp_path_factory.mktemp("txn-offsets"))
    try:
        cluster.up(
            1,
            zookeeper=f"{zookeeper.connect}/replog-{uuid.uuid4().hex[:8]}",
            overrides={"transaction.state.log.min.isr": "1"},
        )
        bootstrap = cluster.bootstrap_servers()
        create_topic(bootstrap, TOPIC, 2)
        # The first commit creates __consumer_offsets and waits until it is served.
        commit_offsets(bootstrap, "txn-offsets-warmup", [TopicPartition(TOPIC, 0, 1)])
        yield cluster
    finally:
        cluster.down()


def _port(broker) -> int:
    return broker.port(broker.broker_ids[0])


def _group() -> str:
    return f"txn-{uuid.uuid4().hex[:8]}"


_RETRIED = {
    ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.not_coordinator,
    ErrorCode.concurrent_transactions,
}


def _retried(port: int, request: Any) -> Any:
    """``request`` sent until its answer is not one a client retries."""

    def answered():
        [answer] = _run(port, request)
        return None if answer.error_code in _RETRIED else answer

    return wait_for(answered, 60, f"an answer to {type(request).__name__}")


def _transaction(port: int, group: str) -> tuple[str, int, int]:
    """A transaction of a real producer (InitProducerId) with ``group``'s offsets
    partition added (AddOffsetsToTxn), as a client opens one before TxnOffsetCommit:
    (transactional id, producer id, epoch)."""
    tid = f"tx-{group}"
    wait_for(
        lambda: (
            _run(port, find_v4.FindCoordinatorRequest(key_type=1, coordinator_keys=(tid,)))[0]
            .coordinators[0]
            .error_code
            == ErrorCode.none
        ),
        60,
        "the transaction coordinator",
    )
    init = _retried(
        port, init_v5.InitProducerIdRequest(transactional_id=tid, transaction_timeout=_ms(60_000))
    )
    assert init.error_code == ErrorCode.none, init
    pid, epoch = int(init.producer_id), int(init.producer_epoch)
    added = _retried(
        port,
        add_offsets_v3.AddOffsetsToTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group
        ),
    )
    assert added.error_code == ErrorCode.none, added
    return tid, pid, epoch


def _end(port: int, txn: tuple[str, int, int], committed: bool) -> None:
    """EndTxn, then wait until its markers are written (CompleteCommit/CompleteAbort)."""
    tid, pid, epoch = txn
    ended = _retried(
        port,
        end_v3.EndTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=committed
        ),
    )
    assert ended.error_code == ErrorCode.none, ended
    body = describe_transactions_codec.encode_request([tid])

    async def describe() -> bytes:
        conn = KafkaConnection("127.0.0.1", port, client_id="replog-txn-offsets-tests")
        await conn.connect()
        try:
            return await conn.request_encoded(ApiKey.DESCRIBE_TRANSACTIONS, 0, body, 30)
        finally:
            await conn.close()

    state = "CompleteCommit" if committed else "CompleteAbort"
    wait_for(
        lambda: (
            describe_transactions_codec.decode_response(asyncio.run(describe()))[
                0
            ].transaction_state
            == state
        ),
        60,
        f"{tid} in {state}",
    )


def _txn_commit(
    port: int,
    group: str,
    offsets: dict[tuple[str, int], int],
    *,
    generation: int = -1,
    member: str = "",
    instance: str | None = None,
    producer_id: int = PRODUCER_ID,
    txn: tuple[str, int, int] | None = None,
) -> dict[tuple[str, int], ErrorCode]:
    """TxnOffsetCommit v3; by ``txn`` (``_transaction``) or by a made-up producer (which
    KIP-890's verification refuses once the request reaches the group coordinator)."""
    tid, producer_id, epoch = txn or (f"tx-{group}", producer_id, 0)
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            txn_v3.TxnOffsetCommitRequestPartition(
                partition_index=partition,
                committed_offset=offset,
                committed_leader_epoch=-1,
                committed_metadata="m",
            )
        )
    request = txn_v3.TxnOffsetCommitRequest(
        transactional_id=tid,
        group_id=group,
        producer_id=producer_id,
        producer_epoch=epoch,
        generation_id=generation,
        member_id=member,
        group_instance_id=instance,
        topics=tuple(
            txn_v3.TxnOffsetCommitRequestTopic(name=t, partitions=tuple(ps))
            for t, ps in by_topic.items()
        ),
    )
    [response] = _run(port, request)
    return {
        (str(t.name), int(p.partition_index)): p.error_code
        for t in response.topics
        for p in t.partitions
    }


def _fetch(port: int, group: str, partitions: list[int], require_stable: bool):
    """{partition: (offset, error)} of TOPIC for ``group`` (OffsetFetch v7)."""
    [response] = _run(
        port,
        fetch_v7.OffsetFetchRequest(
            group_id=group,
            topics=(fetch_v7.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=partitions),),
            require_stable=require_stable,
        ),
    )
    assert response.error_code == ErrorCode.none
    [topic] = response.topics
    return {
        int(p.partition_index): (int(p.committed_offset), p.error_code) for p in topic.partitions
    }


def test_api_is_offered(broker) -> None:
    [response] = _run(
        _port(broker),
        ApiVersionsRequest(client_software_name="t", client_software_version="1"),
    )
    versions = {int(a.api_key): (int(a.min_version), int(a.max_version)) for a in response.api_keys}
    assert versions[ApiKey.TXN_OFFSET_COMMIT] == (0, 4)


def test_request_refusals(broker) -> None:
    port = _port(broker)
    assert _txn_commit(port, "", {(TOPIC, 0): 1}) == {(TOPIC, 0): ErrorCode.invalid_group_id}
    answer = _txn_commit(port, _group(), {("no-such-topic", 0): 1, (TOPIC, 7): 1})
    assert answer == {
        ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
        (TOPIC, 7): ErrorCode.unknown_topic_or_partition,
    }
    # v0 (no member fields) is served too: an unknown topic answered the same way
    [response] = _run(
        port,
        txn_v0.TxnOffsetCommitRequest(
            transactional_id="tx",
            group_id=_group(),
            producer_id=PRODUCER_ID,
            producer_epoch=0,
            topics=(
                txn_v0.TxnOffsetCommitRequestTopic(
                    name="no-such-topic",
                    partitions=(
                        txn_v0.TxnOffsetCommitRequestPartition(
                            partition_index=0, committed_offset=1, committed_metadata=None
                        ),
                    ),
                ),
            ),
        ),
    )
    [topic] = response.topics
    assert [p.error_code for p in topic.partitions] == [ErrorCode.unknown_topic_or_partition]


def _classic_member(port: int, group: str, instance: str) -> tuple[str, int]:
    """A static member alone in a classic group, Stable after SyncGroup: (member id,
    generation)."""
    join = join_v5.JoinGroupRequest(
        group_id=group,
        session_timeout=_ms(30_000),
        rebalance_timeout=_ms(30_000),
        member_id="",
        group_instance_id=instance,
        protocol_type="consumer",
        protocols=(join_v5.JoinGroupRequestProtocol(name="range", metadata=b""),),
    )
    [joined] = _run(port, join)
    assert joined.error_code == ErrorCode.none, joined
    member_id, generation = str(joined.member_id), int(joined.generation_id)
    [synced] = _run(
        port,
        sync_v3.SyncGroupRequest(
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance,
            assignments=(sync_v3.SyncGroupRequestAssignment(member_id=member_id, assignment=b""),),
        ),
    )
    assert synced.error_code == ErrorCode.none, synced
    return member_id, generation


def test_classic_group_fencing(broker) -> None:
    """KIP-447: a producer committing for a consumer that is no longer the group's
    member at that generation is fenced, and nothing is written."""
    port = _port(broker)
    group = _group()
    member_id, generation = _classic_member(port, group, "instance-1")
    txn = _transaction(port, group)
    tp = (TOPIC, 0)
    answer = _txn_commit(port, group, {tp: 5}, generation=generation + 1, member=member_id, txn=txn)
    assert answer == {tp: ErrorCode.illegal_generation}
    answer = _txn_commit(port, group, {tp: 5}, generation=generation, member="zombie", txn=txn)
    assert answer == {tp: ErrorCode.unknown_member_id}
    answer = _txn_commit(
        port, group, {tp: 5}, generation=generation, member="zombie", instance="instance-1", txn=txn
    )
    assert answer == {tp: ErrorCode.fenced_instance_id}
    assert _fetch(port, group, [0], require_stable=True) == {0: (-1, ErrorCode.none)}


def test_consumer_group_fencing(broker) -> None:
    """A KIP-848 member's epoch is its generation: a stale one is ILLEGAL_GENERATION."""
    port = _port(broker)
    group = _group()
    [joined] = _run(
        port,
        heartbeat_v0.ConsumerGroupHeartbeatRequest(
            group_id=group,
            member_id="",
            member_epoch=0,
            rebalance_timeout=_ms(30_000),
            subscribed_topic_names=(TOPIC,),
            topic_partitions=(),
        ),
    )
    assert joined.error_code == ErrorCode.none, joined
    member_id, epoch = str(joined.member_id), int(joined.member_epoch)
    assert epoch >= 1
    tp = (TOPIC, 1)
    txn = _transaction(port, group)
    answer = _txn_commit(port, group, {tp: 5}, generation=epoch - 1, member=member_id, txn=txn)
    assert answer == {tp: ErrorCode.illegal_generation}
    answer = _txn_commit(port, group, {tp: 5}, generation=epoch, member="zombie", txn=txn)
    assert answer == {tp: ErrorCode.unknown_member_id}
    assert _fetch(port, group, [1], require_stable=True) == {1: (-1, ErrorCode.none)}


def test_transactional_commit_is_pending_until_decided(broker) -> None:
    port = _port(broker)
    group = _group()
    commit_offsets(broker.bootstrap_servers(), group, [TopicPartition(TOPIC, 0, 3)])
    txn = _transaction(port, group)
    answer = _txn_commit(port, group, {(TOPIC, 0): 10}, txn=txn)
    error = answer[(TOPIC, 0)]
    # Never visible before its marker, whatever the write's outcome.
    assert _fetch(port, group, [0], require_stable=False) == {0: (3, ErrorCode.none)}
    stable = _fetch(port, group, [0, 1], require_stable=True)
    # The commit waits for the transaction's marker, and a read_committed consumer is
    # told to retry.
    assert error == ErrorCode.none, error
    assert stable == {0: (-1, ErrorCode.unstable_offset_commit), 1: (-1, ErrorCode.none)}
    _end(port, txn, committed=True)  # the marker decides it
    assert _fetch(port, group, [0], require_stable=True) == {0: (10, ErrorCode.none)}


def test_a_made_up_producer_is_not_verified(broker) -> None:
    """KIP-890: the group coordinator asks the transaction coordinator before it opens a
    transaction on the offsets partition; a transactional id it does not know is
    INVALID_PRODUCER_ID_MAPPING (COORDINATOR_NOT_AVAILABLE, retriable, while no
    ``__transaction_state`` exists to ask)."""
    port = _port(broker)
    _transaction(port, _group())  # __transaction_state exists, its coordinator loaded
    group = _group()
    answer = _txn_commit(port, group, {(TOPIC, 0): 10})
    assert answer == {(TOPIC, 0): ErrorCode.invalid_producer_id_mapping}
    assert _fetch(port, group, [0], require_stable=True) == {0: (-1, ErrorCode.none)}


def test_a_late_txn_offset_commit_cannot_reopen_its_ended_transaction(broker) -> None:
    """The fault campaign's offsets left pending after a member was fenced: a
    TxnOffsetCommit that reaches the group coordinator after its transaction ended (a
    client's request held back by a fault, sent once the connection came back, after
    the client had aborted) must not open a transaction on the offsets partition again:
    no marker would ever decide it (its transaction is over), and OffsetFetch
    ``require_stable`` would answer UNSTABLE_OFFSET_COMMIT until some later marker of the
    same producer, which would then commit or drop the zombie's offsets with it. KIP-890's
    verification refuses it (Kafka's ``handleTxnCommitOffsets`` verifies the offsets
    partition first)."""
    port = _port(broker)
    group = _group()
    commit_offsets(broker.bootstrap_servers(), group, [TopicPartition(TOPIC, 0, 3)])
    txn = _transaction(port, group)
    _end(port, txn, committed=False)  # the client aborted; the ABORT marker is written
    late = _txn_commit(port, group, {(TOPIC, 0): 10}, txn=txn)
    assert late == {(TOPIC, 0): ErrorCode.invalid_txn_state}
    assert _fetch(port, group, [0], require_stable=True) == {0: (3, ErrorCode.none)}
    # the producer's next transaction commits its own offsets only
    txn = _transaction(port, group)
    assert _txn_commit(port, group, {(TOPIC, 1): 7}, txn=txn) == {(TOPIC, 1): ErrorCode.none}
    _end(port, txn, committed=True)
    assert _fetch(port, group, [0, 1], require_stable=True) == {
        0: (3, ErrorCode.none),
        1: (7, ErrorCode.none),
    }


def test_read_committed_consumer_reads_committed_offsets(broker) -> None:
    """librdkafka's consumers (read_committed by default) fetch with require_stable."""
    group = _group()
    bootstrap = broker.bootstrap_servers()
    commit_offsets(bootstrap, group, [TopicPartition(TOPIC, 1, 17)])
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        [got] = consumer.committed([TopicPartition(TOPIC, 1)], timeout=30)
        assert got.offset == 17 and got.error is None
    finally:
        consumer.close()
