"""``PartitionMachine`` driven directly: events in, actions out, over a tiny in-memory log.

The simulator drives the same class through a whole cluster; these tests pin
each rule down on its own so that a change to one (found by mutation testing:
``make mutation``) fails a test that names it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from kio.schema.errors import ErrorCode

from replog.replication.actions import AdvanceLogStart
from replog.replication.core import (
    AcksAllStatus,
    HwChange,
    LeaderState,
    ReplicationInvariantError,
    StopLeading,
)
from replog.replication.fetch_rules import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchBounds,
    FetchIsolation,
    fetch_bounds,
    fetch_isolation,
)
from replog.replication.follower import EpochRequest, FollowerState, RestartAt
from replog.replication.isr import IsrChangeProposal, IsrState, isr_expiration_interval_ms
from replog.replication.machine import (
    NO_LEADER,
    AssignLeaderEpoch,
    IsrCommitted,
    PartitionLeadership,
    PartitionMachine,
    Role,
    RoleChange,
    StartFetching,
    StopFetching,
    TruncationRule,
)
from replog.replication.truncation import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_END_OFFSET,
    EpochEndOffset,
    TruncationDecision,
    assign_epoch,
    truncation_offset,
)

LAG = 1_000
CONSUMER = -1


@dataclass
class MemLog:
    """The ``LogView`` of a log that is only offsets and an epoch cache."""

    log_end_offset: int = 0
    log_start_offset: int = 0
    epochs: tuple[tuple[int, int], ...] = field(default_factory=tuple)

    def epoch_entries(self) -> tuple[tuple[int, int], ...]:
        return self.epochs


def make(
    broker_id: int = 1,
    *,
    leo: int = 0,
    hw: int = 0,
    start: int = 0,
    epochs: tuple[tuple[int, int], ...] = (),
    min_isr: int = 2,
    rule: TruncationRule = TruncationRule.LEADER_EPOCH,
) -> tuple[PartitionMachine, MemLog]:
    log = MemLog(leo, start, epochs)
    m = PartitionMachine(
        broker_id,
        log,
        high_watermark=hw,
        replica_lag_time_max_ms=LAG,
        min_insync_replicas=min_isr,
        truncation_rule=rule,
    )
    return m, log


def lai(
    leader: int,
    epoch: int,
    isr: tuple[int, ...] = (1, 2, 3),
    replicas: tuple[int, ...] = (1, 2, 3),
    zk_version: int = 10,
    controller_epoch: int = 4,
) -> PartitionLeadership:
    return PartitionLeadership(leader, epoch, isr, replicas, zk_version, controller_epoch)


def apply(log: MemLog, actions) -> None:
    """What a driver does with the actions that touch the log."""
    for a in actions:
        if isinstance(a, AssignLeaderEpoch):
            log.epochs = assign_epoch(log.epochs, a.leader_epoch, a.start_offset)


def leading(
    *, leo: int = 10, hw: int = 4, isr=(1, 2, 3), epoch: int = 5, min_isr: int = 2, now: int = 0
) -> tuple[PartitionMachine, MemLog]:
    m, log = make(leo=leo, hw=hw, min_isr=min_isr)
    error, actions = m.on_leader_and_isr(lai(1, epoch, isr), now)
    assert error is ErrorCode.none
    apply(log, actions)
    return m, log


def following(
    *, leo: int = 10, hw: int = 4, epochs=((1, 0), (3, 6)), epoch: int = 5, leader: int = 2
) -> tuple[PartitionMachine, MemLog]:
    m, log = make(leo=leo, hw=hw, epochs=epochs)
    error, _ = m.on_leader_and_isr(lai(leader, epoch), 0)
    assert error is ErrorCode.none
    return m, log


def fetching(**kw) -> tuple[PartitionMachine, MemLog]:
    """A follower past truncation (it had nothing to cut)."""
    m, log = following(**kw)
    m.on_truncated(TruncationDecision(log.log_end_offset, True))
    assert m.is_fetching
    return m, log


# -- before any LeaderAndIsr --------------------------------------------------------------


def test_new_machine_has_no_role_and_keeps_the_checkpointed_hw_within_the_log() -> None:
    m, _ = make(leo=10, hw=4)
    assert (m.role, m.role_leader_epoch, m.leader_epoch, m.leader_id) == (
        Role.NONE,
        -1,
        -1,
        NO_LEADER,
    )
    assert m.high_watermark == 4 and m.in_sync_replicas == ()
    assert not m.is_leader and not m.is_fetching and not m.is_truncating
    assert make(leo=10, hw=50)[0].high_watermark == 10  # checkpoint past a lost tail
    assert make(leo=10, hw=2, start=5)[0].high_watermark == 5  # below the log start
    assert make(leo=10, hw=10)[0].high_watermark == 10


def test_requests_to_a_replica_without_a_role_are_not_leader_or_follower() -> None:
    m, _ = make(leo=10, hw=4)
    assert m.validate_leader_request(-1) is ErrorCode.not_leader_or_follower
    assert m.check_append(acks=1) is ErrorCode.not_leader_or_follower
    assert m.on_fetch(2, 0, -1, 0).error is ErrorCode.not_leader_or_follower
    assert m.maybe_shrink_isr(10**9) is None
    assert m.acks_all_status(1, m.leader_epoch) is AcksAllStatus.NOT_LEADER_OR_FOLLOWER
    with pytest.raises(ReplicationInvariantError):
        m.on_local_append()
    with pytest.raises(ReplicationInvariantError):
        m.next_truncation_step()


# -- LeaderAndIsr ----------------------------------------------------------------------------


def test_leader_and_isr_for_a_partition_not_assigned_here_is_refused() -> None:
    m, _ = make(broker_id=7)
    error, actions = m.on_leader_and_isr(lai(1, 5), 0)
    assert (error, actions) == (ErrorCode.unknown_topic_or_partition, [])
    assert m.state is None and m.role_leader_epoch == -1 and m.leader_epoch == -1


def test_become_leader_assigns_the_epoch_at_the_log_end_and_keeps_the_hw() -> None:
    m, _ = make(leo=10, hw=4)
    error, actions = m.on_leader_and_isr(lai(1, 5, zk_version=10), 123)
    assert error is ErrorCode.none
    assert actions == [AssignLeaderEpoch(5, 10), RoleChange(Role.LEADER, 5)]
    assert m.role is Role.LEADER and m.is_leader and m.role_leader_epoch == 5
    assert (m.leader_epoch, m.leader_id, m.high_watermark) == (5, 1, 4)
    assert m.in_sync_replicas == (1, 2, 3)
    ls = m.leader_state
    assert ls is not None
    assert ls.leader_epoch == 5 and ls.leader_epoch_start_offset == 10
    assert ls.assigned_replicas == (1, 2, 3) and ls.partition_zk_version == 10
    assert ls.min_insync_replicas == 2 and ls.replica_lag_time_max_ms == LAG
    assert m.follower_state is None and not m.is_fetching


def test_leader_alone_in_the_isr_commits_its_log_at_once() -> None:
    m, _ = make(leo=10, hw=4, min_isr=1)
    _, actions = m.on_leader_and_isr(lai(1, 5, isr=(1,)), 0)
    assert actions == [AssignLeaderEpoch(5, 10), RoleChange(Role.LEADER, 5), HwChange(4, 10)]
    assert m.high_watermark == 10


def test_become_follower_starts_fetching_after_truncation() -> None:
    m, _ = make(leo=10, hw=4)
    error, actions = m.on_leader_and_isr(lai(2, 5, isr=(2, 3)), 0)
    assert error is ErrorCode.none
    assert actions == [RoleChange(Role.FOLLOWER, 5), StartFetching(2, 5)]
    assert m.role is Role.FOLLOWER and not m.is_leader and m.role_leader_epoch == 5
    assert (m.leader_epoch, m.leader_id, m.high_watermark) == (5, 2, 4)
    assert m.in_sync_replicas == (2, 3)  # as the controller said
    fs = m.follower_state
    assert fs is not None and (fs.leader_id, fs.leader_epoch, fs.broker_id) == (2, 5, 1)
    assert fs.log_end_offset == 10 and fs.high_watermark == 4
    assert m.is_truncating and not m.is_fetching
    assert m.leader_state is None


def test_following_a_new_leader_stops_fetching_from_the_old_one_first() -> None:
    m, _ = fetching(leader=2, epoch=5)
    error, actions = m.on_leader_and_isr(lai(3, 6), 0)
    assert error is ErrorCode.none
    assert actions == [StopFetching(), RoleChange(Role.FOLLOWER, 6), StartFetching(3, 6)]
    assert m.leader_id == 3 and m.is_truncating


def test_no_leader_means_no_role() -> None:
    m, _ = make(leo=10, hw=4)
    error, actions = m.on_leader_and_isr(lai(NO_LEADER, 5, isr=(2,)), 0)
    assert (error, actions) == (ErrorCode.none, [RoleChange(Role.NONE, 5)])
    assert m.role is Role.NONE and m.role_leader_epoch == -1 and m.leader_epoch == 5
    assert m.leader_id == NO_LEADER and m.in_sync_replicas == (2,) and m.high_watermark == 4
    assert m.leader_state is None and m.follower_state is None


def test_older_leader_epoch_is_refused_and_the_same_one_is_a_resend() -> None:
    m, _ = leading(epoch=5)
    before = (m.role_leader_epoch, m.leader_state, m.state)
    error, actions = m.on_leader_and_isr(lai(2, 4), 0)
    assert (error, actions) == (ErrorCode.stale_controller_epoch, [])
    # the same epoch again, even saying something else, changes nothing
    error, actions = m.on_leader_and_isr(lai(2, 5, isr=(2, 3)), 0)
    assert (error, actions) == (ErrorCode.none, [])
    assert (m.role_leader_epoch, m.leader_state, m.state) == before and m.is_leader


def test_newer_epoch_ends_leadership_and_the_follower_keeps_the_leaders_hw() -> None:
    m, log = leading(leo=10, hw=4)
    old = m.leader_state
    assert old is not None
    m.on_fetch(2, 10, 5, 1)
    m.on_fetch(3, 8, 5, 1)
    assert m.high_watermark == 8
    error, actions = m.on_leader_and_isr(lai(2, 6), 2)
    assert error is ErrorCode.none
    assert actions == [RoleChange(Role.FOLLOWER, 6), StartFetching(2, 6)]
    assert not old.is_leading and m.leader_state is None
    assert m.high_watermark == 8 and m.follower_state.high_watermark == 8
    assert m.acks_all_status(1, 1) is AcksAllStatus.NOT_LEADER_OR_FOLLOWER


def test_newer_epoch_ends_following_and_the_leader_keeps_the_followers_hw() -> None:
    m, log = fetching(leo=10, hw=4)
    log.log_end_offset = 12
    m.on_fetch_response(leader_high_watermark=7, leader_log_start_offset=0)
    _, actions = m.on_leader_and_isr(lai(1, 6), 0)
    assert actions == [StopFetching(), AssignLeaderEpoch(6, 12), RoleChange(Role.LEADER, 6)]
    assert m.follower_state is None and m.high_watermark == 7


def test_leader_kept_at_a_newer_epoch_moves_its_leader_state_in_place() -> None:
    m, log = leading(leo=10, hw=4, epoch=5)
    first = m.leader_state
    log.log_end_offset = 12
    m.on_local_append()
    m.on_fetch(2, 12, 5, 1)
    m.on_fetch(3, 10, 5, 1)
    assert m.high_watermark == 10
    # the controller dropped 3 from the ISR: still leading, the log was not truncated
    _, actions = m.on_leader_and_isr(lai(1, 6, isr=(1, 2), zk_version=11), 2)
    # Kafka's makeLeader for a leader that was leading: the followers' fetches still
    # count, so the HW reaches what the smaller ISR holds at once
    assert actions == [
        AssignLeaderEpoch(6, 12),
        RoleChange(Role.LEADER, 6),
        HwChange(10, 12),
    ]
    assert m.role_leader_epoch == 5 and m.leader_state is first and first.is_leading
    assert first.leader_epoch == 6 and first.leader_epoch_start_offset == 12
    assert first.partition_zk_version == 11
    assert m.in_sync_replicas == (1, 2) and m.high_watermark == 12
    # a fetch carrying the old epoch is fenced, the new one is served
    assert m.on_fetch(2, 12, 5, 3).error is ErrorCode.fenced_leader_epoch
    assert m.on_fetch(2, 12, 6, 3).error is ErrorCode.none


def test_leader_kept_at_a_newer_epoch_drops_a_pending_isr_change() -> None:
    m, _ = leading(leo=10, hw=4, epoch=5)
    m.on_fetch(2, 10, 5, 0)
    proposal = m.maybe_shrink_isr(60_000)  # 3 never fetched
    assert proposal is not None and proposal.new_isr == (1, 2)
    m.on_leader_and_isr(lai(1, 6, isr=(1, 2, 3), zk_version=11), 60_000)
    assert m.leader_state is not None and m.leader_state.pending_isr_change is None
    # the answer to the old proposal (its write failed on the new version) changes nothing
    assert m.on_isr_update_result(proposal, None) == []
    assert m.is_leader and m.in_sync_replicas == (1, 2, 3)
    # 3 counts as caught up as of the new epoch: not out of sync before the lag time
    assert m.maybe_shrink_isr(60_000 + 1) is None


def test_leader_kept_at_a_newer_epoch_forgets_an_isr_member_below_the_hw() -> None:
    m, log = leading(leo=10, hw=4, isr=(1, 2), epoch=5)
    m.on_fetch(2, 10, 5, 0)
    m.on_fetch(3, 2, 5, 0)  # not in the ISR, far behind
    assert m.high_watermark == 10
    # an ISR given with 3 in it: its offset from before cannot hold the HW back, and
    # the HW does not move back either; it waits for 3's next fetch
    m.on_leader_and_isr(lai(1, 6, isr=(1, 2, 3)), 0)
    assert m.leader_state is not None and m.leader_state.follower_log_end_offset(3) is None
    assert m.high_watermark == 10
    log.log_end_offset = 14
    assert m.on_local_append() is None  # 3's offset is unknown
    m.on_fetch(2, 14, 6, 1)
    m.on_fetch(3, 14, 6, 1)
    assert m.high_watermark == 14


def test_follower_of_the_same_leader_at_the_next_epoch_keeps_fetching() -> None:
    m, _ = fetching(leo=10, hw=4, epoch=5, leader=2)
    before = m.follower_state
    error, actions = m.on_leader_and_isr(lai(2, 6, isr=(2, 3)), 0)
    # no truncation round: the leader led throughout, so the logs still agree
    assert error is ErrorCode.none and actions == []
    assert m.follower_state is before and m.is_fetching and m.role_leader_epoch == 5
    assert m.leader_epoch == 6 and m.follower_state.leader_epoch == 6


def test_follower_of_the_same_leader_after_a_missed_epoch_truncates_again() -> None:
    m, _ = fetching(leo=10, hw=4, epoch=5, leader=2)
    # epoch 6 (someone else led, perhaps) never reached this broker
    _, actions = m.on_leader_and_isr(lai(2, 7), 0)
    assert actions == [StopFetching(), RoleChange(Role.FOLLOWER, 7), StartFetching(2, 7)]
    assert m.role_leader_epoch == 7
    assert m.is_truncating


def test_leading_again_after_another_role_is_a_new_role_leader_epoch() -> None:
    m, _ = leading(epoch=5)
    m.on_leader_and_isr(lai(NO_LEADER, 6), 0)
    _, actions = m.on_leader_and_isr(lai(1, 7), 0)
    assert RoleChange(Role.LEADER, 7) in actions and m.role_leader_epoch == 7
    m, _ = leading(epoch=5)
    m.on_leader_and_isr(lai(2, 6), 0)
    _, actions = m.on_leader_and_isr(lai(1, 7), 0)
    assert RoleChange(Role.LEADER, 7) in actions and m.role_leader_epoch == 7


def test_hw_of_a_new_leader_is_capped_at_its_log_end() -> None:
    m, log = make(leo=10, hw=8)
    log.log_end_offset = 6  # the log lost its tail while the replica had no role
    _, actions = m.on_leader_and_isr(lai(1, 6), 0)
    assert actions == [AssignLeaderEpoch(6, 6), RoleChange(Role.LEADER, 6), HwChange(8, 6)]
    assert m.high_watermark == 6


def test_stop_replica_drops_the_role_and_keeps_the_hw() -> None:
    m, _ = leading(leo=10, hw=4)
    assert m.stop() == [RoleChange(Role.NONE, -1)]
    assert m.state is None and m.role is Role.NONE and m.leader_epoch == -1
    assert m.high_watermark == 4 and m.leader_state is None
    m, _ = following(leo=10, hw=4)
    assert m.stop() == [StopFetching(), RoleChange(Role.NONE, -1)]
    assert m.high_watermark == 4 and m.follower_state is None
    # after StopReplica any epoch is taken again
    error, _ = m.on_leader_and_isr(lai(1, 1), 0)
    assert error is ErrorCode.none and m.is_leader and m.role_leader_epoch == 1


# -- KIP-320 and fetch bounds -------------------------------------------------------------


def test_leader_requests_are_fenced_by_leader_epoch() -> None:
    m, _ = leading(epoch=5)
    assert m.validate_leader_request(-1) is ErrorCode.none
    assert m.validate_leader_request(5) is ErrorCode.none
    assert m.validate_leader_request(4) is ErrorCode.fenced_leader_epoch
    assert m.validate_leader_request(6) is ErrorCode.unknown_leader_epoch
    assert m.on_fetch(2, 0, 4, 0).error is ErrorCode.fenced_leader_epoch
    assert m.on_fetch(CONSUMER, 0, 6, 0).error is ErrorCode.unknown_leader_epoch
    error, answer = m.answer_offsets_for_leader_epoch(4, 1)
    assert (error, answer) == (ErrorCode.fenced_leader_epoch, UNDEFINED_EPOCH_END_OFFSET)
    # a fenced follower fetch tells the leader nothing about the follower
    assert m.leader_state.follower_log_end_offset(2) is None


def test_a_follower_answers_no_leader_requests() -> None:
    m, _ = following()
    assert m.validate_leader_request(5) is ErrorCode.not_leader_or_follower
    decision = m.on_fetch(3, 0, 5, 0)
    assert decision.error is ErrorCode.not_leader_or_follower and decision.bounds is None
    assert decision.high_watermark == -1 and decision.actions == ()
    error, answer = m.answer_offsets_for_leader_epoch(5, 3)
    assert (error, answer) == (ErrorCode.not_leader_or_follower, UNDEFINED_EPOCH_END_OFFSET)


def test_a_replica_checks_the_leader_epoch_before_leadership() -> None:
    """Kafka ``Partition.getLocalLog``: a follower (or a resigned leader) that knows a
    newer leader epoch than the request's fences it; an older one does not know it yet;
    only at its own epoch (or none) does it answer NOT_LEADER_OR_FOLLOWER."""
    m, _ = following(epoch=5)
    assert m.validate_leader_request(4) is ErrorCode.fenced_leader_epoch
    assert m.validate_leader_request(6) is ErrorCode.unknown_leader_epoch
    assert m.validate_leader_request(5) is ErrorCode.not_leader_or_follower
    assert m.validate_leader_request(-1) is ErrorCode.not_leader_or_follower
    assert m.on_fetch(CONSUMER, 0, 4, 0).error is ErrorCode.fenced_leader_epoch
    assert m.answer_offsets_for_leader_epoch(4, 3)[0] is ErrorCode.fenced_leader_epoch
    resigned, _ = leading(epoch=5)
    resigned.on_session_expired()
    assert resigned.validate_leader_request(4) is ErrorCode.fenced_leader_epoch
    assert resigned.validate_leader_request(5) is ErrorCode.not_leader_or_follower


def test_followers_read_to_the_log_end_and_consumers_to_the_hw() -> None:
    m, _ = leading(leo=10, hw=4)
    d = m.on_fetch(2, 5, 5, 0)
    assert d.error is ErrorCode.none and d.bounds == FetchBounds(ErrorCode.none, 5, 10)
    assert d.high_watermark == 4 and not d.follower_lost_records
    d = m.on_fetch(CONSUMER, 2, 5, 0)
    assert d.bounds == FetchBounds(ErrorCode.none, 2, 4) and d.actions == ()
    assert d.follower_lost_records is False
    d = m.on_fetch(CONSUMER, 2, -1, 0, isolation_level=READ_COMMITTED)
    assert d.bounds == FetchBounds(ErrorCode.none, 2, 4)
    d = m.on_fetch(CONSUMER, 7, 5, 0)  # between HW and LEO: empty, not an error
    assert d.error is ErrorCode.none and d.bounds.is_empty and d.bounds.start_offset == 7


def test_fetch_outside_the_log_is_offset_out_of_range() -> None:
    m, log = leading(leo=10, hw=4)
    log.log_start_offset = 2
    for offset in (1, 11):
        d = m.on_fetch(2, offset, 5, 0)
        assert d.error is ErrorCode.offset_out_of_range and d.bounds is None
        assert d.high_watermark == 4 and d.actions == ()
    assert m.leader_state.follower_log_end_offset(2) is None
    assert m.on_fetch(2, 2, 5, 0).error is ErrorCode.none
    assert m.on_fetch(CONSUMER, 10, 5, 0).error is ErrorCode.none


def test_fetches_from_consumers_self_or_strangers_do_not_count_as_followers() -> None:
    m, _ = leading(leo=10, hw=4)
    for replica in (CONSUMER, 1, 9):
        d = m.on_fetch(replica, 10, 5, 0)
        assert d.error is ErrorCode.none and d.actions == ()
    assert m.high_watermark == 4


# -- high watermark and ISR on the leader ----------------------------------------------------


def test_follower_fetches_move_the_hw_once_every_isr_member_reported() -> None:
    m, _ = leading(leo=10, hw=4)
    d = m.on_fetch(2, 10, 5, 1)
    assert d.actions == () and d.high_watermark == 4
    d = m.on_fetch(3, 7, 5, 1)
    assert d.actions == (HwChange(4, 7),) and d.high_watermark == 7
    assert m.high_watermark == 7
    assert m.on_fetch(3, 7, 5, 2).actions == ()  # the same offsets again: no change


def test_isr_expands_when_the_follower_reaches_the_hw_and_the_epoch_start() -> None:
    m, _ = leading(leo=10, hw=4, isr=(1, 2))
    assert m.on_fetch(3, 3, 5, 1, broker_epoch=77).actions == ()  # below the HW
    d = m.on_fetch(3, 9, 5, 1, broker_epoch=77)  # at the HW, below the epoch start (10)
    assert d.actions == ()
    d = m.on_fetch(3, 10, 5, 2, broker_epoch=77)
    (proposal,) = d.actions
    assert isinstance(proposal, IsrChangeProposal)
    assert (proposal.leader_id, proposal.leader_epoch) == (1, 5)
    assert proposal.kind is IsrState.PENDING_EXPAND_ISR and proposal.new_isr == (1, 2, 3)
    assert proposal.current_isr == (1, 2)
    assert proposal.added_broker_epochs == ((3, 77),) and proposal.partition_zk_version == 10
    assert m.in_sync_replicas == (1, 2)  # committed only once ZooKeeper says so


def test_isr_expansion_waits_for_eligibility() -> None:
    m, _ = leading(leo=10, hw=10, isr=(1, 2))
    assert m.on_fetch(3, 10, 5, 1, isr_eligible=False).actions == ()
    (proposal,) = m.on_fetch(3, 10, 5, 2).actions
    assert proposal.new_isr == (1, 2, 3)


def test_committed_expansion_updates_isr_version_and_state() -> None:
    m, _ = leading(leo=10, hw=10, isr=(1, 2))
    (proposal,) = m.on_fetch(3, 10, 5, 1).actions
    actions = m.on_isr_update_result(proposal, 11)
    assert actions == [IsrCommitted((1, 2, 3), 11)]
    assert m.is_leader and m.in_sync_replicas == (1, 2, 3)
    assert m.state == lai(1, 5, isr=(1, 2, 3), zk_version=11)
    assert m.leader_state.partition_zk_version == 11 and m.leader_state.pending_isr_change is None
    assert m.maybe_shrink_isr(1) is None  # the new member is in sync, not suspect


def test_committed_shrink_can_move_the_hw() -> None:
    m, log = leading(leo=10, hw=4, now=0)
    m.on_fetch(2, 10, 5, 0)
    m.on_fetch(3, 4, 5, 0)  # 3 stays at 4
    assert m.high_watermark == 4
    assert m.maybe_shrink_isr(LAG) is None  # not yet: exactly the lag time
    proposal = m.maybe_shrink_isr(LAG + 1)
    assert proposal is not None and proposal.new_isr == (1, 2)
    assert proposal.kind is IsrState.PENDING_SHRINK_ISR
    assert m.high_watermark == 4  # still waits for 3 until ZooKeeper took it
    actions = m.on_isr_update_result(proposal, 11)
    assert actions == [IsrCommitted((1, 2), 11), HwChange(4, 10)]
    assert m.in_sync_replicas == (1, 2) and m.state.isr == (1, 2) and m.state.zk_version == 11


def test_isr_shrinks_by_time_only() -> None:
    m, log = leading(leo=10, hw=4, now=0)
    m.on_fetch(2, 10, 5, 0)
    m.on_fetch(3, 10, 5, 0)
    for t in (100, 600, 1100, 1600):
        log.log_end_offset += 1000  # a burst: far behind in offsets, never in time
        m.on_local_append()
        m.on_fetch(2, log.log_end_offset - 1000, 5, t)
        m.on_fetch(3, log.log_end_offset - 1000, 5, t)
        assert m.maybe_shrink_isr(t) is None
    # an idle follower at the log end stays, however long ago it fetched
    m2, log2 = leading(leo=10, hw=10, now=0)
    m2.on_fetch(2, 10, 5, 0)
    m2.on_fetch(3, 10, 5, 0)
    assert m2.maybe_shrink_isr(10 * LAG) is None


def test_rejected_isr_write_stops_leading_until_a_newer_leader_and_isr() -> None:
    m, log = leading(leo=10, hw=4)
    m.on_fetch(2, 10, 5, 0)
    m.on_fetch(3, 4, 5, 0)
    proposal = m.maybe_shrink_isr(LAG + 1)
    assert proposal is not None
    actions = m.on_isr_update_result(proposal, None)
    assert len(actions) == 2
    stop, role = actions
    assert isinstance(stop, StopLeading) and stop.leader_epoch == 5
    assert stop.partition_zk_version == 10
    assert role == RoleChange(Role.NONE, 5)
    assert m.role is Role.NONE and not m.is_leader and m.leader_state is None
    assert m.role_leader_epoch == -1
    assert m.high_watermark == 4 and m.leader_epoch == 5
    assert m.check_append(acks=-1) is ErrorCode.not_leader_or_follower
    assert m.on_fetch(2, 10, 5, 0).error is ErrorCode.not_leader_or_follower
    assert m.acks_all_status(4, 5) is AcksAllStatus.NOT_LEADER_OR_FOLLOWER
    assert m.maybe_shrink_isr(10 * LAG) is None
    # the answer again (a duplicate) is ignored
    assert m.on_isr_update_result(proposal, None) == []
    # the same epoch again is a resend: still fenced; a newer one is obeyed
    assert m.on_leader_and_isr(lai(1, 5), 0) == (ErrorCode.none, [])
    assert not m.is_leader
    error, actions = m.on_leader_and_isr(lai(1, 6), 0)
    assert error is ErrorCode.none and RoleChange(Role.LEADER, 6) in actions


def test_ineligible_expansion_keeps_leading_and_may_be_proposed_again() -> None:
    m, _ = leading(leo=10, hw=10, isr=(1, 2))
    (proposal,) = m.on_fetch(3, 10, 5, 1, broker_epoch=7).actions
    assert m.on_isr_update_result(proposal, None, ineligible=True) == []
    assert m.is_leader and m.role_leader_epoch == 5 and m.in_sync_replicas == (1, 2)
    assert m.leader_state.pending_isr_change is None
    (again,) = m.on_fetch(3, 10, 5, 2, broker_epoch=8).actions
    assert again.added_broker_epochs == ((3, 8),)


def test_isr_answer_for_a_proposal_that_is_not_pending_is_ignored() -> None:
    m, _ = leading(leo=10, hw=10, isr=(1, 2))
    (proposal,) = m.on_fetch(3, 10, 5, 1).actions
    other = IsrChangeProposal(1, 5, IsrState.PENDING_EXPAND_ISR, (1, 2), (1, 2, 3), 9)
    assert m.on_isr_update_result(other, 11) == []
    assert m.on_isr_update_result(other, None) == []
    assert m.is_leader and m.leader_state.pending_isr_change == proposal
    # an answer reaching a replica that no longer leads
    m.on_leader_and_isr(lai(2, 6), 0)
    assert m.on_isr_update_result(proposal, 11) == []
    assert m.on_isr_update_result(proposal, None) == []
    assert m.role is Role.FOLLOWER and m.role_leader_epoch == 6


def test_follower_in_the_isr_fetching_below_the_hw_lost_records() -> None:
    m, _ = leading(leo=10, hw=4)
    m.on_fetch(2, 10, 5, 0)
    m.on_fetch(3, 8, 5, 0)
    d = m.on_fetch(3, 2, 5, 1)
    assert d.follower_lost_records
    (proposal,) = d.actions
    assert proposal.kind is IsrState.PENDING_SHRINK_ISR and proposal.new_isr == (1, 2)


# -- produce and acks=all ---------------------------------------------------------------------


def test_check_append_needs_leadership_and_min_insync_for_acks_all() -> None:
    m, _ = leading(isr=(1, 2, 3), min_isr=3)
    assert m.check_append(acks=-1) is ErrorCode.none  # exactly min.insync.replicas
    m, _ = leading(isr=(1, 2), min_isr=3)
    assert m.check_append(acks=-1) is ErrorCode.not_enough_replicas
    assert m.check_append(acks=1) is ErrorCode.none
    assert m.check_append(acks=0) is ErrorCode.none
    m, _ = following()
    for acks in (-1, 0, 1):
        assert m.check_append(acks=acks) is ErrorCode.not_leader_or_follower


def test_local_append_moves_the_hw_of_a_leader_alone() -> None:
    m, log = leading(leo=10, hw=10, isr=(1,), min_isr=1)
    log.log_end_offset = 13
    assert m.on_local_append() == HwChange(10, 13)
    m, log = leading(leo=10, hw=4)
    log.log_end_offset = 13
    assert m.on_local_append() is None
    assert m.leader_state.log_end_offset == 13


def test_acks_all_is_tied_to_the_leadership_it_was_appended_in() -> None:
    m, log = leading(leo=10, hw=4)
    epoch = m.leader_epoch  # the produce's: it was appended at this leader epoch
    log.log_end_offset = 11
    m.on_local_append()
    assert m.acks_all_status(11, epoch) is AcksAllStatus.PENDING
    assert m.acks_all_status(11, epoch + 1) is AcksAllStatus.NOT_LEADER_OR_FOLLOWER
    assert m.acks_all_status(4, epoch - 1) is AcksAllStatus.NOT_LEADER_OR_FOLLOWER
    m.on_fetch(2, 11, 5, 1)
    m.on_fetch(3, 11, 5, 1)
    assert m.acks_all_status(11, epoch) is AcksAllStatus.SATISFIED
    # a newer epoch that keeps this broker leading continues the leadership (Kafka's
    # delayed produce survives it): a produce still waiting completes in the new epoch
    log.log_end_offset = 12
    m.on_local_append()
    m.on_leader_and_isr(lai(1, 6), 0)
    assert m.role_leader_epoch == epoch and m.leader_epoch == 6
    assert m.acks_all_status(12, epoch) is AcksAllStatus.PENDING
    m.on_fetch(2, 12, 6, 2)
    m.on_fetch(3, 12, 6, 2)
    assert m.acks_all_status(12, epoch) is AcksAllStatus.SATISFIED
    assert m.acks_all_status(12, 6) is AcksAllStatus.SATISFIED
    # leading again after another role (the log may have been rewritten meanwhile): over
    m.on_leader_and_isr(lai(2, 7), 0)
    m.on_leader_and_isr(lai(1, 8), 0)
    assert m.is_leader
    assert m.acks_all_status(4, epoch) is AcksAllStatus.NOT_LEADER_OR_FOLLOWER
    assert m.acks_all_status(4, 6) is AcksAllStatus.NOT_LEADER_OR_FOLLOWER
    assert m.acks_all_status(4, m.leader_epoch) is AcksAllStatus.SATISFIED


def test_acks_all_fails_when_the_isr_shrank_below_min_insync_meanwhile() -> None:
    m, _ = leading(leo=10, hw=4, isr=(1, 2), min_isr=2)
    m.on_fetch(2, 4, 5, 0)
    proposal = m.maybe_shrink_isr(LAG + 1)
    m.on_isr_update_result(proposal, 11)
    assert m.in_sync_replicas == (1,) and m.high_watermark == 10
    assert m.acks_all_status(10, m.leader_epoch) is AcksAllStatus.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    assert m.check_append(acks=-1) is ErrorCode.not_enough_replicas


# -- OffsetsForLeaderEpoch answered by the leader --------------------------------------------


def test_leader_answers_where_an_epoch_ends_in_its_log() -> None:
    m, log = make(leo=10, hw=4, epochs=((1, 0), (3, 6)))
    _, actions = m.on_leader_and_isr(lai(1, 5), 0)
    apply(log, actions)
    assert log.epochs == ((1, 0), (3, 6), (5, 10))
    log.log_end_offset = 14
    m.on_local_append()
    assert m.answer_offsets_for_leader_epoch(5, 1) == (ErrorCode.none, EpochEndOffset(1, 6))
    assert m.answer_offsets_for_leader_epoch(-1, 2) == (ErrorCode.none, EpochEndOffset(1, 6))
    assert m.answer_offsets_for_leader_epoch(5, 3) == (ErrorCode.none, EpochEndOffset(3, 10))
    assert m.answer_offsets_for_leader_epoch(5, 5) == (ErrorCode.none, EpochEndOffset(5, 14))
    assert m.answer_offsets_for_leader_epoch(5, 0) == (ErrorCode.none, EpochEndOffset(0, 0))
    # an epoch newer than this leader's: it is stale, not the log truncated
    assert m.answer_offsets_for_leader_epoch(5, 6) == (
        ErrorCode.unknown_leader_epoch,
        UNDEFINED_EPOCH_END_OFFSET,
    )
    assert m.answer_offsets_for_leader_epoch(-1, 9)[0] is ErrorCode.unknown_leader_epoch


# -- the follower: truncation, fetching ---------------------------------------------------------


def test_follower_asks_the_leader_about_its_latest_epoch() -> None:
    m, _ = following(epochs=((1, 0), (3, 6)), epoch=5)
    assert m.next_truncation_step() == EpochRequest(current_leader_epoch=5, requested_epoch=3)
    with pytest.raises(RuntimeError):
        _ = m.fetch_offset  # no fetching before truncation is complete


def test_follower_without_epochs_truncates_to_its_hw() -> None:
    m, _ = following(leo=10, hw=4, epochs=())
    assert m.next_truncation_step() == TruncationDecision(4, True)


def test_high_watermark_rule_ignores_the_epochs() -> None:
    m, _ = make(leo=10, hw=4, epochs=((1, 0), (3, 6)), rule=TruncationRule.HIGH_WATERMARK)
    m.on_leader_and_isr(lai(2, 5), 0)
    assert m.next_truncation_step() == TruncationDecision(4, True)


def test_follower_truncates_to_the_divergence_point_then_fetches() -> None:
    m, log = following(leo=10, hw=4, epochs=((1, 0), (3, 6)))
    decision = m.on_epoch_response(ErrorCode.none, EpochEndOffset(3, 8))
    assert decision == TruncationDecision(8, True)
    log.log_end_offset = 8
    log.epochs = ((1, 0), (3, 6))
    m.on_truncated(decision)
    assert m.is_fetching and not m.is_truncating and m.fetch_offset == 8
    assert m.high_watermark == 4  # below the cut: kept
    # the leader has all of it: nothing to cut
    m, log = following(leo=10, hw=4, epochs=((1, 0), (3, 6)))
    assert m.on_epoch_response(ErrorCode.none, EpochEndOffset(3, 12)) == TruncationDecision(
        10, True
    )


def test_truncation_below_the_hw_lowers_it() -> None:
    m, log = following(leo=10, hw=8, epochs=((1, 0), (3, 6)))
    decision = m.on_epoch_response(ErrorCode.none, EpochEndOffset(1, 6))
    assert decision == TruncationDecision(6, True)
    log.log_end_offset = 6
    m.on_truncated(decision)
    assert m.high_watermark == 6 and m.fetch_offset == 6


def test_kip_279_follower_asks_again_after_a_partial_truncation() -> None:
    m, log = following(leo=10, hw=2, epochs=((1, 0), (3, 6)), epoch=5)
    # the leader never had epoch 3: it answers with its epoch 2 ending at 4
    decision = m.on_epoch_response(ErrorCode.none, EpochEndOffset(2, 4))
    assert decision == TruncationDecision(6, False)  # where our epoch 1 ends
    log.log_end_offset, log.epochs = 6, ((1, 0),)
    m.on_truncated(decision)
    assert m.is_truncating and not m.is_fetching
    assert m.next_truncation_step() == EpochRequest(current_leader_epoch=5, requested_epoch=1)
    decision = m.on_epoch_response(ErrorCode.none, EpochEndOffset(1, 4))
    assert decision == TruncationDecision(4, True)
    log.log_end_offset = 4
    m.on_truncated(decision)
    assert m.is_fetching and m.fetch_offset == 4 and m.high_watermark == 2


def test_epoch_answer_with_an_error_or_out_of_turn_is_retried() -> None:
    m, _ = following()
    assert m.on_epoch_response(ErrorCode.fenced_leader_epoch, EpochEndOffset(3, 8)) is None
    assert m.on_epoch_response(ErrorCode.not_leader_or_follower, UNDEFINED_EPOCH_END_OFFSET) is None
    assert m.is_truncating
    m, _ = fetching()
    assert m.on_epoch_response(ErrorCode.none, EpochEndOffset(3, 8)) is None  # a late answer
    assert m.is_fetching


def test_leader_without_an_answer_means_truncate_to_the_hw() -> None:
    m, _ = following(leo=10, hw=4)
    assert m.on_epoch_response(ErrorCode.none, UNDEFINED_EPOCH_END_OFFSET) == TruncationDecision(
        4, True
    )
    assert m.on_epoch_response(ErrorCode.none, EpochEndOffset(UNDEFINED_EPOCH, 7)) == (
        TruncationDecision(7, True)
    )


def test_truncating_further_than_decided_is_an_invariant_break() -> None:
    m, log = following(leo=10, hw=4)
    log.log_end_offset = 11
    with pytest.raises(ReplicationInvariantError):
        m.on_truncated(TruncationDecision(10, True))


def test_fetch_responses_move_the_follower_hw_to_the_leaders_within_its_log() -> None:
    m, log = fetching(leo=10, hw=4)
    log.log_end_offset = 15
    assert m.on_fetch_response(leader_high_watermark=12, leader_log_start_offset=0) == [
        HwChange(4, 12)
    ]
    assert m.high_watermark == 12 and m.fetch_offset == 15
    assert m.on_fetch_response(leader_high_watermark=12, leader_log_start_offset=0) == []
    assert m.on_fetch_response(leader_high_watermark=30, leader_log_start_offset=0) == [
        HwChange(12, 15)
    ]
    # a new leader's HW may lag: the follower takes it (as Kafka does)
    assert m.on_fetch_response(leader_high_watermark=9, leader_log_start_offset=0) == [
        HwChange(15, 9)
    ]


def test_fetch_response_advances_the_log_start_up_to_the_hw() -> None:
    m, log = fetching(leo=10, hw=4)
    assert m.on_fetch_response(leader_high_watermark=10, leader_log_start_offset=3) == [
        HwChange(4, 10),
        AdvanceLogStart(3),
    ]
    log.log_start_offset = 3
    assert m.on_fetch_response(leader_high_watermark=10, leader_log_start_offset=3) == []
    assert m.on_fetch_response(leader_high_watermark=10, leader_log_start_offset=20) == [
        AdvanceLogStart(10)  # never past what is committed here
    ]
    assert m.on_fetch_response(leader_high_watermark=10, leader_log_start_offset=2) == []


def test_fetched_records_that_do_not_fit_restart_truncation() -> None:
    m, log = fetching(leo=10, hw=4)
    old = m.follower_state
    log.log_end_offset = 9
    m.on_append_mismatch()
    fs = m.follower_state
    assert fs is not old and m.is_truncating
    assert (fs.leader_id, fs.leader_epoch, fs.broker_id) == (2, 5, 1)
    assert fs.log_end_offset == 9 and fs.high_watermark == 4
    assert m.next_truncation_step() == EpochRequest(5, 3)


def test_offset_out_of_range_as_follower() -> None:
    m, _ = fetching(leo=10, hw=4)
    # the leader's log is shorter: truncate to its end, then fetch from there
    assert m.on_fetch_offset_out_of_range(0, 7) == TruncationDecision(7, True)
    assert m.is_truncating
    m, _ = fetching(leo=10, hw=4)
    # the leader deleted past our end: start over at its log start
    assert m.on_fetch_offset_out_of_range(25, 40) == RestartAt(25)
    assert m.is_fetching and m.fetch_offset == 25 and m.high_watermark == 25
    m, _ = fetching(leo=10, hw=4)
    assert m.on_fetch_offset_out_of_range(10, 10) is None  # fetch again
    assert m.on_fetch_offset_out_of_range(0, 12) is None
    assert m.is_fetching and m.fetch_offset == 10


def test_follower_events_on_a_leader_are_refused() -> None:
    m, _ = leading()
    with pytest.raises(ReplicationInvariantError):
        _ = m.fetch_offset
    for call in (
        lambda: m.on_epoch_response(ErrorCode.none, EpochEndOffset(1, 1)),
        lambda: m.on_truncated(TruncationDecision(1, True)),
        m.on_append_mismatch,
        lambda: m.on_fetch_response(leader_high_watermark=1, leader_log_start_offset=0),
        lambda: m.on_fetch_offset_out_of_range(0, 1),
    ):
        with pytest.raises(ReplicationInvariantError):
            call()


# -- always-on invariants ---------------------------------------------------------------------


def test_invariants_hold_through_the_roles() -> None:
    m, _ = make(leo=10, hw=10)
    m.check_invariants()
    m.on_leader_and_isr(lai(1, 5), 0)
    m.check_invariants()  # HW equal to the log end is fine
    m.on_leader_and_isr(lai(2, 6), 0)
    m.check_invariants()


def test_invariants_catch_a_leader_hw_past_its_log_end() -> None:
    m, log = leading(leo=10, hw=4)
    log.log_end_offset = 3  # a driver that truncated a leader's log
    with pytest.raises(ReplicationInvariantError):
        m.check_invariants()
    # the rule is the leader's: a follower learns its HW before the records
    m, log = following(leo=10, hw=4)
    log.log_end_offset = 3
    m.check_invariants()


@pytest.mark.parametrize("broken", ["role_without_leader", "leader_role_lost", "follower_role"])
def test_invariants_catch_a_role_without_its_state(broken: str) -> None:
    m, _ = leading()
    if broken == "role_without_leader":
        m.leader_state = None
    elif broken == "leader_role_lost":
        m.role = Role.NONE
    else:
        m.role = Role.FOLLOWER
    with pytest.raises(ReplicationInvariantError):
        m.check_invariants()
    m, _ = following()
    m.follower_state = None
    with pytest.raises(ReplicationInvariantError):
        m.check_invariants()


def test_invariants_catch_leading_at_an_epoch_the_controller_did_not_give() -> None:
    m, _ = leading(epoch=5)
    m.state = lai(1, 6)
    with pytest.raises(ReplicationInvariantError):
        m.check_invariants()
    m, _ = leading(epoch=5)
    m.state = None
    with pytest.raises(ReplicationInvariantError):
        m.check_invariants()


def test_invariants_check_the_leader_state_too() -> None:
    m, _ = leading(leo=10, hw=4)
    m.on_fetch(2, 10, 5, 0)
    m.on_fetch(3, 10, 5, 0)
    m.leader_state._followers[3].log_end_offset = 5  # the HW (10) is above an ISR member
    with pytest.raises(ReplicationInvariantError):
        m.check_invariants()


# -- the parts the machine is made of: LeaderState, FollowerState, pure rules ----------------------


def leader_state(*, isr=(1, 2, 3), leo=10, hw=10, now=0, epoch=5, **kw) -> LeaderState:
    args = dict(
        broker_id=1,
        leader_epoch=epoch,
        assigned_replicas=(1, 2, 3),
        in_sync_replicas=isr,
        log_end_offset=leo,
        high_watermark=hw,
        now_ms=now,
        replica_lag_time_max_ms=LAG,
        min_insync_replicas=2,
        partition_zk_version=10,
    )
    args.update(kw)
    return LeaderState(**args)


def test_leader_state_accepts_the_smallest_valid_settings_and_refuses_each_invalid_one() -> None:
    ls = leader_state(epoch=0, replica_lag_time_max_ms=1, min_insync_replicas=1)
    assert ls.leader_epoch == 0 and ls.is_leading
    for bad in (
        dict(epoch=-1),
        dict(replica_lag_time_max_ms=0),
        dict(min_insync_replicas=0),
    ):
        with pytest.raises(ValueError):
            leader_state(**bad)


def test_isr_members_count_as_caught_up_when_leadership_starts_others_never() -> None:
    ls = leader_state(isr=(1, 2), now=5_000)
    assert ls.follower_last_caught_up_time_ms(2) == 5_000
    assert ls.follower_last_caught_up_time_ms(3) == 0
    # so an ISR member that never fetches is dropped one lag time after the leadership began
    assert ls.maybe_shrink_isr(5_000 + LAG) is None
    proposal = ls.maybe_shrink_isr(5_000 + LAG + 1)
    assert proposal is not None and proposal.new_isr == (1,)


def test_a_fetch_at_the_leaders_log_end_is_caught_up_at_that_moment() -> None:
    ls = leader_state(isr=(1, 2), leo=10, hw=10, now=0)
    ls.on_follower_fetch(2, 10, now_ms=5_000)
    assert ls.follower_last_caught_up_time_ms(2) == 5_000
    ls.on_local_append(20)
    assert ls.maybe_shrink_isr(5_000 + LAG) is None
    assert ls.maybe_shrink_isr(5_000 + LAG + 1) is not None


def test_an_append_of_nothing_is_not_a_log_moving_back() -> None:
    ls = leader_state(leo=10, hw=10)
    assert ls.on_local_append(10) is None
    with pytest.raises(ReplicationInvariantError):
        ls.on_local_append(9)


def test_isr_write_must_move_the_znode_version_forward() -> None:
    ls = leader_state(isr=(1, 2))
    outcome = ls.on_follower_fetch(3, 10, now_ms=1)
    proposal = outcome.isr_change
    assert proposal is not None
    with pytest.raises(ValueError):
        ls.on_isr_update_result(proposal, 10)  # the version it was proposed at
    assert ls.on_isr_update_result(proposal, 11).in_sync_replicas == (1, 2, 3)


def test_committing_one_removal_keeps_the_other_followers_that_lost_records() -> None:
    ls = leader_state(leo=10, hw=4)
    ls.on_follower_fetch(2, 8, now_ms=0)
    ls.on_follower_fetch(3, 8, now_ms=0)
    assert ls.high_watermark == 8
    first = ls.on_follower_fetch(2, 2, now_ms=1)  # 2 restarted without its tail
    assert first.follower_lost_records and first.isr_change.new_isr == (1, 3)
    second = ls.on_follower_fetch(3, 2, now_ms=1)  # so did 3, while 2's removal is pending
    assert second.follower_lost_records and second.isr_change is None
    ls.on_isr_update_result(first.isr_change, 11)
    proposal = ls.maybe_shrink_isr(2)  # 3 is still known to have lost records
    assert proposal is not None and proposal.new_isr == (1,)


def test_a_follower_that_lost_records_rejoins_clean_after_an_ineligible_expansion() -> None:
    ls = leader_state(isr=(1, 2), leo=10, hw=4)
    ls.on_follower_fetch(2, 10, now_ms=0)
    assert ls.high_watermark == 10
    expansion = ls.on_follower_fetch(3, 10, now_ms=0).isr_change
    assert expansion is not None
    assert ls.on_follower_fetch(3, 5, now_ms=1).follower_lost_records  # pending member lost some
    ls.on_isr_update_ineligible(expansion)
    again = ls.on_follower_fetch(3, 10, now_ms=2).isr_change
    assert again is not None and again.new_isr == (1, 2, 3)
    ls.on_isr_update_result(again, 11)
    assert ls.maybe_shrink_isr(3) is None  # it caught up: no longer counted as having lost records


def test_resign_answers_stop_leading_and_drops_a_pending_change() -> None:
    ls = leader_state(isr=(1, 2))
    assert ls.on_follower_fetch(3, 10, now_ms=1).isr_change is not None
    stop = ls.resign("a newer leader epoch")
    assert stop == StopLeading(5, 10, "a newer leader epoch")
    assert not ls.is_leading and ls.pending_isr_change is None
    assert ls.in_sync_replicas == (1, 2) and ls.isr_state is IsrState.COMMITTED


def test_rejected_isr_write_outcome() -> None:
    ls = leader_state(isr=(1, 2))
    proposal = ls.on_follower_fetch(3, 10, now_ms=1).isr_change
    outcome = ls.on_isr_update_result(proposal, None)
    assert outcome.committed is False and outcome.in_sync_replicas == (1, 2)
    assert outcome.stop_leading is not None and outcome.stop_leading.partition_zk_version == 10
    assert not ls.is_leading and ls.pending_isr_change is None


def test_isr_expiration_runs_at_half_the_lag_time() -> None:
    assert isr_expiration_interval_ms(1_000) == 500
    assert isr_expiration_interval_ms(3) == 1
    assert isr_expiration_interval_ms(2) == 1
    assert isr_expiration_interval_ms(1) == 1


def test_broker_zero_is_a_follower_not_a_consumer() -> None:
    assert fetch_isolation(0, READ_UNCOMMITTED) is FetchIsolation.LOG_END
    assert fetch_isolation(0, READ_COMMITTED) is FetchIsolation.LOG_END
    m, _ = make(broker_id=1, leo=10, hw=4)
    m.on_leader_and_isr(lai(1, 5, isr=(0, 1), replicas=(0, 1)), 0)
    d = m.on_fetch(0, 6, 5, 0)
    assert d.bounds == FetchBounds(ErrorCode.none, 6, 10)  # to the log end, past the HW
    assert d.actions == (HwChange(4, 6),)  # and it counts as the follower it is


def test_fetch_out_of_range_reads_nothing() -> None:
    for offset in (1, 11):
        bounds = fetch_bounds(
            fetch_offset=offset,
            log_start_offset=2,
            high_watermark=5,
            log_end_offset=10,
            isolation=FetchIsolation.LOG_END,
        )
        assert bounds == FetchBounds(ErrorCode.offset_out_of_range, offset, offset)


def test_follower_state_refuses_negative_offsets() -> None:
    for leo, hw in ((-1, 0), (0, -1)):
        with pytest.raises(ValueError):
            FollowerState(
                broker_id=1, leader_id=2, leader_epoch=5, log_end_offset=leo, high_watermark=hw
            )


def test_truncating_to_zero_leaves_an_empty_log() -> None:
    m, log = following(leo=10, hw=0, epochs=())
    decision = m.next_truncation_step()
    assert decision == TruncationDecision(0, True)
    log.log_end_offset = 1
    with pytest.raises(ReplicationInvariantError):
        m.on_truncated(decision)
    log.log_end_offset = 0
    m.on_truncated(decision)
    assert m.fetch_offset == 0


def test_truncation_with_no_local_epoch_trusts_the_leaders_offset_within_the_log() -> None:
    # the epoch cache is empty by the time the answer comes back
    assert truncation_offset((), 10, 4, EpochEndOffset(3, 7)) == TruncationDecision(7, True)
    assert truncation_offset((), 10, 4, EpochEndOffset(3, 12)) == TruncationDecision(10, True)


def test_truncation_never_goes_past_the_local_log_end() -> None:
    # an epoch cache that runs ahead of the log (its tail was lost, the cache not yet cut)
    entries = ((1, 0), (3, 12))
    assert truncation_offset(entries, 10, 4, EpochEndOffset(1, 15)) == TruncationDecision(10, True)


# -- a ZooKeeper session surely expired ----------------------------------------------------


def test_a_fenced_leader_takes_its_epoch_again_once_registered_anew() -> None:
    """Fenced at epoch 5 (session expired), the same epoch is a resend until the broker
    registered again; after that, the controller naming it leader at 5 is obeyed (nobody
    else led: every election bumps the epoch), once. A follower role is never retaken."""
    m, _ = leading(epoch=5)
    m.on_session_expired()
    assert m.on_leader_and_isr(lai(1, 5), 0) == (ErrorCode.none, [])  # before the new session
    assert not m.is_leader
    m.on_session_renewed()
    error, actions = m.on_leader_and_isr(lai(1, 5), 0)
    assert error is ErrorCode.none and RoleChange(Role.LEADER, 5) in actions
    assert m.is_leader and m.role_leader_epoch == 5
    assert m.on_leader_and_isr(lai(1, 5), 0) == (ErrorCode.none, [])  # a resend again
    # renewed without having fenced itself: nothing changes
    f, _ = following(epoch=5)
    f.on_session_renewed()
    assert f.on_leader_and_isr(lai(1, 5), 0) == (ErrorCode.none, [])
    assert f.role is Role.FOLLOWER


def test_an_expired_session_ends_leadership_until_a_newer_leader_and_isr() -> None:
    m, _ = leading(epoch=5)
    actions = m.on_session_expired()
    assert [type(a) for a in actions] == [StopLeading, RoleChange]
    assert actions[1] == RoleChange(Role.NONE, 5)
    assert m.check_append(-1) is ErrorCode.not_leader_or_follower
    assert m.check_append(1) is ErrorCode.not_leader_or_follower
    assert m.validate_leader_request(5) is ErrorCode.not_leader_or_follower
    assert m.maybe_shrink_isr(10 * LAG) is None
    assert m.on_session_expired() == []  # once
    # a resend of the same epoch does not bring leadership back; a newer one does
    assert m.on_leader_and_isr(lai(1, 5), 0) == (ErrorCode.none, [])
    assert not m.is_leader
    error, actions = m.on_leader_and_isr(lai(1, 6), 0)
    assert error is ErrorCode.none and RoleChange(Role.LEADER, 6) in actions
    assert m.check_append(-1) is ErrorCode.none


def test_an_expired_session_leaves_followers_following() -> None:
    m, _ = fetching(leader=2, epoch=5)
    assert m.on_session_expired() == []
    assert m.role is Role.FOLLOWER and m.is_fetching
