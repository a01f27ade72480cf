"""A Spark driver for the driver-restart test, run as its own process:

    python tests/spark_jobs/stream_to_parquet.py BOOTSTRAP TOPIC CHECKPOINT OUT MASTER \
        [OUT_TOPIC EOS_CHECKPOINT]

Streams ``TOPIC`` (``format("replog")``, 200 records per micro-batch) into a parquet table at
``OUT`` with ``Trigger.AvailableNow`` and ``CHECKPOINT``. With ``OUT_TOPIC``, a second
query in the same driver streams ``TOPIC`` into the replog topic ``OUT_TOPIC`` through the
``replog`` sink with ``deliveryGuarantee=exactlyOnce`` (checkpoint ``EOS_CHECKPOINT``, 200
records per micro-batch too):
each row's value is ``partition:offset`` of its input record, its key the input's key.
When both are done it reads the table back (through Spark, which reads only the files its
sink log committed) and prints one JSON line: ``{"rows": N, "distinct": D}`` (D: distinct
(partition, offset) pairs).
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    bootstrap, topic, checkpoint, out, master = sys.argv[1:6]
    out_topic, eos_checkpoint = (sys.argv[6:8] + [None, None])[:2]
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

    queries = [
        source(200)
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    ]
    if out_topic is not None:
        queries.append(
            source(200)
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
    for query in queries:
        query.awaitTermination()
    table = spark.read.parquet(out)
    rows = table.count()
    distinct = table.select("partition", "offset").distinct().count()
    print(json.dumps({"rows": rows, "distinct": distinct}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
