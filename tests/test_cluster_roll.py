"""``replog cluster roll`` on real processes: every broker restarted in turn through a
controlled shutdown under a confluent-kafka acks=all load (no producer error, every
acknowledged record read back, full ISRs at the end), and a one-line failure when a
broker of the cluster is not running. The stall bound is measured in
``bench/rolling_restart.py``, not asserted here.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import defaultdict

import pytest

from cluster_util import consume_all, create_topic, producer, wait_for

pytestmark = pytest.mark.timeout(600)

REPLOG = [sys.executable, "-m", "replog.cli.main"]
TOPIC = "rolled"
PARTITIONS = 3


class Load:
    """acks=all records to every partition on a thread; delivery reports kept."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = producer(bootstrap)
        self.acked: dict[int, list[bytes]] = defaultdict(list)
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked[msg.partition()].append(msg.value())

    def _run(self) -> None:
        sent = 0
        while not self._stop.is_set():
            for p in range(PARTITIONS):
                self.producer.produce(
                    TOPIC, str(sent).encode(), partition=p, on_delivery=self._on_delivery
                )
                sent += 1
            self.producer.poll(0)
            time.sleep(0.01)
        self.producer.flush(120)

    def count(self) -> int:
        return sum(len(self.acked.get(p, ())) for p in range(PARTITIONS))

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(150)


def test_roll_restarts_every_broker_under_load(cluster_factory) -> None:
    cluster = cluster_factory(3)
    bootstrap = cluster.bootstrap_servers()
    create_topic(bootstrap, TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    cluster.wait_full_isr(60)
    pids_before = {b: cluster.broker_pid(b) for b in cluster.broker_ids}
    with Load(bootstrap) as load:
        wait_for(lambda: load.count() >= 50, what="the load flowing")
        done = subprocess.run(
            [*REPLOG, "cluster", "roll", "--dir", str(cluster.dir)],
            capture_output=True,
            text=True,
            timeout=500,
        )
        mark = load.count()  # records keep being acknowledged by the rolled brokers
        wait_for(lambda: load.count() >= mark + 50, what="acks after the roll")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for broker_id in cluster.broker_ids:
        assert any(f"stopping broker {broker_id}" in line for line in lines), done.stdout
    assert "every ISR full again" in lines[-2] and lines[-1].startswith("rolled 3 brokers")
    # Every broker is a new process.
    assert all(cluster.broker_pid(b) != pids_before[b] for b in cluster.broker_ids)
    assert cluster.under_replicated() == []
    assert load.errors == []
    acked = {v for values in load.acked.values() for v in values}
    assert len(acked) > 100
    read = {m.value() for m in consume_all(bootstrap, TOPIC, PARTITIONS, expected=None)}
    assert acked <= read


def test_roll_refuses_with_a_broker_down(cluster_factory) -> None:
    cluster = cluster_factory(2)
    cluster.kill_broker(1)
    done = subprocess.run(
        [*REPLOG, "cluster", "roll", "--dir", str(cluster.dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "replog: roll failed: broker 1 is not running; start it before a roll"
    ]
    assert done.stdout == ""
