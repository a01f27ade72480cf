"""Transactions as clients see them: transactions/s, commit latency, the LSO's lag behind
the high watermark, read_committed against read_uncommitted end-to-end latency.

    .venv/bin/python bench/transactions.py [--seconds 10] [--sizes 1,10,100]
        [--lso-interval-ms 20] [--e2e-rate 500] [--e2e-seconds 20] [--warm-up 5]
        [--commit-interval-ms 100 | --commit-records N] [--rounds 2]
        [--consumers together|alternate] [--fetch-wait-max-ms MS] [--trace N]
        [--only back-to-back e2e trace] [--keep]

replog runs as 3 brokers with ``/metrics``; each topic has 3 partitions at replication
factor 3 (``min.insync.replicas`` 2), ``__transaction_state`` the settings Kafka gives it
(replication factor 3, min.insync.replicas 2). Three parts:

**back-to-back** (per ``--sizes``): one confluent-kafka transactional producer runs
``begin_transaction``, that many 100-byte records spread over the three partitions,
``commit_transaction``, again and again for ``--seconds``. A transaction's latency is the
wall time from ``begin_transaction`` to the return of ``commit_transaction``; the commit's
alone is the time in ``commit_transaction``. Meanwhile, every ``--lso-interval-ms``, this
process asks each partition's leader (the project's protocol client, one connection a
leader) for ListOffsets at isolation level 1 (the last stable offset) then 0 (the high
watermark), the two pipelined on one connection: the **LSO lag** in offsets is
HW - LSO of each sample of a partition that received records; in ms, how long the
partition's HW has been past the LSO (the sample's time less the first sample's at which
the HW exceeded that LSO: the age of the oldest record a read_uncommitted consumer sees
and a read_committed one does not; its resolution is the sampling interval). The
sampler costs the leaders ~2 requests a partition per interval (each ~0.3 ms of CPU).

**e2e**: a transactional producer in its own process sends 1 KB records on a fixed
schedule of ``--e2e-rate`` records/s, round-robin over the partitions, and commits every
``--commit-interval-ms`` (Kafka Streams' ``commit.interval.ms`` under exactly-once: 100
ms) or every ``--commit-records`` records; ``commit_transaction`` blocks its loop as it
would a Streams thread (the schedule lag is printed). The producer has
``max.in.flight.requests.per.connection=1`` (``--max-in-flight``): with librdkafka's 5,
two produce requests of one partition that both open its transaction are verified with
the coordinator (KIP-890) concurrently and can be appended out of order, which the
broker refuses with OUT_OF_ORDER_SEQUENCE_NUMBER, fatal to the producer (seen 2026-11-28;
Kafka handles one request of a connection at a time). Each record carries its send time
(``time.time_ns()`` just before ``produce()``) and a sequence number. Two consumer
processes (``isolation.level=read_committed`` and ``read_uncommitted``, ``assign()`` at
offset 0, no group, ``poll()`` one record at a time, each record stamped as it is
returned) read the same topic at the same time (``--consumers together``), or one at a
time in alternating rounds (``--consumers alternate``, which splits the brokers' CPU by
isolation level). Records sent in the first ``--warm-up`` seconds are not counted.
Reported per round and consumer: p50/p99/p99.9/max of end-to-end latency (receive -
send), records missing (committed but not received) and duplicates; the ratio
read_committed / read_uncommitted of p50 and p99; per record the read_committed receipt
less the read_uncommitted one (together only), and less the return of the
``commit_transaction`` that committed it; the brokers' CPU (utime + stime from
``/proc``, over the measured window) and the load average.

**trace** (``--trace N``): N transactions of one record back to back with librdkafka's
``debug=eos,protocol`` log (its own timestamps), in a child process whose stderr goes to
a file; each request's round trip as librdkafka logs it ("Received ...Response ... rtt")
is attributed to the commit it falls in: the median time of AddPartitionsToTxn (its
attempts, and how many answered CONCURRENT_TRANSACTIONS while the previous transaction's
markers were still being written), Produce and EndTxn within ``commit_transaction``.

Nothing is asserted; prints tables, then one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import multiprocessing as mp
import os
import re
import struct
import sys
import threading
import time
import uuid
from array import array
from pathlib import Path
from typing import Any

from common import (
    create_topic,
    latency_summary,
    partition_leaders,
    percentile,
    quiet_logger,
    replog_cluster,
    say,
    work_dir,
)
from latency import brokers_cpu_s

from replog.cluster.launcher import LocalCluster
from replog.protocol.apis import ApiKey, make, nested, request_schema
from replog.protocol.client import KafkaConnection

TOPIC = "transactions"
PARTITIONS = 3
STAMPS = struct.Struct("<qq")  # send time (time.time_ns), sequence
E2E_SIZE = 1024
TICK_S = 0.001
DRAIN_S = 15.0
READ_COMMITTED, READ_UNCOMMITTED = "read_committed", "read_uncommitted"


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


# -- the LSO's lag behind the high watermark ---------------------------------------------


def list_offsets_request(isolation_level: int, topic: str, partitions: list[int]) -> Any:
    cls = request_schema(ApiKey.LIST_OFFSETS, 7)
    parts = tuple(
        make(
            nested(cls, "ListOffsetsPartition"),
            partition_index=p,
            current_leader_epoch=-1,
            timestamp=-1,  # latest: the HW (read_uncommitted) or the LSO (read_committed)
        )
        for p in partitions
    )
    return make(
        cls,
        replica_id=-1,
        isolation_level=isolation_level,
        topics=(make(nested(cls, "ListOffsetsTopic"), name=topic, partitions=parts),),
    )


class LsoSampler:
    """ListOffsets at both isolation levels to every leader every ``interval_s``, in a
    thread of its own (its own event loop): samples (monotonic ns, partition, HW, LSO)."""

    def __init__(
        self, cluster: LocalCluster, topic: str, leaders: dict[int, int], interval_s: float
    ) -> None:
        self.cluster = cluster
        self.topic = topic
        self.by_leader: dict[int, list[int]] = {}
        for p, b in sorted(leaders.items()):
            self.by_leader.setdefault(b, []).append(p)
        self.interval_s = interval_s
        self.samples: list[tuple[int, int, int, int]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def __enter__(self) -> LsoSampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    async def _run(self) -> None:
        conns = {}
        try:
            for b in self.by_leader:
                conns[b] = KafkaConnection("127.0.0.1", self.cluster.port(b), "bench-lso")
                await conns[b].connect()
            bodies = {
                b: (
                    list_offsets_request(1, self.topic, ps),
                    list_offsets_request(0, self.topic, ps),
                )
                for b, ps in self.by_leader.items()
            }
            next_at = time.monotonic()
            while not self._stop.is_set():
                answers = await asyncio.gather(
                    *(self._sample(conns[b], *bodies[b]) for b in self.by_leader)
                )
                for at, found in answers:
                    for p, (hw, lso) in found.items():
                        self.samples.append((at, p, hw, lso))
                next_at += self.interval_s
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        finally:
            for conn in conns.values():
                await conn.close()

    async def _sample(
        self, conn: KafkaConnection, committed: Any, uncommitted: Any
    ) -> tuple[int, dict[int, tuple[int, int]]]:
        """The LSO first, then the HW (pipelined, answered in order): HW - LSO >= 0."""
        try:
            lso_answer, hw_answer = await asyncio.gather(
                conn.request(committed, 10), conn.request(uncommitted, 10)
            )
        except Exception as exc:  # counted, reported
            self.errors.append(repr(exc))
            return time.monotonic_ns(), {}
        at = time.monotonic_ns()
        lso = _offsets(lso_answer, self.errors)
        hw = _offsets(hw_answer, self.errors)
        return at, {p: (hw[p], lso[p]) for p in hw if p in lso}


def _offsets(answer: Any, errors: list[str]) -> dict[int, int]:
    out = {}
    for topic in answer.topics:
        for p in topic.partitions:
            if p.error_code:
                errors.append(f"ListOffsets error {p.error_code}")
            else:
                out[int(p.partition_index)] = int(p.offset)
    return out


def lso_lag(samples: list[tuple[int, int, int, int]]) -> dict[str, Any]:
    """HW - LSO (offsets) and the HW's time past the LSO (ms) over the samples of the
    partitions whose HW moved; the share of samples with the LSO behind."""
    by_partition: dict[int, list[tuple[int, int, int]]] = {}
    for at, p, hw, lso in samples:
        by_partition.setdefault(p, []).append((at, hw, lso))
    offsets: list[int] = []
    ages_ns: list[int] = []
    for rows in by_partition.values():
        if rows[0][1] == rows[-1][1]:
            continue  # no record in this partition
        times = [at for at, _, _ in rows]
        hws = [hw for _, hw, _ in rows]  # never decreases
        for at, hw, lso in rows:
            offsets.append(hw - lso)
            if hw > lso:
                first = bisect.bisect_right(hws, lso)  # first sample with HW > LSO
                ages_ns.append(at - times[first])
            else:
                ages_ns.append(0)
    offsets.sort()
    ages = latency_summary(ages_ns)
    behind = latency_summary([a for a in ages_ns if a])
    return {
        "samples": len(offsets),
        "behind_share": (sum(1 for o in offsets if o) / len(offsets)) if offsets else None,
        "offsets_p50": percentile(offsets, 0.5) if offsets else None,
        "offsets_p99": percentile(offsets, 0.99) if offsets else None,
        "offsets_max": offsets[-1] if offsets else None,
        "ms_p50": ages["p50_ms"],
        "ms_p99": ages["p99_ms"],
        "ms_max": ages["max_ms"],
        "ms_p50_while_behind": behind["p50_ms"],
        "ms_p99_while_behind": behind["p99_ms"],
        "offsets_p50_while_behind": percentile([o for o in offsets if o], 0.5)
        if any(offsets)
        else None,
    }


# -- back to back ------------------------------------------------------------------------


def run_size(
    cluster: LocalCluster,
    topic: str,
    leaders: dict[int, int],
    records: int,
    seconds: float,
    lso_interval_s: float,
) -> dict[str, Any]:
    bootstrap = cluster.bootstrap_servers()
    producer = _producer(bootstrap, f"bench-{records}-{uuid.uuid4().hex[:6]}")
    producer.init_transactions(60)
    value = b"x" * 100
    whole, commits = [], []
    sampler = LsoSampler(cluster, topic, leaders, lso_interval_s) if lso_interval_s else None
    cpu_from = brokers_cpu_s(cluster)
    started = time.monotonic()
    deadline = started + seconds
    count = 0
    if sampler:
        sampler.__enter__()
    try:
        while time.monotonic() < deadline:
            t0 = time.perf_counter_ns()
            producer.begin_transaction()
            for i in range(records):
                producer.produce(topic, value=value, partition=i % PARTITIONS)
            t1 = time.perf_counter_ns()
            producer.commit_transaction(60)
            t2 = time.perf_counter_ns()
            whole.append(t2 - t0)
            commits.append(t2 - t1)
            count += 1
    finally:
        if sampler:
            sampler.__exit__(None, None, None)
    elapsed = time.monotonic() - started
    cpu = brokers_cpu_s(cluster) - cpu_from
    return {
        "records_per_transaction": records,
        "transactions": count,
        "transactions_per_s": count / elapsed,
        "records_per_s": count * records / elapsed,
        "transaction": latency_summary(whole),
        "commit": latency_summary(commits),
        "lso_lag": lso_lag(sampler.samples) if sampler else None,
        "lso_sampler_errors": sampler.errors[:5] if sampler else [],
        "broker_cores": cpu / elapsed,
        "broker_cpu_ms_per_transaction": 1000 * cpu / count if count else None,
        "loadavg": Path("/proc/loadavg").read_text().strip(),
    }


# -- read_committed against read_uncommitted ---------------------------------------------


def producer_process(
    bootstrap: str, topic: str, settings: dict[str, Any], started: Any, conn: Any
) -> None:
    """Child process: ``produce_on_schedule``; a client error is sent back as such."""
    from confluent_kafka import KafkaException

    try:
        conn.send(produce_on_schedule(bootstrap, topic, settings, started))
    except KafkaException as exc:
        conn.send({"error": str(exc.args[0])})
    conn.close()


def produce_on_schedule(
    bootstrap: str, topic: str, settings: dict[str, Any], started: Any
) -> dict[str, Any]:
    """Records on schedule, a commit every interval (or N records); the send times and
    each commit's (first seq, last seq, return time)."""
    from confluent_kafka import Producer

    rate, seconds = settings["rate"], settings["warm_up"] + settings["seconds"]
    interval_ns = int(settings["commit_interval_ms"] * 1e6)
    every = settings["commit_records"]
    transactional = settings["transactional"]
    config = {
        "bootstrap.servers": bootstrap,
        "linger.ms": settings["linger_ms"],
        "max.in.flight.requests.per.connection": settings["max_in_flight"],
        "compression.type": "none",
        "logger": quiet_logger(Path(settings["log_dir"]) / "producer.log"),
    }
    if transactional:
        config["transactional.id"] = f"bench-e2e-{uuid.uuid4().hex[:8]}"
    else:
        config["enable.idempotence"] = True
    producer = Producer(config)
    if transactional:
        producer.init_transactions(60)
    else:
        producer.list_topics(topic, timeout=30)
    padding = b"x" * (E2E_SIZE - STAMPS.size)
    pack = STAMPS.pack
    send_ns = array("q")
    commits = array("q")  # first seq, last seq, commit_transaction's return (time_ns)
    commit_ns = array("q")  # time in commit_transaction
    total = int(rate * seconds)
    start = time.perf_counter()
    start_ns = time.time_ns()
    started.set()
    sent = 0
    first_in_txn = 0
    txn_started = time.time_ns()
    if transactional:
        producer.begin_transaction()
    max_lag_s = 0.0
    while sent < total:
        now = time.perf_counter()
        due = min(total, int((now - start) * rate) + 1)
        max_lag_s = max(max_lag_s, now - (start + sent / rate))
        while sent < due:
            at = time.time_ns()
            try:
                producer.produce(topic, pack(at, sent) + padding, partition=sent % PARTITIONS)
            except BufferError:
                producer.poll(TICK_S)
                continue
            send_ns.append(at)
            sent += 1
        now_ns = time.time_ns()
        in_txn = sent - first_in_txn
        if (
            transactional
            and in_txn
            and ((every and in_txn >= every) or (not every and now_ns - txn_started >= interval_ns))
        ):
            producer.commit_transaction(60)
            done = time.time_ns()
            commits.extend((first_in_txn, sent - 1, done))
            commit_ns.append(done - now_ns)
            first_in_txn = sent
            producer.begin_transaction()
            txn_started = time.time_ns()
        producer.poll(max(0.0, min(TICK_S, start + sent / rate - time.perf_counter())))
    if not transactional:
        producer.flush(60)
    elif sent > first_in_txn:
        now_ns = time.time_ns()
        producer.commit_transaction(60)
        done = time.time_ns()
        commits.extend((first_in_txn, sent - 1, done))
        commit_ns.append(done - now_ns)
    else:
        producer.abort_transaction(60)
    return {
        "start_ns": start_ns,
        "sent": sent,
        "max_lag_s": max_lag_s,
        "send_ns": send_ns.tobytes(),
        "commits": commits.tobytes(),
        "commit_ns": commit_ns.tobytes(),
    }


def consumer_process(
    bootstrap: str,
    topic: str,
    isolation: str,
    settings: dict[str, Any],
    ready: Any,
    stop: Any,
    count: Any,
    conn: Any,
) -> None:
    """Child process: ``poll()`` one record at a time, stamp each as it is returned."""
    from confluent_kafka import Consumer, TopicPartition

    config = {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-txn-{isolation}",
        "enable.auto.commit": False,
        "isolation.level": isolation,
        "logger": quiet_logger(Path(settings["log_dir"]) / f"consumer-{isolation}.log"),
    }
    if settings["fetch_wait_max_ms"] is not None:
        config["fetch.wait.max.ms"] = settings["fetch_wait_max_ms"]
    consumer = Consumer(config)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    consumer.poll(0.5)
    ready.set()
    recv_ns, seqs = array("q"), array("q")
    unpack = STAMPS.unpack_from
    errors = 0
    while not stop.is_set():
        message = consumer.poll(0.1)
        now = time.time_ns()
        if message is None:
            continue
        if message.error() is not None:
            errors += 1
            continue
        _, seq = unpack(message.value())
        seqs.append(seq)
        recv_ns.append(now)
        count.value += 1
    consumer.close()
    conn.send({"errors": errors, "recv_ns": recv_ns.tobytes(), "seq": seqs.tobytes()})
    conn.close()


def _ints(raw: bytes) -> array:
    out = array("q")
    out.frombytes(raw)
    return out


def run_e2e_round(
    cluster: LocalCluster,
    transactional: bool,
    isolations: list[str],
    args: argparse.Namespace,
    log_dir: Path,
) -> dict[str, Any]:
    bootstrap = cluster.bootstrap_servers()
    topic = f"txn-e2e-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, PARTITIONS, 3, {"min.insync.replicas": "2"})
    partition_leaders(bootstrap, topic)
    ctx = mp.get_context("spawn")
    stop, started = ctx.Event(), ctx.Event()
    settings = {
        "transactional": transactional,
        "rate": args.e2e_rate,
        "seconds": args.e2e_seconds,
        "warm_up": args.warm_up,
        "commit_interval_ms": args.commit_interval_ms,
        "commit_records": args.commit_records,
        "linger_ms": args.linger_ms,
        "max_in_flight": args.max_in_flight,
        "fetch_wait_max_ms": args.fetch_wait_max_ms,
        "log_dir": str(log_dir),
    }
    consumers = {}
    for isolation in isolations:
        rx, tx = ctx.Pipe(duplex=False)
        ready, count = ctx.Event(), ctx.RawValue("q", 0)
        proc = ctx.Process(
            target=consumer_process,
            args=(bootstrap, topic, isolation, settings, ready, stop, count, tx),
        )
        consumers[isolation] = (proc, rx, ready, count)
    producer_rx, producer_tx = ctx.Pipe(duplex=False)
    producer = ctx.Process(
        target=producer_process, args=(bootstrap, topic, settings, started, producer_tx)
    )
    children = []
    received: dict[str, dict[str, Any]] = {}
    try:
        for proc, _, _, _ in consumers.values():
            proc.start()
            children.append(proc)
        for _, _, ready, _ in consumers.values():
            if not ready.wait(60):
                raise RuntimeError("a consumer process did not start")
        producer.start()
        children.append(producer)
        if not started.wait(60):
            raise RuntimeError("the producer process did not start")
        time.sleep(args.warm_up)
        cpu_from, cpu_at = brokers_cpu_s(cluster), time.monotonic()
        if not producer_rx.poll(args.e2e_seconds + 120):
            raise RuntimeError("no result from the producer process")
        sent = producer_rx.recv()
        if "error" in sent:
            raise RuntimeError(f"the transactional producer failed: {sent['error']}")
        cpu = (brokers_cpu_s(cluster) - cpu_from, time.monotonic() - cpu_at)
        loadavg = Path("/proc/loadavg").read_text().strip()
        committed = sent["sent"]
        deadline = time.monotonic() + DRAIN_S
        while time.monotonic() < deadline and any(
            c.value < committed for _, _, _, c in consumers.values()
        ):
            time.sleep(0.05)
        stop.set()
        for isolation, (_, rx, _, _) in consumers.items():
            if not rx.poll(60):
                raise RuntimeError(f"no result from the {isolation} consumer")
            received[isolation] = rx.recv()
    finally:
        stop.set()
        for child in children:
            child.join(30)
            if child.is_alive():
                child.kill()
                child.join()
    row = summarize_round(isolations, args, sent, received, cpu, loadavg)
    row["producer"] = "transactional" if transactional else "idempotent"
    return row


def summarize_round(
    isolations: list[str],
    args: argparse.Namespace,
    sent: dict[str, Any],
    received: dict[str, dict[str, Any]],
    cpu: tuple[float, float],
    loadavg: str,
) -> dict[str, Any]:
    send_ns = _ints(sent["send_ns"])
    window_from = sent["start_ns"] + int(args.warm_up * 1e9)
    flat = _ints(sent["commits"])
    commits = [tuple(flat[i : i + 3]) for i in range(0, len(flat), 3)]
    last_seqs = [c[1] for c in commits]
    row: dict[str, Any] = {
        "consumers": isolations,
        "sent": sent["sent"],
        "transactions": len(commits),
        "records_per_transaction": sent["sent"] / len(commits) if commits else None,
        "commit": latency_summary(list(_ints(sent["commit_ns"]))),
        "max_schedule_lag_ms": sent["max_lag_s"] * 1000,
        "broker_cores": cpu[0] / cpu[1] if cpu[1] > 0 else None,
        "broker_cpu_s": cpu[0],
        "loadavg": loadavg,
    }
    by_seq: dict[str, dict[int, int]] = {}
    for isolation, got in received.items():
        seqs, recv = _ints(got["seq"]), _ints(got["recv_ns"])
        first: dict[int, int] = {}
        for s, r in zip(seqs, recv, strict=True):
            first.setdefault(s, r)
        by_seq[isolation] = first
        e2e = [r - send_ns[s] for s, r in first.items() if send_ns[s] >= window_from]
        entry: dict[str, Any] = {
            "e2e": latency_summary(e2e),
            "missing": sent["sent"] - len(first),
            "duplicates": len(seqs) - len(first),
            "errors": got["errors"],
        }
        if isolation == READ_COMMITTED and commits:
            after_commit = []
            for s, r in first.items():
                if send_ns[s] >= window_from:
                    c = commits[bisect.bisect_left(last_seqs, s)]
                    after_commit.append(r - c[2])
            entry["after_commit"] = latency_summary(after_commit)
        row[isolation] = entry
    if READ_COMMITTED in by_seq and READ_UNCOMMITTED in by_seq:
        rc, ru = by_seq[READ_COMMITTED], by_seq[READ_UNCOMMITTED]
        row["committed_less_uncommitted"] = latency_summary(
            [rc[s] - ru[s] for s in rc if s in ru and send_ns[s] >= window_from]
        )
    return row


def e2e_ratios(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """read_committed / read_uncommitted of the medians over the rounds of each."""

    def med(isolation: str, key: str) -> float | None:
        values = sorted(
            r[isolation]["e2e"][key]
            for r in rows
            if isolation in r and r["producer"] == "transactional"
        )
        return values[len(values) // 2] if values else None

    out: dict[str, float | None] = {}
    for key in ("p50_ms", "p99_ms"):
        rc, ru = med(READ_COMMITTED, key), med(READ_UNCOMMITTED, key)
        out[f"{key[:-3]}_ratio"] = rc / ru if rc and ru else None
        out[f"{READ_COMMITTED}_{key}"] = rc
        out[f"{READ_UNCOMMITTED}_{key}"] = ru
    return out


# -- one commit, traced ------------------------------------------------------------------

RECEIVED = re.compile(r"Received (\w+)Response \(v\d+, \d+ bytes, CorrId \d+, rtt ([\d.]+)ms\)")
LOG_TIME = re.compile(r"^%\d\|(\d+\.\d+)\|")
MARK = re.compile(r"^BENCH (begin|commit|done) (\d+\.\d+)$")
# librdkafka's text for CONCURRENT_TRANSACTIONS
CONCURRENT = "another concurrent operation on the same transaction"


def trace_process(bootstrap: str, topic: str, count: int, path: str) -> None:
    """Child process: ``count`` one-record transactions with librdkafka's debug log on
    stderr (redirected to ``path``), each phase marked with a line of our own."""
    from confluent_kafka import Producer

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-trace-{uuid.uuid4().hex[:6]}",
            "linger.ms": 0,
            "debug": "eos,protocol",
        }
    )
    producer.init_transactions(60)

    def mark(what: str) -> None:
        os.write(2, f"BENCH {what} {time.time():.6f}\n".encode())

    for _ in range(count):
        mark("begin")
        producer.begin_transaction()
        producer.produce(topic, b"t" * 100, partition=0)
        mark("commit")
        producer.commit_transaction(60)
        mark("done")
    os.close(fd)


def run_trace(cluster: LocalCluster, topic: str, count: int, out: Path) -> dict[str, Any]:
    path = out / "trace.log"
    ctx = mp.get_context("spawn")
    proc = ctx.Process(
        target=trace_process, args=(cluster.bootstrap_servers(), topic, count, str(path))
    )
    proc.start()
    proc.join(300)
    if proc.is_alive():
        proc.kill()
        proc.join()
        raise RuntimeError("the trace process did not finish")
    return parse_trace(path.read_text(errors="replace").splitlines())


def parse_trace(lines: list[str]) -> dict[str, Any]:
    """Where each commit's time goes, from librdkafka's log: the time from
    ``commit_transaction`` to the first AddPartitionsToTxn sent (librdkafka registers
    the partitions from a timer), the round trips of each API (their ``rtt``), the waits
    from a CONCURRENT_TRANSACTIONS answer to the next AddPartitionsToTxn (the client's
    backoff), and the rest; medians over the transactions (the first, which finds the
    coordinator and opens connections, left out). librdkafka's timestamps are in ms."""
    txns: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    concurrent_at: float | None = None
    for line in lines:
        m = MARK.match(line)
        if m:
            at = float(m[2])
            if m[1] == "begin":
                current = {"begin": at, "rtt": {}, "calls": {}, "concurrent": 0}
                current.update(backoff=0.0, first_add=None)
            elif current is not None and m[1] == "commit":
                current["commit"] = at
            elif current is not None:
                current["done"] = at
                txns.append(current)
                current = None
            continue
        t = LOG_TIME.match(line)
        if current is None or t is None:
            continue
        at = float(t[1])
        r = RECEIVED.search(line)
        if r:
            api, rtt = r[1], float(r[2])
            current["rtt"][api] = current["rtt"].get(api, 0.0) + rtt
            current["calls"][api] = current["calls"].get(api, 0) + 1
        elif "Sent AddPartitionsToTxnRequest" in line:
            if current["first_add"] is None:
                current["first_add"] = at
            if concurrent_at is not None:
                current["backoff"] += at - concurrent_at
                concurrent_at = None
        elif "AddPartitionsToTxn response" in line and CONCURRENT in line:
            current["concurrent"] += 1
            concurrent_at = at
    txns = [t for t in txns[1:] if "commit" in t]
    if not txns:
        return {"transactions": 0}
    apis = sorted({api for t in txns for api in t["rtt"]})

    def med(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    def parts(t: dict[str, Any]) -> dict[str, float]:
        out = {
            "to first AddPartitionsToTxn": 1000 * ((t["first_add"] or t["commit"]) - t["commit"]),
            **{f"{api} round trips": t["rtt"].get(api, 0.0) for api in apis},
            "backoff after CONCURRENT_TRANSACTIONS": 1000 * t["backoff"],
        }
        out["other"] = 1000 * (t["done"] - t["commit"]) - sum(out.values())
        return out

    breakdowns = [parts(t) for t in txns]
    return {
        "transactions": len(txns),
        "transaction_ms_p50": med([1000 * (t["done"] - t["begin"]) for t in txns]),
        "commit_ms_p50": med([1000 * (t["done"] - t["commit"]) for t in txns]),
        "breakdown_ms_p50": {k: med([b[k] for b in breakdowns]) for k in breakdowns[0]},
        "calls_p50": {api: med([t["calls"].get(api, 0) for t in txns]) for api in apis},
        "concurrent_transactions_p50": med([t["concurrent"] for t in txns]),
        "with_concurrent_transactions": sum(1 for t in txns if t["concurrent"]),
    }


# -- main --------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--sizes", default="1,10,100")
    parser.add_argument(
        "--lso-interval-ms", type=float, default=20, help="LSO sampling (0: no sampling)"
    )
    parser.add_argument("--e2e-rate", type=float, default=500, help="records/s (1 KB each)")
    parser.add_argument("--e2e-seconds", type=float, default=20)
    parser.add_argument("--warm-up", type=float, default=5)
    parser.add_argument("--commit-interval-ms", type=float, default=100)
    parser.add_argument(
        "--commit-records", type=int, default=0, help="commit every N records instead"
    )
    parser.add_argument("--linger-ms", type=float, default=1)
    parser.add_argument(
        "--max-in-flight",
        type=int,
        default=1,
        help="the e2e producer's max.in.flight.requests.per.connection (librdkafka's "
        "default is 5; see the docstring)",
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--no-baseline",
        dest="baseline",
        action="store_false",
        help="without the rounds of an idempotent (not transactional) producer",
    )
    parser.add_argument("--consumers", choices=("together", "alternate"), default="together")
    parser.add_argument(
        "--fetch-wait-max-ms", type=int, default=None, help="the consumers' fetch.wait.max.ms"
    )
    parser.add_argument("--trace", type=int, default=30, help="transactions traced (0: none)")
    parser.add_argument("--only", nargs="+", choices=("back-to-back", "e2e", "trace"), default=None)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    parts = set(args.only or ("back-to-back", "e2e", "trace"))
    sizes = [int(s) for s in args.sizes.split(",")]
    command = " ".join([".venv/bin/python", "bench/transactions.py", *sys.argv[1:]])
    results: dict[str, Any] = {"bench": "transactions", "brokers": 3, "command": command}
    with work_dir("bench-transactions", args.keep) as directory:
        with replog_cluster(directory / "cluster", 3, metrics=True) as cluster:
            bootstrap = cluster.bootstrap_servers()
            create_topic(bootstrap, TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
            leaders = partition_leaders(bootstrap, TOPIC)
            # warm-up: __transaction_state created and loaded
            run_size(cluster, TOPIC, leaders, 1, 2, 0)
            if "back-to-back" in parts:
                results["back_to_back"] = []
                for size in sizes:
                    result = run_size(
                        cluster, TOPIC, leaders, size, args.seconds, args.lso_interval_ms / 1000
                    )
                    lag = result["lso_lag"] or {}
                    say(
                        f"{size:>4} records/transaction: {result['transactions_per_s']:.1f} "
                        f"txn/s, commit p50 {result['commit']['p50_ms']:.1f} ms p99 "
                        f"{result['commit']['p99_ms']:.1f} ms; LSO lag p50/p99 "
                        f"{lag.get('offsets_p50')}/{lag.get('offsets_p99')} offsets, "
                        f"{_f(lag.get('ms_p50'))}/{_f(lag.get('ms_p99'))} ms"
                    )
                    results["back_to_back"].append(result)
            if "trace" in parts and args.trace:
                say(f"tracing {args.trace} one-record transactions ...")
                results["trace"] = run_trace(cluster, TOPIC, args.trace, directory)
            if "e2e" in parts:
                plan: list[tuple[bool, list[str]]] = (
                    [(True, [READ_COMMITTED, READ_UNCOMMITTED])]
                    if args.consumers == "together"
                    else [(True, [READ_UNCOMMITTED]), (True, [READ_COMMITTED])]
                )
                if args.baseline:
                    plan.append((False, [READ_UNCOMMITTED]))
                plans = plan * args.rounds
                rows = []
                for i, (transactional, isolations) in enumerate(plans):
                    kind = "transactional" if transactional else "idempotent"
                    say(f"e2e round {i + 1}/{len(plans)}: {kind}, {' + '.join(isolations)} ...")
                    row = run_e2e_round(cluster, transactional, isolations, args, directory)
                    rows.append(row)
                    say(
                        "  "
                        + "; ".join(
                            f"{iso} p50 {_f(row[iso]['e2e']['p50_ms'])} p99 "
                            f"{_f(row[iso]['e2e']['p99_ms'])} ms"
                            for iso in isolations
                        )
                        + f"; brokers {row['broker_cores']:.2f} cores"
                    )
                results["e2e"] = {"rounds": rows, "ratios": e2e_ratios(rows)}
    report(results, args)
    print(json.dumps(results))


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def report(results: dict[str, Any], args: argparse.Namespace) -> None:
    print(f"\ncommand: {results['command']}")
    if "back_to_back" in results:
        print(
            "\nback to back, 3 brokers, RF 3, 3 partitions, 100 B records; LSO lag sampled "
            f"every {args.lso_interval_ms:g} ms: HW - LSO in offsets (all samples, p50/p99), "
            "the share of samples with the LSO behind, and while behind: offsets p50, and "
            "how long the HW had been past the LSO (ms, p50/p99)"
        )
        print(
            f"{'rec/txn':>7}{'txn/s':>7}{'commit p50':>11}{'p99':>7}{'txn p50':>8}"
            f"{'lag p50':>8}{'p99':>5}{'behind':>7}{'off p50':>8}{'ms p50':>7}{'p99':>6}"
            f"{'cores':>6}{'cpu ms/txn':>11}  loadavg"
        )
        for r in results["back_to_back"]:
            lag = r["lso_lag"] or {}
            behind = lag.get("behind_share")
            print(
                f"{r['records_per_transaction']:>7}{r['transactions_per_s']:>7.1f}"
                f"{_f(r['commit']['p50_ms']):>11}{_f(r['commit']['p99_ms']):>7}"
                f"{_f(r['transaction']['p50_ms']):>8}"
                f"{_f(lag.get('offsets_p50'), 0):>8}{_f(lag.get('offsets_p99'), 0):>5}"
                f"{'-' if behind is None else f'{100 * behind:.0f}%':>7}"
                f"{_f(lag.get('offsets_p50_while_behind'), 0):>8}"
                f"{_f(lag.get('ms_p50_while_behind')):>7}{_f(lag.get('ms_p99_while_behind')):>6}"
                f"{r['broker_cores']:>6.2f}{_f(r['broker_cpu_ms_per_transaction']):>11}  "
                f"{r['loadavg']}"
            )
    if "trace" in results:
        t = results["trace"]
        print(
            f"\none-record transactions traced (librdkafka debug log), medians of {t['transactions']}:"
        )
        if t["transactions"]:
            print(
                f"  transaction {t['transaction_ms_p50']:.1f} ms, commit_transaction "
                f"{t['commit_ms_p50']:.1f} ms; CONCURRENT_TRANSACTIONS answers "
                f"{t['concurrent_transactions_p50']} (in {t['with_concurrent_transactions']} "
                "transactions)"
            )
            for part, ms in t["breakdown_ms_p50"].items():
                if not ms and "round trips" in part:
                    continue
                calls = next((n for api, n in t["calls_p50"].items() if part.startswith(api)), None)
                print(f"  {part:<40} {ms:6.1f} ms" + (f" ({calls} calls)" if calls else ""))
    if "e2e" in results:
        what = (
            f"every {args.commit_records} records"
            if args.commit_records
            else f"every {args.commit_interval_ms:g} ms"
        )
        print(
            f"\nend to end, transactional producer at {args.e2e_rate:g} records/s of 1 KB, "
            f"committing {what}, linger.ms={args.linger_ms:g}, max.in.flight="
            f"{args.max_in_flight}; consumers {args.consumers}"
            + (
                f", fetch.wait.max.ms={args.fetch_wait_max_ms}"
                if args.fetch_wait_max_ms is not None
                else ""
            )
            + f"; {args.e2e_seconds:g} s measured after {args.warm_up:g} s"
        )
        print(
            f"{'round':>5} {'producer':<14}{'consumer':<17}{'e2e p50':>8}{'p99':>7}{'p99.9':>7}{'max':>7}"
            f"{'missing':>8}{'dup':>4}{'commit p50':>11}{'rec/txn':>8}{'cores':>6}  loadavg"
        )
        for i, r in enumerate(results["e2e"]["rounds"]):
            for iso in r["consumers"]:
                e = r[iso]["e2e"]
                print(
                    f"{i + 1:>5} {r['producer']:<14}{iso:<17}{_f(e['p50_ms']):>8}{_f(e['p99_ms']):>7}"
                    f"{_f(e['p999_ms']):>7}{_f(e['max_ms']):>7}{r[iso]['missing']:>8}"
                    f"{r[iso]['duplicates']:>4}{_f(r['commit']['p50_ms']):>11}"
                    f"{_f(r['records_per_transaction']):>8}{r['broker_cores']:>6.2f}  "
                    f"{r['loadavg']}"
                )
            if READ_COMMITTED in r and "after_commit" in r[READ_COMMITTED]:
                a = r[READ_COMMITTED]["after_commit"]
                print(
                    f"{'':>5} read_committed receipt - commit_transaction's return: p50 "
                    f"{_f(a['p50_ms'])} p99 {_f(a['p99_ms'])} ms"
                )
            if "committed_less_uncommitted" in r:
                d = r["committed_less_uncommitted"]
                print(
                    f"{'':>5} read_committed receipt - read_uncommitted receipt: p50 "
                    f"{_f(d['p50_ms'])} p99 {_f(d['p99_ms'])} ms"
                )
        ratio = results["e2e"]["ratios"]
        print(
            f"read_committed / read_uncommitted (medians over rounds): p50 "
            f"{_f(ratio['p50_ratio'], 2)}, p99 {_f(ratio['p99_ratio'], 2)}"
        )


if __name__ == "__main__":
    main()
