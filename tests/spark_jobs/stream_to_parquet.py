"""A Spark driver for the driver-restart test, run as its own process:

    python tests/spark_jobs/stream_to_parquet.py BOOTSTRAP TOPIC CHECKPOINT OUT MASTER \
        [OUT_TOPIC EOS_CHECKPOINT] [--parquet-after-first-eos-batch]

Streams ``TOPIC`` (``format("replog")``, 200 records per micro-batch) into a parquet table at
``OUT`` with ``Trigger.AvailableNow`` and ``CHECKPOINT``. With ``OUT_TOPIC``, a second
query in the same driver streams ``TOPIC`` into the replog topic ``OUT_TOPIC`` through the
``replog`` sink with ``deliveryGuarantee=exactlyOnce`` (checkpoint ``EOS_CHECKPOINT``, 50
records per micro-batch: after its first, each takes about a second whatever its size,
the tasks' transactions' cost): each row's value is ``partition:offset`` of its input
record, its key the input's key.

``--parquet-after-first-eos-batch`` starts the parquet query only once the exactly-once
query has run its first micro-batch (the slow one: its tasks' first transactions), so that
neither has finished when the parquet query has committed one batch: started together,
the parquet query ran five of its six micro-batches during the other's first (make test,
load 12). Started after it, the parquet query's first batch (6-8 s, its start included)
let the exactly-once query run 3-4 more batches (of 100 records then, 12 in all): 23 more
batches of 50 leave it a margin of 5 or more.

When both are done it reads the table back (through Spark, which reads only the files its
sink log committed) and prints one JSON line: ``{"rows": N, "distinct": D}`` (D: distinct
(partition, offset) pairs).
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    flag = "--parquet-after-first-eos-batch"
    args = [a for a in sys.argv[1:] if a != flag]
    parquet_after_eos = flag in sys.argv[1:]
    bootstrap, topic, checkpoint, out, master = args[:5]
    out_topic, eos_checkpoint = (args[5:7] + [None, None])[:2]
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from replog.cluster.spark_cluster import session_settings

    builder = SparkSession.builder.master(master).appName("replog-driver-restart")
    for key, value in session_settings(master).items():
        builder = builder.config(key, value)
    spark = (
        builder.config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")

    def source(per_trigger: int):  # type: ignore[no-untyped-def]
        return (
            spark.readStream.format("replog")
            .option("bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(per_trigger))
            .load()
        )

    def parquet_query():  # type: ignore[no-untyped-def]
        return (
            source(200)
            .writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )

    queries = []
    if out_topic is None or not parquet_after_eos:
        queries.append(parquet_query())
    if out_topic is not None:
        eos = (
            source(50)
            .select(
                "key",
                F.concat_ws(":", F.col("partition"), F.col("offset")).alias("value"),
            )
            .writeStream.format("replog")
            .option("bootstrap.servers", bootstrap)
            .option("topic", out_topic)
            .option("deliveryGuarantee", "exactlyOnce")
            .option("checkpointLocation", eos_checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        queries.append(eos)
        if parquet_after_eos:
            # lastProgress is reported once a micro-batch is done (committed)
            while eos.lastProgress is None and not eos.awaitTermination(0.2):
                pass
            queries.append(parquet_query())
    for query in queries:
        query.awaitTermination()
    table = spark.read.parquet(out)
    # one job for both figures
    counts = table.agg(
        F.count(F.lit(1)).alias("rows"), F.countDistinct("partition", "offset").alias("distinct")
    ).first()
    print(json.dumps({"rows": counts["rows"], "distinct": counts["distinct"]}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
