"""Reassignment of a big partition to a new broker, with and without a throttle, and the
acks=all p99 of producers on another topic meanwhile.

    .venv/bin/python bench/reassign.py [--mb 256] [--throttle-mb 10] [--rate 200]

3 brokers. Topic ``big``: one partition, RF 1, on broker 0, filled with ``--mb`` MB
(64 KB records). Topic ``load``: 3 partitions, RF 2, ``min.insync.replicas=2``; a
confluent-kafka producer in its own process sends ``--rate`` 1 KB records/s at acks=all
and keeps each record's send-to-ack latency with its send time. Then:

1. baseline: 10 s with no reassignment;
2. ``replog reassign --execute --wait`` moves ``big`` from broker 0 to broker 1, unthrottled;
3. the same from broker 1 to broker 2 with ``--throttle`` ``--throttle-mb`` MB/s, then
   ``--verify`` removes the throttle.

For each: the time ``--execute --wait`` took (AlterPartitionReassignments until the
controller lists no reassignment) and the load's ack latency p50 / p99 / max over records
sent while it ran.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import common
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

RECORD = 65536


def run_producer(bootstrap: str, rate: float, out: Path) -> None:
    stop = False

    def on_term(_sig: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 1,
            "message.timeout.ms": 120000,
        },
        logger=common.quiet_logger(out.with_suffix(".client.log")),
    )
    samples: list[tuple[float, float]] = []
    errors: list[str] = []
    payload = b"x" * 1024

    def report(sent_wall: float, sent: float):
        def on_delivery(err: object, _msg: object) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                samples.append((sent_wall, time.monotonic() - sent))

        return on_delivery

    interval = 1.0 / rate
    next_at = time.monotonic()
    while not stop:
        producer.produce("load", payload, on_delivery=report(time.time(), time.monotonic()))
        next_at += interval
        # poll() returns as soon as it served a callback: keep polling until the next send.
        while (left := next_at - time.monotonic()) > 0 and not stop:
            producer.poll(left)
    producer.flush(120)
    out.write_text(json.dumps({"samples": samples, "errors": errors}))


def fill(bootstrap: str, mb: int) -> float:
    started = time.monotonic()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "message.max.bytes": 1_000_000,
        }
    )
    payload = os.urandom(RECORD)  # incompressible, and no compression configured anyway
    for _ in range(mb * 1024 * 1024 // RECORD):
        while True:
            try:
                producer.produce("big", payload, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(300) == 0
    return time.monotonic() - started


def reassign(bootstrap: str, wd: Path, target: int, throttle: int | None) -> tuple[float, str]:
    plan = wd / f"to-{target}.json"
    plan.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": "big", "partition": 0, "replicas": [target]}]}
        )
    )
    cli = [sys.executable, "-m", "replog.cli.main", "reassign", "--bootstrap-server", bootstrap]
    extra = ["--throttle", str(throttle)] if throttle is not None else []
    started = time.monotonic()
    done = subprocess.run(
        [*cli, "--execute", "--wait", "--reassignment-json-file", str(plan), *extra],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    took = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"reassign failed: {done.stderr.strip()}")
    verify = subprocess.run(
        [*cli, "--verify", "--reassignment-json-file", str(plan)], capture_output=True, text=True
    )
    return took, verify.stdout.strip().splitlines()[-1]


def summary(samples: list[tuple[float, float]], start: float, end: float) -> str:
    values = sorted(lat * 1000 for sent, lat in samples if start <= sent <= end)
    if not values:
        return "no samples"
    p50 = common.percentile(values, 0.50)
    p99 = common.percentile(values, 0.99)
    return f"{len(values)} acks, p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {values[-1]:.1f} ms"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--throttle-mb", type=float, default=10)
    ap.add_argument("--rate", type=float, default=200)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--producer", nargs=2, metavar=("BOOTSTRAP", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.producer:
        run_producer(args.producer[0], args.rate, Path(args.producer[1]))
        return
    print(
        f"command: .venv/bin/python bench/reassign.py --mb {args.mb} "
        f"--throttle-mb {args.throttle_mb:g} --rate {args.rate:g}"
    )
    throttle = int(args.throttle_mb * 1024 * 1024)
    with (
        common.work_dir("reassign", keep=args.keep) as wd,
        common.replog_cluster(wd / "c", 3, {"message.max.bytes": "2000000"}) as cluster,
    ):
        bootstrap = cluster.bootstrap_servers()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("big", 1, replica_assignment=[[0]])])["big"].result(60)
        common.create_topic(bootstrap, "load", 3, 2, {"min.insync.replicas": "2"})
        common.say(f"filling big-0 with {args.mb} MB ...")
        fill_s = fill(bootstrap, args.mb)
        common.say(f"  {fill_s:.1f} s")
        out = wd / "load.json"
        load = subprocess.Popen(
            [sys.executable, __file__, "--rate", str(args.rate), "--producer", bootstrap, str(out)],
            cwd=common.REPO,
        )
        windows = {}
        try:
            time.sleep(3)
            t0 = time.time()
            time.sleep(10)
            windows["baseline (no reassignment), 10 s"] = (t0, time.time(), None, "")
            common.say("reassigning big-0 0 -> 1, unthrottled ...")
            t0 = time.time()
            took, last = reassign(bootstrap, wd, 1, None)
            windows["0 -> 1 unthrottled"] = (t0, time.time(), took, last)
            time.sleep(3)
            common.say(f"reassigning big-0 1 -> 2, throttle {args.throttle_mb:g} MB/s ...")
            t0 = time.time()
            took, last = reassign(bootstrap, wd, 2, throttle)
            windows[f"1 -> 2 throttled {args.throttle_mb:g} MB/s"] = (t0, time.time(), took, last)
            time.sleep(2)
        finally:
            os.kill(load.pid, signal.SIGTERM)
            load.wait(180)
        result = json.loads(out.read_text())
    print(f"\nreassignment of one {args.mb} MB partition (RF 1) to a new broker, 3 brokers")
    print(f"load: {args.rate:g} x 1 KB records/s, acks=all, topic 'load' RF 2 min.insync 2")
    print(f"load errors: {len(result['errors'])}")
    for label, (start, end, took, last) in windows.items():
        head = f"{label:<34}" + (f"{took:7.1f} s" if took is not None else " " * 9)
        rate = f"  ({args.mb / took:.1f} MB/s)" if took else ""
        print(f"{head}{rate}  load: {summary(result['samples'], start, end)}")
        if last:
            print(f"    verify: {last}")


if __name__ == "__main__":
    main()
