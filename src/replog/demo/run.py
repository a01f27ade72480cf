"""``python -m replog.demo``: the end-to-end demo behind ``make demo``.

1. ZooKeeper and 3 brokers (:class:`~replog.cluster.launcher.LocalCluster`) in a fresh
   directory under ``demo-out/``; topics ``events`` (6 partitions, RF 3,
   ``min.insync.replicas=2``) and ``page-views-per-minute``.
2. A paced idempotent producer (``acks=all``) sends page views for ``--duration`` seconds
   at ``--rate`` records/s and writes down every acknowledgement.
3. A Spark Structured Streaming query (:mod:`replog.demo.query`) counts views per page per
   minute into the topic ``page-views-per-minute`` and a parquet table.
4. Part way through, the broker leading the most partitions is killed with SIGKILL and
   later started again.
5. The query's final counts must equal those of the acknowledged records, page by page
   and minute by minute (nothing lost, nothing counted twice); a summary is printed and a
   rate chart written.
6. Everything is stopped in a ``finally`` block, processes by their pid.

Exit status 0 only when the check holds.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from replog.cluster.launcher import LocalCluster
from replog.cluster.spark_cluster import StandaloneSpark
from replog.demo import check, cluster_ops, query
from replog.demo.chart import ChartData, draw
from replog.demo.workload import PacedProducer

EVENTS = "events"
EVENT_PARTITIONS = 6
OUTPUT = "page-views-per-minute"
BROKERS = 3
WARM_UP = "demo-warm-up"


class DemoFailure(RuntimeError):
    """Something the demo needs went wrong; the message says what."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m replog.demo", description=__doc__)
    parser.add_argument("--rate", type=float, default=2000, help="records/s (default 2000)")
    parser.add_argument("--duration", type=float, default=75, help="seconds of producing")
    parser.add_argument(
        "--kill-at", type=float, default=0.3, help="kill a broker at this fraction of the run"
    )
    parser.add_argument(
        "--restart-after", type=float, default=25, help="seconds between kill and restart"
    )
    parser.add_argument("--out", type=Path, default=Path("demo-out"), help="output directory")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--catch-up-timeout", type=float, default=240, help="seconds the query may lag at the end"
    )
    parser.add_argument(
        "--spark",
        choices=("local", "standalone"),
        default="local",
        help="local[2] in this process (default), or a standalone spark:// cluster of a "
        "master and two workers started for the demo",
    )
    return parser.parse_args(argv)


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class Timeline:
    kill_at: float | None = None
    restart_at: float | None = None
    killed_broker: int | None = None
    killed_was_controller: bool = False
    killed_led: list[tuple[str, int]] = field(default_factory=list)
    total_partitions: int = 0


class Progress:
    """A one-line progress bar on stderr (a line every 5 s when stderr is not a terminal)."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.last = 0.0

    def show(self, fraction: float, text: str, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < (0.5 if self.tty else 5.0):
            return
        self.last = now
        width = 30
        filled = int(width * min(1.0, fraction))
        line = f"[{'#' * filled}{'.' * (width - filled)}] {fraction * 100:3.0f}%  {text}"
        if self.tty:
            sys.stderr.write("\r" + line.ljust(110)[:150])
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def newline(self) -> None:
        if self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


class NativeOutput:
    """What this process's native code writes to file descriptors 1 and 2 (librdkafka's
    log lines, the Spark JVM and its children, which inherit them) goes to ``path``;
    Python's ``sys.stdout``/``sys.stderr`` (the demo's own lines) stay on the terminal."""

    def __init__(self, path: Path) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        self._saved = (os.dup(1), os.dup(2))
        self._streams = (sys.stdout, sys.stderr)
        sys.stdout = os.fdopen(os.dup(1), "w", buffering=1)
        sys.stderr = os.fdopen(os.dup(2), "w", buffering=1)
        with open(path, "ab") as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)

    def restore(self) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self._saved[0], 1)
        os.dup2(self._saved[1], 2)
        for fd in self._saved:
            os.close(fd)
        sys.stdout.close()
        sys.stderr.close()
        sys.stdout, sys.stderr = self._streams


def query_failure(q: Any) -> str | None:
    """None while the query runs; otherwise why it stopped (first lines of the error)."""
    if q.isActive:
        return None
    exc = q.exception()
    if exc is None:
        return "the Spark query stopped without an error"
    text = str(exc).strip().splitlines()
    return "\n".join(text[:40])


def client_logger(path: Path) -> logging.Logger:
    """librdkafka's log lines (connection refused while a broker is down...) go to a file."""
    logger = logging.getLogger("replog.demo.clients")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logger.addHandler(handler)
    return logger


def wait_query_ready(q: Any, timeout_s: float) -> None:
    """Until the query has run its first trigger (Spark and the source are warm)."""
    deadline = time.monotonic() + timeout_s
    while q.lastProgress is None:
        failure = query_failure(q)
        if failure:
            raise DemoFailure(f"the Spark query failed:\n{failure}")
        if time.monotonic() > deadline:
            raise DemoFailure(f"the Spark query made no progress within {timeout_s:.0f} s")
        time.sleep(0.2)


def consumed_so_far(q: Any) -> int:
    last = q.lastProgress
    if last is None:
        return 0
    return sum(query.batch_progress(last, EVENTS).end_offsets.values())


def run_workload(
    args: argparse.Namespace,
    cluster: LocalCluster,
    admin: Any,
    producer: PacedProducer,
    q: Any,
) -> Timeline:
    """Drive the run: progress, kill, restart, watch the query; until the producer ends."""
    timeline = Timeline()
    progress = Progress()
    producer.start()
    kill_at_s = args.kill_at * args.duration
    while producer.is_alive():
        producer.join(0.25)
        failure = query_failure(q)
        if failure:
            producer.stop()
            raise DemoFailure(f"the Spark query failed:\n{failure}")
        if producer.started_at is None:
            continue
        now = time.time()
        elapsed = now - producer.started_at
        if timeline.kill_at is None and elapsed >= kill_at_s:
            progress.newline()
            kill_busiest(cluster, admin, timeline)
        elif (
            timeline.kill_at is not None
            and timeline.restart_at is None
            and now >= timeline.kill_at + args.restart_after
            and timeline.killed_broker is not None
        ):
            progress.newline()
            timeline.restart_at = time.time()
            pid = cluster.start_broker(timeline.killed_broker, wait=False)
            say(
                f"t={timeline.restart_at - producer.started_at:5.1f}s  started broker "
                f"{timeline.killed_broker} again (pid {pid})"
            )
        down = ""
        if timeline.kill_at is not None and timeline.restart_at is None:
            down = f"  broker {timeline.killed_broker} DOWN"
        log = producer.log
        progress.show(
            min(1.0, elapsed / args.duration),
            f"sent {log.count:,}  acked {log.acked:,}  consumed {consumed_so_far(q):,}{down}",
        )
    progress.show(1.0, f"sent {producer.log.count:,}  acked {producer.log.acked:,}", force=True)
    progress.newline()
    if producer.error is not None:
        raise DemoFailure(f"the producer failed: {producer.error!r}")
    return timeline


def kill_busiest(cluster: LocalCluster, admin: Any, timeline: Timeline) -> None:
    parts = cluster_ops.describe(admin, [EVENTS, OUTPUT])
    broker, n = cluster_ops.busiest_leader(parts)
    controller = cluster.controller_id()
    pid = cluster.broker_pid(broker)
    timeline.killed_broker = broker
    timeline.killed_was_controller = controller == broker
    timeline.killed_led = [(p.topic, p.partition) for p in parts if p.leader == broker]
    timeline.total_partitions = len(parts)
    timeline.kill_at = time.time()
    cluster.kill_broker(broker)
    role = ", the controller" if timeline.killed_was_controller else ""
    say(
        f"SIGKILL broker {broker} (pid {pid}{role}): it led {n} of {len(parts)} partitions "
        f"{sorted(timeline.killed_led)}"
    )


def wait_caught_up(q: Any, log_end: dict[int, int], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    progress = Progress()
    total = sum(log_end.values())
    while True:
        failure = query_failure(q)
        if failure:
            raise DemoFailure(f"the Spark query failed:\n{failure}")
        last = q.lastProgress
        latest = None if last is None else query.batch_progress(last, EVENTS)
        if query.caught_up(latest, log_end):
            progress.show(1.0, f"query caught up: {total:,} records read", force=True)
            progress.newline()
            return
        done = 0 if latest is None else sum(latest.end_offsets.values())
        progress.show(done / max(1, total), f"query catching up: {done:,} of {total:,} read")
        if time.monotonic() > deadline:
            progress.newline()
            raise DemoFailure(
                f"the Spark query read {done:,} of {total:,} records within {timeout_s:.0f} s "
                f"after the producer finished"
            )
        time.sleep(0.5)


@dataclass
class Verdict:
    ok: bool
    lines: list[str]
    figures: dict[str, Any]


def verify(
    producer: PacedProducer,
    timeline: Timeline,
    log_start: dict[int, int],
    log_end: dict[int, int],
    batches: list[query.BatchProgress],
    table_rows: list[check.ResultRow],
    topic_rows: list[check.ResultRow],
    chart_path: Path,
) -> Verdict:
    log = producer.log
    acked = log.acked
    in_log = sum(log_end[p] - log_start.get(p, 0) for p in log_end)
    consumed = sum(b.input_rows for b in batches)
    expected = check.expected_counts(log.page, log.ts, log.ack_time)
    problems: list[str] = []
    comparisons = {}
    for name, rows in (("parquet table", table_rows), (f"topic {OUTPUT}", topic_rows)):
        try:
            comparisons[name] = check.compare(expected, check.final_counts(rows))
        except check.InconsistentOutput as exc:
            problems.append(f"{name}: {exc}")
    for name, c in comparisons.items():
        if not c.ok:
            shown = ", ".join(
                f"{k[0]}@{k[1]}: {w} acked, {g} counted" for k, w, g in c.mismatched[:5]
            )
            problems.append(
                f"{name}: {len(c.mismatched)} page/minute counts differ "
                f"(lost {c.lost}, counted twice {c.duplicated}): {shown}"
            )
    if log.errors:
        problems.append(f"{len(log.errors)} delivery errors, first: {log.errors[0]}")
    if acked != log.count:
        problems.append(f"{log.count - acked} records sent but never acknowledged")
    if in_log != acked:
        problems.append(f"topic {EVENTS} holds {in_log} records but {acked} were acknowledged")
    if consumed != in_log:
        problems.append(f"the query read {consumed} records, the log holds {in_log}")

    figures = failover(producer, timeline)
    table = comparisons.get("parquet table")
    lost = table.lost if table else None
    twice = table.duplicated if table else None
    start = producer.started_at or 0.0
    lines = [
        f"records produced                {log.count:>10,}",
        f"acknowledged (acks=all)         {acked:>10,}   delivery errors {len(log.errors)}",
        f"{f'in topic {EVENTS} ({len(log_end)} partitions)':<32}{in_log:>10,}",
        f"consumed by the Spark query     {consumed:>10,}   in {len(batches)} micro-batches",
        f"lost                            {lost if lost is not None else '?':>10}",
        f"counted twice                   {twice if twice is not None else '?':>10}",
        f"page/minute counts checked      {len(expected):>10}   "
        + ", ".join(f"{n}: {'equal' if c.ok else 'DIFFERENT'}" for n, c in comparisons.items()),
    ]
    if timeline.kill_at is not None:
        role = " (the controller)" if timeline.killed_was_controller else ""
        restarted = (
            f", restarted at t={timeline.restart_at - start:.1f}s"
            if timeline.restart_at is not None
            else ""
        )
        lines.append(
            f"broker killed                   {timeline.killed_broker:>10}{role}, leader of "
            f"{len(timeline.killed_led)}/{timeline.total_partitions} partitions, "
            f"SIGKILL at t={timeline.kill_at - start:.1f}s{restarted}"
        )
        lines += [
            "failover as the producer saw it:",
            f"  longest time one partition went without an ack   {_s(figures.longest_gap_s)}"
            + (
                f" (partition {figures.gap_partition})" if figures.gap_partition is not None else ""
            ),
            f"  longest time no partition got an ack             {_s(figures.producer_gap_s)}",
            "  kill -> first ack of a record sent after it,",
            f"     on every partition the killed broker led      {_s(figures.first_ack_led_s)}",
            f"     on every partition                            {_s(figures.first_ack_all_s)}",
        ]
    lines.append(f"chart                           {chart_path}")
    lines.append(
        f"page/minute counts              {chart_path.parent / 'page_views_per_minute.parquet'}"
    )
    return Verdict(
        ok=not problems,
        lines=lines + [f"PROBLEM: {p}" for p in problems],
        figures={
            "records_produced": log.count,
            "records_acknowledged": acked,
            "records_in_log": in_log,
            "records_consumed": consumed,
            "lost": lost,
            "counted_twice": twice,
            "failover": asdict(figures),
            "timeline": asdict(timeline),
            "problems": problems,
        },
    )


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:6.2f} s"


def failover(producer: PacedProducer, timeline: Timeline) -> check.FailoverFigures:
    log = producer.log
    if timeline.kill_at is None:
        return check.FailoverFigures(None, None, None, None, None)
    until = timeline.restart_at if timeline.restart_at is not None else math.inf
    return check.failover_figures(
        log.send_time,
        log.ack_time,
        log.partition,
        kill_time=timeline.kill_at,
        until=until,
        led_partitions=[p for t, p in timeline.killed_led if t == EVENTS],
        all_partitions=range(EVENT_PARTITIONS),
    )


def chart_data(
    producer: PacedProducer, timeline: Timeline, batches: list[query.BatchProgress]
) -> ChartData:
    log = producer.log
    start = producer.started_at or time.time()
    end = max(
        [start + 1.0]
        + [t for t in log.ack_time if not math.isnan(t)]
        + [b.finished for b in batches]
    )
    figures = failover(producer, timeline)
    stall = None
    if figures.longest_gap_s is not None and figures.gap_partition is not None:
        times = sorted(
            t
            for t, p in zip(log.ack_time, log.partition, strict=True)
            if p == figures.gap_partition and not math.isnan(t)
        )
        for earlier, later in zip(times, times[1:], strict=False):
            if math.isclose(later - earlier, figures.longest_gap_s) and later > (
                timeline.kill_at or 0
            ):
                stall = (earlier, later)
                break
    return ChartData(
        start=start,
        sent=check.rate_series(log.send_time, start, end),
        acked=check.rate_series(log.ack_time, start, end),
        consumed=check.spread_rate(
            ((b.began, b.finished, b.input_rows) for b in batches), start, end
        ),
        kill_at=timeline.kill_at,
        restart_at=timeline.restart_at,
        killed_broker=timeline.killed_broker,
        stall=stall,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run_dir = (args.out / time.strftime("run-%Y%m%d-%H%M%S")).resolve()
    run_dir.mkdir(parents=True, exist_ok=False)
    native = NativeOutput(run_dir / "native-output.log")
    try:
        return _run(args, run_dir)
    finally:
        native.restore()


def _run(args: argparse.Namespace, run_dir: Path) -> int:
    cluster = LocalCluster(run_dir / "cluster")
    spark: Any = None
    q: Any = None
    producer: PacedProducer | None = None
    standalone: StandaloneSpark | None = None
    try:
        say(f"replog demo: everything goes to {run_dir} (logs of every process too)")
        say(f"starting ZooKeeper and {BROKERS} brokers ...")
        bootstrap = cluster.up(BROKERS, metrics=True)
        say(f"cluster up: {bootstrap}, controller is broker {cluster.controller_id()}")
        say(f"watch it live: {cluster.start_console()}  (the cluster console)")
        clients_log = client_logger(run_dir / "clients.log")
        admin = cluster_ops.admin_client(bootstrap, clients_log)
        cluster_ops.create_topics(
            admin,
            [
                cluster_ops.TopicSpec(EVENTS, EVENT_PARTITIONS, 3, {"min.insync.replicas": "2"}),
                cluster_ops.TopicSpec(OUTPUT, 1, 3, {"min.insync.replicas": "2"}),
                cluster_ops.TopicSpec(WARM_UP, 1, 1, {}),
            ],
        )
        cluster_ops.wait_for_leaders(admin, [EVENTS, OUTPUT, WARM_UP])
        say(f"created {EVENTS} (6 partitions, RF 3, min.insync.replicas=2) and {OUTPUT}")
        query.log_spark_to(run_dir / "spark.log")
        master = "local[2]"
        if args.spark == "standalone":
            say("starting a standalone Spark cluster (a master, two workers) ...")
            standalone = StandaloneSpark(run_dir / "spark-standalone")
            master = standalone.up(workers=2, cores=1, memory="1g")
        say(f"starting Spark ({master}) and the streaming query ...")
        spark = query.spark_session(master=master)
        started = time.monotonic()
        query.warm_up(spark, bootstrap, WARM_UP)
        say(f"Spark warmed up on topic {WARM_UP} in {time.monotonic() - started:.1f} s")
        table_dir = run_dir / "page_views_per_minute.parquet"
        q = query.start_query(
            spark,
            bootstrap,
            events_topic=EVENTS,
            output_topic=OUTPUT,
            table_dir=table_dir,
            checkpoint_dir=run_dir / "checkpoint",
        )
        wait_query_ready(q, timeout_s=180)
        producer = PacedProducer(
            bootstrap,
            EVENTS,
            rate=args.rate,
            duration_s=args.duration,
            seed=args.seed,
            client_config={"logger": clients_log},
        )
        say(f"producing {producer.total:,} page views at {args.rate:,.0f}/s (acks=all, idempotent)")
        timeline = run_workload(args, cluster, admin, producer, q)
        say(
            f"producer done: {producer.log.acked:,} of {producer.log.count:,} acknowledged, "
            f"{len(producer.log.errors)} errors"
        )
        log_start, log_end = cluster_ops.log_end_offsets(
            bootstrap, EVENTS, EVENT_PARTITIONS, clients_log
        )
        wait_caught_up(q, log_end, args.catch_up_timeout)
        query.stop_between_triggers(q)
        batches = query.all_progress(q, EVENTS)
        with open(run_dir / "progress.jsonl", "w") as out:
            for progress in q.recentProgress:
                out.write(progress.json + "\n")
        q = None
        table_rows = query.read_table(spark, table_dir)
        topic_rows = query.read_output_topic(spark, bootstrap, OUTPUT)
        chart_path = draw(chart_data(producer, timeline, batches), run_dir / "rates.png")
        verdict = verify(
            producer, timeline, log_start, log_end, batches, table_rows, topic_rows, chart_path
        )
        parts = cluster_ops.describe(admin, [EVENTS, OUTPUT])
        isr = ", ".join(
            f"{p.topic}-{p.partition}: leader {p.leader} isr {list(p.isr)}" for p in parts
        )
        (run_dir / "summary.json").write_text(json.dumps(verdict.figures, indent=2, default=str))
        print(f"\nreplog demo summary ({run_dir})")
        for line in verdict.lines:
            print("  " + line)
        print(f"  partitions at the end: {isr}")
        print("RESULT: " + ("PASS" if verdict.ok else "FAIL"))
        return 0 if verdict.ok else 1
    except DemoFailure as exc:
        say(f"\ndemo FAILED: {exc}")
        return 1
    except Exception as exc:
        traceback.print_exc()
        say(f"\ndemo FAILED: {type(exc).__name__}: {exc}")
        return 1
    finally:
        shut_down(producer, q, spark, cluster)
        if standalone is not None:
            standalone.down()


def shut_down(producer: PacedProducer | None, q: Any, spark: Any, cluster: LocalCluster) -> None:
    """Stop everything that was started; one failing step never skips the next."""
    steps: list[tuple[str, Any]] = []
    if producer is not None:
        steps.append(("producer", lambda: (producer.stop(), producer.join(10))))
    if q is not None:
        steps.append(("Spark query", q.stop))
    if spark is not None:
        steps.append(("Spark", spark.stop))
    steps.append(("cluster", cluster.down))
    say("stopping the cluster ...")
    for name, step in steps:
        try:
            step()
        except Exception as exc:
            say(f"(stopping the {name}: {type(exc).__name__}: {exc})")
