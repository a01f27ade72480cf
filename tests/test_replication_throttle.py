"""Replication throttling on real processes (KIP-73, ``replog reassign --throttle``).

Two topics of the same size move from broker 0 to brokers {0, 1} at once: ``slow`` with
``--throttle`` (both rates set on brokers 0 and 1, ``slow``'s throttled-replicas lists set),
``fast`` without. ``fast`` is not listed, so it is never slowed: it joins the ISR while
``slow`` is still short, and what broker 1 copied of ``slow`` by then stays under what the
quota allows over the elapsed time (a one-sided bound: a slow machine only copies less).
A producer to a third topic sees no error. Deleting the rates lets ``slow`` finish;
``--verify`` then removes every throttle config, as ``kafka-reassign-partitions.sh`` does.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from cluster_util import ZkView, create_topic, producer, wait_for
from replog.cluster.launcher import LocalCluster

pytestmark = pytest.mark.timeout(600)

REPLOG = [sys.executable, "-m", "replog.cli.main"]
RATE = 250_000  # bytes/s
RECORD = 10_000
RECORDS = 800  # ~8 MB per topic
FETCH_MAX = 1_048_576  # replica.fetch.max.bytes: one fetch may overshoot by this much


def replog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*REPLOG, *args], capture_output=True, text=True, timeout=120)


def fill(bootstrap: str, topic: str) -> None:
    p = producer(bootstrap, **{"linger.ms": 20})
    for i in range(RECORDS):
        p.produce(topic, (b"%06d" % i) * (RECORD // 6), partition=0)
        p.poll(0)
    assert p.flush(60) == 0


def copied(cluster: LocalCluster, broker: int, topic: str) -> int:
    path = cluster.broker_dir(broker) / "data" / f"{topic}-0"
    return sum(f.stat().st_size for f in path.glob("*.log")) if path.exists() else 0


def isr(zk: ZkView, topic: str) -> list[int]:
    state = zk.partition_state(topic, 0)
    return sorted(state["isr"]) if state else []


def test_throttled_reassignment_is_slowed_and_others_are_not(cluster_factory, tmp_path: Path):
    cluster = cluster_factory(2)
    bootstrap = cluster.bootstrap_servers()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for topic in ("slow", "fast"):  # placed on broker 0 only
        new = NewTopic(topic, 1, replica_assignment=[[0]])
        admin.create_topics([new])[topic].result(60)
        fill(bootstrap, topic)
    create_topic(bootstrap, "other", 1, 2)
    size = copied(cluster, 0, "slow")
    assert size > 7_000_000
    zk = ZkView(cluster)
    try:
        plans = {}
        for topic in ("slow", "fast"):
            plans[topic] = tmp_path / f"{topic}.json"
            plans[topic].write_text(
                json.dumps(
                    {
                        "version": 1,
                        "partitions": [{"topic": topic, "partition": 0, "replicas": [0, 1]}],
                    }
                )
            )
        other = producer(bootstrap)
        errors: list[str] = []
        acked: list[int] = []

        def on_delivery(err, msg) -> None:
            (errors.append(str(err)) if err else acked.append(msg.offset()))

        for i in range(50):
            other.produce("other", b"before-%d" % i, on_delivery=on_delivery)
        other.flush(30)

        started = time.monotonic()
        slow = replog(
            "reassign", "--bootstrap-server", bootstrap, "--execute",
            "--reassignment-json-file", str(plans["slow"]), "--throttle", str(RATE),
        )  # fmt: skip
        assert slow.returncode == 0, slow.stderr
        assert f"The inter-broker throttle limit was set to {RATE} B/s" in slow.stdout
        fast = replog(
            "reassign", "--bootstrap-server", bootstrap, "--execute",
            "--reassignment-json-file", str(plans["fast"]),
        )  # fmt: skip
        assert fast.returncode == 0, fast.stderr
        # The throttled-replicas lists: leader throttle on the current replica, follower
        # throttle on the one added.
        admin = AdminClient({"bootstrap.servers": bootstrap})
        described = admin.describe_configs([ConfigResource("topic", "slow")])
        entries = next(iter(described.values())).result(30)
        assert entries["leader.replication.throttled.replicas"].value == "0:0"
        assert entries["follower.replication.throttled.replicas"].value == "0:1"

        wait_for(lambda: isr(zk, "fast") == [0, 1], 120, "fast to join the ISR")
        elapsed = time.monotonic() - started
        slow_copied = copied(cluster, 1, "slow")
        allowed = 1.1 * RATE * (elapsed + 11) + FETCH_MAX
        assert isr(zk, "slow") == [0], (elapsed, slow_copied)
        assert slow_copied <= allowed, (elapsed, slow_copied, allowed)
        assert slow_copied < size

        # Producers to other partitions go on (no error; timing is bench/reassign.py's).
        for i in range(50):
            other.produce("other", b"during-%d" % i, on_delivery=on_delivery)
        other.flush(30)
        assert errors == [] and len(acked) == 100

        # Still throttled a while later: bytes grow no faster than the quota allows.
        time.sleep(3)
        elapsed = time.monotonic() - started
        assert copied(cluster, 1, "slow") <= 1.1 * RATE * (elapsed + 11) + FETCH_MAX

        for broker in (0, 1):
            done = replog(
                "configs", "--bootstrap-server", bootstrap, "--entity-type", "brokers",
                "--entity-name", str(broker), "--alter", "--delete-config",
                "leader.replication.throttled.rate,follower.replication.throttled.rate",
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
        wait_for(lambda: isr(zk, "slow") == [0, 1], 120, "slow to join the ISR once unthrottled")

        def verify_done() -> subprocess.CompletedProcess[str] | None:
            done = replog(
                "reassign", "--bootstrap-server", bootstrap, "--verify",
                "--reassignment-json-file", str(plans["slow"]),
            )  # fmt: skip
            return done if "slow-0 is completed." in done.stdout else None

        verify = wait_for(verify_done, 60, "the reassignment to complete", interval_s=1)
        assert verify.returncode == 0, verify.stderr
        assert "Clearing broker-level throttles on brokers 0,1" in verify.stdout
        assert "Clearing topic-level throttles on topic slow" in verify.stdout
        entries = next(
            iter(admin.describe_configs([ConfigResource("topic", "slow")]).values())
        ).result(30)
        assert entries["leader.replication.throttled.replicas"].value == ""
        assert entries["follower.replication.throttled.replicas"].value == ""
        broker = next(
            iter(admin.describe_configs([ConfigResource("broker", "1")]).values())
        ).result(30)
        assert int(broker["follower.replication.throttled.rate"].value) == 2**63 - 1
        assert copied(cluster, 1, "slow") == size
    finally:
        zk.close()
