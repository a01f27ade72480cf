"""A campaign: build the network and cluster, run the workload through a schedule of
faults, heal, read everything back, check the history.

``make_schedule(seed, minutes)`` is pure: the same seed and length give the same faults,
durations and gaps. ``run_campaign`` carries a schedule out and returns the
``CheckResult``; everything it created (processes, namespaces, bridge, nft tables) is
removed in its ``finally``, and the run directory (history, nemesis log, broker logs,
report) is kept for study.

Concurrency: the campaign's thread drives the nemesis; the workload has threads of its own.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from chaos.admin import AdminWorkload
from chaos.checker import CheckResult, check, report
from chaos.cluster import ChaosCluster
from chaos.groups import GroupConsuming, resume
from chaos.history import History
from chaos.leaders import LeaderWatch
from chaos.nemesis import FAULT_KINDS, PROXY_FAULTS, Target, make_fault
from chaos.net import Network
from chaos.replicas import divergences, duplicate_origins
from chaos.timeline import draw, series
from chaos.txn_workload import TxnWorkload, create_txn_topics, txn_topics
from chaos.workload import CLIENT_LOGGER, LiveReading, Producing, final_read

TOPIC = "chaos"
CRASH_SEGMENT_BYTES = 64 * 1024


@dataclass(frozen=True)
class ScheduledFault:
    kind: str
    pick: int
    hold_s: float  # how long the fault lasts
    quiet_s: float  # calm time after the cluster has recovered, before the next fault


def make_schedule(
    seed: int, minutes: float, kinds: tuple[str, ...] = FAULT_KINDS, dense: bool = False
) -> list[ScheduledFault]:
    """Faults for about ``minutes`` of campaign, each kind in turn in a seeded order, with
    seeded targets, durations (3-20 s) and quiet gaps (2-6 s). Recovery waits come on top, so
    the budget counts 5 s for each. ``dense``: 1-8 s faults, 0.5-2 s apart, around the
    timeouts (ZooKeeper session 6 s, replica lag 3 s), for runs that do not wait for
    recovery between faults."""
    rng = random.Random(seed)
    budget = minutes * 60
    out: list[ScheduledFault] = []
    order: list[str] = []
    while budget > 0:
        if not order:
            order = list(kinds)
            rng.shuffle(order)
        fault = ScheduledFault(
            kind=order.pop(),
            pick=rng.randrange(1 << 16),
            hold_s=round(rng.uniform(1, 8) if dense else rng.uniform(3, 20), 1),
            quiet_s=round(rng.uniform(0.5, 2) if dense else rng.uniform(2, 6), 1),
        )
        out.append(fault)
        budget -= fault.hold_s + fault.quiet_s + (1 if dense else 5)
    return out


@dataclass
class CampaignConfig:
    partitions: int = 6
    zookeepers: int = 1  # 3: an ensemble, each member in a namespace of its own
    rate: int = 200  # values a second
    recovery_timeout_s: float = 60  # for a full ISR after each heal
    wait_recovery: bool = True  # False: the next fault may come before ISRs are full
    broker_overrides: dict[str, str] | None = None
    live_reader: bool = True
    # brokers' log dirs on tmpfs mounts of this size; a schedule with disk-full gets 128
    small_disk_mb: int = 0
    group_members: int = 2  # consumer-group workload (0: none)
    admin: bool = True  # scratch topics created, grown, deleted during the faults
    # inter-broker traffic through a proxy per broker; a schedule with slow-leader or
    # lossy-leader gets them
    proxies: bool = False
    # the topic's segment.bytes (0: the broker's 1 GiB); a schedule with an OS crash gets
    # CRASH_SEGMENT_BYTES, so that a crash meets several segments past the recovery point
    segment_bytes: int = 0
    # the transactional workload (``chaos.txn_workload``) beside the queue's; its seed
    transactions: bool = False
    seed: int = 0


def run_campaign(
    schedule: list[ScheduledFault],
    directory: Path,
    config: CampaignConfig | None = None,
    log: Callable[[str], None] = print,
    title: str = "chaos campaign",
) -> CheckResult:
    config = config or CampaignConfig()
    directory.mkdir(parents=True, exist_ok=True)
    history = History(directory / "history.jsonl")
    nemesis_log = open(directory / "nemesis.log", "w")  # noqa: SIM115
    client_log = logging.FileHandler(directory / "clients.log")
    client_log.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    CLIENT_LOGGER.addHandler(client_log)
    CLIENT_LOGGER.setLevel(logging.DEBUG)  # the producer's eos debug lines

    def note(line: str) -> None:
        stamped = f"[{time.strftime('%H:%M:%S')} t={history.now():7.2f}] {line}"
        nemesis_log.write(stamped + "\n")
        nemesis_log.flush()
        log(stamped)

    net = Network()
    small_disk_mb = config.small_disk_mb
    if not small_disk_mb and any("disk-full" in f.kind for f in schedule):
        small_disk_mb = 128
    proxies = config.proxies or any(
        kind in PROXY_FAULTS for f in schedule for kind in f.kind.split("+")
    )
    segment_bytes = config.segment_bytes
    if not segment_bytes and any("crash-" in f.kind for f in schedule):
        segment_bytes = CRASH_SEGMENT_BYTES
    cluster = ChaosCluster(
        net,
        directory / "cluster",
        zookeepers=config.zookeepers,
        overrides=config.broker_overrides,
        small_disk_mb=small_disk_mb,
        proxies=proxies,
    )
    producing: Producing | None = None
    reading: LiveReading | None = None
    group: GroupConsuming | None = None
    leaders: LeaderWatch | None = None
    admin: AdminWorkload | None = None
    txn: TxnWorkload | None = None
    active = None
    target = Target(cluster, TOPIC, config.partitions)
    try:
        net.create()
        cluster.start()
        note(
            f"network {net.prefix} ({net.subnet}.0/24), ZooKeeper {cluster.zookeeper_connect}, "
            f"brokers {cluster.bootstrap_servers()}, pids "
            + ", ".join(f"{n}={p.pid}" for n, p in cluster.processes.items())
            + "".join(f", proxy p{b}={p.pid}" for b, p in cluster.proxies.items())
        )
        _create_topic(cluster.bootstrap_servers(), config.partitions, segment_bytes)
        _wait(lambda: cluster.full_isr(TOPIC, config.partitions), 60, "a full ISR for the topic")
        if config.transactions:
            create_txn_topics(cluster.bootstrap_servers(), config.partitions, segment_bytes)
            for name in txn_topics():
                _wait(lambda n=name: cluster.full_isr(n, config.partitions), 60, f"ISRs of {name}")
        bootstrap = cluster.bootstrap_servers()
        leaders = LeaderWatch(history, cluster.zookeeper_connect, TOPIC, config.partitions)
        leaders.start()
        producing = Producing(history, bootstrap, TOPIC, config.partitions, config.rate)
        producing.start()
        if config.live_reader:
            reading = LiveReading(history, bootstrap, TOPIC, config.partitions)
            reading.start()
        if config.group_members:
            group = GroupConsuming(history, bootstrap, TOPIC, config.group_members)
            group.start()
        if config.admin:
            admin = AdminWorkload(history, bootstrap)
            admin.start()
        if config.transactions:
            txn = TxnWorkload(history, bootstrap, config.partitions, config.seed)
            txn.start()
        _wait(lambda: producing.acked >= 2 * config.partitions, 60, "first acknowledgements")
        if txn is not None:
            _wait(lambda: txn.committed >= 1, 90, "a first committed transaction")
        note(f"workload running: {producing.acked} acked")
        for number, scheduled in enumerate(schedule):
            _wait_quiet(scheduled.quiet_s)
            fault = make_fault(scheduled.kind, scheduled.pick)
            active = fault
            began = round(history.now(), 4)
            detail = fault.start(target)
            history.append(
                "nemesis", phase="start", fault=number, name=fault.name, detail=detail, began=began
            )
            note(f"fault #{number} {fault.name} for {scheduled.hold_s} s: {detail}")
            held = fault.hold(target, scheduled.hold_s)
            if held:
                note(f"fault #{number}: {held}")
            after = fault.stop(target)
            active = None
            healed = history.now()
            history.append("nemesis", phase="stop", fault=number, name=fault.name)
            note(f"fault #{number} healed" + (f": {after}" if after else ""))
            if not config.wait_recovery:
                continue
            full = _wait_or_none(
                lambda: cluster.full_isr(TOPIC, config.partitions), config.recovery_timeout_s
            )
            if full:
                seconds = history.now() - healed
                history.append("info", what="isr full", fault=number, seconds=round(seconds, 2))
                note(f"fault #{number}: every ISR full {seconds:.2f} s after the heal")
            else:
                history.append("info", what="isr not full", fault=number)
                note(f"fault #{number}: ISRs still short {config.recovery_timeout_s} s after heal")
            recovered = fault.after_recovery(target)
            if recovered:
                history.append("info", what="after recovery", fault=number, detail=recovered)
                note(f"fault #{number}: {recovered}")
        _wait_quiet(2)
        undelivered = producing.stop()
        producing = None
        if reading is not None:
            reading.stop()
            reading = None
        if group is not None:
            group.stop()
            group = None
        if admin is not None:
            admin.stop()
            note(f"admin workload stopped: {admin.done} operations done")
            admin = None
        if txn is not None:
            txn.stop(note)
            txn = None
        note(f"workload stopped ({undelivered} undelivered); final read")
        ends = final_read(history, bootstrap, TOPIC, config.partitions)
        note(f"final read done: high watermarks {ends}")
        if config.group_members:
            finished = resume(history, bootstrap, TOPIC, ends)
            note(f"a new group member resumed and read partitions {sorted(finished)} to the end")
        if not _wait_or_none(
            lambda: cluster.full_isr(TOPIC, config.partitions), config.recovery_timeout_s
        ):
            note("ISRs not full before the replica comparison: missing records may show")
        leaders.stop()
        leaders = None
        for name, status in cluster.exited().items():
            history.append("crash", process=name, status=status)
            note(f"{name} exited by itself (status {status}) during the campaign")
        for error in cluster.stop():
            note(f"stopping: {error}")
        data_dirs = {b: cluster.broker_dir(b) / "data" for b in cluster.broker_nodes}
        found = divergences(data_dirs, TOPIC, ends)
        for entry in found:
            history.append("divergence", **entry)
        note(f"replicas compared below the high watermark: {len(found)} divergent offsets")
        duplicates = check(history.snapshot()).duplicates
        for entry in duplicate_origins(data_dirs, TOPIC, duplicates):
            history.append("duplicate-origin", **entry)
    finally:
        if active is not None:
            try:
                active.stop(target)
            except Exception as exc:  # teardown goes on; the namespaces go anyway
                note(f"could not undo {active.name}: {exc}")
        # Each workload stops on its own: one that raises (a producer whose fatal error
        # makes flush raise) must not leave the brokers, ZooKeepers and namespaces behind.
        stops = [
            (producing, lambda w: w.stop(flush_s=5)),
            (reading, lambda w: w.stop()),
            (group, lambda w: w.stop()),
            (leaders, lambda w: w.stop()),
            (admin, lambda w: w.stop()),
            (txn, lambda w: w.abandon()),
        ]
        for workload, stop in stops:
            if workload is None:
                continue
            try:
                stop(workload)
            except Exception as exc:
                note(f"teardown: stopping {type(workload).__name__}: {exc!r}")
        errors = cluster.stop() + cluster.release_disks() + net.close()
        for error in errors:
            note(f"teardown: {error}")
        history.close()
        nemesis_log.close()
        CLIENT_LOGGER.removeHandler(client_log)
        client_log.close()
    result = check(history.snapshot())
    text = report(result, title)
    (directory / "report.txt").write_text(text + "\n")
    charts = draw(series(history.snapshot()), directory, title)
    log(text)
    log(f"history: {directory / 'history.jsonl'}; nemesis log: {directory / 'nemesis.log'}")
    log(f"timeline: {', '.join(str(c) for c in charts)}")
    return result


def _create_topic(bootstrap: str, partitions: int, segment_bytes: int = 0) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
    if segment_bytes:
        config["segment.bytes"] = str(segment_bytes)
    topic = NewTopic(TOPIC, partitions, 3, config=config)
    admin.create_topics([topic], operation_timeout=30)[TOPIC].result(timeout=60)


def _wait(condition: Callable[[], object], timeout_s: float, what: str) -> None:
    if not _wait_or_none(condition, timeout_s):
        raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")


def _wait_or_none(condition: Callable[[], object], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if condition():
                return True
        except Exception:  # ZooKeeper briefly unreachable: ask again
            pass
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


def _wait_quiet(seconds: float) -> None:
    """The schedule's own time: a fault's length or a calm gap (not a wait on a condition)."""
    time.sleep(seconds)
