"""What replication costs an idle cluster at many partitions (one run, prints figures).

    .venv/bin/python bench/fetch_sessions.py [--partitions 10000] [--topics 10]
                                             [--seconds 30] [--settle 20] [--keep]
                                             [--profile DIR]

3 brokers, ``--partitions`` partitions with RF 3 over ``--topics`` topics. Once every
partition's ISR is full, the bench waits ``--settle`` seconds and then reads each
broker's CPU time (``/proc/<pid>/stat``, user + system) over ``--seconds`` with no
client: what the brokers spend is their followers fetching and the leaders answering
(each fetcher carries about a third of the partitions, every ``replica.fetch.wait.max.ms``
when nothing is produced), plus timers. With ``--profile``, py-spy then records each
broker for 10 s (after the measurement, which it would disturb): raw collapsed stacks
in ``DIR/profile-broker-<id>.txt``.

Written for KIP-227 (incremental fetch sessions): to compare with the code before it,
run this same script with ``PYTHONPATH`` set to an older tree's ``src`` (``git archive
<commit> src | tar -x -C DIR``); the brokers inherit it. The figures are this machine's,
one run each; nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from common import create_partitions, record_profiles, replog_cluster, say, work_dir

import replog

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14, 15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--settle", type=float, default=20)
    parser.add_argument("--keep", action="store_true", help="keep bench/out/fetch-sessions-*")
    parser.add_argument("--profile", type=Path, metavar="DIR", help="py-spy each broker after")
    args = parser.parse_args()
    print(
        f"command: bench/fetch_sessions.py --partitions {args.partitions} --topics "
        f"{args.topics} --seconds {args.seconds:g} --settle {args.settle:g}"
    )
    print(f"replog from {Path(replog.__file__).parent}")
    per_topic = args.partitions // args.topics
    topics = [f"idle-{i:02d}" for i in range(args.topics)]
    with work_dir("fetch-sessions", keep=args.keep) as out, replog_cluster(out, 3) as cluster:
        say(f"creating {per_topic * len(topics):,} partitions (RF 3) ...")
        started = time.monotonic()
        create_partitions(cluster.bootstrap_servers(), topics, per_topic)
        cluster.wait_full_isr(1800)
        say(f"  every ISR full after {time.monotonic() - started:.1f} s; settling ...")
        time.sleep(args.settle)
        pids = {b: cluster.broker_pid(b) for b in cluster.broker_ids}
        assert all(pids.values())
        before = {b: cpu_seconds(pid) for b, pid in pids.items()}
        t0 = time.monotonic()
        time.sleep(args.seconds)
        elapsed = time.monotonic() - t0
        after = {b: cpu_seconds(pid) for b, pid in pids.items()}
        still_full = not cluster.under_replicated()
        if args.profile is not None:
            for proc in record_profiles(pids, args.profile, 10, 100):
                proc.wait(timeout=70)
    print(
        f"\nidle cluster, {per_topic * len(topics):,} partitions, RF 3, 3 brokers, "
        f"{elapsed:.1f} s measured"
    )
    total = 0.0
    for b in sorted(pids):
        used = after[b] - before[b]
        total += used
        print(f"  broker {b}: {used:6.2f} CPU s  ({100 * used / elapsed:5.1f} % of a core)")
    print(f"  all brokers: {total:6.2f} CPU s  ({100 * total / elapsed:5.1f} % of a core)")
    print(f"  every ISR still full at the end: {still_full}")


if __name__ == "__main__":
    main()
