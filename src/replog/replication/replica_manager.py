"""The broker's replicas: role changes from the controller, appends, reads, waits.

Concurrency: event-loop only. Every role change, append and read runs to its
end without awaiting; only the waits for acks=all and long-poll fetches await,
and they re-check state when they wake.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kio.schema.errors import ErrorCode

from replog.common.clock import now_ms
from replog.config import KafkaConfig
from replog.protocol.errors import error_code_for
from replog.replication.core import AcksAllStatus, StopLeading
from replog.replication.fetch_rules import READ_UNCOMMITTED, FetchPartitionRequest
from replog.replication.fetcher import ReplicaFetcherManager
from replog.replication.isr import IsrChangePropagation, IsrChangeProposal, IsrState
from replog.replication.machine import (
    Action,
    IsrCommitted,
    PartitionLeadership,
    StartFetching,
    StopFetching,
)
from replog.replication.partition import Partition
from replog.replication.waiters import wait_until
from replog.storage.checkpoints import OffsetCheckpointFile
from replog.storage.log_config import LogConfig
from replog.storage.log_manager import LogManager
from replog.zk.client import KafkaZkClient
from replog.zk.data import LeaderAndIsr, LeaderIsrAndControllerEpoch

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
HW_CHECKPOINT = "replication-offset-checkpoint"


@dataclass(slots=True)
class FetchWait:
    """How long a fetch waited for data (the request metrics' remote time)."""

    waited_s: float = 0.0


@dataclass(slots=True)
class ProduceResult:
    error: ErrorCode
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    required_offset: int = -1  # HW that acks=all waits for
    term: int = -1  # the leadership the append was made in


@dataclass(slots=True)
class DeleteRecordsResult:
    """One partition of a DeleteRecords: pending until the low watermark reaches
    ``requested_offset`` (a success not yet answered), then settled."""

    error: ErrorCode
    low_watermark: int = -1
    requested_offset: int = -1
    term: int = -1  # the leadership the log start moved in
    pending: bool = False

    def __post_init__(self) -> None:
        self.pending = self.error is ErrorCode.none and self.low_watermark < self.requested_offset

    def settle(self, error: ErrorCode, low_watermark: int) -> None:
        self.error, self.low_watermark, self.pending = error, low_watermark, False


@dataclass(slots=True)
class FetchResult:
    error: ErrorCode
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    last_stable_offset: int = -1


class ReplicaManager:
    """The broker's partitions; drives each one's ``PartitionMachine``.

    Concurrency: event-loop only. Every role change, append and read runs to
    its end without awaiting; the waits for acks=all and long-poll fetches, and
    the ZooKeeper ISR writes, await and re-check the partition's ``term`` after.
    """

    def __init__(
        self,
        config: KafkaConfig,
        log_manager: LogManager,
        topic_config: Callable[[str], LogConfig],
        zk: KafkaZkClient,
    ) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.log_manager = log_manager
        self.topic_config = topic_config
        self.partitions: dict[TopicPartition, Partition] = {}
        self.offline_partitions: set[TopicPartition] = set()
        """Partitions whose log dir went offline (Kafka ``HostedPartition.Offline``):
        requests for them get KAFKA_STORAGE_ERROR until the broker restarts."""
        self.on_log_dir_offline: Callable[[Path, list[TopicPartition]], None] | None = None
        """The broker's part of a failed log dir (the ZooKeeper notification, or the halt
        when no log dir is left), after this manager stopped serving its partitions."""
        log_manager.on_log_dir_failure = self.handle_log_dir_failure
        self.fetcher_manager: ReplicaFetcherManager | None = None
        self.on_replica_deleted: Callable[[str], None] | None = None  # drops cached topic config
        self.is_live_broker: Callable[[int], bool] = lambda _broker_id: True
        self.zk = zk
        self.isr_change_propagation = IsrChangePropagation.starting_at(now_ms())
        self._background: set[asyncio.Task[None]] = set()
        self._hw_checkpoints: dict[object, dict[tuple[str, int], int]] = {}
        # ISR changes this broker wrote as leader (the server's metrics read them)
        self.isr_shrinks = 0
        self.isr_expands = 0

    def get_partition(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def _missing(
        self,
        topic: str,
        partition: int,
        otherwise: ErrorCode = ErrorCode.unknown_topic_or_partition,
    ) -> ErrorCode:
        """The error for a partition not hosted here: offline ones say so."""
        if self.offline_partitions and (topic, partition) in self.offline_partitions:
            return ErrorCode.kafka_storage_error
        return otherwise

    # -- failed log dirs (KIP-112) --------------------------------------------

    def storage_failed(self, part: Partition, what: str, exc: OSError) -> None:
        """A read or write of ``part``'s log failed for its disk: the whole log dir goes
        offline (Kafka ``LogDirFailureChannel.maybeAddOfflineLogDir``)."""
        self.log_manager.fail_log_dir(part.log.dir.parent, what, exc)

    def handle_log_dir_failure(self, log_dir: Path) -> None:
        """Kafka ``ReplicaManager.handleLogDirFailure``: stop fetching and serving every
        partition in the offline ``log_dir`` (their leaders stop leading, waiting
        requests wake), close their logs, then the broker tells the controller, which
        moves their leaderships and ISRs elsewhere."""
        gone = sorted(tp for tp in self.partitions if self.log_manager.log_dir_of(*tp) == log_dir)
        for tp in gone:
            part = self.partitions.pop(tp)
            if self.fetcher_manager is not None:
                self.fetcher_manager.remove_partition(*tp)
            self._carry_out(part, part.machine.stop())
            part.waiters.wake_all()
        offline = sorted({*gone, *self.log_manager.handle_log_dir_failure(log_dir)})
        self.offline_partitions.update(offline)
        log.error(
            "stopped serving %d replicas in the offline log dir %s: %s",
            len(offline),
            log_dir,
            ", ".join(f"{t}-{p}" for t, p in offline[:20]),
        )
        if self.on_log_dir_offline is not None:
            self.on_log_dir_offline(log_dir, offline)

    # -- produce --------------------------------------------------------------

    def append_to_leader(
        self, topic: str, partition: int, records: bytes, acks: int, now: int
    ) -> ProduceResult:
        part = self.partitions.get((topic, partition))
        if part is None:
            return ProduceResult(self._missing(topic, partition))
        try:
            error, info = part.append_as_leader(bytearray(records), acks=acks, now_ms=now)
        except Exception as exc:
            code = error_code_for(exc)
            if code == ErrorCode.unknown_server_error:
                log.exception("append to %s-%d failed", topic, partition)
            elif code == ErrorCode.kafka_storage_error:
                self.storage_failed(part, f"append to {topic}-{partition}", exc)
            else:
                log.info("append to %s-%d rejected: %s", topic, partition, exc)
            return ProduceResult(code, error_message=str(exc) or None)
        if info is None:
            return ProduceResult(error)
        return ProduceResult(
            ErrorCode.none,
            base_offset=info.first_offset,
            log_append_time=info.log_append_time,
            log_start_offset=part.log.log_start_offset,
            required_offset=info.last_offset + 1,
            term=part.machine.term,
        )

    async def wait_for_acks_all(
        self, results: dict[TopicPartition, ProduceResult], timeout_ms: int
    ) -> None:
        """Wait until every ISR member has each appended batch, or the timeout passes.

        Updates ``results`` in place with REQUEST_TIMED_OUT, NOT_LEADER_OR_FOLLOWER
        or NOT_ENOUGH_REPLICAS_AFTER_APPEND where those apply.
        """
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            waiting = []
            for (topic, partition), result in results.items():
                if result.error != ErrorCode.none or result.required_offset < 0:
                    continue
                part = self.partitions.get((topic, partition))
                status = (
                    AcksAllStatus.NOT_LEADER_OR_FOLLOWER
                    if part is None
                    else part.machine.acks_all_status(result.required_offset, result.term)
                )
                if status is not AcksAllStatus.PENDING:
                    result.error = status.error or ErrorCode.none
                    result.required_offset = -1
                    continue
                waiting.append((part, result.required_offset, result.term))
            if not waiting:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                for result in results.values():
                    if result.error == ErrorCode.none and result.required_offset >= 0:
                        result.error = ErrorCode.request_timed_out
                return
            await wait_until(
                [
                    (
                        part.waiters,
                        lambda p=part, o=offset, t=term: (
                            p.high_watermark >= o or p.machine.term != t
                        ),
                    )
                    for part, offset, term in waiting
                ],
                remaining,
            )

    # -- DeleteRecords --------------------------------------------------------

    def delete_records(self, topic: str, partition: int, offset: int) -> DeleteRecordsResult:
        """Move a leader's log start offset up (Kafka ``deleteRecordsOnLocalLog``)."""
        part = self.partitions.get((topic, partition))
        if part is None:
            return DeleteRecordsResult(
                self._missing(topic, partition, ErrorCode.not_leader_or_follower)
            )
        try:
            decision = part.delete_records(offset, self.is_live_broker)
        except OSError as exc:
            self.storage_failed(part, f"DeleteRecords on {topic}-{partition}", exc)
            return DeleteRecordsResult(ErrorCode.kafka_storage_error)
        if decision.error is not ErrorCode.none:
            return DeleteRecordsResult(decision.error)
        log.info(
            "%s-%d: DeleteRecords to offset %d (log start %d, low watermark %d)",
            topic,
            partition,
            decision.requested_offset,
            part.log.log_start_offset,
            decision.low_watermark,
        )
        return DeleteRecordsResult(
            ErrorCode.none,
            low_watermark=decision.low_watermark,
            requested_offset=decision.requested_offset,
            term=part.machine.term,
        )

    async def wait_for_delete_records(
        self, results: dict[TopicPartition, DeleteRecordsResult], timeout_ms: int
    ) -> None:
        """Kafka ``DelayedDeleteRecords``: wait until every live replica's log start
        offset (the low watermark) reaches each requested offset, or the timeout
        passes (REQUEST_TIMED_OUT, with the low watermark known when the request
        arrived). Updates ``results`` in place."""
        deadline = time.monotonic() + timeout_ms / 1000
        is_live = self.is_live_broker
        while True:
            waiting = []
            for (topic, partition), result in results.items():
                if not result.pending:
                    continue
                part = self.partitions.get((topic, partition))
                if part is None:
                    result.settle(ErrorCode.not_leader_or_follower, -1)
                    continue
                status = part.machine.delete_records_status(
                    result.requested_offset, result.term, is_live
                )
                if status.done:
                    result.settle(status.error, status.low_watermark)
                else:
                    waiting.append((part, result))
            if not waiting:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                for result in results.values():
                    if result.pending:
                        result.settle(ErrorCode.request_timed_out, result.low_watermark)
                return
            await wait_until(
                [
                    (
                        part.waiters,
                        lambda p=part, r=result: (
                            p.machine.delete_records_status(
                                r.requested_offset, r.term, is_live
                            ).done
                        ),
                    )
                    for part, result in waiting
                ],
                remaining,
            )

    # -- fetch ----------------------------------------------------------------

    def read_partition(
        self,
        replica_id: int,
        request: FetchPartitionRequest,
        budget: int,
        now: int,
        isolation_level: int = READ_UNCOMMITTED,
    ) -> FetchResult:
        part = self.partitions.get((request.topic, request.partition))
        if part is None:
            return FetchResult(self._missing(request.topic, request.partition))
        is_follower = replica_id >= 0
        decision = part.machine.on_fetch(
            replica_id,
            request.fetch_offset,
            request.current_leader_epoch,
            now,
            isolation_level=isolation_level,
            isr_eligible=is_follower and self.is_live_broker(replica_id),
            follower_log_start_offset=request.log_start_offset,
        )
        if decision.actions:
            self._carry_out(part, decision.actions)
        if decision.follower_log_start_advanced:
            part.waiters.notify()  # DeleteRecords waiting for the low watermark
        if decision.error is not ErrorCode.none:
            if decision.error is ErrorCode.offset_out_of_range:
                return FetchResult(
                    decision.error,
                    high_watermark=decision.high_watermark,
                    log_start_offset=part.log.log_start_offset,
                )
            return FetchResult(decision.error)
        try:
            records = part.read(decision, min(request.max_bytes, budget) if budget > 0 else 0)
        except OSError as exc:
            self.storage_failed(part, f"read of {part.topic}-{part.partition}", exc)
            return FetchResult(ErrorCode.kafka_storage_error)
        return FetchResult(
            ErrorCode.none,
            high_watermark=decision.high_watermark,
            log_start_offset=part.log.log_start_offset,
            records=records,
            last_stable_offset=decision.high_watermark,
        )

    def _carry_out(
        self,
        part: Partition,
        actions: tuple[Action, ...] | list[Action],
        leader_addresses: dict[int, tuple[str, int]] | None = None,
    ) -> None:
        """What a partition hands back: fetcher changes, ZooKeeper writes, notifications.

        ``leader_addresses`` are a LeaderAndIsr's live leaders, the only source of
        ``StartFetching``."""
        for action in part.carry_out(actions):
            if isinstance(action, IsrChangeProposal):
                log.info(
                    "%s-%d: %s ISR %s -> %s",
                    part.topic,
                    part.partition,
                    "expanding" if action.added else "shrinking",
                    list(action.current_isr),
                    list(action.new_isr),
                )
                self._submit_isr_change(part, action)
            elif isinstance(action, IsrCommitted):
                log.info(
                    "%s-%d: ISR is now %s",
                    part.topic,
                    part.partition,
                    list(action.in_sync_replicas),
                )
                self.isr_change_propagation.record_isr_change(
                    (part.topic, part.partition), now_ms()
                )
            elif isinstance(action, StopLeading):
                log.warning(
                    "%s-%d: %s; no longer acting as leader at epoch %d",
                    part.topic,
                    part.partition,
                    action.reason,
                    action.leader_epoch,
                )
            elif isinstance(action, StartFetching):
                if self.fetcher_manager is not None:
                    self.fetcher_manager.add_partition(
                        part, action.leader_id, (leader_addresses or {}).get(action.leader_id)
                    )
            elif isinstance(action, StopFetching):
                if self.fetcher_manager is not None:
                    self.fetcher_manager.remove_partition(part.topic, part.partition)

    # -- ISR changes: conditional writes to the partition state znode ---------

    def _submit_isr_change(self, part: Partition, proposal: IsrChangeProposal) -> None:
        task = asyncio.create_task(self._write_isr_change(part, proposal))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _write_isr_change(self, part: Partition, proposal: IsrChangeProposal) -> None:
        """Seed 000 question 3: a rejected conditional update means we no longer lead."""
        assert part.state is not None
        state = LeaderIsrAndControllerEpoch(
            LeaderAndIsr(
                leader=self.broker_id,
                leader_epoch=proposal.leader_epoch,
                isr=proposal.new_isr,
                zk_version=proposal.partition_zk_version,
            ),
            part.state.controller_epoch,
        )
        term = part.machine.term
        while True:
            try:
                version = await asyncio.to_thread(
                    self.zk.update_leader_and_isr_conditional,
                    part.topic,
                    part.partition,
                    state,
                    proposal.partition_zk_version,
                )
                break
            except Exception as exc:  # ZooKeeper unreachable: keep the change pending, retry
                log.warning(
                    "%s-%d: ISR update failed (%s); retrying", part.topic, part.partition, exc
                )
                await asyncio.sleep(self.config.replica_fetch_backoff_ms / 1000)
                if part.machine.term != term:
                    return
        if self.partitions.get((part.topic, part.partition)) is not part:
            return
        if version is not None:  # Kafka's IsrShrinksPerSec / IsrExpandsPerSec
            if proposal.kind is IsrState.PENDING_SHRINK_ISR:
                self.isr_shrinks += 1
            elif proposal.kind is IsrState.PENDING_EXPAND_ISR:
                self.isr_expands += 1
        self._carry_out(part, part.machine.on_isr_update_result(proposal, version))

    def maybe_shrink_isr(self, now: int) -> None:
        for part in list(self.partitions.values()):
            proposal = part.machine.maybe_shrink_isr(now)
            if proposal is not None:
                log.info(
                    "%s-%d: shrinking ISR from %s to %s (not caught up within "
                    "replica.lag.time.max.ms=%d)",
                    part.topic,
                    part.partition,
                    list(proposal.current_isr),
                    list(proposal.new_isr),
                    self.config.replica_lag_time_max_ms,
                )
                self._submit_isr_change(part, proposal)

    async def maybe_propagate_isr_changes(self, now: int) -> None:
        changed = self.isr_change_propagation.maybe_propagate(now)
        if changed:
            await asyncio.to_thread(self.zk.propagate_isr_changes, set(changed))

    def checkpoint_high_watermarks(self) -> None:
        by_dir: dict[Path, dict[tuple[str, int], int]] = {}
        for (topic, partition), part in self.partitions.items():
            by_dir.setdefault(part.log.dir.parent, {})[(topic, partition)] = part.high_watermark
        for log_dir in self.log_manager.live_log_dirs:
            try:
                OffsetCheckpointFile(log_dir / HW_CHECKPOINT).write(by_dir.get(log_dir, {}))
            except OSError as exc:
                self.log_manager.fail_log_dir(log_dir, f"writing {HW_CHECKPOINT}", exc)

    def _restored_high_watermark(self, topic: str, partition: int, log_dir: Path) -> int:
        if log_dir not in self._hw_checkpoints:
            self._hw_checkpoints[log_dir] = OffsetCheckpointFile(log_dir / HW_CHECKPOINT).read()
        return self._hw_checkpoints[log_dir].get((topic, partition), 0)

    async def fetch(
        self,
        replica_id: int,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        requests: list[FetchPartitionRequest],
        isolation_level: int = READ_UNCOMMITTED,
        wait: FetchWait | None = None,
    ) -> list[FetchResult]:
        """Read ``requests``, waiting up to ``max_wait_ms`` for ``min_bytes`` (Kafka's
        DelayedFetch); the time spent waiting is added to ``wait``."""
        deadline = time.monotonic() + max_wait_ms / 1000
        first = True
        while True:
            now = now_ms()
            budget = max_bytes
            results = []
            total = 0
            for req in requests:
                result = self.read_partition(
                    replica_id, req, budget if budget > 0 else 0, now, isolation_level
                )
                # KIP-74: the first partition with data may exceed the budget.
                budget -= len(result.records)
                total += len(result.records)
                results.append(result)
            has_error = any(r.error != ErrorCode.none for r in results)
            remaining = deadline - time.monotonic()
            if total >= min_bytes or has_error or remaining <= 0 or (not first and total > 0):
                return results
            first = False
            is_follower = replica_id >= 0
            registrations = []
            for req in requests:
                part = self.partitions.get((req.topic, req.partition))
                if part is None:
                    continue

                def ready(
                    p: Partition = part,
                    offset: int = req.fetch_offset,
                    follower: bool = is_follower,
                ) -> bool:
                    end = p.log.log_end_offset if follower else p.high_watermark
                    return end > offset or not p.is_leader

                registrations.append((part.waiters, ready))
            waiting_from = time.monotonic()
            woken = await wait_until(registrations, remaining)
            if wait is not None:
                wait.waited_s += time.monotonic() - waiting_from
            if not woken:
                # Timed out: one last read so the response carries the latest HW.
                deadline = time.monotonic()

    # -- role changes (driven by the controller) ------------------------------

    def become_leader_or_follower(
        self,
        topic: str,
        partition: int,
        state: PartitionLeadership,
        *,
        live_leaders: dict[int, tuple[str, int]],
        is_new: bool = False,
    ) -> ErrorCode:
        """Apply one partition of a LeaderAndIsr request (Kafka ``becomeLeaderOrFollower``).

        A partition in an offline log dir answers KAFKA_STORAGE_ERROR (the controller then
        takes the replica as offline), and so does one with no log here that is not new
        while some log dir is offline: its log may be on that dir, and an empty log made
        elsewhere would pass for it (Kafka ``getOrCreateLog`` with ``isNew`` false)."""
        if not state.assigns(self.broker_id):
            return ErrorCode.unknown_topic_or_partition  # before creating a log for it
        tp = (topic, partition)
        if self.offline_partitions and tp in self.offline_partitions:
            return ErrorCode.kafka_storage_error
        if (
            tp not in self.partitions
            and self.log_manager.offline_log_dirs
            and not is_new
            and self.log_manager.get_log(topic, partition) is None
        ):
            log.warning(
                "%s-%d: no log here and log dirs %s are offline: KAFKA_STORAGE_ERROR",
                topic,
                partition,
                sorted(str(d) for d in self.log_manager.offline_log_dirs),
            )
            return ErrorCode.kafka_storage_error
        try:
            part = self._get_or_create_partition(topic, partition)
        except OSError as exc:
            log.error("%s-%d: cannot create its log: %s", topic, partition, exc)
            return ErrorCode.kafka_storage_error
        code, actions = part.machine.on_leader_and_isr(state, now_ms())
        if code is ErrorCode.stale_controller_epoch:
            log.warning(
                "%s-%d: ignoring LeaderAndIsr at leader epoch %d, current is %d",
                topic,
                partition,
                state.leader_epoch,
                part.leader_epoch,
            )
        try:
            self._carry_out(part, actions, live_leaders)  # may write the leader epoch file
        except OSError as exc:
            self.storage_failed(
                part, f"becoming {state.leader}'s replica of {topic}-{partition}", exc
            )
            return ErrorCode.kafka_storage_error
        if actions:
            log.debug(
                "%s-%d: %s at epoch %d (leader %d, ISR %s, LEO %d)",
                topic,
                partition,
                part.machine.role.value,
                state.leader_epoch,
                state.leader,
                list(state.isr),
                part.log.log_end_offset,
            )
        return code

    def _get_or_create_partition(self, topic: str, partition: int) -> Partition:
        part = self.partitions.get((topic, partition))
        if part is None:
            config = self.topic_config(topic)
            log_ = self.log_manager.get_or_create_log(topic, partition, config, now_ms())
            log_.update_config(config)  # a log loaded at start-up has the broker defaults
            part = Partition(
                topic,
                partition,
                self.broker_id,
                log_,
                high_watermark=self._restored_high_watermark(topic, partition, log_.dir.parent),
                replica_lag_time_max_ms=self.config.replica_lag_time_max_ms,
            )
            self.partitions[(topic, partition)] = part
        return part

    def resign_leaderships(self) -> int:
        """The ZooKeeper session is surely expired: every partition led here stops
        leading (``PartitionMachine.on_session_expired``); how many did."""
        resigned = 0
        for part in list(self.partitions.values()):
            actions = part.machine.on_session_expired()
            if actions:
                resigned += 1
                self._carry_out(part, actions)
        return resigned

    def stop_replica(self, topic: str, partition: int, delete: bool) -> None:
        if delete:
            self.offline_partitions.discard((topic, partition))
        part = self.partitions.pop((topic, partition), None)
        if self.fetcher_manager is not None:
            self.fetcher_manager.remove_partition(topic, partition)
        if part is not None:
            self._carry_out(part, part.machine.stop())
        if delete:
            self.log_manager.delete_log(topic, partition)
            if self.on_replica_deleted is not None:
                self.on_replica_deleted(topic)
            log.info("%s-%d: replica stopped and deleted", topic, partition)

    async def shutdown(self) -> None:
        if self.fetcher_manager is not None:
            await self.fetcher_manager.shutdown()
        for task in list(self._background):
            task.cancel()
        for part in self.partitions.values():
            part.waiters.wake_all()
        self.checkpoint_high_watermarks()


__all__ = [
    "DeleteRecordsResult",
    "FetchResult",
    "ProduceResult",
    "ReplicaManager",
]
