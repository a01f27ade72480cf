"""The transaction coordinator on a 3-broker cluster (issue 26): ``__transaction_state``
created on first use, confluent-kafka's and kafka-python's transactional producers, fencing,
timeouts, DescribeTransactions / ListTransactions, bad input, and a coordinator killed
with a transaction open.

One cluster for the file; the failover test comes last and starts the killed broker again.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import struct
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.add_offsets_to_txn.v3 import request as add_offsets_v3
from kio.schema.add_partitions_to_txn.v3 import request as add_v3
from kio.schema.add_partitions_to_txn.v4 import request as add_v4
from kio.schema.describe_producers.v0 import request as producers_v0
from kio.schema.end_txn.v3 import request as end_v3
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as find_v4
from kio.schema.init_producer_id.v2 import request as init_v2
from kio.schema.init_producer_id.v5 import request as init_v5
from kio.schema.list_transactions.v1 import request as list_v1
from kio.static.primitive import i32Timedelta

from cluster_util import ZkView, wait_for
from replog.common.topics import TRANSACTION_STATE_TOPIC_NAME
from replog.coordinator.transaction.transaction_topic import partition_for
from replog.protocol.apis import ApiKey
from replog.protocol.client import KafkaConnection
from replog.protocol.wire import (
    compact_string,
    read_compact_array_count,
    read_compact_string,
    skip_tagged_fields,
    uvarint,
)

TOPIC = "txn-orders"
CTP_CHILD = Path(__file__).resolve().parent / "txn_ctp_child.py"
STATE_PARTITIONS = 5
MAX_TIMEOUT_MS = 120_000


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    from replog.cluster.launcher import LocalCluster

    c = LocalCluster(tmp_path_factory.mktemp("txn-coordinator"))
    try:
        c.up(
            3,
            zookeeper=f"{zookeeper.connect}/replog-{uuid.uuid4().hex[:8]}",
            metrics=True,
            overrides={
                "offsets.topic.num.partitions": "3",
                "transaction.state.log.num.partitions": str(STATE_PARTITIONS),
                "transaction.max.timeout.ms": str(MAX_TIMEOUT_MS),
                "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
            },
        )
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers()})
        admin.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result(30)
        yield c
    finally:
        c.down()


# -- the project's client: raw requests ------------------------------------------------------


def _call(port: int, *requests: Any) -> list[Any]:
    async def go() -> list[Any]:
        conn = KafkaConnection("127.0.0.1", port, client_id="txn-tests")
        await conn.connect()
        try:
            return [await conn.request(r, timeout_s=30) for r in requests]
        finally:
            await conn.close()

    return asyncio.run(go())


def _ms(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


def _find(cluster, broker_id: int, key: str, key_type: int = 1) -> Any:
    [answer] = _call(
        cluster.port(broker_id),
        find_v4.FindCoordinatorRequest(key_type=key_type, coordinator_keys=(key,)),
    )
    return answer.coordinators[0]


def coordinator(cluster, transactional_id: str) -> int:
    """The transaction coordinator's broker id, once FindCoordinator names one."""

    def found() -> int | None:
        live = [b for b in cluster.broker_ids if cluster.broker_pid(b) is not None]
        for broker in live:
            try:
                answer = _find(cluster, broker, transactional_id)
            except OSError:
                continue
            if answer.error_code is ErrorCode.none:
                return int(answer.node_id) + 1  # (0 is a broker id: keep it truthy)
        return None

    return wait_for(found, 60, f"the coordinator of {transactional_id}") - 1


def retried(cluster, transactional_id: str, make_request) -> Any:
    """A request sent to the coordinator until it is not COORDINATOR_LOAD_IN_PROGRESS,
    NOT_COORDINATOR or CONCURRENT_TRANSACTIONS (what clients retry)."""
    retry = {
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
        ErrorCode.concurrent_transactions,
    }

    def attempt():
        try:
            [answer] = _call(cluster.port(coordinator(cluster, transactional_id)), make_request())
        except OSError:
            return None
        return None if answer.error_code in retry else answer

    return wait_for(attempt, 60, f"an answer for {transactional_id}")


def init_producer(cluster, transactional_id: str, timeout_ms: int = 60_000) -> tuple[int, int]:
    answer = retried(
        cluster,
        transactional_id,
        lambda: init_v5.InitProducerIdRequest(
            transactional_id=transactional_id, transaction_timeout=_ms(timeout_ms)
        ),
    )
    assert answer.error_code is ErrorCode.none, answer
    return int(answer.producer_id), int(answer.producer_epoch)


def add_partitions(cluster, transactional_id: str, pid: int, epoch: int, partitions) -> dict:
    [answer] = _call(
        cluster.port(coordinator(cluster, transactional_id)),
        add_v3.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=transactional_id,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=tuple(
                add_v3.AddPartitionsToTxnTopic(name=topic, partitions=tuple(parts))
                for topic, parts in partitions.items()
            ),
        ),
    )
    return {
        (str(t.name), int(p.partition_index)): p.partition_error_code
        for t in answer.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


def end_txn(cluster, transactional_id: str, pid: int, epoch: int, committed: bool) -> ErrorCode:
    [answer] = _call(
        cluster.port(coordinator(cluster, transactional_id)),
        end_v3.EndTxnRequest(
            transactional_id=transactional_id,
            producer_id=pid,
            producer_epoch=epoch,
            committed=committed,
        ),
    )
    return answer.error_code


def _describe_raw(port: int, transactional_id: str) -> SimpleNamespace:
    """DescribeTransactions v0 read by hand: kio's reader refuses the start time -1 that
    Kafka (and replog) answer for a transaction not started."""
    body = b"\x00" + uvarint(2) + compact_string(transactional_id) + b"\x00"  # header v2

    async def go() -> bytes:
        conn = KafkaConnection("127.0.0.1", port, client_id="txn-tests")
        await conn.connect()
        try:
            return await conn.request_encoded(ApiKey.DESCRIBE_TRANSACTIONS, 0, body, 30)
        finally:
            await conn.close()

    data = asyncio.run(go())
    pos = skip_tagged_fields(data, 4) + 4  # correlation id, header tags, throttle time
    count, pos = read_compact_array_count(data, pos)
    assert count == 1
    (error,) = struct.unpack_from(">h", data, pos)
    tid, pos = read_compact_string(data, pos + 2)
    state, pos = read_compact_string(data, pos)
    timeout_ms, start_ms, producer_id, producer_epoch = struct.unpack_from(">iqqh", data, pos)
    pos += 22
    topics = []
    count, pos = read_compact_array_count(data, pos)
    for _ in range(count):
        topic, pos = read_compact_string(data, pos)
        n, pos = read_compact_array_count(data, pos)
        partitions = list(struct.unpack_from(f">{n}i", data, pos))
        pos = skip_tagged_fields(data, pos + 4 * n)
        topics.append((topic, partitions))
    return SimpleNamespace(
        error_code=ErrorCode(error),
        transactional_id=tid,
        transaction_state=state,
        transaction_timeout_ms=timeout_ms,
        transaction_start_time_ms=start_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        topics=topics,
    )


def describe(cluster, transactional_id: str) -> SimpleNamespace:
    """DescribeTransactions at the coordinator, retried while it moves or loads."""
    retry = {
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
    }

    def attempt():
        try:
            answer = _describe_raw(
                cluster.port(coordinator(cluster, transactional_id)), transactional_id
            )
        except OSError:
            return None
        return None if answer.error_code in retry else answer

    return wait_for(attempt, 60, f"a description of {transactional_id}")


def wait_state(cluster, transactional_id: str, state: str) -> SimpleNamespace:
    def reached():
        described = describe(cluster, transactional_id)
        return described if described.transaction_state == state else None

    return wait_for(reached, 60, f"{transactional_id} in {state}")


# -- the topic --------------------------------------------------------------------------------


def test_transaction_state_created_on_first_find_coordinator(cluster) -> None:
    zk = ZkView(cluster)
    try:
        assert TRANSACTION_STATE_TOPIC_NAME not in zk.topics()
        first = _find(cluster, 0, "txn-first")
        # Kafka answers COORDINATOR_NOT_AVAILABLE while it creates the topic
        assert first.error_code in (ErrorCode.coordinator_not_available, ErrorCode.none)
        leader = coordinator(cluster, "txn-first")
        assignment = json.loads(
            zk.client.get(f"/brokers/topics/{TRANSACTION_STATE_TOPIC_NAME}")[0]
        )["partitions"]
        assert len(assignment) == STATE_PARTITIONS
        assert all(len(replicas) == 3 for replicas in assignment.values())
        config = json.loads(zk.client.get(f"/config/topics/{TRANSACTION_STATE_TOPIC_NAME}")[0])[
            "config"
        ]
        assert config["cleanup.policy"] == "compact"
        assert config["min.insync.replicas"] == "2"
        assert config["unclean.leader.election.enable"] == "false"
        partition = partition_for("txn-first", STATE_PARTITIONS)
        state = zk.partition_state(TRANSACTION_STATE_TOPIC_NAME, partition)
        assert state is not None and int(state["leader"]) == leader
    finally:
        zk.close()


# -- clients ----------------------------------------------------------------------------------


def _producer(cluster, transactional_id: str, **extra: Any) -> Producer:
    return Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers(),
            "transactional.id": transactional_id,
            **extra,
        }
    )


def test_confluent_init_transactions_and_fencing(cluster) -> None:
    tid = "txn-confluent"
    old = _producer(cluster, tid)
    old.init_transactions(60)
    first = describe(cluster, tid)
    assert (first.error_code, first.transaction_state) == (ErrorCode.none, "Empty")
    old.begin_transaction()
    old.commit_transaction(30)  # nothing sent: librdkafka completes it alone
    new = _producer(cluster, tid)
    new.init_transactions(60)
    second = describe(cluster, tid)
    assert second.producer_id == first.producer_id
    assert second.producer_epoch == first.producer_epoch + 1
    # The old producer is fenced (a zombie): its next request to the coordinator
    # (AddPartitionsToTxn for its record) fails fatally, PRODUCER_FENCED
    old.begin_transaction()
    old.produce(TOPIC, value=b"zombie", partition=0)
    with pytest.raises(KafkaException) as fenced:
        old.commit_transaction(30)
    error = fenced.value.args[0]
    assert error.fatal() and error.code() == KafkaError._FENCED, error
    # and the new one commits
    new.begin_transaction()
    new.produce(TOPIC, value=b"live", partition=0)
    new.commit_transaction(60)
    wait_state(cluster, tid, "CompleteCommit")


def test_confluent_commit_and_abort(cluster) -> None:
    tid = "txn-confluent-data"
    producer = _producer(cluster, tid)
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(6):
        producer.produce(TOPIC, value=b"committed-%d" % i, partition=i % 3)
    producer.commit_transaction(60)
    # EndTxn is answered once PrepareCommit is written; the markers follow
    committed = wait_state(cluster, tid, "CompleteCommit")
    assert committed.topics == []  # the markers are written: no partition left pending
    producer.begin_transaction()
    for i in range(3):
        producer.produce(TOPIC, value=b"aborted-%d" % i, partition=i)
    producer.flush(30)
    ongoing = describe(cluster, tid)
    assert ongoing.transaction_state == "Ongoing"
    assert ongoing.topics == [(TOPIC, [0, 1, 2])]
    # DescribeProducers at the partition's leader: the open transaction's first offset
    start = open_txn_start_offset(cluster, ongoing.producer_id)
    assert start >= 2  # after the committed records and their marker
    producer.abort_transaction(60)
    aborted = wait_state(cluster, tid, "CompleteAbort")
    assert open_txn_start_offset(cluster, ongoing.producer_id) == -1
    assert (aborted.transaction_state, aborted.producer_epoch) == (
        "CompleteAbort",
        committed.producer_epoch,
    )
    # Every record and both transactions' markers are in the log: per partition two
    # committed records, one aborted, a COMMIT and an ABORT marker
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers(), "group.id": "txn-r"})
    try:
        ends = [
            consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1]
            for p in range(3)
        ]
    finally:
        consumer.close()
    assert all(end >= 2 + 1 + 2 for end in ends), ends


def test_confluent_send_offsets_to_transaction(cluster) -> None:
    """AddOffsetsToTxn and TxnOffsetCommit: the group's offsets commit with the
    transaction, and an aborted transaction's offsets are never committed."""
    group = "txn-ctp"
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers(),
            "group.id": group,
            "enable.auto.commit": False,
        }
    )
    producer = _producer(cluster, "txn-ctp-producer")
    try:
        producer.init_transactions(60)
        metadata = consumer.consumer_group_metadata()
        producer.begin_transaction()
        producer.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 3)], metadata, 30)
        producer.commit_transaction(60)
        producer.begin_transaction()
        producer.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 7)], metadata, 30)
        producer.abort_transaction(60)

        def committed() -> int:
            [tp] = consumer.committed([TopicPartition(TOPIC, 0)], timeout=10)
            return tp.offset + 1  # (-1001, none, reads -1000: truthy)

        wait_for(lambda: committed() == 3 + 1, 30, "the committed transaction's offset")
        wait_state(cluster, "txn-ctp-producer", "CompleteAbort")
        assert committed() == 3 + 1  # the aborted offset 7 never became committed
    finally:
        consumer.close()


def open_txn_start_offset(cluster, producer_id: int, partition: int = 0) -> int:
    zk = ZkView(cluster)
    try:
        leader = int(zk.partition_state(TOPIC, partition)["leader"])
    finally:
        zk.close()
    [answer] = _call(
        cluster.port(leader),
        producers_v0.DescribeProducersRequest(
            topics=(producers_v0.TopicRequest(name=TOPIC, partition_indexes=(partition,)),)
        ),
    )
    [state] = [
        p
        for p in answer.topics[0].partitions[0].active_producers
        if int(p.producer_id) == producer_id
    ]
    return int(state.current_txn_start_offset)


def test_transaction_timeout_over_the_maximum(cluster) -> None:
    producer = _producer(cluster, "txn-too-long", **{"transaction.timeout.ms": MAX_TIMEOUT_MS + 1})
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(30)
    assert refused.value.args[0].code() == KafkaError.INVALID_TRANSACTION_TIMEOUT
    [answer] = _call(
        cluster.port(coordinator(cluster, "txn-too-long")),
        init_v5.InitProducerIdRequest(
            transactional_id="txn-too-long", transaction_timeout=_ms(MAX_TIMEOUT_MS + 1)
        ),
    )
    assert answer.error_code is ErrorCode.invalid_transaction_timeout


def test_kafka_python_commit_and_abort(cluster) -> None:
    from kafka import KafkaProducer

    tid = "txn-kafka-python"
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap_servers(), transactional_id=tid, acks="all"
    )
    try:
        producer.init_transactions()
        described = describe(cluster, tid)
        assert (described.transaction_state, described.producer_epoch) == ("Empty", 0)
        producer.begin_transaction()
        producer.send(TOPIC, b"kafka-python committed", partition=1)
        producer.commit_transaction()
        wait_state(cluster, tid, "CompleteCommit")
        producer.begin_transaction()
        producer.send(TOPIC, b"kafka-python aborted", partition=2)
        producer.flush()
        producer.abort_transaction()
        assert wait_state(cluster, tid, "CompleteAbort").producer_epoch == 0
    finally:
        producer.close(timeout=10)


def test_aiokafka_commit_and_abort(cluster) -> None:
    from aiokafka import AIOKafkaProducer

    tid = "txn-aiokafka"

    async def run() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=cluster.bootstrap_servers(), transactional_id=tid
        )
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait(TOPIC, b"aiokafka committed", partition=0)
            await producer.begin_transaction()
            await producer.send_and_wait(TOPIC, b"aiokafka aborted", partition=1)
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(run())
    assert wait_state(cluster, tid, "CompleteAbort").producer_epoch == 0


def test_a_new_producer_aborts_the_zombies_open_transaction(cluster) -> None:
    """InitProducerId while the old producer's transaction is open: the coordinator fences
    it (epoch bump), aborts its transaction, and the new producer gets the epoch after
    (CONCURRENT_TRANSACTIONS meanwhile, which librdkafka retries)."""
    tid = "txn-zombie-open"
    old = _producer(cluster, tid)
    old.init_transactions(60)
    epoch = describe(cluster, tid).producer_epoch
    old.begin_transaction()
    old.produce(TOPIC, value=b"zombie open", partition=2)
    old.flush(30)
    assert describe(cluster, tid).transaction_state == "Ongoing"
    new = _producer(cluster, tid)
    new.init_transactions(60)
    described = describe(cluster, tid)
    assert (described.transaction_state, described.producer_epoch) == ("Empty", epoch + 2)
    with pytest.raises(KafkaException) as fenced:
        old.commit_transaction(30)
    assert fenced.value.args[0].fatal() or fenced.value.args[0].code() == KafkaError._FENCED


def test_kafkajs_commit_and_abort(cluster) -> None:
    from kafkajs_util import kafkajs_transactions

    tid = "txn-kafkajs"
    kafkajs_transactions(
        cluster.bootstrap_servers(),
        tid,
        TOPIC,
        commit=["kafkajs committed"],
        abort=["kafkajs aborted"],
    )
    assert wait_state(cluster, tid, "CompleteAbort").producer_epoch == 0


def _read_to_end(cluster, isolation: str) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers(),
            "group.id": f"txn-reader-{isolation}",
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(3)])
        values, at_end = [], set()

        def done() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
            elif msg is not None and msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
            return len(at_end) == 3

        wait_for(done, 60, f"the end of {TOPIC} ({isolation})", interval_s=0)
        return values
    finally:
        consumer.close()


def test_read_committed_sees_committed_transactions_only(cluster) -> None:
    """What the clients above committed and aborted, read back: read_committed sees every
    committed record and none of the aborted ones (nor the zombie's), which
    read_uncommitted shows were written."""
    committed = [b"committed-%d" % i for i in range(6)]
    committed += [b"live", b"kafka-python committed", b"aiokafka committed"]
    committed += [b"kafkajs committed"]
    aborted = [b"aborted-%d" % i for i in range(3)]
    aborted += [b"kafka-python aborted", b"aiokafka aborted", b"kafkajs aborted"]
    aborted += [b"zombie open"]
    read = _read_to_end(cluster, "read_committed")
    assert sorted(read) == sorted(committed)
    from kafkajs_util import kafkajs

    # kafkajs's read_committed consumer (a group member): the same committed records
    got = kafkajs(
        cluster.bootstrap_servers(),
        "readCommitted",
        topic=TOPIC,
        groupId=f"js-reader-{uuid.uuid4().hex[:6]}",
        count=len(committed),
    )
    assert sorted(r["value"].encode() for r in got) == sorted(committed)
    everything = _read_to_end(cluster, "read_uncommitted")
    assert set(aborted) <= set(everything)
    assert b"zombie" not in everything  # fenced before its AddPartitionsToTxn


def _scrape(cluster, broker_id: int) -> dict[tuple[str, frozenset], float]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(cluster.metrics_url(broker_id), timeout=20) as response:
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_coordinator_metrics(cluster) -> None:
    """The coordinator of the clients' ids above counts them by state; Kafka's marker
    channel gauges are there (nothing waiting now) and its partitions' load times."""
    tid = "txn-confluent-data"  # CompleteAbort (test_confluent_commit_and_abort)
    samples = _scrape(cluster, coordinator(cluster, tid))
    by_state = {
        dict(labels)["state"]: count
        for (name, labels), count in samples.items()
        if name == "replog_transaction_coordinator_transactions"
    }
    assert by_state.get("CompleteAbort", 0) >= 1, by_state
    prefix = "kafka_coordinator_transaction_transactionmarkerchannelmanager_"
    assert samples[(prefix + "unknowndestinationqueuesize", frozenset())] == 0
    assert samples[(prefix + "logappendretryqueuesize", frozenset())] == 0
    load_max = "kafka_server_transaction_coordinator_metrics_partition_load_time_max"
    assert samples[(load_max, frozenset())] >= 0


# -- the protocol, request by request --------------------------------------------------------


def test_add_partitions_describe_list_and_bad_input(cluster) -> None:
    tid = "txn-raw"
    pid, epoch = init_producer(cluster, tid)
    # EndTxn with no transaction open: INVALID_TXN_STATE (transaction version below 2)
    assert end_txn(cluster, tid, pid, epoch, committed=True) is ErrorCode.invalid_txn_state
    added = add_partitions(cluster, tid, pid, epoch, {TOPIC: [0, 1]})
    assert added == {(TOPIC, 0): ErrorCode.none, (TOPIC, 1): ErrorCode.none}
    described = describe(cluster, tid)
    assert described.error_code is ErrorCode.none
    assert (described.transaction_state, described.producer_id) == ("Ongoing", pid)
    assert described.topics == [(TOPIC, [0, 1])]
    assert described.transaction_timeout_ms == 60_000 and described.transaction_start_time_ms > 0
    # ListTransactions, at every broker together: this one Ongoing, filters applied
    listed = {}
    for broker in cluster.broker_ids:
        [answer] = _call(
            cluster.port(broker),
            list_v1.ListTransactionsRequest(
                state_filters=("Ongoing", "Bogus"), producer_id_filters=(), duration_filter=-1
            ),
        )
        assert answer.error_code is ErrorCode.none
        assert tuple(answer.unknown_state_filters) == ("Bogus",)
        listed.update({str(t.transactional_id): t for t in answer.transaction_states})
    assert tid in listed and listed[tid].producer_id == pid
    assert "txn-confluent" not in listed  # Empty, filtered out
    # Bad input, each with Kafka's error and nothing changed
    assert add_partitions(cluster, tid, pid, epoch + 1, {TOPIC: [2]}) == {
        (TOPIC, 2): ErrorCode.producer_fenced
    }
    assert add_partitions(cluster, tid, pid + 1000, epoch, {TOPIC: [2]}) == {
        (TOPIC, 2): ErrorCode.invalid_producer_id_mapping
    }
    assert add_partitions(cluster, tid, pid, epoch, {TOPIC: [2, 9], "txn-nope": [0]}) == {
        (TOPIC, 2): ErrorCode.operation_not_attempted,
        (TOPIC, 9): ErrorCode.unknown_topic_or_partition,
        ("txn-nope", 0): ErrorCode.unknown_topic_or_partition,
    }
    assert add_partitions(cluster, "txn-unknown-id", pid, epoch, {TOPIC: [0]}) == {
        (TOPIC, 0): ErrorCode.invalid_producer_id_mapping
    }
    assert describe(cluster, "txn-unknown-id").error_code is ErrorCode.transactional_id_not_found
    [old_version] = _call(
        cluster.port(coordinator(cluster, tid)),
        init_v2.InitProducerIdRequest(transactional_id=tid, transaction_timeout=_ms(0)),
    )
    assert old_version.error_code is ErrorCode.invalid_transaction_timeout
    # AddPartitionsToTxn v4 verify_only (KIP-890): in the transaction or not
    [verified] = _call(
        cluster.port(coordinator(cluster, tid)),
        add_v4.AddPartitionsToTxnRequest(
            transactions=(
                add_v4.AddPartitionsToTxnTransaction(
                    transactional_id=tid,
                    producer_id=pid,
                    producer_epoch=epoch,
                    verify_only=True,
                    topics=(add_v4.AddPartitionsToTxnTopic(name=TOPIC, partitions=(0, 2)),),
                ),
            )
        ),
    )
    assert verified.error_code is ErrorCode.none
    [result] = verified.results_by_transaction
    assert {
        int(p.partition_index): p.partition_error_code
        for t in result.topic_results
        for p in t.results_by_partition
    } == {0: ErrorCode.none, 2: ErrorCode.transaction_abortable}
    after = describe(cluster, tid)
    assert (after.transaction_state, after.producer_epoch) == ("Ongoing", epoch)
    assert after.topics == [(TOPIC, [0, 1])]
    # A client may not add an internal topic's partition itself
    assert add_partitions(cluster, tid, pid, epoch, {"__consumer_offsets": [0]}) == {
        ("__consumer_offsets", 0): ErrorCode.topic_authorization_failed
    }
    # AddOffsetsToTxn adds the group's __consumer_offsets partition (the group's
    # FindCoordinator creates the topic first)
    wait_for(
        lambda: _find(cluster, 0, "txn-group", key_type=0).error_code is ErrorCode.none,
        60,
        "__consumer_offsets",
    )
    [offsets] = _call(
        cluster.port(coordinator(cluster, tid)),
        add_offsets_v3.AddOffsetsToTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id="txn-group"
        ),
    )
    assert offsets.error_code is ErrorCode.none
    topics = {topic for topic, _ in describe(cluster, tid).topics}
    assert topics == {TOPIC, "__consumer_offsets"}


def test_timed_out_transaction_is_aborted_with_an_epoch_bump(cluster) -> None:
    tid = "txn-abandoned"
    pid, epoch = init_producer(cluster, tid, timeout_ms=1000)
    assert add_partitions(cluster, tid, pid, epoch, {TOPIC: [1]}) == {(TOPIC, 1): ErrorCode.none}

    def aborted():
        described = describe(cluster, tid)
        return described if described.transaction_state != "Ongoing" else None

    described = wait_for(aborted, 30, "the coordinator to abort the timed-out transaction")
    assert described.transaction_state in ("PrepareAbort", "CompleteAbort")
    assert described.producer_epoch == epoch + 1
    wait_state(cluster, tid, "CompleteAbort")
    # The abandoned producer's epoch is fenced
    assert end_txn(cluster, tid, pid, epoch, committed=True) is ErrorCode.producer_fenced


def test_markers_for_a_deleted_topic_are_not_needed(cluster) -> None:
    """A partition whose topic is deleted before the commit takes no marker: the
    transaction completes with the others."""
    tid = "txn-deleted-topic"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()})
    admin.create_topics([NewTopic("txn-doomed", 1, 3)])["txn-doomed"].result(30)
    pid, epoch = init_producer(cluster, tid)
    added = wait_for(
        lambda: (
            (a := add_partitions(cluster, tid, pid, epoch, {"txn-doomed": [0], TOPIC: [0]}))
            and all(e is ErrorCode.none for e in a.values())
        ),
        30,
        "the new topic in every broker's metadata",
    )
    assert added
    admin.delete_topics(["txn-doomed"])["txn-doomed"].result(30)
    wait_for(lambda: "txn-doomed" not in admin.list_topics(timeout=10).topics, 30, "the deletion")
    assert end_txn(cluster, tid, pid, epoch, committed=True) is ErrorCode.none
    assert wait_state(cluster, tid, "CompleteCommit").topics == []


# -- failover (last: it kills a broker and starts it again) ------------------------------------


def _same_state_partition(transactional_id: str, prefix: str) -> str:
    """A transactional id in the same ``__transaction_state`` partition as another."""
    wanted = partition_for(transactional_id, STATE_PARTITIONS)
    return next(
        f"{prefix}-{i}"
        for i in range(1000)
        if partition_for(f"{prefix}-{i}", STATE_PARTITIONS) == wanted
    )


def _copy_loop(cluster, source: str, sink: str, group: str, ends: dict[int, int]):
    """``tests/txn_ctp_child.py`` copying ``source`` to ``sink`` in a process of its own."""
    ends_arg = ",".join(f"{p}:{o}" for p, o in ends.items())
    command = [sys.executable, str(CTP_CHILD), cluster.bootstrap_servers()]
    command += ["--input", source, "--output", sink, "--group", group]
    command += ["--transactional-id", f"copy-{group}", "--ends", ends_arg]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_consume_transform_produce_killed_part_way_copies_each_input_once(cluster) -> None:
    """KIP-447: a copying loop (consumer group, transactional producer,
    send_offsets_to_transaction per poll) SIGKILLed after some commits, then started again
    with the same transactional id: every input record is in the output exactly once."""
    source, sink = f"copy-in-{uuid.uuid4().hex[:6]}", f"copy-out-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()})
    for topic in (source, sink):
        admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(30)
    inputs = [b"in-%d" % i for i in range(300)]
    plain = Producer({"bootstrap.servers": cluster.bootstrap_servers(), "linger.ms": 5})
    for i, value in enumerate(inputs):
        plain.produce(source, value=value, partition=i % 3)
    assert plain.flush(60) == 0
    probe = Consumer({"bootstrap.servers": cluster.bootstrap_servers(), "group.id": "probe"})
    try:
        ends = {p: probe.get_watermark_offsets(TopicPartition(source, p), 20)[1] for p in range(3)}
    finally:
        probe.close()
    assert sum(ends.values()) == len(inputs)
    group = f"copy-{uuid.uuid4().hex[:6]}"

    first = _copy_loop(cluster, source, sink, group, ends)
    try:
        copied = 0
        for line in first.stdout:  # type: ignore[union-attr]
            assert not line.startswith("error"), line
            if line.startswith("committed "):
                copied = int(line.split()[1])
                if copied >= 60:
                    break
        assert copied >= 60, "the first copy ended before it committed 60 records"
    finally:
        first.kill()  # SIGKILL, maybe inside a transaction
        first.wait(30)
    second = _copy_loop(cluster, source, sink, group, ends)
    try:
        out, _ = second.communicate(timeout=180)
        assert second.returncode == 0, out
    finally:
        if second.poll() is None:
            second.kill()
            second.wait(30)

    reader = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers(),
            "group.id": f"{group}-check",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        reader.assign([TopicPartition(sink, p, 0) for p in range(3)])
        values, at_end = [], set()

        def done() -> bool:
            msg = reader.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
            elif msg is not None and msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
            return len(at_end) == 3

        wait_for(done, 60, f"the end of {sink}", interval_s=0)
    finally:
        reader.close()
    assert sorted(values) == sorted(b"out-" + v for v in inputs)


def test_coordinator_killed_with_transactions_prepared_and_open(cluster) -> None:
    """One transaction in PrepareCommit (or done), two Ongoing, at the coordinator killed:
    the new coordinator loads them; the commit completes, a confluent-kafka producer
    commits through it, and a producer recovers its open one (KIP-360)."""
    committing = "txn-failover-commit"
    open_tid = _same_state_partition(committing, "txn-failover-open")
    pid, epoch = init_producer(cluster, committing)
    opid, oepoch = init_producer(cluster, open_tid)
    assert add_partitions(cluster, committing, pid, epoch, {TOPIC: [0, 2]}) == {
        (TOPIC, 0): ErrorCode.none,
        (TOPIC, 2): ErrorCode.none,
    }
    assert add_partitions(cluster, open_tid, opid, oepoch, {TOPIC: [1]}) == {
        (TOPIC, 1): ErrorCode.none
    }
    # A confluent-kafka producer with records in an open transaction, same coordinator
    client_tid = _same_state_partition(committing, "txn-failover-client")
    producer = _producer(cluster, client_tid)
    producer.init_transactions(60)
    producer.begin_transaction()
    for p in range(3):
        producer.produce(TOPIC, value=b"across the failover", partition=p)
    producer.flush(30)
    assert end_txn(cluster, committing, pid, epoch, committed=True) is ErrorCode.none
    old = coordinator(cluster, committing)
    cluster.kill_broker(old)
    try:
        # the client finds the new coordinator and commits (markers to the new leaders)
        producer.commit_transaction(120)
        assert wait_state(cluster, client_tid, "CompleteCommit").topics == []
        read = _read_to_end(cluster, "read_committed")
        assert read.count(b"across the failover") == 3
        new = (
            wait_for(
                lambda: (c := coordinator(cluster, committing)) != old and c + 1,
                60,
                "a new coordinator",
            )
            - 1
        )
        assert new != old
        # Loaded from __transaction_state: the open transaction as it was
        described = describe(cluster, open_tid)
        assert (described.transaction_state, described.producer_id) == ("Ongoing", opid)
        assert (described.producer_epoch, described.topics) == (oepoch, [(TOPIC, [1])])
        # The commit: PrepareCommit until the new coordinator has written its markers
        committed = describe(cluster, committing)
        assert committed.transaction_state in ("PrepareCommit", "CompleteCommit")
        assert (committed.producer_id, committed.producer_epoch) == (pid, epoch)
        # The open transaction's producer carries on with the new coordinator
        assert add_partitions(cluster, open_tid, opid, oepoch, {TOPIC: [2]}) == {
            (TOPIC, 2): ErrorCode.none
        }
        # the new coordinator completes the commit its predecessor prepared
        wait_state(cluster, committing, "CompleteCommit")
        # KIP-360: the producer aborts, then bumps its epoch with its id and epoch (the
        # bump waits, CONCURRENT_TRANSACTIONS, until the abort's markers are written)
        assert end_txn(cluster, open_tid, opid, oepoch, committed=False) is ErrorCode.none
        answer = retried(
            cluster,
            open_tid,
            lambda: init_v5.InitProducerIdRequest(
                transactional_id=open_tid,
                transaction_timeout=_ms(60_000),
                producer_id=opid,
                producer_epoch=oepoch,
            ),
        )
        assert answer.error_code is ErrorCode.none
        assert (int(answer.producer_id), int(answer.producer_epoch)) == (opid, oepoch + 1)
        assert describe(cluster, open_tid).transaction_state == "Empty"
    finally:
        cluster.start_broker(old)
