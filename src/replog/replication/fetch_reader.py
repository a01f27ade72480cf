"""The fetch path of a broker's replicas (Kafka ``ReplicaManager.fetchMessages`` and
``readFromLocalLog``): each partition of a Fetch read once and, short of ``min_bytes``,
a ``DelayedFetch`` until one of them has data, then all read again.

A partition's machine decides what may be read (fencing, KIP-595, the leader's
throttle, the bounds: ``Partition.fetch``); this reads it, spends the request's byte
budget, counts a follower's bytes against the leader's replication quota, and hands a
failed disk to the replica manager (KAFKA_STORAGE_ERROR for its whole log dir).

Concurrency: event-loop only. Every read runs to its end without awaiting; only a long
poll's wait awaits, and the partitions are read again when it ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from replog.common.clock import now_ms
from replog.replication.delayed_operations import DelayedFetch, PartitionLookup
from replog.replication.fetch_rules import READ_COMMITTED, READ_UNCOMMITTED, FetchPartitionRequest
from replog.replication.machine import Action
from replog.replication.partition import Partition
from replog.replication.quota import ReplicationQuota
from replog.replication.truncation import EpochEndOffset
from replog.storage.txn_index import AbortedTxn
from replog.zk.fencing import UNKNOWN_BROKER_EPOCH

__all__ = ["FetchReader", "FetchResult", "FetchWait"]


@dataclass(slots=True)
class FetchWait:
    """How long a fetch waited for data (the request metrics' remote time)."""

    waited_s: float = 0.0


@dataclass(slots=True)
class FetchResult:
    error: ErrorCode
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    last_stable_offset: int = -1
    diverging_epoch: EpochEndOffset | None = None
    throttled: bool = False  # a follower's fetch the leader answered empty (its quota)
    aborted_transactions: list[AbortedTxn] | None = None  # read_committed consumers only


class FetchReader:
    """The replica manager's reads for Fetch requests, from consumers and followers.

    Concurrency: event-loop only, as the replica manager it reads for."""

    def __init__(
        self,
        get_partition: PartitionLookup,
        missing: Callable[[str, int], ErrorCode],
        is_live_broker: Callable[[int], bool],
        carry_out: Callable[[Partition, Sequence[Action]], None],
        storage_failed: Callable[[Partition, str, OSError], None],
    ) -> None:
        self._get_partition = get_partition
        self._missing = missing  # the error for a partition not hosted here
        self._is_live_broker = is_live_broker
        self._carry_out = carry_out  # a partition's leftover actions (ISR changes)
        self._storage_failed = storage_failed

    def read_partition(
        self,
        replica_id: int,
        request: FetchPartitionRequest,
        budget: int,
        now: int,
        isolation_level: int = READ_UNCOMMITTED,
        leader_quota: ReplicationQuota | None = None,
        broker_epoch: int = UNKNOWN_BROKER_EPOCH,
    ) -> FetchResult:
        """One partition of a fetch: the partition's machine decides (fencing, KIP-595,
        the leader's throttle, the bounds), the partition reads."""
        part = self._get_partition(request.topic, request.partition)
        if part is None:
            return FetchResult(self._missing(request.topic, request.partition))
        is_follower = replica_id >= 0
        decision, rest = part.fetch(
            replica_id,
            request,
            now,
            isolation_level=isolation_level,
            broker_epoch=broker_epoch,
            isr_eligible=is_follower and self._is_live_broker(replica_id),
            # No replica can be over the leader's quota while it is unlimited (the usual
            # case): then the per-partition check is skipped.
            replication_throttled=(
                is_follower
                and leader_quota is not None
                and not leader_quota.unthrottled
                and part.throttled_as_leader()
                and leader_quota.is_quota_exceeded(time.monotonic())
            ),
        )
        if rest:
            self._carry_out(part, rest)
        if decision.error is not ErrorCode.none:
            if decision.error is ErrorCode.offset_out_of_range:
                return FetchResult(
                    decision.error,
                    high_watermark=decision.high_watermark,
                    log_start_offset=decision.log_start_offset,
                    last_stable_offset=decision.last_stable_offset,
                )
            return FetchResult(decision.error)
        try:
            records = part.read(decision, min(request.max_bytes, budget) if budget > 0 else 0)
        except OSError as exc:
            self._storage_failed(part, f"read of {part.topic}-{part.partition}", exc)
            return FetchResult(ErrorCode.kafka_storage_error)
        aborted = None
        if replica_id < 0 and isolation_level == READ_COMMITTED:
            aborted = part.aborted_transactions(request.fetch_offset, records)
        return FetchResult(
            ErrorCode.none,
            high_watermark=decision.high_watermark,
            log_start_offset=decision.log_start_offset,
            records=records,
            last_stable_offset=decision.last_stable_offset,
            diverging_epoch=decision.diverging_epoch,
            throttled=decision.throttled,
            aborted_transactions=aborted,
        )

    def _read_all(
        self,
        replica_id: int,
        requests: list[FetchPartitionRequest],
        max_bytes: int,
        isolation_level: int,
        leader_quota: ReplicationQuota | None,
        broker_epoch: int,
    ) -> tuple[list[FetchResult], int]:
        now = now_ms()
        budget = max_bytes
        results = []
        total = 0
        for req in requests:
            result = self.read_partition(
                replica_id,
                req,
                budget if budget > 0 else 0,
                now,
                isolation_level,
                leader_quota,
                broker_epoch,
            )
            # KIP-74: the first partition with data may exceed the budget.
            budget -= len(result.records)
            total += len(result.records)
            results.append(result)
        return results, total

    def _read_again(
        self,
        replica_id: int,
        requests: list[FetchPartitionRequest],
        parts: list[Partition | None],
        first: list[FetchResult],
        changed: set[Partition],
        max_bytes: int,
        isolation_level: int,
        leader_quota: ReplicationQuota | None,
        broker_epoch: int,
    ) -> tuple[list[FetchResult], int]:
        """After a long poll's wait: ``requests`` read again where their partition moved
        during it (``changed``: its HW, log end, log start or role), where the replica
        hosted is no longer the one first read (``parts``), where the first read was
        throttled, or where what it read no longer fits the byte budget; the first read's
        result elsewhere (nothing it reads moved, so a read now answers the same). A
        fetch of many partitions where a few moved (a follower's) costs a few reads."""
        now = now_ms()
        budget = max_bytes
        results = []
        total = 0
        get_partition = self._get_partition
        for req, part, result in zip(requests, parts, first, strict=True):
            records = len(result.records)
            if (
                part is None
                or part in changed
                or result.throttled
                or (records and records > budget)
                or get_partition(req.topic, req.partition) is not part
            ):
                result = self.read_partition(
                    replica_id,
                    req,
                    budget if budget > 0 else 0,
                    now,
                    isolation_level,
                    leader_quota,
                    broker_epoch,
                )
                records = len(result.records)
            budget -= records
            total += records
            results.append(result)
        return results, total

    async def fetch(
        self,
        replica_id: int,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        requests: list[FetchPartitionRequest],
        isolation_level: int = READ_UNCOMMITTED,
        wait: FetchWait | None = None,
        leader_quota: ReplicationQuota | None = None,
        broker_epoch: int = UNKNOWN_BROKER_EPOCH,
    ) -> list[FetchResult]:
        """Read ``requests``; short of ``min_bytes``, wait up to ``max_wait_ms`` for one of
        them to have data (``DelayedFetch``) and read them all again. An error or a
        diverging epoch is answered at once. The time spent waiting is added to
        ``wait``; bytes sent to a follower for a throttled replica count against
        ``leader_quota``. ``broker_epoch`` is the follower's, from its fetch (Fetch v15+
        ``ReplicaState.ReplicaEpoch``, KIP-903; unknown before)."""
        results, total = self._read_all(
            replica_id, requests, max_bytes, isolation_level, leader_quota, broker_epoch
        )
        if (
            total < min_bytes
            and max_wait_ms > 0
            and all(r.error == ErrorCode.none and r.diverging_epoch is None for r in results)
        ):
            watched = []
            parts = []  # each request's partition at the first read
            for req, result in zip(requests, results, strict=True):
                part = self._get_partition(req.topic, req.partition)
                parts.append(part)
                if part is not None and not result.throttled:
                    watched.append((part, req.fetch_offset))
            operation = DelayedFetch(replica_id, watched, isolation_level)
            waiting_from = time.monotonic()
            await operation.wait(operation.partitions(), max_wait_ms / 1000)
            if wait is not None:
                wait.waited_s += time.monotonic() - waiting_from
            # Answered or timed out: the partitions that moved are read once more, so the
            # answer carries the latest HW; the others stand as first read.
            results, total = self._read_again(
                replica_id,
                requests,
                parts,
                results,
                operation.changed,
                max_bytes,
                isolation_level,
                leader_quota,
                broker_epoch,
            )
        if replica_id >= 0 and leader_quota is not None and total:
            self._record_leader_bytes(requests, results, leader_quota)
        return results

    def _record_leader_bytes(
        self,
        requests: list[FetchPartitionRequest],
        results: list[FetchResult],
        leader_quota: ReplicationQuota,
    ) -> None:
        """Bytes sent to a follower for a throttled replica count against the leader's quota."""
        now = time.monotonic()
        for req, result in zip(requests, results, strict=True):
            if result.records:
                part = self._get_partition(req.topic, req.partition)
                if part is not None and part.throttled_as_leader():
                    leader_quota.record(len(result.records), now)
