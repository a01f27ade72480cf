"""The high watermark checkpoint (Kafka ``replication-offset-checkpoint``): one file per
log dir, written from the partitions' high watermarks, read once per log dir when a
replica is first made after a restart.

The broker's periodic checkpoint (every ``replica.high.watermark.checkpoint.interval.ms``)
takes the high watermarks on the event loop and writes the files (two fsyncs each) in a
worker thread (``write_off_loop``): an fsync on a busy disk can take tens of
milliseconds, which would stall every request. The write at shutdown stays synchronous.

Concurrency: snapshots and log dir failures on the event loop; file writes under
``_lock``, from the loop or a worker thread, and a snapshot older than one already
written is not written.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable
from pathlib import Path

from replog.replication.partition import Partition
from replog.storage.checkpoints import OffsetCheckpointFile
from replog.storage.log_manager import LogManager

HW_CHECKPOINT = "replication-offset-checkpoint"


class HighWatermarkCheckpoints:
    def __init__(self, log_manager: LogManager) -> None:
        self._log_manager = log_manager
        self._read: dict[Path, dict[tuple[str, int], int]] = {}
        self._lock = threading.Lock()
        self._taken = 0  # snapshots taken
        self._written = 0  # the newest snapshot written

    def restored(self, topic: str, partition: int, log_dir: Path) -> int:
        """The checkpointed high watermark of a replica in ``log_dir`` (0 if none)."""
        if log_dir not in self._read:
            self._read[log_dir] = OffsetCheckpointFile(log_dir / HW_CHECKPOINT).read()
        return self._read[log_dir].get((topic, partition), 0)

    def write(self, partitions: Iterable[Partition]) -> None:
        """Checkpoint every live log dir now; a failed write takes its log dir offline."""
        self._fail(self._write_files(*self._snapshot(partitions)))

    async def write_off_loop(self, partitions: Iterable[Partition]) -> None:
        """``write``, with the files written in a worker thread."""
        number, by_dir = self._snapshot(partitions)
        self._fail(await asyncio.to_thread(self._write_files, number, by_dir))

    def _snapshot(
        self, partitions: Iterable[Partition]
    ) -> tuple[int, dict[Path, dict[tuple[str, int], int]]]:
        by_dir: dict[Path, dict[tuple[str, int], int]] = {}
        for part in partitions:
            by_dir.setdefault(part.log_dir, {})[(part.topic, part.partition)] = part.high_watermark
        self._taken += 1
        return self._taken, {d: by_dir.get(d, {}) for d in self._log_manager.live_log_dirs}

    def _write_files(
        self, number: int, by_dir: dict[Path, dict[tuple[str, int], int]]
    ) -> list[tuple[Path, OSError]]:
        """File IO only (any thread): the log dirs whose write failed."""
        failed: list[tuple[Path, OSError]] = []
        with self._lock:
            if number <= self._written:
                return failed  # a newer snapshot is on disk already
            for log_dir, offsets in by_dir.items():
                try:
                    OffsetCheckpointFile(log_dir / HW_CHECKPOINT).write(offsets)
                except OSError as exc:
                    failed.append((log_dir, exc))
            self._written = number
        return failed

    def _fail(self, failed: list[tuple[Path, OSError]]) -> None:
        for log_dir, exc in failed:
            self._log_manager.fail_log_dir(log_dir, f"writing {HW_CHECKPOINT}", exc)
