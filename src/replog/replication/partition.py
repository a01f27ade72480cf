"""One partition replica on this broker: its log, its role, its waiters.

The replication rules (HW, ISR membership, truncation points) live in the pure
core; this class carries out what the core decides: appends to the log,
answers reads, wakes waiting requests. Concurrency: owned by the event loop;
no method awaits between a check and the change it guards.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from replog.replication.waiters import Waiters
from replog.storage.log import AppendInfo, FetchDataInfo, Log, OffsetOutOfRange

log = logging.getLogger(__name__)


class NotLeaderOrFollower(Exception):
    pass


class NotEnoughReplicas(Exception):
    pass


class FencedLeaderEpoch(Exception):
    pass


class UnknownLeaderEpoch(Exception):
    pass


@dataclass(frozen=True, slots=True)
class PartitionState:
    """What the controller said about this partition (LeaderAndIsr)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    zk_version: int
    controller_epoch: int


@dataclass(slots=True)
class ReadResult:
    records: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    error: Exception | None = None


class Partition:
    def __init__(self, topic: str, partition: int, local_broker_id: int, log_: Log) -> None:
        self.topic = topic
        self.partition = partition
        self.local_broker_id = local_broker_id
        self.log = log_
        self.state: PartitionState | None = None
        self.leader_state = None  # replication core's LeaderState while we lead
        self.follower_high_watermark = 0
        self.waiters = Waiters()
        self._high_watermark = 0

    # -- role ---------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.state is not None and self.state.leader == self.local_broker_id

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch if self.state else -1

    @property
    def high_watermark(self) -> int:
        if self.leader_state is not None:
            return self.leader_state.high_watermark
        return self._high_watermark

    @property
    def in_sync_replicas(self) -> tuple[int, ...]:
        if self.leader_state is not None:
            return tuple(sorted(self.leader_state.in_sync_replicas))
        return self.state.isr if self.state else ()

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """KIP-320 fencing: -1 means the client does not know; otherwise it must match."""
        if current_leader_epoch < 0 or self.state is None:
            return
        if current_leader_epoch < self.state.leader_epoch:
            raise FencedLeaderEpoch()
        if current_leader_epoch > self.state.leader_epoch:
            raise UnknownLeaderEpoch()

    # -- reads ----------------------------------------------------------------

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        up_to_high_watermark: bool,
    ) -> ReadResult:
        """Records from ``fetch_offset``; consumers see only what is below the high watermark.

        A consumer fetch between HW and LEO (after a leadership change, seed 000
        question 7) returns no records rather than OFFSET_OUT_OF_RANGE.
        """
        hw = self.high_watermark
        leo = self.log.log_end_offset
        start = self.log.log_start_offset
        if up_to_high_watermark and hw < fetch_offset <= leo:
            return ReadResult(b"", hw, start, leo)
        try:
            data: FetchDataInfo = self.log.read(
                fetch_offset, max_bytes, max_offset=hw if up_to_high_watermark else None
            )
        except OffsetOutOfRange as exc:
            return ReadResult(b"", hw, start, leo, exc)
        return ReadResult(data.records, hw, start, leo)

    def available_bytes(self, fetch_offset: int, up_to_high_watermark: bool) -> int:
        """Rough count of bytes a fetch at ``fetch_offset`` could return now."""
        end = self.high_watermark if up_to_high_watermark else self.log.log_end_offset
        return max(0, end - fetch_offset)

    # -- writes ---------------------------------------------------------------

    def append_as_leader(self, records: bytearray, *, acks: int, now_ms: int) -> AppendInfo:
        if not self.is_leader:
            raise NotLeaderOrFollower()
        min_isr = self.log.config.min_insync_replicas
        if acks == -1 and len(self.in_sync_replicas) < min_isr:
            raise NotEnoughReplicas()
        info = self.log.append_as_leader(records, leader_epoch=self.leader_epoch, now_ms=now_ms)
        if not info.duplicate:
            self.on_log_end_offset_change(now_ms)
        return info

    def on_log_end_offset_change(self, now_ms: int) -> None:
        if self.leader_state is not None:
            self.leader_state.on_local_append(self.log.log_end_offset)
        self.waiters.notify()

    def set_follower_high_watermark(self, leader_hw: int) -> None:
        new_hw = min(leader_hw, self.log.log_end_offset)
        if new_hw > self._high_watermark:
            self._high_watermark = new_hw
            self.waiters.notify()

    def restore_high_watermark(self, hw: int) -> None:
        self._high_watermark = min(max(hw, self.log.log_start_offset), self.log.log_end_offset)

    # -- role changes -----------------------------------------------------------

    def become_leader(
        self, state: PartitionState, now_ms: int, replica_lag_time_max_ms: int
    ) -> None:
        """Take leadership at ``state.leader_epoch`` (Kafka ``Partition.makeLeader``)."""
        from replog.replication.core import LeaderState

        self.state = state
        self.log.leader_epoch_cache.assign(state.leader_epoch, self.log.log_end_offset)
        self.leader_state = LeaderState(
            broker_id=self.local_broker_id,
            leader_epoch=state.leader_epoch,
            assigned_replicas=state.replicas,
            in_sync_replicas=state.isr,
            log_end_offset=self.log.log_end_offset,
            high_watermark=self.high_watermark_on_takeover(),
            now_ms=now_ms,
            replica_lag_time_max_ms=replica_lag_time_max_ms,
            min_insync_replicas=self.log.config.min_insync_replicas,
            partition_zk_version=state.zk_version,
        )
        self.waiters.wake_all()

    def high_watermark_on_takeover(self) -> int:
        return min(self._high_watermark, self.log.log_end_offset)

    def become_follower(self, state: PartitionState) -> None:
        """Follow ``state.leader`` (Kafka ``Partition.makeFollower``); the fetcher truncates."""
        if self.leader_state is not None:
            self._high_watermark = self.leader_state.high_watermark
        self.state = state
        self.leader_state = None
        self.waiters.wake_all()
