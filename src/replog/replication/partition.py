"""One partition replica on this broker: its log, its state machine, its delayed operations.

Every replication rule lives in ``PartitionMachine``; this class is its only
driver on the broker, and the only code that touches the replica's log: it
feeds the machine events, carries out the actions that touch the log (epoch
cache, high watermark, log start, a follower's appends and truncations) and
completes the delayed operations watching the partition (``delayed``: produce,
fetch and DeleteRecords requests waiting for the HW, the log end, the low
watermark or a role change), and hands the rest (fetcher changes, ZooKeeper
writes) back to its caller, the ``ReplicaManager``. Other packages ask it
through small named methods, never through its machine or log.

Concurrency: owned by the event loop; no method awaits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from kio.schema.errors import ErrorCode

from replog.protocol.records import EndTxnMarker, iter_batches
from replog.replication.actions import AdvanceLogStart
from replog.replication.core import AcksAllStatus, HwChange
from replog.replication.delayed import DelayedOperation, WatchList
from replog.replication.delete_records import DeleteRecordsStatus
from replog.replication.fetch_rules import READ_COMMITTED, READ_UNCOMMITTED, FetchPartitionRequest
from replog.replication.follower import EpochRequest, RestartAt
from replog.replication.isr import IsrChangeProposal
from replog.replication.machine import (
    Action,
    AssignLeaderEpoch,
    DeleteRecordsDecision,
    FetchDecision,
    PartitionLeadership,
    PartitionMachine,
    Role,
    RoleChange,
)
from replog.replication.quota import is_throttled
from replog.replication.truncation import EpochEndOffset, TruncationDecision
from replog.storage.log import AppendInfo, Log, UnexpectedAppendOffset
from replog.storage.log_config import LogConfig
from replog.storage.producer_state import (
    ProducerStateEntry,
    VerificationGuard,
    last_stable_offset,
)
from replog.storage.segment import TimestampAndOffset
from replog.storage.txn_index import AbortedTxn
from replog.zk.fencing import UNKNOWN_BROKER_EPOCH


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
        self._log = log_
        self._delayed = WatchList(self)
        self._machine = PartitionMachine(
            local_broker_id,
            LogFacts(log_),
            high_watermark=high_watermark,
            replica_lag_time_max_ms=replica_lag_time_max_ms,
            min_insync_replicas=log_.config.min_insync_replicas,
        )
        self._log.update_high_watermark(self._machine.high_watermark)

    # -- queries (the machine's) -------------------------------------------------

    @property
    def state(self) -> PartitionLeadership | None:
        return self._machine.state

    @property
    def role(self) -> Role:
        return self._machine.role

    @property
    def is_leader(self) -> bool:
        return self._machine.is_leader

    @property
    def leader_epoch(self) -> int:
        return self._machine.leader_epoch

    @property
    def role_leader_epoch(self) -> int:
        """The leader epoch the current role began at (-1: no role); a fetcher or ISR
        write made in one role checks it after an await."""
        return self._machine.role_leader_epoch

    @property
    def high_watermark(self) -> int:
        return self._machine.high_watermark

    @property
    def in_sync_replicas(self) -> tuple[int, ...]:
        return self._machine.in_sync_replicas

    @property
    def min_insync_replicas(self) -> int:
        return self._machine.min_insync_replicas

    @property
    def high_watermark_behind_epoch_start(self) -> bool:
        return self._machine.high_watermark_behind_epoch_start

    @property
    def is_fetching(self) -> bool:
        return self._machine.is_fetching

    @property
    def is_truncating(self) -> bool:
        return self._machine.is_truncating

    @property
    def fetch_offset(self) -> int:
        """A follower's next fetch offset."""
        return self._machine.fetch_offset

    def validate_leader_request(self, current_leader_epoch: int) -> ErrorCode:
        """KIP-320 fencing of a request's leader epoch, then NOT_LEADER_OR_FOLLOWER."""
        return self._machine.validate_leader_request(current_leader_epoch)

    def validate_replica_request(self, current_leader_epoch: int) -> ErrorCode:
        """KIP-320 fencing for a request any replica answers (a debugging client's)."""
        return self._machine.validate_replica_request(current_leader_epoch)

    def answer_offsets_for_leader_epoch(
        self, current_leader_epoch: int, requested_epoch: int
    ) -> tuple[ErrorCode, EpochEndOffset]:
        return self._machine.answer_offsets_for_leader_epoch(current_leader_epoch, requested_epoch)

    def acks_all_status(self, required_offset: int, leader_epoch: int) -> AcksAllStatus:
        return self._machine.acks_all_status(required_offset, leader_epoch)

    def delete_records_status(
        self, requested_offset: int, leader_epoch: int, is_live: Callable[[int], bool]
    ) -> DeleteRecordsStatus:
        return self._machine.delete_records_status(requested_offset, leader_epoch, is_live)

    def fetch_ready(
        self, replica_id: int, fetch_offset: int, isolation_level: int = READ_UNCOMMITTED
    ) -> bool:
        if replica_id < 0 and isolation_level == READ_COMMITTED:
            return self._machine.fetch_ready(replica_id, fetch_offset, self.last_stable_offset)
        return self._machine.fetch_ready(replica_id, fetch_offset)

    @property
    def last_stable_offset_lag(self) -> int:
        """Kafka's ``LastStableOffsetLag`` gauge: HW - LSO as leader, 0 otherwise."""
        if not self.is_leader:
            return 0
        return self.high_watermark - self.last_stable_offset

    @property
    def last_stable_offset(self) -> int:
        """The LSO: read_committed consumers read below it (``Log.last_stable_offset``)."""
        return last_stable_offset(
            self.high_watermark, self._log.log_start_offset, self._log.first_unstable_offset()
        )

    # -- queries (the log's) ---------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log.log_end_offset

    @property
    def log_dir(self) -> Path:
        """The log dir (a ``log.dirs`` entry) the replica's log lives in."""
        return self._log.dir.parent

    def size_in_bytes(self) -> int:
        return self._log.size_in_bytes()

    @property
    def segment_count(self) -> int:
        return len(self._log.segments)

    def earliest_epoch(self) -> int | None:
        return self._log.earliest_epoch()

    def offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        return self._log.offset_for_timestamp(timestamp)

    def max_timestamp_and_offset(self) -> TimestampAndOffset | None:
        return self._log.max_timestamp_and_offset()

    def producer_states(self) -> Iterable[ProducerStateEntry]:
        """The log's active producers (DescribeProducers)."""
        return self._log.producer_state.producers.values()

    def read_records(self, start_offset: int, max_bytes: int, max_offset: int) -> bytes:
        """Records from ``start_offset`` below ``max_offset`` (a local reader's, such as
        the group coordinator loading its partition up to the high watermark)."""
        return self._log.read(start_offset, max_bytes, max_offset=max_offset).records

    def throttled_as_leader(self) -> bool:
        """``leader.replication.throttled.replicas`` lists this replica."""
        raw = self._log.config.leader_replication_throttled_replicas
        return is_throttled(raw, self.partition, self.local_broker_id)

    def throttled_as_follower(self) -> bool:
        """``follower.replication.throttled.replicas`` lists this replica."""
        raw = self._log.config.follower_replication_throttled_replicas
        return is_throttled(raw, self.partition, self.local_broker_id)

    def update_config(self, config: LogConfig) -> None:
        """A topic config change reaches the log and the replication state."""
        self._log.update_config(config)
        self._machine.set_min_insync_replicas(config.min_insync_replicas)

    # -- delayed operations ------------------------------------------------------------

    def watch(self, operation: DelayedOperation) -> None:
        """``operation`` waits on this partition: it is tried whenever what it reads moves."""
        self._delayed.watch(operation)

    def _complete_delayed(self) -> None:
        self._delayed.try_complete_all()

    # -- carrying out actions -----------------------------------------------------

    def _carry_out(self, actions: Iterable[Action]) -> list[Action]:
        """Do the log actions and complete what waits on them; return the actions for
        the replica manager (fetcher changes, ZooKeeper writes)."""
        rest: list[Action] = []
        moved = False
        for action in actions:
            if isinstance(action, HwChange):
                self._log.update_high_watermark(action.new)
                moved = True
            elif isinstance(action, AssignLeaderEpoch):
                self._log.leader_epoch_cache.assign(action.leader_epoch, action.start_offset)
            elif isinstance(action, RoleChange):
                self._log.update_high_watermark(self._machine.high_watermark)
                moved = True
                rest.append(action)
            elif isinstance(action, AdvanceLogStart):
                if self._log.maybe_increment_log_start_offset(action.offset):
                    self._log.delete_segments_below_log_start()
                moved = True
            else:
                rest.append(action)
        if moved:
            self._complete_delayed()
        return rest

    # -- the controller and the ISR write --------------------------------------------

    def make_leader_or_follower(
        self, state: PartitionLeadership, now_ms: int
    ) -> tuple[ErrorCode, list[Action]]:
        """One partition of a LeaderAndIsr (``PartitionMachine.on_leader_and_isr``)."""
        code, actions = self._machine.on_leader_and_isr(state, now_ms)
        return code, self._carry_out(actions)

    def stop(self) -> list[Action]:
        """StopReplica, or the log dir went offline."""
        return self._carry_out(self._machine.stop())

    def on_session_expired(self) -> list[Action]:
        return self._carry_out(self._machine.on_session_expired())

    def on_session_renewed(self) -> None:
        self._machine.on_session_renewed()

    def maybe_shrink_isr(self, now_ms: int) -> IsrChangeProposal | None:
        return self._machine.maybe_shrink_isr(now_ms)

    def on_isr_update_result(
        self, proposal: IsrChangeProposal, new_zk_version: int | None, *, ineligible: bool = False
    ) -> list[Action]:
        return self._carry_out(
            self._machine.on_isr_update_result(proposal, new_zk_version, ineligible=ineligible)
        )

    # -- reads ----------------------------------------------------------------------

    def fetch(
        self,
        replica_id: int,
        request: FetchPartitionRequest,
        now_ms: int,
        *,
        isolation_level: int = READ_UNCOMMITTED,
        broker_epoch: int = UNKNOWN_BROKER_EPOCH,
        isr_eligible: bool,
        replication_throttled: bool,
    ) -> tuple[FetchDecision, list[Action]]:
        """A fetch arrived (``PartitionMachine.on_fetch`` decides); the actions left for
        the replica manager. Read the records with ``read``."""
        decision = self._machine.on_fetch(
            replica_id,
            request.fetch_offset,
            request.current_leader_epoch,
            now_ms,
            isolation_level=isolation_level,
            broker_epoch=broker_epoch,
            isr_eligible=isr_eligible,
            follower_log_start_offset=request.log_start_offset,
            last_fetched_epoch=request.last_fetched_epoch,
            replication_throttled=replication_throttled,
            first_unstable_offset=self._log.first_unstable_offset(),
        )
        rest = self._carry_out(decision.actions) if decision.actions else []
        if decision.follower_log_start_advanced:
            self._complete_delayed()  # DeleteRecords waiting for the low watermark
        return decision, rest

    def read(self, decision: FetchDecision, max_bytes: int) -> bytes:
        """The records a fetch may see (``decision`` came from ``fetch``)."""
        bounds = decision.bounds
        if bounds is None or bounds.is_empty:
            return b""
        data = self._log.read(bounds.start_offset, max_bytes, max_offset=bounds.end_offset)
        return data.records

    def aborted_transactions(self, fetch_offset: int, records: bytes) -> list[AbortedTxn]:
        """The aborted transactions a read_committed consumer needs with ``records`` (read
        from ``fetch_offset``), Kafka ``addAbortedTransactions``: those overlapping
        ``[fetch_offset, the offset after the last batch read)``."""
        last = None
        for _, header in iter_batches(records, verify=False):
            last = header
        if last is None:
            return []
        return self._log.collect_aborted_transactions(fetch_offset, last.next_offset)

    # -- DeleteRecords ------------------------------------------------------------------

    def delete_records(self, offset: int, is_live: Callable[[int], bool]) -> DeleteRecordsDecision:
        """Move the log start up to ``offset`` as leader (the machine decides; see
        ``PartitionMachine.delete_records``); segments wholly below it are deleted."""
        decision = self._machine.delete_records(
            offset, delete_allowed=self._log.config.delete_enabled, is_live=is_live
        )
        self._carry_out(decision.actions)
        return decision

    # -- writes as leader ---------------------------------------------------------------

    def maybe_start_transaction_verification(self, producer_id: int) -> VerificationGuard | None:
        """KIP-890: the guard a verification of the producer's transaction carries, or None
        when its transaction is open here (nothing to verify)."""
        return self._log.producer_state.maybe_start_verification(producer_id)

    def append_as_leader(
        self,
        records: bytearray,
        *,
        acks: int,
        now_ms: int,
        verification_required: bool = False,
        verification_guard: VerificationGuard | None = None,
        from_coordinator: bool = False,
    ) -> tuple[ErrorCode, AppendInfo | None]:
        """Append a produce request's batch; NOT_LEADER_OR_FOLLOWER / NOT_ENOUGH_REPLICAS
        first. ``verification_*``, ``from_coordinator``: see ``Log.append_as_leader``."""
        error = self._machine.check_append(acks)
        if error is not ErrorCode.none:
            return error, None
        info = self._log.append_as_leader(
            records,
            leader_epoch=self.leader_epoch,
            now_ms=now_ms,
            verification_required=verification_required,
            verification_guard=verification_guard,
            from_coordinator=from_coordinator,
        )
        if not info.duplicate:
            self._appended_as_leader()
        return ErrorCode.none, info

    def append_marker_as_leader(
        self, producer_id: int, producer_epoch: int, marker: EndTxnMarker, *, now_ms: int
    ) -> tuple[ErrorCode, AppendInfo | None]:
        """Append a transaction's COMMIT or ABORT marker from its coordinator (always
        acks=all, as Kafka: NOT_ENOUGH_REPLICAS below ``min.insync.replicas``)."""
        error = self._machine.check_append(-1)
        if error is not ErrorCode.none:
            return error, None
        info = self._log.append_marker_as_leader(
            producer_id, producer_epoch, marker, leader_epoch=self.leader_epoch, now_ms=now_ms
        )
        self._appended_as_leader()
        return ErrorCode.none, info

    def _appended_as_leader(self) -> None:
        change = self._machine.on_local_append()
        if change is not None:
            self._log.update_high_watermark(change.new)
        # follower fetches wait for the log end to move, read_committed ones for the LSO
        self._complete_delayed()

    # -- following: truncation and appends (the fetcher's IO, the machine's rules) ----------

    def next_truncation_step(self) -> EpochRequest | TruncationDecision:
        return self._machine.next_truncation_step()

    def on_epoch_response(
        self, error: ErrorCode, answer: EpochEndOffset
    ) -> TruncationDecision | None:
        return self._machine.on_epoch_response(error, answer)

    def truncate(self, decision: TruncationDecision) -> tuple[int, int]:
        """Truncate the log as ``decision`` says; (log end before, after). OSError: the
        disk failed, and the machine was not told."""
        before = self._log.log_end_offset
        self._log.truncate_to(decision.offset)
        self._machine.on_truncated(decision)
        return before, self._log.log_end_offset

    def append_as_follower(
        self,
        records: bytes,
        *,
        leader_high_watermark: int,
        leader_log_start_offset: int,
        now_ms: int,
    ) -> list[Action]:
        """Fetched records (maybe none) and the leader's offsets: append, then tell the
        machine. ``UnexpectedAppendOffset``: the records do not start at our log end
        (the machine goes back to truncation); OSError: the disk failed."""
        if records:
            try:
                self._log.append_as_follower(records, now_ms=now_ms)
            except UnexpectedAppendOffset:
                self._machine.on_append_mismatch()
                raise
        return self._carry_out(
            self._machine.on_fetch_response(
                leader_high_watermark=leader_high_watermark,
                leader_log_start_offset=leader_log_start_offset,
            )
        )

    def on_fetch_offset_out_of_range(
        self, leader_log_start_offset: int, leader_log_end_offset: int
    ) -> tuple[int, int] | None:
        """The leader answered OFFSET_OUT_OF_RANGE: truncate, or start over at the
        leader's log start (Kafka ``fetchOffsetAndTruncate``); (log end before, after),
        or None when nothing was done. OSError: the disk failed."""
        effect = self._machine.on_fetch_offset_out_of_range(
            leader_log_start_offset, leader_log_end_offset
        )
        if isinstance(effect, TruncationDecision):
            return self.truncate(effect)
        if isinstance(effect, RestartAt):
            before = self._log.log_end_offset
            self._log.truncate_fully_and_start_at(effect.offset)
            return before, self._log.log_end_offset
        return None
