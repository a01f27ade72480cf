"""Broker and controller failover times at 10,000 partitions, one run (prints figures).

    .venv/bin/python bench/failover.py [--partitions 10000] [--topics 10]
                                       [--session-timeout-ms 6000] [--keep]
                                       [--mode kill|controlled] [--poll-leaders]

3 brokers (``zookeeper.session.timeout.ms`` low so a killed broker's znode goes soon),
``--partitions`` partitions with RF 3 spread over ``--topics`` topics, created in a few
CreateTopics calls; the bench waits until the controller logs every creation's
LeaderAndIsr acknowledged (the brokers create the logs after ZooKeeper names the leaders),
so that no kill below times that backlog. Then:

1. **Broker failure.** SIGKILL a broker that is not the controller. Time zero is the moment
   its ``/brokers/ids/<id>`` znode disappears (a kazoo watch; that is when the session
   expires). Measured: until every LeaderAndIsr is acknowledged (the controller's log line,
   which also gives its own ZooKeeper-write and acknowledgement times counted from the
   watch event, for the new leaders, written and told first, and for everything). Then
   every partition it led is checked to have another leader in ZooKeeper. With
   ``--poll-leaders``, the bench also polls those partition states (batched reads; the
   resolution is one poll) until they all have one, an outside view that costs CPU the
   brokers then lack.
2. **Controller failover.** The killed broker is started again; then the controller is
   killed. Time zero is the deletion of ``/controller``. Measured from the new controller's
   log lines: elected, context loaded, failover done with every broker told (LeaderAndIsr
   acknowledged), and the following broker-failure handling of the old controller.

With ``--mode controlled``, instead of both: **controlled shutdown.** SIGTERM (by pid) to
the broker that is not the controller and leads the most partitions (about a third).
Measured from the SIGTERM: until the broker's log says the controller answered its
ControlledShutdown (the controller answers once every new leader acknowledged its
LeaderAndIsr), until the process exits, and a check that every partition it led has
another leader in ZooKeeper.

All figures are wall-clock seconds on this machine; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from common import ZnodeGone, create_partitions, record_profiles, replog_cluster, say, work_dir

from replog.cluster.launcher import LocalCluster

LOG_LINE = re.compile(
    r"^\[(?P<ts>[\d-]+ [\d:]+,\d+)\] (?P<level>\w+) (?P<logger>[\w.]+): (?P<msg>.*)$"
)


class LogTail:
    """Lines of a broker log appended after construction, with their timestamps."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0
        self.partial = ""
        self.pending: list[str] = []

    def _read(self) -> None:
        with open(self.path, errors="replace") as f:
            f.seek(self.offset)
            chunk = f.read()
            self.offset = f.tell()
        *lines, self.partial = (self.partial + chunk).split("\n")
        self.pending.extend(lines)

    def wait_for(self, pattern: str, timeout_s: float) -> tuple[float, re.Match[str]]:
        """(time of the line, match) of the first new line whose message matches; lines
        before it are consumed, lines after it stay for the next call."""
        wanted = re.compile(pattern)
        deadline = time.monotonic() + timeout_s
        while True:
            self._read()
            for i, line in enumerate(self.pending):
                m = LOG_LINE.match(line)
                found = wanted.search(m["msg"]) if m else None
                if m and found:
                    del self.pending[: i + 1]
                    stamp = datetime.strptime(m["ts"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                    return stamp, found
            self.pending.clear()
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no log line matching {pattern!r} in {self.path} in {timeout_s} s"
                )
            time.sleep(0.05)


def state_path(topic: str, partition: int) -> str:
    return f"/brokers/topics/{topic}/partitions/{partition}/state"


def read_leaders(zk: Any, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """Leader of each partition from its state znode: one batch of async reads (-1: none)."""
    pending = [(tp, zk.get_async(state_path(*tp))) for tp in partitions]
    out = {}
    for tp, result in pending:
        try:
            data, _ = result.get(timeout=60)
            out[tp] = int(json.loads(data)["leader"])
        except Exception:  # not there yet
            out[tp] = -1
    return out


def wait_all_led(
    zk: Any, partitions: list[tuple[str, int]], timeout_s: float
) -> dict[tuple[str, int], int]:
    deadline = time.monotonic() + timeout_s
    while True:
        leaders = read_leaders(zk, partitions)
        missing = sum(1 for leader in leaders.values() if leader < 0)
        if not missing:
            return leaders
        if time.monotonic() > deadline:
            raise TimeoutError(f"{missing} partitions have no leader after {timeout_s} s")
        time.sleep(1)


def wait_creation_acked(cluster: LocalCluster, topics: list[str], timeout_s: float) -> float:
    """Time of the controller's last log line saying the new topics' LeaderAndIsr were
    all acknowledged: the brokers may still be creating logs once ZooKeeper names every
    leader, and a kill then would time that backlog too."""
    controller = cluster.controller_id()
    assert controller is not None
    tail = LogTail(cluster.broker_dir(controller) / "broker.log")
    tail.offset = 0  # from the start: the lines may be written already
    waiting = set(topics)
    last = 0.0
    while waiting:
        at, m = tail.wait_for(r"new topics \[(.*)\]: .*LeaderAndIsr acked", timeout_s)
        waiting -= {t.strip().strip("'") for t in m[1].split(",")}
        last = max(last, at)
    return last


def start_profiles(
    cluster: LocalCluster, broker_ids: list[int], out: Path | None, seconds: int
) -> list[Any]:
    """``py-spy record`` of each broker for ``seconds`` (``common.record_profiles``);
    none without ``out``."""
    if out is None:
        return []
    pids = {b: cluster.broker_pid(b) for b in broker_ids}
    return record_profiles({b: p for b, p in pids.items() if p is not None}, out, seconds, 250)


def broker_failure(
    cluster: LocalCluster,
    zk: Any,
    leaders: dict[tuple[str, int], int],
    poll: bool,
    profile: Path | None = None,
) -> dict[str, Any]:
    controller = cluster.controller_id()
    assert controller is not None
    counts = {b: sum(1 for v in leaders.values() if v == b) for b in cluster.broker_ids}
    victim = max((b for b in cluster.broker_ids if b != controller), key=lambda b: counts[b])
    led = sorted(tp for tp, leader in leaders.items() if leader == victim)
    say(f"broker failure: SIGKILL broker {victim} (leads {len(led)}; controller is {controller})")
    tail = LogTail(cluster.broker_dir(controller) / "broker.log")
    survivors = {
        b: LogTail(cluster.broker_dir(b) / "broker.log") for b in cluster.broker_ids if b != victim
    }
    gone = ZnodeGone(zk, f"/brokers/ids/{victim}")
    killed_at = time.time()
    cluster.kill_broker(victim)
    gone_at = gone.wait(120)
    profiles = start_profiles(
        cluster, [b for b in cluster.broker_ids if b != victim], profile, seconds=2
    )
    polls = 0
    poll_s = 0.0
    moved_at = None
    while poll:
        started = time.time()
        now = read_leaders(zk, led)
        polls += 1
        poll_s = time.time() - started
        if all(leader not in (victim, -1) for leader in now.values()):
            moved_at = time.time()
            break
        if started - gone_at > 300:
            raise TimeoutError("leaders did not move within 300 s")
    line_at, m = tail.wait_for(
        rf"broker failure of \[{victim}\]: (\d+) partitions re-elected, (\d+) offline, "
        r"(\d+) partition states written, zk writes ([\d.]+) s, LeaderAndIsr acked ([\d.]+) s "
        r"\((\d+) requests, (\d+) failed\)"
        r"(?:; new leaders' writes ([\d.]+) s, acked ([\d.]+) s)?",
        300,
    )
    for p in profiles:
        p.wait()
    if not poll:  # checked once, after the fact
        now = read_leaders(zk, led)
        stuck = sum(1 for leader in now.values() if leader in (victim, -1))
        if stuck:
            raise AssertionError(f"{stuck} partitions {victim} led have no other leader")
    return {
        "victim": victim,
        "controller": controller,
        "led": len(led),
        "session_expiry_s": gone_at - killed_at,
        "leaders_in_zk_s": None if moved_at is None else moved_at - gone_at,
        "poll_s": poll_s,
        "polls": polls,
        "acked_line_s": line_at - gone_at,
        "reelected": int(m[1]),
        "offline": int(m[2]),
        "states_written": int(m[3]),
        "controller_zk_writes_s": float(m[4]),
        "controller_acked_s": float(m[5]),
        "requests": int(m[6]),
        "failed": int(m[7]),
        # The new leaders' own LeaderAndIsr, when the controller writes and sends them
        # before the rest (None from a controller deciding everything at once).
        "new_leaders_zk_writes_s": None if m[8] is None else float(m[8]),
        "new_leaders_acked_s": None if m[9] is None else float(m[9]),
        "applied": applied_lines(survivors, gone_at, line_at),
    }


def applied_lines(
    tails: dict[int, LogTail], since: float, until: float
) -> list[tuple[int, float, int, float]]:
    """Each surviving broker's LeaderAndIsr handling between ``since`` and ``until``
    (its log lines): (broker, done at, partitions, handling took), times from ``since``."""
    out = []
    for broker, tail in tails.items():
        while True:
            try:
                at, m = tail.wait_for(
                    r"LeaderAndIsr from controller \d+ \(epoch \d+\): (\d+) partitions "
                    r"applied in ([\d.]+) s",
                    0,
                )
            except TimeoutError:
                break
            if since <= at <= until + 0.01:
                out.append((broker, at - since, int(m[1]), float(m[2])))
    return sorted(out, key=lambda line: line[1])


def controlled_shutdown(
    cluster: LocalCluster, zk: Any, leaders: dict[tuple[str, int], int]
) -> dict[str, Any]:
    controller = cluster.controller_id()
    assert controller is not None
    counts = {b: sum(1 for v in leaders.values() if v == b) for b in cluster.broker_ids}
    victim = max((b for b in cluster.broker_ids if b != controller), key=lambda b: counts[b])
    led = sorted(tp for tp, leader in leaders.items() if leader == victim)
    pid = cluster.broker_pid(victim)
    assert pid is not None
    say(f"controlled shutdown: SIGTERM broker {victim} (leads {len(led)}; controller {controller})")
    tail = LogTail(cluster.broker_dir(victim) / "broker.log")
    sent_at = time.time()
    os.kill(pid, signal.SIGTERM)
    answered_at, m = tail.wait_for(
        r"controlled shutdown (succeeded|failed)|proceeding to an unclean", 300
    )
    while True:
        if not _alive(pid):
            exited_at = time.time()
            break
        if time.time() - sent_at > 300:
            raise TimeoutError(f"broker {victim} still running 300 s after SIGTERM")
        time.sleep(0.01)
    now = read_leaders(zk, led)
    return {
        "victim": victim,
        "controller": controller,
        "led": len(led),
        "answered": m[0],
        "answered_s": answered_at - sent_at,
        "exited_s": exited_at - sent_at,
        "still_led": sum(1 for leader in now.values() if leader in (victim, -1)),
    }


def _alive(pid: int) -> bool:
    from replog.cluster.launcher import pid_alive

    return pid_alive(pid)


def controller_failover(cluster: LocalCluster, zk: Any) -> dict[str, Any]:
    old = cluster.controller_id()
    assert old is not None
    others = [b for b in cluster.broker_ids if b != old]
    tails = {b: LogTail(cluster.broker_dir(b) / "broker.log") for b in others}
    gone = ZnodeGone(zk, "/controller")
    say(f"controller failover: SIGKILL controller broker {old}")
    killed_at = time.time()
    cluster.kill_broker(old)
    gone_at = gone.wait(120)
    deadline = time.monotonic() + 120
    new = None
    while new is None or new == old:
        if time.monotonic() > deadline:
            raise TimeoutError("no new controller")
        time.sleep(0.05)
        new = cluster.controller_id()
    tail = tails[new]
    elected_at, _ = tail.wait_for(r"elected controller at epoch (\d+)", 60)
    loaded_at, loaded = tail.wait_for(
        r"failover to broker \d+ at epoch \d+: (\d+) brokers, (\d+) topics, (\d+) partitions "
        r"loaded in ([\d.]+) s",
        300,
    )
    told_at, told = tail.wait_for(
        r"failover to broker \d+ at epoch \d+: (\d+) partitions re-elected, .* LeaderAndIsr "
        r"acked ([\d.]+) s \((\d+) requests, (\d+) failed\)",
        300,
    )
    # The old controller's partitions are re-elected within the failover when its znode
    # was gone by then, else by a broker-failure event right after.
    old_line = None
    if int(told[1]) == 0:
        old_line = tail.wait_for(
            rf"broker failure of \[{old}\]: (\d+) partitions re-elected, .*zk writes "
            r"([\d.]+) s, LeaderAndIsr acked ([\d.]+) s",
            300,
        )
    return {
        "old": old,
        "new": new,
        "session_expiry_s": gone_at - killed_at,
        "elected_s": elected_at - gone_at,
        "loaded_s": loaded_at - gone_at,
        "load_took_s": float(loaded[4]),
        "partitions_loaded": int(loaded[3]),
        "told_s": told_at - gone_at,
        "failover_reelected": int(told[1]),
        "failover_requests": int(told[3]),
        "failover_failed": int(told[4]),
        "old_led_moved_s": None if old_line is None else old_line[0] - gone_at,
        "old_reelected": None if old_line is None else int(old_line[1][1]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--keep", action="store_true", help="keep bench/out/failover-*")
    parser.add_argument("--mode", choices=("kill", "controlled"), default="kill")
    parser.add_argument(
        "--poll-leaders",
        action="store_true",
        help="poll the killed broker's partition states in ZooKeeper until they all have "
        "another leader (an outside view, but each poll costs this process ~0.3-0.7 s of "
        "CPU, taken from the brokers on a small machine); by default the controller's log "
        "gives the times and the states are checked once afterwards",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="record the surviving brokers with py-spy for 2 s from the znode's deletion (collapsed "
        "stacks in DIR/profile-broker-<id>.txt); sampling costs CPU, so not for figures",
    )
    args = parser.parse_args()
    print(
        f"command: .venv/bin/python bench/failover.py --partitions {args.partitions} "
        f"--topics {args.topics} --mode {args.mode}"
    )
    from kazoo.client import KazooClient

    per_topic = args.partitions // args.topics
    topics = [f"failover-{i:02d}" for i in range(args.topics)]
    overrides = {"zookeeper.session.timeout.ms": str(args.session_timeout_ms)}
    with work_dir("failover", keep=args.keep) as out, replog_cluster(out, 3, overrides) as cluster:
        zk = KazooClient(hosts=cluster.zookeeper_connect, timeout=30)
        zk.start(timeout=30)
        try:
            say(
                f"creating {per_topic * len(topics):,} partitions (RF 3) in {len(topics)} topics ..."
            )
            started = time.time()
            create_partitions(cluster.bootstrap_servers(), topics, per_topic)
            partitions = [(t, p) for t in topics for p in range(per_topic)]
            leaders = wait_all_led(zk, partitions, 1800)
            created_s = time.time() - started
            say(f"  every partition has a leader after {created_s:.1f} s")
            acked_s = wait_creation_acked(cluster, topics, 600) - started
            say(f"  and every broker acknowledged its LeaderAndIsr after {acked_s:.1f} s")
            if args.mode == "controlled":
                cs = controlled_shutdown(cluster, zk, leaders)
                n = per_topic * len(topics)
                print(f"\ncontrolled shutdown at {n:,} partitions, RF 3, 3 brokers")
                row("topic creation (CreateTopics until every partition led)", created_s)
                row("  ... until every LeaderAndIsr of it acked", acked_s)
                print(f"broker {cs['victim']} SIGTERMed, leader of {cs['led']:,} partitions:")
                row(
                    "  SIGTERM -> ControlledShutdown answered (all new leaders acked)",
                    cs["answered_s"],
                    f"({cs['answered']})",
                )
                row("  SIGTERM -> process exited", cs["exited_s"])
                print(f"  partitions it led still without another leader: {cs['still_led']}")
                return
            one = broker_failure(cluster, zk, leaders, args.poll_leaders, args.profile)
            say(f"restarting broker {one['victim']} ...")
            tail = LogTail(cluster.broker_dir(one["controller"]) / "broker.log")
            restarted = time.time()
            cluster.start_broker(one["victim"], wait=True, wait_s=300)
            back_at, _ = tail.wait_for(rf"broker startup of \[{one['victim']}\]: .* acked", 600)
            say(
                f"  broker {one['victim']} back and told its roles after {back_at - restarted:.1f} s"
            )
            two = controller_failover(cluster, zk)
        finally:
            zk.stop()
            zk.close()
    report(per_topic * len(topics), args.session_timeout_ms, (created_s, acked_s), one, two)


def row(label: str, seconds: float, note: str = "") -> None:
    print(f"{label:<58}{seconds:8.2f} s  {note}".rstrip())


def report(
    n: int,
    session_ms: int,
    created: tuple[float, float],
    one: dict[str, Any],
    two: dict[str, Any],
) -> None:
    print(f"\nfailover at {n:,} partitions, RF 3, 3 brokers, session timeout {session_ms} ms")
    row("topic creation (CreateTopics until every partition led)", created[0])
    row("  ... until every LeaderAndIsr of it acked", created[1])
    print(f"broker {one['victim']} killed (SIGKILL), leader of {one['led']:,} partitions:")
    row("  kill -> its znode gone (session expiry)", one["session_expiry_s"])
    print("  from the znode gone:")
    if one["leaders_in_zk_s"] is not None:
        row(
            "    every partition it led has a new leader in ZooKeeper",
            one["leaders_in_zk_s"],
            f"(polled; one poll of {one['led']:,} state znodes takes {one['poll_s']:.2f} s)",
        )
    row("    every LeaderAndIsr acknowledged (controller log line)", one["acked_line_s"])
    if one["new_leaders_acked_s"] is not None:
        print(
            f"  the new leaders first, from the controller's watch event: their states written "
            f"{one['new_leaders_zk_writes_s']:.2f} s, their LeaderAndIsr acked "
            f"{one['new_leaders_acked_s']:.2f} s"
        )
    for broker, at, count, took in one["applied"]:
        print(
            f"    broker {broker} applied a LeaderAndIsr of {count:,} partitions at "
            f"{at:.2f} s (handling took {took:.3f} s)"
        )
    print(
        f"  the controller's own figures from its watch event: states written "
        f"{one['controller_zk_writes_s']:.2f} s, LeaderAndIsr acked "
        f"{one['controller_acked_s']:.2f} s ({one['reelected']:,} re-elected, "
        f"{one['states_written']:,} states written, {one['requests']} requests, "
        f"{one['failed']} failed)"
    )
    print(f"controller broker {two['old']} killed (SIGKILL); broker {two['new']} took over:")
    row("  kill -> /controller gone (session expiry)", two["session_expiry_s"])
    print("  from /controller gone:")
    row("    new controller elected (its log line)", two["elected_s"])
    row(
        f"    context loaded ({two['partitions_loaded']:,} partitions)",
        two["loaded_s"],
        f"(loading itself took {two['load_took_s']:.2f} s)",
    )
    row(
        "    failover done, every broker told (LeaderAndIsr acked)",
        two["told_s"],
        f"({two['failover_reelected']:,} re-elected, {two['failover_requests']} requests, "
        f"{two['failover_failed']} failed)",
    )
    if two["old_led_moved_s"] is not None:
        row(
            f"    old controller's {two['old_reelected']:,} partitions re-elected, acked",
            two["old_led_moved_s"],
        )


if __name__ == "__main__":
    main()
