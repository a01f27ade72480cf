"""Replication on real processes: kill -9, SIGSTOP, unclean election, identical replicas."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.record import MemoryRecords
from kio.schema.errors import ErrorCode
from kio.schema.produce.v8.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.static.primitive import i32Timedelta

from cluster_util import ZkView, consume_all, create_topic, producer, wait_for
from replog.protocol.client import KafkaConnection
from replog.protocol.records import iter_batches, simple_batch
from replog.storage.log import Log
from replog.storage.log_config import LogConfig

LAG = {
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "200",
}


class AckedProducer:
    """Produces numbered records in the background with acks=all; remembers every ack."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        # A paused broker keeps its sockets open: time requests out in seconds, not 30 s,
        # so the producer moves to the new leader quickly.
        self.producer = producer(
            bootstrap, **{"linger.ms": 2, "request.timeout.ms": 5000, "socket.timeout.ms": 5000}
        )
        self.acked: list[int] = []
        self.failed: list[KafkaError] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._sent = 0

    def _on_delivery(self, err, msg) -> None:
        if err is None:
            self.acked.append(int(msg.value()))
        else:
            self.failed.append(err)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.producer.produce(
                self.topic, value=str(self._sent).encode(), on_delivery=self._on_delivery
            )
            self._sent += 1
            self.producer.poll(0.002)

    def __enter__(self) -> AckedProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)
        self.producer.flush(120)

    def acked_count(self) -> int:
        return len(self.acked)


@contextlib.contextmanager
def _open_log(data_dir: Path, topic: str, partition: int) -> Iterator[Log]:
    """A stopped broker's log for ``topic``-``partition``, opened from its directory."""
    log = Log.open(
        data_dir / f"{topic}-{partition}",
        LogConfig(),
        recovery_point=0,
        log_start_offset=0,
        now_ms=int(time.time() * 1000),
        clean_shutdown=False,
    )
    try:
        yield log
    finally:
        log.close()


def _committed_checksum(data_dir, topic: str, partition: int, high_watermark: int) -> str:
    """Checksum of the batches below ``high_watermark`` in a broker's log, read from disk."""
    with _open_log(data_dir, topic, partition) as log:
        digest = hashlib.sha256()
        data = log.read(log.log_start_offset, 1 << 30, max_offset=high_watermark).records
        for pos, header in iter_batches(data):
            digest.update(bytes(data[pos : pos + header.size])[12:])  # epoch onwards
            digest.update(header.base_offset.to_bytes(8, "big"))
        return digest.hexdigest()


def _replica_records(data_dir: Path, topic: str, partition: int) -> list[tuple[int, int, str]]:
    """``(offset, leader epoch, value)`` of every record in a stopped broker's log, to its end."""
    out: list[tuple[int, int, str]] = []
    with _open_log(data_dir, topic, partition) as log:
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            records = MemoryRecords(bytes(log.read(offset, 1 << 30).records))
            assert records.has_next(), f"{topic}-{partition}: nothing readable at offset {offset}"
            while records.has_next():
                batch = records.next_batch()
                for record in batch:
                    out.append((record.offset, batch.leader_epoch, record.value.decode()))
                offset = batch.next_offset
    return out


def _produce(prod: Producer, topic: str, values: list[str]) -> list[int]:
    """Produce ``values`` to partition 0, wait for every delivery report, return the offsets."""
    reports: dict[str, int | KafkaError] = {}

    def on_delivery(err, msg) -> None:
        reports[msg.value().decode()] = err if err is not None else msg.offset()

    for value in values:
        prod.produce(topic, value=value.encode(), partition=0, on_delivery=on_delivery)
    assert prod.flush(60) == 0, f"{topic}: deliveries still pending"
    failed = {v: r for v, r in reports.items() if isinstance(r, KafkaError)}
    assert not failed, f"{topic}: {failed}"
    return [reports[v] for v in values]


def _values(messages) -> list[str]:
    return [m.value().decode() for m in messages]


async def _produce_to(port: int, topic: str, partition: int, value: bytes) -> ErrorCode:
    """One acks=1 Produce sent to one broker as it is: no leader lookup, no retry."""
    conn = KafkaConnection("127.0.0.1", port, client_id="test-replication-faults")
    await conn.connect()
    try:
        request = ProduceRequest(
            transactional_id=None,
            acks=1,
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
            topic_data=(
                TopicProduceData(
                    name=topic,
                    partition_data=(
                        PartitionProduceData(index=partition, records=simple_batch([value])),
                    ),
                ),
            ),
        )
        response = await conn.request(request)
        return response.responses[0].partition_responses[0].error_code
    finally:
        await conn.close()


def test_kill_leader_during_acks_all_loses_no_acknowledged_record(cluster_factory):
    cluster = cluster_factory(3, overrides=LAG)
    bootstrap = cluster.bootstrap_servers()
    create_topic(bootstrap, "ledger", 1, 3, {"min.insync.replicas": "2"})
    zk = ZkView(cluster)
    try:
        state = wait_for(lambda: zk.partition_state("ledger", 0), what="partition state")
        leader = int(state["leader"])
        with AckedProducer(bootstrap, "ledger") as prod:
            wait_for(lambda: prod.acked_count() > 2000, timeout_s=60, what="2000 acks")
            cluster.kill_broker(leader)
            acked_at_kill = prod.acked_count()
            wait_for(
                lambda: prod.acked_count() > acked_at_kill + 2000,
                timeout_s=90,
                what="acks after failover",
            )
        assert prod.failed == []
        new_state = zk.partition_state("ledger", 0)
        assert new_state["leader"] != leader and new_state["leader_epoch"] > state["leader_epoch"]
        live = [b for b in cluster.broker_ids if b != leader]
        acked = set(prod.acked)
        records = consume_all(cluster.bootstrap_servers(live), "ledger", 1)
        values = [int(m.value()) for m in records]
        offsets = [m.offset() for m in records]
        assert offsets == list(range(len(offsets))), "offsets are dense"
        assert len(values) == len(set(values)), "no record twice"
        assert acked <= set(values), f"lost {len(acked - set(values))} acknowledged records"
        assert values == sorted(values), "records in the order they were sent"
    finally:
        zk.close()


def test_paused_follower_leaves_and_rejoins_isr(cluster_factory):
    cluster = cluster_factory(3, overrides=LAG)
    bootstrap = cluster.bootstrap_servers()
    create_topic(bootstrap, "lagging", 1, 3, {"min.insync.replicas": "2"})
    zk = ZkView(cluster)
    try:
        state = wait_for(
            lambda: (s := zk.partition_state("lagging", 0)) and len(s["isr"]) == 3 and s,
            what="full ISR",
        )
        follower = next(b for b in state["isr"] if b != state["leader"])
        with AckedProducer(bootstrap, "lagging") as prod:
            wait_for(lambda: prod.acked_count() > 500, what="first acks")
            cluster.pause_broker(follower)
            try:
                wait_for(
                    lambda: follower not in zk.partition_state("lagging", 0)["isr"],
                    timeout_s=30,
                    what="the paused follower to leave the ISR",
                )
                shrunk_at = prod.acked_count()
                wait_for(
                    lambda: prod.acked_count() > shrunk_at + 500, what="acks=all with a smaller ISR"
                )
            finally:
                cluster.resume_broker(follower)
            wait_for(
                lambda: follower in zk.partition_state("lagging", 0)["isr"],
                timeout_s=60,
                what="the follower to rejoin the ISR",
            )
        assert prod.failed == []
    finally:
        zk.close()


def test_paused_leader_cannot_commit_and_truncates_on_return(cluster_factory):
    """A leader paused past its ZooKeeper session is replaced. When it wakes it still believes
    it leads at the old epoch and takes, with acks=1, the writes that waited in its socket while
    it was paused; no other replica ever fetches them, so they never commit, and the old leader
    truncates them when it comes back as a follower of the new leader."""
    cluster = cluster_factory(3, overrides=LAG)
    zk = ZkView(cluster)
    try:
        controller, _ = zk.controller()
        assert controller is not None
        old_leader = next(b for b in cluster.broker_ids if b != controller)  # one failover only
        followers = [b for b in cluster.broker_ids if b != old_leader]
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()})
        topic = NewTopic(
            "fenced",
            1,
            replica_assignment=[[old_leader, *followers]],
            config={"min.insync.replicas": "2"},
        )
        admin.create_topics([topic], operation_timeout=30)["fenced"].result(timeout=60)
        state = wait_for(
            lambda: (s := zk.partition_state("fenced", 0)) and len(s["isr"]) == 3 and s,
            what="full ISR",
        )
        assert state["leader"] == old_leader
        # Knows only the old leader. No retries: a retry could reach the new leader. Requests
        # may wait out the pause. One record per batch (here and for the new leader's records),
        # so that a follower that truncates short of where the logs diverge cannot hide it
        # behind a batch boundary.
        to_old_leader = producer(
            cluster.bootstrap_servers([old_leader]),
            acks="1",
            **{
                "enable.idempotence": False,
                "retries": 0,
                "batch.num.messages": 1,
                "request.timeout.ms": 60000,
                "topic.metadata.refresh.interval.ms": 300000,
            },
        )
        committed = ["warm-up"]  # opens the producer's connection to the leader
        assert _produce(to_old_leader, "fenced", committed) == [0]
        before = [f"before-{i}" for i in range(200)]
        # acks=all with all three in the ISR: every replica holds everything up to here.
        offsets = _produce(producer(cluster.bootstrap_servers()), "fenced", before)
        assert offsets == list(range(1, 1 + len(before)))
        committed += before
        end_before = len(committed)

        uncommitted = [f"uncommitted-{i}" for i in range(20)]
        reports: dict[str, int | KafkaError] = {}

        def on_delivery(err, msg) -> None:
            reports[msg.value().decode()] = err if err is not None else msg.offset()

        cluster.pause_broker(old_leader)
        try:
            # These wait in the paused broker's socket.
            for value in uncommitted:
                to_old_leader.produce(
                    "fenced", value.encode(), partition=0, on_delivery=on_delivery
                )
            to_old_leader.poll(0)
            new = wait_for(
                lambda: (
                    (s := zk.partition_state("fenced", 0))["leader"] not in (old_leader, -1) and s
                ),
                timeout_s=40,
                what="a new leader while the old one is paused",
            )
            after = [f"after-{i}" for i in range(100)]
            # Committed by the new leader at the offsets the old one is about to use.
            to_new_leader = producer(
                cluster.bootstrap_servers(followers), **{"batch.num.messages": 1}
            )
            offsets = _produce(to_new_leader, "fenced", after)
            assert offsets == list(range(end_before, end_before + len(after)))
        finally:
            cluster.resume_broker(old_leader)
        # Awake, the old leader answers the writes it held: it appended them as leader of the
        # old epoch, right after the records committed before the pause.
        assert to_old_leader.flush(60) == 0
        assert reports == {v: end_before + i for i, v in enumerate(uncommitted)}, (
            "the old leader did not take the writes it held while paused"
        )
        committed += after
        wait_for(
            lambda: old_leader in zk.partition_state("fenced", 0)["isr"],
            timeout_s=60,
            what="the old leader to return as an in-sync follower",
        )
        assert new["leader"] in followers and new["leader_epoch"] > state["leader_epoch"]
        final = zk.partition_state("fenced", 0)
        assert final["leader"] == new["leader"], "the resumed broker did not take leadership back"
        records = consume_all(cluster.bootstrap_servers(), "fenced", 1)
        assert [m.offset() for m in records] == list(range(len(committed)))
        assert _values(records) == committed

        for broker_id in cluster.broker_ids:
            cluster.stop_broker(broker_id)
        logs = {
            b: _replica_records(cluster.broker_dir(b) / "data", "fenced", 0)
            for b in cluster.broker_ids
        }
        old_log = logs[old_leader]
        kept = set(uncommitted) & {value for _, _, value in old_log}
        assert not kept, f"the old leader kept {len(kept)} records that never committed"
        assert [(offset, value) for offset, _, value in old_log] == list(enumerate(committed))
        for broker_id in followers:
            assert logs[broker_id] == old_log, f"broker {broker_id} differs from the old leader"
        sums = {
            b: _committed_checksum(cluster.broker_dir(b) / "data", "fenced", 0, len(committed))
            for b in cluster.broker_ids
        }
        assert len(set(sums.values())) == 1, sums
    finally:
        zk.close()


def _partition_metadata(admin: AdminClient, topic: str):
    """Partition 0 of ``topic`` as the broker ``admin`` talks to sees it, or None."""
    topic_metadata = admin.list_topics(topic, timeout=10).topics.get(topic)
    if topic_metadata is None or 0 not in topic_metadata.partitions:
        return None
    return topic_metadata.partitions[0]


def test_unclean_leader_election(cluster_factory):
    """Only an out-of-sync replica is alive. With unclean.leader.election.enable=false
    ("clean") the partition stays offline and keeps every acknowledged record until its ISR
    member returns; with it on for the topic ("unclean") the out-of-sync replica leads, the
    records only the old leader had are gone, and the old leader truncates to match."""
    cluster = cluster_factory(2, overrides=LAG)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()})
    topics = [
        NewTopic("clean", 1, replica_assignment=[[0, 1]]),
        NewTopic(
            "unclean",
            1,
            replica_assignment=[[0, 1]],
            config={"unclean.leader.election.enable": "true"},
        ),
    ]
    for future in admin.create_topics(topics, operation_timeout=30).values():
        future.result(timeout=60)
    zk = ZkView(cluster)
    try:
        for t in ("clean", "unclean"):
            wait_for(
                lambda t=t: (
                    (s := zk.partition_state(t, 0)) and s["leader"] == 0 and len(s["isr"]) == 2
                ),
                what=f"{t}: broker 0 leading the full ISR",
            )
        # Held by both replicas: acks=all with the ISR [0, 1].
        both = [f"both-{i}" for i in range(20)]
        to_all = producer(cluster.bootstrap_servers())
        for t in ("clean", "unclean"):
            assert _produce(to_all, t, both) == list(range(20))
        cluster.stop_broker(1)
        shrunk = {
            t: wait_for(
                lambda t=t: (s := zk.partition_state(t, 0))["isr"] == [0] and s,
                what=f"{t}: ISR without 1",
            )
            for t in ("clean", "unclean")
        }
        # Acknowledged, and held by broker 0 only: broker 1 is out of sync from here on. One
        # record per batch, so that truncating short of the divergence cannot hide behind a
        # batch boundary.
        only_0 = [f"only-on-0-{i}" for i in range(50)]
        to_0 = producer(
            cluster.bootstrap_servers([0]),
            acks="1",
            **{"enable.idempotence": False, "batch.num.messages": 1},
        )
        for t in ("clean", "unclean"):
            assert _produce(to_0, t, only_0) == list(range(20, 70))
        cluster.kill_broker(0)
        cluster.start_broker(1)

        # unclean: the out-of-sync replica leads, at a new epoch.
        elected = wait_for(
            lambda: (s := zk.partition_state("unclean", 0))["leader"] == 1 and s,
            timeout_s=30,
            what="unclean election of the out-of-sync replica",
        )
        assert elected["isr"] == [1]
        assert elected["leader_epoch"] > shrunk["unclean"]["leader_epoch"]
        # clean: no leader. The controller handles one event at a time, so once it has placed
        # a topic created after that election, it has decided about "clean" too.
        admin_1 = AdminClient({"bootstrap.servers": cluster.bootstrap_servers([1])})
        barrier = [NewTopic("created-after-election", 1, replica_assignment=[[1]])]
        admin_1.create_topics(barrier, operation_timeout=30)["created-after-election"].result(60)
        wait_for(
            lambda: (m := _partition_metadata(admin_1, "created-after-election")) and m.leader == 1,
            what="broker 1 to learn the leader of a topic created after the election",
        )
        offline = zk.partition_state("clean", 0)
        assert offline["leader"] == -1, offline
        assert _partition_metadata(admin_1, "unclean").leader == 1
        clean_metadata = _partition_metadata(admin_1, "clean")
        assert clean_metadata.leader == -1
        assert clean_metadata.error.code() == KafkaError.LEADER_NOT_AVAILABLE
        refused = asyncio.run(_produce_to(cluster.port(1), "clean", 0, b"refused"))
        assert refused == ErrorCode.not_leader_or_follower

        # unclean: what only broker 0 had is gone from the new leader's log, and new writes
        # take those offsets.
        assert _values(consume_all(cluster.bootstrap_servers([1]), "unclean", 1)) == both
        after = [f"after-election-{i}" for i in range(10)]
        assert _produce(producer(cluster.bootstrap_servers([1])), "unclean", after) == list(
            range(20, 30)
        )

        assert zk.partition_state("clean", 0)["leader"] == -1
        cluster.start_broker(0)
        back = wait_for(
            lambda: (
                (s := zk.partition_state("clean", 0))["leader"] == 0
                and sorted(s["isr"]) == [0, 1]
                and s
            ),
            timeout_s=60,
            what="clean: broker 0 leading again and broker 1 caught up",
        )
        assert back["leader_epoch"] > shrunk["clean"]["leader_epoch"]
        wait_for(
            lambda: sorted(zk.partition_state("unclean", 0)["isr"]) == [0, 1],
            timeout_s=60,
            what="unclean: broker 0 back in the ISR",
        )
        assert zk.partition_state("unclean", 0)["leader"] == 1
        assert _values(consume_all(cluster.bootstrap_servers(), "clean", 1)) == both + only_0
        assert _values(consume_all(cluster.bootstrap_servers(), "unclean", 1)) == both + after

        # On disk: the returning old leader of "unclean" truncated the records only it had;
        # both replicas of each topic hold the same log.
        for broker_id in cluster.broker_ids:
            cluster.stop_broker(broker_id)
        for t, values in (("clean", both + only_0), ("unclean", both + after)):
            logs = {b: _replica_records(cluster.broker_dir(b) / "data", t, 0) for b in (0, 1)}
            assert [(offset, value) for offset, _, value in logs[0]] == list(enumerate(values)), t
            assert logs[0] == logs[1], t
            sums = {
                b: _committed_checksum(cluster.broker_dir(b) / "data", t, 0, len(values))
                for b in (0, 1)
            }
            assert sums[0] == sums[1], t
    finally:
        zk.close()
