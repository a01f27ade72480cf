"""The high watermark checkpoint (Kafka ``replication-offset-checkpoint``): one file per
log dir, written from the partitions' high watermarks, read once per log dir when a
replica is first made after a restart.

Concurrency: event-loop only (the broker's checkpoint timer and LeaderAndIsr handling).
"""

from __future__ import annotations

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

    def restored(self, topic: str, partition: int, log_dir: Path) -> int:
        """The checkpointed high watermark of a replica in ``log_dir`` (0 if none)."""
        if log_dir not in self._read:
            self._read[log_dir] = OffsetCheckpointFile(log_dir / HW_CHECKPOINT).read()
        return self._read[log_dir].get((topic, partition), 0)

    def write(self, partitions: Iterable[Partition]) -> None:
        """Checkpoint every live log dir; a failed write takes its log dir offline."""
        by_dir: dict[Path, dict[tuple[str, int], int]] = {}
        for part in partitions:
            by_dir.setdefault(part.log_dir, {})[(part.topic, part.partition)] = part.high_watermark
        for log_dir in self._log_manager.live_log_dirs:
            try:
                OffsetCheckpointFile(log_dir / HW_CHECKPOINT).write(by_dir.get(log_dir, {}))
            except OSError as exc:
                self._log_manager.fail_log_dir(log_dir, f"writing {HW_CHECKPOINT}", exc)
