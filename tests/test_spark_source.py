"""The ``replog`` PySpark data source and sink against a real broker and a local Spark.

Spark tests share one SparkSession (fixtures/spark.py); each uses its own topics.
The offset planning core is tested directly, with Hypothesis.
"""

from __future__ import annotations

import threading
import uuid
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fixtures.spark import PRODUCER_TEST_CONFIG
from replog.spark.offsets import OffsetRange, limit_offsets, plan_ranges, split_ranges
from replog.spark.options import OffsetKind, OptionError, parse_offset_spec, parse_source_options

Record = tuple[str, int, int, bytes | None, bytes, tuple[tuple[str, bytes | None], ...]]


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, num_partitions=partitions)]).values():
        future.result(timeout=30)


def produce(
    bootstrap: str, topic: str, partitions: int, start: int, count: int, headers: bool = True
) -> list[Record]:
    """Produce ``count`` records round-robin over partitions; return what each became,
    ``(topic, partition, offset, key, value, headers)``, offsets from delivery reports."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_TEST_CONFIG})
    delivered: list[Record] = []
    errors: list[Any] = []

    for i in range(start, start + count):
        key = None if i % 7 == 0 else f"key-{i}".encode()
        hs = ((("h", f"{i}".encode()), ("empty", None)) if i % 2 else ()) if headers else ()

        def on_delivery(err: Any, msg: Any, key: Any = key, hs: Any = hs) -> None:
            if err is not None:
                errors.append(err)
            else:
                delivered.append((msg.topic(), msg.partition(), msg.offset(), key, msg.value(), hs))

        producer.produce(
            topic,
            key=key,
            value=f"value-{i}".encode(),
            partition=i % partitions,
            headers=list(hs) or None,
            on_delivery=on_delivery,
        )
    assert producer.flush(30) == 0
    assert not errors
    return delivered


def rows_as_records(rows: list[Any], headers: bool = True) -> list[Record]:
    out = []
    for r in rows:
        hs = tuple((h["key"], h["value"]) for h in r["headers"]) if headers else ()
        out.append((r["topic"], r["partition"], r["offset"], r["key"], r["value"], hs))
    return sorted(out, key=lambda rec: (rec[0], rec[1], rec[2]))


def reader(spark: Any, bootstrap: str, **options: str) -> Any:
    return spark.read.format("replog").option("bootstrap.servers", bootstrap).options(**options)


# ---------------------------------------------------------------------- batch reads


def test_batch_read_gives_exactly_the_topic_records(spark: Any, bootstrap_servers: str) -> None:
    topic = _topic("batch")
    create_topic(bootstrap_servers, topic, 3)
    produced = produce(bootstrap_servers, topic, 3, 0, 90)

    # No register() call: Spark finds the source through the pyspark_replog module.
    df = reader(spark, bootstrap_servers, subscribe=topic, includeHeaders="true").load()
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )
    rows = df.collect()
    assert rows_as_records(rows) == sorted(produced, key=lambda rec: (rec[0], rec[1], rec[2]))
    assert {r["timestampType"] for r in rows} == {0}  # CreateTime
    assert all(r["timestamp"] is not None for r in rows)
    assert df.rdd.getNumPartitions() == 3  # one input partition per topic-partition

    assert "headers" not in reader(spark, bootstrap_servers, subscribe=topic).load().columns


def test_starting_and_ending_offsets_json(spark: Any, bootstrap_servers: str) -> None:
    topic = _topic("range")
    create_topic(bootstrap_servers, topic, 3)
    produced = produce(bootstrap_servers, topic, 3, 0, 60)  # 20 per partition
    starting = f'{{"{topic}":{{"0":2,"1":-2,"2":5}}}}'
    ending = f'{{"{topic}":{{"0":5,"1":-1,"2":5}}}}'
    df = reader(
        spark,
        bootstrap_servers,
        assign=f'{{"{topic}":[0,1,2]}}',
        startingOffsets=starting,
        endingOffsets=ending,
        minPartitions="8",
        includeHeaders="true",
    ).load()
    expected = [
        r for r in produced if (r[1] == 0 and 2 <= r[2] < 5) or r[1] == 1
    ]  # partition 2: empty range 5..5
    assert rows_as_records(df.collect()) == sorted(expected, key=lambda rec: (rec[1], rec[2]))
    assert df.rdd.getNumPartitions() >= 8  # the ranges were cut up for minPartitions


def test_batch_read_starts_from_a_groups_committed_offsets(
    spark: Any, bootstrap_servers: str
) -> None:
    from confluent_kafka import TopicPartition

    from group_util import commit_offsets

    topic = _topic("committed")
    create_topic(bootstrap_servers, topic, 2)
    produced = produce(bootstrap_servers, topic, 2, 0, 20)  # 10 per partition
    group = f"spark-{topic}"
    commit_offsets(bootstrap_servers, group, [TopicPartition(topic, 0, 7)])
    df = reader(
        spark,
        bootstrap_servers,
        subscribe=topic,
        startingOffsets="committed",
        includeHeaders="true",
        **{"kafka.group.id": group},
    ).load()
    # Partition 0 from its commit; partition 1, never committed, from its earliest.
    expected = [r for r in produced if (r[1] == 0 and r[2] >= 7) or r[1] == 1]
    assert rows_as_records(df.collect()) == sorted(expected, key=lambda rec: (rec[1], rec[2]))


def test_batch_write_then_read_back(spark: Any, bootstrap_servers: str) -> None:
    from pyspark.sql import functions as F

    first, second = _topic("write-a"), _topic("write-b")
    create_topic(bootstrap_servers, first, 2)
    create_topic(bootstrap_servers, second, 1)
    source = spark.range(0, 200).select(
        F.when(F.col("id") % 4 == 0, F.lit(second)).otherwise(F.lit(first)).alias("topic"),
        F.concat(F.lit("k"), F.col("id").cast("string")).alias("key"),  # string key
        F.concat(F.lit("v"), F.col("id").cast("string")).cast("binary").alias("value"),
        F.when(F.col("id") % 4 == 0, F.lit(0))
        .otherwise((F.col("id") % 2).cast("int"))
        .alias("partition"),
        F.array(
            F.struct(
                F.lit("id").alias("key"), F.col("id").cast("string").cast("binary").alias("value")
            )
        ).alias("headers"),
    )
    (
        source.write.format("replog")
        .option("bootstrap.servers", bootstrap_servers)
        .option("kafka.batch.num.messages", "1")  # the Tansu quirk, see fixtures/spark.py
        .mode("append")
        .save()
    )
    back = reader(
        spark, bootstrap_servers, subscribePattern=f"({first}|{second})", includeHeaders="true"
    ).load()
    got = sorted(
        (r["topic"], r["partition"], r["key"], r["value"], r["headers"][0]["value"])
        for r in back.collect()
    )
    want = sorted(
        (
            second if i % 4 == 0 else first,
            0 if i % 4 == 0 else i % 2,
            f"k{i}".encode(),
            f"v{i}".encode(),
            f"{i}".encode(),
        )
        for i in range(200)
    )
    assert got == want


# ------------------------------------------------------------------------ streaming


def _parquet_records(spark: Any, path: Path) -> list[tuple[str, int, int, bytes]]:
    rows = spark.read.parquet(str(path)).select("topic", "partition", "offset", "value").collect()
    return sorted((r[0], r[1], r[2], r[3]) for r in rows)


def test_stream_to_parquet_exactly_once_across_restart(
    spark: Any, bootstrap_servers: str, tmp_path: Path
) -> None:
    prefix = _topic("stream")
    first, later = f"{prefix}-a", f"{prefix}-b"
    create_topic(bootstrap_servers, first, 3)
    produced = produce(bootstrap_servers, first, 3, 0, 60, headers=False)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def start() -> Any:
        stream = (
            spark.readStream.format("replog")
            .option("bootstrap.servers", bootstrap_servers)
            .option("subscribePattern", f"{prefix}-.*")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "25")
            .load()
        )
        return (
            stream.writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="100 milliseconds")
            .start()
        )

    query = start()
    try:
        writer = threading.Thread(
            target=lambda: produced.extend(produce(bootstrap_servers, first, 3, 60, 90, False))
        )
        writer.start()
        writer.join()
        # A topic created while the query runs is picked up through the pattern.
        create_topic(bootstrap_servers, later, 2)
        produced.extend(produce(bootstrap_servers, later, 2, 0, 20, headers=False))
        query.processAllAvailable()
        sizes = [p["numInputRows"] for p in query.recentProgress]
        assert sum(sizes) == 170
        assert max(sizes) <= 25  # maxOffsetsPerTrigger admission control
    finally:
        query.stop()

    produced.extend(produce(bootstrap_servers, first, 3, 150, 30, headers=False))
    produced.extend(produce(bootstrap_servers, later, 2, 20, 10, headers=False))
    query = start()  # resumes from the checkpointed offsets
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    want = sorted((r[0], r[1], r[2], r[4]) for r in produced)
    assert len(want) == 210
    assert _parquet_records(spark, out) == want


def test_stream_sink_copies_a_topic(spark: Any, bootstrap_servers: str, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    source_topic, sink_topic = _topic("copy-src"), _topic("copy-dst")
    create_topic(bootstrap_servers, source_topic, 2)
    create_topic(bootstrap_servers, sink_topic, 2)
    produced = produce(bootstrap_servers, source_topic, 2, 0, 50, headers=False)
    stream = (
        spark.readStream.format("replog")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("subscribe", source_topic)
        .option("startingOffsets", "earliest")
        .load()
        .select("key", F.upper(F.col("value").cast("string")).alias("value"), "partition")
    )
    query = (
        stream.writeStream.format("replog")
        .option("bootstrap.servers", bootstrap_servers)
        .option("topic", sink_topic)
        .option("kafka.batch.num.messages", "1")
        .option("deliveryGuarantee", "exactlyOnce")  # one transaction per task
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
        produced.extend(produce(bootstrap_servers, source_topic, 2, 50, 20, headers=False))
        query.processAllAvailable()  # a second micro-batch, the same transactional ids
    finally:
        query.stop()
    copied = reader(
        spark,
        bootstrap_servers,
        subscribe=sink_topic,
        **{"kafka.isolation.level": "read_committed"},
    )
    got = sorted((r["partition"], r["key"] or b"", r["value"]) for r in copied.load().collect())
    want = sorted((r[1], r[3] or b"", r[4].upper()) for r in produced)
    assert got == want  # every record exactly once


def test_stream_offsets_gone_backwards_is_data_loss(
    spark: Any, bootstrap_servers: str, tmp_path: Path
) -> None:
    topic = _topic("loss")
    create_topic(bootstrap_servers, topic, 1)
    produce(bootstrap_servers, topic, 1, 0, 5, headers=False)

    def run(fail_on_data_loss: str, name: str) -> Any:
        stream = (
            spark.readStream.format("replog")
            .option("bootstrap.servers", bootstrap_servers)
            .option("subscribe", topic)
            .option("startingOffsets", f'{{"{topic}":{{"0":1000}}}}')  # past the log end
            .option("failOnDataLoss", fail_on_data_loss)
            .load()
        )
        return (
            stream.writeStream.format("parquet")
            .option("path", str(tmp_path / name / "out"))
            .option("checkpointLocation", str(tmp_path / name / "checkpoint"))
            .start()
        )

    query = run("true", "strict")
    try:
        with pytest.raises(Exception, match="failOnDataLoss=false"):
            query.processAllAvailable()
    finally:
        query.stop()
    query = run("false", "lenient")
    try:
        query.processAllAvailable()  # skips ahead with a warning, then keeps reading
        produce(bootstrap_servers, topic, 1, 5, 3, headers=False)
        query.processAllAvailable()
    finally:
        query.stop()
    out = spark.read.parquet(str(tmp_path / "lenient" / "out")).select("offset").collect()
    assert sorted(r[0] for r in out) == [5, 6, 7]


def test_batch_range_beyond_the_log_end_is_data_loss(spark: Any, bootstrap_servers: str) -> None:
    topic = _topic("beyond")
    create_topic(bootstrap_servers, topic, 1)
    produce(bootstrap_servers, topic, 1, 0, 5, headers=False)
    options = {
        "subscribe": topic,
        "startingOffsets": f'{{"{topic}":{{"0":100}}}}',
        "endingOffsets": f'{{"{topic}":{{"0":105}}}}',
        # A broker may answer a fetch past the log end with no records rather than
        # OFFSET_OUT_OF_RANGE (Tansu does); then the loss shows after the poll timeout.
        "kafkaConsumer.pollTimeoutMs": "2000",
    }
    with pytest.raises(Exception, match="failOnDataLoss=false"):
        reader(spark, bootstrap_servers, **options).load().collect()
    lenient = reader(spark, bootstrap_servers, failOnDataLoss="false", **options).load()
    assert lenient.collect() == []


def test_unknown_topic_without_fail_on_data_loss_reads_nothing(
    spark: Any, bootstrap_servers: str
) -> None:
    df = reader(spark, bootstrap_servers, subscribe=_topic("absent"), failOnDataLoss="false")
    assert df.load().collect() == []


# ------------------------------------------------------- transactions: isolation levels


def _transactional(bootstrap: str, transactional_id: str) -> Any:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5}
    )
    producer.init_transactions(60)
    return producer


def _transaction(producer: Any, topic: str, values: list[bytes], commit: bool | None) -> None:
    """One transaction over partition 0: committed, aborted, or left open (``None``)."""
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value=value, partition=0)
    assert producer.flush(30) == 0  # in the log before the end (abort purges queued ones)
    if commit:
        producer.commit_transaction(60)
    elif commit is not None:
        producer.abort_transaction(60)


def _values(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(count)]


@pytest.fixture
def transactional_topic(bootstrap_servers: str) -> Any:
    """A one-partition topic holding plain records, a committed transaction, an aborted
    one, another committed one, then an open transaction followed by a plain record
    (markers leave gaps in the offsets). Yields (topic, what read_committed sees, what
    read_uncommitted sees, the open producer); the open transaction is aborted after."""
    topic = _topic("txn-read")
    create_topic(bootstrap_servers, topic, 1)
    produce(bootstrap_servers, topic, 1, 0, 4, headers=False)
    plain = [f"value-{i}".encode() for i in range(4)]
    committed = _transactional(bootstrap_servers, f"{topic}-a")
    _transaction(committed, topic, _values("c", 5), True)
    _transaction(committed, topic, _values("x", 3), False)
    _transaction(committed, topic, _values("d", 4), True)
    open_producer = _transactional(bootstrap_servers, f"{topic}-b")
    _transaction(open_producer, topic, _values("o", 3), None)
    produce(bootstrap_servers, topic, 1, 4, 1, headers=False)  # behind the open one
    stable = plain + _values("c", 5) + _values("d", 4)
    everything = stable[: 4 + 5] + _values("x", 3) + _values("d", 4) + _values("o", 3)
    everything.append(b"value-4")
    try:
        yield topic, stable, everything, open_producer
    finally:
        open_producer.abort_transaction(60)


def _read_values(spark: Any, bootstrap: str, topic: str, **options: str) -> list[bytes]:
    rows = reader(spark, bootstrap, subscribe=topic, **options).load().collect()
    return [bytes(r["value"]) for r in sorted(rows, key=lambda r: r["offset"])]


def test_batch_read_with_both_isolation_levels(
    spark: Any, bootstrap_servers: str, transactional_topic: Any
) -> None:
    topic, stable, everything, _ = transactional_topic
    # read_uncommitted (the default, as in Spark's Kafka source): aborted and open
    # transactions' records too, up to the high watermark; never a marker.
    assert _read_values(spark, bootstrap_servers, topic) == everything
    committed = {"kafka.isolation.level": "read_committed"}
    # read_committed: up to the last stable offset (the open transaction's first
    # offset), aborted records dropped; minPartitions cuts ranges that end on markers
    # and inside the aborted transaction: every record still comes once.
    assert _read_values(spark, bootstrap_servers, topic, **committed) == stable
    assert _read_values(spark, bootstrap_servers, topic, minPartitions="7", **committed) == stable


def test_stream_read_committed_waits_for_the_open_transaction(
    spark: Any, bootstrap_servers: str, transactional_topic: Any, tmp_path: Path
) -> None:
    topic, stable, everything, open_producer = transactional_topic

    def start(level: str) -> Any:
        stream = (
            spark.readStream.format("replog")
            .option("bootstrap.servers", bootstrap_servers)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("kafka.isolation.level", level)
            .option("maxOffsetsPerTrigger", "3")  # micro-batches ending on markers
            .load()
        )
        return (
            stream.writeStream.format("parquet")
            .option("path", str(tmp_path / level / "out"))
            .option("checkpointLocation", str(tmp_path / level / "checkpoint"))
            .start()
        )

    def values(level: str) -> list[bytes]:
        rows = spark.read.parquet(str(tmp_path / level / "out")).select("offset", "value")
        return [bytes(r[1]) for r in sorted(rows.collect())]

    committed, uncommitted = start("read_committed"), start("read_uncommitted")
    try:
        committed.processAllAvailable()
        uncommitted.processAllAvailable()
        assert values("read_committed") == stable
        assert values("read_uncommitted") == everything
        open_producer.commit_transaction(60)  # the open transaction and what follows it
        open_producer.begin_transaction()  # (the fixture aborts this empty one)
        committed.processAllAvailable()
        assert values("read_committed") == stable + _values("o", 3) + [b"value-4"]
    finally:
        committed.stop()
        uncommitted.stop()


def test_read_range_of_only_aborted_records_and_a_marker_yields_nothing(
    bootstrap_servers: str, transactional_topic: Any
) -> None:
    from replog.spark.consumer import ReadSettings, read_range

    topic = transactional_topic[0]
    settings = ReadSettings(bootstrap_servers, {}, True, False, 30_000, "read_committed")
    # Offsets: 0-3 plain, 4-8 committed, 9 marker, 10-12 aborted, 13 marker, 14-17 ...
    aborted = list(read_range(OffsetRange(topic, 0, 10, 14), settings))
    assert sum(b.num_rows for b in aborted) == 0
    tail = list(read_range(OffsetRange(topic, 0, 8, 14), settings))  # ends on a marker
    assert [v for b in tail for v in b.column("value").to_pylist()] == [b"c4"]


# ----------------------------------------------------------------------- bad options


@pytest.mark.parametrize(
    ("options", "option_named"),
    [
        ({"subscribe": "t"}, "bootstrap.servers"),
        ({"bootstrap.servers": "B", "subscribe": "t", "assign": '{"t":[0]}'}, "assign"),
        (
            {"bootstrap.servers": "B", "subscribe": "t", "startingOffsets": "{oops"},
            "startingOffsets",
        ),
        ({"bootstrap.servers": "B", "assign": '{"t": 0}'}, "assign"),
        ({"bootstrap.servers": "B", "subscribe": "no-such-topic-x"}, "subscribe"),
        (
            {"bootstrap.servers": "B", "subscribe": "t", "startingOffsets": "latest"},
            "startingOffsets",
        ),
    ],
)
def test_bad_read_options_fail_naming_the_option(
    spark: Any, bootstrap_servers: str, options: dict[str, str], option_named: str
) -> None:
    options = {k: bootstrap_servers if v == "B" else v for k, v in options.items()}
    with pytest.raises(Exception) as info:
        spark.read.format("replog").options(**options).load().collect()
    lines = [line for line in str(info.value).splitlines() if "OptionError:" in line]
    assert lines, str(info.value)
    assert f"'{option_named}'" in lines[0]


# -------------------------------------------------- the sink's task side, no Spark


def java_murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (the Java producer's default partitioner), as unsigned 32 bits."""
    m, length = 0x5BD1E995, len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = (int.from_bytes(data[i : i + 4], "little") * m) & 0xFFFFFFFF
        k = ((k ^ (k >> 24)) * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = data[whole:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h = ((h ^ tail[0]) * m) & 0xFFFFFFFF
    h = ((h ^ (h >> 13)) * m) & 0xFFFFFFFF
    return h ^ (h >> 15)


def test_java_murmur2_matches_kafkas_test_vectors() -> None:
    # Kafka's UtilsTest.testMurmur2, signed as Java prints them.
    for text, want in (("21", -973932308), ("foobar", -790332482), ("abc", 479470107)):
        got = java_murmur2(text.encode())
        assert got - (1 << 32) * (got >> 31) == want


def _read_topic(
    bootstrap: str, topic: str, partitions: int, isolation_level: str = "read_uncommitted"
) -> list[tuple[int, bytes | None, bytes]]:
    """Every record of the topic as (partition, key, value), in offset order per partition."""
    from confluent_kafka import Consumer, TopicPartition

    from replog.spark.consumer import ReadSettings, read_range

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        ends = [
            consumer.get_watermark_offsets(TopicPartition(topic, p), 30)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()
    settings = ReadSettings(bootstrap, {}, True, False, 30_000, isolation_level)
    out = []
    for p, end in enumerate(ends):
        for batch in read_range(OffsetRange(topic, p, 0, end), settings):
            out.extend(
                (p, row["key"], row["value"]) for row in batch.select(["key", "value"]).to_pylist()
            )
    return out


def test_sink_places_keys_as_kafkas_partitioner_in_row_order(bootstrap_servers: str) -> None:
    import pyarrow as pa

    from replog.spark.producer import WriteSettings, write_batches

    topic = _topic("murmur2")
    create_topic(bootstrap_servers, topic, 3)
    keys = [
        None if i % 10 == 0 else f"key-{i}" for i in range(300)
    ]  # string keys, as Spark may pass
    values = [f"v{i}".encode() for i in range(300)]
    batches = [
        pa.record_batch(
            {"key": pa.array(keys[a : a + 100]), "value": pa.array(values[a : a + 100])}
        )
        for a in range(0, 300, 100)
    ]
    # A queue of 64 messages: runs of 100 rows go in chunks, each waiting for room.
    settings = WriteSettings(bootstrap_servers, topic, {"queue.buffering.max.messages": "64"})
    assert write_batches(batches, settings) == 300
    got = _read_topic(bootstrap_servers, topic, 3)
    assert sorted(v for _, _, v in got) == sorted(values)  # each row once
    for p, key, _ in got:
        if key is not None:
            assert p == (java_murmur2(key) & 0x7FFFFFFF) % 3, key
    for p in range(3):  # row order within each partition
        ids = [int(v[1:]) for q, _, v in got if q == p]
        assert ids == sorted(ids)


def test_sink_task_fails_when_a_record_is_not_delivered(bootstrap_servers: str) -> None:
    import pyarrow as pa

    from replog.spark.producer import DeliveryError, WriteSettings, write_batches

    topic = _topic("undeliverable")
    create_topic(bootstrap_servers, topic, 1)
    batch = pa.record_batch(
        {"value": pa.array([b"a", b"b", b"c"]), "partition": pa.array([0, 7, 0], pa.int32())}
    )
    with pytest.raises(DeliveryError, match="1 of 3 records failed delivery"):
        write_batches([batch], WriteSettings(bootstrap_servers, topic, {}))


def _eos_batches(prefix: str, count: int, rows_per_batch: int = 50) -> list[Any]:
    import pyarrow as pa

    values = [f"{prefix}{i}".encode() for i in range(count)]
    return [
        pa.record_batch({"value": pa.array(values[a : a + rows_per_batch], pa.binary())})
        for a in range(0, count, rows_per_batch)
    ]


def _committed_values(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    return sorted(v for _, _, v in _read_topic(bootstrap, topic, partitions, "read_committed"))


def test_exactly_once_task_writes_a_batch_once(bootstrap_servers: str) -> None:
    """A task of a batch already committed for its partition (a replay after a driver
    crash, or a retry of a task that committed) writes nothing; the next batch writes."""
    from replog.spark.exactly_once import TaskTransaction, write_batches_exactly_once
    from replog.spark.producer import WriteSettings

    topic = _topic("eos-task")
    create_topic(bootstrap_servers, topic, 2)
    # Small batches: several produce requests in flight as a transaction starts on a
    # partition (the broker verifies the first with the coordinator, KIP-890, and must
    # not let the later ones overtake it).
    settings = WriteSettings(bootstrap_servers, topic, {"batch.num.messages": "10"}, "test-")
    query = uuid.uuid4().hex
    first = write_batches_exactly_once(
        _eos_batches("a", 120), settings, TaskTransaction(query, 3, 0)
    )
    assert (first.records, first.replayed) == (120, False)
    assert first.transactional_id == f"test-{query}-0"
    again = write_batches_exactly_once(
        _eos_batches("a", 120), settings, TaskTransaction(query, 3, 0)
    )
    assert (again.records, again.replayed) == (0, True)
    older = write_batches_exactly_once(_eos_batches("z", 5), settings, TaskTransaction(query, 2, 0))
    assert older.replayed
    # Another Spark partition of the same batch has its own transactional id and record.
    other = write_batches_exactly_once(
        _eos_batches("b", 30), settings, TaskTransaction(query, 3, 1)
    )
    assert (other.records, other.replayed) == (30, False)
    nxt = write_batches_exactly_once(_eos_batches("c", 10), settings, TaskTransaction(query, 4, 0))
    assert (nxt.records, nxt.replayed) == (10, False)
    empty = write_batches_exactly_once([], settings, TaskTransaction(query, 5, 0))
    assert (empty.records, empty.transactional_id) == (0, None)  # no transaction at all
    want = sorted(_values("a", 120) + _values("b", 30) + _values("c", 10))
    assert _committed_values(bootstrap_servers, topic, 2) == want
    assert sorted(v for _, _, v in _read_topic(bootstrap_servers, topic, 2)) == want


def test_exactly_once_task_fences_a_dead_attempts_open_transaction(bootstrap_servers: str) -> None:
    """A task attempt that died with its transaction open (its executor or driver was
    killed) is fenced by the next attempt, its rows aborted, never read committed."""
    from confluent_kafka import KafkaException

    from replog.spark.exactly_once import (
        TaskTransaction,
        transactional_id,
        write_batches_exactly_once,
    )
    from replog.spark.producer import WriteSettings

    topic = _topic("eos-zombie")
    create_topic(bootstrap_servers, topic, 1)
    settings = WriteSettings(bootstrap_servers, topic, {}, "test-")
    query = uuid.uuid4().hex
    zombie = _transactional(bootstrap_servers, transactional_id("test-", query, 0))
    _transaction(zombie, topic, _values("a", 40), None)  # written, never committed
    outcome = write_batches_exactly_once(
        _eos_batches("a", 40), settings, TaskTransaction(query, 0, 0)
    )
    assert (outcome.records, outcome.replayed) == (40, False)
    with pytest.raises(KafkaException, match="(?i)fenced"):
        zombie.commit_transaction(30)
    assert _committed_values(bootstrap_servers, topic, 1) == sorted(_values("a", 40))
    # The dead attempt's rows are in the log, aborted: read_uncommitted shows them twice.
    everything = sorted(v for _, _, v in _read_topic(bootstrap_servers, topic, 1))
    assert everything == sorted(_values("a", 40) * 2)


def test_exactly_once_speculative_copy_fences_the_first_attempt(bootstrap_servers: str) -> None:
    """Two attempts of one task at once (speculation): the later one's InitProducerId
    fences the earlier, which fails; the rows are committed once."""
    from replog.spark.exactly_once import TaskTransaction, write_batches_exactly_once
    from replog.spark.producer import WriteSettings

    topic = _topic("eos-speculative")
    create_topic(bootstrap_servers, topic, 1)
    settings = WriteSettings(bootstrap_servers, topic, {}, "test-")
    task = TaskTransaction(uuid.uuid4().hex, 7, 0)
    batches = _eos_batches("s", 200)
    first_started, second_done = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def slow_rows() -> Any:
        yield batches[0]
        first_started.set()
        assert second_done.wait(120)
        yield from batches[1:]

    def first_attempt() -> None:
        try:
            write_batches_exactly_once(slow_rows(), settings, task)
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            errors.append(exc)

    thread = threading.Thread(target=first_attempt)
    thread.start()
    try:
        assert first_started.wait(120)
        second = write_batches_exactly_once(batches, settings, task)
    finally:
        second_done.set()
        thread.join(180)
    assert (second.records, second.replayed) == (200, False)
    assert len(errors) == 1 and "fenced" in str(errors[0]).lower(), errors
    assert _committed_values(bootstrap_servers, topic, 1) == sorted(_values("s", 200))


sink_rows = st.lists(
    st.tuples(st.sampled_from(["a", "b"]), st.sampled_from([None, 0, 1])), max_size=40
)


@given(sink_rows, st.booleans())
def test_plan_runs_keep_every_partitions_row_order(
    rows: list[tuple[str, int | None]], with_partition_column: bool
) -> None:
    import pyarrow as pa

    from replog.spark.producer import UNASSIGNED, plan_runs

    columns = {
        "topic": pa.array([t for t, _ in rows], pa.string()),
        "value": pa.array(list(range(len(rows))), pa.int64()),  # the row's index
    }
    if with_partition_column:
        columns["partition"] = pa.array([p for _, p in rows], pa.int32())
    runs = list(plan_runs(pa.record_batch(columns), None))
    sent = [
        (run.topic, run.partition, i) for run in runs for i in run.rows.column("value").to_pylist()
    ]
    assert sorted(i for _, _, i in sent) == list(range(len(rows)))  # every row exactly once
    for topic, partition, i in sent:
        want = rows[i][1] if with_partition_column else None
        assert (topic, partition) == (rows[i][0], UNASSIGNED if want is None else want)
    # Rows that may land in one partition (named it, or left it to the partitioner) are
    # sent in row order.
    for topic in ("a", "b"):
        for p in (0, 1):
            order = [i for t, q, i in sent if t == topic and q in (p, UNASSIGNED)]
            assert order == sorted(order)


def test_write_without_topic_fails_naming_the_option(spark: Any, bootstrap_servers: str) -> None:
    df = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(Exception, match="option 'topic'"):
        df.write.format("replog").option("bootstrap.servers", bootstrap_servers).mode(
            "append"
        ).save()


# -------------------------------------------------------------- pure offset planning


def test_isolation_level_and_delivery_guarantee_options() -> None:
    from replog.spark.options import DeliveryGuarantee, IsolationLevel, parse_sink_options

    base = {"bootstrap.servers": "b", "subscribe": "t"}
    assert parse_source_options(base, streaming=True).isolation_level is (
        IsolationLevel.READ_UNCOMMITTED
    )
    committed = parse_source_options(
        {**base, "kafka.isolation.level": "READ_COMMITTED"}, streaming=False
    )
    assert committed.isolation_level is IsolationLevel.READ_COMMITTED
    with pytest.raises(OptionError, match="'kafka.isolation.level'"):
        parse_source_options({**base, "kafka.isolation.level": "serializable"}, streaming=False)

    sink = {"bootstrap.servers": "b", "topic": "t"}
    plain = parse_sink_options(sink)
    assert plain.delivery_guarantee is DeliveryGuarantee.AT_LEAST_ONCE
    for spelling in ("exactlyOnce", "EXACTLY_ONCE", "exactly-once"):
        eos = parse_sink_options({**sink, "deliveryGuarantee": spelling})
        assert eos.delivery_guarantee is DeliveryGuarantee.EXACTLY_ONCE
        assert eos.transactional_id_prefix == "spark-replog-"
    prefixed = parse_sink_options(
        {**sink, "deliveryGuarantee": "exactlyOnce", "transactionalIdPrefix": "etl-"}
    )
    assert prefixed.transactional_id_prefix == "etl-"
    bad = [
        ({"deliveryGuarantee": "twice"}, "'deliveryGuarantee'"),
        ({"transactionalIdPrefix": "etl-"}, "'transactionalIdPrefix'"),
        (
            {"deliveryGuarantee": "exactlyOnce", "transactionalIdPrefix": " "},
            "'transactionalIdPrefix'",
        ),
        ({"kafka.transactional.id": "mine"}, "'kafka.transactional.id'"),
    ]
    for options, named in bad:
        with pytest.raises(OptionError, match=named):
            parse_sink_options({**sink, **options})


def test_offset_json_and_limits_are_checked() -> None:
    spec = parse_offset_spec(
        {"startingoffsets": '{"t":{"0":23,"1":-2}}'}, "startingOffsets", OffsetKind.LATEST
    )
    assert spec.kind is OffsetKind.SPECIFIC and dict(spec.offsets) == {("t", 0): 23, ("t", 1): -2}
    with pytest.raises(OptionError, match="'startingOffsets'"):
        parse_offset_spec(
            {"startingoffsets": '{"t":{"x":1}}'}, "startingOffsets", OffsetKind.LATEST
        )
    with pytest.raises(OptionError, match="kafka.group.id"):
        parse_offset_spec({"startingoffsets": "committed"}, "startingOffsets", OffsetKind.LATEST)
    with pytest.raises(OptionError, match="'endingOffsets'"):
        parse_offset_spec(
            {"endingoffsets": "committed", "kafka.group.id": "g"},
            "endingOffsets",
            OffsetKind.LATEST,
        )
    with pytest.raises(OptionError, match="group.id"):  # only with startingOffsets=committed
        parse_source_options(
            {"bootstrap.servers": "b", "subscribe": "t", "kafka.group.id": "g"}, streaming=False
        )
    opts = parse_source_options(
        {
            "bootstrap.servers": "b",
            "subscribe": "t",
            "startingOffsets": "committed",
            "kafka.group.id": "g",
        },
        streaming=True,
    )
    assert opts.group_id == "g" and "group.id" not in opts.client_config
    with pytest.raises(OptionError, match="'maxOffsetsPerTrigger'"):
        parse_source_options(
            {"bootstrap.servers": "b", "subscribe": "t", "maxOffsetsPerTrigger": "0"},
            streaming=True,
        )


offset_maps = st.dictionaries(
    st.tuples(st.sampled_from("abc"), st.integers(0, 3)), st.integers(0, 1000), min_size=1
)


@given(offset_maps, st.data(), st.integers(1, 3000))
def test_limit_admits_exactly_min_of_limit_and_backlog(
    start: dict[tuple[str, int], int], data: st.DataObject, limit: int
) -> None:
    latest = {tp: off + data.draw(st.integers(0, 500)) for tp, off in start.items()}
    end = limit_offsets(start, latest, limit)
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in start)
    backlog = sum(latest[tp] - start[tp] for tp in start)
    assert sum(end[tp] - start[tp] for tp in start) == min(limit, backlog)


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(1, 1000)), min_size=1, max_size=5),
    st.integers(1, 40),
)
def test_split_ranges_cover_each_range_exactly(spans: list[tuple[int, int]], minimum: int) -> None:
    ranges = [OffsetRange("t", p, lo, lo + n) for p, (lo, n) in enumerate(spans)]
    pieces = split_ranges(ranges, minimum)
    assert len(pieces) >= min(minimum, len(ranges))
    for r in ranges:
        mine = sorted(p for p in pieces if p.partition == r.partition)
        assert mine[0].from_offset == r.from_offset and mine[-1].until_offset == r.until_offset
        assert all(a.until_offset == b.from_offset for a, b in pairwise(mine))
        assert all(p.size > 0 for p in mine)


def test_plan_ranges_reports_data_loss() -> None:
    start = {("t", 0): 10, ("t", 1): 50, ("gone", 0): 3}
    end = {("t", 0): 20, ("t", 1): 5, ("t", 2): 9}
    ranges, losses = plan_ranges(start, end, {("t", 2): 4})
    assert ranges == [OffsetRange("t", 0, 10, 20), OffsetRange("t", 2, 4, 9)]
    assert len(losses) == 3
    assert any("gone-0 is gone" in m for m in losses)
    assert any("t-1 went back" in m for m in losses)
    assert any("t-2 starts at offset 4" in m for m in losses)
