"""Rebalance time as consumers see it: one member joins a group of ``--members`` on
``--partitions``, from its ``subscribe()`` until every member is consuming again.

    .venv/bin/python bench/rebalance.py [--mode eager cooperative consumer] [--members 10]
        [--partitions 50] [--rounds 3] [--rate 500] [--heartbeat-interval-ms N]
        [--override key=value ...] [--timeline] [--keep]

Modes (``--mode``, one or more; each in a fresh 3-broker cluster, the same load):

- ``eager``: the classic protocol, ``partition.assignment.strategy=range``; every member
  revokes everything at each rebalance (stop the world).
- ``cooperative``: the classic protocol, ``cooperative-sticky``; members give up only
  what moves (two rebalances) and keep reading the rest.
- ``consumer``: KIP-848, ``group.protocol=consumer`` (the broker's ``uniform`` assignor).

replog runs as 3 brokers with Kafka's group defaults (``--override`` changes broker
settings); the topic and ``__consumer_offsets`` have replication factor 3. Every member
is a confluent-kafka consumer in its own process with librdkafka's defaults, polling
every 20 ms. Members learn that a rebalance began on their next heartbeat: every 3 s
in the classic protocol (librdkafka's ``heartbeat.interval.ms``), every 5 s in KIP-848
(the broker's ``group.consumer.heartbeat.interval.ms``); ``--heartbeat-interval-ms``
sets both, for a comparison at one interval. A producer writes ``--rate`` records/s spread
over every partition, so that a partition being read shows within ~``partitions/rate``
seconds. Once the members share the partitions evenly and all consume, one more
member subscribes (time zero). Measured, per round, medians over ``--rounds``:

- ``all_consuming_s``: until every member, the newcomer too, has read a record of the
  partitions it ends up with since its assignment last changed (for a member whose
  assignment did not change: its first record after time zero);
- ``longest_pause_s``: the longest time any member that was already there went without
  reading a record, from time zero to the end (the stop-the-world part of a rebalance);
- ``newcomer_first_record_s``: until the newcomer read its first record;
- ``partitions_moved``: partitions that changed owner among the members already there.

Nothing is asserted; one JSON line at the end (details of each round on stderr).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import queue
import threading
import time
import uuid
from typing import Any

from common import create_topic, median, replog_cluster, say, work_dir

TOPIC = "rebalance"
MODES = {
    "eager": {"partition.assignment.strategy": "range"},
    "cooperative": {"partition.assignment.strategy": "cooperative-sticky"},
    "consumer": {"group.protocol": "consumer"},
}


def _member(
    bootstrap: str,
    group: str,
    name: str,
    mode: str,
    heartbeat_ms: int | None,
    reports: Any,
    stop: Any,
) -> None:
    """One consumer: reports each assignment change at once, and at the end every
    (time, partition) it read."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": name,
            "auto.offset.reset": "latest",
            "log_level": 3,
            **MODES[mode],
            **(
                {"heartbeat.interval.ms": heartbeat_ms}
                if heartbeat_ms is not None and mode != "consumer"
                else {}
            ),
        }
    )
    read: list[tuple[float, int]] = []
    last: tuple[int, ...] | None = None
    consumer.subscribe([TOPIC])
    reports.put((name, time.time(), "subscribed", ()))
    try:
        while not stop.is_set():
            message = consumer.poll(0.02)
            now = time.time()
            if message is not None and message.error() is None:
                if not read:
                    reports.put((name, now, "reading", ()))
                read.append((now, message.partition()))
            owned = tuple(sorted(tp.partition for tp in consumer.assignment()))
            if owned != last:
                reports.put((name, now, "assignment", owned))
                last = owned
    finally:
        reports.put((name, time.time(), "read", tuple(read)))
        consumer.close()


def _produce(bootstrap: str, partitions: int, rate: int, stop: threading.Event) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    interval = 1.0 / rate
    next_at = time.monotonic()
    i = 0
    while not stop.is_set():
        producer.produce(TOPIC, value=b"x" * 100, partition=i % partitions)
        producer.poll(0)
        i += 1
        next_at += interval
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    producer.flush(10)


class Group:
    """The members' reports, as the parent sees them."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.owned: dict[str, tuple[int, ...]] = {}
        self.reading: set[str] = set()
        self.events: list[tuple[str, float, str, tuple]] = []
        self.read: dict[str, list[tuple[float, int]]] = {}

    def take(self, reports: Any, timeout: float) -> None:
        try:
            event = reports.get(timeout=timeout)
        except queue.Empty:
            return
        name, _, kind, data = event
        if kind == "read":
            self.read[name] = list(data)
            return
        self.events.append(event)
        if kind == "assignment":
            self.owned[name] = data
        elif kind == "reading":
            self.reading.add(name)

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

    def wait(self, reports: Any, done, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} not reached in {timeout_s} s: {self.owned}")
            self.take(reports, 0.1)


def _timeline(state: Group, t0: float) -> None:
    for name, t, kind, data in sorted(state.events, key=lambda e: e[1]):
        if t >= t0 - 1:
            say(f"  {t - t0:+8.3f} s  {name} {kind} {list(data) if data else ''}")
    for name, read in sorted(state.read.items()):
        times = [t - t0 for t, _ in read if t >= t0 - 1]
        gaps = [round(b - a, 3) for a, b in zip(times, times[1:], strict=False)]
        say(f"  {name}: {len(times)} records from -1 s, longest gaps {sorted(gaps)[-3:]}")


def _measure(state: Group, t0: float, newcomer: str) -> dict[str, Any]:
    changes: dict[str, float] = {}
    for name, t, kind, _ in state.events:
        if kind == "assignment" and t >= t0:
            changes[name] = t
    resumed = {}
    for name, owned in state.owned.items():
        since = changes.get(name, t0)
        mine = set(owned)
        resumed[name] = min(t for t, p in state.read[name] if t >= since and p in mine)
    end = max(resumed.values())
    pauses = []
    for name, read in state.read.items():
        if name == newcomer:
            continue
        times = [t0] + [t for t, _ in read if t0 <= t <= end] + [end]
        pauses.append(max(b - a for a, b in zip(times, times[1:], strict=False)))
    first = min(t for t, _ in state.read[newcomer])
    return {
        "all_consuming_s": round(end - t0, 3),
        "longest_pause_s": round(max(pauses), 3),
        "newcomer_first_record_s": round(first - t0, 3),
    }


def _round(
    bootstrap: str,
    mode: str,
    members: int,
    partitions: int,
    heartbeat_ms: int | None,
    timeline: bool,
) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    reports = ctx.Queue()
    stop = ctx.Event()
    group = f"bench-{mode}-{uuid.uuid4().hex[:8]}"
    names = [f"m{i:02d}" for i in range(members + 1)]
    newcomer = names[-1]
    procs = [
        ctx.Process(target=_member, args=(bootstrap, group, n, mode, heartbeat_ms, reports, stop))
        for n in names
    ]
    state = Group(partitions)
    try:
        for p in procs[:members]:
            p.start()
        state.wait(
            reports,
            lambda: state.balanced(members) and len(state.reading) == members,
            180,
            f"{members} members balanced and reading",
        )
        time.sleep(2)  # steady state
        while True:  # drain what came meanwhile
            before = len(state.events)
            state.take(reports, 0.05)
            if len(state.events) == before:
                break
        before_owned = dict(state.owned)
        procs[members].start()
        state.wait(
            reports,
            lambda: newcomer in state.owned and state.balanced(members + 1),
            180,
            f"{members + 1} members balanced",
        )
        time.sleep(3)  # every member reads again
        stop.set()
        state.wait(reports, lambda: len(state.read) == members + 1, 60, "final reports")
        t0 = next(t for n, t, k, _ in state.events if n == newcomer and k == "subscribed")
        if timeline:
            _timeline(state, t0)
        result = _measure(state, t0, newcomer)
        result["partitions_moved"] = sum(
            len(set(before_owned[n]) - set(state.owned[n])) for n in before_owned
        )
        return result
    finally:
        stop.set()
        for p in procs:
            if p.pid is not None:
                p.join(20)
                if p.is_alive():
                    p.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=int, default=500, help="records/s over all partitions")
    parser.add_argument(
        "--heartbeat-interval-ms",
        type=int,
        help="librdkafka's heartbeat.interval.ms (classic modes) and the broker's "
        "group.consumer.heartbeat.interval.ms (consumer mode); default: their defaults",
    )
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--timeline", action="store_true", help="every event, on stderr")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    overrides = {"offsets.topic.num.partitions": "10"}
    if args.heartbeat_interval_ms is not None:
        overrides["group.consumer.heartbeat.interval.ms"] = str(args.heartbeat_interval_ms)
        overrides["group.consumer.min.heartbeat.interval.ms"] = str(
            min(args.heartbeat_interval_ms, 5000)
        )
    overrides |= dict(o.split("=", 1) for o in args.override)
    results: dict[str, Any] = {}
    for mode in args.mode:
        with work_dir(f"rebalance-{mode}", args.keep) as d, replog_cluster(d, 3, overrides) as c:
            bootstrap = c.bootstrap_servers()
            create_topic(bootstrap, TOPIC, args.partitions, 3)
            stop = threading.Event()
            producer = threading.Thread(
                target=_produce, args=(bootstrap, args.partitions, args.rate, stop)
            )
            producer.start()
            try:
                rounds = []
                for i in range(args.rounds):
                    r = _round(
                        bootstrap,
                        mode,
                        args.members,
                        args.partitions,
                        args.heartbeat_interval_ms,
                        args.timeline,
                    )
                    say(f"{mode}, round {i + 1}: {r}")
                    rounds.append(r)
            finally:
                stop.set()
                producer.join(30)
        results[mode] = {key: median([r[key] for r in rounds]) for key in rounds[0]}
        results[mode]["rounds"] = rounds
    print(
        json.dumps(
            {"members": args.members, "partitions": args.partitions, "rate": args.rate}
            | {"heartbeat_interval_ms": args.heartbeat_interval_ms}
            | {"overrides": overrides}
            | results
        )
    )


if __name__ == "__main__":
    main()
