"""A failed log dir on real broker processes (KIP-112, Kafka's JBOD failure handling).

Broker 0 keeps one of its log dirs on a small tmpfs mounted for the test, which the test
fills while confluent-kafka producers write at acks=all:

* with another log dir live, broker 0 takes the full one offline, tells the controller
  (``/log_dir_event_notification``), and the controller moves the leaderships of the
  replicas in it to other ISR members and takes them out of the ISRs; the partitions in
  the healthy dir stay led by broker 0, which keeps running; DescribeLogDirs names the
  failed dir with KAFKA_STORAGE_ERROR;
* with no log dir left, broker 0 halts (as Kafka does), closing its ZooKeeper session
  first so that its leaderships move at once.

Producers see no error and every acknowledged record is read back, before and after
broker 0 restarts on the repaired disk and rejoins every ISR.

Root is needed to mount the tmpfs (otherwise the tests skip with the reason); the mount
is removed in a ``finally``.
"""

from __future__ import annotations

import errno
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kio.schema.errors import ErrorCode

from cluster_util import ZkView, consume_all, producer, wait_for
from disk_util import small_tmpfs
from replog.cluster.launcher import LocalCluster, pid_alive
from replog.storage.log_config import LogConfig
from replog.storage.log_manager import LogManager

pytestmark = pytest.mark.timeout(300)

PARTITIONS = 4
PER_ROUND = 150  # records per partition per round


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path, "4m") as mount:
        yield mount


def fill(disk: Path) -> Path:
    """Fill ``disk`` to the last byte with one file; returns it (delete it to make room)."""
    filler = disk / "filler"
    chunk = b"f" * 65536
    with open(filler, "wb", buffering=0) as out:
        while True:
            try:
                out.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
        for size in (4096, 512, 1):  # the last partial chunk
            while True:
                try:
                    out.write(chunk[:size])
                except OSError:
                    break
    return filler


class Writer:
    """One idempotent acks=all producer; rounds of records to every partition, each
    round flushed; what was acknowledged and every delivery error kept."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = producer(bootstrap)
        self.acked: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        self.errors: list[str] = []
        self.rounds = 0

    def _done(self, err, msg) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked[msg.partition()].append(msg.value())

    def round(self) -> None:
        self.rounds += 1
        for i in range(PER_ROUND):
            for p in range(PARTITIONS):
                value = f"r{self.rounds}-p{p}-{i:04d}-".encode() + b"x" * 1000
                self.producer.produce(self.topic, value, partition=p, on_delivery=self._done)
            self.producer.poll(0)
        assert self.producer.flush(120) == 0, "records still unacknowledged"

    def check_read_back(self, bootstrap: str) -> None:
        expected = sum(len(v) for v in self.acked.values())
        read = consume_all(bootstrap, self.topic, PARTITIONS, expected=expected, timeout_s=90)
        by_partition: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        for msg in read:
            by_partition[msg.partition()].append(msg.value())
        assert by_partition == self.acked, "acknowledged records lost, duplicated or reordered"


def create_topic_led_by_0(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    spec = NewTopic(topic, PARTITIONS, replica_assignment=[[0, 1, 2]] * PARTITIONS)
    admin.create_topics([spec], operation_timeout=30)[topic].result(timeout=60)


def broker_log(cluster: LocalCluster, broker_id: int) -> str:
    return (cluster.broker_dir(broker_id) / "broker.log").read_text()


def states(zk: ZkView, topic: str) -> dict[int, tuple[int, list[int]]]:
    out = {}
    for p in range(PARTITIONS):
        state = zk.partition_state(topic, p)
        out[p] = (-1, []) if state is None else (int(state["leader"]), list(state["isr"]))
    return out


def all_in_sync(zk: ZkView, topic: str) -> bool:
    return all(
        leader >= 0 and sorted(isr) == [0, 1, 2] for leader, isr in states(zk, topic).values()
    )


def rejoin_after_repair(
    cluster: LocalCluster, zk: ZkView, writer: Writer, filler: Path, bootstrap: str
) -> None:
    """The disk emptied, broker 0 (stopped) starts again, rejoins every ISR, and takes
    writes; nothing acknowledged before or after is lost."""
    filler.unlink()
    cluster.start_broker(0)
    wait_for(lambda: all_in_sync(zk, writer.topic), 60, "broker 0 back in every ISR")
    writer.round()
    assert writer.errors == []
    writer.check_read_back(bootstrap)


def test_a_failed_log_dir_moves_its_leaderships_and_the_broker_serves_the_rest(
    tmp_path: Path, small_disk: Path
) -> None:
    cluster = LocalCluster(tmp_path / "cluster")
    healthy = cluster.broker_dir(0) / "data"
    zk: ZkView | None = None
    try:
        bootstrap = cluster.up(3, broker_overrides={0: {"log.dirs": f"{healthy},{small_disk}"}})
        zk = ZkView(cluster)
        topic = "jbod"
        create_topic_led_by_0(bootstrap, topic)
        wait_for(lambda: all_in_sync(zk, topic), 60, "full ISRs")
        on_small = {int(d.name.rsplit("-", 1)[1]) for d in small_disk.glob(f"{topic}-*")}
        on_healthy = {int(d.name.rsplit("-", 1)[1]) for d in healthy.glob(f"{topic}-*")}
        assert on_small and on_healthy, (on_small, on_healthy)
        assert on_small | on_healthy == set(range(PARTITIONS))

        writer = Writer(bootstrap, topic)
        writer.round()
        assert "is offline" not in broker_log(cluster, 0), "the disk failed before it was full"
        filler = fill(small_disk)
        writer.round()  # broker 0's appends to the full dir fail: its leaderships move
        writer.round()

        def moved() -> bool:
            now = states(zk, topic)
            return all(now[p][0] not in (-1, 0) and 0 not in now[p][1] for p in on_small)

        wait_for(moved, 30, "the failed dir's leaderships to move off broker 0")
        now = states(zk, topic)
        for p in on_healthy:
            assert now[p][0] == 0 and 0 in now[p][1], (p, now[p])
        pid = cluster.broker_pid(0)
        assert pid is not None and pid_alive(pid), "broker 0 must keep serving its other dir"
        assert writer.errors == []
        assert zk.client.get_children("/log_dir_event_notification") == []

        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            answers = admin.describe_log_dirs()
        finally:
            admin.close()
        (mine,) = [a for a in answers if a["broker"] == 0]
        codes = {d["log_dir"]: d["error_code"] for d in mine["log_dirs"]}
        assert codes == {
            os.path.abspath(small_disk): ErrorCode.kafka_storage_error,
            os.path.abspath(healthy): ErrorCode.none,
        }
        writer.check_read_back(bootstrap)

        # The disk is repaired; after a restart broker 0 serves the dir again and catches
        # up on what it missed.
        assert cluster.stop_broker(0)
        rejoin_after_repair(cluster, zk, writer, filler, bootstrap)
    finally:
        if zk is not None:
            zk.close()
        cluster.down()


def test_a_broker_whose_only_log_dir_fails_halts_and_its_leaderships_move(
    tmp_path: Path, small_disk: Path
) -> None:
    cluster = LocalCluster(tmp_path / "cluster")
    zk: ZkView | None = None
    try:
        bootstrap = cluster.up(3, broker_overrides={0: {"log.dirs": str(small_disk)}})
        zk = ZkView(cluster)
        topic = "single"
        create_topic_led_by_0(bootstrap, topic)
        wait_for(lambda: all_in_sync(zk, topic), 60, "full ISRs")
        pid = cluster.broker_pid(0)
        assert pid is not None

        writer = Writer(bootstrap, topic)
        writer.round()
        assert "is offline" not in broker_log(cluster, 0), "the disk failed before it was full"
        filler = fill(small_disk)
        started = time.monotonic()
        writer.round()
        wait_for(lambda: not pid_alive(pid), 30, "broker 0 to halt")
        # It closed its session: its registration went at once, not after the timeout.
        assert 0 not in zk.brokers()
        now = states(zk, topic)
        assert all(leader in (1, 2) and 0 not in isr for leader, isr in now.values()), now
        assert time.monotonic() - started < 60
        assert "every log dir has failed" in broker_log(cluster, 0)
        assert writer.errors == []
        writer.check_read_back(bootstrap)

        rejoin_after_repair(cluster, zk, writer, filler, bootstrap)
    finally:
        if zk is not None:
            zk.close()
        cluster.down()


def test_any_failed_write_takes_the_log_dir_offline_once(tmp_path: Path, small_disk: Path) -> None:
    """The log manager's own writes (a topic id, checkpoints, flushes) find a full disk
    too: the dir goes offline once, its logs are closed and forgotten, the other dir's
    stay, and new logs go to the live dir."""
    healthy = tmp_path / "healthy"
    manager = LogManager([healthy, small_disk], LogConfig(segment_bytes=1 << 20))
    failed: list[Path] = []
    manager.on_log_dir_failure = lambda d: failed.append(d) or manager.handle_log_dir_failure(d)
    manager.startup(0)
    for p in range(4):
        manager.get_or_create_log("t", p, manager.default_config, 0)
    on_small = sorted(
        tp for tp in manager.local_partitions_on_disk() if manager.log_dir_of(*tp) == small_disk
    )
    assert on_small == [("t", 1), ("t", 3)]
    filler = fill(small_disk)
    assert manager.assign_topic_id("t", 1, uuid.uuid4()) is False
    assert failed == [small_disk] and manager.is_offline(small_disk)
    assert manager.live_log_dirs == [healthy]
    assert sorted(manager.local_partitions_on_disk()) == [("t", 0), ("t", 2)]
    manager.flush_dirty_logs()
    manager.checkpoint()  # nothing touches the offline dir any more
    assert failed == [small_disk]
    created = manager.get_or_create_log("t", 9, manager.default_config, 0)
    assert created.dir.parent == healthy
    filler.unlink()
    manager.shutdown()
    assert not (small_disk / ".kafka_cleanShutdown").exists()
    assert (healthy / ".kafka_cleanShutdown").exists()
