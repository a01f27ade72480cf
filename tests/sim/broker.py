"""One simulated replica: an in-memory durable log driving the broker's own state machine.

Every replication rule is ``replog.replication.machine.PartitionMachine``, the
class the real broker drives; this module is only its driver in the simulated
world, as ``Partition`` / ``ReplicaManager`` / the replica fetcher are for real:
it turns messages and timers into the machine's events and carries out its
actions (append, truncate, send a fetch or OffsetsForLeaderEpoch, write an ISR
change to "ZooKeeper", complete produces). Like a real IO layer over TCP it
processes each peer's requests at most once and in order (sequence numbers per
connection stand in for TCP), and matches responses to the one request it has
outstanding.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from replog.protocol.fetch_metadata import FetchMetadata
from replog.replication.actions import AdvanceLogStart
from replog.replication.core import AcksAllStatus, HwChange, LeaderState, StopLeading
from replog.replication.fetch_rules import FetchPartitionRequest
from replog.replication.fetch_session_handler import FetchSessionHandler
from replog.replication.follower import EpochRequest as EpochStep
from replog.replication.follower import FollowerState, RestartAt
from replog.replication.isr import (
    ISR_CHANGE_PROPAGATION_CHECK_INTERVAL_MS,
    IsrChangePropagation,
    IsrChangeProposal,
    isr_expiration_interval_ms,
)
from replog.replication.machine import (
    NO_LEADER,
    Action,
    AssignLeaderEpoch,
    IsrCommitted,
    PartitionLeadership,
    PartitionMachine,
    RoleChange,
    StartFetching,
    StopFetching,
    TruncationRule,
)
from replog.replication.machine import Role as MachineRole
from replog.replication.truncation import (
    TruncationDecision,
    assign_epoch,
    latest_epoch,
    truncate_epochs_from_end,
)
from replog.server.fetch_session import CachedPartition, FetchManager, FetchSessionCache
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
from sim.sessions import (
    check_fetch_ready,
    check_follower_answer,
    check_incremental_request,
    check_session_cache,
)

if TYPE_CHECKING:
    from sim.world import World

__all__ = ["NO_LEADER", "DurableLog", "Role", "SimBroker", "TruncationRule"]

MAX_RECORDS_PER_FETCH = 25
FETCH_VERSION = 11  # sessions by topic name (the shipped follower fetches at v15 by topic id; the
# leader-side session rules it exercises are the same; the broker epoch travels in the sim's own messages)
FETCH_MAX_BYTES = 1 << 20


class DurableLog:
    """Records (offset = index), the flushed prefix, the epoch cache and the HW checkpoint.

    Serves as the machine's ``LogView``; the log start offset is always 0 here.
    """

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.flushed = 0
        self.epochs: tuple[tuple[int, int], ...] = ()
        self.hw_checkpoint = 0
        self.truncated_to: int | None = None  # lowest truncation point since last looked at

    @property
    def log_end_offset(self) -> int:
        return len(self.records)

    @property
    def log_start_offset(self) -> int:
        return 0

    def epoch_entries(self) -> tuple[tuple[int, int], ...]:
        return self.epochs

    def append(self, record: Record, *, flush: bool) -> None:
        if self.records and record.epoch < self.records[-1].epoch:
            raise AssertionError(f"epoch went back in the log: {self.records[-1]} then {record}")
        latest = latest_epoch(self.epochs)
        if latest is None or record.epoch > latest:
            self.epochs = assign_epoch(self.epochs, record.epoch, len(self.records))
        self.records.append(record)
        if flush:
            self.flushed = len(self.records)

    def assign_leader_epoch(self, epoch: int, start_offset: int) -> None:
        self.epochs = assign_epoch(self.epochs, epoch, start_offset)

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
    leader_epoch: int  # the leader epoch the record was appended at


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
        self.controller_epoch = -1  # the newest controller epoch this process has obeyed
        self.truncations = 0
        self.term_seq = 0  # bumped on every role change: HW must not go back within one
        self.responses_in_term = 0
        self.log_dir_failed = False  # its disk failed: the replica is offline until a restart
        self._reset_volatile()

    # -- lifecycle ------------------------------------------------------------------------

    def _reset_volatile(self) -> None:
        """A (re)started process: the machine starts from the log and the HW checkpoint."""
        cfg = self.world.config
        self.term_seq += 1
        self.responses_in_term = 0
        self.machine = PartitionMachine(
            self.id,
            self.log,
            high_watermark=self.log.hw_checkpoint,
            replica_lag_time_max_ms=cfg.replica_lag_time_max_ms,
            min_insync_replicas=cfg.min_insync_replicas,
            truncation_rule=cfg.truncation_rule,
        )
        self.controller_epoch = -1
        self.pending_acks: list[PendingAck] = []
        self.timers_role_epoch = -1  # the leadership the ISR timers run for
        self.outstanding: tuple[str, int] | None = None
        self.next_corr = 0
        self.last_corr_from: dict[tuple[int, int], int] = {}
        self.max_incarnation_from: dict[int, int] = {}
        self.propagation = IsrChangePropagation.starting_at(self._clock())
        self.deferred = []
        # KIP-227 with the shipped code: the follower's session per leader, the leader's
        # session cache (its own random stream, so the world's stays as it was)
        self.fetch_sessions: dict[int, FetchSessionHandler] = {}
        self.fetch_manager = FetchManager(
            FetchSessionCache(
                cfg.fetch_session_cache_slots,
                cfg.fetch_session_eviction_ms,
                random.Random(self.world.seed * 1_000_003 + self.id * 1_009 + self.incarnation),
            )
        )

    def crash(self, *, lose_unflushed: bool) -> None:
        self.alive = False
        self.paused = False
        if lose_unflushed:
            flushed = self.log.flushed
            self.world.on_lost_unflushed(self, flushed, self.log.records[flushed:])
            self.log.lose_unflushed()
        self._reset_volatile()

    def restart(self) -> None:
        self.alive = True
        self.log_dir_failed = False  # the disk was replaced (or came back) meanwhile
        self.incarnation += 1
        self._reset_volatile()
        self._arm(self.world.config.hw_checkpoint_interval_ms, "hw_checkpoint")
        if self.world.config.broker_isr_propagation:
            self._arm(ISR_CHANGE_PROPAGATION_CHECK_INTERVAL_MS, "isr_propagation", "broker")
        interval = self.world.config.flush_interval_ms
        if not self.world.config.flush_on_append and interval is not None:
            self._arm(self.world.rng.randint(200, interval), "flush")

    # -- what the world looks at (the machine's state) ------------------------------------------

    @property
    def role(self) -> Role:
        return Role(self.machine.role.value) if self.alive else Role.OFFLINE

    @property
    def leader_state(self) -> LeaderState | None:
        return self.machine.leader_state

    @property
    def follower_state(self) -> FollowerState | None:
        return self.machine.follower_state

    @property
    def known_leader_epoch(self) -> int:
        return self.machine.leader_epoch

    @property
    def high_watermark(self) -> int:
        return self.machine.high_watermark

    @property
    def is_acting_leader(self) -> bool:
        return self.machine.is_leader

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

    def _clock(self) -> int:
        """This broker's own clock (a clock jump moves it): the time the machine is given."""
        return self.world.local_now(self.id)

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

    # -- carrying out the machine's actions ------------------------------------------------------

    def _carry_out(self, actions: list[Action] | tuple[Action, ...]) -> None:
        cfg = self.world.config
        m = self.machine
        for action in actions:
            if isinstance(action, AssignLeaderEpoch):
                self.log.assign_leader_epoch(action.leader_epoch, action.start_offset)
            elif isinstance(action, RoleChange):
                self.term_seq += 1
                self.responses_in_term = 0
                self.outstanding = None
                self._complete_acks()
                if action.role is MachineRole.LEADER:
                    self._trace(
                        f"leader at epoch {action.leader_epoch} leo={self.log.log_end_offset} "
                        f"hw={m.high_watermark} isr={list(m.in_sync_replicas)}"
                    )
                role_epoch = m.role_leader_epoch
                if action.role is MachineRole.LEADER and role_epoch != self.timers_role_epoch:
                    self.timers_role_epoch = role_epoch
                    interval = isr_expiration_interval_ms(cfg.replica_lag_time_max_ms)
                    self._arm(interval, "isr_expiration", role_epoch)
                    if not cfg.broker_isr_propagation:
                        self._arm(
                            ISR_CHANGE_PROPAGATION_CHECK_INTERVAL_MS, "isr_propagation", role_epoch
                        )
                elif action.role is MachineRole.NONE:
                    self._trace(f"no role at epoch {action.leader_epoch}")
            elif isinstance(action, StartFetching):
                self._trace(f"follower of b{action.leader_id} at epoch {action.leader_epoch}")
                self._advance_truncation()
            elif isinstance(action, StopFetching):
                self.outstanding = None
                self.fetch_sessions.clear()  # a new leadership starts a new session
            elif isinstance(action, HwChange):
                self._complete_acks()
            elif isinstance(action, IsrChangeProposal):
                self._submit_isr_change(action)
            elif isinstance(action, IsrCommitted):
                self.propagation.record_isr_change(("t", 0), self._clock())
            elif isinstance(action, StopLeading):
                self._trace(f"stop leading: {action.reason}")
                self.world.count("stop_leading")
            elif isinstance(action, AdvanceLogStart):
                raise AssertionError("log start offsets are always 0 in the simulation")
            else:
                raise AssertionError(f"unknown action {action!r}")

    # -- controller ----------------------------------------------------------------------------

    def fence_from_zookeeper(self) -> None:
        """The broker's own fence (``replog.server.zk_fence``): cut from ZooKeeper for a
        whole session timeout, its session is surely gone, so it stops leading until a
        LeaderAndIsr at a newer epoch (``PartitionMachine.on_session_expired``)."""
        if not self.alive:
            return
        actions = self.machine.on_session_expired()
        if actions:
            self._trace("cut from ZooKeeper for a session timeout: stops leading")
            self.world.count("leader_fenced")
            self._carry_out(actions)

    def on_session_renewed(self) -> None:
        """Registered again at a new broker epoch (``replog.server.broker._reregister``)."""
        self.machine.on_session_renewed()

    def on_leader_and_isr(self, msg: LeaderAndIsr) -> None:
        if msg.broker_epoch != self.broker_epoch:
            return  # addressed to an earlier registration of this broker (KIP-380)
        if msg.controller_epoch < self.controller_epoch:
            return  # STALE_CONTROLLER_EPOCH: a deposed controller
        self.controller_epoch = msg.controller_epoch
        if not self.log_dir_failed:  # else KAFKA_STORAGE_ERROR: the replica is offline
            self.apply_partition_state(msg.state)
        self.world.controller.leader_and_isr_answered(msg, storage_error=self.log_dir_failed)

    def fail_log_dir(self) -> None:
        """Its log dir fails (``ReplicaManager.handle_log_dir_failure``): the replica stops
        leading and fetching (StopReplica on the machine, waiting produces answered), and
        the broker writes a log dir event notification for the controller. The process
        runs on; the replica stays offline until the broker restarts."""
        self.log_dir_failed = True
        self._trace("LOG DIR FAILED: the replica goes offline")
        self._carry_out(self.machine.stop())
        self.outstanding = None
        self.fetch_sessions.clear()

    def apply_partition_state(self, st: ZkPartitionState) -> None:
        leadership = PartitionLeadership(
            leader=st.leader,
            leader_epoch=st.leader_epoch,
            isr=st.isr,
            replicas=st.assigned,
            zk_version=st.zk_version,
            controller_epoch=st.controller_epoch,
        )
        _, actions = self.machine.on_leader_and_isr(leadership, self._clock())
        self._carry_out(actions)

    # -- follower side ------------------------------------------------------------------------

    def _advance_truncation(self) -> None:
        m = self.machine
        step = m.next_truncation_step()
        if isinstance(step, TruncationDecision):
            self._apply_truncation(step)
            return
        assert isinstance(step, EpochStep)
        corr = self._corr()
        self.outstanding = ("epoch", corr)
        self.world.network.send(
            self.world.now,
            self.id,
            m.leader_id,
            EpochRequest(
                self.id,
                self.incarnation,
                m.leader_id,
                corr,
                step.current_leader_epoch,
                step.requested_epoch,
            ),
        )
        self._arm(self.world.config.request_timeout_ms, "request_timeout", corr)

    def _apply_truncation(self, decision: TruncationDecision) -> None:
        before = self.log.log_end_offset
        self.log.truncate_to(decision.offset)
        if self.log.log_end_offset < before:
            self.truncations += 1
            self._trace(f"truncated {before} -> {self.log.log_end_offset}")
        self.machine.on_truncated(decision)
        if self.machine.is_fetching:
            self._arm(0, "send_fetch", self.machine.role_leader_epoch)
        else:
            self._advance_truncation()

    def _send_fetch(self) -> None:
        m = self.machine
        if not m.is_fetching or self.outstanding is not None:
            return
        corr = self._corr()
        self.outstanding = ("fetch", corr)
        # The shipped follower's session handler says what the request carries (KIP-227).
        handler = self._fetch_session(m.leader_id)
        sent_before = dict(handler.session_partitions)
        data = handler.build(
            [
                FetchPartitionRequest(
                    "t",
                    0,
                    m.fetch_offset,
                    FETCH_MAX_BYTES,
                    current_leader_epoch=m.leader_epoch,
                    log_start_offset=self.log.log_start_offset,
                )
            ]
        )
        check_incremental_request(self.world, f"b{self.id}", sent_before, data)
        self.world.network.send(
            self.world.now,
            self.id,
            m.leader_id,
            FetchRequest(
                self.id,
                self.incarnation,
                m.leader_id,
                corr,
                m.leader_epoch,
                m.fetch_offset,
                self.broker_epoch,
                session_id=data.metadata.session_id,
                session_epoch=data.metadata.epoch,
                names_partition=bool(data.to_send),
            ),
        )
        self._arm(self.world.config.request_timeout_ms, "request_timeout", corr)

    def _fetch_session(self, leader: int) -> FetchSessionHandler:
        handler = self.fetch_sessions.get(leader)
        if handler is None:
            handler = self.fetch_sessions[leader] = FetchSessionHandler(leader)
        return handler

    def _response_is_current(self, kind: str, dst_incarnation: int, corr: int, src: int) -> bool:
        return (
            dst_incarnation == self.incarnation
            and self.outstanding == (kind, corr)
            and self.machine.role is MachineRole.FOLLOWER
            and self.machine.leader_id == src
        )

    def on_fetch_response(self, msg: FetchResponse) -> None:
        if not self._response_is_current("fetch", msg.dst_incarnation, msg.corr, msg.src):
            return
        self.outstanding = None
        m = self.machine
        cfg = self.world.config
        role_epoch = m.role_leader_epoch
        named = [("t", 0)] if msg.names_partition else []
        if not self._fetch_session(msg.src).handle_response(
            msg.session_error, msg.session_id, named
        ):
            self._arm(cfg.fetch_backoff_ms, "send_fetch", role_epoch)
            return
        if not msg.names_partition:  # left out of an incremental answer: nothing new
            self.world.count("fetch_session_nothing_new")
            self.responses_in_term += 1
            self._arm(cfg.fetch_wait_ms, "send_fetch", role_epoch)
            return
        if msg.error is ErrorCode.offset_out_of_range:
            action = m.on_fetch_offset_out_of_range(msg.log_start_offset, msg.log_end_offset)
            self._trace(f"fetch out of range (leader leo {msg.log_end_offset}): {action}")
            if isinstance(action, TruncationDecision):
                self._apply_truncation(action)
            elif isinstance(action, RestartAt):
                raise AssertionError("log start offsets are always 0 in the simulation")
            else:
                self._arm(cfg.fetch_backoff_ms, "send_fetch", role_epoch)
            return
        if msg.error is not ErrorCode.none:
            self._arm(cfg.fetch_backoff_ms, "send_fetch", role_epoch)
            return
        if msg.base_offset != self.log.log_end_offset:
            # the leader read at another offset than the follower asks from (its fetch
            # session holds a stale one, say)
            self.world.violation(
                "fetch_answer_misplaced",
                f"b{self.id}: fetch answer at {msg.base_offset}, "
                f"log ends at {self.log.log_end_offset}",
            )
            return
        for record in msg.records:
            self.log.append(record, flush=cfg.flush_on_append)
        self._carry_out(
            m.on_fetch_response(
                leader_high_watermark=msg.high_watermark,
                leader_log_start_offset=msg.log_start_offset,
            )
        )
        self.responses_in_term += 1
        self._arm(0 if msg.records else cfg.fetch_wait_ms, "send_fetch", role_epoch)

    def on_epoch_response(self, msg: EpochResponse) -> None:
        if not self._response_is_current("epoch", msg.dst_incarnation, msg.corr, msg.src):
            return
        self.outstanding = None
        decision = self.machine.on_epoch_response(msg.error, msg.answer)
        if decision is None:
            self._arm(
                self.world.config.fetch_backoff_ms,
                "retry_truncation",
                self.machine.role_leader_epoch,
            )
            return
        self._trace(f"epoch answer {msg.answer} -> truncate to {decision.offset}")
        self._apply_truncation(decision)

    # -- leader side -------------------------------------------------------------------------------

    def on_fetch_request(self, req: FetchRequest) -> None:
        if not self._accept_request(req.src, req.src_incarnation, req.corr):
            return
        # The shipped leader side of KIP-227 (``FetchManager``), as the Fetch handler uses
        # it: the context says which partitions to read and which answers go out.
        asked = (
            [
                CachedPartition(
                    topic="t",
                    partition=0,
                    topic_id=None,
                    fetch_offset=req.fetch_offset,
                    max_bytes=FETCH_MAX_BYTES,
                    current_leader_epoch=req.current_leader_epoch,
                    log_start_offset=self.log.log_start_offset,
                )
            ]
            if req.names_partition
            else []
        )
        cache = self.fetch_manager.cache
        before = dict(cache.sessions)
        context = self.fetch_manager.new_context(
            FETCH_VERSION,
            FetchMetadata(req.session_id, req.session_epoch),
            True,
            asked,
            [],
            self._clock(),
        )
        if context.error is not ErrorCode.none:
            self._reply_fetch(req, ErrorCode.none, (), session_error=context.error)
            return
        answered = False
        error, records, offset = ErrorCode.none, (), req.fetch_offset
        for cached in context.partitions():
            read = cached.read_request()
            offset = read.fetch_offset
            ready = self.machine.fetch_ready(req.src, read.fetch_offset)
            ls = self.machine.leader_state
            in_sync = ls is not None and req.src in ls.in_sync_replicas
            decision = self.machine.on_fetch(
                req.src,
                read.fetch_offset,
                read.current_leader_epoch,
                self._clock(),
                broker_epoch=req.broker_epoch,
                replication_throttled=self.world.over_replication_quota(),
            )
            check_fetch_ready(self.world, self, f"b{req.src}", ready, decision)
            check_follower_answer(self.world, self, req.src, in_sync, decision)
            error = decision.error
            if error is ErrorCode.none and decision.bounds is not None:
                if decision.follower_lost_records:
                    self._trace(f"b{req.src} fetched at {offset} below HW: lost records")
                self._carry_out(decision.actions)
                start = decision.bounds.start_offset
                end = min(decision.bounds.end_offset, start + MAX_RECORDS_PER_FETCH)
                records = tuple(self.log.records[start:end])
            answered = context.must_respond(
                cached,
                error,
                self.high_watermark,
                self.high_watermark,
                self.log.log_start_offset,
                bool(records),
                False,
            )
        session_error = context.response_error()
        session_id = context.response_session_id(self._clock())
        check_session_cache(
            self.world,
            cache,
            before,
            requester=f"b{req.src} at b{self.id}",
            privileged=True,
            session_id=session_id,
            own_session=req.session_id,
            now_ms=self._clock(),
        )
        self._reply_fetch(
            req,
            error,
            records,
            base_offset=offset,
            session_id=session_id,
            session_error=session_error,
            names_partition=answered and session_error is ErrorCode.none,
        )

    def _reply_fetch(
        self,
        req: FetchRequest,
        error: ErrorCode,
        records: tuple[Record, ...],
        *,
        base_offset: int | None = None,
        session_id: int = 0,
        session_error: ErrorCode = ErrorCode.none,
        names_partition: bool = False,
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
                req.fetch_offset if base_offset is None else base_offset,
                records,
                self.high_watermark,
                self.log.log_start_offset,
                self.log.log_end_offset,
                session_id=session_id,
                session_error=session_error,
                names_partition=names_partition,
            ),
        )

    def on_epoch_request(self, req: EpochRequest) -> None:
        if not self._accept_request(req.src, req.src_incarnation, req.corr):
            return
        err, answer = self.machine.answer_offsets_for_leader_epoch(
            req.current_leader_epoch, req.requested_epoch
        )
        self.world.network.send(
            self.world.now,
            self.id,
            req.src,
            EpochResponse(self.id, req.src, req.src_incarnation, req.corr, err, answer),
        )

    def on_produce(self, req: ProduceRequest) -> None:
        m = self.machine
        if m.check_append(acks=-1) is not ErrorCode.none:
            return  # NOT_LEADER_OR_FOLLOWER / NOT_ENOUGH_REPLICAS to the producer
        self.log.append(
            Record(m.leader_epoch, req.payload), flush=self.world.config.flush_on_append
        )
        self.pending_acks.append(PendingAck(self.log.log_end_offset, req.payload, m.leader_epoch))
        self._trace(f"append {req.payload}@{self.log.log_end_offset - 1}")
        m.on_local_append()
        self._complete_acks()

    def _complete_acks(self) -> None:
        keep: list[PendingAck] = []
        for ack in self.pending_acks:
            status = self.machine.acks_all_status(ack.required_offset, ack.leader_epoch)
            if status is AcksAllStatus.SATISFIED:
                self.world.on_acked(self, ack.required_offset - 1, ack.payload)
            elif status is AcksAllStatus.PENDING:
                keep.append(ack)
            else:
                self.world.count(f"produce_{status.name.lower()}")
                self._trace(f"produce {ack.payload}: {status.name}")
        self.pending_acks = keep

    def _submit_isr_change(self, proposal: IsrChangeProposal) -> None:
        self._trace(f"propose {proposal.kind.name} -> {list(proposal.new_isr)}")
        result = self.world.controller.conditional_update(proposal)
        ineligible = result == INELIGIBLE
        version = None if ineligible else result
        self.world.network.send_reliable(
            self.world.now,
            self.id,
            IsrUpdateResult(
                self.id,
                self.incarnation,
                self.machine.role_leader_epoch,
                proposal,
                version,
                ineligible,
            ),
            channel="zookeeper",
        )

    def on_isr_update_result(self, msg: IsrUpdateResult) -> None:
        if msg.dst_incarnation != self.incarnation or msg.owner != self.machine.role_leader_epoch:
            return
        if msg.ineligible:
            self._trace(f"ISR expansion {list(msg.proposal.new_isr)} refused: stale broker epoch")
            self.world.count("isr_ineligible")
        actions = self.machine.on_isr_update_result(
            msg.proposal, msg.new_zk_version, ineligible=msg.ineligible
        )
        self._carry_out(actions)

    # -- timers --------------------------------------------------------------------------------------

    def on_timer(self, t: Timer) -> None:
        cfg = self.world.config
        m = self.machine
        current = t.token == m.role_leader_epoch
        if t.kind == "send_fetch":
            if current:
                self._send_fetch()
        elif t.kind == "retry_truncation":
            if current and m.is_truncating and self.outstanding is None:
                self._advance_truncation()
        elif t.kind == "request_timeout":
            if self.outstanding is not None and self.outstanding[1] == t.token:
                kind = self.outstanding[0]
                self.outstanding = None
                if kind == "fetch":
                    if m.is_fetching:  # the next request is a full fetch (KIP-227)
                        self._fetch_session(m.leader_id).handle_error()
                    self._send_fetch()
                elif m.is_truncating:
                    self._advance_truncation()
        elif t.kind == "isr_expiration":
            if current and m.is_leader:
                proposal = m.maybe_shrink_isr(self._clock())
                if proposal is not None:
                    self._submit_isr_change(proposal)
                self._arm(isr_expiration_interval_ms(cfg.replica_lag_time_max_ms), t.kind, t.token)
        elif t.kind == "isr_propagation":
            if t.token == "broker" or (current and m.is_leader):
                batch = self.propagation.maybe_propagate(self._clock())
                if batch:
                    self.world.controller.on_isr_change_notification(batch)
                self._arm(ISR_CHANGE_PROPAGATION_CHECK_INTERVAL_MS, t.kind, t.token)
        elif t.kind == "hw_checkpoint":
            if not self.log_dir_failed:
                self.log.hw_checkpoint = self.high_watermark
            self._arm(cfg.hw_checkpoint_interval_ms, t.kind)
        elif t.kind == "flush":
            if not self.log_dir_failed:
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
