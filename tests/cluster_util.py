"""Helpers shared by the multi-broker tests: ZooKeeper reads, waiting on conditions, clients."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from replog.cluster.launcher import LocalCluster

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T],
    timeout_s: float = 30,
    what: str = "condition",
    interval_s: float = 0.1,
) -> T:
    """Poll ``condition`` until it returns a truthy value; fail with ``what`` after the timeout.

    Used to wait on other processes (ZooKeeper, brokers), which cannot notify the test.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


class ZkView:
    """Read-only look at a cluster's ZooKeeper state."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.client = KazooClient(hosts=cluster.zookeeper_connect, timeout=10)
        self.client.start(timeout=10)

    def close(self) -> None:
        self.client.stop()
        self.client.close()

    def partition_state(self, topic: str, partition: int) -> dict[str, Any] | None:
        path = f"/brokers/topics/{topic}/partitions/{partition}/state"
        try:
            data, stat = self.client.get(path)
        except NoNodeError:
            return None
        state = json.loads(data)
        state["zk_version"] = stat.version
        return state

    def controller(self) -> tuple[int | None, int]:
        """(controller id or None, controller epoch or -1); znodes may vanish mid-read."""
        try:
            controller = json.loads(self.client.get("/controller")[0])["brokerid"]
        except NoNodeError:
            controller = None
        try:
            epoch = int(self.client.get("/controller_epoch")[0])
        except NoNodeError:
            epoch = -1
        return controller, epoch

    def brokers(self) -> set[int]:
        return {int(b) for b in self.client.get_children("/brokers/ids")}

    def topics(self) -> set[str]:
        return set(self.client.get_children("/brokers/topics"))

    def snapshot(self, topic: str) -> dict[str, Any]:
        """Everything ZooKeeper says about a topic (for 'unchanged' checks)."""
        out: dict[str, Any] = {"exists": self.client.exists(f"/brokers/topics/{topic}") is not None}
        if out["exists"]:
            out["assignment"] = json.loads(self.client.get(f"/brokers/topics/{topic}")[0])
        return out


def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int = 1,
    replication: int = 1,
    config: dict[str, str] | None = None,
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, partitions, replication, config=config or {})], operation_timeout=30
    )
    futures[topic].result(timeout=60)


def producer(bootstrap: str, **extra: Any) -> Producer:
    config = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "message.timeout.ms": 120000,
        "topic.metadata.refresh.interval.ms": 1000,
        "retry.backoff.ms": 100,
    }
    config.update(extra)
    return Producer(config)


def consume_all(
    bootstrap: str, topic: str, partitions: int, expected: int | None = None, timeout_s: float = 60
) -> list:
    """Read from the start of every partition with assign(): ``expected`` records, or, with
    ``expected=None``, everything below each partition's high watermark at the time of the call."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "replog-tests",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    try:
        ends = {}
        if expected is None:
            for p in range(partitions):
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
                ends[p] = high
            expected = sum(ends.values())
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out = []
        deadline = time.monotonic() + timeout_s
        while len(out) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append(msg)
        return out
    finally:
        consumer.close()


def leader_of(zk: ZkView, topic: str, partition: int) -> int:
    state = zk.partition_state(topic, partition)
    return -1 if state is None else int(state["leader"])
