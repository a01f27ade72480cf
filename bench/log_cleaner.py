"""Log cleaner throughput over a big dirty log, and a producer's ack latency meanwhile.

    .venv/bin/python bench/log_cleaner.py [--gb 1] [--keys 10000] [--value-size 1000]
                                          [--rate 500] [--segment-mb 64] [--keep]

One broker (``log.cleaner.backoff.ms=1000``, the other log.cleaner settings at Kafka's
defaults: one thread, 128 MiB dedupe buffer, no I/O throttle). Topic ``table``: one
partition, ``cleanup.policy=compact``, ``segment.bytes`` ``--segment-mb`` MiB, filled with
``--gb`` GiB of ``--value-size``-byte records over ``--keys`` keys, while
``min.cleanable.dirty.ratio=1.0`` holds the cleaner off. A producer in its own process
(confluent-kafka, acks=all, idempotent, ``linger.ms=1``) then sends ``--rate`` keyed records/s
of the same shape into ``table`` and keeps each record's send-to-ack latency:

1. baseline: 15 s with no cleaning (the same topic, the same load);
2. ``min.cleanable.dirty.ratio`` set to 0.5 (IncrementalAlterConfigs): the cleaner cleans the
   whole closed part of the log in one pass. Its window runs from the broker's
   ``beginning cleaning`` line to its ``cleaned in`` line (polled every 0.1 s).

Prints the cleaner's own figures (the broker's ``cleaned in`` line: the size of the closed
segments it rewrote, the seconds, records kept) with the throughput as log MiB cleaned per
second, and the load's ack latency p50 / p99 / max in each window.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import common
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

TOPIC = "table"
MIB = 1024 * 1024
SUMMARY = re.compile(
    r"table-0: cleaned in ([\d.]+) s: offset map of (\d+) records \(([\d.]+) MB\) in ([\d.]+) s, "
    r"(\d+)/(\d+) records kept, ([\d.]+) MB -> ([\d.]+) MB, ([\d.]+) MB/s read"
)


def run_producer(bootstrap: str, rate: float, keys: int, size: int, out: Path) -> None:
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
    payload = os.urandom(size)

    def report(sent_wall: float, sent: float):
        def on_delivery(err: object, _msg: object) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                samples.append((sent_wall, time.monotonic() - sent))

        return on_delivery

    interval = 1.0 / rate
    next_at = time.monotonic()
    i = 0
    while not stop:
        key = b"key-%06d" % (i % keys)
        producer.produce(TOPIC, payload, key=key, on_delivery=report(time.time(), time.monotonic()))
        i += 1
        next_at += interval
        while (left := next_at - time.monotonic()) > 0 and not stop:
            producer.poll(left)
    producer.flush(120)
    out.write_text(json.dumps({"samples": samples, "errors": errors}))


def fill(bootstrap: str, total: int, keys: int, size: int) -> float:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "linger.ms": 20,
            "batch.size": 1_000_000,
        }
    )
    payload = os.urandom(size)
    started = time.monotonic()
    for i in range(total // size):
        while True:
            try:
                producer.produce(TOPIC, payload, key=b"key-%06d" % (i % keys), partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(600) == 0
    return time.monotonic() - started


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.glob("*.log"))


def lines(broker_log: Path, pattern: str) -> list[str]:
    try:
        text = broker_log.read_text(errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if pattern in line]


def summary(samples: list[tuple[float, float]], start: float, end: float) -> str:
    values = sorted(lat * 1000 for sent, lat in samples if start <= sent <= end)
    if not values:
        return "no samples"
    p50 = common.percentile(values, 0.50)
    p99 = common.percentile(values, 0.99)
    return f"{len(values):6d} acks, p50 {p50:6.1f} ms, p99 {p99:7.1f} ms, max {values[-1]:7.1f} ms"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=1.0, help="GiB of dirty log to fill")
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--value-size", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=500, help="load records/s")
    ap.add_argument("--segment-mb", type=int, default=64)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--producer", nargs=2, metavar=("BOOTSTRAP", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.producer:
        run_producer(
            args.producer[0], args.rate, args.keys, args.value_size, Path(args.producer[1])
        )
        return
    command = (
        f".venv/bin/python bench/log_cleaner.py --gb {args.gb:g} --keys {args.keys} "
        f"--value-size {args.value_size} --rate {args.rate:g} --segment-mb {args.segment_mb}"
    )
    print(f"command: {command}")
    with (
        common.work_dir("log-cleaner", keep=args.keep) as wd,
        common.replog_cluster(wd / "c", 1, {"log.cleaner.backoff.ms": "1000"}) as cluster,
    ):
        bootstrap = cluster.bootstrap_servers()
        broker_log = cluster.broker_dir(0) / "broker.log"
        partition = cluster.broker_dir(0) / "data" / f"{TOPIC}-0"
        common.create_topic(
            bootstrap,
            TOPIC,
            1,
            1,
            {
                "cleanup.policy": "compact",
                "segment.bytes": str(args.segment_mb * MIB),
                "min.cleanable.dirty.ratio": "1.0",  # held off while filling
            },
        )
        total = int(args.gb * 1024 * MIB)
        common.say(f"filling {TOPIC}-0 with {total / MIB:.0f} MiB over {args.keys} keys ...")
        fill_s = fill(bootstrap, total, args.keys, args.value_size)
        before = dir_size(partition)
        common.say(f"  {fill_s:.1f} s, {before / MIB:.0f} MiB on disk")
        out = wd / "load.json"
        load = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--rate",
                str(args.rate),
                "--keys",
                str(args.keys),
                "--value-size",
                str(args.value_size),
                "--producer",
                bootstrap,
                str(out),
            ],
            cwd=common.REPO,
        )
        windows: dict[str, tuple[float, float]] = {}
        try:
            time.sleep(3)
            t0 = time.time()
            time.sleep(15)
            windows["baseline, no cleaning (15 s)"] = (t0, time.time())
            began = len(lines(broker_log, f"{TOPIC}-0: beginning cleaning"))
            done = len(lines(broker_log, f"{TOPIC}-0: cleaned in"))
            admin = AdminClient({"bootstrap.servers": bootstrap})
            resource = ConfigResource(
                ConfigResource.Type.TOPIC,
                TOPIC,
                incremental_configs=[
                    ConfigEntry(
                        "min.cleanable.dirty.ratio",
                        "0.5",
                        incremental_operation=AlterConfigOpType.SET,
                    )
                ],
            )
            for future in admin.incremental_alter_configs([resource]).values():
                future.result(60)
            del admin  # no client left to complain when the broker stops
            common.say("cleaning enabled (min.cleanable.dirty.ratio=0.5) ...")
            deadline = time.monotonic() + 3600
            while len(lines(broker_log, f"{TOPIC}-0: beginning cleaning")) == began:
                assert time.monotonic() < deadline, "the cleaner never began"
                time.sleep(0.1)
            start = time.time()
            while len(lines(broker_log, f"{TOPIC}-0: cleaned in")) == done:
                assert time.monotonic() < deadline, "the cleaning never ended"
                time.sleep(0.1)
            windows["while the cleaner runs"] = (start, time.time())
            time.sleep(1)
        finally:
            os.kill(load.pid, signal.SIGTERM)
            load.wait(180)
        after = dir_size(partition)
        stats = SUMMARY.search(lines(broker_log, f"{TOPIC}-0: cleaned in")[done])
        result = json.loads(out.read_text())
    assert stats is not None
    elapsed, map_records, map_mb, map_s, kept, read, rewrite_mb, out_mb, read_rate = stats.groups()
    print(
        f"\none broker; topic {TOPIC}: {args.keys} keys, {args.value_size} B values, "
        f"segment.bytes {args.segment_mb} MiB; filled in {fill_s:.1f} s"
    )
    print(f"log on disk: {before / MIB:.0f} MiB before, {after / MIB:.1f} MiB after")
    print(
        f"cleaning: {float(rewrite_mb):.0f} MiB of closed segments in {float(elapsed):.1f} s "
        f"= {float(rewrite_mb) / float(elapsed):.1f} MiB/s "
        f"(offset map: {int(map_records):,} records, {float(map_mb):.0f} MiB in "
        f"{float(map_s):.1f} s; kept {int(kept):,} of {int(read):,} records, "
        f"{float(out_mb):.1f} MiB written; {float(read_rate):.1f} MiB/s read in all)"
    )
    print(
        f"load: {args.rate:g} keyed records/s into {TOPIC}, acks=all; errors: {len(result['errors'])}"
    )
    for label, (start, end) in windows.items():
        print(f"  {label:<30} {end - start:6.1f} s  {summary(result['samples'], start, end)}")


if __name__ == "__main__":
    main()
