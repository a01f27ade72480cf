"""Rolling restart of 4 brokers under a steady acks=all load: errors, lost records, stalls.

    .venv/bin/python bench/rolling_restart.py [--partitions 8] [--rate 100] [--warm-up 5]

4 brokers (LocalCluster), a topic with RF 3 and ``min.insync.replicas=2``. A confluent-kafka
producer in its own process (``acks=all``, idempotent, ``linger.ms=5``) sends ``--rate``
records/s to every partition and records the wall-clock time of every acknowledgement per
partition. After ``--warm-up`` seconds, ``replog cluster roll --dir DIR`` (the CLI itself)
restarts every broker in turn through a controlled shutdown, waiting for full ISRs between
brokers. Then the producer stops and flushes, everything is read back, and the script
prints: producer errors, acknowledged records not read back (lost), and per partition the
longest gap between consecutive acknowledgements during the roll (Kafka's controlled
shutdown is the reference: goal <= 1 s).
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
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

TOPIC = "rolling"


def run_producer(bootstrap: str, partitions: int, rate: float, out: Path) -> None:
    """The load, in its own process: until SIGTERM, then flush and write the acks."""
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
            "linger.ms": 5,
            "message.timeout.ms": 120000,
            "topic.metadata.refresh.interval.ms": 1000,
            "retry.backoff.ms": 50,
        },
        logger=common.quiet_logger(out.with_suffix(".client.log")),
    )
    acks: dict[int, list[tuple[float, str]]] = {p: [] for p in range(partitions)}
    errors: list[str] = []

    def on_delivery(err: object, msg: object) -> None:
        now = time.time()
        if err is not None:
            errors.append(str(err))
        else:
            acks[msg.partition()].append((now, msg.value().decode()))  # type: ignore[attr-defined]

    interval = 1.0 / rate
    seq = 0
    next_at = time.monotonic()
    while not stop:
        for p in range(partitions):
            producer.produce(TOPIC, f"{p}:{seq}".encode(), partition=p, on_delivery=on_delivery)
        seq += 1
        next_at += interval
        # poll() returns as soon as it served a callback: keep polling until the next send.
        while (left := next_at - time.monotonic()) > 0 and not stop:
            producer.poll(left)
    left = producer.flush(120)
    out.write_text(json.dumps({"acks": acks, "errors": errors, "unflushed": left, "sent": seq}))


def high_watermark(consumer: Consumer, partition: int) -> int:
    """A new leader answers OFFSET_NOT_AVAILABLE until its HW caught up (KIP-207): retry."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), timeout=30)[1]
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def read_back(bootstrap: str, partitions: int) -> set[str]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-roll", "enable.auto.commit": False}
    )
    try:
        ends = {p: high_watermark(consumer, p) for p in range(partitions)}
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
        seen: set[str] = set()
        position = dict.fromkeys(range(partitions), 0)
        deadline = time.monotonic() + 120
        while any(position[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            seen.add(msg.value().decode())
            position[msg.partition()] = msg.offset() + 1
        return seen
    finally:
        consumer.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--rate", type=float, default=100, help="records/s per partition")
    ap.add_argument("--warm-up", type=float, default=5)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--producer", nargs=2, metavar=("BOOTSTRAP", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.producer:
        run_producer(args.producer[0], args.partitions, args.rate, Path(args.producer[1]))
        return
    print("command: .venv/bin/python bench/" + " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]))
    with (
        common.work_dir("roll", keep=args.keep) as wd,
        common.replog_cluster(wd / "c", 4) as cluster,
    ):
        bootstrap = cluster.bootstrap_servers()
        common.create_topic(bootstrap, TOPIC, args.partitions, 3, {"min.insync.replicas": "2"})
        cluster.wait_full_isr(60)
        out = wd / "acks.json"
        load = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--partitions",
                str(args.partitions),
                "--rate",
                str(args.rate),
                "--producer",
                bootstrap,
                str(out),
            ],
            cwd=common.REPO,
        )
        try:
            time.sleep(args.warm_up)
            roll_started = time.time()
            common.say("rolling ...")
            roll = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "replog.cli.main",
                    "cluster",
                    "roll",
                    "--dir",
                    str(cluster.dir),
                ],
                capture_output=True,
                text=True,
                timeout=900,
            )
            roll_ended = time.time()
            for line in roll.stdout.splitlines():
                common.say("  " + line)
            if roll.returncode != 0:
                common.say("roll failed: " + roll.stderr.strip())
            time.sleep(2)
        finally:
            os.kill(load.pid, signal.SIGTERM)
            load.wait(180)
        result = json.loads(out.read_text())
        acked = {v for values in result["acks"].values() for _, v in values}
        read = read_back(bootstrap, args.partitions)
        lost = acked - read
        gaps = {}
        for p, values in result["acks"].items():
            times = [t for t, _ in values if roll_started - 1 <= t <= roll_ended + 1]
            gaps[int(p)] = max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0)
    print(f"roll: exit {roll.returncode}, {roll_ended - roll_started:.1f} s for 4 brokers")
    print(
        f"records sent {result['sent'] * args.partitions}, acknowledged {len(acked)}, "
        f"producer errors {len(result['errors'])}, unflushed {result['unflushed']}, lost {len(lost)}"
    )
    if result["errors"]:
        print("first errors: " + "; ".join(sorted(set(result["errors"]))[:3]))
    ordered = sorted(gaps.values())
    print(
        "longest ack gap per partition during the roll (s): "
        + " ".join(f"p{p}={g:.3f}" for p, g in sorted(gaps.items()))
    )
    print(
        f"worst {ordered[-1]:.3f} s, median {common.median(ordered):.3f} s "
        f"(goal <= 1 s; load {args.rate:.0f} records/s per partition)"
    )


if __name__ == "__main__":
    main()
