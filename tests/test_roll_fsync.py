"""A segment is fsynced when the next one is rolled, before the next one takes data.

Found by the fault campaign's ``crash-leader`` (an OS crash: whatever was not fsynced may
be lost, file by file, in no promised order; ``chaos.unflushed``). The broker fsynced its
logs only once a minute, so a closed segment could lose its tail while the next segment,
written later, kept its batches. Recovery cuts a log at its first bad batch, and a tail
lost on a batch boundary leaves none: the broker came back with a hole in the middle of its
log (offsets missing below its log end), which leader epoch truncation does not see. Now
``Log.roll`` flushes every older segment before creating the new one, as Kafka flushes on
roll, so a crash can only cut the last segment.

The real-process test watches a broker's system calls with strace: the closed segment's
fsync must come before the first write to the next segment.
"""

from __future__ import annotations

import random
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from chaos import unflushed
from clients_util import Rec, create_topic, produce_confluent, segment_bases
from cluster_util import wait_for
from replog.cluster.launcher import LocalCluster
from replog.protocol.records import iter_batches, simple_batch
from replog.storage.checkpoints import RECOVERY_POINT_CHECKPOINT, OffsetCheckpointFile
from replog.storage.log import Log
from replog.storage.log_config import LogConfig

NOW = 1_700_000_000_000
_SYSCALL = re.compile(r"^\d+\s+(?P<call>fsync|fdatasync|pwrite64|write)\(\d+<(?P<path>[^>]*)>")


def _open(directory: Path, recovery_point: int = 0) -> Log:
    return Log.open(
        directory,
        LogConfig(segment_bytes=2000),
        recovery_point=recovery_point,
        log_start_offset=0,
        now_ms=NOW,
        clean_shutdown=False,
    )


def _offsets(log: Log) -> list[int]:
    out: list[int] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        batches = list(iter_batches(log.read(offset, 1 << 20).records))
        if not batches:
            break
        for _, header in batches:
            out.extend(range(header.base_offset, header.next_offset))
            offset = header.next_offset
    return out


def test_a_roll_moves_the_recovery_point_to_the_new_segment(tmp_path: Path) -> None:
    log = _open(tmp_path / "t-0")
    for n in range(40):
        values = [f"v{3 * n + i}".encode() for i in range(3)]
        log.append_as_leader(bytearray(simple_batch(values)), leader_epoch=0, now_ms=NOW)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 2, bases
    assert log.recovery_point == bases[-1]  # every segment before the active one fsynced
    log.close()


def test_an_os_crash_after_rolls_leaves_no_hole_in_the_log(tmp_path: Path) -> None:
    """The campaign's model of an OS crash, on a log that rolled after its last checkpoint:
    whatever it cuts, recovery gives a contiguous log holding every flushed offset."""
    source = tmp_path / "source"
    log = _open(source / "t-0")
    checkpointed = 0
    for n in range(60):
        values = [f"v{3 * n + i}".encode() for i in range(3)]
        log.append_as_leader(bytearray(simple_batch(values)), leader_epoch=0, now_ms=NOW)
        if n == 12:
            log.flush()
            checkpointed = log.recovery_point
    assert len(log.segments) >= 3
    log.close()
    OffsetCheckpointFile(source / RECOVERY_POINT_CHECKPOINT).write({("t", 0): checkpointed})
    for seed in range(60):
        copy = tmp_path / f"seed-{seed}"
        shutil.copytree(source, copy)
        rng = random.Random(seed)
        cuts = unflushed.plan([copy], rng)
        assert {c.segment for c in cuts} <= {max(s for s in segment_bases_of(copy))}
        unflushed.apply({c.partition: copy for c in cuts}, cuts, rng)
        durable = max(checkpointed, max(segment_bases_of(copy)))
        recovered = _open(copy / "t-0", checkpointed)
        offsets = _offsets(recovered)
        recovered.close()
        assert offsets == list(range(len(offsets))), f"seed {seed}: a hole in {offsets}"
        assert len(offsets) >= durable, f"seed {seed}: lost fsynced offsets ({cuts})"
        shutil.rmtree(copy)


def segment_bases_of(log_dir: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in (log_dir / "t-0").glob("*.log"))


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_roll_fsyncs_the_closed_segment_before_the_next_takes_data(cluster_factory) -> None:
    cluster: LocalCluster = cluster_factory(
        1, overrides={"log.flush.offset.checkpoint.interval.ms": "600000"}
    )
    bootstrap = cluster.bootstrap_servers()
    topic = "roll-fsync"
    create_topic(bootstrap, topic, 1, {"segment.bytes": "4096"})
    pid = cluster.broker_pid(0)
    assert pid is not None
    trace = cluster.broker_dir(0) / "strace.out"
    tracer = subprocess.Popen(
        ["strace", "-f", "-y", "-e", "trace=fsync,fdatasync,pwrite64,write", "-o", str(trace)]
        + ["-p", str(pid)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert tracer.stderr is not None
        attached = tracer.stderr.readline()  # "strace: Process N attached"
        assert "attached" in attached, attached
        records = [Rec(0, -1, None, b"%05d" % i + b"x" * 95, (), -1) for i in range(120)]
        for start in range(0, 120, 10):  # a batch at a time, so that the log rolls
            produce_confluent(bootstrap, topic, records[start : start + 10])
        bases = wait_for(
            lambda: (b := segment_bases(cluster.broker_dir(0), topic, 0))[1:] and b,
            30,
            "a roll",
        )
    finally:
        tracer.send_signal(signal.SIGINT)  # strace detaches and exits
        tracer.wait(30)
    # the segments the broker wrote, in the order of its system calls
    calls = [m.groupdict() for m in map(_SYSCALL.match, trace.read_text().splitlines()) if m]
    for closed, following in zip(bases, bases[1:], strict=False):
        closed_name, next_name = f"/{closed:020d}.log", f"/{following:020d}.log"
        first_write = next(
            i
            for i, c in enumerate(calls)
            if c["call"] in ("pwrite64", "write") and c["path"].endswith(next_name)
        )
        synced = [
            i
            for i, c in enumerate(calls[:first_write])
            if c["call"] in ("fsync", "fdatasync") and c["path"].endswith(closed_name)
        ]
        assert synced, f"segment {closed} not fsynced before segment {following} took data"
