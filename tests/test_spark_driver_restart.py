"""A Structured Streaming job survives the SIGKILL of its driver: restarted from its
checkpoint, it continues where the last committed micro-batch ended, and its sink's
output holds every source record exactly once.

The job (``tests/spark_jobs/stream_to_parquet.py``) reads a replog topic with
``format("replog")`` and writes Spark's parquet file sink, whose own commit log
(``_spark_metadata``) makes it exactly-once: a micro-batch the dead driver had written
but not committed is written again, and only the committed files are read. It runs on
a standalone ``spark://`` cluster (executors in worker processes).
The driver runs in a process group of its own, killed whole (the driver and its JVM).

The same driver runs a second query from the same topic into a replog topic through the
``replog`` sink with ``deliveryGuarantee=exactlyOnce``: read with ``read_committed``, the
output topic holds every input record exactly once, although the killed driver may have
left transactions open (aborted by the restarted tasks' fencing) or committed a batch
that its commit log does not record (written again by nobody: the tasks find it recorded).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients_util import create_topic, make_records, produce_confluent
from cluster_util import wait_for
from replog.cluster.launcher import wait_dead
from replog.cluster.spark_cluster import StandaloneSpark

JOB = Path(__file__).parent / "spark_jobs" / "stream_to_parquet.py"
# 6 micro-batches of 200 in the parquet query, 24 of 50 in the exactly-once one (see the
# job's docstring): neither finishes in the first driver, whose kill comes once the parquet
# query committed one and the exactly-once query, started first, is a few batches in.
RECORDS = 1_200
BATCHES = RECORDS // 200
EOS_BATCHES = RECORDS // 50


# On the standalone spark:// cluster only: executors in worker processes, the driver
# killed apart from them, is the stronger case, and local[2] runs the same job's code
# (the Spark source tests run on both masters). Two params cost make test a minute or
# more of one worker's time.
@pytest.fixture(params=["standalone"])
def master(request: pytest.FixtureRequest, tmp_path_factory) -> Iterator[str]:
    cluster = StandaloneSpark(tmp_path_factory.mktemp("spark-standalone"))
    try:
        yield cluster.up(workers=2, cores=1, memory="1g")
    finally:
        cluster.down()


def _driver(args: list[str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, str(JOB), *args],
            stdout=subprocess.PIPE,
            stderr=out,
            env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
            start_new_session=True,
        )


def _output(bootstrap: str, topic: str, isolation_level: str) -> list[bytes]:
    """Every value of ``topic`` read with ``isolation_level`` (markers never show)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation_level,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        values: list[bytes] = []
        done: set[int] = set()
        while len(done) < len(partitions):
            message = consumer.poll(30)
            assert message is not None, f"no record nor end of {topic} within 30 s"
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                done.add(message.partition())
                continue
            values.append(message.value())
        return values
    finally:
        consumer.close()


def _first_transaction(bootstrap: str, topic: str) -> None:
    """One exactly-once write of a row to a scratch topic: the broker's first transaction
    creates ``__transaction_state`` and ``__consumer_offsets``, slow on a loaded machine,
    which would otherwise hold up the query's first micro-batch while the other runs on."""
    import pyarrow as pa

    from replog.spark.exactly_once import TaskTransaction, write_batches_exactly_once
    from replog.spark.producer import WriteSettings

    create_topic(bootstrap, topic, 1)
    settings = WriteSettings(bootstrap, topic, {}, "warm-up-")
    rows = [pa.record_batch({"value": pa.array([b"warm-up"], pa.binary())})]
    outcome = write_batches_exactly_once(rows, settings, TaskTransaction(topic, 0, 0))
    assert outcome.records == 1


def _logged(checkpoint: Path, log: str) -> int:
    directory = checkpoint / log
    return sum(1 for p in directory.iterdir() if p.name.isdigit()) if directory.exists() else 0


def _commits(checkpoint: Path) -> int:
    return _logged(checkpoint, "commits")


def _eos_batch_running(checkpoint: Path) -> bool:
    """The exactly-once query committed a micro-batch and runs the next: Spark logged its
    offsets, not yet its commit, so the kill leaves its tasks' transactions open or
    committed without the batch being recorded as done."""
    committed = _commits(checkpoint)
    return committed >= 1 and _logged(checkpoint, "offsets") > committed


def test_driver_killed_mid_stream_restarts_from_its_checkpoint(
    master: str, bootstrap_servers: str, tmp_path: Path
) -> None:
    topic = f"driver-restart-{uuid.uuid4().hex[:8]}"
    out_topic = f"{topic}-eos"
    create_topic(bootstrap_servers, topic, 3)
    create_topic(bootstrap_servers, out_topic, 3)
    produce_confluent(bootstrap_servers, topic, make_records("d", RECORDS, 3, 1_700_000_000_000))
    _first_transaction(bootstrap_servers, f"{topic}-warm-up")
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "table"
    eos_checkpoint = tmp_path / "eos-checkpoint"
    args = [bootstrap_servers, topic, str(checkpoint), str(out), master]
    args += [out_topic, str(eos_checkpoint)]

    # The first driver starts the parquet query once the exactly-once query's first
    # micro-batch (its tasks' first transactions, the slow one) is done: started together,
    # the parquet query had committed five of its six batches by the time the other was
    # mid-batch (make test, load 12), one short of finishing before the kill.
    # (The restarted driver starts both at once: they resume mid-stream.)
    first = _driver([*args, "--parquet-after-first-eos-batch"], tmp_path / "driver-1.log")
    try:
        wait_for(
            # One committed parquet batch is enough to be mid-stream.
            lambda: _commits(checkpoint) >= 1 and _eos_batch_running(eos_checkpoint),
            180,
            "a committed micro-batch, and the exactly-once query running its second or later",
        )
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the driver and its JVM, mid-stream
        first.wait(30)
        if first.stdout is not None:
            first.stdout.close()
    assert wait_dead(first.pid, 10)
    committed = _commits(checkpoint)
    assert committed < BATCHES, "the first driver finished before it was killed"
    assert _commits(eos_checkpoint) < EOS_BATCHES, "the exactly-once query had finished"

    second = _driver(args, tmp_path / "driver-2.log")
    try:
        output, _ = second.communicate(timeout=240)
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
            second.wait(30)
    assert second.returncode == 0, (tmp_path / "driver-2.log").read_text()[-3000:]
    result = json.loads(output.decode().strip().splitlines()[-1])
    assert result == {"rows": RECORDS, "distinct": RECORDS}
    assert _commits(checkpoint) > committed  # it continued rather than starting over

    # Every input record exactly once in the exactly-once query's output, read committed.
    # (Read uncommitted, the output also holds what the killed driver's tasks wrote in
    # transactions that were then aborted, if the kill caught any open.)
    inputs = sorted(f"{p}:{o}".encode() for p in range(3) for o in range(RECORDS // 3))
    assert sorted(_output(bootstrap_servers, out_topic, "read_committed")) == inputs
    uncommitted = _output(bootstrap_servers, out_topic, "read_uncommitted")
    assert set(uncommitted) == set(inputs) and len(uncommitted) >= RECORDS
