"""Per-record latency at fixed rates: the producer's acknowledgement and produce -> consume.

    .venv/bin/python bench/latency.py [--rate 2 10 30] [--compare-rate 10] [--seconds 20]
                                      [--warm-up 5] [--size 1024] [--partitions 3]
                                      [--linger-ms 1] [--profile-dir DIR] [--profile-rate 10]

A 3-broker LocalCluster (ZooKeeper and replog brokers). Each case gets a fresh topic of
``--partitions`` partitions; RF 3 topics have ``min.insync.replicas=2``. Cases: RF 3
``acks=all`` at every ``--rate`` (MB/s, 1 MB = 10^6 bytes), then RF 1 ``acks=all`` and RF 3
``acks=1`` at ``--compare-rate`` (0 skips them).

Per case, two processes besides this one:

* a **producer process** (confluent-kafka, ``linger.ms`` as given, no idempotence, no
  compression) sends ``--size``-byte records round-robin over the partitions on a fixed
  schedule of ``rate / size`` records a second, checked every millisecond (so records go
  out in bursts of up to 1 ms of schedule). Each record carries ``time.time_ns()`` taken
  just before its ``produce()`` call and its scheduled send time. The delivery callback
  stamps the acknowledgement; the producer calls ``poll`` at least every millisecond.
* a **consumer process** (confluent-kafka, ``assign()`` at offset 0 of the fresh topic, no
  group, librdkafka's fetch defaults: ``fetch.wait.max.ms=500``, ``fetch.min.bytes=1``)
  calls ``poll()`` for one record at a time and stamps ``time.time_ns()`` the moment each
  returns. A consumer sees a record only once the high watermark passed it, so for
  ``acks=all`` and ``acks=1`` alike this includes replication to the ISR.

Both processes run on this machine, so ``time.time_ns()`` is one clock. Records sent during
the first ``--warm-up`` seconds are not counted; the next ``--seconds`` are. Reported per
case: p50, p99, p99.9 and max of end-to-end (receive - send) and of the ack latency (ack -
send), the rate achieved (records sent in the measured window over its length), the
largest lag behind the send schedule, records not received, and the machine's 1-minute
load average at the end of the case (other work on the machine moves these figures). The
send time is the actual ``produce()`` time; when the producer falls behind its schedule the figures leave
that wait out, so the lag is printed, and the JSON also has end-to-end from the scheduled
time. Prints a table, then one JSON line.

Options for the setup of issue 27's table: ``--idempotence`` (an idempotent producer,
``enable.idempotence=true``, which needs ``acks=all``), ``--fetch-wait-max-ms 5`` (the
consumer's ``fetch.wait.max.ms``), ``--pin pinned|unpinned|both``: pinned, ``taskset``
puts ZooKeeper and every broker (all their threads) on CPU 0 and the producer and
consumer processes on CPU 1 (the nearest this machine comes to clients on other hosts);
unpinned, every process may run on every CPU; ``both`` runs each case both ways, pinned
first. Each record carries a sequence number: every acknowledged record must be received,
and none twice (``missing``, ``duplicates`` in the table; records sent but never
acknowledged are not counted). ``cores`` is the brokers' CPU (user + system from
``/proc``, summed over the three) over the measured window, in cores. The brokers run
with ``/metrics``; their event loop lag over the measured window (the histograms
``kafka_server_eventloop_lagms`` and ``..._ownlagms``, scraped at its start and end) is
printed as p99 and max, bucket upper bounds of the worst broker. The table of
issue 27:

    .venv/bin/python bench/latency.py --rate 0.2 2 10 --compare-rate 0 --idempotence \
        --fetch-wait-max-ms 5 --pin both

``--profile-dir DIR`` runs ``py-spy record`` (``--nonblocking``, raw collapsed stacks, one
file per broker) on every broker during the measured window of the RF 3 ``acks=all`` case at
``--profile-rate``; py-spy is not a project dependency (``.venv/bin/pip install py-spy``).
Figures from a profiled run carry py-spy's overhead: quote the ones from a run without it.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
import uuid
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import (
    create_topic,
    lag_bounds,
    lag_counts,
    latency_summary,
    partition_leaders,
    quiet_logger,
    replog_cluster,
    say,
    scrape_lag,
    work_dir,
)

from replog.cluster.launcher import LocalCluster
from replog.server.loop_lag import LAG, OWN_LAG

STAMPS = struct.Struct("<qqq")  # send time, scheduled send time (time.time_ns), sequence
CLIENT_CPU = 1  # pinned: the producer and consumer here
SERVER_CPU = 0  # pinned: ZooKeeper and the brokers here
TICK_S = 0.001
DRAIN_S = 15.0


@dataclass(frozen=True)
class Case:
    label: str
    replication_factor: int
    acks: str
    rate_mb: float
    pinned: bool | None = None  # None: as the processes were started (no taskset)


def producer_process(
    bootstrap: str,
    topic: str,
    partitions: int,
    case: Case,
    args: dict[str, Any],
    started: Any,
    conn: Any,
) -> None:
    """Child process: send on schedule, stamp every acknowledgement, send the stamps back."""
    from confluent_kafka import Producer

    if case.pinned:
        os.sched_setaffinity(0, {CLIENT_CPU})

    size, warm_up_s, seconds = args["size"], args["warm_up"], args["seconds"]
    rate = case.rate_mb * 1e6 / size
    padding = b"x" * max(0, size - STAMPS.size)
    pack = STAMPS.pack
    unpack = STAMPS.unpack_from
    send_ns = array("q")  # of acknowledged records
    ack_ns = array("q")
    acked_seq = array("q")
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        now = time.time_ns()
        if err is not None:
            errors.append(str(err))
            return
        sent_at, _, seq = unpack(msg.value())
        send_ns.append(sent_at)
        ack_ns.append(now)
        acked_seq.append(seq)

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": case.acks,
            "linger.ms": args["linger_ms"],
            "enable.idempotence": args["idempotence"],
            "compression.type": "none",
            "message.timeout.ms": 60_000,
            "logger": quiet_logger(Path(args["log_dir"]) / "producer.log"),
            "on_delivery": on_delivery,
        }
    )
    producer.list_topics(topic, timeout=30)
    total = int(rate * (warm_up_s + seconds))
    start_ns = time.time_ns()
    start = time.perf_counter()
    started.set()
    measure_from = start + warm_up_s
    sent = 0
    sent_before_window: int | None = None
    max_lag_s = 0.0
    produce = producer.produce
    while sent < total:
        now = time.perf_counter()
        due = min(total, int((now - start) * rate) + 1)
        if now >= measure_from:
            if sent_before_window is None:
                sent_before_window = sent
            max_lag_s = max(max_lag_s, now - (start + sent / rate))
        while sent < due:
            sched = start_ns + int(sent / rate * 1e9)
            try:
                produce(
                    topic, pack(time.time_ns(), sched, sent) + padding, partition=sent % partitions
                )
            except BufferError:
                producer.poll(TICK_S)
                continue
            sent += 1
        producer.poll(max(TICK_S, start + sent / rate - time.perf_counter()))
    end_ns = time.time_ns()
    window_s = time.perf_counter() - measure_from
    left = producer.flush(60)
    conn.send(
        {
            "start_ns": start_ns,
            "end_ns": end_ns,
            "sent": sent,
            "sent_in_window": sent - (sent_before_window or 0),
            "window_s": window_s,
            "unacknowledged": left,
            "errors": errors[:5],
            "error_count": len(errors),
            "max_lag_s": max_lag_s,
            "send_ns": send_ns.tobytes(),
            "ack_ns": ack_ns.tobytes(),
            "acked_seq": acked_seq.tobytes(),
        }
    )
    conn.close()


def consumer_process(
    bootstrap: str,
    topic: str,
    partitions: int,
    log_dir: str,
    settings: dict[str, Any],
    ready: Any,
    stop: Any,
    count: Any,
    conn: Any,
) -> None:
    """Child process: ``poll()`` one record at a time, stamp it as it is returned."""
    from confluent_kafka import Consumer, TopicPartition

    if settings["pinned"]:
        os.sched_setaffinity(0, {CLIENT_CPU})
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": "replog-bench-latency",
        "enable.auto.commit": False,
        "logger": quiet_logger(Path(log_dir) / "consumer.log"),
    }
    if settings["fetch_wait_max_ms"] is not None:
        config["fetch.wait.max.ms"] = settings["fetch_wait_max_ms"]
    consumer = Consumer(config)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    consumer.poll(0.5)
    ready.set()
    send_ns, sched_ns, recv_ns, seqs = array("q"), array("q"), array("q"), array("q")
    unpack = STAMPS.unpack_from
    poll = consumer.poll
    errors = 0
    while not stop.is_set():
        message = poll(0.1)
        now = time.time_ns()
        if message is None:
            continue
        if message.error() is not None:
            errors += 1
            continue
        sent, sched, seq = unpack(message.value())
        seqs.append(seq)
        send_ns.append(sent)
        sched_ns.append(sched)
        recv_ns.append(now)
        count.value += 1
    consumer.close()
    conn.send(
        {
            "errors": errors,
            "send_ns": send_ns.tobytes(),
            "sched_ns": sched_ns.tobytes(),
            "recv_ns": recv_ns.tobytes(),
            "seq": seqs.tobytes(),
        }
    )
    conn.close()


def _ints(raw: bytes) -> array:
    out = array("q")
    out.frombytes(raw)
    return out


def start_profiles(cluster: LocalCluster, out: Path, label: str, seconds: float) -> list[Any]:
    """``py-spy record`` on every broker for ``seconds``; the Popen objects (stopped by pid)."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    out.mkdir(parents=True, exist_ok=True)
    procs = []
    for broker_id in cluster.broker_ids:
        pid = cluster.broker_pid(broker_id)
        target = out / f"{label}-broker{broker_id}.txt"
        procs.append(
            subprocess.Popen(
                [
                    py_spy,
                    "record",
                    "--pid",
                    str(pid),
                    "--duration",
                    str(int(seconds)),
                    "--rate",
                    "200",
                    "--nonblocking",
                    "--format",
                    "raw",
                    "--output",
                    str(target),
                ],
                stdout=subprocess.DEVNULL,
                stderr=open(out / f"{label}-broker{broker_id}.err", "wb"),  # noqa: SIM115
                start_new_session=True,
            )
        )
    return procs


def stop_profiles(procs: list[Any]) -> None:
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def pin_cluster(cluster: LocalCluster, pinned: bool) -> None:
    """ZooKeeper and the brokers, every thread: on ``SERVER_CPU`` alone (pinned) or on
    every CPU (``taskset -a -p``)."""
    cpus = str(SERVER_CPU) if pinned else f"0-{os.cpu_count() - 1}"
    for _, pid in cluster.live_processes():
        subprocess.run(
            ["taskset", "-a", "-p", "-c", cpus, str(pid)],
            check=True,
            stdout=subprocess.DEVNULL,
        )


def run_case(
    cluster: LocalCluster, case: Case, args: argparse.Namespace, log_dir: Path, profile: bool
) -> dict[str, Any]:
    bootstrap = cluster.bootstrap_servers()
    topic = f"latency-rf{case.replication_factor}-{uuid.uuid4().hex[:6]}"
    configs = {"min.insync.replicas": "2"} if case.replication_factor == 3 else {}
    create_topic(bootstrap, topic, args.partitions, case.replication_factor, configs)
    leaders = partition_leaders(bootstrap, topic)
    if case.pinned is not None:
        pin_cluster(cluster, case.pinned)
    ctx = mp.get_context("spawn")
    ready, stop, started = ctx.Event(), ctx.Event(), ctx.Event()
    count = ctx.RawValue("q", 0)
    consumer_rx, consumer_tx = ctx.Pipe(duplex=False)
    producer_rx, producer_tx = ctx.Pipe(duplex=False)
    consumer = ctx.Process(
        target=consumer_process,
        args=(
            bootstrap,
            topic,
            args.partitions,
            str(log_dir),
            {"pinned": case.pinned, "fetch_wait_max_ms": args.fetch_wait_max_ms},
            ready,
            stop,
            count,
            consumer_tx,
        ),
    )
    child_args = {
        "size": args.size,
        "warm_up": args.warm_up,
        "seconds": args.seconds,
        "linger_ms": args.linger_ms,
        "idempotence": args.idempotence,
        "log_dir": str(log_dir),
    }
    producer = ctx.Process(
        target=producer_process,
        args=(bootstrap, topic, args.partitions, case, child_args, started, producer_tx),
    )
    profiles: list[Any] = []
    children = [consumer]
    try:
        consumer.start()
        if not ready.wait(60):
            raise RuntimeError("the consumer process did not start")
        producer.start()
        children.append(producer)
        if not started.wait(60):
            raise RuntimeError("the producer process did not start")
        time.sleep(args.warm_up)
        lag_from = brokers_lag(cluster)
        cpu_from, cpu_from_at = brokers_cpu_s(cluster), time.monotonic()
        if profile:
            profiles = start_profiles(cluster, Path(args.profile_dir), case_key(case), args.seconds)
        if not producer_rx.poll(args.seconds + 120):
            raise RuntimeError("no result from the producer process")
        sent = producer_rx.recv()
        broker_cpu = (brokers_cpu_s(cluster) - cpu_from, time.monotonic() - cpu_from_at)
        loop_lag = lag_in_window(lag_from, brokers_lag(cluster))
        deadline = time.monotonic() + DRAIN_S
        while count.value < sent["sent"] and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        if not consumer_rx.poll(60):
            raise RuntimeError("no result from the consumer process")
        received = consumer_rx.recv()
    finally:
        stop.set()
        stop_profiles(profiles)
        for child in children:
            child.join(30)
            if child.is_alive():
                child.kill()
                child.join()
    row = summarize(case, args, leaders, sent, received, broker_cpu)
    row["loop_lag"] = loop_lag
    return row


def brokers_lag(cluster: LocalCluster) -> dict[int, dict]:
    """Every broker's loop lag histograms (``/metrics``) now."""
    return {
        b: scrape_lag(url)
        for b in cluster.broker_ids
        if (url := cluster.metrics_url(b)) is not None
    }


def lag_in_window(before: dict[int, dict], after: dict[int, dict]) -> dict[str, float]:
    """The brokers' event loop lag between two scrapes: p99 and max (bucket upper bounds,
    the worst broker's) of the lag and of the loop's own lag (without run-queue wait)."""
    out: dict[str, float] = {}
    for name, key in ((LAG, "lag"), (OWN_LAG, "own_lag")):
        bounds = [lag_bounds(lag_counts(before[b], after[b], name)) for b in after if b in before]
        out[f"{key}_p99_ms"] = max((p for p, _ in bounds), default=float("nan"))
        out[f"{key}_max_ms"] = max((m for _, m in bounds), default=float("nan"))
    return out


def brokers_cpu_s(cluster: LocalCluster) -> float:
    """CPU seconds (user + system) the broker processes have used so far (/proc/<pid>/stat)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for broker_id in cluster.broker_ids:
        fields = Path(f"/proc/{cluster.broker_pid(broker_id)}/stat").read_text().rsplit(")", 1)[1]
        utime, stime = fields.split()[11:13]
        total += (int(utime) + int(stime)) / tick
    return total


def case_key(case: Case) -> str:
    pin = {None: "", True: "-pinned", False: "-unpinned"}[case.pinned]
    return f"rf{case.replication_factor}-acks{case.acks}-{case.rate_mb:g}MBps{pin}"


def summarize(
    case: Case,
    args: argparse.Namespace,
    leaders: dict[int, int],
    sent: dict[str, Any],
    received: dict[str, Any],
    broker_cpu: tuple[float, float],
) -> dict[str, Any]:
    window_from = sent["start_ns"] + int(args.warm_up * 1e9)
    window_s = sent["window_s"]
    ack_send, ack_at = _ints(sent["send_ns"]), _ints(sent["ack_ns"])
    acks = [a - s for s, a in zip(ack_send, ack_at, strict=True) if s >= window_from]
    r_send, r_sched, r_recv = (_ints(received[k]) for k in ("send_ns", "sched_ns", "recv_ns"))
    e2e, e2e_sched = [], []
    for s, sch, r in zip(r_send, r_sched, r_recv, strict=True):
        if s >= window_from:
            e2e.append(r - s)
            e2e_sched.append(r - sch)
    sent_in_window = sent["sent_in_window"]
    acked = set(_ints(sent["acked_seq"]))
    received_seq = _ints(received["seq"])
    distinct = set(received_seq)
    return {
        "case": case.label,
        "pinned": case.pinned,
        # every acknowledged record received, once
        "missing": len(acked - distinct),
        "duplicates": len(received_seq) - len(distinct),
        "replication_factor": case.replication_factor,
        "acks": case.acks,
        "target_mb_s": case.rate_mb,
        "achieved_mb_s": sent_in_window * args.size / window_s / 1e6 if window_s > 0 else 0.0,
        "acknowledged_mb_s": len(acks) * args.size / window_s / 1e6 if window_s > 0 else 0.0,
        "consumed_mb_s": len(e2e) * args.size / window_s / 1e6 if window_s > 0 else 0.0,
        "window_s": window_s,
        "max_schedule_lag_ms": sent["max_lag_s"] * 1000,
        "sent": sent["sent"],
        "acknowledged": len(ack_send),
        "unacknowledged": sent["unacknowledged"],
        "received": len(r_recv),
        "not_received": sent["sent"] - len(r_recv),
        "producer_errors": sent["error_count"],
        "producer_error_sample": sent["errors"],
        "consumer_errors": received["errors"],
        "leaders": {str(p): b for p, b in sorted(leaders.items())},
        "load_average_1min": os.getloadavg()[0],
        # CPU the three brokers used in the measured window, per MB acknowledged: the cost,
        # which the machine's other load does not change the way it changes latency
        "broker_cpu_s_per_mb": (broker_cpu[0] / (len(acks) * args.size / 1e6) if acks else None),
        "broker_cores_busy": broker_cpu[0] / broker_cpu[1] if broker_cpu[1] > 0 else None,
        "e2e": latency_summary(e2e),
        "ack": latency_summary(acks),
        "e2e_from_schedule": latency_summary(e2e_sched),
    }


def print_table(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(
        f"\nper-record latency, 3 brokers, {args.partitions} partitions, {args.size}-byte records, "
        f"linger.ms={args.linger_ms}, {args.seconds:g} s measured after {args.warm_up:g} s warm-up"
        + (", idempotent producer" if args.idempotence else "")
        + (
            f", consumer fetch.wait.max.ms={args.fetch_wait_max_ms}"
            if args.fetch_wait_max_ms is not None
            else ""
        )
    )
    head = (
        f"{'case':<24}{'target':>7}{'achieved':>9}  "
        f"{'e2e p50':>8}{'p99':>8}{'p99.9':>8}{'max':>8}  "
        f"{'ack p50':>8}{'p99':>8}{'p99.9':>8}{'max':>8}  {'sched lag':>9}{'lost':>6}{'dup':>5}"
        f"{'load':>6}{'cpu s/MB':>9}{'cores':>7}  {'lag p99':>7}{'max':>6}{'own p99':>8}{'max':>6}"
    )
    print(head)
    print(f"{'':<24}{'MB/s':>7}{'MB/s':>9}  {'ms':>8}{'':>24}  {'ms':>8}{'':>24}  {'max ms':>9}")
    for r in rows:
        e, a = r["e2e"], r["ack"]
        print(
            f"{r['case']:<24}{r['target_mb_s']:>7g}{r['achieved_mb_s']:>9.1f}  "
            + "".join(_ms(e[k]) for k in ("p50_ms", "p99_ms", "p999_ms", "max_ms"))
            + "  "
            + "".join(_ms(a[k]) for k in ("p50_ms", "p99_ms", "p999_ms", "max_ms"))
            + f"  {r['max_schedule_lag_ms']:>9.1f}{r['missing']:>6}{r['duplicates']:>5}"
            + f"{r['load_average_1min']:>6.1f}"
            + (f"{r['broker_cpu_s_per_mb']:>9.3f}" if r["broker_cpu_s_per_mb"] else f"{'-':>9}")
            + (f"{r['broker_cores_busy']:>7.2f}" if r["broker_cores_busy"] else f"{'-':>7}")
            + "  "
            + "".join(
                f"{r['loop_lag'][k]:>{w}g}"
                for k, w in (
                    ("lag_p99_ms", 7),
                    ("lag_max_ms", 6),
                    ("own_lag_p99_ms", 8),
                    ("own_lag_max_ms", 6),
                )
            )
        )
    print(
        "lag: the brokers' event loop lag in the window (kafka_server_eventloop_lagms, "
        "bucket upper bounds, ms, the worst broker); own: less the time the loop's thread "
        "waited for a CPU (kafka_server_eventloop_ownlagms)"
    )


def _ms(value: float | None) -> str:
    return f"{'-':>8}" if value is None else f"{value:>8.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--rate",
        type=float,
        nargs="+",
        default=[2.0, 10.0, 30.0],
        help="MB/s for the RF 3 acks=all cases",
    )
    parser.add_argument(
        "--compare-rate",
        type=float,
        default=10.0,
        help="MB/s for the RF 1 acks=all and RF 3 acks=1 rows (0: none)",
    )
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warm-up", type=float, default=5.0)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--linger-ms", type=float, default=1.0)
    parser.add_argument("--profile-dir", default=None)
    parser.add_argument("--profile-rate", type=float, default=10.0)
    parser.add_argument("--keep", action="store_true", help="keep bench/out/latency-*")
    parser.add_argument(
        "--idempotence", action="store_true", help="enable.idempotence=true (acks=all cases)"
    )
    parser.add_argument(
        "--fetch-wait-max-ms", type=int, default=None, help="the consumer's fetch.wait.max.ms"
    )
    parser.add_argument(
        "--pin",
        choices=("none", "pinned", "unpinned", "both"),
        default="none",
        help="pinned: ZooKeeper and brokers on CPU 0, clients on CPU 1 (taskset); both: "
        "every case pinned then unpinned",
    )
    args = parser.parse_args()
    pins: list[bool | None] = {
        "none": [None],
        "pinned": [True],
        "unpinned": [False],
        "both": [True, False],
    }[args.pin]
    suffix = {None: "", True: " pinned", False: " unpinned"}
    cases = [
        Case(f"RF 3 acks=all{suffix[pin]}", 3, "all", rate, pin)
        for pin in pins
        for rate in args.rate
    ]
    if args.compare_rate > 0:
        for pin in pins:
            cases.append(Case(f"RF 1 acks=all{suffix[pin]}", 1, "all", args.compare_rate, pin))
            if not args.idempotence:  # an idempotent producer needs acks=all
                cases.append(Case(f"RF 3 acks=1{suffix[pin]}", 3, "1", args.compare_rate, pin))
    rows = []
    with (
        work_dir("latency", keep=args.keep) as out,
        replog_cluster(out / "cluster", 3, metrics=True) as cluster,
    ):
        for case in cases:
            profile = (
                args.profile_dir is not None
                and case.replication_factor == 3
                and case.acks == "all"
                and case.rate_mb == args.profile_rate
            )
            say(f"{case.label} at {case.rate_mb:g} MB/s{' (profiled)' if profile else ''} ...")
            row = run_case(cluster, case, args, out, profile)
            rows.append(row)
            say(
                f"  achieved {row['achieved_mb_s']:.1f} MB/s, e2e p50 {row['e2e']['p50_ms']:.1f} "
                f"ms p99 {row['e2e']['p99_ms']:.1f} ms, ack p50 {row['ack']['p50_ms']:.1f} ms, "
                f"schedule lag max {row['max_schedule_lag_ms']:.0f} ms, "
                f"acknowledged not received {row['missing']}, twice {row['duplicates']}, "
                f"brokers {row['broker_cores_busy'] or 0:.2f} cores, loop lag max "
                f"{row['loop_lag']['lag_max_ms']:g} ms, own {row['loop_lag']['own_lag_max_ms']:g} ms"
            )
    print_table(rows, args)
    print(f"/proc/loadavg at the end: {Path('/proc/loadavg').read_text().strip()}")
    config = {k: v for k, v in vars(args).items() if k != "keep"}
    print(json.dumps({"bench": "latency", "config": config, "rows": rows}))


if __name__ == "__main__":
    main()
