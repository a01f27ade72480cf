"""Retention, segment files and ListOffsets against a real broker process.

The broker checks retention every 100 ms and flushes (writing index files) every
second, so the tests can watch segments go and ListOffsets follow. Waits are
polls with a deadline on what the broker leaves on disk or answers.
"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_END, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition

from clients_util import (
    SEGMENT_FILE,
    Rec,
    consume_confluent,
    consumer_confluent,
    create_topic,
    log_lines,
    partition_dir,
    produce_confluent,
    segment_bases,
    wait_for,
    watermarks,
)
from fixtures.cluster import INTERNAL_TOPICS
from replog.cluster.launcher import LocalCluster
from replog.storage.checkpoints import OffsetCheckpointFile

SEGMENT_BYTES = 8192
HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def broker(zookeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path_factory.mktemp("retention"))
    try:
        cluster.up(
            1,
            zookeeper=f"{zookeeper.connect}/replog-{uuid.uuid4().hex[:8]}",
            overrides={
                **INTERNAL_TOPICS,
                "log.retention.check.interval.ms": "100",
                "log.flush.offset.checkpoint.interval.ms": "1000",
            },
        )
        yield cluster
    finally:
        cluster.down()


def _round(tag: str, index: int, count: int, ts: int) -> list[Rec]:
    """``count`` records of ~150 bytes, one producer flush: about one segment's worth."""
    return [
        Rec(
            0,
            -1,
            f"{tag}-{index}-{i}".encode(),
            f"{tag}-{index}-{i}:".encode() + b"x" * 120,
            (),
            ts,
        )
        for i in range(count)
    ]


def _sizes(directory: Path) -> list[tuple[int, int]] | None:
    """``(base, size)`` of each ``.log`` file, or None if a file vanished while looking."""
    try:
        out = []
        for path in directory.iterdir():
            m = SEGMENT_FILE.match(path.name)
            if m and m.group(2) == "log":
                out.append((int(m.group(1)), path.stat().st_size))
        return sorted(out)
    except FileNotFoundError:
        return None


def _read_from_start(bootstrap: str, topic: str) -> tuple[int, int, list[Rec]]:
    start, end = watermarks(bootstrap, topic, 0)
    read = consume_confluent(bootstrap, topic, {0: end}) if end > start else []
    return start, end, read


def test_retention_bytes_deletes_oldest_segments(broker: LocalCluster) -> None:
    bootstrap = broker.bootstrap_servers()
    topic = "retention-bytes"
    retention_bytes = 4 * SEGMENT_BYTES
    create_topic(
        bootstrap,
        topic,
        1,
        {"segment.bytes": str(SEGMENT_BYTES), "retention.bytes": str(retention_bytes)},
    )
    directory = partition_dir(broker.broker_dir(0), topic, 0)
    sent: list[Rec] = []
    starts: list[int] = []
    for index in range(10):
        batch = _round("bytes", index, 40, int(time.time() * 1000))
        sent += produce_confluent(bootstrap, topic, batch, **{"linger.ms": 0})

        def settled() -> list[tuple[int, int]] | None:
            files = _sizes(directory)
            if not files:
                return None
            total = sum(size for _, size in files)
            # Retention deletes the oldest segment while the rest still exceeds the limit.
            return files if total - files[0][1] < retention_bytes else None

        files = wait_for(settled, 30, f"retention.bytes to settle after round {index}")
        start, end, read = _read_from_start(bootstrap, topic)
        assert start == files[0][0], f"log start {start} is not the first segment {files}"
        assert end == len(sent)
        assert [r.offset for r in read] == list(range(start, end))
        assert read == sent[start:end]
        assert not starts or start >= starts[-1], "the log start offset went backwards"
        starts.append(start)
    assert starts[-1] > 0, "retention.bytes never deleted a segment"
    assert len(set(starts)) > 2, f"the log start moved only {sorted(set(starts))}"
    deleted = log_lines(broker.broker_dir(0), rf"{topic}-0: deleted \d+ old segment")
    assert deleted, "no retention log line"
    # Whole segments only: every log start offset the broker reported was a segment base.
    reported = [int(line.rsplit(" ", 1)[1]) for line in deleted]
    assert reported == sorted(reported)
    assert set(starts) - {0} <= set(reported)


def test_retention_ms_deletes_expired_segments(broker: LocalCluster) -> None:
    bootstrap = broker.bootstrap_servers()
    topic = "retention-ms"
    create_topic(
        bootstrap,
        topic,
        1,
        {"segment.bytes": str(SEGMENT_BYTES), "retention.ms": str(10 * 60 * 1000)},
    )
    directory = partition_dir(broker.broker_dir(0), topic, 0)
    old_ts = int(time.time() * 1000) - HOUR_MS
    sent: list[Rec] = []
    for index in range(6):  # an hour old: past retention.ms as soon as a check runs
        sent += produce_confluent(
            bootstrap, topic, _round("old", index, 40, old_ts + index), **{"linger.ms": 0}
        )
    first_new = len(sent)
    for index in range(3):
        now = int(time.time() * 1000)
        sent += produce_confluent(
            bootstrap, topic, _round("new", index, 40, now), **{"linger.ms": 0}
        )

    def settled() -> int | None:
        bases = segment_bases(broker.broker_dir(0), topic, 0) if directory.exists() else []
        # Done when the first segment left holds a fresh record: all it keeps are
        # segments whose newest record is within retention.
        if bases and bases[0] <= first_new and (len(bases) == 1 or bases[1] > first_new):
            return bases[0] if bases[0] > 0 else None
        return None

    first_base = wait_for(settled, 30, "expired segments to be deleted")
    start, end, read = _read_from_start(bootstrap, topic)
    assert start == first_base
    assert end == len(sent)
    assert read == sent[start:end]
    assert all(r.timestamp == old_ts + int(r.key.split(b"-")[1]) for r in read[: first_new - start])  # type: ignore[union-attr]
    # The fresh records are all there.
    assert [r.key for r in read[first_new - start :]] == [r.key for r in sent[first_new:]]
    assert log_lines(broker.broker_dir(0), rf"{topic}-0: deleted \d+ old segment")


def test_list_offsets_by_timestamp(broker: LocalCluster) -> None:
    """offsets_for_times: the earliest offset whose timestamp is >= the one asked for."""
    bootstrap = broker.bootstrap_servers()
    topic = "timestamps"
    create_topic(bootstrap, topic, 2, {"segment.bytes": "4096", "index.interval.bytes": "256"})
    t0 = int(time.time() * 1000) - HOUR_MS  # within the default 7-day retention
    records = [
        Rec(i % 2, -1, f"k{i}".encode(), f"v{i}".encode() * 5, (), t0 + 10 * i)
        for i in range(2_000)
    ]
    # Small batches, so that each partition spans several segments.
    acked = produce_confluent(bootstrap, topic, records, **{"batch.num.messages": 50})
    by_offset = {(r.partition, r.offset): r.timestamp for r in acked}
    ends = {p: 1 + max(o for q, o in by_offset if q == p) for p in (0, 1)}
    assert all(len(segment_bases(broker.broker_dir(0), topic, p)) > 3 for p in (0, 1))

    targets: list[tuple[int, int, int]] = []  # (partition, timestamp, expected offset)
    for p in (0, 1):
        targets.append((p, t0 - 1_000_000, 0))
        targets.append((p, t0 + 10 * 2_000 + 5, OFFSET_END))
        for offset in range(0, ends[p], 37):
            ts = by_offset[(p, offset)]
            targets.append((p, ts, offset))  # exact
            targets.append((p, ts - 7, offset))  # between this record and the one before
    consumer = consumer_confluent(bootstrap)
    try:
        for partition, ts, expected in targets:
            [found] = consumer.offsets_for_times([TopicPartition(topic, partition, ts)], timeout=20)
            assert found.error is None, found.error
            assert found.offset == expected, (partition, ts, found.offset, expected)
    finally:
        consumer.close()

    kp = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        parts = [KTopicPartition(topic, p) for p in (0, 1)]
        assert kp.beginning_offsets(parts) == {tp: 0 for tp in parts}
        assert kp.end_offsets(parts) == {tp: ends[tp.partition] for tp in parts}
        for partition, ts, expected in targets[::5]:
            tp = KTopicPartition(topic, partition)
            answer = kp.offsets_for_times({tp: ts})[tp]
            if expected == OFFSET_END:
                assert answer is None
            else:
                assert answer is not None and answer.offset == expected
                assert answer.timestamp == by_offset[(partition, expected)]
    finally:
        kp.close()


def _time_index(path: Path) -> list[tuple[int, int]]:
    """Entries ``(timestamp, relative offset)`` of a ``.timeindex`` file (12 bytes each)."""
    raw = path.read_bytes() if path.exists() else b""
    return [struct.unpack_from(">qi", raw, i) for i in range(0, len(raw) - 11, 12)]


def test_segment_files_and_checkpoints(broker: LocalCluster) -> None:
    """``<20-digit base>.log/.index/.timeindex`` per segment in ``<topic>-<partition>``.

    As in Kafka, a rolled segment's time index ends with the segment's largest
    timestamp (``onBecomeInactiveSegment``), and the periodic flush puts it on disk.
    """
    bootstrap = broker.bootstrap_servers()
    topic = "segment-files"
    create_topic(bootstrap, topic, 2, {"segment.bytes": "4096", "index.interval.bytes": "512"})
    t0 = int(time.time() * 1000)
    records = [Rec(i % 2, -1, None, b"segment-%06d" % i * 8, (), t0 + i) for i in range(1_500)]
    acked = produce_confluent(bootstrap, topic, records, **{"batch.num.messages": 20})
    ends = {p: sum(1 for r in acked if r.partition == p) for p in (0, 1)}
    timestamp_of = {(r.partition, r.offset): r.timestamp for r in acked}
    data = broker.broker_dir(0) / "data"

    for partition in (0, 1):
        directory = partition_dir(broker.broker_dir(0), topic, partition)
        bases = segment_bases(broker.broker_dir(0), topic, partition)
        assert len(bases) > 3 and bases[0] == 0, bases
        for base in bases:
            head = (directory / f"{base:020d}.log").read_bytes()[:8]
            assert struct.unpack(">q", head)[0] == base, "a segment's first batch is at its base"
        uppers = bases[1:]

        def final_entries(
            d: Path = directory,
            bs: list[int] = bases,
            up: list[int] = uppers,
            part: int = partition,
        ) -> list[tuple]:
            """Rolled segments whose time index on disk lacks its final entry."""
            missing = []
            for base, upper in zip(bs, up, strict=False):
                wanted = (timestamp_of[(part, upper - 1)], upper - 1 - base)
                entries = _time_index(d / f"{base:020d}.timeindex")
                if not (d / f"{base:020d}.index").exists() or not entries or entries[-1] != wanted:
                    missing.append((base, entries[-1:] if entries else None, wanted))
            return missing

        try:
            wait_for(lambda: not final_entries(), 15, "time indexes of the rolled segments on disk")
        except AssertionError:
            bad = final_entries()
            raise AssertionError(
                f"{topic}-{partition}: {len(bad)} of {len(uppers)} rolled segments lack their "
                f"final time index entry on disk, e.g. (base, last entry, wanted) {bad[:3]}"
            ) from None
        for name in (p.name for p in directory.iterdir()):
            m = SEGMENT_FILE.match(name)
            assert m is None or int(m.group(1)) in bases, f"{name} has no segment"
        for base in bases:
            entries = _time_index(directory / f"{base:020d}.timeindex")
            assert entries == sorted(entries)
            assert all(0 <= rel and t0 <= ts < t0 + 1_500 for ts, rel in entries)

    def checkpointed() -> dict | None:
        found = OffsetCheckpointFile(data / "recovery-point-offset-checkpoint").read()
        return found if all(found.get((topic, p), -1) == ends[p] for p in ends) else None

    wait_for(checkpointed, 30, "the recovery points of the flushed logs")
    starts = OffsetCheckpointFile(data / "log-start-offset-checkpoint").read()
    assert starts[(topic, 0)] == 0 and starts[(topic, 1)] == 0
