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


@dataclass(slots=True)
class _FetchScope:
    """What every partition of one read of a fetch shares: who fetches and how, whether
    the follower may join an ISR, whether the leader is over its replication quota."""

    replica_id: int
    isolation_level: int
    broker_epoch: int
    isr_eligible: bool  # a follower the controller counts as live (KIP-903)
    over_quota: bool  # a follower's fetch while the leader's replication quota is exceeded
    read_committed: bool  # a read_committed consumer: aborted transactions answered


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

    def _scope(
        self,
        replica_id: int,
        isolation_level: int,
        leader_quota: ReplicationQuota | None,
        broker_epoch: int,
    ) -> _FetchScope:
        """What is the same for every partition of one read of a fetch."""
        is_follower = replica_id >= 0
        return _FetchScope(
            replica_id,
            isolation_level,
            broker_epoch,
            is_follower and self._is_live_broker(replica_id),
            # No replica can be over the leader's quota while it is unlimited (the usual
            # case): then the per-partition check is skipped.
            is_follower
            and leader_quota is not None
            and not leader_quota.unthrottled
            and leader_quota.is_quota_exceeded(time.monotonic()),
            not is_follower and isolation_level == READ_COMMITTED,
        )

    def read_partition(
        self, scope: _FetchScope, request: FetchPartitionRequest, budget: int, now: int
    ) -> FetchResult:
        """One partition of a fetch: the partition's machine decides (fencing, KIP-595,
        the leader's throttle, the bounds), the partition reads."""
        part = self._get_partition(request.topic, request.partition)
        if part is None:
            return FetchResult(self._missing(request.topic, request.partition))
        decision, rest = part.fetch(
            scope.replica_id,
            request,
            now,
            isolation_level=scope.isolation_level,
            broker_epoch=scope.broker_epoch,
            isr_eligible=scope.isr_eligible,
            replication_throttled=scope.over_quota and part.throttled_as_leader(),
        )
        if rest:
            self._carry_out(part, rest)
        error = decision.error
        if error is not ErrorCode.none:
            if error is ErrorCode.offset_out_of_range:
                return FetchResult(
                    error,
                    decision.high_watermark,
                    decision.log_start_offset,
                    b"",
                    decision.last_stable_offset,
                )
            return FetchResult(error)
        try:
            records = part.read(decision, min(request.max_bytes, budget) if budget > 0 else 0)
        except OSError as exc:
            self._storage_failed(part, f"read of {part.topic}-{part.partition}", exc)
            return FetchResult(ErrorCode.kafka_storage_error)
        return FetchResult(
            ErrorCode.none,
            decision.high_watermark,
            decision.log_start_offset,
            records,
            decision.last_stable_offset,
            decision.diverging_epoch,
            decision.throttled,
            part.aborted_transactions(request.fetch_offset, records)
            if scope.read_committed
            else None,
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
        scope = self._scope(replica_id, isolation_level, leader_quota, broker_epoch)
        read_partition = self.read_partition
        now = now_ms()
        budget = max_bytes
        results = []
        total = 0
        for req in requests:
            result = read_partition(scope, req, budget if budget > 0 else 0, now)
            # KIP-74: the first partition with data may exceed the budget.
            size = len(result.records)
            budget -= size
            total += size
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
        scope = self._scope(replica_id, isolation_level, leader_quota, broker_epoch)
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
                result = self.read_partition(scope, req, budget if budget > 0 else 0, now)
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
