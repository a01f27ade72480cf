"""Replica reassignment (KIP-455) on real broker processes.

An RF 2 topic moves from brokers {0,1} to {1,2} (its leader on 0 moves too) under an
acks=all confluent-kafka load: no producer error, every acknowledged record readable
afterwards from the new replicas alone, broker 0's partition directory deleted, the
topic znode without adding/removing replicas, ``/admin/reassign_partitions`` gone.
Started by writing ``/admin/reassign_partitions`` with kazoo (what Kafka's ZooKeeper
tools write) and by ``replog reassign --execute`` (AlterPartitionReassignments; this
confluent-kafka has no ``alter_partition_reassignments``). A controller killed while a
reassignment waits for a stopped (SIGSTOP) target is replaced by one that completes it
from ZooKeeper; a cancel reverts to the original replicas; bad input changes nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cluster_util import ZkView, consume_all, create_topic, producer, wait_for
from replog.cluster.launcher import LocalCluster

pytestmark = pytest.mark.timeout(400)

TOPIC = "moving"
PARTITIONS = 2
CLI = [sys.executable, "-m", "replog.cli.main", "reassign"]


def topic_znode(zk: ZkView, topic: str = TOPIC) -> dict:
    return json.loads(zk.client.get(f"/brokers/topics/{topic}")[0])


def replicas(zk: ZkView, p: int, topic: str = TOPIC) -> list[int]:
    return topic_znode(zk, topic)["partitions"][str(p)]


def reassign_znode_exists(zk: ZkView) -> bool:
    return zk.client.exists("/admin/reassign_partitions") is not None


def partition_dir(cluster: LocalCluster, broker: int, p: int, topic: str = TOPIC) -> Path:
    return cluster.broker_dir(broker) / "data" / f"{topic}-{p}"


def log_dirs_of(cluster: LocalCluster, broker: int, topic: str = TOPIC) -> set[str]:
    root = cluster.broker_dir(broker)
    return {d.name for d in root.rglob(f"{topic}-*") if d.is_dir()}


def done(zk: ZkView, target: dict[int, list[int]], topic: str = TOPIC) -> bool:
    znode = topic_znode(zk, topic)
    if znode.get("adding_replicas") or znode.get("removing_replicas"):
        return False
    for p, want in target.items():
        if znode["partitions"][str(p)] != want:
            return False
        state = zk.partition_state(topic, p) or {}
        if sorted(state.get("isr", [])) != sorted(want) or state.get("leader") not in want:
            return False
    return True


class Load:
    """acks=all producer thread; records every acknowledged value and every error."""

    def __init__(self, bootstrap: str, topic: str = TOPIC) -> None:
        self.producer = producer(bootstrap, **{"linger.ms": 2})
        self.topic = topic
        self.acked: list[tuple[int, bytes]] = []
        self.errors: list[object] = []
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            sent = time.monotonic()

            def delivered(err, msg, sent=sent) -> None:
                if err is not None:
                    self.errors.append(err)
                else:
                    self.acked.append((msg.partition(), msg.value()))
                    self.latencies.append(time.monotonic() - sent)

            self.producer.produce(
                self.topic, value=f"v{i}".encode(), partition=i % PARTITIONS, on_delivery=delivered
            )
            self.producer.poll(0)
            i += 1
            time.sleep(0.002)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.producer.flush(120)

    def p99_ms(self) -> float:
        lat = sorted(self.latencies)
        return 1000 * lat[int(len(lat) * 0.99)] if lat else 0.0


def check_all_readable(cluster: LocalCluster, load: Load, brokers: list[int]) -> None:
    """Every acknowledged record, read through ``brokers`` only."""
    read = consume_all(
        cluster.bootstrap_servers(brokers), TOPIC, PARTITIONS, expected=len(load.acked)
    )
    got = {(m.partition(), m.value()) for m in read}
    missing = [a for a in load.acked if a not in got]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:5]}"


def test_reassign_through_zookeeper_and_cli_under_load(cluster_factory) -> None:
    cluster = cluster_factory(3, overrides={"auto.leader.rebalance.enable": "false"})
    bootstrap = cluster.bootstrap_servers()
    create_topic(bootstrap, TOPIC, PARTITIONS, 2)
    zk = ZkView(cluster)
    try:
        # Put both partitions on {0, 1} with 0 leading (a plain create spreads them).
        zk.client.create(
            "/admin/reassign_partitions",
            json.dumps(
                {
                    "version": 1,
                    "partitions": [
                        {"topic": TOPIC, "partition": p, "replicas": [0, 1]}
                        for p in range(PARTITIONS)
                    ],
                }
            ).encode(),
        )
        wait_for(lambda: done(zk, {0: [0, 1], 1: [0, 1]}), timeout_s=60, what="layout {0,1}")
        wait_for(lambda: not reassign_znode_exists(zk), what="znode removed")
        for p in range(PARTITIONS):  # leader 0 via preferred election if needed
            if zk.partition_state(TOPIC, p)["leader"] != 0:
                zk.client.create(
                    "/admin/preferred_replica_election",
                    json.dumps(
                        {"version": 1, "partitions": [{"topic": TOPIC, "partition": p}]}
                    ).encode(),
                )
                wait_for(lambda p=p: zk.partition_state(TOPIC, p)["leader"] == 0, what="leader 0")
        assert all(partition_dir(cluster, 0, p).is_dir() for p in range(PARTITIONS))

        with Load(bootstrap) as load:
            wait_for(lambda: len(load.acked) >= 200, what="the load flowing")
            # 1. Through ZooKeeper: partition 0 to {1, 2} (leader 0 must move).
            started = time.monotonic()
            zk.client.create(
                "/admin/reassign_partitions",
                json.dumps(
                    {
                        "version": 1,
                        "partitions": [{"topic": TOPIC, "partition": 0, "replicas": [1, 2]}],
                    }
                ).encode(),
            )
            wait_for(lambda: done(zk, {0: [1, 2]}), timeout_s=90, what="p0 on {1,2}")
            zk_seconds = time.monotonic() - started
            wait_for(lambda: not reassign_znode_exists(zk), what="znode removed")
            wait_for(lambda: not partition_dir(cluster, 0, 0).exists(), what="p0 dir gone on 0")

            # 2. Through AlterPartitionReassignments (replog reassign --execute).
            plan = cluster.broker_dir(0).parent / "plan.json"
            plan.write_text(
                json.dumps(
                    {
                        "version": 1,
                        "partitions": [{"topic": TOPIC, "partition": 1, "replicas": [2, 1]}],
                    }
                )
            )
            run = subprocess.run(
                [*CLI, "--bootstrap-server", bootstrap, "--execute",
                 "--reassignment-json-file", str(plan)],
                capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            assert run.returncode == 0, run.stderr
            assert "Current partition replica assignment" in run.stdout
            assert f'"topic":"{TOPIC}","partition":1,"replicas":[0,1]' in run.stdout.replace(
                " ", ""
            )
            wait_for(lambda: done(zk, {1: [2, 1]}), timeout_s=90, what="p1 on {2,1}")
            wait_for(lambda: not partition_dir(cluster, 0, 1).exists(), what="p1 dir gone on 0")
            verify = subprocess.run(
                [*CLI, "--bootstrap-server", bootstrap, "--verify",
                 "--reassignment-json-file", str(plan)],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert verify.returncode == 0, verify.stderr
            assert f"Reassignment of partition {TOPIC}-1 is completed." in verify.stdout
            mark = len(load.acked)  # records keep being acknowledged after the moves
            wait_for(lambda: len(load.acked) >= mark + 200, what="acks after the moves")
        assert load.errors == []
        assert len(load.acked) > 500
        print(
            f"\nreassign p0 via ZooKeeper: {zk_seconds:.2f} s; producer p99 {load.p99_ms():.0f} ms"
        )
        assert log_dirs_of(cluster, 0) == set()
        # Every acknowledged record from the new replicas alone (broker 0 stopped).
        cluster.stop_broker(0)
        check_all_readable(cluster, load, [1, 2])
    finally:
        zk.close()


def test_reassignment_survives_controller_failover_and_cancel_reverts(cluster_factory) -> None:
    cluster = cluster_factory(4, overrides={"auto.leader.rebalance.enable": "false"})
    bootstrap = cluster.bootstrap_servers()
    zk = ZkView(cluster)
    try:
        # Broker 0 can be the controller: wait for an id that is not None, not a truthy one.
        [controller] = wait_for(
            lambda: [c] if (c := zk.controller()[0]) is not None else None, what="a controller"
        )
        others = [b for b in range(4) if b != controller]
        origin, target_broker, spare = others[0], others[1], others[2]
        create_topic(bootstrap, TOPIC, 1, 1)
        # 1 partition on `origin` only, some data on it.
        zk.client.create(
            "/admin/reassign_partitions",
            json.dumps(
                {
                    "version": 1,
                    "partitions": [{"topic": TOPIC, "partition": 0, "replicas": [origin]}],
                }
            ).encode(),
        )
        wait_for(lambda: done(zk, {0: [origin]}), timeout_s=60, what=f"p0 on {origin}")
        wait_for(lambda: not reassign_znode_exists(zk), what="znode removed")
        prod = producer(bootstrap)
        for i in range(200):
            prod.produce(TOPIC, value=f"r{i}".encode(), partition=0)
        assert prod.flush(60) == 0

        # Stop the target broker, ask to move to it, kill the controller meanwhile.
        pid = cluster.broker_pid(target_broker)
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            zk.client.create(
                "/admin/reassign_partitions",
                json.dumps(
                    {
                        "version": 1,
                        "partitions": [
                            {"topic": TOPIC, "partition": 0, "replicas": [target_broker]}
                        ],
                    }
                ).encode(),
            )
            wait_for(
                lambda: topic_znode(zk).get("adding_replicas", {}).get("0") == [target_broker],
                what="reassignment recorded in the topic znode",
            )
            assert topic_znode(zk)["removing_replicas"]["0"] == [origin]
            assert replicas(zk, 0) == [target_broker, origin]
            controller_pid = cluster.broker_pid(controller)
            assert controller_pid is not None
            os.kill(controller_pid, signal.SIGKILL)
            wait_for(
                lambda: zk.controller()[0] not in (None, controller),
                timeout_s=60,
                what="a new controller",
            )
            time.sleep(1)
            assert not done(zk, {0: [target_broker]})  # still waiting for the target
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_for(lambda: done(zk, {0: [target_broker]}), timeout_s=120, what="completed")
        wait_for(lambda: not reassign_znode_exists(zk), what="znode removed")
        wait_for(lambda: not partition_dir(cluster, origin, 0).exists(), what="origin dir gone")
        read = consume_all(cluster.bootstrap_servers([target_broker]), TOPIC, 1, expected=200)
        assert sorted(m.value() for m in read) == sorted(f"r{i}".encode() for i in range(200))

        # Cancel: a move to a stopped broker (not the controller), cancelled: reverted.
        # The CLI talks only to running brokers (a stopped one accepts TCP, never answers).
        new_controller = zk.controller()[0]
        spare = next(b for b in (spare, origin) if b != new_controller)
        bootstrap = cluster.bootstrap_servers([b for b in range(4) if b not in (spare, controller)])
        spare_pid = cluster.broker_pid(spare)
        assert spare_pid is not None
        plan = cluster.broker_dir(spare).parent / "cancel.json"
        plan.write_text(
            json.dumps(
                {
                    "version": 1,
                    "partitions": [{"topic": TOPIC, "partition": 0, "replicas": [spare]}],
                }
            )
        )
        os.kill(spare_pid, signal.SIGSTOP)
        try:
            run = subprocess.run(
                [*CLI, "--bootstrap-server", bootstrap, "--execute",
                 "--reassignment-json-file", str(plan)],
                capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            assert run.returncode == 0, run.stderr
            assert topic_znode(zk)["adding_replicas"]["0"] == [spare]
            listed = subprocess.run(
                [*CLI, "--bootstrap-server", bootstrap, "--list"],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert f"{TOPIC}-0: replicas: {spare},{target_broker}." in listed.stdout, listed.stdout
            cancel = subprocess.run(
                [*CLI, "--bootstrap-server", bootstrap, "--cancel",
                 "--reassignment-json-file", str(plan)],
                capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            assert cancel.returncode == 0, cancel.stderr
            assert f"Successfully cancelled partition reassignments for: {TOPIC}-0" in cancel.stdout
        finally:
            os.kill(spare_pid, signal.SIGCONT)
        wait_for(lambda: done(zk, {0: [target_broker]}), timeout_s=60, what="reverted")
        wait_for(lambda: not partition_dir(cluster, spare, 0).exists(), what="spare dir gone")
        # Cancelling again: nothing in progress.
        again = subprocess.run(
            [*CLI, "--bootstrap-server", bootstrap, "--cancel",
             "--reassignment-json-file", str(plan)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert again.returncode == 1
        assert "NO_REASSIGNMENT_IN_PROGRESS" in again.stderr
    finally:
        zk.close()


def test_bad_reassignments_change_nothing(cluster_factory) -> None:
    cluster = cluster_factory(2)
    bootstrap = cluster.bootstrap_servers()
    create_topic(bootstrap, TOPIC, 1, 2)
    zk = ZkView(cluster)
    try:
        before = topic_znode(zk)
        state = zk.partition_state(TOPIC, 0)
        plan = cluster.broker_dir(0).parent / "bad.json"
        cases = [
            ([{"topic": "nope", "partition": 0, "replicas": [0]}], "UNKNOWN_TOPIC_OR_PARTITION"),
            ([{"topic": TOPIC, "partition": 7, "replicas": [0]}], "UNKNOWN_TOPIC_OR_PARTITION"),
            ([{"topic": TOPIC, "partition": 0, "replicas": []}], "INVALID_REPLICA_ASSIGNMENT"),
            ([{"topic": TOPIC, "partition": 0, "replicas": [0, 0]}], "INVALID_REPLICA_ASSIGNMENT"),
            ([{"topic": TOPIC, "partition": 0, "replicas": [0, 5]}], "INVALID_REPLICA_ASSIGNMENT"),
        ]
        for partitions, error in cases:
            plan.write_text(json.dumps({"version": 1, "partitions": partitions}))
            run = subprocess.run(
                [*CLI, "--bootstrap-server", bootstrap, "--execute",
                 "--reassignment-json-file", str(plan)],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert run.returncode == 1, (partitions, run.stdout)
            assert error in run.stderr, (partitions, run.stderr)
            assert len(run.stderr.strip().splitlines()) == 1, run.stderr
        plan.write_text(
            json.dumps(
                {"version": 1, "partitions": [{"topic": TOPIC, "partition": 0, "replicas": [0, 5]}]}
            )
        )
        run = subprocess.run(
            [*CLI, "--bootstrap-server", bootstrap, "--execute", "--reassignment-json-file", str(plan)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert "brokers that are not alive" in run.stderr
        plan.write_text(
            json.dumps(
                {"version": 1, "partitions": [{"topic": TOPIC, "partition": 0, "replicas": [0, 1]}]}
            )
        )
        cancel = subprocess.run(
            [*CLI, "--bootstrap-server", bootstrap, "--cancel", "--reassignment-json-file", str(plan)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert cancel.returncode == 1 and "NO_REASSIGNMENT_IN_PROGRESS" in cancel.stderr
        # Through ZooKeeper: the bad entry is dropped, the znode removed, nothing changed.
        zk.client.create(
            "/admin/reassign_partitions",
            json.dumps(
                {"version": 1, "partitions": [{"topic": TOPIC, "partition": 0, "replicas": [9]}]}
            ).encode(),
        )
        wait_for(lambda: not reassign_znode_exists(zk), what="bad znode dropped")
        assert topic_znode(zk) == before
        assert zk.partition_state(TOPIC, 0)["leader_epoch"] == state["leader_epoch"]
    finally:
        zk.close()


def test_generate_prints_current_and_proposed_plans(cluster_factory, tmp_path: Path) -> None:
    cluster = cluster_factory(3)
    bootstrap = cluster.bootstrap_servers()
    create_topic(bootstrap, TOPIC, 4, 2)
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": TOPIC}]}))
    run = subprocess.run(
        [*CLI, "--bootstrap-server", bootstrap, "--generate",
         "--topics-to-move-json-file", str(topics), "--broker-list", "1,2"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    current = json.loads(lines[lines.index("Current partition replica assignment") + 1])
    proposed = json.loads(lines[lines.index("Proposed partition reassignment configuration") + 1])
    assert {(e["topic"], e["partition"]) for e in current["partitions"]} == {
        (TOPIC, p) for p in range(4)
    }
    assert len(proposed["partitions"]) == 4
    for e in proposed["partitions"]:
        assert sorted(e["replicas"]) == [1, 2]
    assert {e["replicas"][0] for e in proposed["partitions"]} == {1, 2}
