"""The replication state machine of one partition replica: events in, actions out.

``PartitionMachine`` owns every replication rule of one partition on one
broker, whatever its role (h11's ``Connection`` is the model): applying a
LeaderAndIsr (leader epochs only increase; become leader, follower, or neither),
the leader's high watermark and ISR (``LeaderState``), the follower's truncation
and fetch position (``FollowerState``), KIP-320 leader-epoch validation of
requests, what a fetch may read, min.insync.replicas before and after an
append, when an ``acks=all`` produce is done and which leadership it is tied
to, the outcome of the conditional ISR write, and DeleteRecords (how far the
leader's log start may move, and when every live replica has followed: the low
watermark).

It does no IO: no sockets, tasks, clocks or files. It reads the log's offsets
and epoch cache through ``LogView`` (in-memory facts), takes the time as an
argument, and returns actions for its driver to carry out: assign a leader
epoch in the log's cache, start or stop fetching, truncate, write an ISR change
to ZooKeeper, publish a new high watermark. The broker (``Partition``,
``ReplicaManager``, the replica fetcher) and the simulator (``tests/sim``) are
both drivers of this class; neither decides anything itself.

Concurrency: owned by the event loop (the broker) or the simulated world; not
safe across awaits: a driver that awaits between asking and acting re-checks
``role_leader_epoch`` (see ``__init__``).
"""

from __future__ import annotations

from collections.abc import Callable

from kio.schema.errors import ErrorCode

from replog.replication.actions import (
    NO_LEADER,
    Action,
    AssignLeaderEpoch,
    FetchDecision,
    IsrCommitted,
    LogView,
    PartitionLeadership,
    Role,
    RoleChange,
    StartFetching,
    StopFetching,
    TruncationRule,
)
from replog.replication.core import (
    AcksAllStatus,
    HwChange,
    LeaderState,
    ReplicationInvariantError,
)
from replog.replication.delete_records import (
    DeleteRecordsDecision,
    DeleteRecordsStatus,
    decide_delete_records,
    delete_records_progress,
    leader_low_watermark,
)
from replog.replication.fetch_decision import decide_fetch
from replog.replication.fetch_rules import READ_UNCOMMITTED, validate_current_leader_epoch
from replog.replication.follower import FollowerPhase, FollowerState
from replog.replication.isr import IsrChangeProposal
from replog.replication.machine_follower import FollowerEvents
from replog.replication.truncation import (
    UNDEFINED_EPOCH_END_OFFSET,
    EpochEndOffset,
    end_offset_for_epoch,
)


class PartitionMachine(FollowerEvents):
    """Replication state of one partition on one broker. See the module docstring; its
    events as a follower are ``FollowerEvents``' (``machine_follower``).

    Concurrency: owned by one task (the broker's event loop or the simulator);
    not safe across awaits. Invariants are checked after every event and raise
    ``ReplicationInvariantError``.
    """

    def __init__(
        self,
        broker_id: int,
        log: LogView,
        *,
        high_watermark: int,
        replica_lag_time_max_ms: int,
        min_insync_replicas: int,
        truncation_rule: TruncationRule = TruncationRule.LEADER_EPOCH,
    ) -> None:
        self.broker_id = broker_id
        self.log = log
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.min_insync_replicas = min_insync_replicas
        self.truncation_rule = truncation_rule
        self.state: PartitionLeadership | None = None
        self.role = Role.NONE
        # The leader epoch the current role began at (-1: no role). It changes on every
        # role change and stays while a leader goes on leading (or a follower following
        # the same leader) at a newer epoch.
        self.role_leader_epoch = -1
        # (leader epoch, session renewed since) of a leadership this replica fenced
        # itself out of on ZooKeeper session expiry
        self._fenced_at: tuple[int, bool] | None = None
        self.leader_state: LeaderState | None = None
        self.follower_state: FollowerState | None = None
        # A restart: the checkpointed HW, within what the log still holds.
        self._high_watermark = min(max(high_watermark, log.log_start_offset), log.log_end_offset)

    # -- configuration ----------------------------------------------------------------

    def set_min_insync_replicas(self, min_insync_replicas: int) -> None:
        """A live ``min.insync.replicas`` change (a topic or broker config): acks=all
        checks from now on use it, as Kafka reads the log's current config at each check."""
        if min_insync_replicas < 1:
            raise ValueError(f"min.insync.replicas must be at least 1, not {min_insync_replicas}")
        self.min_insync_replicas = min_insync_replicas
        if self.leader_state is not None:
            self.leader_state.min_insync_replicas = min_insync_replicas

    # -- queries ------------------------------------------------------------------------

    @property
    def leader_epoch(self) -> int:
        """The latest leader epoch this replica was told of; -1 before the first LeaderAndIsr."""
        return self.state.leader_epoch if self.state is not None else -1

    @property
    def leader_id(self) -> int:
        return self.state.leader if self.state is not None else NO_LEADER

    @property
    def is_leader(self) -> bool:
        return self.leader_state is not None and self.leader_state.is_leading

    @property
    def high_watermark(self) -> int:
        if self.leader_state is not None:
            return self.leader_state.high_watermark
        if self.follower_state is not None:
            return self.follower_state.high_watermark
        return self._high_watermark

    @property
    def in_sync_replicas(self) -> tuple[int, ...]:
        if self.leader_state is not None:
            return self.leader_state.in_sync_replicas
        return self.state.isr if self.state is not None else ()

    @property
    def is_fetching(self) -> bool:
        fs = self.follower_state
        return fs is not None and fs.phase is FollowerPhase.FETCHING

    @property
    def is_truncating(self) -> bool:
        fs = self.follower_state
        return fs is not None and fs.phase is FollowerPhase.TRUNCATING

    # -- the controller: LeaderAndIsr, StopReplica -----------------------------------------

    def on_leader_and_isr(
        self, state: PartitionLeadership, now_ms: int
    ) -> tuple[ErrorCode, list[Action]]:
        """Apply one partition of a LeaderAndIsr (Kafka ``becomeLeaderOrFollower``).

        An older leader epoch is refused (STALE_CONTROLLER_EPOCH), the same one
        is a resend and changes nothing; a newer one ends the current role.
        """
        if not state.assigns(self.broker_id):
            return ErrorCode.unknown_topic_or_partition, []
        if self.state is not None:
            if state.leader_epoch < self.state.leader_epoch:
                return ErrorCode.stale_controller_epoch, []  # Kafka's answer to an old epoch
            if state.leader_epoch == self.state.leader_epoch and not self._retakes(state):
                return ErrorCode.none, []  # a resend (controller failover): already applied
        if self.is_leader and state.leader == self.broker_id:
            return ErrorCode.none, self._continue_leading(state, now_ms)
        if self._continues_following(state):
            # The same leader, at the very next epoch: nobody else led in between, so
            # its log was not truncated and ours still agrees with it (no truncation
            # round). The fetcher reads the new epoch from ``state`` for its next fetch.
            self.state = state
            fs = self.follower_state
            assert fs is not None
            fs.leader_epoch = state.leader_epoch
            self.check_invariants()
            return ErrorCode.none, []
        actions = self._end_role()
        self.state = state
        if state.leader == self.broker_id:
            actions += self._become_leader(state, now_ms)
        elif state.leader == NO_LEADER:
            actions.append(RoleChange(Role.NONE, state.leader_epoch))
        else:
            actions += self._become_follower(state)
        self.check_invariants()
        return ErrorCode.none, actions

    def on_session_expired(self) -> list[Action]:
        """This broker's ZooKeeper session is surely gone (disconnected for a whole
        session timeout): a controller may already have elected another leader, so a
        leader stops leading until the controller speaks again after the broker
        registered anew (``on_session_renewed``). Followers keep following. (Kafka's
        ZooKeeper mode keeps leading; this is the fence KRaft's broker heartbeats give.)"""
        ls = self.leader_state
        if ls is None or not ls.is_leading:
            return []
        stop = ls.resign("ZooKeeper session expired")
        self._end_role()
        self._fenced_at = (self.leader_epoch, False)
        return [stop, RoleChange(Role.NONE, self.leader_epoch)]

    def on_session_renewed(self) -> None:
        """The broker registered again (a new broker epoch; the driver drops LeaderAndIsr
        requests addressed to the old one, KIP-380). A controller that names this
        replica leader at the epoch it fenced itself at has read ZooKeeper since: nobody
        else led in between (every election bumps the epoch), so that LeaderAndIsr is
        obeyed, not taken for a resend. Without this, a fenced leader that wins the
        controller election itself would never be given a newer epoch."""
        if self._fenced_at is not None:
            self._fenced_at = (self._fenced_at[0], True)

    def _retakes(self, state: PartitionLeadership) -> bool:
        fenced = self._fenced_at
        return (
            fenced is not None
            and fenced == (state.leader_epoch, True)
            and state.leader == self.broker_id
            and self.role is Role.NONE
        )

    def stop(self) -> list[Action]:
        """StopReplica: no role any more; the high watermark is kept for the checkpoint."""
        actions = self._end_role()
        self.state = None
        actions.append(RoleChange(Role.NONE, -1))
        return actions

    def _end_role(self) -> list[Action]:
        actions: list[Action] = []
        ls, fs = self.leader_state, self.follower_state
        if ls is not None:
            self._high_watermark = ls.high_watermark
            if ls.is_leading:
                ls.resign("leadership ended")
            self.leader_state = None
        if fs is not None:
            self._high_watermark = fs.high_watermark
            self.follower_state = None
            actions.append(StopFetching())
        self.role = Role.NONE
        self.role_leader_epoch = -1
        return actions

    def _continues_following(self, state: PartitionLeadership) -> bool:
        """Following ``state.leader`` already, and ``state`` is the next epoch after ours
        (the controller bumps a leader epoch by one at each change, so there was none
        in between: the leader led throughout, as when the controller shrinks the ISR)."""
        return (
            self.role is Role.FOLLOWER
            and self.state is not None
            and state.leader == self.state.leader
            and state.leader_epoch == self.state.leader_epoch + 1
        )

    def _continue_leading(self, state: PartitionLeadership, now_ms: int) -> list[Action]:
        """Still the leader at a newer epoch (the controller shrank the ISR, say): the
        ``LeaderState`` moves to it in place, as Kafka's ``makeLeader`` does for a leader
        that was leading. The log was not truncated in between, so produces waiting on
        acks=all keep their ``role_leader_epoch``."""
        ls = self.leader_state
        assert ls is not None
        self.state = state
        leo = self.log.log_end_offset
        change = ls.on_new_leader_epoch(
            leader_epoch=state.leader_epoch,
            assigned_replicas=state.replicas,
            in_sync_replicas=state.isr,
            partition_zk_version=state.zk_version,
            log_end_offset=leo,
            now_ms=now_ms,
        )
        actions: list[Action] = [
            AssignLeaderEpoch(state.leader_epoch, leo),
            RoleChange(Role.LEADER, state.leader_epoch),
        ]
        if change is not None:
            actions.append(change)
        self.check_invariants()
        return actions

    def _become_leader(self, state: PartitionLeadership, now_ms: int) -> list[Action]:
        leo = self.log.log_end_offset
        before = self._high_watermark
        self.leader_state = LeaderState(
            broker_id=self.broker_id,
            leader_epoch=state.leader_epoch,
            assigned_replicas=state.replicas,
            in_sync_replicas=state.isr,
            log_end_offset=leo,
            high_watermark=min(self._high_watermark, leo),
            now_ms=now_ms,
            replica_lag_time_max_ms=self.replica_lag_time_max_ms,
            min_insync_replicas=self.min_insync_replicas,
            partition_zk_version=state.zk_version,
        )
        self.role = Role.LEADER
        self.role_leader_epoch = state.leader_epoch
        self._fenced_at = None
        actions: list[Action] = [
            AssignLeaderEpoch(state.leader_epoch, leo),
            RoleChange(Role.LEADER, state.leader_epoch),
        ]
        if self.leader_state.high_watermark != before:
            actions.append(HwChange(before, self.leader_state.high_watermark))
        return actions

    def _become_follower(self, state: PartitionLeadership) -> list[Action]:
        self.follower_state = FollowerState(
            broker_id=self.broker_id,
            leader_id=state.leader,
            leader_epoch=state.leader_epoch,
            log_end_offset=self.log.log_end_offset,
            high_watermark=self._high_watermark,
        )
        self.role = Role.FOLLOWER
        self.role_leader_epoch = state.leader_epoch
        return [
            RoleChange(Role.FOLLOWER, state.leader_epoch),
            StartFetching(state.leader, state.leader_epoch),
        ]

    # -- requests answered as leader ----------------------------------------------------------

    def validate_leader_request(self, current_leader_epoch: int) -> ErrorCode:
        """KIP-320 fencing of the request's epoch against the one this replica knows,
        leader or not, then NOT_LEADER_OR_FOLLOWER unless leading (Kafka
        ``Partition.getLocalLog``: a broker that knows a newer leader epoch answers
        FENCED_LEADER_EPOCH, so the client refreshes its metadata instead of retrying
        the same broker; one that knows an older one, UNKNOWN_LEADER_EPOCH)."""
        if self.state is not None:
            error = validate_current_leader_epoch(current_leader_epoch, self.state.leader_epoch)
            if error is not ErrorCode.none:
                return error
        ls = self.leader_state
        if ls is None or not ls.is_leading:
            return ErrorCode.not_leader_or_follower
        return ErrorCode.none

    def on_fetch(
        self,
        replica_id: int,
        fetch_offset: int,
        current_leader_epoch: int,
        now_ms: int,
        *,
        isolation_level: int = READ_UNCOMMITTED,
        broker_epoch: int = -1,
        isr_eligible: bool = True,
        follower_log_start_offset: int = -1,
        last_fetched_epoch: int = -1,
        replication_throttled: bool = False,
        first_unstable_offset: int | None = None,
    ) -> FetchDecision:
        """A fetch from a follower (``replica_id >= 0``) or a consumer arrived (Kafka
        ``Partition.fetchRecords``): KIP-320 fencing and leadership here, then the
        KIP-595 check, the leader's throttle, the bounds and the follower's state in
        ``fetch_decision.decide_fetch`` (see there for the arguments).
        """
        error = self.validate_leader_request(current_leader_epoch)
        if error is not ErrorCode.none:
            return FetchDecision(error)
        ls = self.leader_state
        assert ls is not None
        return decide_fetch(
            ls,
            self.log,
            replica_id,
            fetch_offset,
            now_ms,
            isolation_level=isolation_level,
            broker_epoch=broker_epoch,
            isr_eligible=isr_eligible,
            follower_log_start_offset=follower_log_start_offset,
            last_fetched_epoch=last_fetched_epoch,
            replication_throttled=replication_throttled,
            first_unstable_offset=first_unstable_offset,
        )

    def fetch_ready(
        self, replica_id: int, fetch_offset: int, last_stable_offset: int | None = None
    ) -> bool:
        """Whether a fetch waiting at ``fetch_offset`` (Kafka ``DelayedFetch``) has
        something to read now (a follower up to the log end, a consumer up to the high
        watermark, a read_committed one up to ``last_stable_offset``), or must be
        answered because this replica stopped leading."""
        ls = self.leader_state
        if ls is None or not ls.is_leading:
            return True
        end = self.log.log_end_offset if replica_id >= 0 else ls.high_watermark
        if replica_id < 0 and last_stable_offset is not None:
            end = min(end, last_stable_offset)
        return end > fetch_offset

    def answer_offsets_for_leader_epoch(
        self, current_leader_epoch: int, requested_epoch: int
    ) -> tuple[ErrorCode, EpochEndOffset]:
        """OffsetsForLeaderEpoch: where ``requested_epoch`` ends in this leader's log.

        An epoch newer than this leader's own is one it has not been told of: it is a
        stale leader (cut from the controller), and UNKNOWN_LEADER_EPOCH sends the
        client to refresh its metadata. Kafka answers UNDEFINED there, which librdkafka
        (and the Java consumer) take for log truncation and reset by
        ``auto.offset.reset``: campaign seed 14's consumer went from offset 1495 back
        to 0 after asking the old leader of a partition about the new leader's epoch.
        """
        error = self.validate_leader_request(current_leader_epoch)
        if error is not ErrorCode.none:
            return error, UNDEFINED_EPOCH_END_OFFSET
        assert self.state is not None  # leading
        if requested_epoch > self.state.leader_epoch:
            return ErrorCode.unknown_leader_epoch, UNDEFINED_EPOCH_END_OFFSET
        answer = end_offset_for_epoch(
            self.log.epoch_entries(), self.log.log_end_offset, requested_epoch
        )
        return ErrorCode.none, answer

    def validate_replica_request(self, current_leader_epoch: int) -> ErrorCode:
        """A request any replica may answer (ListOffsets from a debugging client,
        replica id -2): KIP-320 fencing against the epoch this replica was told of."""
        if self.state is None:
            return ErrorCode.not_leader_or_follower
        return validate_current_leader_epoch(current_leader_epoch, self.state.leader_epoch)

    @property
    def high_watermark_behind_epoch_start(self) -> bool:
        """A new leader whose high watermark has not reached the start of its epoch yet
        (Kafka: clients get OFFSET_NOT_AVAILABLE for the latest offset meanwhile)."""
        ls = self.leader_state
        return ls is not None and ls.is_leading and ls.high_watermark < ls.leader_epoch_start_offset

    # -- DeleteRecords (rules in ``delete_records``) ------------------------------------------

    def delete_records(
        self, offset: int, *, delete_allowed: bool, is_live: Callable[[int], bool]
    ) -> DeleteRecordsDecision:
        """DeleteRecords for this partition: only the leader moves its log start up to
        ``offset`` (NOT_LEADER_OR_FOLLOWER elsewhere). ``is_live`` says which brokers
        count for the low watermark."""
        ls = self.leader_state
        if ls is None or not ls.is_leading:
            return DeleteRecordsDecision(ErrorCode.not_leader_or_follower)
        return decide_delete_records(
            ls, self.log.log_start_offset, offset, delete_allowed=delete_allowed, is_live=is_live
        )

    def low_watermark(self, is_live: Callable[[int], bool]) -> int | None:
        """Kafka ``lowWatermarkIfLeader``; None unless leading."""
        ls = self.leader_state
        if ls is None or not ls.is_leading:
            return None
        return leader_low_watermark(ls, self.log.log_start_offset, is_live)

    def delete_records_status(
        self, requested_offset: int, leader_epoch: int, is_live: Callable[[int], bool]
    ) -> DeleteRecordsStatus:
        """Whether a DeleteRecords accepted at ``leader_epoch`` is done: the low watermark
        reached ``requested_offset``, or the leadership it was accepted in ended
        (NOT_LEADER_OR_FOLLOWER)."""
        ls = self.leader_state
        if not self._leads_since(leader_epoch) or ls is None:
            return DeleteRecordsStatus(True, ErrorCode.not_leader_or_follower)
        low = leader_low_watermark(ls, self.log.log_start_offset, is_live)
        return delete_records_progress(low, requested_offset)

    # -- produce ------------------------------------------------------------------------------

    def check_append(self, acks: int) -> ErrorCode:
        """Before appending: leading, and for acks=all enough replicas in sync."""
        ls = self.leader_state
        if ls is None or not ls.is_leading:
            return ErrorCode.not_leader_or_follower
        if acks == -1 and ls.can_accept_acks_all() is not None:
            return ErrorCode.not_enough_replicas
        return ErrorCode.none

    def on_local_append(self) -> HwChange | None:
        """The driver appended to the log as leader (it grew to the view's log end offset)."""
        ls = self.leader_state
        if ls is None or not ls.is_leading:
            raise ReplicationInvariantError(
                f"broker {self.broker_id} appended as leader without leading"
            )
        return ls.on_local_append(self.log.log_end_offset)

    def _leads_since(self, leader_epoch: int) -> bool:
        """Leading, in the leadership that was current at ``leader_epoch`` (it began at
        that epoch or before, and has gone on since)."""
        return (
            self.is_leader
            and self.role_leader_epoch >= 0
            and self.role_leader_epoch <= leader_epoch <= self.leader_epoch
        )

    def acks_all_status(self, required_offset: int, leader_epoch: int) -> AcksAllStatus:
        """Whether an acks=all append made at ``leader_epoch`` (ending before
        ``required_offset``) is done.

        Tied to the leadership it was appended in: once that ends (even if this
        broker leads again later, at a newer epoch, its log may have been truncated
        and rewritten meanwhile) the answer is NOT_LEADER_OR_FOLLOWER. A newer
        leader epoch that keeps this broker leading continues it, as Kafka's delayed
        produce survives it.
        """
        ls = self.leader_state
        if not self._leads_since(leader_epoch) or ls is None:
            return AcksAllStatus.NOT_LEADER_OR_FOLLOWER
        return ls.acks_all_status(required_offset)

    # -- ISR changes ------------------------------------------------------------------------------

    def maybe_shrink_isr(self, now_ms: int) -> IsrChangeProposal | None:
        """Timer: propose dropping followers not caught up for ``replica.lag.time.max.ms``."""
        ls = self.leader_state
        if ls is None or not ls.is_leading:
            return None
        return ls.maybe_shrink_isr(now_ms)

    def on_isr_update_result(
        self, proposal: IsrChangeProposal, new_zk_version: int | None, *, ineligible: bool = False
    ) -> list[Action]:
        """ZooKeeper's answer to ``proposal``: the znode's new version, or None if refused.

        ``ineligible`` means an added replica was not registered at the broker
        epoch it fetched with (KIP-903): the expansion is dropped, leadership
        stays. A refused write means a controller moved the partition on: this
        replica stops leading until the next LeaderAndIsr. An answer for a
        proposal that is no longer pending (an older leadership) is ignored.
        """
        ls = self.leader_state
        if ls is None or not ls.is_leading or ls.pending_isr_change != proposal:
            return []
        if ineligible:
            ls.on_isr_update_ineligible(proposal)
            return []
        outcome = ls.on_isr_update_result(proposal, new_zk_version)
        if outcome.stop_leading is not None:
            self._end_role()
            return [outcome.stop_leading, RoleChange(Role.NONE, self.leader_epoch)]
        assert self.state is not None
        self.state = PartitionLeadership(
            leader=self.state.leader,
            leader_epoch=self.state.leader_epoch,
            isr=outcome.in_sync_replicas,
            replicas=self.state.replicas,
            zk_version=ls.partition_zk_version,
            controller_epoch=self.state.controller_epoch,
        )
        actions: list[Action] = [IsrCommitted(outcome.in_sync_replicas, ls.partition_zk_version)]
        if outcome.high_watermark_change is not None:
            actions.append(outcome.high_watermark_change)
        self.check_invariants()
        return actions

    # -- invariants ------------------------------------------------------------------------------------

    def _fail(self, msg: str) -> None:
        raise ReplicationInvariantError(f"replica on broker {self.broker_id}: {msg}")

    def check_invariants(self) -> None:
        fail = self._fail
        hw, leo = self.high_watermark, self.log.log_end_offset
        if hw > leo and self.role is Role.LEADER:
            fail(f"high watermark {hw} above log end offset {leo}")
        if (self.role is Role.LEADER) != (self.leader_state is not None):
            fail(f"role {self.role.name} with leader state {self.leader_state}")
        if (self.role is Role.FOLLOWER) != (self.follower_state is not None):
            fail(f"role {self.role.name} with follower state {self.follower_state}")
        if self.leader_state is not None:
            if self.state is None or self.leader_state.leader_epoch != self.state.leader_epoch:
                fail("leading at an epoch the controller did not give")
            self.leader_state.check_invariants()
