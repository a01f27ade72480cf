"""One partition replica on this broker: its log, its state machine, its waiters.

Every replication rule lives in ``PartitionMachine``; this class is its driver
for the real broker: it feeds it events, carries out the actions that touch the
log (epoch cache, high watermark, log start) or the waiters (produce and fetch
requests parked until the HW or LEO moves), and hands the rest (fetcher changes,
ZooKeeper writes) to the ``ReplicaManager``.

Concurrency: owned by the event loop; no method awaits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from kio.schema.errors import ErrorCode

from replog.replication.core import HwChange
from replog.replication.machine import (
    Action,
    AdvanceLogStart,
    AssignLeaderEpoch,
    DeleteRecordsDecision,
    FetchDecision,
    PartitionLeadership,
    PartitionMachine,
    RoleChange,
)
from replog.replication.waiters import Waiters
from replog.storage.log import AppendInfo, Log
from replog.storage.log_config import LogConfig


class LogFacts:
    """``LogView`` over a storage ``Log``: offsets and epoch cache, read in memory."""

    __slots__ = ("_log",)

    def __init__(self, log_: Log) -> None:
        self._log = log_

    @property
    def log_end_offset(self) -> int:
        return self._log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self._log.log_start_offset

    def epoch_entries(self) -> Sequence[tuple[int, int]]:
        return self._log.leader_epoch_cache.entries()


class Partition:
    def __init__(
        self,
        topic: str,
        partition: int,
        local_broker_id: int,
        log_: Log,
        *,
        high_watermark: int,
        replica_lag_time_max_ms: int,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.local_broker_id = local_broker_id
        self.log = log_
        self.waiters = Waiters()
        self.machine = PartitionMachine(
            local_broker_id,
            LogFacts(log_),
            high_watermark=high_watermark,
            replica_lag_time_max_ms=replica_lag_time_max_ms,
            min_insync_replicas=log_.config.min_insync_replicas,
        )
        self.log.update_high_watermark(self.machine.high_watermark)

    # -- queries (the machine's) -------------------------------------------------

    @property
    def state(self) -> PartitionLeadership | None:
        return self.machine.state

    @property
    def is_leader(self) -> bool:
        return self.machine.is_leader

    @property
    def leader_epoch(self) -> int:
        return self.machine.leader_epoch

    @property
    def high_watermark(self) -> int:
        return self.machine.high_watermark

    @property
    def in_sync_replicas(self) -> tuple[int, ...]:
        return self.machine.in_sync_replicas

    def update_config(self, config: LogConfig) -> None:
        """A topic config change reaches the log and the replication state."""
        self.log.update_config(config)
        self.machine.set_min_insync_replicas(config.min_insync_replicas)

    def check_leader_epoch(self, current_leader_epoch: int) -> ErrorCode:
        """NOT_LEADER_OR_FOLLOWER, or KIP-320 fencing of a request's leader epoch."""
        return self.machine.validate_leader_request(current_leader_epoch)

    # -- carrying out actions -----------------------------------------------------

    def carry_out(self, actions: Iterable[Action]) -> list[Action]:
        """Do the log and waiter actions; return the ones for the replica manager."""
        rest: list[Action] = []
        for action in actions:
            if isinstance(action, HwChange):
                self.log.update_high_watermark(action.new)
                self.waiters.notify()
            elif isinstance(action, AssignLeaderEpoch):
                self.log.leader_epoch_cache.assign(action.leader_epoch, action.start_offset)
            elif isinstance(action, RoleChange):
                self.log.update_high_watermark(self.machine.high_watermark)
                self.waiters.wake_all()
                rest.append(action)
            elif isinstance(action, AdvanceLogStart):
                if self.log.maybe_increment_log_start_offset(action.offset):
                    self.log.delete_segments_below_log_start()
            else:
                rest.append(action)
        return rest

    # -- reads ----------------------------------------------------------------------

    def read(self, decision: FetchDecision, max_bytes: int) -> bytes:
        """The records a fetch may see (``decision`` came from ``machine.on_fetch``)."""
        bounds = decision.bounds
        if bounds is None or bounds.is_empty:
            return b""
        data = self.log.read(bounds.start_offset, max_bytes, max_offset=bounds.end_offset)
        return data.records

    # -- DeleteRecords ------------------------------------------------------------------

    def delete_records(self, offset: int, is_live: Callable[[int], bool]) -> DeleteRecordsDecision:
        """Move the log start up to ``offset`` as leader (the machine decides; see
        ``PartitionMachine.delete_records``); segments wholly below it are deleted."""
        decision = self.machine.delete_records(
            offset, delete_allowed=self.log.config.delete_enabled, is_live=is_live
        )
        self.carry_out(decision.actions)
        return decision

    # -- writes -----------------------------------------------------------------------

    def append_as_leader(
        self, records: bytearray, *, acks: int, now_ms: int
    ) -> tuple[ErrorCode, AppendInfo | None]:
        """Append a produce request's batch; NOT_LEADER_OR_FOLLOWER / NOT_ENOUGH_REPLICAS first."""
        error = self.machine.check_append(acks)
        if error is not ErrorCode.none:
            return error, None
        info = self.log.append_as_leader(records, leader_epoch=self.leader_epoch, now_ms=now_ms)
        if not info.duplicate:
            change = self.machine.on_local_append()
            if change is not None:
                self.log.update_high_watermark(change.new)
            self.waiters.notify()  # follower fetches wait for the log end to move
        return ErrorCode.none, info
