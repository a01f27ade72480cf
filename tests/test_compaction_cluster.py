"""Log compaction on a real 3-broker cluster (real ZooKeeper, confluent-kafka and
kafka-python): a compacted RF 3 topic with many updates per key and tombstones.

* After cleaning, on every replica: each key's latest acknowledged value is there at
  its acknowledged offset, each key appears once below the cleaner checkpoint, every
  record is the one the producer was acknowledged for at that offset. Both clients
  read the compacted log (gaps and emptied producer batches) from the leader.
* Tombstones disappear once ``delete.retention.ms`` has passed, with no new writes.
* The leader is killed (kill -9) in the middle of a cleaning (its worker process
  paused): the worker leaves by itself, the new leader has every key's latest value;
  the killed broker restarts, catches up (fetching past the new leader's gaps), cleans
  its own log again and agrees.
* A record without a key is refused with INVALID_RECORD.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from clients_util import log_lines, partition_dir, wait_for_leaders
from cluster_util import ZkView, create_topic, leader_of, producer, wait_for
from replog.cluster.launcher import pid_alive
from replog.protocol.records import InvalidRecordBatch, iter_batches
from replog.storage.checkpoints import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
from replog.storage.record_reader import iter_records

TOPIC = "table"
KEYS = 150
DELETE_RETENTION_MS = 2000
OVERRIDES = {
    "log.cleaner.backoff.ms": "200",
    "log.cleaner.io.max.bytes.per.second": "2000000",  # cleanings last long enough to kill one
    "replica.lag.time.max.ms": "10000",
}
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "16384",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": str(DELETE_RETENTION_MS),
}

Acked = dict[int, tuple[bytes, bytes | None]]  # offset -> (key, value)


def produce(bootstrap: str, pairs: list[tuple[bytes, bytes | None]], acked: Acked) -> None:
    p = producer(bootstrap, **{"linger.ms": 20})
    errors = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked[msg.offset()] = (msg.key(), msg.value())

    for i, (key, value) in enumerate(pairs):
        p.produce(TOPIC, key=key, value=value, partition=0, on_delivery=on_delivery)
        if i % 25 == 24:  # small requests, so segments roll at segment.bytes
            p.flush(60)
    assert p.flush(60) == 0 and not errors, errors


def latest(acked: Acked) -> dict[bytes, tuple[int, bytes | None]]:
    return {key: (offset, value) for offset, (key, value) in sorted(acked.items())}


def updates(round_: int, keys: int = KEYS) -> list[tuple[bytes, bytes | None]]:
    return [(b"key-%03d" % k, b"v%d-%d-" % (round_, k) + b"." * 80) for k in range(keys)]


def filler(tag: str, count: int = 60) -> list[tuple[bytes, bytes | None]]:
    """Unique keys that push earlier records out of the active segment."""
    return [(f"{tag}-{i}".encode(), b"f" * 200) for i in range(count)]


def cleaner_worker_of(broker_pid: int | None) -> int:
    """The pid of the log cleaner worker process a broker started."""
    assert broker_pid is not None
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == broker_pid and b"replog.storage.cleaner_worker" in cmdline:
            return int(entry.name)
    raise AssertionError(f"broker {broker_pid} has no cleaner worker")


def checkpoint(cluster, broker_id: int) -> int:
    path = cluster.broker_dir(broker_id) / "data" / CLEANER_OFFSET_CHECKPOINT
    try:
        return OffsetCheckpointFile(path).read().get((TOPIC, 0), -1)
    except (OSError, ValueError):
        return -1


def records_on_disk(directory: Path) -> list[tuple[int, bytes | None, bytes | None]] | None:
    """The replica's records from its segment files (read-only); None if a segment went
    away under the read or a swap is under way (segments renamed ``.swap`` or
    ``.deleted``: the listing misses their records), to be retried."""
    out = []
    segments = sorted(directory.glob("*.log"))
    if _swapping(directory):
        return None
    for path in segments:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            for pos, h in iter_batches(data):
                out.extend(
                    (r.offset, r.key, r.value) for r in iter_records(data[pos : pos + h.size], h)
                )
        except InvalidRecordBatch:
            pass  # a batch being appended at the end of the active segment
    if _swapping(directory) or sorted(directory.glob("*.log")) != segments:
        return None
    offsets = [o for o, _, _ in out]
    return out if offsets == sorted(set(offsets)) else None


def _swapping(directory: Path) -> bool:
    return any(p.suffix in (".swap", ".deleted", ".cleaned") for p in directory.iterdir())


def check_replica(cluster, broker_id: int, acked: Acked, *, upto: int) -> None:
    """Cleaned up to ``upto`` or more, every key's latest value, each key once below the
    cleaner checkpoint, every record as acknowledged."""
    wait_for(lambda: checkpoint(cluster, broker_id) >= upto, 60, f"broker {broker_id} to clean")
    mark = checkpoint(cluster, broker_id)
    records = wait_for(
        lambda: records_on_disk(partition_dir(cluster.broker_dir(broker_id), TOPIC, 0))
    )
    for offset, key, value in records:
        assert acked.get(offset) == (key, value), (broker_id, offset)
    cleaned_keys = [key for offset, key, _ in records if offset < mark]
    assert len(cleaned_keys) == len(set(cleaned_keys)), broker_id
    on_disk = {key: (offset, value) for offset, key, value in records}
    for key, (offset, value) in latest(acked).items():
        if value is not None:
            assert on_disk.get(key) == (offset, value), (broker_id, key)


def read_confluent(bootstrap: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """The whole partition up to its high watermark, from the leader."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "compaction-tests",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        out = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF: at the high watermark
                    return out
                raise AssertionError(f"confluent-kafka: {msg.error()}")
            out.append((msg.offset(), msg.key(), msg.value()))
        raise AssertionError("confluent-kafka did not reach the end of the partition")
    finally:
        consumer.close()


def read_kafka_python(bootstrap: str) -> list[tuple[int, bytes | None, bytes | None]]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        tp = KTopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        out = []
        deadline = time.monotonic() + 60
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, f"kafka-python stuck at {consumer.position(tp)}"
            for msgs in consumer.poll(timeout_ms=500).values():
                out.extend((m.offset, m.key, m.value) for m in msgs)
        return out
    finally:
        consumer.close()


def check_read(records, acked: Acked, client: str) -> None:
    for offset, key, value in records:
        assert acked.get(offset) == (key, value), (client, offset)
    read = {key: (offset, value) for offset, key, value in records}
    for key, (offset, value) in latest(acked).items():
        if value is not None:
            assert read.get(key) == (offset, value), (client, key)


def test_compaction_on_a_replicated_topic(cluster_factory) -> None:
    cluster = cluster_factory(3, overrides=OVERRIDES)
    bootstrap = cluster.bootstrap_servers()
    create_topic(bootstrap, TOPIC, partitions=1, replication=3, config=TOPIC_CONFIG)
    wait_for_leaders(bootstrap, {TOPIC: 1})
    acked: Acked = {}
    for round_ in range(6):
        produce(bootstrap, updates(round_), acked)
    deleted = [b"key-%03d" % k for k in range(0, KEYS, 10)]
    produce(bootstrap, [(key, None) for key in deleted], acked)
    produce(bootstrap, filler("a"), acked)
    tombstones = [o for o, (k, v) in acked.items() if v is None]

    # Cleaned on every replica, past the tombstones.
    for broker_id in cluster.broker_ids:
        check_replica(cluster, broker_id, acked, upto=max(tombstones) + 1)
    check_read(read_confluent(bootstrap), acked, "confluent-kafka")
    check_read(read_kafka_python(bootstrap), acked, "kafka-python")

    # Tombstones go after delete.retention.ms, with no new writes, on every replica.
    def no_tombstones(broker_id: int) -> bool:
        records = records_on_disk(partition_dir(cluster.broker_dir(broker_id), TOPIC, 0))
        return records is not None and not any(o in tombstones for o, _, _ in records)

    for broker_id in cluster.broker_ids:
        wait_for(lambda b=broker_id: no_tombstones(b), 30, f"tombstones gone on {broker_id}")
    after = read_confluent(bootstrap)
    assert not [r for r in after if r[0] in tombstones]
    assert not set(deleted) & {k for _, k, _ in after}
    for offset in tombstones:  # what a consumer no longer sees is no longer expected
        del acked[offset]

    # New updates, and the leader killed in the middle of cleaning them: its cleaner
    # worker is paused, so the cleaning it began cannot finish before the kill.
    zk = ZkView(cluster)
    try:
        old_leader = leader_of(zk, TOPIC, 0)
        worker = cleaner_worker_of(cluster.broker_pid(old_leader))
        began = len(log_lines(cluster.broker_dir(old_leader), "table-0: beginning cleaning"))
        os.kill(worker, signal.SIGSTOP)
        produce(bootstrap, updates(6) + filler("b"), acked)
        wait_for(
            lambda: (
                len(log_lines(cluster.broker_dir(old_leader), "table-0: beginning cleaning"))
                > began
            ),
            30,
            "the leader to begin a cleaning",
        )
        cluster.kill_broker(old_leader)
        os.kill(worker, signal.SIGCONT)  # it finds its broker gone and leaves
        wait_for(
            lambda: not pid_alive(worker), 30, "the cleaner worker of the killed broker to exit"
        )
        wait_for(lambda: leader_of(zk, TOPIC, 0) not in (-1, old_leader), 60, "a new leader")
        survivors = [b for b in cluster.broker_ids if b != old_leader]
        new_bootstrap = cluster.bootstrap_servers(survivors)
        check_read(read_confluent(new_bootstrap), acked, "confluent-kafka, new leader")
        upto = max(o for o, (k, _) in acked.items() if k.startswith(b"key-")) + 1
        for broker_id in survivors:
            check_replica(cluster, broker_id, acked, upto=upto)

        # The killed broker comes back, catches up past the new leader's gaps, cleans.
        cluster.start_broker(old_leader)
        wait_for(
            lambda: len((zk.partition_state(TOPIC, 0) or {}).get("isr", [])) == 3,
            60,
            "the restarted broker back in the ISR",
        )
        produce(bootstrap, filler("c"), acked)
        check_replica(cluster, old_leader, acked, upto=upto)

        # Nothing of the interrupted cleaning is left. (The restarted broker's cleaner may be
        # writing .cleaned files of a new cleaning right now: wait for one between runs.)
        def leftovers() -> list[str]:
            return [
                p.name
                for p in partition_dir(cluster.broker_dir(old_leader), TOPIC, 0).iterdir()
                if p.name.endswith((".cleaned", ".swap"))
            ]

        wait_for(lambda: not leftovers(), 60, "no .cleaned or .swap files on the restarted broker")
        check_read(read_kafka_python(cluster.bootstrap_servers()), acked, "kafka-python")
    finally:
        zk.close()

    # A compacted topic refuses a record without a key.
    p = producer(cluster.bootstrap_servers(), **{"enable.idempotence": False, "retries": 0})
    failures = []
    p.produce(
        TOPIC, value=b"no key", partition=0, on_delivery=lambda err, msg: failures.append(err)
    )
    p.flush(30)
    assert failures and failures[0] is not None and failures[0].code() == 87  # INVALID_RECORD
