"""A Structured Streaming job survives the SIGKILL of its driver: restarted from its
checkpoint, it continues where the last committed micro-batch ended, and its sink's
output holds every source record exactly once.

The job (``tests/spark_jobs/stream_to_parquet.py``) reads a replog topic with
``format("replog")`` and writes Spark's parquet file sink, whose own commit log
(``_spark_metadata``) makes it exactly-once: a micro-batch the dead driver had written
but not committed is written again, and only the committed files are read. It runs on
``local[2]`` and on a standalone ``spark://`` cluster (executors in worker processes).
The driver runs in a process group of its own, killed whole (the driver and its JVM).
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
RECORDS = 1_200  # 12 micro-batches of 100


@pytest.fixture(params=["local", "standalone"])
def master(request: pytest.FixtureRequest, tmp_path_factory) -> Iterator[str]:
    if request.param == "local":
        yield "local[2]"
        return
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


def _commits(checkpoint: Path) -> int:
    commits = checkpoint / "commits"
    return sum(1 for p in commits.iterdir() if p.name.isdigit()) if commits.exists() else 0


def test_driver_killed_mid_stream_restarts_from_its_checkpoint(
    master: str, bootstrap_servers: str, tmp_path: Path
) -> None:
    topic = f"driver-restart-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap_servers, topic, 3)
    produce_confluent(bootstrap_servers, topic, make_records("d", RECORDS, 3, 1_700_000_000_000))
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "table"
    args = [bootstrap_servers, topic, str(checkpoint), str(out), master]

    first = _driver(args, tmp_path / "driver-1.log")
    try:
        wait_for(lambda: _commits(checkpoint) >= 3, 180, "three committed micro-batches")
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the driver and its JVM, mid-stream
        first.wait(30)
        if first.stdout is not None:
            first.stdout.close()
    assert wait_dead(first.pid, 10)
    committed = _commits(checkpoint)
    assert committed < RECORDS // 100, "the first driver finished before it was killed"

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
