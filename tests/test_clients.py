"""Real clients against one real broker process: every codec, keys, headers, timestamps.

The module writes a little over 100,000 records: the bulk with confluent-kafka (one
topic per compression codec), smaller rounds with kafka-python, aiokafka and kcat.
Then the broker is stopped (SIGTERM) and started again, and every topic is read
back from the beginning by confluent-kafka and by at least one other client. Each
read must give exactly what the producers were told was written: offsets dense
from 0 per partition, and keys, values, headers and CreateTime timestamps as sent.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import pytest

from clients_util import (
    Rec,
    assert_dense,
    assert_same_records,
    consume_aiokafka,
    consume_confluent,
    consume_kafka_python,
    consume_kcat,
    create_topic,
    end_offsets,
    log_lines,
    make_records,
    partition_dir,
    produce_aiokafka,
    produce_confluent,
    produce_kafka_python,
    produce_kcat,
    wait_for_leaders,
    watermarks,
)
from replog.cluster.launcher import LocalCluster
from replog.protocol.records import iter_batches

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PARTITIONS = 3
PER_CODEC = 19_000  # 5 x 19,000 through confluent-kafka
SMALL_ROUND = 1_500  # per producer and codec for kafka-python and aiokafka
KCAT_PER_PARTITION = 500
HOUR_MS = 3_600_000


@dataclass
class Written:
    """What the producers were told: topic -> acked records (offsets filled in)."""

    records: dict[str, list[Rec]]
    kcat_time_range: tuple[int, int]  # kcat sets no timestamps: CreateTime falls in here


def _kcat_records() -> list[Rec]:
    """What kcat was given, with offsets in input order and no timestamps yet."""
    out = []
    for partition in range(2):
        for i in range(KCAT_PER_PARTITION):
            out.append(
                Rec(
                    partition,
                    i,
                    f"kcat-key-{partition}-{i}".encode(),
                    f"kcat:{partition}:{i}:payload".encode(),
                    (("origin", b"kcat"), ("run", b"1")),
                    -1,
                )
            )
    return out


@pytest.fixture(scope="module")
def written(replog_broker: LocalCluster) -> Written:
    bootstrap = replog_broker.bootstrap_servers()
    records: dict[str, list[Rec]] = {}
    ts_base = int(time.time() * 1000) - HOUR_MS  # CreateTime an hour back: not the append time

    for n, codec in enumerate(CODECS):
        topic = f"clients-{codec}"
        create_topic(bootstrap, topic, PARTITIONS)
        sent = make_records(f"cf-{codec}", PER_CODEC, PARTITIONS, ts_base + n * PER_CODEC)
        records[topic] = produce_confluent(bootstrap, topic, sent, **{"compression.type": codec})

    topic = "clients-kafka-python"
    create_topic(bootstrap, topic, PARTITIONS)
    records[topic] = []
    for n, codec in enumerate(("gzip", "zstd")):
        sent = make_records(
            f"kp-{codec}",
            SMALL_ROUND,
            PARTITIONS,
            ts_base + 10 * n * SMALL_ROUND,
            null_headers=False,
        )
        records[topic] += produce_kafka_python(bootstrap, topic, sent, compression_type=codec)

    topic = "clients-aiokafka"
    create_topic(bootstrap, topic, PARTITIONS)
    records[topic] = []
    for n, codec in enumerate(("snappy", "lz4")):
        sent = make_records(
            f"aio-{codec}",
            SMALL_ROUND,
            PARTITIONS,
            ts_base + 10 * n * SMALL_ROUND,
            null_headers=False,
        )
        records[topic] += produce_aiokafka(bootstrap, topic, sent, compression_type=codec)

    topic = "clients-kcat"
    create_topic(bootstrap, topic, 2)
    before = int(time.time() * 1000)
    expected_kcat = _kcat_records()
    for partition, extra in ((0, ["-X", "compression.codec=zstd"]), (1, ["-z", "gzip"])):
        lines = [
            (r.key.decode(), r.value.decode())  # type: ignore[union-attr]
            for r in expected_kcat
            if r.partition == partition
        ]
        produce_kcat(bootstrap, topic, partition, lines, [("origin", "kcat"), ("run", "1")], extra)
    after = int(time.time() * 1000)
    records[topic] = expected_kcat

    total = sum(len(v) for v in records.values())
    assert total >= 100_000, total
    for topic, recs in records.items():
        assert_dense(recs, f"offsets acked for {topic}")

    # Restart between producing and consuming: nothing may be lost.
    replog_broker.stop_broker(0)
    assert replog_broker.broker_pid(0) is not None
    replog_broker.start_broker(0)
    wait_for_leaders(
        bootstrap, {t: len(end_offsets(recs)) for t, recs in records.items()}, timeout_s=60
    )
    return Written(records, (before, after))


def _check_kcat_written(read: list[Rec], written: Written, what: str) -> None:
    """kcat-produced records: timestamps only known to be CreateTime within the run."""
    lo, hi = written.kcat_time_range
    for rec in read:
        assert lo <= rec.timestamp <= hi, f"{what}: timestamp {rec.timestamp} outside [{lo}, {hi}]"
    stamped = {(r.partition, r.offset): r.timestamp for r in read}
    expected = [
        replace(r, timestamp=stamped.get((r.partition, r.offset), -1))
        for r in written.records["clients-kcat"]
    ]
    assert_same_records(read, expected, what)


def _check(read: list[Rec], written: Written, topic: str, client: str) -> None:
    what = f"{client} reading {topic} after a restart"
    if topic == "clients-kcat":
        _check_kcat_written(read, written, what)
    else:
        assert_same_records(read, written.records[topic], what)


ALL_TOPICS = [f"clients-{c}" for c in CODECS] + [
    "clients-kafka-python",
    "clients-aiokafka",
    "clients-kcat",
]


def test_restart_was_clean(replog_broker: LocalCluster, written: Written) -> None:
    broker_dir = replog_broker.broker_dir(0)
    assert log_lines(broker_dir, r"stopped cleanly"), "the SIGTERM'd broker did not stop cleanly"
    assert log_lines(broker_dir, r"loaded \d+ log\(s\) from .* \(clean shutdown\)")


@pytest.mark.parametrize("topic", ALL_TOPICS)
def test_watermarks_after_restart(
    replog_broker: LocalCluster, written: Written, topic: str
) -> None:
    bootstrap = replog_broker.bootstrap_servers()
    for partition, end in end_offsets(written.records[topic]).items():
        assert watermarks(bootstrap, topic, partition) == (0, end)


@pytest.mark.parametrize("topic", ALL_TOPICS)
def test_confluent_reads_back(replog_broker: LocalCluster, written: Written, topic: str) -> None:
    bootstrap = replog_broker.bootstrap_servers()
    read = consume_confluent(bootstrap, topic, end_offsets(written.records[topic]))
    _check(read, written, topic, "confluent-kafka")


@pytest.mark.parametrize("topic", ["clients-gzip", "clients-zstd", "clients-aiokafka"])
def test_kafka_python_reads_back(replog_broker: LocalCluster, written: Written, topic: str) -> None:
    bootstrap = replog_broker.bootstrap_servers()
    read = consume_kafka_python(bootstrap, topic, end_offsets(written.records[topic]))
    _check(read, written, topic, "kafka-python")


@pytest.mark.parametrize("topic", ["clients-lz4", "clients-kafka-python", "clients-kcat"])
def test_aiokafka_reads_back(replog_broker: LocalCluster, written: Written, topic: str) -> None:
    bootstrap = replog_broker.bootstrap_servers()
    read = consume_aiokafka(bootstrap, topic, end_offsets(written.records[topic]))
    _check(read, written, topic, "aiokafka")


@pytest.mark.parametrize("topic", ["clients-snappy", "clients-none", "clients-kcat"])
def test_kcat_reads_back(replog_broker: LocalCluster, written: Written, topic: str) -> None:
    bootstrap = replog_broker.bootstrap_servers()
    read = consume_kcat(bootstrap, topic, end_offsets(written.records[topic]))
    _check(read, written, topic, "kcat")


def _producer_ids_on_disk(cluster: LocalCluster, topic: str, partition: int) -> list[tuple]:
    """``(producer_id, producer_epoch, base_sequence, base_offset, count)`` of every stored batch."""
    directory = partition_dir(cluster.broker_dir(0), topic, partition)
    out = []
    for path in sorted(directory.glob("*.log")):
        for _, h in iter_batches(path.read_bytes()):
            out.append(
                (h.producer_id, h.producer_epoch, h.base_sequence, h.base_offset, h.record_count)
            )
    return out


def test_idempotent_producers(replog_broker: LocalCluster) -> None:
    """enable.idempotence: the broker hands out producer ids and stores sequences as sent."""
    bootstrap = replog_broker.bootstrap_servers()
    topic = "clients-idempotent"
    create_topic(bootstrap, topic, 2)
    ts_base = int(time.time() * 1000)
    sent = make_records("idem", 4_000, 2, ts_base)
    acked = produce_confluent(
        bootstrap,
        topic,
        sent,
        **{"enable.idempotence": True, "acks": "all", "compression.type": "lz4"},
    )
    more = make_records("idem-aio", 1_000, 2, ts_base + 10_000, null_headers=False)
    acked += produce_aiokafka(bootstrap, topic, more, enable_idempotence=True, acks="all")
    assert_dense(acked, "idempotent producers' acks")
    read = consume_confluent(bootstrap, topic, end_offsets(acked))
    assert_same_records(read, acked, "reading the idempotent producers' topic")

    for partition in range(2):
        batches = _producer_ids_on_disk(replog_broker, topic, partition)
        assert batches, f"no batches on disk for {topic}-{partition}"
        pids = []
        for pid, epoch, base_sequence, base_offset, count in batches:
            assert pid >= 0 and epoch >= 0, f"batch at {base_offset} has no producer id"
            if not pids or pids[-1][0] != pid:
                pids.append((pid, base_offset))
            # One producer per run, each starting at sequence 0 in this partition.
            first_offset = [o for p, o in pids if p == pid][0]
            assert base_sequence == base_offset - first_offset, (
                f"{topic}-{partition}: batch at {base_offset} has sequence {base_sequence}"
            )
            assert count >= 1
        assert len(pids) == 2, f"expected two producer ids in order, got {pids}"
        assert pids[0][0] != pids[1][0]
