"""Kafka's text checkpoint files, written atomically.

Format (Kafka ``CheckpointFile``)::

    0              <- version
    <count>
    <entry>        <- count lines, fields separated by one space

Writes go to ``<name>.tmp``, are fsynced, renamed over the target and the
directory is fsynced, so a reader sees either the old or the new file, never a
torn one. ``OffsetCheckpointFile`` serves ``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``, ``replication-offset-checkpoint`` and
``cleaner-offset-checkpoint`` (entries ``<topic> <partition> <offset>``).

Concurrency: a checkpoint object has no state besides its path; concurrent
writers to one path must be serialised by the caller.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

CHECKPOINT_VERSION = 0
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"  # first dirty offset of each log


class CheckpointError(ValueError):
    """A checkpoint file that cannot be parsed."""


def fsync_dir(path: Path) -> None:
    """fsync a directory so a rename or unlink inside it is durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data``: write tmp, fsync, rename, fsync the directory.

    ``durable=False`` skips both fsyncs, for files that validate themselves on read.
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


def read_checkpoint_lines(path: Path) -> list[list[str]] | None:
    """The entry lines of a checkpoint file, split on spaces; None if the file is absent."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise CheckpointError(f"{path}: truncated checkpoint header")
    try:
        version = int(lines[0])
        count = int(lines[1])
    except ValueError:
        raise CheckpointError(f"{path}: malformed checkpoint header") from None
    if version != CHECKPOINT_VERSION:
        raise CheckpointError(f"{path}: unrecognised checkpoint version {version}")
    entries = lines[2:]
    if len(entries) != count:
        raise CheckpointError(f"{path}: expected {count} entries, found {len(entries)}")
    return [line.split(" ") for line in entries]


def write_checkpoint_lines(path: Path, entries: Iterable[str], *, durable: bool = True) -> None:
    body = list(entries)
    text = f"{CHECKPOINT_VERSION}\n{len(body)}\n" + "".join(f"{e}\n" for e in body)
    atomic_write(path, text.encode("utf-8"), durable=durable)


class OffsetCheckpointFile:
    """``(topic, partition) -> offset`` checkpoint in Kafka's text format."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def read(self) -> dict[tuple[str, int], int]:
        """Entries of the file; empty if it does not exist. Raises CheckpointError if malformed."""
        lines = read_checkpoint_lines(self.path)
        out: dict[tuple[str, int], int] = {}
        for fields in lines or ():
            if len(fields) != 3:
                raise CheckpointError(f"{self.path}: malformed line {' '.join(fields)!r}")
            try:
                out[(fields[0], int(fields[1]))] = int(fields[2])
            except ValueError:
                raise CheckpointError(f"{self.path}: malformed line {' '.join(fields)!r}") from None
        return out

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Atomically replace the file with ``offsets`` (sorted for stable output)."""
        write_checkpoint_lines(self.path, (f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())))
