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

from kio.schema.errors import ErrorCode

from replog.config import KafkaConfig
from replog.replication.partition import (
    NotLeaderOrFollower,
    Partition,
    PartitionState,
)
from replog.replication.waiters import wait_any
from replog.server.errors import error_code_for
from replog.storage.log_config import LogConfig
from replog.storage.log_manager import LogManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class ProduceResult:
    error: ErrorCode
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    required_offset: int = -1  # HW that acks=all waits for


@dataclass(slots=True)
class FetchRequestPartition:
    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1


@dataclass(slots=True)
class FetchResult:
    error: ErrorCode
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    last_stable_offset: int = -1


class ReplicaManager:
    def __init__(
        self,
        config: KafkaConfig,
        log_manager: LogManager,
        topic_config: Callable[[str], LogConfig],
    ) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.log_manager = log_manager
        self.topic_config = topic_config
        self.partitions: dict[TopicPartition, Partition] = {}
        self.controller_epoch = -1
        self.fetcher_manager = None  # set by the broker once replica fetchers exist

    def get_partition(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    # -- produce --------------------------------------------------------------

    def append_to_leader(
        self, topic: str, partition: int, records: bytes, acks: int, now: int
    ) -> ProduceResult:
        part = self.partitions.get((topic, partition))
        if part is None or not part.is_leader:
            code = (
                ErrorCode.not_leader_or_follower
                if part is not None
                else ErrorCode.unknown_topic_or_partition
            )
            return ProduceResult(code)
        try:
            info = part.append_as_leader(bytearray(records), acks=acks, now_ms=now)
        except Exception as exc:
            code = error_code_for(exc)
            if code == ErrorCode.unknown_server_error:
                log.exception("append to %s-%d failed", topic, partition)
            else:
                log.info("append to %s-%d rejected: %s", topic, partition, exc)
            return ProduceResult(code, error_message=str(exc) or None)
        return ProduceResult(
            ErrorCode.none,
            base_offset=info.first_offset,
            log_append_time=info.log_append_time,
            log_start_offset=part.log.log_start_offset,
            required_offset=info.last_offset + 1,
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
                if part is None or not part.is_leader:
                    result.error = ErrorCode.not_leader_or_follower
                    continue
                if part.high_watermark >= result.required_offset:
                    if len(part.in_sync_replicas) < part.log.config.min_insync_replicas:
                        result.error = ErrorCode.not_enough_replicas_after_append
                    result.required_offset = -1
                    continue
                waiting.append((part, result.required_offset))
            if not waiting:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                for (_, _), result in results.items():
                    if result.error == ErrorCode.none and result.required_offset >= 0:
                        result.error = ErrorCode.request_timed_out
                return
            futures = [
                part.waiters.add(lambda p=part, o=offset: p.high_watermark >= o or not p.is_leader)
                for part, offset in waiting
            ]
            await wait_any(futures, remaining)

    # -- fetch ----------------------------------------------------------------

    def read_partition(
        self, replica_id: int, request: FetchRequestPartition, budget: int, now: int
    ) -> FetchResult:
        part = self.partitions.get((request.topic, request.partition))
        if part is None:
            return FetchResult(ErrorCode.unknown_topic_or_partition)
        if not part.is_leader:
            return FetchResult(ErrorCode.not_leader_or_follower)
        try:
            part.check_leader_epoch(request.current_leader_epoch)
        except Exception as exc:
            return FetchResult(error_code_for(exc))
        is_follower = replica_id >= 0
        if is_follower:
            self.on_follower_fetch(part, replica_id, request.fetch_offset, now)
        result = part.read(
            request.fetch_offset,
            min(request.max_bytes, budget) if budget > 0 else 0,
            up_to_high_watermark=not is_follower,
        )
        if result.error is not None:
            return FetchResult(
                error_code_for(result.error),
                high_watermark=result.high_watermark,
                log_start_offset=result.log_start_offset,
            )
        return FetchResult(
            ErrorCode.none,
            high_watermark=result.high_watermark,
            log_start_offset=result.log_start_offset,
            records=result.records,
            last_stable_offset=result.high_watermark,
        )

    def on_follower_fetch(
        self, part: Partition, replica_id: int, fetch_offset: int, now: int
    ) -> None:
        """Hook for the replication core; replaced when followers exist."""

    async def fetch(
        self,
        replica_id: int,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        requests: list[FetchRequestPartition],
    ) -> list[FetchResult]:
        deadline = time.monotonic() + max_wait_ms / 1000
        first = True
        while True:
            now = now_ms()
            budget = max_bytes
            results = []
            total = 0
            for req in requests:
                result = self.read_partition(replica_id, req, budget if budget > 0 else 0, now)
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
            futures = []
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

                futures.append(part.waiters.add(ready))
            if not await wait_any(futures, remaining):
                # Timed out: one last read so the response carries the latest HW.
                deadline = time.monotonic()

    # -- role changes (driven by the controller) ------------------------------

    def become_leader_or_follower(
        self,
        topic: str,
        partition: int,
        state: PartitionState,
        *,
        is_new: bool,
        live_leaders: dict[int, tuple[str, int]],
    ) -> ErrorCode:
        """Apply one partition of a LeaderAndIsr request (Kafka ``becomeLeaderOrFollower``)."""
        if self.broker_id not in state.replicas:
            return ErrorCode.unknown_topic_or_partition
        part = self.partitions.get((topic, partition))
        if part is not None and part.state is not None:
            if state.leader_epoch < part.state.leader_epoch:
                log.warning(
                    "%s-%d: ignoring LeaderAndIsr at leader epoch %d, current is %d",
                    topic,
                    partition,
                    state.leader_epoch,
                    part.state.leader_epoch,
                )
                return ErrorCode.stale_controller_epoch
            if state.leader_epoch == part.state.leader_epoch:
                return ErrorCode.none  # already applied (a resend after controller failover)
        part = self._get_or_create_partition(topic, partition)
        if state.leader == self.broker_id:
            if self.fetcher_manager is not None:
                self.fetcher_manager.remove_partition(topic, partition)
            part.become_leader(state, now_ms(), self.config.replica_lag_time_max_ms)
            log.info(
                "%s-%d: leader at epoch %d, ISR %s, LEO %d",
                topic,
                partition,
                state.leader_epoch,
                list(state.isr),
                part.log.log_end_offset,
            )
        else:
            part.become_follower(state)
            leader = live_leaders.get(state.leader)
            if self.fetcher_manager is not None:
                self.fetcher_manager.add_partition(part, state.leader, leader)
            log.info(
                "%s-%d: follower of broker %d at epoch %d",
                topic,
                partition,
                state.leader,
                state.leader_epoch,
            )
        return ErrorCode.none

    def _get_or_create_partition(self, topic: str, partition: int) -> Partition:
        part = self.partitions.get((topic, partition))
        if part is None:
            log_ = self.log_manager.get_or_create_log(
                topic, partition, self.topic_config(topic), now_ms()
            )
            part = Partition(topic, partition, self.broker_id, log_)
            self.partitions[(topic, partition)] = part
        return part

    def stop_replica(self, topic: str, partition: int, delete: bool) -> None:
        part = self.partitions.pop((topic, partition), None)
        if self.fetcher_manager is not None:
            self.fetcher_manager.remove_partition(topic, partition)
        if part is not None:
            part.state = None
            part.leader_state = None
            part.waiters.wake_all()
        if delete:
            self.log_manager.delete_log(topic, partition)
            log.info("%s-%d: replica stopped and deleted", topic, partition)

    async def shutdown(self) -> None:
        for part in self.partitions.values():
            part.waiters.wake_all()
        await asyncio.sleep(0)


__all__ = [
    "FetchRequestPartition",
    "FetchResult",
    "NotLeaderOrFollower",
    "ProduceResult",
    "ReplicaManager",
]
