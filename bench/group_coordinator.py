"""The group coordinator as a client sees it: offset commits, and a coordinator's failover.

    .venv/bin/python bench/group_coordinator.py [--seconds 10] [--rounds 2] [--kills 3]
                                                [--only replog|tansu] [--keep]

**Commits.** One confluent-kafka consumer outside group management (``group.id`` set,
``assign()``-style commits) commits one partition's offset synchronously, again and
again, for ``--seconds``: each commit's latency is the wall time of ``commit(...,
asynchronous=False)``, which returns after the coordinator acknowledged the write (replog:
acks=all on the group's ``__consumer_offsets`` partition). Reported: commits/s and the
p50/p99 latency. replog runs as 3 brokers (``__consumer_offsets`` with replication factor 3)
and as 1 broker (replication factor 1, the setting Tansu has), against Tansu (one broker,
memory storage); the systems alternate for ``--rounds`` rounds after a warm-up, and the
median round is printed with the replog/Tansu ratio.

**Coordinator failover** (replog, 3 brokers, ``--kills`` times): a group commits an offset;
its coordinator (the leader of the group's ``__consumer_offsets`` partition) is SIGKILLed.
Time zero is the SIGKILL; measured is the moment a new consumer's ``committed()`` first
returns the committed offset (the new coordinator was found, loaded the partition and
served it). The victim restarts and rejoins every ISR before the next kill.

Nothing is asserted; prints one JSON line at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
import uuid
from typing import Any

from common import (
    create_topic,
    latency_summary,
    median,
    partition_leaders,
    replog_cluster,
    say,
    tansu,
    work_dir,
)

TOPIC = "commits"
GROUP_TOPIC = "__consumer_offsets"


def _consumer(bootstrap: str, group: str) -> Any:
    from confluent_kafka import Consumer

    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "log_level": 3,
        }
    )


def _commit_until_ok(consumer: Any, offsets: list[Any], deadline_s: float = 60) -> None:
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + deadline_s
    while True:
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
            return
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def commit_round(bootstrap: str, seconds: float) -> dict[str, Any]:
    """Synchronous commits for ``seconds``: commits/s and latency percentiles."""
    from confluent_kafka import TopicPartition

    consumer = _consumer(bootstrap, f"bench-{uuid.uuid4().hex[:8]}")
    try:
        _commit_until_ok(consumer, [TopicPartition(TOPIC, 0, 0)])  # coordinator found
        latencies: list[int] = []
        offset = 1
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            t0 = time.perf_counter_ns()
            consumer.commit(offsets=[TopicPartition(TOPIC, 0, offset)], asynchronous=False)
            latencies.append(time.perf_counter_ns() - t0)
            offset += 1
        elapsed = time.monotonic() - started
    finally:
        consumer.close()
    summary = latency_summary(latencies)
    return {"commits_per_s": len(latencies) / elapsed, **summary}


def failover_once(cluster: Any, index: int) -> dict[str, float]:
    from confluent_kafka import KafkaException, TopicPartition

    from replog.coordinator.group.offsets_topic import partition_for

    group = f"failover-{index}-{uuid.uuid4().hex[:6]}"
    bootstrap = cluster.bootstrap_servers()
    consumer = _consumer(bootstrap, group)
    try:
        _commit_until_ok(consumer, [TopicPartition(TOPIC, 0, 1000 + index)])
    finally:
        consumer.close()
    leaders = partition_leaders(bootstrap, GROUP_TOPIC)
    victim = leaders[partition_for(group, len(leaders))]
    cluster.wait_full_isr(120)
    pid = cluster.broker_pid(victim)
    assert pid is not None
    survivors = [b for b in cluster.broker_ids if b != victim]
    reader = _consumer(cluster.bootstrap_servers(survivors), group)
    try:
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        while True:
            try:
                [tp] = reader.committed([TopicPartition(TOPIC, 0)], timeout=5)
                if tp.offset == 1000 + index:
                    served = time.monotonic()
                    break
            except KafkaException:
                pass
            if time.monotonic() - killed > 120:
                raise TimeoutError("the group was never served again")
    finally:
        reader.close()
    cluster.start_broker(victim)
    cluster.wait_full_isr(180)
    return {"served_s": served - killed, "victim": victim}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--only", choices=["replog", "tansu"])
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    results: dict[str, Any] = {"commits": {}, "failover": []}
    with work_dir("group-coordinator", keep=args.keep) as out:
        with (
            replog_cluster(out / "replog3", 3) as three,
            replog_cluster(out / "replog1", 1) as one,
            tansu(out / "tansu.log") as tansu_bootstrap,
        ):
            targets = {
                "replog-rf3": three.bootstrap_servers(),
                "replog-rf1": one.bootstrap_servers(),
                "tansu": tansu_bootstrap,
            }
            if args.only:
                targets = {k: v for k, v in targets.items() if k.startswith(args.only)}
            for name, bootstrap in targets.items():
                create_topic(bootstrap, TOPIC, 1, 3 if name == "replog-rf3" else 1)
                say(f"warm-up {name}")
                commit_round(bootstrap, 2)
            rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in targets}
            for r in range(args.rounds):
                for name, bootstrap in targets.items():
                    result = commit_round(bootstrap, args.seconds)
                    rounds[name].append(result)
                    say(
                        f"round {r + 1} {name}: {result['commits_per_s']:.0f} commits/s, "
                        f"p50 {result['p50_ms']:.2f} ms, p99 {result['p99_ms']:.2f} ms"
                    )
            for name, runs in rounds.items():
                results["commits"][name] = {
                    "commits_per_s": median([x["commits_per_s"] for x in runs]),
                    "p50_ms": median([x["p50_ms"] for x in runs]),
                    "p99_ms": median([x["p99_ms"] for x in runs]),
                }
            if args.only != "tansu":
                for i in range(args.kills):
                    result = failover_once(three, i)
                    results["failover"].append(result)
                    say(
                        f"kill {i + 1}: broker {result['victim']}, served in {result['served_s']:.2f} s"
                    )
    print(f"{'system':12}{'commits/s':>11}{'p50 ms':>9}{'p99 ms':>9}")
    for name, r in results["commits"].items():
        print(f"{name:12}{r['commits_per_s']:>11.0f}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}")
    commits = results["commits"]
    if "tansu" in commits:
        for name in ("replog-rf1", "replog-rf3"):
            if name in commits:
                ratio = commits[name]["commits_per_s"] / commits["tansu"]["commits_per_s"]
                print(f"{name}/tansu commits/s: {ratio:.2f}")
    if results["failover"]:
        times = [x["served_s"] for x in results["failover"]]
        print(f"coordinator failover: median {median(times):.2f} s over {len(times)} kills")
        results["failover_median_s"] = median(times)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
