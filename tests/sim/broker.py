"""One simulated replica: an in-memory durable log plus a minimal IO layer over the core.

The glue here is what ``replica_manager`` / ``partition`` / ``fetcher`` do for
real, cut down to one partition: apply LeaderAndIsr, serve and send fetches and
OffsetsForLeaderEpoch, append produce requests, write ISR changes to
"ZooKeeper", complete ``acks=all`` produces when the core says so. Like a real
IO layer over TCP it processes each peer's requests at most once and in order
(sequence numbers per connection stand in for TCP), and matches responses to
the one request it has outstanding.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from replog.replication.core import AcksAllStatus, LeaderState
from replog.replication.fetch_rules import (
    FetchIsolation,
    fetch_bounds,
    validate_current_leader_epoch,
)
from replog.replication.follower import EpochRequest as EpochStep
from replog.replication.follower import FollowerPhase, FollowerState, RestartAt
from replog.replication.isr import (
    ISR_CHANGE_PROPAGATION_CHECK_INTERVAL_MS,
    IsrChangePropagation,
    IsrChangeProposal,
    isr_expiration_interval_ms,
)
from replog.replication.truncation import (
    TruncationDecision,
    assign_epoch,
    end_offset_for_epoch,
    high_watermark_truncation,
    latest_epoch,
    truncate_epochs_from_end,
)
from sim.controller import INELIGIBLE
from sim.network import (
    EpochRequest,
    EpochResponse,
    FetchRequest,
    FetchResponse,
    IsrUpdateResult,
    LeaderAndIsr,
    ProduceRequest,
    Record,
    Timer,
    ZkPartitionState,
)

if TYPE_CHECKING:
    from sim.world import World

NO_LEADER = -1
MAX_RECORDS_PER_FETCH = 25


class TruncationRule(enum.Enum):
    LEADER_EPOCH = "leader_epoch"  # KIP-101 / KIP-279
    HIGH_WATERMARK = "high_watermark"  # the old rule, to show it loses data


class DurableLog:
    """Records (offset = index), the flushed prefix, the epoch cache and the HW checkpoint."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.flushed = 0
        self.epochs: tuple[tuple[int, int], ...] = ()
        self.hw_checkpoint = 0
        self.truncated_to: int | None = None  # lowest truncation point since last looked at

    @property
    def log_end_offset(self) -> int:
        return len(self.records)

    def append(self, record: Record, *, flush: bool) -> None:
        if self.records and record.epoch < self.records[-1].epoch:
            raise AssertionError(f"epoch went back in the log: {self.records[-1]} then {record}")
        latest = latest_epoch(self.epochs)
        if latest is None or record.epoch > latest:
            self.epochs = assign_epoch(self.epochs, record.epoch, len(self.records))
        self.records.append(record)
        if flush:
            self.flushed = len(self.records)

    def assign_leader_epoch(self, epoch: int) -> None:
        self.epochs = assign_epoch(self.epochs, epoch, len(self.records))

    def truncate_to(self, offset: int) -> None:
        offset = min(offset, len(self.records))
        if offset < len(self.records):
            del self.records[offset:]
            self.flushed = min(self.flushed, offset)
            self.truncated_to = (
                offset if self.truncated_to is None else min(self.truncated_to, offset)
            )
        # like Kafka's truncateTo: the epoch cache is cut at the end even when the log is not
        self.epochs = truncate_epochs_from_end(self.epochs, offset)

    def lose_unflushed(self) -> None:
        self.truncate_to(self.flushed)


class Role(enum.Enum):
    OFFLINE = "offline"  # crashed
    NONE = "none"  # no leader, not assigned, or fenced after a rejected ISR write
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclass
class PendingAck:
    required_offset: int
    payload: str
    owner: LeaderState


class SimBroker:
    """One replica. Owned by the single-threaded world; every handler runs to completion."""

    def __init__(self, broker_id: int, world: World) -> None:
        self.id = broker_id
        self.world = world
        self.log = DurableLog()
        self.alive = True
        self.paused = False
        self.incarnation = 0
        self.deferred: list[object] = []
        self.pause_token: int | None = None
        self.session_expired = False
        self.broker_epoch = -1  # from the registration in "ZooKeeper"
        self.truncations = 0
        self.term_seq = 0  # bumped on every role change: HW must not go back within one
        self.responses_in_term = 0
        self._reset_volatile()

    # -- lifecycle ------------------------------------------------------------------------

    def _reset_volatile(self) -> None:
        self.term_seq += 1
        self.responses_in_term = 0
        self.role = Role.NONE if self.alive else Role.OFFLINE
        self.leader_state: LeaderState | None = None
        self.follower_state: FollowerState | None = None
        self.known_leader_epoch = -1
        self.hw = min(self.log.hw_checkpoint, self.log.log_end_offset)
        self.pending_acks: list[PendingAck] = []
        self.outstanding: tuple[str, int] | None = None
        self.next_corr = 0
        self.last_corr_from: dict[tuple[int, int], int] = {}
        self.max_incarnation_from: dict[int, int] = {}
        self.propagation = IsrChangePropagation.starting_at(self.world.now)
        self.deferred = []

    def crash(self, *, lose_unflushed: bool) -> None:
        self.alive = False
        self.paused = False
        if lose_unflushed:
            self.log.lose_unflushed()
        self._reset_volatile()
        self.role = Role.OFFLINE

    def restart(self) -> None:
        self.alive = True
        self.incarnation += 1
        self._reset_volatile()
        self._arm(self.world.config.hw_checkpoint_interval_ms, "hw_checkpoint")
        interval = self.world.config.flush_interval_ms
        if not self.world.config.flush_on_append and interval is not None:
            self._arm(self.world.rng.randint(200, interval), "flush")

    @property
    def high_watermark(self) -> int:
        if self.leader_state is not None:
            return self.leader_state.high_watermark
        if self.follower_state is not None:
            return self.follower_state.high_watermark
        return self.hw

    @property
    def is_acting_leader(self) -> bool:
        return self.leader_state is not None and self.leader_state.is_leading

    def describe(self) -> str:
        if not self.alive:
            return f"b{self.id}[down leo={self.log.log_end_offset} flushed={self.log.flushed}]"
        role = self.role.value[0].upper()
        extra = ""
        if self.leader_state is not None:
            extra = f" isr={list(self.leader_state.maximal_in_sync_replicas)}"
        elif self.follower_state is not None:
            extra = f" {self.follower_state.phase.value[:5]}"
        paused = " paused" if self.paused else ""
        return (
            f"b{self.id}[{role} e{self.known_leader_epoch} leo={self.log.log_end_offset} "
            f"hw={self.high_watermark}{extra}{paused}]"
        )

    # -- helpers ---------------------------------------------------------------------------

    def _trace(self, text: str) -> None:
        self.world.trace(f"b{self.id}: {text}")

    def _arm(self, delay_ms: int, kind: str, token: object = None) -> None:
        self.world.queue.push(
            self.world.now + delay_ms, Timer(self.id, self.incarnation, kind, token)
        )

    def _corr(self) -> int:
        self.next_corr += 1
        return self.next_corr

    def _accept_request(self, src: int, src_incarnation: int, corr: int) -> bool:
        """At most once and in order per connection, as TCP gives the real IO layer."""
        if src_incarnation < self.max_incarnation_from.get(src, -1):
            return False
        self.max_incarnation_from[src] = src_incarnation
        key = (src, src_incarnation)
        if corr <= self.last_corr_from.get(key, 0):
            return False
        self.last_corr_from[key] = corr
        return True

    # -- controller ----------------------------------------------------------------------------

    def on_leader_and_isr(self, msg: LeaderAndIsr) -> None:
        if msg.broker_epoch != self.broker_epoch:
            return  # addressed to an earlier registration of this broker (KIP-380)
        self.apply_partition_state(msg.state)

    def apply_partition_state(self, st: ZkPartitionState) -> None:
        if st.leader_epoch <= self.known_leader_epoch:
            return  # stale or already applied
        self._stop_current_role(f"LeaderAndIsr epoch {st.leader_epoch}")
        if st.leader_epoch < self.known_leader_epoch:
            raise AssertionError("leader epoch went back")
        self.known_leader_epoch = st.leader_epoch
        if st.leader == self.id:
            self._become_leader(st)
        elif st.leader == NO_LEADER or self.id not in st.assigned:
            self.role = Role.NONE
            self._trace(f"no leader at epoch {st.leader_epoch}")
        else:
            self._become_follower(st)

    def _stop_current_role(self, why: str) -> None:
        if self.leader_state is not None:
            self.hw = self.leader_state.high_watermark
            if self.leader_state.is_leading:
                self.leader_state.resign(why)
            self.leader_state = None
        if self.follower_state is not None:
            self.hw = self.follower_state.high_watermark
            self.follower_state = None
        self.outstanding = None
        self._fail_pending_acks()
        self.role = Role.NONE
        self.term_seq += 1
        self.responses_in_term = 0

    def _become_leader(self, st: ZkPartitionState) -> None:
        cfg = self.world.config
        self.log.assign_leader_epoch(st.leader_epoch)
        self.leader_state = LeaderState(
            broker_id=self.id,
            leader_epoch=st.leader_epoch,
            assigned_replicas=st.assigned,
            in_sync_replicas=st.isr,
            log_end_offset=self.log.log_end_offset,
            high_watermark=min(self.hw, self.log.log_end_offset),
            now_ms=self.world.now,
            replica_lag_time_max_ms=cfg.replica_lag_time_max_ms,
            min_insync_replicas=cfg.min_insync_replicas,
            partition_zk_version=st.zk_version,
        )
        self.role = Role.LEADER
        self._trace(
            f"leader at epoch {st.leader_epoch} leo={self.log.log_end_offset} "
            f"hw={self.leader_state.high_watermark} isr={list(st.isr)}"
        )
        ls = self.leader_state
        self._arm(isr_expiration_interval_ms(cfg.replica_lag_time_max_ms), "isr_expiration", ls)
        self._arm(ISR_CHANGE_PROPAGATION_CHECK_INTERVAL_MS, "isr_propagation", ls)

    def _become_follower(self, st: ZkPartitionState) -> None:
        self.role = Role.FOLLOWER
        fs = FollowerState(
            broker_id=self.id,
            leader_id=st.leader,
            leader_epoch=st.leader_epoch,
            log_end_offset=self.log.log_end_offset,
            high_watermark=self.hw,
        )
        self.follower_state = fs
        self._trace(f"follower of b{st.leader} at epoch {st.leader_epoch}")
        if self.world.config.truncation_rule is TruncationRule.HIGH_WATERMARK:
            self._apply_truncation(
                high_watermark_truncation(self.log.log_end_offset, fs.high_watermark)
            )
        else:
            self._advance_truncation()

    # -- follower side ------------------------------------------------------------------------

    def _advance_truncation(self) -> None:
        fs = self.follower_state
        assert fs is not None and fs.phase is FollowerPhase.TRUNCATING
        step = fs.next_truncation_step(self.log.epochs)
        if isinstance(step, TruncationDecision):
            self._apply_truncation(step)
            return
        assert isinstance(step, EpochStep)
        corr = self._corr()
        self.outstanding = ("epoch", corr)
        self.world.network.send(
            self.world.now,
            self.id,
            fs.leader_id,
            EpochRequest(
                self.id,
                self.incarnation,
                fs.leader_id,
                corr,
                step.current_leader_epoch,
                step.requested_epoch,
            ),
        )
        self._arm(self.world.config.request_timeout_ms, "request_timeout", corr)

    def _apply_truncation(self, decision: TruncationDecision) -> None:
        fs = self.follower_state
        assert fs is not None
        before = self.log.log_end_offset
        self.log.truncate_to(decision.offset)
        if self.log.log_end_offset < before:
            self.truncations += 1
            self._trace(f"truncated {before} -> {self.log.log_end_offset}")
        fs.on_truncated(decision, self.log.log_end_offset)
        if fs.phase is FollowerPhase.FETCHING:
            self._arm(0, "send_fetch", fs)
        else:
            self._advance_truncation()

    def _send_fetch(self) -> None:
        fs = self.follower_state
        if fs is None or fs.phase is not FollowerPhase.FETCHING or self.outstanding is not None:
            return
        corr = self._corr()
        self.outstanding = ("fetch", corr)
        self.world.network.send(
            self.world.now,
            self.id,
            fs.leader_id,
            FetchRequest(
                self.id,
                self.incarnation,
                fs.leader_id,
                corr,
                fs.leader_epoch,
                fs.fetch_offset,
                self.broker_epoch,
            ),
        )
        self._arm(self.world.config.request_timeout_ms, "request_timeout", corr)

    def _response_is_current(self, kind: str, dst_incarnation: int, corr: int, src: int) -> bool:
        fs = self.follower_state
        return (
            dst_incarnation == self.incarnation
            and self.outstanding == (kind, corr)
            and fs is not None
            and fs.leader_id == src
        )

    def on_fetch_response(self, msg: FetchResponse) -> None:
        if not self._response_is_current("fetch", msg.dst_incarnation, msg.corr, msg.src):
            return
        self.outstanding = None
        fs = self.follower_state
        assert fs is not None
        cfg = self.world.config
        if msg.error is ErrorCode.offset_out_of_range:
            action = fs.on_offset_out_of_range(msg.log_start_offset, msg.log_end_offset)
            self._trace(f"fetch out of range (leader leo {msg.log_end_offset}): {action}")
            if isinstance(action, TruncationDecision):
                self._apply_truncation(action)
            elif isinstance(action, RestartAt):
                raise AssertionError("log start offsets are always 0 in the simulation")
            else:
                self._arm(cfg.fetch_backoff_ms, "send_fetch", fs)
            return
        if msg.error is not ErrorCode.none:
            self._arm(cfg.fetch_backoff_ms, "send_fetch", fs)
            return
        if msg.base_offset != self.log.log_end_offset:
            raise AssertionError(
                f"fetch answer at {msg.base_offset}, log ends at {self.log.log_end_offset}"
            )
        for record in msg.records:
            self.log.append(record, flush=cfg.flush_on_append)
        fs.on_fetch_response(self.log.log_end_offset, msg.high_watermark)
        self.responses_in_term += 1
        delay = 0 if msg.records else cfg.fetch_wait_ms
        self._arm(delay, "send_fetch", fs)

    def on_epoch_response(self, msg: EpochResponse) -> None:
        if not self._response_is_current("epoch", msg.dst_incarnation, msg.corr, msg.src):
            return
        self.outstanding = None
        fs = self.follower_state
        assert fs is not None
        if msg.error is not ErrorCode.none:
            self._arm(self.world.config.fetch_backoff_ms, "retry_truncation", fs)
            return
        decision = fs.on_epoch_response(self.log.epochs, msg.answer)
        self._trace(f"epoch answer {msg.answer} -> truncate to {decision.offset}")
        self._apply_truncation(decision)

    # -- leader side -------------------------------------------------------------------------------

    def _leading(self, current_leader_epoch: int) -> tuple[LeaderState | None, ErrorCode]:
        ls = self.leader_state
        if ls is None or not ls.is_leading:
            return None, ErrorCode.not_leader_or_follower
        err = validate_current_leader_epoch(current_leader_epoch, ls.leader_epoch)
        return (ls, err) if err is ErrorCode.none else (None, err)

    def on_fetch_request(self, req: FetchRequest) -> None:
        if not self._accept_request(req.src, req.src_incarnation, req.corr):
            return
        now = self.world.now
        ls, err = self._leading(req.current_leader_epoch)
        leo = self.log.log_end_offset
        if ls is None:
            self._reply_fetch(req, err, ())
            return
        bounds = fetch_bounds(
            fetch_offset=req.fetch_offset,
            log_start_offset=0,
            high_watermark=ls.high_watermark,
            log_end_offset=leo,
            isolation=FetchIsolation.LOG_END,
        )
        if bounds.error is not ErrorCode.none:
            self._reply_fetch(req, bounds.error, ())
            return
        outcome = ls.on_follower_fetch(
            req.src, req.fetch_offset, now, broker_epoch=req.broker_epoch
        )
        if outcome.follower_lost_records:
            self._trace(f"b{req.src} fetched at {req.fetch_offset} below HW: lost records")
        if outcome.isr_change is not None:
            self._submit_isr_change(ls, outcome.isr_change)
        if outcome.high_watermark_change is not None:
            self._complete_acks()
        end = min(bounds.end_offset, bounds.start_offset + MAX_RECORDS_PER_FETCH)
        self._reply_fetch(req, ErrorCode.none, tuple(self.log.records[bounds.start_offset : end]))

    def _reply_fetch(
        self, req: FetchRequest, error: ErrorCode, records: tuple[Record, ...]
    ) -> None:
        self.world.network.send(
            self.world.now,
            self.id,
            req.src,
            FetchResponse(
                self.id,
                req.src,
                req.src_incarnation,
                req.corr,
                error,
                req.fetch_offset,
                records,
                self.high_watermark,
                0,
                self.log.log_end_offset,
            ),
        )

    def on_epoch_request(self, req: EpochRequest) -> None:
        if not self._accept_request(req.src, req.src_incarnation, req.corr):
            return
        ls, err = self._leading(req.current_leader_epoch)
        answer = end_offset_for_epoch(self.log.epochs, self.log.log_end_offset, req.requested_epoch)
        self.world.network.send(
            self.world.now,
            self.id,
            req.src,
            EpochResponse(self.id, req.src, req.src_incarnation, req.corr, err, answer),
        )

    def on_produce(self, req: ProduceRequest) -> None:
        ls = self.leader_state
        if ls is None or not ls.is_leading:
            return  # NOT_LEADER_OR_FOLLOWER to the producer
        if ls.can_accept_acks_all() is not None:
            return  # NOT_ENOUGH_REPLICAS
        self.log.append(
            Record(ls.leader_epoch, req.payload), flush=self.world.config.flush_on_append
        )
        self.pending_acks.append(PendingAck(self.log.log_end_offset, req.payload, ls))
        self._trace(f"append {req.payload}@{self.log.log_end_offset - 1}")
        ls.on_local_append(self.log.log_end_offset)
        self._complete_acks()

    def _complete_acks(self) -> None:
        keep: list[PendingAck] = []
        for ack in self.pending_acks:
            if ack.owner is not self.leader_state or not ack.owner.is_leading:
                continue
            status = ack.owner.acks_all_status(ack.required_offset)
            if status is AcksAllStatus.SATISFIED:
                self.world.on_acked(self, ack.required_offset - 1, ack.payload)
            elif status is AcksAllStatus.PENDING:
                keep.append(ack)
        self.pending_acks = keep

    def _fail_pending_acks(self) -> None:
        self.pending_acks = []

    def _submit_isr_change(self, ls: LeaderState, proposal: IsrChangeProposal) -> None:
        self._trace(f"propose {proposal.kind.name} -> {list(proposal.new_isr)}")
        result = self.world.controller.conditional_update(proposal)
        ineligible = result == INELIGIBLE
        version = None if ineligible else result
        self.world.network.send_reliable(
            self.world.now,
            self.id,
            IsrUpdateResult(self.id, self.incarnation, ls, proposal, version, ineligible),
            channel="zookeeper",
        )

    def on_isr_update_result(self, msg: IsrUpdateResult) -> None:
        ls = self.leader_state
        if msg.dst_incarnation != self.incarnation or ls is not msg.owner or not ls.is_leading:
            return
        if msg.ineligible:
            self._trace(f"ISR expansion {list(msg.proposal.new_isr)} refused: stale broker epoch")
            self.world.count("isr_ineligible")
            ls.on_isr_update_ineligible(msg.proposal)
            return
        outcome = ls.on_isr_update_result(msg.proposal, msg.new_zk_version)
        if outcome.stop_leading is not None:
            self._trace(f"stop leading: {outcome.stop_leading.reason}")
            self.world.count("stop_leading")
            self._stop_current_role("ISR update rejected")
            return
        self.propagation.record_isr_change(("t", 0), self.world.now)
        if outcome.high_watermark_change is not None:
            self._complete_acks()

    # -- timers --------------------------------------------------------------------------------------

    def on_timer(self, t: Timer) -> None:
        cfg = self.world.config
        if t.kind == "send_fetch":
            if t.token is self.follower_state:
                self._send_fetch()
        elif t.kind == "retry_truncation":
            fs = self.follower_state
            if t.token is fs and fs is not None and fs.phase is FollowerPhase.TRUNCATING:
                if self.outstanding is None:
                    self._advance_truncation()
        elif t.kind == "request_timeout":
            if self.outstanding is not None and self.outstanding[1] == t.token:
                kind = self.outstanding[0]
                self.outstanding = None
                if kind == "fetch":
                    self._send_fetch()
                else:
                    self._advance_truncation()
        elif t.kind == "isr_expiration":
            ls = self.leader_state
            if t.token is ls and ls is not None and ls.is_leading:
                proposal = ls.maybe_shrink_isr(self.world.now)
                if proposal is not None:
                    self._submit_isr_change(ls, proposal)
                self._arm(isr_expiration_interval_ms(cfg.replica_lag_time_max_ms), t.kind, ls)
        elif t.kind == "isr_propagation":
            ls = self.leader_state
            if t.token is ls and ls is not None:
                batch = self.propagation.maybe_propagate(self.world.now)
                if batch:
                    self.world.controller.on_isr_change_notification(batch)
                self._arm(ISR_CHANGE_PROPAGATION_CHECK_INTERVAL_MS, t.kind, ls)
        elif t.kind == "hw_checkpoint":
            self.log.hw_checkpoint = self.high_watermark
            self._arm(cfg.hw_checkpoint_interval_ms, t.kind)
        elif t.kind == "flush":
            self.log.flushed = self.log.log_end_offset
            assert cfg.flush_interval_ms is not None
            self._arm(self.world.rng.randint(200, cfg.flush_interval_ms), t.kind)
        else:
            raise AssertionError(f"unknown timer {t}")

    def deliver(self, message: object) -> None:
        if isinstance(message, FetchRequest):
            self.on_fetch_request(message)
        elif isinstance(message, FetchResponse):
            self.on_fetch_response(message)
        elif isinstance(message, EpochRequest):
            self.on_epoch_request(message)
        elif isinstance(message, EpochResponse):
            self.on_epoch_response(message)
        elif isinstance(message, ProduceRequest):
            self.on_produce(message)
        elif isinstance(message, LeaderAndIsr):
            self.on_leader_and_isr(message)
        elif isinstance(message, IsrUpdateResult):
            self.on_isr_update_result(message)
        else:
            raise AssertionError(f"unknown message {message!r}")
