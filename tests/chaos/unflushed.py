"""What an operating system crash takes from a stopped broker's log dirs: each
partition's data past its last fsync.

The broker says what it flushed in ``recovery-point-offset-checkpoint`` (Kafka's format,
one per log dir): every batch below a partition's recovery point was fsynced, with the
segments before the one holding it. The checkpoint is written once a minute; meanwhile the
broker also fsyncs every segment when it rolls the next (``Log.roll``), so the last segment
is the earliest one at risk even when the checkpoint is older (``durable_below``: the
larger of the two). From the segment holding that offset onward, anything may be gone.
``plan`` draws, for each such segment, the length its ``.log`` file keeps: anywhere from the
durable offset's byte position (0 for a later segment) to the whole file, so that a cut
inside a batch (a torn batch, which the broker's CRC checks must drop) is the common case; a
quarter of the cuts land on a batch boundary instead. Segments are cut independently, as the
page cache writes files back in no promised order. The indexes of a cut segment are left,
cut short, garbled or deleted. ``apply`` carries a plan out. ``rolled_durable=False`` takes
the checkpoint alone, which is how the campaign found that a roll did not fsync: a closed
segment then lost its tail while the next one kept its batches, a hole recovery kept.

Batches are located with replog's own header reader (read-only); nothing else of the
broker runs. ``plan`` is pure given the files and the ``random.Random`` (seeded by the
campaign), so a seed gives the same cuts for the same files.

Concurrency: the campaign's thread, on the log dirs of a broker that is not running.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

from replog.protocol.records import HEADER_SIZE, InvalidRecordBatch, read_header
from replog.storage.checkpoints import RECOVERY_POINT_CHECKPOINT, OffsetCheckpointFile
from replog.storage.log_loader import parse_topic_partition
from replog.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX

INDEX_FATES = ("kept", "cut", "garbled", "deleted")


@dataclass(frozen=True)
class Cut:
    """One segment's ``.log`` cut from ``size`` to ``keep`` bytes."""

    partition: str  # "chaos-0"
    segment: int  # base offset
    recovery_point: int  # as checkpointed
    durable_below: int  # the recovery point, or the last segment's base if later
    size: int
    keep: int
    torn: bool  # ``keep`` falls inside a batch
    first_lost: int  # base offset of the first batch not kept whole
    index: str  # one of INDEX_FATES

    @property
    def lost_bytes(self) -> int:
        return self.size - self.keep


def batch_bounds(path: Path) -> list[tuple[int, int, int, int]]:
    """``(start, end, base offset, next offset)`` of each whole batch of a ``.log`` file,
    up to the first one the file does not hold whole."""
    data = path.read_bytes()
    out = []
    pos = 0
    while pos + HEADER_SIZE <= len(data):
        try:
            header = read_header(data, pos)
        except InvalidRecordBatch:
            break
        if header.size <= 0 or pos + header.size > len(data):
            break
        out.append((pos, pos + header.size, header.base_offset, header.next_offset))
        pos += header.size
    return out


def recovery_points(log_dir: Path) -> dict[str, int]:
    """``"topic-partition"`` -> recovery point, from the log dir's checkpoint (0 if absent)."""
    points = OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).read()
    return {f"{topic}-{partition}": offset for (topic, partition), offset in points.items()}


def plan(log_dirs: list[Path], rng: random.Random, rolled_durable: bool = True) -> list[Cut]:
    """The cuts an OS crash could make in these (stopped) log dirs, drawn from ``rng``."""
    cuts = []
    for log_dir in log_dirs:
        points = recovery_points(log_dir)
        for directory in sorted(p for p in log_dir.iterdir() if p.is_dir()):
            try:
                parse_topic_partition(directory.name)
            except ValueError:
                continue
            point = points.get(directory.name, 0)
            cuts.extend(_plan_partition(directory, point, rng, rolled_durable))
    return cuts


def _plan_partition(
    directory: Path, recovery_point: int, rng: random.Random, rolled_durable: bool
) -> list[Cut]:
    bases = sorted(int(p.name[:20]) for p in directory.glob(f"*{LOG_SUFFIX}"))
    if not bases:
        return []
    durable_below = max(recovery_point, bases[-1]) if rolled_durable else recovery_point
    holding = max((b for b in bases if b <= durable_below), default=bases[0])
    cuts = []
    for base in (b for b in bases if b >= holding):
        path = directory / f"{base:020d}{LOG_SUFFIX}"
        size = path.stat().st_size
        bounds = batch_bounds(path)
        floor = 0
        if base == holding:  # every batch below ``durable_below`` was fsynced
            floor = max((end for _, end, _, nxt in bounds if nxt <= durable_below), default=0)
        if size <= floor:
            continue
        starts = [start for start, _, _, _ in bounds if start >= floor]
        if starts and rng.random() < 0.25:
            keep = rng.choice(starts)  # a clean cut, between two batches
        else:
            keep = rng.randint(floor, size)
        if keep == size:
            continue  # this segment lost nothing
        first_lost = next((b for _, end, b, _ in bounds if end > keep), None)
        cuts.append(
            Cut(
                partition=directory.name,
                segment=base,
                recovery_point=recovery_point,
                durable_below=durable_below,
                size=size,
                keep=keep,
                torn=keep not in starts,
                first_lost=first_lost if first_lost is not None else -1,
                index=rng.choice(INDEX_FATES),
            )
        )
    return cuts


def apply(log_dir_of: dict[str, Path], cuts: list[Cut], rng: random.Random) -> None:
    """Carry the cuts out: each ``.log`` truncated, its indexes dealt ``Cut.index``.
    ``log_dir_of`` maps a partition directory's name to its log dir."""
    for cut in cuts:
        directory = log_dir_of[cut.partition] / cut.partition
        stem = f"{cut.segment:020d}"
        os.truncate(directory / f"{stem}{LOG_SUFFIX}", cut.keep)
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            index = directory / f"{stem}{suffix}"
            if not index.exists() or cut.index == "kept":
                continue
            size = index.stat().st_size
            if cut.index == "deleted":
                index.unlink()
            elif cut.index == "cut":
                os.truncate(index, rng.randint(0, size))
            elif size:
                with open(index, "r+b") as f:
                    for _ in range(1 + size // 64):
                        f.seek(rng.randrange(size))
                        f.write(bytes([rng.randrange(256)]))


def describe(cuts: list[Cut]) -> str:
    """One line: how much was cut, where, and how many batches were left torn."""
    if not cuts:
        return "nothing past the recovery points to lose"
    torn = sum(c.torn for c in cuts)
    lost = sum(c.lost_bytes for c in cuts)
    parts = ", ".join(
        f"{c.partition}@{c.segment}: {c.size}->{c.keep} B (rp {c.recovery_point}"
        + (f", durable below {c.durable_below}" if c.durable_below != c.recovery_point else "")
        + (f", from offset {c.first_lost}" if c.first_lost >= 0 else "")
        + (", torn" if c.torn else "")
        + (f", index {c.index}" if c.index != "kept" else "")
        + ")"
        for c in cuts[:8]
    )
    more = f" and {len(cuts) - 8} more" if len(cuts) > 8 else ""
    return f"{len(cuts)} segment(s) cut, {lost} bytes lost, {torn} torn: {parts}{more}"
