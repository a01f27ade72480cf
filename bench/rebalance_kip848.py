"""KIP-848 rebalance time: one member joins a group of ``--members`` on ``--partitions``.

    .venv/bin/python bench/rebalance_kip848.py [--members 10] [--partitions 50] [--rounds 3]
                                              [--heartbeat-interval-ms 5000 500] [--keep]

replog runs as 3 brokers (``__consumer_offsets`` and the topic with replication factor 3).
Each member is a confluent-kafka consumer with ``group.protocol=consumer`` in its own
process (spawned), polling every 50 ms and reporting its assignment whenever it changes.
Once the ``--members`` share the partitions evenly, one more member subscribes: time zero
is its ``subscribe()``; measured are

- ``first_partition_s``: until the newcomer owns its first partition;
- ``stable_s``: until every partition is owned by exactly one member and the shares are
  even again (max - min <= 1): the whole incremental rebalance;
- ``partitions_moved``: how many changed owner (the newcomer's share, if sticky);
- ``members_paused``: members that were left with no partition at any moment (0 with
  incremental reconciliation: the others keep reading what they keep).

A KIP-848 member learns of a new target assignment on its next heartbeat, so the time
follows ``group.consumer.heartbeat.interval.ms`` (Kafka's default 5000; the script runs
each given interval, ``--rounds`` times, and prints medians). Nothing is asserted; one
JSON line at the end.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import queue
import time
import uuid
from typing import Any

from common import create_topic, median, replog_cluster, say, work_dir

TOPIC = "rebalance"


def _member(bootstrap: str, group: str, name: str, reports: Any, stop: Any) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "client.id": name,
            "enable.auto.commit": False,
            "log_level": 3,
        }
    )
    last: tuple[int, ...] | None = None
    consumer.subscribe([TOPIC])
    reports.put((name, time.time(), "subscribed", ()))
    try:
        while not stop.is_set():
            consumer.poll(0.05)
            now = tuple(sorted(tp.partition for tp in consumer.assignment()))
            if now != last:
                reports.put((name, time.time(), "assignment", now))
                last = now
    finally:
        consumer.close()


class Group:
    """The members' reports, as the parent sees them."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.owned: dict[str, tuple[int, ...]] = {}
        self.events: list[tuple[str, float, str, tuple[int, ...]]] = []

    def take(self, reports: Any, timeout: float) -> None:
        try:
            event = reports.get(timeout=timeout)
        except queue.Empty:
            return
        self.events.append(event)
        name, _, kind, owned = event
        if kind == "assignment":
            self.owned[name] = owned

    def balanced(self, members: int) -> bool:
        if len(self.owned) != members:
            return False
        every = [p for owned in self.owned.values() for p in owned]
        sizes = [len(owned) for owned in self.owned.values()]
        return (
            len(every) == self.partitions
            and len(set(every)) == self.partitions
            and max(sizes) - min(sizes) <= 1
        )

    def wait_balanced(self, reports: Any, members: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.balanced(members):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no even assignment after {timeout_s} s: {self.owned}")
            self.take(reports, 0.1)


def _round(bootstrap: str, members: int, partitions: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    reports = ctx.Queue()
    stop = ctx.Event()
    group = f"bench-{uuid.uuid4().hex[:8]}"
    procs = [
        ctx.Process(target=_member, args=(bootstrap, group, f"m{i:02d}", reports, stop))
        for i in range(members + 1)
    ]
    state = Group(partitions)
    try:
        for p in procs[:members]:
            p.start()
        state.wait_balanced(reports, members, 120)
        before = dict(state.owned)
        state.events.clear()
        procs[members].start()
        newcomer = f"m{members:02d}"
        state.wait_balanced(reports, members + 1, 120)
        # Reports of the last changes may trail: drain briefly.
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            state.take(reports, 0.05)
        joined = next(t for n, t, k, _ in state.events if n == newcomer and k == "subscribed")
        first = min(t for n, t, k, o in state.events if n == newcomer and k == "assignment" and o)
        last = max(t for n, t, k, _ in state.events if k == "assignment")
        moved = sum(len(set(before[n]) - set(state.owned[n])) for n in before)
        paused = {n for n, _, k, o in state.events if k == "assignment" and not o and n != newcomer}
        return {
            "first_partition_s": round(first - joined, 3),
            "stable_s": round(last - joined, 3),
            "partitions_moved": moved,
            "members_paused": len(paused),
        }
    finally:
        stop.set()
        for p in procs:
            if p.pid is not None:
                p.join(15)
                if p.is_alive():
                    p.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--heartbeat-interval-ms", type=int, nargs="+", default=[5000, 500])
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for interval in args.heartbeat_interval_ms:
        overrides = {
            "offsets.topic.num.partitions": "10",
            "group.consumer.heartbeat.interval.ms": str(interval),
            "group.consumer.min.heartbeat.interval.ms": str(min(interval, 5000)),
        }
        with work_dir("rebalance-kip848", args.keep) as d, replog_cluster(d, 3, overrides) as c:
            bootstrap = c.bootstrap_servers()
            create_topic(bootstrap, TOPIC, args.partitions, 3)
            rounds = []
            for i in range(args.rounds):
                r = _round(bootstrap, args.members, args.partitions)
                say(f"heartbeat {interval} ms, round {i + 1}: {r}")
                rounds.append(r)
            results[f"heartbeat_{interval}ms"] = {
                key: median([r[key] for r in rounds]) for key in rounds[0]
            } | {"rounds": rounds}
    print(
        json.dumps(
            {"members": args.members, "partitions": args.partitions, "protocol": "consumer"}
            | results
        )
    )


if __name__ == "__main__":
    main()
