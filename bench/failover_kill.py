"""Failover as a client sees it: from a leader's SIGKILL to the first acks=all write and read.

    .venv/bin/python bench/failover_kill.py [--kills 5] [--partitions 3] [--rate 3000]
                                            [--session-timeout-ms 6000]
                                            [--retry-backoff-max-ms MS] [--client-debug CONTEXTS]
                                            [--broker-override KEY=VALUE ...] [--keep]

3 brokers (a LocalCluster, ``zookeeper.session.timeout.ms`` as given), one topic of
``--partitions`` partitions, RF 3, ``min.insync.replicas=2``. Two client processes run
throughout:

* a **producer process** (confluent-kafka, ``acks=all``, idempotent, ``linger.ms=0``,
  ``message.timeout.ms=120000`` so records wait out the failover instead of failing) sends
  ``--rate`` 100-byte records a second round-robin over the partitions (one per partition
  every few milliseconds), each carrying ``time.time_ns()`` taken just before ``produce()``;
  the delivery callback stamps the acknowledgement. Both clients keep librdkafka's retry
  and metadata back-off (``retry.backoff.max.ms=1000``) unless ``--retry-backoff-max-ms``
  is given: after seconds of failed requests a client asks for new metadata at most once
  a second, which the figures include.
* a **consumer process** (confluent-kafka, ``assign()``, no group) stamps every record as
  ``poll()`` returns it.

Then ``--kills`` times: wait until every partition has its full ISR, pick a partition whose
leader is not the controller (the controller itself only when it leads them all), and SIGKILL
that leader. **Time zero is the SIGKILL** (``time.time_ns()`` just before ``os.kill``), not
a znode's deletion. Measured, for the partition it led:

* **first ack**: the first acknowledgement of a record *sent after the kill* to that
  partition (``acks=all``, so the new leader and the ISR have it);
* **first consume**: the first such record returned to the consumer;

and, for context, when the victim's ``/brokers/ids`` znode went (session expiry) and when
ZooKeeper first named a new leader (kazoo watches), the last partition to acknowledge a
post-kill record ("all acked"), and the last of the partitions the victim only followed
("followed": their acks=all produces wait for the controller to drop it from the ISR). Every
acknowledged record must be consumed: the count of acknowledged records never consumed is
printed. The victim is restarted and back in every ISR before the next kill. Prints each
kill, the medians, and one JSON line. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import struct
import threading
import time
from array import array
from pathlib import Path
from typing import Any

from common import (
    ZnodeGone,
    create_topic,
    median,
    quiet_logger,
    replog_cluster,
    say,
    work_dir,
)

from replog.cluster.launcher import LocalCluster, pid_alive

TOPIC = "failover-kill"
STAMP = struct.Struct("<q")  # send time (time.time_ns)
SIZE = 100
TICK_S = 0.001
RECOVERY_TIMEOUT_S = 180.0


def producer_process(
    bootstrap: str,
    partitions: int,
    rate: float,
    log_dir: str,
    client_config: dict[str, Any],
    acked: Any,
    stop: Any,
    conn: Any,
) -> None:
    """Child process: paced acks=all sends; ``acked[p]`` is the send time of the newest
    acknowledged record of partition p; all stamps go back at the end."""
    from confluent_kafka import Producer

    send_ns, ack_ns, parts = array("q"), array("q"), array("b")
    errors: list[str] = []
    unpack = STAMP.unpack_from

    def on_delivery(err: Any, msg: Any) -> None:
        now = time.time_ns()
        if err is not None:
            errors.append(str(err))
            return
        sent = unpack(msg.value())[0]
        p = msg.partition()
        send_ns.append(sent)
        ack_ns.append(now)
        parts.append(p)
        if sent > acked[p]:
            acked[p] = sent

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 0,
            "message.timeout.ms": 120_000,
            **client_config,
            "logger": quiet_logger(Path(log_dir) / "producer.log"),
            "on_delivery": on_delivery,
        }
    )
    producer.list_topics(TOPIC, timeout=30)
    padding = b"x" * (SIZE - STAMP.size)
    start = time.perf_counter()
    sent = 0
    while not stop.is_set():
        due = int((time.perf_counter() - start) * rate) + 1
        while sent < due:
            try:
                producer.produce(
                    TOPIC, STAMP.pack(time.time_ns()) + padding, partition=sent % partitions
                )
            except BufferError:
                producer.poll(TICK_S)
                continue
            sent += 1
        producer.poll(max(TICK_S, start + sent / rate - time.perf_counter()))
    left = producer.flush(150)
    conn.send(
        {
            "sent": sent,
            "unacknowledged": left,
            "errors": errors[:5],
            "error_count": len(errors),
            "send_ns": send_ns.tobytes(),
            "ack_ns": ack_ns.tobytes(),
            "partition": parts.tobytes(),
        }
    )
    conn.close()


def consumer_process(
    bootstrap: str,
    partitions: int,
    log_dir: str,
    client_config: dict[str, Any],
    consumed: Any,
    ready: Any,
    stop: Any,
    conn: Any,
) -> None:
    """Child process: ``poll()`` one record at a time and stamp it; ``consumed[p]`` is the
    send time of the newest record of partition p received."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "replog-bench-failover-kill",
            "enable.auto.commit": False,
            **client_config,
            "logger": quiet_logger(Path(log_dir) / "consumer.log"),
        }
    )
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
    consumer.poll(0.5)
    ready.set()
    send_ns, recv_ns, parts = array("q"), array("q"), array("b")
    errors: list[str] = []
    unpack = STAMP.unpack_from
    while not stop.is_set():
        message = consumer.poll(0.1)
        now = time.time_ns()
        if message is None:
            continue
        if message.error() is not None:
            errors.append(str(message.error()))
            continue
        sent = unpack(message.value())[0]
        p = message.partition()
        send_ns.append(sent)
        recv_ns.append(now)
        parts.append(p)
        if sent > consumed[p]:
            consumed[p] = sent
    consumer.close()
    conn.send(
        {
            "errors": errors[:5],
            "error_count": len(errors),
            "send_ns": send_ns.tobytes(),
            "recv_ns": recv_ns.tobytes(),
            "partition": parts.tobytes(),
        }
    )
    conn.close()


def _ints(raw: bytes, code: str = "q") -> array:
    out = array(code)
    out.frombytes(raw)
    return out


def partition_states(zk: Any, partitions: int) -> dict[int, dict[str, Any]]:
    out = {}
    for p in range(partitions):
        data, _ = zk.get(f"/brokers/topics/{TOPIC}/partitions/{p}/state")
        out[p] = json.loads(data)
    return out


class NewLeader:
    """When ZooKeeper first names a leader of ``path`` other than ``old`` (kazoo DataWatch)."""

    def __init__(self, zk: Any, path: str, old: int) -> None:
        self.at_ns: int | None = None
        self.leader: int | None = None
        self.event = threading.Event()

        def on_change(data: Any, stat: Any, event: Any) -> bool:
            if data is None:
                return True
            leader = int(json.loads(data)["leader"])
            if leader not in (old, -1):
                self.at_ns = time.time_ns()
                self.leader = leader
                self.event.set()
                return False
            return True

        zk.DataWatch(path, on_change)


def wait_healthy(
    cluster: LocalCluster, zk: Any, partitions: int, acked: Any, consumed: Any, timeout_s: float
) -> dict[int, dict[str, Any]]:
    """Every partition has the full ISR and records flowing (acked and consumed) since now."""
    deadline = time.monotonic() + timeout_s
    since = time.time_ns()
    brokers = set(cluster.broker_ids)
    while True:
        states = partition_states(zk, partitions)
        full = all(set(s["isr"]) == brokers for s in states.values())
        flowing = all(acked[p] > since and consumed[p] > since for p in range(partitions))
        if full and flowing:
            return states
        if time.monotonic() > deadline:
            raise TimeoutError(f"cluster not healthy after {timeout_s} s: {states}")
        time.sleep(0.2)


def one_kill(
    cluster: LocalCluster, zk: Any, partitions: int, acked: Any, consumed: Any, turn: int
) -> dict[str, Any]:
    states = wait_healthy(cluster, zk, partitions, acked, consumed, RECOVERY_TIMEOUT_S)
    controller = cluster.controller_id()
    candidates = sorted(p for p, s in states.items() if s["leader"] != controller)
    killed_controller = not candidates
    if killed_controller:
        candidates = sorted(states)
    partition = candidates[turn % len(candidates)]
    victim = int(states[partition]["leader"])
    led = sorted(p for p, s in states.items() if s["leader"] == victim)
    pid = cluster.broker_pid(victim)
    assert pid is not None
    gone = ZnodeGone(zk, f"/brokers/ids/{victim}")
    new_leader = NewLeader(zk, f"/brokers/topics/{TOPIC}/partitions/{partition}/state", victim)
    say(
        f"kill {turn + 1}: SIGKILL broker {victim} (leader of partitions {led}, "
        f"{'the controller' if killed_controller else f'controller is {controller}'})"
    )
    kill_ns = time.time_ns()
    os.kill(pid, signal.SIGKILL)
    while pid_alive(pid):
        time.sleep(0.01)
    deadline = time.monotonic() + RECOVERY_TIMEOUT_S
    while not all(acked[p] > kill_ns and consumed[p] > kill_ns for p in range(partitions)):
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"partitions not writable and readable {RECOVERY_TIMEOUT_S} s after kill"
            )
        time.sleep(0.05)
    gone_at = gone.wait(60)
    new_leader.event.wait(60)
    say(f"  recovered; restarting broker {victim}")
    cluster.start_broker(victim, wait=True, wait_s=120)
    return {
        "victim": victim,
        "partition": partition,
        "led": led,
        "killed_controller": killed_controller,
        "kill_ns": kill_ns,
        "znode_gone_s": gone_at - kill_ns / 1e9,
        "new_leader": new_leader.leader,
        "new_leader_in_zk_s": (
            None if new_leader.at_ns is None else (new_leader.at_ns - kill_ns) / 1e9
        ),
    }


def first_after(
    send: array, stamp: array, parts: array, partition: int, kill_ns: int
) -> float | None:
    """Seconds from the kill to the earliest stamp of a record of ``partition`` sent after it."""
    best = None
    for s, t, p in zip(send, stamp, parts, strict=True):
        if p == partition and s > kill_ns and (best is None or t < best):
            best = t
    return None if best is None else (best - kill_ns) / 1e9


def analyse(
    kills: list[dict[str, Any]], produced: dict[str, Any], received: dict[str, Any], partitions: int
) -> dict[str, Any]:
    a_send, a_ack = _ints(produced["send_ns"]), _ints(produced["ack_ns"])
    a_part = _ints(produced["partition"], "b")
    r_send, r_recv = _ints(received["send_ns"]), _ints(received["recv_ns"])
    r_part = _ints(received["partition"], "b")
    for kill in kills:
        k = kill["kill_ns"]
        p = kill["partition"]
        kill["first_ack_s"] = first_after(a_send, a_ack, a_part, p, k)
        kill["first_consume_s"] = first_after(r_send, r_recv, r_part, p, k)
        every = [first_after(a_send, a_ack, a_part, q, k) for q in range(partitions)]
        kill["every_partition_ack_s"] = None if None in every else max(every)
        followed = [every[q] for q in range(partitions) if q not in kill["led"]]
        kill["followed_partitions_ack_s"] = (
            None if not followed or None in followed else max(followed)
        )
    consumed = set(zip(r_part, r_send, strict=True))
    lost = sum(1 for key in zip(a_part, a_send, strict=True) if key not in consumed)

    def med(key: str) -> float | None:
        values = [k[key] for k in kills if k[key] is not None]
        return median(values) if values else None

    return {
        "kills": kills,
        "median": {
            key: med(key)
            for key in (
                "znode_gone_s",
                "new_leader_in_zk_s",
                "first_ack_s",
                "first_consume_s",
                "every_partition_ack_s",
                "followed_partitions_ack_s",
            )
        },
        "sent": produced["sent"],
        "acknowledged": len(a_send),
        "unacknowledged": produced["unacknowledged"],
        "producer_errors": produced["error_count"],
        "producer_error_sample": produced["errors"],
        "received": len(r_send),
        "consumer_errors": received["error_count"],
        "consumer_error_sample": received["errors"],
        "acknowledged_never_consumed": lost,
        "load_average_1min": os.getloadavg()[0],
    }


def report(result: dict[str, Any], args: argparse.Namespace) -> None:
    print(
        f"\nfailover from SIGKILL of a partition leader, 3 brokers, {args.partitions} partitions "
        f"RF 3 min.insync.replicas=2, session timeout {args.session_timeout_ms} ms, "
        f"acks=all at {args.rate:g} records/s"
    )
    print(
        f"{'kill':<6}{'victim':>7}{'part':>6}  {'znode gone':>11}{'zk leader':>10}"
        f"{'first ack':>10}{'first read':>11}{'all acked':>10}{'followed':>10}"
        "   (seconds after SIGKILL)"
    )

    def s(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}"

    for i, k in enumerate(result["kills"]):
        note = " (controller)" if k["killed_controller"] else ""
        print(
            f"{i + 1:<6}{k['victim']:>7}{k['partition']:>6}  {s(k['znode_gone_s']):>11}"
            f"{s(k['new_leader_in_zk_s']):>10}{s(k['first_ack_s']):>10}"
            f"{s(k['first_consume_s']):>11}{s(k['every_partition_ack_s']):>10}"
            f"{s(k['followed_partitions_ack_s']):>10}{note}"
        )
    m = result["median"]
    print(
        f"{'median':<19}  {s(m['znode_gone_s']):>11}{s(m['new_leader_in_zk_s']):>10}"
        f"{s(m['first_ack_s']):>10}{s(m['first_consume_s']):>11}"
        f"{s(m['every_partition_ack_s']):>10}{s(m['followed_partitions_ack_s']):>10}"
    )
    print(
        f"records: {result['sent']:,} sent, {result['acknowledged']:,} acknowledged, "
        f"{result['producer_errors']} failed, {result['received']:,} consumed; acknowledged "
        f"but never consumed: {result['acknowledged_never_consumed']}; load average "
        f"{result['load_average_1min']:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rate", type=float, default=3000.0, help="records/s, all partitions")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument(
        "--retry-backoff-max-ms",
        type=int,
        default=None,
        help="librdkafka retry.backoff.max.ms for both clients (default: librdkafka's, 1000)",
    )
    parser.add_argument(
        "--client-debug",
        default=None,
        help="librdkafka debug contexts (e.g. metadata,topic,broker), logged to "
        "producer.log / consumer.log in the work directory (with --keep)",
    )
    parser.add_argument(
        "--broker-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="broker configuration for the experiment (e.g. replica.fetch.backoff.ms=50)",
    )
    parser.add_argument("--keep", action="store_true", help="keep bench/out/failover-kill-*")
    args = parser.parse_args()
    client_config: dict[str, Any] = {}
    if args.client_debug:
        client_config["debug"] = args.client_debug
    if args.retry_backoff_max_ms is not None:
        client_config["retry.backoff.max.ms"] = args.retry_backoff_max_ms
        client_config["retry.backoff.ms"] = min(100, args.retry_backoff_max_ms)
    from kazoo.client import KazooClient

    overrides = {"zookeeper.session.timeout.ms": str(args.session_timeout_ms)}
    overrides.update(kv.split("=", 1) for kv in args.broker_override)
    ctx = mp.get_context("spawn")
    acked = ctx.RawArray("q", args.partitions)
    consumed = ctx.RawArray("q", args.partitions)
    ready, stop_producer, stop_consumer = ctx.Event(), ctx.Event(), ctx.Event()
    producer_rx, producer_tx = ctx.Pipe(duplex=False)
    consumer_rx, consumer_tx = ctx.Pipe(duplex=False)
    kills: list[dict[str, Any]] = []
    with (
        work_dir("failover-kill", keep=args.keep) as out,
        replog_cluster(out / "cluster", 3, overrides) as cluster,
    ):
        bootstrap = cluster.bootstrap_servers()
        create_topic(bootstrap, TOPIC, args.partitions, 3, {"min.insync.replicas": "2"})
        zk = KazooClient(hosts=cluster.zookeeper_connect, timeout=30)
        zk.start(timeout=30)
        consumer = ctx.Process(
            target=consumer_process,
            args=(
                bootstrap,
                args.partitions,
                str(out),
                client_config,
                consumed,
                ready,
                stop_consumer,
                consumer_tx,
            ),
        )
        producer = ctx.Process(
            target=producer_process,
            args=(
                bootstrap,
                args.partitions,
                args.rate,
                str(out),
                client_config,
                acked,
                stop_producer,
                producer_tx,
            ),
        )
        children = []
        try:
            consumer.start()
            children.append(consumer)
            deadline = time.monotonic() + 60
            while not ready.wait(0.2):
                if not consumer.is_alive() or time.monotonic() > deadline:
                    raise RuntimeError("the consumer process did not start")
            producer.start()
            children.append(producer)
            for turn in range(args.kills):
                kills.append(one_kill(cluster, zk, args.partitions, acked, consumed, turn))
            wait_healthy(cluster, zk, args.partitions, acked, consumed, RECOVERY_TIMEOUT_S)
            stop_producer.set()
            if not producer_rx.poll(180):
                raise RuntimeError("no result from the producer process")
            produced = producer_rx.recv()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and any(
                consumed[p] < acked[p] for p in range(args.partitions)
            ):
                time.sleep(0.05)
            stop_consumer.set()
            if not consumer_rx.poll(60):
                raise RuntimeError("no result from the consumer process")
            received = consumer_rx.recv()
        finally:
            stop_producer.set()
            stop_consumer.set()
            for child in children:
                child.join(30)
                if child.is_alive():
                    child.kill()
                    child.join()
            zk.stop()
            zk.close()
    result = analyse(kills, produced, received, args.partitions)
    report(result, args)
    print(json.dumps({"bench": "failover_kill", "config": vars(args), **result}))


if __name__ == "__main__":
    main()
