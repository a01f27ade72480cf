"""The broker's delayed operations: Kafka's ``DelayedProduce``, ``DelayedFetch`` and
``DelayedDeleteRecords``, and the group coordinator's wait for its partition's high
watermark. Each asks its partitions (whose machines own the rules) whether it is
done; the partitions try it when what it reads moves (see ``delayed``).

Concurrency: event-loop only; ``ready`` never awaits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from kio.schema.errors import ErrorCode

from replog.replication.core import AcksAllStatus
from replog.replication.delayed import DelayedOperation
from replog.replication.fetch_rules import READ_UNCOMMITTED
from replog.replication.partition import Partition

TopicPartition = tuple[str, int]
_R = TypeVar("_R")
PartitionLookup = Callable[[str, int], Partition | None]
"""The replica manager's ``get_partition``: the replica hosted now (a stopped one is gone)."""


@dataclass(slots=True)
class ProduceResult:
    error: ErrorCode
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    required_offset: int = -1  # HW that acks=all waits for
    leader_epoch: int = -1  # the leader epoch the append was made at


@dataclass(slots=True)
class DeleteRecordsResult:
    """One partition of a DeleteRecords: pending until the low watermark reaches
    ``requested_offset`` (a success not yet answered), then settled."""

    error: ErrorCode
    low_watermark: int = -1
    requested_offset: int = -1
    leader_epoch: int = -1  # the leader epoch the log start moved at
    pending: bool = False

    def __post_init__(self) -> None:
        self.pending = self.error is ErrorCode.none and self.low_watermark < self.requested_offset

    def settle(self, error: ErrorCode, low_watermark: int) -> None:
        self.error, self.low_watermark, self.pending = error, low_watermark, False


class DelayedProduce(DelayedOperation):
    """Kafka ``DelayedProduce``: acks=all appends wait until every ISR member has them
    (``PartitionMachine.acks_all_status``: the HW passed them, the ISR fell below
    min.insync.replicas, or the leadership they were appended in ended). Settles
    ``results`` in place; what is still pending at the timeout is REQUEST_TIMED_OUT."""

    __slots__ = ("_lookup", "_pending")

    def __init__(self, lookup: PartitionLookup, results: dict[TopicPartition, ProduceResult]):
        super().__init__()
        self._lookup = lookup
        self._pending = {
            tp: r
            for tp, r in results.items()
            if r.error == ErrorCode.none and r.required_offset >= 0
        }

    def partitions(self) -> list[Partition]:
        return [p for tp in self._pending if (p := self._lookup(*tp)) is not None]

    def ready(self, changed: Partition | None) -> bool:
        for tp, result in _to_check(self._pending, changed):
            part = self._lookup(*tp)
            status = (
                AcksAllStatus.NOT_LEADER_OR_FOLLOWER
                if part is None
                else part.acks_all_status(result.required_offset, result.leader_epoch)
            )
            if status is not AcksAllStatus.PENDING:
                result.error = status.error or ErrorCode.none
                result.required_offset = -1
                del self._pending[tp]
        return not self._pending

    def on_expiration(self) -> None:
        for result in self._pending.values():
            result.error = ErrorCode.request_timed_out


class DelayedDeleteRecords(DelayedOperation):
    """Kafka ``DelayedDeleteRecords``: wait until every live replica's log start offset
    (the low watermark) reaches each requested offset, or the leadership ends; at the
    timeout, REQUEST_TIMED_OUT with the low watermark known when the request arrived.
    Settles ``results`` in place."""

    __slots__ = ("_is_live", "_lookup", "_pending")

    def __init__(
        self,
        lookup: PartitionLookup,
        results: dict[TopicPartition, DeleteRecordsResult],
        is_live: Callable[[int], bool],
    ) -> None:
        super().__init__()
        self._lookup = lookup
        self._pending = {tp: r for tp, r in results.items() if r.pending}
        self._is_live = is_live

    def partitions(self) -> list[Partition]:
        return [p for tp in self._pending if (p := self._lookup(*tp)) is not None]

    def ready(self, changed: Partition | None) -> bool:
        for tp, result in _to_check(self._pending, changed):
            part = self._lookup(*tp)
            if part is None:
                result.settle(ErrorCode.not_leader_or_follower, -1)
            else:
                status = part.delete_records_status(
                    result.requested_offset, result.leader_epoch, self._is_live
                )
                if not status.done:
                    continue
                result.settle(status.error, status.low_watermark)
            del self._pending[tp]
        return not self._pending

    def on_expiration(self) -> None:
        for result in self._pending.values():
            result.settle(ErrorCode.request_timed_out, result.low_watermark)


class DelayedFetch(DelayedOperation):
    """Kafka ``DelayedFetch``: a long-poll fetch waits until one of its partitions has
    something to read (``PartitionMachine.fetch_ready``) or stops being led here; the
    replica manager then reads them all once more. Partitions the leader throttles
    are not watched (Kafka counts no throttled bytes).

    ``changed`` collects the watched partitions that moved since the wait began (until
    the waiting task resumes): the others answer as they did at the first read, so the
    replica manager reads only these again."""

    __slots__ = ("_isolation_level", "_replica_id", "_watched", "changed")

    def __init__(
        self,
        replica_id: int,
        watched: list[tuple[Partition, int]],
        isolation_level: int = READ_UNCOMMITTED,
    ) -> None:
        super().__init__()
        self._replica_id = replica_id
        self._watched = dict(watched)  # partition -> the fetch offset it waits beyond
        self._isolation_level = isolation_level  # read_committed waits for the LSO
        self.changed: set[Partition] = set()

    def partitions(self) -> list[Partition]:
        return list(self._watched)

    def try_complete(self, changed: Partition | None = None) -> bool:
        # Noted even once done: a move between the completion and the waiting task's
        # turn must reach the answer too (each watch list tries a done operation once,
        # then drops it).
        if changed is not None:
            self.changed.add(changed)
        return super().try_complete(changed)

    def ready(self, changed: Partition | None) -> bool:
        replica_id = self._replica_id
        if changed is not None:
            offset = self._watched.get(changed)
            return offset is not None and changed.fetch_ready(
                replica_id, offset, self._isolation_level
            )
        return any(
            p.fetch_ready(replica_id, offset, self._isolation_level)
            for p, offset in self._watched.items()
        )


class DelayedHighWatermark(DelayedOperation):
    """The group coordinator's load: wait until the partition's high watermark reaches
    ``target`` (everything a former leader acknowledged is in the ISR), or it stops
    leading."""

    __slots__ = ("_partition", "_target")

    def __init__(self, partition: Partition, target: int) -> None:
        super().__init__()
        self._partition = partition
        self._target = target

    def ready(self, changed: Partition | None) -> bool:
        p = self._partition
        return p.high_watermark >= self._target or not p.is_leader


def _to_check(
    pending: dict[TopicPartition, _R], changed: Partition | None
) -> list[tuple[TopicPartition, _R]]:
    """The pending entries to ask again: all of them, or the one of ``changed``."""
    if changed is None:
        return list(pending.items())
    tp = (changed.topic, changed.partition)
    result = pending.get(tp)
    return [] if result is None else [(tp, result)]
