"""One partition replica on this broker: its log, its role, its waiters.

The replication rules (HW, ISR membership, truncation points) live in the pure
core; this class carries out what the core decides: appends to the log,
answers reads, wakes waiting requests. Concurrency: owned by the event loop;
no method awaits between a check and the change it guards.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from replog.replication.core import LeaderState
from replog.replication.fetch_rules import validate_current_leader_epoch
from replog.replication.isr import IsrChangeProposal
from replog.replication.waiters import Waiters
from replog.storage.log import AppendInfo, FetchDataInfo, Log, OffsetOutOfRange

log = logging.getLogger(__name__)


class NotLeaderOrFollower(Exception):
    pass


class NotEnoughReplicas(Exception):
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
        self.leader_state: LeaderState | None = None
        self.waiters = Waiters()
        self._high_watermark = 0  # used while not leading

    # -- role ---------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.leader_state is not None and self.leader_state.is_leading

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
            return self.leader_state.in_sync_replicas
        return self.state.isr if self.state else ()

    def check_leader_epoch(self, current_leader_epoch: int) -> ErrorCode:
        """KIP-320 fencing of a request's leader epoch (the core's rule)."""
        if self.state is None:
            return ErrorCode.none
        return validate_current_leader_epoch(current_leader_epoch, self.state.leader_epoch)

    # -- reads ----------------------------------------------------------------

    def read(self, fetch_offset: int, max_bytes: int, *, up_to_high_watermark: bool) -> ReadResult:
        """Records from ``fetch_offset``; consumers see only what is below the high watermark.

        A consumer fetch between HW and LEO (after a leadership change, seed 000
        question 7) returns no records rather than OFFSET_OUT_OF_RANGE.
        """
        hw = self.high_watermark
        leo = self.log.log_end_offset
        start = self.log.log_start_offset
        if up_to_high_watermark and hw <= fetch_offset <= leo:
            return ReadResult(b"", hw, start, leo)
        try:
            data: FetchDataInfo = self.log.read(
                fetch_offset, max_bytes, max_offset=hw if up_to_high_watermark else None
            )
        except OffsetOutOfRange as exc:
            return ReadResult(b"", hw, start, leo, exc)
        return ReadResult(data.records, hw, start, leo)

    # -- writes ---------------------------------------------------------------

    def append_as_leader(self, records: bytearray, *, acks: int, now_ms: int) -> AppendInfo:
        leader = self.leader_state
        if leader is None or not leader.is_leading:
            raise NotLeaderOrFollower()
        if acks == -1 and leader.can_accept_acks_all() is not None:
            raise NotEnoughReplicas(
                f"ISR {list(leader.in_sync_replicas)} is smaller than "
                f"min.insync.replicas={leader.min_insync_replicas}"
            )
        info = self.log.append_as_leader(records, leader_epoch=self.leader_epoch, now_ms=now_ms)
        if not info.duplicate:
            leader.on_local_append(self.log.log_end_offset)
            self._on_high_watermark_maybe_changed()
        return info

    def on_follower_fetch(
        self, replica_id: int, fetch_offset: int, now_ms: int, *, isr_eligible: bool = True
    ) -> IsrChangeProposal | None:
        """Record a follower's fetch; returns an ISR expansion (or shrink) to write to ZooKeeper.

        ``isr_eligible`` is False when the controller does not count the follower as a
        live broker: a late fetch from a crashed follower must not bring it back into
        the ISR (KIP-903).
        """
        leader = self.leader_state
        if leader is None or not leader.is_leading:
            return None
        if replica_id == self.local_broker_id or replica_id not in leader.assigned_replicas:
            return None
        if not 0 <= fetch_offset <= self.log.log_end_offset:
            return None
        outcome = leader.on_follower_fetch(
            replica_id, fetch_offset, now_ms, isr_eligible=isr_eligible
        )
        if outcome.high_watermark_change is not None:
            self._on_high_watermark_maybe_changed()
        return outcome.isr_change

    def on_isr_update_result(self, proposal: IsrChangeProposal, new_zk_version: int | None) -> bool:
        """Apply ZooKeeper's answer to an ISR change; False if this broker stopped leading."""
        leader = self.leader_state
        if leader is None or not leader.is_leading or leader.pending_isr_change != proposal:
            return True
        outcome = leader.on_isr_update_result(proposal, new_zk_version)
        if outcome.stop_leading is not None:
            log.warning(
                "%s-%d: %s; no longer acting as leader at epoch %d",
                self.topic,
                self.partition,
                outcome.stop_leading.reason,
                outcome.stop_leading.leader_epoch,
            )
            self._high_watermark = leader.high_watermark
            self.waiters.wake_all()
            return False
        if self.state is not None and new_zk_version is not None:
            self.state = PartitionState(
                leader=self.state.leader,
                leader_epoch=self.state.leader_epoch,
                isr=outcome.in_sync_replicas,
                replicas=self.state.replicas,
                zk_version=new_zk_version,
                controller_epoch=self.state.controller_epoch,
            )
        log.info("%s-%d: ISR is now %s", self.topic, self.partition, list(outcome.in_sync_replicas))
        self._on_high_watermark_maybe_changed()
        return True

    def _on_high_watermark_maybe_changed(self) -> None:
        self.log.update_high_watermark(self.high_watermark)
        self.waiters.notify()

    def set_follower_high_watermark(self, high_watermark: int, changed: bool = True) -> None:
        self._high_watermark = high_watermark
        self.log.update_high_watermark(high_watermark)
        if changed:
            self.waiters.notify()

    def truncate_high_watermark(self, log_end_offset: int) -> None:
        self._high_watermark = min(self._high_watermark, log_end_offset)

    def restore_high_watermark(self, hw: int) -> None:
        self._high_watermark = min(max(hw, self.log.log_start_offset), self.log.log_end_offset)
        self.log.update_high_watermark(self._high_watermark)

    # -- role changes -----------------------------------------------------------

    def become_leader(
        self, state: PartitionState, now_ms: int, replica_lag_time_max_ms: int
    ) -> None:
        """Take leadership at ``state.leader_epoch`` (Kafka ``Partition.makeLeader``)."""
        self.state = state
        self.log.leader_epoch_cache.assign(state.leader_epoch, self.log.log_end_offset)
        self.leader_state = LeaderState(
            broker_id=self.local_broker_id,
            leader_epoch=state.leader_epoch,
            assigned_replicas=state.replicas,
            in_sync_replicas=state.isr,
            log_end_offset=self.log.log_end_offset,
            high_watermark=min(self._high_watermark, self.log.log_end_offset),
            now_ms=now_ms,
            replica_lag_time_max_ms=replica_lag_time_max_ms,
            min_insync_replicas=self.log.config.min_insync_replicas,
            partition_zk_version=state.zk_version,
        )
        self._on_high_watermark_maybe_changed()
        self.waiters.wake_all()

    def become_follower(self, state: PartitionState) -> None:
        """Follow ``state.leader`` (Kafka ``Partition.makeFollower``); the fetcher truncates."""
        if self.leader_state is not None:
            self._high_watermark = self.leader_state.high_watermark
            if self.leader_state.is_leading:
                self.leader_state.resign(f"broker {state.leader} leads epoch {state.leader_epoch}")
        self.state = state
        self.leader_state = None
        self.waiters.wake_all()

    def stop(self) -> None:
        if self.leader_state is not None:
            self._high_watermark = self.leader_state.high_watermark
        self.state = None
        self.leader_state = None
        self.waiters.wake_all()
