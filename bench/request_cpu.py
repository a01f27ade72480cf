"""Broker CPU per request, by request type, read from /proc (prints figures).

    .venv/bin/python bench/request_cpu.py [--rate 200] [--window 5] [--windows 3]
        [--only longpoll fetch1 produce1 metadata produce_all scrape] [--partitions N]
        [--profile DIR] [--perf DIR] [--src CHECKOUT] [--ab CHECKOUT]

One broker (with its ZooKeeper, through ``replog.cluster.launcher.LocalCluster``, with
``metrics.port`` set as ``replog cluster up --console`` sets it) is driven at a fixed rate
(``--rate`` requests a second, started on a schedule whatever the answers do) with the
project's own protocol client (``replog.protocol.client.KafkaConnection``, several
connections, requests pipelined). Each window of ``--window`` seconds under load is
preceded by an equal idle window; the broker's CPU is ``utime + stime`` of
``/proc/<pid>/stat``, and a request's cost is (load CPU - idle CPU) / requests answered in
the load window. Medians over ``--windows`` windows. The cases:

* ``longpoll``: an empty consumer long poll: Fetch v16 (topic by id) at the log end of an
  empty partition, ``max_wait`` 100 ms, ``min_bytes`` 1 (the broker parks every request);
* ``fetch1``: a consumer Fetch v16 at offset 0 of a partition holding one batch (one
  1 KB record), answered at once with that batch;
* ``produce1``: Produce v11 of one batch (one 1 KB record) at ``acks=1``, RF 1;
* ``metadata``: Metadata v12 for one topic;
* ``produce_all``: Produce v11 of one batch at ``acks=all`` to a 3-broker cluster, RF 3
  (``min.insync.replicas=2``), sent to the leader; each broker's CPU per request and
  their sum (the followers' fetches are part of the cost);
* ``scrape``: the idle broker scraped at ``/metrics`` once a second (as the console does)
  against not scraped: cores used, and CPU per scrape (``--partitions N`` adds an idle
  topic of N partitions, whose log gauges are most of a scrape).

Each case also prints the brokers' event loop lag during its load windows (max and p99,
as the upper bounds of the ``kafka_server_eventloop_lagms`` histogram's buckets: its
counts scraped just before and after each load window, outside the CPU measurement), the
same of the loop's own lag (``kafka_server_eventloop_ownlagms``: without the time the
loop's thread waited for a CPU, which other work on a shared machine causes) and each
broker's largest of both since it started (``..._maxlagms``, ``..._maxownlagms``).

``--profile DIR`` starts the brokers with a ``sitecustomize`` that runs cProfile between
two SIGUSR1 (sent at the start and end of each case's load windows) and writes
``DIR/<single|produce_all>-<case>-pid<pid>.prof`` (first load window only); ``--perf DIR`` records each load window with
``perf record -g`` (native stacks: interpreter, event loop, kernel) into
``DIR/<case>-broker-<id>.perf``; ``--py-spy DIR`` samples it with ``py-spy record --native``
(Python and native frames; collapsed stacks in ``DIR/<case>-broker-<id>.txt``, and their
breakdown by part of the request path printed, see ``bench/spy_breakdown.py``). All cost CPU: their figures are not the figures.
``--src CHECKOUT`` runs the brokers from another checkout's ``src/`` (the code before a
change, say, from ``git archive``); ``--ab CHECKOUT`` starts a broker from it and one
from this tree side by side and alternates their windows (the order swapped each window),
printing both medians and their ratio: on a shared machine, compare only within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from common import lag_bounds, say, scrape_lag, work_dir
from spy_breakdown import text as spy_text

from replog.cluster.launcher import LocalCluster
from replog.protocol.apis import ApiKey, make, nested, request_schema
from replog.protocol.client import KafkaConnection
from replog.protocol.records import simple_batch
from replog.server.loop_lag import LAG, LAG_MS_BUCKETS, OWN_LAG

TICKS = os.sysconf("SC_CLK_TCK")
FETCH_VERSION = 16
PRODUCE_VERSION = 11
METADATA_VERSION = 12
LONG_POLL_MS = 100
RECORD = os.urandom(1024)
SINGLE = ("longpoll", "fetch1", "produce1", "metadata", "scrape")
ALL_CASES = (*SINGLE, "produce_all")

SITECUSTOMIZE = """
import cProfile, os, signal, time
_out = os.environ.get("REPLOG_BENCH_PROFILE")
if _out:
    _state = {"profiler": None}
    def _toggle(signum, frame):
        p = _state["profiler"]
        if p is None:
            _state["profiler"] = cProfile.Profile(time.thread_time)
            _state["profiler"].enable()
        else:
            p.disable()
            with open(_out + ".case") as f:
                case = f.read().strip()
            p.dump_stats(f"{_out}-{case}-pid{os.getpid()}.prof")
            _state["profiler"] = None
    signal.signal(signal.SIGUSR1, _toggle)
"""


def cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of ``pid`` so far, in seconds."""
    user, system = cpu_split(pid)
    return user + system


def cpu_split(pid: int) -> tuple[float, float]:
    """``(utime, stime)`` of every thread of ``pid`` so far, in seconds: the process's own
    code, and the kernel's work on its behalf (socket reads and writes, on loopback the
    receiver's side of the TCP stack too)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICKS, int(fields[12]) / TICKS


class Load:
    """Requests started at ``rate`` a second over ``connections``, round robin; counts the
    answers (and errors) by the time they arrived."""

    def __init__(self, connections: list[KafkaConnection], body: Any, rate: float) -> None:
        self.connections = connections
        self.body = body
        self.rate = rate
        self.answered: list[float] = []
        self.errors: list[str] = []
        self._task: asyncio.Task[None] | None = None
        self._inflight: set[asyncio.Task[None]] = set()

    async def _one(self, conn: KafkaConnection) -> None:
        try:
            response = await conn.request(self.body, timeout_s=30)
        except Exception as exc:  # counted, reported
            self.errors.append(repr(exc))
            return
        self.answered.append(time.monotonic())
        error = _first_error(response)
        if error:
            self.errors.append(f"error code {error}")

    async def _run(self) -> None:
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        i = 0
        while True:
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(self._one(self.connections[i % len(self.connections)]))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)
            i += 1

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        if self._inflight:
            await asyncio.gather(*self._inflight, return_exceptions=True)

    def count(self, start: float, end: float) -> int:
        return sum(1 for t in self.answered if start <= t < end)


def _first_error(response: Any) -> int:
    """The first non-zero error code of a Produce/Fetch/Metadata answer (0: none)."""
    if getattr(response, "error_code", 0):
        return int(response.error_code)
    for topic in getattr(response, "responses", ()) or getattr(response, "topics", ()):
        if getattr(topic, "error_code", 0):
            return int(topic.error_code)
        for p in getattr(topic, "partitions", ()) or getattr(topic, "partition_responses", ()):
            if p.error_code:
                return int(p.error_code)
    return 0


# -- requests ---------------------------------------------------------------------------


def metadata_request(topic: str) -> Any:
    cls = request_schema(ApiKey.METADATA, METADATA_VERSION)
    return make(
        cls,
        topics=(make(nested(cls, "MetadataRequestTopic"), name=topic, topic_id=None),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def fetch_request(topic_id: uuid.UUID, offset: int, max_wait_ms: int) -> Any:
    cls = request_schema(ApiKey.FETCH, FETCH_VERSION)
    part = make(
        nested(cls, "FetchPartition"),
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=offset,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    topic = make(nested(cls, "FetchTopic"), topic=None, topic_id=topic_id, partitions=(part,))
    return make(
        cls,
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(topic,),
        forgotten_topics_data=(),
        rack_id="",
    )


def produce_request(topic: str, acks: int) -> Any:
    cls = request_schema(ApiKey.PRODUCE, PRODUCE_VERSION)
    part = nested(cls, "PartitionProduceData")(index=0, records=simple_batch([RECORD]))
    return cls(
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(nested(cls, "TopicProduceData")(name=topic, partition_data=(part,)),),
    )


async def create_topic(conn: KafkaConnection, topic: str, rf: int, partitions: int = 1) -> None:
    cls = request_schema(ApiKey.CREATE_TOPICS, 7)
    configs = (make(nested(cls, "CreatableTopicConfig"), name="min.insync.replicas", value="2"),)
    body = make(
        cls,
        topics=(
            make(
                nested(cls, "CreatableTopic"),
                name=topic,
                num_partitions=partitions,
                replication_factor=rf,
                assignments=(),
                configs=configs if rf > 1 else (),
            ),
        ),
        timeout=datetime.timedelta(seconds=60),
        validate_only=False,
    )
    answer = await conn.request(body, timeout_s=90)
    assert answer.topics[0].error_code == 0, answer


async def leader_and_id(conn: KafkaConnection, topic: str) -> tuple[int, uuid.UUID]:
    """The partition's leader and the topic's id, once every replica is in the ISR."""
    deadline = time.monotonic() + 60
    while True:
        answer = await conn.request(metadata_request(topic))
        [t] = answer.topics
        if t.error_code == 0 and t.partitions:
            p = t.partitions[0]
            if p.leader_id >= 0 and len(p.isr_nodes) == len(p.replica_nodes):
                return int(p.leader_id), t.topic_id
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic}: no leader with a full ISR")
        await asyncio.sleep(0.1)


async def connect(cluster: LocalCluster, broker_id: int, n: int) -> list[KafkaConnection]:
    conns = [KafkaConnection("127.0.0.1", cluster.port(broker_id), "bench-cpu") for _ in range(n)]
    for c in conns:
        await c.connect()
    return conns


# -- measurement ------------------------------------------------------------------------


class LagWindows:
    """Loop lag counts (both histograms) summed over a case's load windows, per broker."""

    def __init__(self, urls: dict[int, str]) -> None:
        self.urls = urls
        empty = [0.0] * (len(LAG_MS_BUCKETS) + 1)
        self.counts = {(b, n): list(empty) for b in urls for n in (LAG, OWN_LAG)}
        self.largest: dict[tuple[int, str], float] = {}
        self._before: dict[int, dict[str, tuple[list[float], float]]] = {}

    async def begin(self) -> None:
        for b, url in self.urls.items():
            self._before[b] = await asyncio.to_thread(scrape_lag, url)

    async def end(self) -> None:
        for b, url in self.urls.items():
            after = await asyncio.to_thread(scrape_lag, url)
            for name, (buckets, largest) in after.items():
                before = self._before[b].get(name, ([], 0.0))[0]
                if not buckets or len(before) != len(buckets):
                    continue  # a broker without the loop lag histograms (an older tree)
                self.largest[b, name] = largest
                cumulative = [a - c for a, c in zip(buckets, before, strict=True)]
                counts = [n - (cumulative[i - 1] if i else 0) for i, n in enumerate(cumulative)]
                self.counts[b, name] = [
                    c + n for c, n in zip(self.counts[b, name], counts, strict=True)
                ]

    def summary(self) -> dict[int, dict[str, tuple[float, float, float]]]:
        """Per broker and histogram: (p99, max) over the load windows and the max since
        start (ms)."""
        out: dict[int, dict[str, tuple[float, float, float]]] = {}
        for (b, name), counts in self.counts.items():
            since = self.largest.get((b, name), float("nan"))
            out.setdefault(b, {})[name] = (*lag_bounds(counts), since)
        return out


def lag_text(lag: dict[int, dict[str, tuple[float, float, float]]]) -> str:
    parts = []
    for b, by_name in sorted(lag.items()):
        (p99, top, since), (own_p99, own_top, own_since) = by_name[LAG], by_name[OWN_LAG]
        parts.append(
            f"broker {b} p99 <= {p99:g} max <= {top:g} ms (own: p99 <= {own_p99:g} "
            f"max <= {own_top:g} ms; since start {since:.1f}, own {own_since:.1f} ms)"
        )
    return "; ".join(parts)


class Instruments:
    """cProfile toggles (SIGUSR1) and ``perf record`` around load windows, when asked."""

    def __init__(self, profile: Path | None, perf: Path | None, py_spy: Path | None = None) -> None:
        self.profile = profile
        self.perf = perf
        self.py_spy = py_spy
        self._perf_procs: list[subprocess.Popen[bytes]] = []
        self._pids: dict[int, int] = {}

    def begin(self, case: str, pids: dict[int, int]) -> None:
        self._pids = pids
        if self.profile is not None:
            for tag in ("single", "produce_all"):
                (self.profile / f"{tag}.case").write_text(case)
            for pid in pids.values():
                os.kill(pid, signal.SIGUSR1)
        if self.py_spy is not None:
            self.py_spy.mkdir(parents=True, exist_ok=True)
            binary = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
            for broker, pid in pids.items():
                out = self.py_spy / f"{case}-broker-{broker}.txt"
                self._perf_procs.append(
                    subprocess.Popen(
                        [binary, "record", "--pid", str(pid), "--rate", "997", "--native"]
                        + ["--format", "raw", "--output", str(out)],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
        if self.perf is not None:
            self.perf.mkdir(parents=True, exist_ok=True)
            for broker, pid in pids.items():
                out = self.perf / f"{case}-broker-{broker}.perf"
                self._perf_procs.append(
                    subprocess.Popen(
                        ["perf", "record", "-F", "1999", "-g", "-p", str(pid), "-o", str(out)],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )

    def end(self) -> None:
        for proc in self._perf_procs:
            proc.send_signal(signal.SIGINT)
        for proc in self._perf_procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._perf_procs.clear()
        if self.profile is not None:
            for pid in self._pids.values():
                os.kill(pid, signal.SIGUSR1)


async def measure(
    case: str,
    pids: dict[int, int],
    load: Load,
    args: argparse.Namespace,
    instruments: Instruments,
    urls: dict[int, str] | None = None,
) -> dict[str, Any]:
    """Alternate idle and load windows; per broker the median CPU per answered request
    (and the loop lag during the load windows when ``urls`` has the brokers' /metrics)."""
    lag = LagWindows(urls or {})
    per_request: dict[int, list[float]] = {b: [] for b in pids}
    system_share: dict[int, list[float]] = {b: [] for b in pids}
    idle_cores: dict[int, list[float]] = {b: [] for b in pids}
    rates: list[float] = []
    for window in range(args.windows):
        before = {b: cpu_seconds(p) for b, p in pids.items()}
        await asyncio.sleep(args.window)
        idle = {b: cpu_seconds(p) - before[b] for b, p in pids.items()}
        await lag.begin()
        load.start()
        await asyncio.sleep(0.5)  # the schedule settles; long polls are in flight
        if window == 0:
            instruments.begin(case, pids)
        start = time.monotonic()
        split = {b: cpu_split(p) for b, p in pids.items()}
        before = {b: sum(s) for b, s in split.items()}
        await asyncio.sleep(args.window)
        busy = {b: cpu_seconds(p) - before[b] for b, p in pids.items()}
        system = {b: cpu_split(p)[1] - split[b][1] for b, p in pids.items()}
        end = time.monotonic()
        if window == 0:
            instruments.end()
        await load.stop()
        await lag.end()
        answered = load.count(start, end)
        rates.append(answered / (end - start))
        for b in pids:
            idle_cores[b].append(idle[b] / args.window)
            per_request[b].append((busy[b] - idle[b] * (end - start) / args.window) / answered)
            system_share[b].append(system[b] / busy[b] if busy[b] else float("nan"))
        say(
            f"  {case} window {window + 1}: {answered} answered, "
            + ", ".join(
                f"broker {b} {per_request[b][-1] * 1e6:.0f} us/request "
                f"({system_share[b][-1]:.0%} kernel)"
                for b in sorted(pids)
            )
        )
    if load.errors:
        say(f"  {case}: {len(load.errors)} errors, e.g. {load.errors[:3]}")
    if urls:
        say(f"  {case} event loop lag: {lag_text(lag.summary())}")
    return {
        "lag": lag.summary(),
        "case": case,
        "rate": statistics.median(rates),
        "us": {b: statistics.median(v) * 1e6 for b, v in per_request.items()},
        "idle": {b: statistics.median(v) for b, v in idle_cores.items()},
        "kernel": {b: statistics.median(v) for b, v in system_share.items()},
        "errors": len(load.errors),
    }


def scrape_loop(url: str, stop: threading.Event, count: list[int]) -> None:
    while not stop.wait(1.0):
        with urllib.request.urlopen(url, timeout=30) as response:
            response.read()
        count[0] += 1


async def measure_scrape(
    pid: int, url: str, args: argparse.Namespace, instruments: Instruments
) -> dict[str, Any]:
    """Idle cores without scrapes, then with one a second; CPU per scrape."""
    without: list[float] = []
    with_: list[float] = []
    per_scrape: list[float] = []
    for window in range(args.windows):
        before = cpu_seconds(pid)
        await asyncio.sleep(args.window)
        idle = cpu_seconds(pid) - before
        stop, count = threading.Event(), [0]
        thread = threading.Thread(target=scrape_loop, args=(url, stop, count), daemon=True)
        thread.start()
        await asyncio.sleep(0.5)
        if window == 0:
            instruments.begin("scrape", {0: pid})
        before, scrapes = cpu_seconds(pid), count[0]
        await asyncio.sleep(args.window)
        busy, scrapes = cpu_seconds(pid) - before, count[0] - scrapes
        if window == 0:
            instruments.end()
        stop.set()
        await asyncio.to_thread(thread.join)
        without.append(idle / args.window)
        with_.append(busy / args.window)
        per_scrape.append((busy - idle) / max(scrapes, 1))
        say(
            f"  scrape window {window + 1}: idle {idle / args.window:.4f} cores, scraped "
            f"{busy / args.window:.4f} cores, {scrapes} scrapes"
        )
    return {
        "case": "scrape",
        "without": statistics.median(without),
        "with": statistics.median(with_),
        "per_scrape_ms": statistics.median(per_scrape) * 1e3,
    }


def start_cluster(
    directory: Path, brokers: int, args: argparse.Namespace, case_tag: str, src: Path | None
) -> LocalCluster:
    env: dict[str, str] = {}
    paths = [os.environ.get("PYTHONPATH", "")]
    if src is not None:  # the brokers run another checkout's replog
        paths.insert(0, str(src.resolve() / "src"))
    if args.profile is not None:
        site = directory / "site"
        site.mkdir(parents=True, exist_ok=True)
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        args.profile.mkdir(parents=True, exist_ok=True)
        paths.insert(0, str(site))
        env["REPLOG_BENCH_PROFILE"] = str(args.profile / case_tag)
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    cluster = LocalCluster(directory)
    try:
        cluster.up(brokers, metrics=True, wait_s=120, broker_env=env)
    except BaseException:
        cluster.down()
        raise
    return cluster


async def prepare_single(
    cluster: LocalCluster, partitions: int
) -> tuple[int, list[KafkaConnection], dict]:
    """Topics and connections of the one-broker cases: ``(pid, connections, bodies)``."""
    pid = cluster.broker_pid(0)
    assert pid is not None
    admin = (await connect(cluster, 0, 1))[0]
    try:
        for topic in ("empty", "one", "produced"):
            await create_topic(admin, topic, 1)
        _, empty_id = await leader_and_id(admin, "empty")
        _, one_id = await leader_and_id(admin, "one")
        await leader_and_id(admin, "produced")
        if partitions:  # for the scrape: an idle broker's /metrics grows with its partitions
            await create_topic(admin, "idle", 1, partitions)
        answer = await admin.request(produce_request("one", 1))
        assert _first_error(answer) == 0, answer
    finally:
        await admin.close()
    conns = await connect(cluster, 0, 8)
    bodies = {
        "longpoll": fetch_request(empty_id, 0, LONG_POLL_MS),
        "fetch1": fetch_request(one_id, 0, 0),
        "produce1": produce_request("produced", 1),
        "metadata": metadata_request("one"),
    }
    return pid, conns, bodies


async def one_case(
    cluster: LocalCluster,
    prepared: tuple[int, list[KafkaConnection], dict],
    case: str,
    args: argparse.Namespace,
    instruments: Instruments,
) -> dict[str, Any]:
    pid, conns, bodies = prepared
    if case == "scrape":
        url = cluster.metrics_url(0)
        assert url is not None
        return await measure_scrape(pid, url, args, instruments)
    url = cluster.metrics_url(0)
    return await measure(
        case,
        {0: pid},
        Load(conns, bodies[case], args.rate),
        args,
        instruments,
        {0: url} if url else None,
    )


async def single_broker_cases(
    cluster: LocalCluster, cases: list[str], args: argparse.Namespace, instruments: Instruments
) -> list[dict[str, Any]]:
    prepared = await prepare_single(cluster, args.partitions)
    try:
        return [await one_case(cluster, prepared, case, args, instruments) for case in cases]
    finally:
        for c in prepared[1]:
            await c.close()


async def ab_cases(
    before: LocalCluster, after: LocalCluster, cases: list[str], args: argparse.Namespace
) -> None:
    """Both brokers up at once; each window measured on one then the other, the order
    swapped every window; medians per side and their ratio (after / before)."""
    one = argparse.Namespace(**{**vars(args), "windows": 1})
    none = Instruments(None, None)
    sides = {"before": before, "after": after}
    prepared = {name: await prepare_single(c, args.partitions) for name, c in sides.items()}
    figures: dict[str, dict[str, list[float]]] = {c: {"before": [], "after": []} for c in cases}
    kernel: dict[str, dict[str, list[float]]] = {c: {"before": [], "after": []} for c in cases}
    try:
        for window in range(args.windows):
            order = ("before", "after") if window % 2 == 0 else ("after", "before")
            for case in cases:
                for name in order:
                    say(f"{name}:")
                    r = await one_case(sides[name], prepared[name], case, one, none)
                    figures[case][name].append(
                        r["per_scrape_ms"] * 1e3 if case == "scrape" else r["us"][0]
                    )
                    if case != "scrape":
                        kernel[case][name].append(r["kernel"][0])
    finally:
        for _, conns, _ in prepared.values():
            for c in conns:
                await c.close()
    print(
        f"\nA/B: broker CPU per request (µs; scrape: µs per /metrics scrape), median of "
        f"{args.windows} alternated windows of {args.window:g} s at {args.rate:g}/s"
    )
    print(
        f"{'case':<12}{'before':>9}{'after':>9}{'after/before':>14}  kernel b/a"
        "   windows before | after"
    )
    for case, f in figures.items():
        b, a = statistics.median(f["before"]), statistics.median(f["after"])
        ratio = a / b if b else float("nan")
        k = kernel[case]
        shares = (
            f"{statistics.median(k['before']):.0%}/{statistics.median(k['after']):.0%}"
            if k["before"] and k["after"]
            else "-"
        )
        print(
            f"{case:<12}{b:>9.0f}{a:>9.0f}{ratio:>14.2f}  {shares:>10}   "
            + " ".join(f"{v:.0f}" for v in f["before"])
            + " | "
            + " ".join(f"{v:.0f}" for v in f["after"])
        )


async def produce_all_case(
    cluster: LocalCluster, args: argparse.Namespace, instruments: Instruments
) -> dict[str, Any]:
    pids = {b: cluster.broker_pid(b) for b in cluster.broker_ids}
    admin = (await connect(cluster, 0, 1))[0]
    await create_topic(admin, "rf3", 3)
    leader, _ = await leader_and_id(admin, "rf3")
    await admin.close()
    conns = await connect(cluster, leader, 8)
    try:
        load = Load(conns, produce_request("rf3", -1), args.rate)
        urls = {b: u for b in cluster.broker_ids if (u := cluster.metrics_url(b))}
        result = await measure("produce_all", pids, load, args, instruments, urls)  # type: ignore[arg-type]
    finally:
        for c in conns:
            await c.close()
    result["leader"] = leader
    return result


def report(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(
        f"\nbroker CPU per request (µs), median of {args.windows} windows of {args.window:g} s "
        f"at {args.rate:g}/s, minus the idle broker's CPU in the window just before"
    )
    print(f"{'case':<14}{'answered/s':>11}{'µs/request':>12}  kernel  idle cores  errors")
    for r in results:
        if r["case"] == "scrape":
            continue
        us = r["us"]
        kernel = "/".join(f"{v:.0%}" for _, v in sorted(r["kernel"].items()))
        if len(us) == 1:
            cost = f"{us[0]:>12.0f}"
            idle = f"{r['idle'][0]:.4f}"
        else:
            cost = (
                f"{sum(us.values()):>12.0f}  ("
                + ", ".join(
                    f"broker {b}{'*' if b == r.get('leader') else ''} {v:.0f}"
                    for b, v in sorted(us.items())
                )
                + ")"
            )
            idle = ", ".join(f"{v:.4f}" for _, v in sorted(r["idle"].items()))
        print(f"{r['case']:<14}{r['rate']:>11.0f}{cost}  {kernel:>6}  {idle}  {r['errors']}")
    print("\nevent loop lag in the load windows (bucket bounds of kafka_server_eventloop_lagms)")
    for r in results:
        if r.get("lag"):
            print(f"{r['case']:<14}{lag_text(r['lag'])}")
    for r in results:
        if r["case"] == "scrape":
            print(
                f"idle broker: {r['without']:.4f} cores without /metrics scrapes, "
                f"{r['with']:.4f} with one a second: {r['per_scrape_ms']:.1f} ms CPU a scrape"
            )


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each cluster is started and stopped outside the event loop (the launcher runs its
    own), and measured inside one."""
    instruments = Instruments(args.profile, args.perf, args.py_spy)
    results: list[dict[str, Any]] = []
    single = [c for c in args.only if c in SINGLE]
    with work_dir("request-cpu") as out:
        if args.ab is not None:
            before = start_cluster(out / "before", 1, args, "before", src=args.ab)
            try:
                after = start_cluster(out / "after", 1, args, "after", src=args.src)
                try:
                    asyncio.run(ab_cases(before, after, single, args))
                finally:
                    after.down()
            finally:
                before.down()
            return []
        if single:
            cluster = start_cluster(out / "one", 1, args, "single", src=args.src)
            try:
                results += asyncio.run(single_broker_cases(cluster, single, args, instruments))
            finally:
                cluster.down()
        if "produce_all" in args.only:
            cluster = start_cluster(out / "three", 3, args, "produce_all", src=args.src)
            try:
                results.append(asyncio.run(produce_all_case(cluster, args, instruments)))
            finally:
                cluster.down()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=200)
    parser.add_argument("--window", type=float, default=5)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument(
        "--partitions",
        type=int,
        default=0,
        help="an idle topic of this many partitions on the one broker (its /metrics grows)",
    )
    parser.add_argument("--only", nargs="+", choices=ALL_CASES, default=list(ALL_CASES))
    parser.add_argument("--profile", type=Path, help="cProfile of the load windows into DIR")
    parser.add_argument("--perf", type=Path, help="perf record of the first load window")
    parser.add_argument(
        "--py-spy",
        type=Path,
        help="py-spy record --native (raw collapsed stacks) of the first load window into DIR "
        "(py-spy is not a project dependency: .venv/bin/pip install py-spy)",
    )
    parser.add_argument(
        "--src",
        type=Path,
        help="run the brokers from this checkout's src/ (e.g. `git worktree` of the commit "
        "before a change, for an A/B run)",
    )
    parser.add_argument(
        "--ab",
        type=Path,
        metavar="CHECKOUT",
        help="A/B: one broker from CHECKOUT's src/ (before) and one from this tree or "
        "--src (after), windows alternated; one-broker cases only",
    )
    args = parser.parse_args()
    print("command: .venv/bin/python " + " ".join(["bench/request_cpu.py", *sys.argv[1:]]))
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    results = run(args)
    if results:
        report(results, args)
    if args.py_spy is not None:
        print("\nwhere the event loop thread's samples went (bench/spy_breakdown.py)")
        for path in sorted(args.py_spy.glob("*-broker-*.txt")):
            print(spy_text(path))


if __name__ == "__main__":
    main()
