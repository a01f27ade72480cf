"""What replication costs in throughput: RF 3 acks=all vs RF 1 (acks=1 and acks=all).

    .venv/bin/python bench/replication.py [--records 300000] [--size 1024] [--runs 3]
                                          [--partitions 3]

3 brokers (a LocalCluster). The same confluent-kafka producer (``linger.ms=5``) sends
``--records`` records of ``--size`` bytes as fast as it can to a fresh topic with RF 3 and
``min.insync.replicas=2`` (``acks=all``), then to one with RF 1 (``acks=1``), then RF 1 with
``acks=all`` (``--partitions`` each, the three cases alternating within each run). Prints the
medians and the ratios of RF 3 acks=all to each RF 1 case.

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

CASES = ((3, "all"), (1, "1"), (1, "all"))


def throughput(args: argparse.Namespace, bootstrap: str) -> dict[tuple[int, str], list[float]]:
    """Seconds per run to produce ``args.records``, by (replication factor, acks)."""
    seconds: dict[tuple[int, str], list[float]] = defaultdict(list)
    for run in range(args.runs):
        for rf, acks in CASES:
            config = {"acks": acks, "linger.ms": 5, "compression.type": "none"}
            topic = f"throughput-rf{rf}-{uuid.uuid4().hex[:6]}"
            configs = {"min.insync.replicas": "2"} if rf == 3 else {}
            create_topic(bootstrap, topic, args.partitions, rf, configs)
            took = produce_burst(bootstrap, topic, args.records, args.size, config, args.partitions)
            seconds[(rf, acks)].append(took)
            say(
                f"run {run + 1}/{args.runs} RF {rf} acks={acks}: {args.records / took:9,.0f} "
                f"rec/s {args.records * args.size / took / 1e6:7.1f} MB/s"
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
    med = {case: median(seconds[case]) for case in CASES}
    mb = args.records * args.size / 1e6
    print(
        f"\nreplication cost, 3 brokers, {args.partitions} partitions, {args.size}-byte records, "
        f"confluent-kafka linger.ms=5 (median of {args.runs} runs)"
    )
    for (rf, acks), took in med.items():
        label = f"RF {rf} acks={acks}" + (", min.insync.replicas=2" if rf == 3 else "")
        print(f"  {label:<38}{args.records / took:10,.0f} rec/s {mb / took:7.1f} MB/s")
    rf3 = med[(3, "all")]
    print(f"  ratio RF 3 acks=all / RF 1 acks=1:    {med[(1, '1')] / rf3:10.2f}")
    print(f"  ratio RF 3 acks=all / RF 1 acks=all:  {med[(1, 'all')] / rf3:10.2f}")


if __name__ == "__main__":
    main()
