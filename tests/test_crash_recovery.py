"""kill -9 of a broker while a producer writes with acks=1, then recovery on restart.

A SIGKILL ends the process, not the machine: everything the broker wrote is in
the page cache, so every record whose ack reached the producer must survive.
The producer does not retry (``retries=0``), so per partition the log after
recovery must be a prefix of the sequence the producer sent, at least as long
as what was acknowledged. A torn batch appended to a segment while the broker
is down stands in for a write cut short: recovery must drop exactly that tail.
"""

from __future__ import annotations

import re
import threading
import time

from confluent_kafka import Producer, TopicPartition

from clients_util import (
    Rec,
    assert_dense,
    consume_confluent,
    consumer_confluent,
    create_topic,
    partition_dir,
    produce_confluent,
    segment_bases,
    wait_for,
    wait_for_leaders,
    watermarks,
)
from replog.cluster.launcher import LocalCluster
from replog.protocol.records import simple_batch
from replog.storage.checkpoints import OffsetCheckpointFile

TOPIC = "crash"
PARTITIONS = 2
ACKED_BEFORE_KILL = 30_000


class AcksOneWriter(threading.Thread):
    """Produces ``<partition>:<seq>`` records with acks=1 and no retries until stopped.

    ``sent[p]`` is the order records were handed to the producer for partition ``p``;
    ``acked[p]`` maps acknowledged offsets to sequence numbers. Errors reported
    before ``killed`` is set are failures of the test.
    """

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": 1,
                "retries": 0,
                "enable.idempotence": False,
                "linger.ms": 2,
                "batch.num.messages": 500,
                "message.timeout.ms": 3000,
                "compression.type": "lz4",
            }
        )
        self.sent: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        self.acked: dict[int, dict[int, int]] = {p: {} for p in range(PARTITIONS)}
        self.errors_before_kill: list[str] = []
        self.errors_after_kill = 0
        self.killed = threading.Event()
        self.stop = threading.Event()
        self.drained = threading.Event()
        self.lock = threading.Lock()

    def acked_count(self) -> int:
        with self.lock:
            return sum(len(a) for a in self.acked.values())

    def _report(self, partition: int, seq: int):  # type: ignore[no-untyped-def]
        def done(err, msg) -> None:  # type: ignore[no-untyped-def]
            with self.lock:
                if err is None:
                    self.acked[partition][msg.offset()] = seq
                elif self.killed.is_set():
                    self.errors_after_kill += 1
                else:
                    self.errors_before_kill.append(str(err))

        return done

    def run(self) -> None:
        seq = 0
        ts = int(time.time() * 1000)
        try:
            while not self.stop.is_set():
                partition = seq % PARTITIONS
                try:
                    self.producer.produce(
                        TOPIC,
                        key=f"k{seq}".encode(),
                        value=f"{partition}:{seq}".encode(),
                        partition=partition,
                        timestamp=ts + seq,
                        on_delivery=self._report(partition, seq),
                    )
                except BufferError:
                    self.producer.poll(0.05)
                    continue
                self.sent[partition].append(seq)
                seq += 1
                self.producer.poll(0)
            # Drain: with the broker gone, what is left fails after message.timeout.ms.
            self.producer.flush(30)
        finally:
            self.drained.set()


def _tear_last_segment(cluster: LocalCluster, partition: int) -> int:
    """Append half a batch to the partition's active segment; return its length."""
    base = segment_bases(cluster.broker_dir(0), TOPIC, partition)[-1]
    path = partition_dir(cluster.broker_dir(0), TOPIC, partition) / f"{base:020d}.log"
    batch = simple_batch([b"torn" * 50] * 8, base_offset=0)
    torn = batch[: len(batch) // 2]
    with open(path, "ab") as f:
        f.write(torn)
    return len(torn)


def test_kill_9_while_producing_acks_1(cluster_factory) -> None:
    cluster: LocalCluster = cluster_factory(
        1,
        # Small segments so the log spans several; a short ZooKeeper session so the
        # killed broker's registration expires soon (ZooKeeper's minimum is 2 ticks).
        overrides={"log.segment.bytes": "262144", "zookeeper.session.timeout.ms": "4000"},
    )
    bootstrap = cluster.bootstrap_servers()
    create_topic(bootstrap, TOPIC, PARTITIONS)
    broker_dir = cluster.broker_dir(0)

    writer = AcksOneWriter(bootstrap)
    writer.start()
    try:
        wait_for(
            lambda: writer.acked_count() >= ACKED_BEFORE_KILL or not writer.is_alive(),
            120,
            f"{ACKED_BEFORE_KILL} acked records",
        )
        writer.killed.set()
        cluster.kill_broker(0)  # while the writer is still producing
    finally:
        writer.stop.set()
        wait_for(writer.drained.is_set, 60, "the producer to drain")
        writer.join(10)

    assert not writer.errors_before_kill, writer.errors_before_kill[:5]
    assert writer.acked_count() >= ACKED_BEFORE_KILL
    for partition in range(PARTITIONS):
        acked = writer.acked[partition]
        assert sorted(acked) == list(range(len(acked))), "acked offsets must be dense"
        assert [acked[o] for o in range(len(acked))] == writer.sent[partition][: len(acked)]

    # A broker may register again once ZooKeeper has expired the killed one's session.
    wait_for(
        lambda: 0 not in cluster.registered_brokers(),
        60,
        "the old registration to expire",
        interval_s=0.25,
    )
    torn_bytes = _tear_last_segment(cluster, 0)
    log_size_before = len((broker_dir / "broker.log").read_bytes())
    cluster.start_broker(0)
    wait_for_leaders(bootstrap, {TOPIC: PARTITIONS})

    restart_log = (
        (broker_dir / "broker.log").read_bytes()[log_size_before:].decode(errors="replace")
    )
    assert re.search(r"loaded \d+ log\(s\) from .* \(unclean shutdown\)", restart_log), restart_log
    torn = re.findall(
        rf"{TOPIC}-(\d+): recovery found a corrupt or torn tail in segment (\d+) at position "
        r"(\d+); dropped (\d+) bytes \((\d+) later segment\(s\) deleted\), log end offset (\d+)",
        restart_log,
    )
    by_partition = {int(m[0]): m for m in torn}
    assert 0 in by_partition, f"no recovery line for the torn tail of {TOPIC}-0:\n{restart_log}"
    for partition, (_, _, _, dropped, later, end) in by_partition.items():
        # Only the tail goes: never an acknowledged record, never a later segment.
        assert int(end) >= len(writer.acked[partition]), f"{TOPIC}-{partition} lost acked data"
        assert int(later) == 0
        if partition == 0:
            assert int(dropped) >= torn_bytes

    for partition in range(PARTITIONS):
        start, high_watermark = watermarks(bootstrap, TOPIC, partition)
        acked, sent = writer.acked[partition], writer.sent[partition]
        assert start == 0
        assert len(acked) <= high_watermark <= len(sent), (partition, high_watermark)
        read = consume_confluent(bootstrap, TOPIC, {partition: high_watermark})
        assert_dense(read, f"{TOPIC}-{partition} after recovery")
        seqs = [int(r.value.decode().split(":")[1]) for r in read]  # type: ignore[union-attr]
        assert seqs == sent[:high_watermark], (
            f"{TOPIC}-{partition} is not a prefix of what was sent"
        )
        for rec in read:
            seq = int(rec.value.decode().split(":")[1])  # type: ignore[union-attr]
            assert rec.key == f"k{seq}".encode()

    # The recovered log takes new records right after its end.
    ends = {p: watermarks(bootstrap, TOPIC, p)[1] for p in range(PARTITIONS)}
    more = [Rec(p, -1, b"after", f"after-{p}".encode(), (), int(time.time() * 1000)) for p in ends]
    for rec in produce_confluent(bootstrap, TOPIC, more, acks="all"):
        assert rec.offset == ends[rec.partition]


def _recovery_point(cluster: LocalCluster, topic: str, partition: int) -> int:
    path = cluster.broker_dir(0) / "data" / "recovery-point-offset-checkpoint"
    try:
        return OffsetCheckpointFile(path).read().get((topic, partition), -1)
    except (OSError, ValueError):
        return -1


def _offset_for_time(bootstrap: str, topic: str, timestamp: int) -> int:
    consumer = consumer_confluent(bootstrap)
    try:
        [found] = consumer.offsets_for_times([TopicPartition(topic, 0, timestamp)], timeout=20)
        assert found.error is None, found.error
        return found.offset
    finally:
        consumer.close()


def test_time_lookup_after_kill_9(cluster_factory) -> None:
    """A segment flushed whole and then rolled keeps its largest timestamp across kill -9.

    The flush that moves the recovery point to the end of a segment happens before
    the roll that closes it; after an unclean restart that segment is not rescanned,
    so what its time index says on disk is all the broker knows about its timestamps.
    """
    cluster: LocalCluster = cluster_factory(
        1,
        overrides={
            "log.flush.offset.checkpoint.interval.ms": "200",
            "zookeeper.session.timeout.ms": "4000",
        },
    )
    bootstrap = cluster.bootstrap_servers()
    topic = "time-crash"
    create_topic(bootstrap, topic, 1, {"segment.bytes": "4096"})
    t0 = int(time.time() * 1000) - 60_000

    def batch(first: int, count: int) -> list[Rec]:
        return [
            Rec(0, -1, f"k{i}".encode(), b"%05d" % i + b"t" * 95, (), t0 + 10 * i)
            for i in range(first, first + count)
        ]

    acked = produce_confluent(bootstrap, topic, batch(0, 30), **{"linger.ms": 50})
    wait_for(lambda: _recovery_point(cluster, topic, 0) == 30, 30, "a flush to offset 30")
    acked += produce_confluent(bootstrap, topic, batch(30, 30), **{"linger.ms": 50})
    assert segment_bases(cluster.broker_dir(0), topic, 0) == [0, 30], "expected one roll at 30"
    wait_for(lambda: _recovery_point(cluster, topic, 0) == 60, 30, "a flush to offset 60")
    expected = {r.timestamp: r.offset for r in acked}
    probes = [0, 1, 15, 29, 30, 59]
    for offset in probes:
        assert _offset_for_time(bootstrap, topic, t0 + 10 * offset) == offset

    cluster.kill_broker(0)
    wait_for(
        lambda: 0 not in cluster.registered_brokers(),
        60,
        "the old registration to expire",
        interval_s=0.25,
    )
    cluster.start_broker(0)
    wait_for_leaders(bootstrap, {topic: 1})
    answers = {offset: _offset_for_time(bootstrap, topic, t0 + 10 * offset) for offset in probes}
    assert answers == {o: expected[t0 + 10 * o] for o in probes}, (
        f"ListOffsets by timestamp after kill -9 (probe offset -> answer): {answers}"
    )
