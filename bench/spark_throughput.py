"""Rows/s of the ``replog`` Spark source and sink (prints figures; not a test).

    .venv/bin/python bench/spark_throughput.py [--bootstrap HOST:PORT] [--records N]

Without ``--bootstrap`` it starts a one-broker replog cluster (ZooKeeper + broker) on
127.0.0.1 and stops it by pid.
Measures, on one local[2] SparkSession:

1. produce: a plain confluent-kafka producer filling the topic (for scale);
2. task read: ``read_range`` in this process, one partition after another (no Spark);
3. Spark batch read: ``spark.read.format("replog")`` summing value lengths, with
   ``kafka.isolation.level`` read_uncommitted and read_committed alternately (the ratio
   of each pair of runs, committed / uncommitted, and its median are printed);
4. Spark batch write of the same number of rows held in Spark's cache (the sink alone),
   ``deliveryGuarantee`` atLeastOnce and exactlyOnce alternately (ratio exactlyOnce /
   atLeastOnce, the issue's goal >= 0.7);
5. Spark read + write: ``df.write.format("replog")`` of the rows read from the topic.

3 to 5 run after a warm-up (Python workers, the writer's driver-side workers), each
``--repeat`` times (the median is printed), alternated ``--rounds`` times.

Reads use ``endingOffsets`` from the producer's delivery reports (which also works
against Tansu, whose ListOffsets(latest) is wrong for multi-record batches).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from common import replog_cluster, work_dir


@contextmanager
def replog_broker() -> Iterator[tuple[str, int | None]]:
    """A one-broker replog cluster under bench/out/, stopped by pid afterwards."""
    # One broker: __transaction_state must accept writes with one in-sync replica.
    overrides = {"transaction.state.log.min.isr": "1"}
    with work_dir("spark") as directory, replog_cluster(directory, 1, overrides) as cluster:
        yield cluster.bootstrap_servers(), cluster.broker_pid(cluster.broker_ids[0])


TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: set[int]) -> dict[int, float]:
    """User + system CPU of each of these processes (with its reaped children), from /proc."""
    found = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone
        found[pid] = sum(int(x) for x in fields[11:15]) * TICK_S  # utime stime cutime cstime
    return found


def cpu_since(before: dict[int, float], pids: set[int]) -> float:
    """CPU these processes used since ``before`` (a process started since counts whole)."""
    now = cpu_seconds(pids)
    return sum(t - before.get(pid, 0.0) for pid, t in now.items())


def descendants(root: int) -> set[int]:
    """``root`` and every process below it (Spark's JVM and its Python workers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo.extend(children.get(pid, ()))
    return found


def fill(bootstrap: str, topic: str, partitions: int, records: int, size: int) -> dict:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=partitions)]).values():
        future.result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    ends: dict[int, int] = {}

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            raise RuntimeError(err)
        p = msg.partition()  # type: ignore[attr-defined]
        ends[p] = max(ends.get(p, 0), msg.offset() + 1)  # type: ignore[attr-defined]

    value = b"x" * size
    for i in range(records):
        while True:
            try:
                producer.produce(
                    topic,
                    key=b"%d" % i,
                    value=value,
                    partition=i % partitions,
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0
    return ends


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap")
    parser.add_argument("--broker-pid", type=int, help="with --bootstrap: its CPU is shown")
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--rounds", type=int, default=1, help="alternations of the figures")
    args = parser.parse_args()
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    with (
        replog_broker()
        if args.bootstrap is None
        else contextmanager(lambda: iter([(args.bootstrap, args.broker_pid)]))() as (
            bootstrap,
            broker_pid,
        )
    ):
        run(bootstrap, broker_pid, args)


def create_topic(admin: Any, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import NewTopic

    for future in admin.create_topics([NewTopic(topic, num_partitions=partitions)]).values():
        future.result(timeout=30)


def measure(once: Callable[[], None], n: int, broker_pid: int | None) -> tuple[float, float, float]:
    """One run of ``once``: rows/s, and CPU per row (us) of Spark (driver, JVM, Python
    workers) and of the broker."""
    broker = {broker_pid} if broker_pid else set()
    s0, b0 = cpu_seconds(descendants(os.getpid())), cpu_seconds(broker)
    t0 = time.perf_counter()
    once()
    rate = n / (time.perf_counter() - t0)
    # Processes started meanwhile (Python workers) count whole; ones gone are missed.
    return rate, cpu_since(s0, descendants(os.getpid())) / n * 1e6, cpu_since(b0, broker) / n * 1e6


def report(label: str, runs: list[tuple[float, float, float]], broker_pid: int | None) -> float:
    """Print the median rate (and each run's) and the median CPU per row; return the rate.
    CPU per row depends less than rows/s on what else the machine runs."""
    rates = [r for r, _, _ in runs]
    median = statistics.median(rates)
    each = " ".join(f"{r / 1000:,.0f}k" for r in rates)
    cpu = f"Spark {statistics.median(c for _, c, _ in runs):.1f} us/row"
    if broker_pid:
        cpu += f", broker {statistics.median(b for _, _, b in runs):.1f} us/row"
    print(f"{label:<34}{median:12,.0f} rows/s  (median of {len(runs)}: {each}; {cpu})", flush=True)
    return median


def timed(
    label: str, n: int, repeat: int, once: Callable[[], None], broker_pid: int | None
) -> float:
    """Run ``once`` ``repeat`` times and :func:`report` it."""
    return report(label, [measure(once, n, broker_pid) for _ in range(repeat)], broker_pid)


def timed_pair(
    labels: tuple[str, str],
    n: int,
    repeat: int,
    runs: tuple[Callable[[], None], Callable[[], None]],
    broker_pid: int | None,
) -> float:
    """Run two variants alternately (a, b, a, b, ...) so the machine's load weighs on both
    alike; report each and return the median of the per-pair ratios b / a."""
    first: list[tuple[float, float, float]] = []
    second: list[tuple[float, float, float]] = []
    for _ in range(repeat):
        first.append(measure(runs[0], n, broker_pid))
        second.append(measure(runs[1], n, broker_pid))
    report(labels[0], first, broker_pid)
    report(labels[1], second, broker_pid)
    ratio = statistics.median(b[0] / a[0] for a, b in zip(first, second, strict=True))
    print(f"{'  ratio ' + labels[1].split('(')[-1].rstrip('):'):<34}{ratio:12.2f}", flush=True)
    return ratio


def run(bootstrap: str, broker_pid: int | None, args: argparse.Namespace) -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from replog.spark.consumer import ReadSettings, read_range
    from replog.spark.offsets import OffsetRange

    n = args.records
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    t0 = time.perf_counter()
    ends = fill(bootstrap, topic, args.partitions, n, args.value_bytes)
    dt = time.perf_counter() - t0
    print(f"produce (confluent-kafka):   {n / dt:12,.0f} rows/s  ({n} rows, {dt:.2f}s)")

    settings = ReadSettings(bootstrap, {}, True, False, 60_000)
    t0 = time.perf_counter()
    got = sum(
        batch.num_rows
        for p, end in ends.items()
        for batch in read_range(OffsetRange(topic, p, 0, end), settings)
    )
    dt = time.perf_counter() - t0
    assert got == n, (got, n)
    print(f"task read_range (no Spark):  {n / dt:12,.0f} rows/s  ({dt:.2f}s)")

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    ending = json.dumps({topic: {str(p): e for p, e in ends.items()}})
    df = (
        spark.read.format("replog")
        .option("bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("endingOffsets", ending)
        .load()
    )
    # The same rows, held by Spark: what the sink alone costs.
    cached = (
        spark.range(0, n, numPartitions=args.partitions)
        .select(
            F.col("id").cast("string").cast("binary").alias("key"),
            F.expr(f"cast(repeat('x', {args.value_bytes}) AS binary)").alias("value"),
        )
        .cache()
    )
    assert cached.count() == n

    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})

    committed = (
        spark.read.format("replog")
        .option("bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("endingOffsets", ending)
        .option("kafka.isolation.level", "read_committed")
        .load()
    )

    def write(frame: Any, guarantee: str = "atLeastOnce") -> None:
        out = f"{topic}-copy-{uuid.uuid4().hex[:6]}"
        create_topic(admin, out, args.partitions)
        (
            frame.write.format("replog")
            .option("bootstrap.servers", bootstrap)
            .option("topic", out)
            .option("deliveryGuarantee", guarantee)
            .mode("append")
            .save()
        )

    # Warm up each job shape: Python workers, the writer's driver-side workers, JVM code.
    df.selectExpr("count(*)").collect()
    committed.selectExpr("count(*)").collect()
    write(cached.limit(1000))
    write(cached.limit(1000), "exactlyOnce")
    small = json.dumps({topic: {str(p): min(e, 250) for p, e in ends.items()}})
    write(
        spark.read.format("replog")
        .option("bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("endingOffsets", small)
        .load()
        .select("key", "value")
    )  # not limit(): it stops the reading Python workers mid-stream

    def read(frame: Any = df) -> None:
        row = frame.selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()[0]
        assert row["n"] == n

    isolation, guarantee = [], []
    for _ in range(args.rounds):  # alternated, so the machine's load weighs on both alike
        isolation.append(
            timed_pair(
                ("Spark read (read_uncommitted):", "Spark read (read_committed):"),
                n,
                args.repeat,
                (read, lambda: read(committed)),
                broker_pid,
            )
        )
        guarantee.append(
            timed_pair(
                ("Spark write cached (atLeastOnce):", "Spark write cached (exactlyOnce):"),
                n,
                args.repeat,
                (lambda: write(cached), lambda: write(cached, "exactlyOnce")),
                broker_pid,
            )
        )
        timed(
            "Spark read + write:",
            n,
            args.repeat,
            lambda: write(df.select("key", "value")),
            broker_pid,
        )
    print(
        f"median ratios over {args.rounds} round(s): read_committed / read_uncommitted "
        f"{statistics.median(isolation):.2f}, exactlyOnce / atLeastOnce sink "
        f"{statistics.median(guarantee):.2f}",
        flush=True,
    )
    print(f"load average after: {os.getloadavg()[0]:.2f}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
