"""What replication costs: acks=all throughput RF 3 vs RF 1, and end-to-end latency.

    .venv/bin/python bench/replication.py [--records 300000] [--size 1024] [--runs 3]
                                          [--partitions 3] [--rate-mb 10] [--seconds 20]

3 brokers (a LocalCluster). Prints:

1. **Throughput.** The same confluent-kafka producer (``acks=all``, ``linger.ms=5``) sends
   ``--records`` records of ``--size`` bytes as fast as it can to a fresh topic with RF 3
   and ``min.insync.replicas=2``, then to one with RF 1 (``--partitions`` each, runs
   alternating). Medians and the ratio RF 3 / RF 1.
2. **End-to-end latency** at a steady ``--rate-mb`` MB/s into the RF 3 topic (``acks=all``,
   ``linger.ms=1``): each record carries its send time; a consumer in another process
   (assign at the log end, no group) takes the receive time. A consumer sees a record only
   once the high watermark passed it, so this includes replication to the ISR. If the
   machine cannot hold the rate (the producer falls behind its schedule or the consumer
   has not received everything 5 s after the last send), the rate is halved and the
   measurement repeated; the rate used is printed. The first 3 s are not counted.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import struct
import time
import uuid
from collections import defaultdict
from typing import Any

from common import (
    create_topic,
    median,
    percentile,
    produce_burst,
    replog_cluster,
    say,
    work_dir,
)

WARM_UP_S = 3.0
DRAIN_S = 5.0


def throughput(args: argparse.Namespace, bootstrap: str) -> dict[int, list[float]]:
    """Seconds per run to produce ``args.records`` with acks=all, by replication factor."""
    seconds: dict[int, list[float]] = defaultdict(list)
    config = {"acks": "all", "linger.ms": 5, "compression.type": "none"}
    for run in range(args.runs):
        for rf in (3, 1):
            topic = f"throughput-rf{rf}-{uuid.uuid4().hex[:6]}"
            configs = {"min.insync.replicas": "2"} if rf == 3 else {}
            create_topic(bootstrap, topic, args.partitions, rf, configs)
            took = produce_burst(bootstrap, topic, args.records, args.size, config, args.partitions)
            seconds[rf].append(took)
            say(
                f"run {run + 1}/{args.runs} RF {rf}: {args.records / took:9,.0f} rec/s "
                f"{args.records * args.size / took / 1e6:7.1f} MB/s"
            )
    return seconds


def consumer_process(
    bootstrap: str, topic: str, offsets: dict[int, int], ready: Any, stop: Any, conn: Any
) -> None:
    """Child process: receive records, send back (send time, receive time) pairs."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "replog-bench-latency",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
            "fetch.min.bytes": 1,
        }
    )
    consumer.assign([TopicPartition(topic, p, o) for p, o in offsets.items()])
    consumer.consume(num_messages=1, timeout=0.5)
    ready.set()
    pairs: list[tuple[float, float]] = []
    unpack = struct.Struct("d").unpack_from
    while not stop.is_set():
        messages = consumer.consume(num_messages=2000, timeout=0.1)
        now = time.time()
        for m in messages:
            if m.error() is None:
                pairs.append((unpack(m.value())[0], now))
    consumer.close()
    conn.send(pairs)
    conn.close()


def latency_run(
    bootstrap: str, topic: str, partitions: int, rate: float, seconds: float, size: int
) -> dict[str, Any]:
    """Send ``rate`` records/s for ``seconds``; latency percentiles and whether it kept up."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "replog-bench-probe"})
    offsets = {
        p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
        for p in range(partitions)
    }
    probe.close()
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    receiver, sender = ctx.Pipe(duplex=False)
    child = ctx.Process(
        target=consumer_process, args=(bootstrap, topic, offsets, ready, stop, sender)
    )
    child.start()
    try:
        if not ready.wait(60):
            raise RuntimeError("the consumer process did not start")
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 1,
                "enable.idempotence": True,
            }
        )
        padding = b"x" * max(0, size - 8)
        pack = struct.Struct("d").pack
        total = int(rate * seconds)
        start = time.time()
        sent = 0
        while sent < total:
            due = min(total, int((time.time() - start) * rate) + 1)
            while sent < due:
                try:
                    producer.produce(
                        topic, pack(time.time()) + padding, partition=sent % partitions
                    )
                    sent += 1
                except BufferError:
                    producer.poll(0.01)
            producer.poll(max(0.0, start + sent / rate - time.time()))
        last_send = time.time()
        behind_s = last_send - (start + total / rate)
        left = producer.flush(60)
        time.sleep(DRAIN_S)
        stop.set()
        if not receiver.poll(60):
            raise RuntimeError("no result from the consumer process")
        pairs = receiver.recv()
    finally:
        stop.set()
        child.join(30)
        if child.is_alive():
            child.kill()
            child.join()
    counted = sorted(recv - sent_at for sent_at, recv in pairs if sent_at >= start + WARM_UP_S)
    received_all = len(pairs) >= total and left == 0
    return {
        "rate": rate,
        "sent": total,
        "received": len(pairs),
        "behind_s": behind_s,
        "steady": received_all and behind_s < 0.5,
        "p50_ms": percentile(counted, 0.50) * 1000,
        "p99_ms": percentile(counted, 0.99) * 1000,
        "max_ms": (counted[-1] if counted else float("nan")) * 1000,
        "samples": len(counted),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rate-mb", type=float, default=10.0, help="target MB/s for latency")
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    with work_dir("replication") as out, replog_cluster(out, 3) as cluster:
        bootstrap = cluster.bootstrap_servers()
        seconds = throughput(args, bootstrap)
        topic = f"latency-{uuid.uuid4().hex[:6]}"
        create_topic(bootstrap, topic, args.partitions, 3, {"min.insync.replicas": "2"})
        rate_mb = args.rate_mb
        tried = []
        while True:
            rate = rate_mb * 1e6 / args.size
            say(f"latency at {rate_mb:g} MB/s ({rate:,.0f} records/s) for {args.seconds:g} s ...")
            result = latency_run(bootstrap, topic, args.partitions, rate, args.seconds, args.size)
            result["rate_mb"] = rate_mb
            tried.append(result)
            say(
                f"  sent {result['sent']:,}, received {result['received']:,}, producer behind "
                f"{result['behind_s']:.2f} s, p50 {result['p50_ms']:.1f} ms, p99 "
                f"{result['p99_ms']:.1f} ms: {'steady' if result['steady'] else 'NOT steady'}"
            )
            if result["steady"] or rate_mb < 0.5:
                break
            rate_mb /= 2
    rf3, rf1 = median(seconds[3]), median(seconds[1])
    mb = args.records * args.size / 1e6
    print(
        f"\nreplication cost, 3 brokers, {args.partitions} partitions, {args.size}-byte records, "
        f"confluent-kafka acks=all (median of {args.runs} runs)"
    )
    print(f"  RF 3, min.insync.replicas=2: {args.records / rf3:10,.0f} rec/s {mb / rf3:7.1f} MB/s")
    print(f"  RF 1:                        {args.records / rf1:10,.0f} rec/s {mb / rf1:7.1f} MB/s")
    print(f"  ratio RF 3 / RF 1:           {rf1 / rf3:10.2f}")
    final = tried[-1]
    which = (
        f"the target {args.rate_mb:g} MB/s"
        if final["rate_mb"] == args.rate_mb
        else f"{final['rate_mb']:g} MB/s, the highest steady rate tried (target {args.rate_mb:g} MB/s)"
    )
    if not final["steady"]:
        which = f"{final['rate_mb']:g} MB/s, NOT steady even there"
    print(f"end-to-end latency produce -> consumer, RF 3 acks=all, at {which}:")
    print(
        f"  p50 {final['p50_ms']:.1f} ms   p99 {final['p99_ms']:.1f} ms   max {final['max_ms']:.1f} ms"
        f"   ({final['samples']:,} records after a {WARM_UP_S:g} s warm-up)"
    )


if __name__ == "__main__":
    main()
