"""Transactions as a producer sees them: transactions per second and commit latency.

    .venv/bin/python bench/transactions.py [--seconds 10] [--sizes 1,10,100] [--keep]

replog runs as 3 brokers; the topic has 3 partitions at replication factor 3, and
``__transaction_state`` the settings Kafka gives it (replication factor 3, min.insync.replicas
2). One confluent-kafka transactional producer runs transactions back to back for
``--seconds`` per size: ``begin_transaction``, that many records spread over the three
partitions, ``commit_transaction``. A transaction's latency is the wall time from
``begin_transaction`` to the return of ``commit_transaction``; the commit's alone is the
time in ``commit_transaction`` (librdkafka flushes the records, then EndTxn: the
coordinator writes PrepareCommit with acks=all and answers; the markers follow). Reported
per size: transactions/s, records/s and the p50/p99 of both latencies.

Nothing is asserted; prints one JSON line at the end.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from common import create_topic, latency_summary, replog_cluster, say, work_dir

TOPIC = "transactions"


def _producer(bootstrap: str, transactional_id: str) -> Any:
    from confluent_kafka import Producer

    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": 0,
            "log_level": 3,
        }
    )


def run_size(bootstrap: str, records: int, seconds: float) -> dict[str, Any]:
    producer = _producer(bootstrap, f"bench-{records}")
    producer.init_transactions(60)
    value = b"x" * 100
    whole, commits = [], []
    deadline = time.monotonic() + seconds
    started = time.monotonic()
    count = 0
    while time.monotonic() < deadline:
        t0 = time.perf_counter_ns()
        producer.begin_transaction()
        for i in range(records):
            producer.produce(TOPIC, value=value, partition=i % 3)
        t1 = time.perf_counter_ns()
        producer.commit_transaction(60)
        t2 = time.perf_counter_ns()
        whole.append(t2 - t0)
        commits.append(t2 - t1)
        count += 1
    elapsed = time.monotonic() - started
    return {
        "records_per_transaction": records,
        "transactions": count,
        "transactions_per_s": count / elapsed,
        "records_per_s": count * records / elapsed,
        "transaction": latency_summary(whole),
        "commit": latency_summary(commits),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--sizes", default="1,10,100")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results = []
    with work_dir("bench-transactions", args.keep) as directory:
        with replog_cluster(directory, 3) as cluster:
            bootstrap = cluster.bootstrap_servers()
            create_topic(bootstrap, TOPIC, 3, 3)
            run_size(bootstrap, 1, 2)  # warm-up: __transaction_state created and loaded
            for size in sizes:
                result = run_size(bootstrap, size, args.seconds)
                say(
                    f"{size:>4} records/transaction: {result['transactions_per_s']:.1f} txn/s, "
                    f"commit p50 {result['commit']['p50_ms']:.1f} ms "
                    f"p99 {result['commit']['p99_ms']:.1f} ms"
                )
                results.append(result)
    print(json.dumps({"bench": "transactions", "brokers": 3, "results": results}))


if __name__ == "__main__":
    main()
