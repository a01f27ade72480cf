"""Broker memory at many partitions: RSS of each broker idle and after a little traffic.

    .venv/bin/python bench/memory.py [--partitions 10000] [--topics 10] [--settle 10] [--keep]

Issue 27 asks for the broker's RSS at 10,000 partitions, RF 3, stated in the README. A
3-broker LocalCluster with ``/metrics`` (as ``replog cluster up --console`` starts it);
``--partitions`` partitions at RF 3 in ``--topics`` topics, created two topics per
CreateTopics request as ``failover.py`` does. Each broker's ``VmRSS`` (and its split into
``RssAnon``, ``RssFile``), ``VmHWM`` (the peak) from ``/proc/<pid>/status``, and its open
file descriptors, read at these points:

1. **started**: the brokers up, no topic (only what start-up creates);
2. **created, idle**: every partition led (ZooKeeper) and every broker's LeaderAndIsr for
   them acknowledged (the controller's log line), then ``--settle`` seconds idle;
3. **scraped**: after one ``/metrics`` scrape of each broker (the console scrapes once a
   second; the log gauges' text is cached per partition), ``--settle`` seconds later;
4. **after traffic**: one 100-byte record to every partition (confluent-kafka,
   ``acks=all``), every record read back by one consumer assigned all partitions at offset
   0, then ``--settle`` seconds idle.

Also timed: the creation (the first CreateTopics to every partition led, and to every
LeaderAndIsr acknowledged), the produce and the read. ZooKeeper's RSS is printed beside.
Nothing is asserted; prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.request
from pathlib import Path
from typing import Any

from common import create_partitions, replog_cluster, say, work_dir
from failover import wait_all_led, wait_creation_acked

from replog.cluster.launcher import LocalCluster

STATUS_FIELDS = ("VmRSS", "RssAnon", "RssFile", "VmHWM")


def memory_of(pid: int) -> dict[str, int]:
    """``STATUS_FIELDS`` of ``/proc/<pid>/status`` in KiB, and ``fds``: open descriptors."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in STATUS_FIELDS:
            out[name] = int(value.split()[0])
    out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    return out


def snapshot(cluster: LocalCluster, label: str) -> dict[str, Any]:
    brokers = {}
    for b in cluster.broker_ids:
        pid = cluster.broker_pid(b)
        assert pid is not None, f"broker {b} is not running"
        brokers[b] = memory_of(pid)
    zookeeper = next((pid for name, pid in cluster.live_processes() if "zookeeper" in name), None)
    row = {
        "point": label,
        "brokers": brokers,
        "zookeeper": memory_of(zookeeper) if zookeeper else None,
        "loadavg": Path("/proc/loadavg").read_text().strip(),
    }
    say(
        f"  {label}: VmRSS "
        + ", ".join(f"broker {b} {m['VmRSS'] / 1024:.0f} MiB" for b, m in brokers.items())
    )
    return row


def produce_everywhere(bootstrap: str, topics: list[str], per_topic: int) -> float:
    """One 100-byte record to each partition, acks=all; seconds until all acknowledged."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "log_level": 3}
    )
    failed: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    value = b"m" * 100
    started = time.perf_counter()
    for topic in topics:
        for p in range(per_topic):
            while True:
                try:
                    producer.produce(topic, value, partition=p, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.poll(0)
    left = producer.flush(600)
    took = time.perf_counter() - started
    if left or failed:
        raise RuntimeError(f"{left} records unacknowledged, {len(failed)} failed: {failed[:3]}")
    return took


def read_everything(bootstrap: str, topics: list[str], per_topic: int) -> float:
    """Every partition from offset 0 (assign, no group) until one record from each."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-memory",
            "enable.auto.commit": False,
            "log_level": 3,
        }
    )
    try:
        consumer.assign([TopicPartition(t, p, 0) for t in topics for p in range(per_topic)])
        want = len(topics) * per_topic
        seen: set[tuple[str, int]] = set()
        started = time.perf_counter()
        deadline = time.monotonic() + 600
        while len(seen) < want:
            for m in consumer.consume(num_messages=10_000, timeout=1.0):
                if m.error() is None:
                    seen.add((m.topic(), m.partition()))
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {len(seen)} of {want} partitions in 600 s")
        return time.perf_counter() - started
    finally:
        consumer.close()


def scrape(url: str) -> int:
    with urllib.request.urlopen(url, timeout=120) as response:
        return len(response.read())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--settle", type=float, default=10.0, help="idle seconds before a reading")
    parser.add_argument("--keep", action="store_true", help="keep bench/out/memory-*")
    args = parser.parse_args()
    command = (
        f".venv/bin/python bench/memory.py --partitions {args.partitions} --topics {args.topics}"
    )
    from kazoo.client import KazooClient

    per_topic = args.partitions // args.topics
    topics = [f"memory-{i:02d}" for i in range(args.topics)]
    points: list[dict[str, Any]] = []
    timing: dict[str, float] = {}
    with (
        work_dir("memory", keep=args.keep) as out,
        replog_cluster(out, 3, metrics=True) as cluster,
    ):
        bootstrap = cluster.bootstrap_servers()
        time.sleep(args.settle)
        points.append(snapshot(cluster, "started"))
        zk = KazooClient(hosts=cluster.zookeeper_connect, timeout=30)
        zk.start(timeout=30)
        try:
            say(f"creating {per_topic * len(topics):,} partitions (RF 3) in {len(topics)} topics")
            started = time.time()
            create_partitions(bootstrap, topics, per_topic)
            wait_all_led(zk, [(t, p) for t in topics for p in range(per_topic)], 1800)
            timing["created_led_s"] = time.time() - started
            timing["created_acked_s"] = wait_creation_acked(cluster, topics, 1800) - started
        finally:
            zk.stop()
            zk.close()
        say(
            f"  led after {timing['created_led_s']:.1f} s, every LeaderAndIsr acknowledged "
            f"after {timing['created_acked_s']:.1f} s"
        )
        time.sleep(args.settle)
        points.append(snapshot(cluster, "created, idle"))
        for b in cluster.broker_ids:
            url = cluster.metrics_url(b)
            if url is not None:
                t0 = time.perf_counter()
                size = scrape(url)
                say(
                    f"  broker {b}: /metrics {size / 1e6:.1f} MB in {time.perf_counter() - t0:.2f} s"
                )
        time.sleep(args.settle)
        points.append(snapshot(cluster, "scraped"))
        say("one record to every partition, then read back ...")
        timing["produce_s"] = produce_everywhere(bootstrap, topics, per_topic)
        timing["read_s"] = read_everything(bootstrap, topics, per_topic)
        say(f"  produced in {timing['produce_s']:.1f} s, read in {timing['read_s']:.1f} s")
        time.sleep(args.settle)
        points.append(snapshot(cluster, "after traffic"))
    report(command, args, points, timing)


def report(
    command: str, args: argparse.Namespace, points: list[dict[str, Any]], timing: dict[str, float]
) -> None:
    n = (args.partitions // args.topics) * args.topics
    print(f"\nbroker memory, 3 brokers, {n:,} partitions RF 3 ({args.topics} topics)")
    print(f"command: {command}")
    print(
        f"creation: every partition led after {timing['created_led_s']:.1f} s, every "
        f"LeaderAndIsr acknowledged after {timing['created_acked_s']:.1f} s; traffic: "
        f"{n:,} records produced (acks=all) in {timing['produce_s']:.1f} s, read in "
        f"{timing['read_s']:.1f} s"
    )
    print(
        f"{'point':<16}{'broker':>7}{'VmRSS MiB':>11}{'anon':>8}{'file':>8}{'VmHWM':>8}"
        f"{'fds':>7}  loadavg"
    )
    for row in points:
        for b, m in row["brokers"].items():
            print(
                f"{row['point']:<16}{b:>7}{m['VmRSS'] / 1024:>11.0f}{m['RssAnon'] / 1024:>8.0f}"
                f"{m['RssFile'] / 1024:>8.0f}{m['VmHWM'] / 1024:>8.0f}{m['fds']:>7}  "
                f"{row['loadavg']}"
            )
        if row["zookeeper"]:
            print(f"{'':<16}{'zk':>7}{row['zookeeper']['VmRSS'] / 1024:>11.0f}")
    print(json.dumps({"bench": "memory", "partitions": n, "timing": timing, "points": points}))


if __name__ == "__main__":
    main()
