"""Rows/s of the ``replog`` Spark source and sink (prints figures; not a test).

    .venv/bin/python bench/spark_throughput.py [--bootstrap HOST:PORT] [--records N]

Without ``--bootstrap`` it starts a one-broker replog cluster (ZooKeeper + broker) on
127.0.0.1 and stops it by pid.
Measures, on one local[2] SparkSession:

1. produce: a plain confluent-kafka producer filling the topic (for scale);
2. task read: ``read_range`` in this process, one partition after another (no Spark);
3. Spark batch read: ``spark.read.format("replog")`` summing value lengths;
4. Spark batch write: ``df.write.format("replog")`` of the rows just read.

Reads use ``endingOffsets`` from the producer's delivery reports (which also works
against Tansu, whose ListOffsets(latest) is wrong for multi-record batches).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from common import replog_cluster, work_dir


@contextmanager
def replog_broker() -> Iterator[str]:
    """A one-broker replog cluster under bench/out/, stopped by pid afterwards."""
    with work_dir("spark") as directory, replog_cluster(directory, 1) as cluster:
        yield cluster.bootstrap_servers()


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
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=100)
    args = parser.parse_args()
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    with (
        replog_broker()
        if args.bootstrap is None
        else contextmanager(lambda: iter([args.bootstrap]))() as bootstrap
    ):
        run(bootstrap, args)


def run(bootstrap: str, args: argparse.Namespace) -> None:
    from pyspark.sql import SparkSession

    from replog.spark.consumer import ReadSettings, read_range
    from replog.spark.offsets import OffsetRange

    n = args.records
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
    df.selectExpr("count(*)").collect()  # warm up the Python workers
    t0 = time.perf_counter()
    row = df.selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()[0]
    dt = time.perf_counter() - t0
    assert row["n"] == n
    print(f"Spark read (local[2]):       {n / dt:12,.0f} rows/s  ({dt:.2f}s)")

    out = f"{topic}-copy"
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(out, num_partitions=args.partitions)]).values():
        future.result(timeout=30)
    t0 = time.perf_counter()
    (
        df.select("key", "value")
        .write.format("replog")
        .option("bootstrap.servers", bootstrap)
        .option("topic", out)
        .option("kafka.linger.ms", "5")
        .mode("append")
        .save()
    )
    dt = time.perf_counter() - t0
    print(f"Spark write (read+produce):  {n / dt:12,.0f} rows/s  ({dt:.2f}s)")
    spark.stop()


if __name__ == "__main__":
    main()
