"""The high watermark checkpoint (``replog.replication.hw_checkpoint``): the periodic write
runs in a worker thread from a snapshot taken on the loop, an older snapshot never
replaces a newer one, and a failed write takes its log dir offline."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from replog.replication.hw_checkpoint import HW_CHECKPOINT, HighWatermarkCheckpoints
from replog.storage.checkpoints import OffsetCheckpointFile


@dataclass
class Replica:
    """What the checkpoint reads of a ``Partition``."""

    topic: str
    partition: int
    log_dir: Path
    high_watermark: int


class LogDirs:
    """What the checkpoint asks of the ``LogManager``: its live dirs, and to fail one."""

    def __init__(self, dirs: list[Path]) -> None:
        self.live_log_dirs = list(dirs)
        self.failed: list[Path] = []

    def fail_log_dir(self, log_dir: Path, what: str, exc: OSError) -> None:
        self.failed.append(log_dir)
        self.live_log_dirs.remove(log_dir)


def test_the_periodic_write_is_off_the_loop_and_reads_back(tmp_path: Path) -> None:
    dirs = LogDirs([tmp_path])
    checkpoints = HighWatermarkCheckpoints(dirs)  # type: ignore[arg-type]
    replicas = [Replica("t", 0, tmp_path, 5), Replica("t", 1, tmp_path, 7)]
    asyncio.run(checkpoints.write_off_loop(replicas))
    assert OffsetCheckpointFile(tmp_path / HW_CHECKPOINT).read() == {("t", 0): 5, ("t", 1): 7}
    assert HighWatermarkCheckpoints(dirs).restored("t", 1, tmp_path) == 7  # type: ignore[arg-type]


def test_an_older_snapshot_does_not_replace_a_newer_one(tmp_path: Path) -> None:
    dirs = LogDirs([tmp_path])
    checkpoints = HighWatermarkCheckpoints(dirs)  # type: ignore[arg-type]
    replica = Replica("t", 0, tmp_path, 5)
    older = checkpoints._snapshot([replica])
    replica.high_watermark = 9
    checkpoints.write([replica])  # the shutdown's write, while the older one was pending
    assert checkpoints._write_files(*older) == []
    assert OffsetCheckpointFile(tmp_path / HW_CHECKPOINT).read() == {("t", 0): 9}


def test_a_failed_write_takes_its_log_dir_offline(tmp_path: Path) -> None:
    good, gone = tmp_path / "good", tmp_path / "gone"
    good.mkdir()
    dirs = LogDirs([good, gone])  # gone does not exist: its write fails
    checkpoints = HighWatermarkCheckpoints(dirs)  # type: ignore[arg-type]
    asyncio.run(checkpoints.write_off_loop([Replica("a", 0, good, 3), Replica("b", 0, gone, 4)]))
    assert dirs.failed == [gone]
    assert OffsetCheckpointFile(good / HW_CHECKPOINT).read() == {("a", 0): 3}
