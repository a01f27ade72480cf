"""Replication on real processes: kill -9, SIGSTOP, unclean election, identical replicas."""

from __future__ import annotations

import hashlib
import threading
import time

from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, NewTopic

from cluster_util import ZkView, consume_all, create_topic, producer, wait_for
from replog.protocol.records import iter_batches
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


def _committed_checksum(data_dir, topic: str, partition: int, high_watermark: int) -> str:
    """Checksum of the batches below ``high_watermark`` in a broker's log, read from disk."""
    log = Log.open(
        data_dir / f"{topic}-{partition}",
        LogConfig(),
        recovery_point=0,
        log_start_offset=0,
        now_ms=int(time.time() * 1000),
        clean_shutdown=False,
    )
    try:
        digest = hashlib.sha256()
        data = log.read(log.log_start_offset, 1 << 30, max_offset=high_watermark).records
        for pos, header in iter_batches(data):
            digest.update(bytes(data[pos : pos + header.size])[12:])  # epoch onwards
            digest.update(header.base_offset.to_bytes(8, "big"))
        return digest.hexdigest()
    finally:
        log.close()


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
    cluster = cluster_factory(3, overrides=LAG)
    bootstrap = cluster.bootstrap_servers()
    create_topic(bootstrap, "fenced", 1, 3, {"min.insync.replicas": "2"})
    zk = ZkView(cluster)
    try:
        state = wait_for(
            lambda: (s := zk.partition_state("fenced", 0)) and len(s["isr"]) == 3 and s,
            what="full ISR",
        )
        old_leader = int(state["leader"])
        with AckedProducer(bootstrap, "fenced") as prod:
            wait_for(lambda: prod.acked_count() > 500, what="first acks")
            cluster.pause_broker(old_leader)
            try:
                new = wait_for(
                    lambda: (
                        (s := zk.partition_state("fenced", 0))["leader"] not in (old_leader, -1)
                        and s
                    ),
                    timeout_s=40,
                    what="a new leader while the old one is paused",
                )
                at_election = prod.acked_count()
                wait_for(
                    lambda: prod.acked_count() > at_election + 500,
                    timeout_s=60,
                    what="acks from new leader",
                )
            finally:
                cluster.resume_broker(old_leader)
            wait_for(
                lambda: old_leader in zk.partition_state("fenced", 0)["isr"],
                timeout_s=60,
                what="the old leader to return as an in-sync follower",
            )
        assert new["leader_epoch"] > state["leader_epoch"]
        final = zk.partition_state("fenced", 0)
        assert final["leader"] == new["leader"], "the resumed broker did not take leadership back"
        records = consume_all(bootstrap, "fenced", 1)
        values = [int(m.value()) for m in records]
        assert set(prod.acked) <= set(values)
        assert len(values) == len(set(values))
        # Replicas agree on the committed range, byte for byte.
        hw = int(records[-1].offset()) + 1
        for broker_id in cluster.broker_ids:
            cluster.stop_broker(broker_id)
        sums = {
            b: _committed_checksum(cluster.broker_dir(b) / "data", "fenced", 0, hw)
            for b in cluster.broker_ids
        }
        assert len(set(sums.values())) == 1, sums
    finally:
        zk.close()


def test_unclean_leader_election(cluster_factory):
    """Only an out-of-sync replica survives: offline when unclean election is off, leader when on."""
    cluster = cluster_factory(2, overrides=LAG)
    bootstrap = cluster.bootstrap_servers()
    admin = AdminClient({"bootstrap.servers": bootstrap})
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
            wait_for(lambda t=t: len(zk.partition_state(t, 0)["isr"]) == 2, what=f"{t}: full ISR")
        cluster.stop_broker(1)
        for t in ("clean", "unclean"):
            wait_for(lambda t=t: zk.partition_state(t, 0)["isr"] == [0], what=f"{t}: ISR without 1")
        p = producer(cluster.bootstrap_servers([0]), acks="1", **{"enable.idempotence": False})
        for t in ("clean", "unclean"):
            for i in range(50):
                p.produce(t, value=str(i).encode())
        assert p.flush(30) == 0
        cluster.kill_broker(0)
        cluster.start_broker(1)
        wait_for(
            lambda: zk.partition_state("unclean", 0)["leader"] == 1,
            timeout_s=30,
            what="unclean election of the out-of-sync replica",
        )
        assert zk.partition_state("clean", 0)["leader"] == -1
        log_text = (cluster.broker_dir(1) / "broker.log").read_text(errors="replace").lower()
        assert "unclean" in log_text
    finally:
        zk.close()
