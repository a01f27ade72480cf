"""The demo's PySpark Structured Streaming query: views per page per minute.

Reads topic ``events`` with ``spark.readStream.format("replog")``, parses the JSON page
views, counts them per page in one-minute event-time windows (update mode, watermark 5
minutes so state is bounded but no event of a ~2-minute run is ever dropped as late), and
in ``foreachBatch`` writes each micro-batch's updated counts

- to a parquet table partitioned by ``batch_id`` (overwriting that batch's directory, so a
  re-run batch replaces itself: idempotent), and
- to topic ``page-views-per-minute`` with ``format("replog")`` (at-least-once; every row
  carries its ``batch_id`` so a reader takes the latest).

A key's final count is the one written by the highest ``batch_id``.

Concurrency: driven from the main thread; Spark calls the ``foreachBatch`` function from
its own (py4j callback) thread, one micro-batch at a time.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from replog.demo.check import ResultRow

EVENT_SCHEMA = "page STRING, user STRING, ts LONG"
WATERMARK = "5 minutes"


LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{ISO8601}} %p %c: %m%n
"""


def log_spark_to(path: Path) -> None:
    """Send the Spark JVM's log lines (driver, and executors started afterwards on this
    machine) to ``path`` instead of the terminal: a ``log4j2.properties`` in a
    ``SPARK_CONF_DIR`` of our own, read when the JVM starts."""
    conf_dir = path.parent / "spark-conf"
    conf_dir.mkdir(parents=True, exist_ok=True)
    (conf_dir / "log4j2.properties").write_text(LOG4J2.format(path=path))
    os.environ["SPARK_CONF_DIR"] = str(conf_dir)


def spark_session(app_name: str = "replog-demo", master: str = "local[2]") -> Any:
    """A session on ``master`` (``local[2]`` or a ``spark://`` URL) bound to 127.0.0.1
    with the UI off; on a standalone cluster, two 1-core executors of 512 MB."""
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from replog.cluster.spark_cluster import session_settings

    builder = SparkSession.builder.master(master)
    for key, value in session_settings(master).items():
        builder = builder.config(key, value)
    spark = (
        builder.appName(app_name)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def start_query(
    spark: Any,
    bootstrap_servers: str,
    *,
    events_topic: str,
    output_topic: str,
    table_dir: Path,
    checkpoint_dir: Path,
    trigger_s: float = 2.0,
) -> Any:
    """Start the query; returns its ``StreamingQuery``."""
    from pyspark.sql import functions as F

    events = (
        spark.readStream.format("replog")
        .option("bootstrap.servers", bootstrap_servers)
        .option("subscribe", events_topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    views = events.select(
        F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e")
    ).select(F.col("e.page").alias("page"), F.timestamp_millis(F.col("e.ts")).alias("event_time"))
    counts = (
        views.withWatermark("event_time", WATERMARK)
        .groupBy(F.window("event_time", "1 minute"), "page")
        .count()
    )

    def write_batch(batch: Any, batch_id: int) -> None:
        rows = batch.select(
            "page",
            F.unix_millis(F.col("window.start")).alias("window_start_ms"),
            F.unix_millis(F.col("window.end")).alias("window_end_ms"),
            F.col("count").alias("views"),
        ).persist()
        try:
            if rows.isEmpty():
                return
            rows.write.mode("overwrite").parquet(str(table_dir / f"batch_id={batch_id}"))
            (
                rows.select(
                    F.concat_ws("|", "page", "window_start_ms").alias("key"),
                    F.to_json(
                        F.struct(
                            "page",
                            "window_start_ms",
                            "window_end_ms",
                            "views",
                            F.lit(batch_id).alias("batch_id"),
                        )
                    ).alias("value"),
                )
                .write.format("replog")
                .option("bootstrap.servers", bootstrap_servers)
                .option("topic", output_topic)
                .mode("append")
                .save()
            )
        finally:
            rows.unpersist()

    return (
        counts.writeStream.queryName("page_views_per_minute")
        .outputMode("update")
        .foreachBatch(write_batch)
        .option("checkpointLocation", str(checkpoint_dir))
        .trigger(processingTime=f"{trigger_s} seconds")
        .start()
    )


def warm_up(spark: Any, bootstrap_servers: str, topic: str) -> None:
    """Read and write a few records through ``format("replog")`` once.

    The first Spark job that uses the Python data source starts Python workers and imports
    the source in them, which takes seconds to tens of seconds on a busy 2-core machine.
    Doing it on a scratch topic keeps that delay out of the measured stream.
    """
    from pyspark.sql import functions as F

    rows = spark.range(200).select(F.col("id").cast("string").alias("value"))
    (
        rows.write.format("replog")
        .option("bootstrap.servers", bootstrap_servers)
        .option("topic", topic)
        .mode("append")
        .save()
    )
    (
        spark.read.format("replog")
        .option("bootstrap.servers", bootstrap_servers)
        .option("subscribe", topic)
        .load()
        .groupBy("partition")
        .count()
        .collect()
    )


def stop_between_triggers(q: Any, timeout_s: float = 30) -> None:
    """Stop the query while no trigger runs.

    Interrupting a running micro-batch (e.g. inside ``foreachBatch``) can leave a
    ``StackOverflowError`` from Spark's stream thread on stderr; waiting for an idle moment
    (the trigger interval leaves plenty) avoids it.
    """
    deadline = time.monotonic() + timeout_s
    while q.isActive and q.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.05)
    q.stop()


def read_table(spark: Any, table_dir: Path) -> list[ResultRow]:
    """Every row of the parquet table (all micro-batches)."""
    if not any(table_dir.glob("batch_id=*")):
        return []
    rows = spark.read.parquet(str(table_dir)).collect()
    return [
        ResultRow(r["page"], int(r["window_start_ms"]), int(r["views"]), int(r["batch_id"]))
        for r in rows
    ]


def read_output_topic(spark: Any, bootstrap_servers: str, topic: str) -> list[ResultRow]:
    """Every record of the output topic, read back with ``spark.read.format("replog")``."""
    records = (
        spark.read.format("replog")
        .option("bootstrap.servers", bootstrap_servers)
        .option("subscribe", topic)
        .load()
        .selectExpr("CAST(value AS STRING) AS value")
        .collect()
    )
    out = []
    for record in records:
        row = json.loads(record["value"])
        out.append(
            ResultRow(
                row["page"], int(row["window_start_ms"]), int(row["views"]), int(row["batch_id"])
            )
        )
    return out


@dataclass(frozen=True)
class BatchProgress:
    """One micro-batch as the query reported it (times in seconds since the epoch)."""

    batch_id: int
    began: float
    finished: float
    input_rows: int
    end_offsets: dict[int, int]  # partition -> next offset to read, for the events topic


def _parse_time(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def batch_progress(progress: Any, topic: str) -> BatchProgress:
    began = _parse_time(progress.timestamp)
    took_ms = progress.durationMs.get("triggerExecution", 0)
    ends: dict[int, int] = {}
    for source in progress.sources:
        end = source.endOffset
        parsed = json.loads(end) if isinstance(end, str) and end else (end or {})
        for partition, offset in parsed.get(topic, {}).items():
            ends[int(partition)] = int(offset)
    return BatchProgress(
        batch_id=int(progress.batchId),
        began=began,
        finished=began + took_ms / 1000,
        input_rows=int(progress.numInputRows),
        end_offsets=ends,
    )


def all_progress(query: Any, topic: str) -> list[BatchProgress]:
    """Every progress report kept (``numRecentProgressUpdates``), one per batch id."""
    by_batch: dict[int, BatchProgress] = {}
    for progress in query.recentProgress:
        entry = batch_progress(progress, topic)
        if entry.input_rows or entry.batch_id not in by_batch:
            by_batch[entry.batch_id] = entry
    return [by_batch[b] for b in sorted(by_batch)]


def caught_up(latest: BatchProgress | None, log_end: dict[int, int]) -> bool:
    """Whether the query has read every partition up to ``log_end``."""
    if latest is None:
        return not any(log_end.values())
    return all(latest.end_offsets.get(p, 0) >= end for p, end in log_end.items())
