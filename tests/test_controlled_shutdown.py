"""Controlled shutdown on real broker processes (Kafka ``KafkaServer.controlledShutdown``).

A SIGTERM'd broker asks the controller to move its leaderships away before it closes
its listeners: confluent-kafka producers at acks=all see no error and lose nothing,
the leadership has moved before the broker exits, and the broker is gone well within
the ZooKeeper session timeout. A ControlledShutdown from an earlier incarnation of a
broker (stale KIP-380 epoch) is refused; with ``controlled.shutdown.enable=false`` the
broker just stops and the controller finds out from ZooKeeper.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict

import pytest
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from cluster_util import ZkView, consume_all, create_topic, leader_of, producer, wait_for
from replog.cluster.launcher import LocalCluster
from replog.cluster.processes import pid_alive
from replog.protocol.client import KafkaConnection
from replog.protocol.controller_schemas import REQUESTS
from replog.server.stack_dump import STACKS_DUMPED

pytestmark = pytest.mark.timeout(300)

TOPIC = "orders"
PARTITIONS = 3
SESSION_TIMEOUT_S = 6.0  # the launcher's zookeeper.session.timeout.ms


class Load:
    """A confluent-kafka producer at acks=all on its own thread; every delivery report
    is kept with the time it arrived."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = producer(bootstrap)
        self.acked: dict[int, list[tuple[float, bytes]]] = defaultdict(list)
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.sent = 0

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked[msg.partition()].append((time.monotonic(), msg.value()))

    def _run(self) -> None:
        while not self._stop.is_set():
            for p in range(PARTITIONS):
                value = f"{self.sent}".encode()
                self.producer.produce(TOPIC, value, partition=p, on_delivery=self._on_delivery)
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.005)
        self.producer.flush(120)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(150)

    def longest_gap_s(self, after: float) -> dict[int, float]:
        out = {}
        for p, acks in self.acked.items():
            times = [t for t, _ in acks if t >= after]
            out[p] = max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0)
        return out


def current_controller(zk: ZkView) -> int:
    wait_for(lambda: zk.controller()[0] is not None, what="a controller")
    controller = zk.controller()[0]
    assert controller is not None
    return controller


def broker_log(cluster: LocalCluster, broker_id: int) -> str:
    return (cluster.broker_dir(broker_id) / "broker.log").read_text(errors="replace")


def metadata_leaders(bootstrap: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = admin.list_topics(TOPIC, timeout=10).topics[TOPIC]
    return {p: meta.leader for p, meta in topic.partitions.items()}


def test_controlled_shutdown_of_a_leader_under_acks_all_load(cluster_factory) -> None:
    cluster = cluster_factory(3)
    bootstrap = cluster.bootstrap_servers()
    create_topic(bootstrap, TOPIC, PARTITIONS, 3)
    zk = ZkView(cluster)
    load = Load(bootstrap)
    try:
        wait_for(lambda: all(leader_of(zk, TOPIC, p) >= 0 for p in range(PARTITIONS)))
        victim = leader_of(zk, TOPIC, 0)
        led_before = {p for p in range(PARTITIONS) if leader_of(zk, TOPIC, p) == victim}
        epochs_before = {p: zk.partition_state(TOPIC, p)["leader_epoch"] for p in led_before}
        load.start()
        wait_for(lambda: all(len(load.acked[p]) > 50 for p in range(PARTITIONS)), what="load")
        stopped_at = time.monotonic()
        cluster.stop_broker(victim)
        shutdown_s = time.monotonic() - stopped_at
        survivors = [b for b in cluster.broker_ids if b != victim]
        others = cluster.bootstrap_servers(survivors)
        # Producing goes on on the new leaders.
        counts = {p: len(load.acked[p]) for p in range(PARTITIONS)}
        wait_for(
            lambda: all(len(load.acked[p]) > counts[p] + 50 for p in range(PARTITIONS)),
            what="acks after the shutdown",
        )
        load.stop()
        assert load.errors == []
        log = broker_log(cluster, victim)
        assert "controlled shutdown succeeded (attempt 1" in log
        # Leadership moved before the listeners closed: the controller answered (after
        # the new leaders acknowledged) before the broker began to stop its parts.
        assert log.index("controlled shutdown completed") < log.index("stopped cleanly")
        assert shutdown_s < SESSION_TIMEOUT_S, f"shutdown took {shutdown_s:.2f} s"
        for p in led_before:
            state = zk.partition_state(TOPIC, p)
            assert state["leader"] != victim and victim not in state["isr"]
            assert state["leader_epoch"] > epochs_before[p]
        assert all(leader != victim for leader in metadata_leaders(others).values())
        # No acknowledged record is lost.
        records = consume_all(others, TOPIC, PARTITIONS, expected=None)
        read = defaultdict(set)
        for msg in records:
            read[msg.partition()].add(msg.value())
        for p in range(PARTITIONS):
            missing = {v for _, v in load.acked[p]} - read[p]
            assert not missing, f"partition {p}: {len(missing)} acknowledged records lost"
        gaps = load.longest_gap_s(stopped_at)
        print(f"controlled shutdown took {shutdown_s:.3f} s; longest ack gap per partition {gaps}")
    finally:
        load.stop()
        zk.close()


async def _controlled_shutdown(host: str, port: int, version: int, **fields) -> object:
    conn = KafkaConnection(host, port)
    await conn.connect()
    try:
        return await conn.request(REQUESTS[7][version](**fields))
    finally:
        await conn.close()


def test_stale_broker_epoch_is_refused_and_a_non_controller_says_so(cluster_factory) -> None:
    cluster = cluster_factory(3)
    bootstrap = cluster.bootstrap_servers()
    create_topic(bootstrap, TOPIC, PARTITIONS, 3)
    zk = ZkView(cluster)
    try:
        wait_for(lambda: all(leader_of(zk, TOPIC, p) >= 0 for p in range(PARTITIONS)))
        controller = current_controller(zk)
        target = next(b for b in cluster.broker_ids if b != controller)
        epoch = zk.client.get(f"/brokers/ids/{target}")[1].czxid  # KIP-380 broker epoch
        before = {p: zk.partition_state(TOPIC, p) for p in range(PARTITIONS)}
        host, port = "127.0.0.1", cluster.port(controller)
        stale = asyncio.run(
            _controlled_shutdown(host, port, 3, broker_id=target, broker_epoch=epoch - 1)
        )
        assert stale.error_code == ErrorCode.stale_broker_epoch
        stale_v2 = asyncio.run(
            _controlled_shutdown(host, port, 2, broker_id=target, broker_epoch=epoch - 1)
        )
        assert stale_v2.error_code == ErrorCode.stale_broker_epoch
        assert {p: zk.partition_state(TOPIC, p) for p in range(PARTITIONS)} == before
        other = next(b for b in cluster.broker_ids if b not in (controller, target))
        refused = asyncio.run(
            _controlled_shutdown("127.0.0.1", cluster.port(other), 1, broker_id=target)
        )
        assert refused.error_code == ErrorCode.not_controller
        assert {p: zk.partition_state(TOPIC, p) for p in range(PARTITIONS)} == before
    finally:
        zk.close()


def test_controlled_shutdown_disabled_just_stops(cluster_factory) -> None:
    cluster = cluster_factory(3, overrides={"controlled.shutdown.enable": "false"})
    bootstrap = cluster.bootstrap_servers()
    create_topic(bootstrap, TOPIC, PARTITIONS, 3)
    zk = ZkView(cluster)
    try:
        wait_for(lambda: all(leader_of(zk, TOPIC, p) >= 0 for p in range(PARTITIONS)))
        controller = current_controller(zk)
        victim = next(
            leader_of(zk, TOPIC, p)
            for p in range(PARTITIONS)
            if leader_of(zk, TOPIC, p) != controller
        )
        cluster.stop_broker(victim)
        assert "controlled shutdown" not in broker_log(cluster, victim)
        assert "controlled shutdown" not in broker_log(cluster, controller)
        # The controller learns of it from ZooKeeper and moves leadership (broker failure).
        wait_for(
            lambda: all(leader_of(zk, TOPIC, p) != victim for p in range(PARTITIONS)),
            what="leaders off the stopped broker",
        )
    finally:
        zk.close()


def test_a_broker_past_its_stop_timeout_writes_its_stacks_then_is_killed(cluster_factory) -> None:
    """With the other replica's broker paused, a broker's controlled shutdown waits (on a
    controller that does not answer, or on the paused broker's LeaderAndIsr) past a 1 s
    stop timeout: ``stop_broker`` says False, the broker is gone, and its log holds its
    asyncio tasks' stacks (SIGUSR1 before the SIGKILL) showing that wait."""
    cluster = cluster_factory(2)
    create_topic(cluster.bootstrap_servers(), TOPIC, 1, 2)
    pid = cluster.broker_pid(0)
    assert pid is not None
    cluster.pause_broker(1)
    assert cluster.stop_broker(0, timeout_s=1) is False
    assert not pid_alive(pid)
    text = (cluster.broker_dir(0) / "broker.log").read_text()
    assert STACKS_DUMPED in text
    dump = text[text.index("asyncio tasks ---") : text.index(STACKS_DUMPED)]
    assert "_controlled_shutdown" in dump and "--- threads ---" in dump
    assert "stopped cleanly" not in text
