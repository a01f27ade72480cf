"""``replog transactions`` (Kafka's ``kafka-transactions.sh``) against a real 3-broker
cluster, with confluent-kafka transactional producers left open (begin, produce, flush,
no commit):

* ``list`` and ``describe`` show the open transaction Ongoing with its partition;
  ``describe-producers`` shows its first offset, which is the partition's last stable
  offset;
* ``abort`` at that offset writes an ABORT marker: the LSO moves to the log end and a
  read_committed consumer reads past it, the aborted records skipped;
* ``find-hanging`` reports a transaction the coordinator never knew (a transactional
  batch written straight to the partition with the project's client, KIP-890's
  verification off on this cluster) once it is older than ``--max-transaction-timeout``,
  never an open transaction its coordinator lists; ``abort`` ends it;
* the console (``replog console``'s poller and view) shows an open transaction with its
  partitions' LSO lag, and no longer once it is committed;
* bad input (an unknown transactional id, a start offset no transaction starts at, a
  topic that does not exist): one line on stderr, exit 1.
"""

from __future__ import annotations

import asyncio
import datetime
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from cluster_util import wait_for
from replog.cli.main import main
from replog.cluster.launcher import LocalCluster
from replog.console.server import ClusterPoller, ConsoleTargets
from replog.console.view import Observation, TransactionInfo, build_snapshot
from replog.protocol import describe_transactions_codec
from replog.protocol.apis import ApiKey, make, nested, request_schema, response_schema
from replog.protocol.client import KafkaConnection
from replog.protocol.frames import encode_response
from replog.protocol.records import ATTR_TRANSACTIONAL, build_batch, encode_record
from replog.protocol.wire import CodecError
from replog.server.metadata_cache import PartitionInfo

TOPIC = "txn-tools"
GHOST_PRODUCER_ID = 987_654_321  # a producer id no coordinator handed out


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("txn-tools"))
    try:
        c.up(
            3,
            zookeeper=f"{zookeeper.connect}/replog-{uuid.uuid4().hex[:8]}",
            metrics=True,  # the console's LSO lag
            overrides={
                "offsets.topic.num.partitions": "3",
                "transaction.state.log.num.partitions": "3",
                # the hanging transaction below is written without a coordinator
                "transaction.partition.verification.enable": "false",
            },
        )
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers()})
        admin.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result(30)
        yield c
    finally:
        c.down()


def run(cluster: LocalCluster, capsys, *args: str) -> tuple[int, str, str]:
    """``replog transactions --bootstrap-server ... ARGS``: (exit code, stdout, stderr)."""
    capsys.readouterr()
    code = main(["transactions", "--bootstrap-server", cluster.bootstrap_servers(), *args])
    out, err = capsys.readouterr()
    return code, out, err


def rows(out: str) -> list[list[str]]:
    """The table's rows below its header, split into cells."""
    lines = out.strip().splitlines()
    return [line.split() for line in lines[1:]]


def open_producer(cluster: LocalCluster, tid: str, partition: int, values: list[bytes]) -> Any:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers(), "transactional.id": tid})
    producer.init_transactions(60)
    producer.begin_transaction()
    for value in values:
        producer.produce(TOPIC, value=value, partition=partition)
    assert producer.flush(30) == 0
    return producer


def end_offsets(cluster: LocalCluster, partition: int) -> tuple[int, int]:
    """(last stable offset, high watermark) of ``partition``."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers(),
            "group.id": "txn-tools-offsets",
            "isolation.level": "read_committed",
        }
    )
    try:
        tp = TopicPartition(TOPIC, partition)
        lso = consumer.get_watermark_offsets(tp, timeout=30)[1]
        consumer2 = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap_servers(),
                "group.id": "txn-tools-offsets",
                "isolation.level": "read_uncommitted",
            }
        )
        try:
            hw = consumer2.get_watermark_offsets(tp, timeout=30)[1]
        finally:
            consumer2.close()
        return lso, hw
    finally:
        consumer.close()


def read_committed(cluster: LocalCluster, partition: int, end: int) -> list[bytes]:
    """A read_committed consumer's values of ``partition`` until its position reaches ``end``."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers(),
            "group.id": f"txn-tools-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(TOPIC, partition, 0)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
            [position] = consumer.position([TopicPartition(TOPIC, partition)])
            if position.offset >= end:
                return values
        raise AssertionError(f"read_committed stopped at {position.offset}, before {end}")
    finally:
        consumer.close()


def test_an_open_transaction_listed_described_and_aborted(cluster: LocalCluster, capsys) -> None:
    tid = "tools-open"
    producer = open_producer(cluster, tid, 0, [b"committed-0", b"committed-1"])
    producer.commit_transaction(60)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(TOPIC, value=b"open-%d" % i, partition=0)
    assert producer.flush(30) == 0

    code, out, err = run(cluster, capsys, "list")
    assert code == 0, err
    assert out.split()[:4] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    [listed] = [r for r in rows(out) if r[0] == tid]
    assert listed[3] == "Ongoing"
    producer_id = int(listed[2])

    code, out, err = run(cluster, capsys, "describe", "--transactional-id", tid)
    assert code == 0, err
    [described] = rows(out)
    assert described[1:3] == [tid, str(producer_id)]
    assert described[4] == "Ongoing"
    assert described[8] == f"{TOPIC}-0"
    assert int(described[6]) > 0 and int(described[7]) >= 0  # start time, duration
    assert described[0] == listed[1]  # the coordinator that listed it describes it

    code, out, err = run(
        cluster, capsys, "describe-producers", "--topic", TOPIC, "--partition", "0"
    )
    assert code == 0, err
    assert out.split()[-1] != "" and "CurrentTransactionStartOffset" in out.splitlines()[0]
    [mine] = [r for r in rows(out) if r[0] == str(producer_id)]
    start = int(mine[5])
    assert start == 3  # two committed records and their COMMIT marker before it
    lso, hw = end_offsets(cluster, 0)
    assert (lso, hw) == (3, 6)

    code, out, err = run(
        cluster, capsys, "abort", "--topic", TOPIC, "--partition", "0", "--start-offset", "3"
    )
    assert code == 0, err
    assert f"producer {producer_id}" in out
    lso, hw = end_offsets(cluster, 0)
    assert lso == hw == 7  # the ABORT marker after the three records; nothing open
    assert read_committed(cluster, 0, 7) == [b"committed-0", b"committed-1"]
    code, out, err = run(
        cluster, capsys, "describe-producers", "--topic", TOPIC, "--partition", "0"
    )
    [mine] = [r for r in rows(out) if r[0] == str(producer_id)]
    assert mine[5] == "None"
    # the coordinator still ends the transaction it holds
    producer.abort_transaction(60)


def produce_ghost_batch(cluster: LocalCluster, partition: int) -> int:
    """A transactional batch of a producer no coordinator knows, written to ``partition``'s
    leader with replog's own client; the leader's id."""
    metadata = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()}).list_topics(
        TOPIC, timeout=30
    )
    leader = metadata.topics[TOPIC].partitions[partition].leader
    broker = metadata.brokers[leader]
    now = int(time.time() * 1000)
    records = build_batch(
        base_offset=0,
        partition_leader_epoch=-1,
        attributes=ATTR_TRANSACTIONAL,
        last_offset_delta=1,
        base_timestamp=now,
        max_timestamp=now,
        producer_id=GHOST_PRODUCER_ID,
        producer_epoch=0,
        base_sequence=0,
        record_count=2,
        records=b"".join(encode_record(i, 0, None, b"ghost-%d" % i) for i in range(2)),
    )
    cls = request_schema(ApiKey.PRODUCE, 9)
    body = cls(
        transactional_id="ghost",
        acks=-1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            nested(cls, "TopicProduceData")(
                name=TOPIC,
                partition_data=(
                    nested(cls, "PartitionProduceData")(index=partition, records=records),
                ),
            ),
        ),
    )

    async def go() -> Any:
        conn = KafkaConnection(broker.host, broker.port, client_id="txn-tools-test")
        await conn.connect()
        try:
            return await conn.request(body, timeout_s=30)
        finally:
            await conn.close()

    [topic] = asyncio.run(go()).responses
    [answer] = topic.partition_responses
    assert answer.error_code == ErrorCode.none
    return leader


def test_find_hanging_reports_only_the_transaction_no_coordinator_knows(
    cluster: LocalCluster, capsys
) -> None:
    live = open_producer(cluster, "tools-live", 1, [b"live-0", b"live-1"])
    leader = produce_ghost_batch(cluster, 1)
    # not older than the default 15 minutes: nothing reported (and this call's time makes
    # the batch older than the 0 minutes asked next)
    code, out, err = run(cluster, capsys, "find-hanging", "--broker-id", str(leader))
    assert code == 0, err
    assert "Duration(min)" in out and rows(out) == []

    code, out, err = run(
        cluster,
        capsys,
        "find-hanging",
        "--broker-id",
        str(leader),
        "--max-transaction-timeout",
        "0",
    )
    assert code == 0, err
    [hanging] = rows(out)
    assert hanging[:3] == [TOPIC, "1", str(GHOST_PRODUCER_ID)]
    assert int(hanging[5]) == 2
    # the same found by topic, each partition asked at its leader
    code, out, err = run(
        cluster, capsys, "find-hanging", "--topic", TOPIC, "--max-transaction-timeout", "0"
    )
    assert code == 0, err
    assert [r[:3] for r in rows(out)] == [
        [TOPIC, "1", str(GHOST_PRODUCER_ID)]
    ]  # after the live transaction's two records, open too

    # Kafka's other form of abort: the producer's id, epoch and coordinator epoch given
    producer_epoch, coordinator_epoch = hanging[3], hanging[4]
    code, out, err = run(
        cluster,
        capsys,
        "abort",
        "--topic",
        TOPIC,
        "--partition",
        "1",
        "--producer-id",
        str(GHOST_PRODUCER_ID),
        "--producer-epoch",
        producer_epoch,
        "--coordinator-epoch",
        str(max(int(coordinator_epoch), 0)),
    )
    assert code == 0, err
    # find-hanging by topic and partition, at the partition's leader: nothing left
    code, out, err = run(
        cluster,
        capsys,
        "find-hanging",
        "--topic",
        TOPIC,
        "--partition",
        "1",
        "--max-transaction-timeout",
        "0",
    )
    assert code == 0, err
    assert rows(out) == []
    code, out, err = run(
        cluster, capsys, "describe-producers", "--topic", TOPIC, "--partition", "1"
    )
    [ghost] = [r for r in rows(out) if r[0] == str(GHOST_PRODUCER_ID)]
    assert ghost[5] == "None"
    live.commit_transaction(60)
    assert read_committed(cluster, 1, end_offsets(cluster, 1)[1]) == [b"live-0", b"live-1"]


NO_START_TIME = datetime.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=datetime.UTC)
names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)


@given(
    st.lists(
        st.tuples(
            st.sampled_from([ErrorCode.none, ErrorCode.transactional_id_not_found]),
            names,
            st.sampled_from(["Ongoing", "Empty", "CompleteCommit"]),
            st.integers(0, 2**31 - 1),
            st.one_of(st.just(-1), st.integers(0, 2**45)),
            st.integers(-1, 2**62),
            st.integers(-1, 2**15 - 1),
            st.lists(st.tuples(names, st.lists(st.integers(0, 2**31 - 1), max_size=4)), max_size=3),
        ),
        max_size=4,
    )
)
def test_describe_transactions_codec_reads_what_the_broker_writes(states) -> None:
    """The tools' hand reader of DescribeTransactions v0 against kio's writer (the
    broker's), the start time -1 of a transaction not started included."""
    cls = response_schema(ApiKey.DESCRIBE_TRANSACTIONS, 0)
    body = make(
        cls,
        throttle_time=datetime.timedelta(0),
        transaction_states=tuple(
            make(
                nested(cls, "TransactionState"),
                error_code=error,
                transactional_id=tid,
                transaction_state=state,
                transaction_timeout=datetime.timedelta(milliseconds=timeout),
                transaction_start_time=NO_START_TIME
                if start < 0
                else datetime.datetime.fromtimestamp(start / 1000, datetime.UTC),
                producer_id=pid,
                producer_epoch=epoch,
                topics=tuple(
                    make(nested(cls, "TopicData"), topic=t, partitions=tuple(ps))
                    for t, ps in topics
                ),
            )
            for error, tid, state, timeout, start, pid, epoch, topics in states
        ),
    )
    frame = encode_response(ApiKey.DESCRIBE_TRANSACTIONS, 7, body)[4:]
    read = describe_transactions_codec.decode_response(frame)
    with pytest.raises(CodecError):  # a truncated answer: one error type, no struct.error
        describe_transactions_codec.decode_response(frame[: len(frame) // 2])
    assert [
        (
            t.error_code,
            t.transactional_id,
            t.transaction_state,
            t.transaction_timeout_ms,
            t.transaction_start_time_ms,
            t.producer_id,
            t.producer_epoch,
            [(topic, list(ps)) for topic, ps in t.topics],
        )
        for t in read
    ] == [
        (error, tid, state, timeout, start, pid, epoch, [(t, ps) for t, ps in topics])
        for error, tid, state, timeout, start, pid, epoch, topics in states
    ]


def test_console_view_of_open_transactions() -> None:
    lag = "kafka_cluster_partition_laststableoffsetlag"
    obs = Observation(
        taken_ms=50_000,
        brokers={0: "h:1", 1: "h:2"},
        known_brokers={0, 1},
        controller_id=0,
        controller_epoch=1,
        partitions=[PartitionInfo("t", 0, 1, 0, (0, 1), (0, 1))],
        metrics={1: {(lag, (("partition", "0"), ("topic", "t"))): 4.0}},
        transactions=[
            TransactionInfo("late", 0, 8, 0, "Ongoing", 60_000, 45_000, (("t", 0),)),
            TransactionInfo("early", 1, 7, 2, "PrepareCommit", 60_000, 20_000, (("t", 0),)),
        ],
    )
    snapshot = build_snapshot(obs, None)
    assert [t.transactional_id for t in snapshot.transactions] == ["early", "late"]
    early = snapshot.transactions[0]
    assert (early.state, early.coordinator, early.duration_ms) == ("PrepareCommit", 1, 30_000)
    assert early.partitions == ["t-0"] and early.lso_lag == {"t-0": 4}  # the leader's gauge
    assert snapshot.as_json()["transactions"][1]["producer_id"] == 8


def test_console_shows_an_open_transaction(cluster: LocalCluster) -> None:
    poller = ClusterPoller(
        ConsoleTargets(
            bootstrap=cluster.bootstrap_servers().split(","),
            metrics_urls={b: cluster.metrics_url(b) for b in cluster.broker_ids},
        )
    )

    def shown() -> list[Any]:
        snapshot = asyncio.run(poller.poll_once())
        assert snapshot is not None
        return [t for t in snapshot.transactions if t.transactional_id == "tools-console"]

    try:
        producer = open_producer(cluster, "tools-console", 2, [b"c-0", b"c-1", b"c-2"])
        [view] = wait_for(
            lambda: [v for v in shown() if v.lso_lag], 30, "the open transaction and its LSO lag"
        )
        assert (view.state, view.partitions) == ("Ongoing", [f"{TOPIC}-2"])
        assert view.lso_lag == {f"{TOPIC}-2": 3}  # its three records hold the LSO back
        assert view.start_ms is not None and view.duration_ms >= 0
        producer.commit_transaction(60)
        wait_for(lambda: shown() == [], 30, "the committed transaction gone from the console")
    finally:
        poller.close()


@pytest.mark.parametrize(
    "args, message",
    [
        (["describe", "--transactional-id", "never-used"], "cannot describe never-used"),
        (
            ["abort", "--topic", TOPIC, "--partition", "2", "--start-offset", "12345"],
            "no open transaction",
        ),
        (["describe-producers", "--topic", "no-such-topic", "--partition", "0"], "does not exist"),
        (["find-hanging", "--broker-id", "77"], "broker 77 is not in the cluster"),
    ],
)
def test_bad_input_is_one_line_and_exit_1(
    cluster: LocalCluster, capsys, args: list[str], message: str
) -> None:
    code, out, err = run(cluster, capsys, *args)
    assert code == 1
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_the_command_as_a_process(cluster: LocalCluster) -> None:
    """``replog transactions`` run as its own process: a table on stdout and exit 0; a bad
    argument exits 2 and a failure 1, each with one line on stderr."""
    replog = [sys.executable, "-m", "replog.cli.main", "transactions"]
    bootstrap = ["--bootstrap-server", cluster.bootstrap_servers()]

    def call(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*replog, *bootstrap, *args], capture_output=True, text=True, timeout=60, check=False
        )

    listed = call("list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split()[:4] == [
        "TransactionalId",
        "Coordinator",
        "ProducerId",
        "TransactionState",
    ]
    assert "tools-open" in listed.stdout  # the first test's transactional id, now ended
    negative = call("describe-producers", "--topic", TOPIC, "--partition", "-1")
    assert negative.returncode == 2
    assert negative.stderr.strip() == "replog transactions: --partition must be >= 0"
    missing = call("describe-producers", "--topic", "no-such-topic", "--partition", "0")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "replog transactions: no-such-topic-0 does not exist"
