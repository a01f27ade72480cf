"""What replication costs in throughput: acks=all RF 3 vs RF 1.

    .venv/bin/python bench/replication.py [--records 300000] [--size 1024] [--runs 3]
                                          [--partitions 3]

3 brokers (a LocalCluster). The same confluent-kafka producer (``acks=all``,
``linger.ms=5``) sends ``--records`` records of ``--size`` bytes as fast as it can to a
fresh topic with RF 3 and ``min.insync.replicas=2``, then to one with RF 1 (``--partitions``
each, runs alternating). Prints the medians and the ratio RF 3 / RF 1.

Per-record latency (producer acknowledgement and produce -> consume at fixed rates) is
``bench/latency.py``.
"""

from __future__ import annotations

import argparse
import uuid
from collections import defaultdict

from common import (
    create_topic,
    median,
    produce_burst,
    replog_cluster,
    say,
    work_dir,
)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=3)
    args = parser.parse_args()
    with work_dir("replication") as out, replog_cluster(out, 3) as cluster:
        bootstrap = cluster.bootstrap_servers()
        seconds = throughput(args, bootstrap)
    rf3, rf1 = median(seconds[3]), median(seconds[1])
    mb = args.records * args.size / 1e6
    print(
        f"\nreplication cost, 3 brokers, {args.partitions} partitions, {args.size}-byte records, "
        f"confluent-kafka acks=all (median of {args.runs} runs)"
    )
    print(f"  RF 3, min.insync.replicas=2: {args.records / rf3:10,.0f} rec/s {mb / rf3:7.1f} MB/s")
    print(f"  RF 1:                        {args.records / rf1:10,.0f} rec/s {mb / rf1:7.1f} MB/s")
    print(f"  ratio RF 3 / RF 1:           {rf1 / rf3:10.2f}")


if __name__ == "__main__":
    main()
