"""Offset arithmetic for the ``replog`` source: resolving specs, rate limits, input partitions.

All functions are pure (no I/O, no clock): the caller fetches earliest/latest offsets from
the broker and passes them in. Data loss is *reported* (a list of one-line messages) rather
than raised, so the caller applies ``failOnDataLoss`` in one place.

A ``PartitionOffsets`` maps ``(topic, partition)`` to an offset: for start positions the
next offset to read, for end positions one past the last offset to read (exclusive), as
in Kafka's ``log_end_offset`` / ``high_watermark``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from replog.spark.options import EARLIEST, LATEST, OffsetKind, OffsetSpec, OptionError

TopicPartition = tuple[str, int]
PartitionOffsets = dict[TopicPartition, int]


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Records ``from_offset <= offset < until_offset`` of one topic-partition."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Spark Kafka's offset JSON shape: ``{"topic": {"0": 23}}`` (sorted, stable)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json(data: Mapping[str, Mapping[str, int]]) -> PartitionOffsets:
    """Inverse of :func:`to_json`."""
    return {(t, int(p)): int(o) for t, parts in data.items() for p, o in parts.items()}


def resolve(
    spec: OffsetSpec,
    option: str,
    partitions: Iterable[TopicPartition],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    committed: Mapping[TopicPartition, int] | None = None,
) -> PartitionOffsets:
    """Concrete offsets for ``partitions`` from an option's spec; -2/-1 become earliest/latest.

    Specific JSON must name exactly the partitions being read, as in Spark's Kafka source.
    ``committed`` (a group's committed offsets) starts each partition there, clamped to
    the log, and partitions the group never committed at their earliest offset.
    """
    wanted = sorted(set(partitions))
    if spec.kind is OffsetKind.EARLIEST:
        return {tp: earliest[tp] for tp in wanted}
    if spec.kind is OffsetKind.COMMITTED:
        given = committed or {}
        return {
            tp: min(max(given.get(tp, earliest[tp]), earliest[tp]), latest[tp]) for tp in wanted
        }
    if spec.kind is OffsetKind.LATEST:
        return {tp: latest[tp] for tp in wanted}
    given = set(spec.offsets)
    missing = [tp for tp in wanted if tp not in given]
    unknown = sorted(given - set(wanted))
    if unknown:
        raise OptionError(
            f"option '{option}' names partitions that are not read: {_names(unknown)}"
        )
    if missing:
        raise OptionError(
            f"option '{option}' must give an offset for every partition read; missing "
            f"{_names(missing)}"
        )
    out: PartitionOffsets = {}
    for tp in wanted:
        offset = spec.offsets[tp]
        out[tp] = earliest[tp] if offset == EARLIEST else latest[tp] if offset == LATEST else offset
    return out


def _names(tps: Iterable[TopicPartition]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in tps)


def plan_ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    earliest_of_new: Mapping[TopicPartition, int],
) -> tuple[list[OffsetRange], list[str]]:
    """Ranges to read between two offset maps, plus data-loss messages.

    A partition in ``end`` but not ``start`` appeared meanwhile and is read from its earliest
    offset (loss if that is not 0). One in ``start`` but not ``end`` vanished (loss); one
    whose end is below its start went backwards, e.g. its topic was recreated (loss).
    """
    ranges: list[OffsetRange] = []
    losses: list[str] = []
    for tp in sorted(set(start) - set(end)):
        losses.append(f"partition {tp[0]}-{tp[1]} is gone; records after {start[tp]} were lost")
    for tp in sorted(end):
        until = end[tp]
        if tp in start:
            begin = start[tp]
        else:
            begin = earliest_of_new.get(tp, 0)
            if begin != 0:
                losses.append(
                    f"new partition {tp[0]}-{tp[1]} starts at offset {begin}, not 0; "
                    "records before it were lost"
                )
        if until < begin:
            losses.append(
                f"partition {tp[0]}-{tp[1]} went back from offset {begin} to {until}; "
                "was the topic recreated?"
            )
            continue
        if until > begin:
            ranges.append(OffsetRange(tp[0], tp[1], begin, until))
    return ranges, losses


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """One range per partition, cut into more pieces when ``minPartitions`` asks for more.

    Like Spark's ``KafkaOffsetRangeCalculator``: ranges are cut in proportion to their size so
    that about ``min_partitions`` pieces result; small ranges stay whole.
    """
    if not min_partitions or len(ranges) >= min_partitions:
        return list(ranges)
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        pieces = max(1, min(r.size, round(r.size * min_partitions / total)))
        step, extra = divmod(r.size, pieces)
        begin = r.from_offset
        for i in range(pieces):
            until = begin + step + (1 if i < extra else 0)
            out.append(OffsetRange(r.topic, r.partition, begin, until))
            begin = until
        assert begin == r.until_offset, "split must cover the range exactly"
    return out


def limit_offsets(
    start: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    max_offsets: int,
) -> PartitionOffsets:
    """End offsets admitting at most ``max_offsets`` records, shared in proportion to backlog.

    Exactly ``min(max_offsets, backlog)`` records are admitted: each partition gets the floor
    of its share, and the remainder goes to the largest fractional shares (ties by name).
    Partitions not in ``start`` are taken to start at 0.
    """
    backlog = {tp: max(0, latest[tp] - start.get(tp, 0)) for tp in latest}
    total = sum(backlog.values())
    if total <= max_offsets:
        return dict(latest)
    shares = {tp: size * max_offsets / total for tp, size in backlog.items()}
    admitted = {tp: int(share) for tp, share in shares.items()}
    remainder = max_offsets - sum(admitted.values())
    by_fraction = sorted(shares, key=lambda tp: (-(shares[tp] - admitted[tp]), tp))
    for tp in by_fraction[:remainder]:
        admitted[tp] += 1
    return {tp: start.get(tp, 0) + admitted[tp] if backlog[tp] else latest[tp] for tp in latest}


def cap_offsets(
    offsets: Mapping[TopicPartition, int], cap: Mapping[TopicPartition, int]
) -> PartitionOffsets:
    """``offsets`` no further than ``cap``; partitions ``cap`` does not know are left out.

    Used for ``Trigger.AvailableNow``: ``cap`` is the latest offsets when the query began.
    """
    return {tp: min(off, cap[tp]) for tp, off in offsets.items() if tp in cap}
