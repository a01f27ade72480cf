"""Unit and property tests for the sans-IO replication core (replog.replication.*)."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from kio.schema.errors import ErrorCode

from replog.replication.core import (
    AcksAllStatus,
    LeaderState,
    NotLeadingError,
    ReplicationInvariantError,
)
from replog.replication.fetch_rules import (
    FetchIsolation,
    fetch_bounds,
    fetch_isolation,
    validate_current_leader_epoch,
)
from replog.replication.follower import (
    EpochRequest,
    FollowerPhase,
    FollowerState,
    IllegalFollowerTransition,
    RestartAt,
)
from replog.replication.isr import (
    IllegalIsrStateTransition,
    IsrChangePropagation,
    IsrState,
    check_isr_transition,
    isr_expiration_interval_ms,
)
from replog.replication.truncation import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_END_OFFSET,
    EpochEndOffset,
    TruncationDecision,
    assign_epoch,
    check_epoch_entries,
    end_offset_for_epoch,
    high_watermark_truncation,
    truncate_epochs_from_end,
    truncation_offset,
)
from replog.storage.leader_epoch import LeaderEpochFileCache

LAG = 10_000


def leader(
    *,
    isr=(1, 2, 3),
    assigned=(1, 2, 3),
    leo=0,
    hw=0,
    now=0,
    min_isr=2,
    epoch=5,
    zk_version=7,
    start=None,
) -> LeaderState:
    return LeaderState(
        broker_id=1,
        leader_epoch=epoch,
        assigned_replicas=assigned,
        in_sync_replicas=isr,
        log_end_offset=leo,
        high_watermark=hw,
        now_ms=now,
        replica_lag_time_max_ms=LAG,
        min_insync_replicas=min_isr,
        partition_zk_version=zk_version,
        leader_epoch_start_offset=start,
    )


# -- construction -------------------------------------------------------------------


def test_constructor_rejects_inconsistent_state():
    with pytest.raises(ValueError):
        leader(isr=(2, 3))  # leader not in ISR
    with pytest.raises(ValueError):
        leader(isr=(1, 4))  # ISR outside assignment
    with pytest.raises(ValueError):
        leader(leo=3, hw=4)
    with pytest.raises(ValueError):
        leader(min_isr=0)


def test_new_leader_epoch_in_place_rejects_inconsistent_state():
    ls = leader(leo=10, hw=4)

    def bump(**kw):
        args = dict(
            leader_epoch=6,
            assigned_replicas=(1, 2, 3),
            in_sync_replicas=(1, 2),
            partition_zk_version=8,
            log_end_offset=10,
            now_ms=0,
        )
        args.update(kw)
        return ls.on_new_leader_epoch(**args)

    with pytest.raises(ValueError):
        bump(leader_epoch=5)  # not after the current epoch
    with pytest.raises(ValueError):
        bump(in_sync_replicas=(2, 3))  # leader not in the ISR
    with pytest.raises(ValueError):
        bump(in_sync_replicas=(1, 4))  # ISR outside the assignment
    with pytest.raises(ReplicationInvariantError):
        bump(log_end_offset=9)  # a leader's log does not shrink while it leads
    assert ls.leader_epoch == 5 and ls.in_sync_replicas == (1, 2, 3)
    bump(log_end_offset=12)
    assert ls.leader_epoch == 6 and ls.leader_epoch_start_offset == 12
    assert ls.log_end_offset == 12 and ls.partition_zk_version == 8
    assert ls.follower_log_end_offset(2) is None  # never fetched: still unknown


def test_new_leader_alone_in_isr_commits_its_whole_log():
    ls = leader(isr=(1,), leo=10, hw=4)
    assert ls.high_watermark == 10


def test_new_leader_waits_for_every_isr_follower_to_report():
    ls = leader(leo=10, hw=4)
    assert ls.high_watermark == 4
    out = ls.on_follower_fetch(2, 10, now_ms=1)
    assert out.high_watermark_change is None  # replica 3's offset is still unknown
    out = ls.on_follower_fetch(3, 8, now_ms=2)
    assert out.high_watermark_change is not None
    assert (out.high_watermark_change.old, out.high_watermark_change.new) == (4, 8)


# -- high watermark -------------------------------------------------------------------


def test_high_watermark_is_min_isr_leo_and_never_moves_back():
    ls = leader(leo=0)
    ls.on_local_append(5)
    ls.on_follower_fetch(2, 5, now_ms=1)
    ls.on_follower_fetch(3, 3, now_ms=1)
    assert ls.high_watermark == 3
    ls.on_follower_fetch(3, 5, now_ms=2)
    assert ls.high_watermark == 5
    ls.on_local_append(9)
    assert ls.high_watermark == 5
    # A follower outside the ISR does not hold the HW back.
    ls2 = leader(isr=(1, 2), leo=4)
    ls2.on_follower_fetch(2, 4, now_ms=1)
    assert ls2.high_watermark == 4


def test_leader_log_never_shrinks_while_leading():
    ls = leader(leo=5)
    with pytest.raises(ReplicationInvariantError):
        ls.on_local_append(4)


def test_fetch_offset_beyond_leader_log_is_rejected():
    ls = leader(leo=5)
    with pytest.raises(ValueError):
        ls.on_follower_fetch(2, 6, now_ms=1)
    with pytest.raises(ValueError):
        ls.on_follower_fetch(9, 0, now_ms=1)


# -- ISR shrink: time only (seed 001) --------------------------------------------------


def test_burst_of_writes_never_shrinks_a_follower_that_keeps_fetching():
    ls = leader(leo=0)
    now = 0
    for _ in range(300):  # 60 s of 1000-record bursts between fetches 200 ms apart
        ls.on_local_append(ls.log_end_offset + 1000)
        now += 200
        for r in (2, 3):
            # each follower has everything the leader had at its previous fetch,
            # but a new burst has landed since: it is never at the leader's LEO
            ls.on_follower_fetch(r, ls.log_end_offset - 1000, now)
        assert ls.maybe_shrink_isr(now) is None
    assert ls.in_sync_replicas == (1, 2, 3)
    assert ls.log_end_offset - ls.high_watermark == 1000


def test_stuck_follower_is_dropped_only_after_lag_time():
    ls = leader(leo=0, now=0)
    ls.on_follower_fetch(2, 0, now_ms=0)
    ls.on_follower_fetch(3, 0, now_ms=0)
    ls.on_local_append(1)  # now followers are behind
    ls.on_follower_fetch(2, 1, now_ms=100)
    assert ls.maybe_shrink_isr(LAG) is None  # exactly the lag: still in sync
    p = ls.maybe_shrink_isr(LAG + 1)
    assert p is not None and p.kind is IsrState.PENDING_SHRINK_ISR
    assert p.new_isr == (1, 2) and p.removed == {3}
    assert p.partition_zk_version == 7 and p.leader_epoch == 5


def test_idle_follower_at_log_end_stays_in_sync_without_fetching():
    ls = leader(leo=3)
    ls.on_follower_fetch(2, 3, 0)
    ls.on_follower_fetch(3, 3, 0)
    assert ls.maybe_shrink_isr(10 * LAG) is None


def test_slow_follower_that_never_reaches_previous_leo_is_dropped():
    ls = leader(leo=0)
    ls.on_follower_fetch(2, 0, 0)
    ls.on_follower_fetch(3, 0, 0)
    now = 0
    for _ in range(60):
        ls.on_local_append(ls.log_end_offset + 100)
        now += 500
        ls.on_follower_fetch(2, ls.log_end_offset, now)
        # follower 3 always gets only half of what the leader had at its last fetch
        ls.on_follower_fetch(3, ls.follower_log_end_offset(3) + 10, now)
        p = ls.maybe_shrink_isr(now)
        if p is not None:
            break
    assert p is not None and p.removed == {3}
    assert now - ls.follower_last_caught_up_time_ms(3) > LAG


def test_pending_shrink_keeps_hw_waiting_until_zookeeper_confirms():
    ls = leader(leo=0)
    ls.on_follower_fetch(2, 0, 0)
    ls.on_follower_fetch(3, 0, 0)
    ls.on_local_append(10)
    ls.on_follower_fetch(2, 10, 1)
    p = ls.maybe_shrink_isr(LAG + 1)
    assert p is not None and ls.isr_state is IsrState.PENDING_SHRINK_ISR
    assert ls.maximal_in_sync_replicas == (1, 2, 3)
    assert ls.high_watermark == 0  # still waiting for 3 (the maximal ISR)
    assert ls.maybe_shrink_isr(LAG + 2) is None  # one change in flight at a time
    out = ls.on_isr_update_result(p, 8)
    assert out.committed and out.in_sync_replicas == (1, 2)
    assert out.high_watermark_change is not None and out.high_watermark_change.new == 10
    assert ls.partition_zk_version == 8 and ls.isr_state is IsrState.COMMITTED


def test_rejected_isr_update_stops_leading():
    ls = leader(leo=0)
    ls.on_follower_fetch(2, 0, 0)
    ls.on_follower_fetch(3, 0, 0)
    ls.on_local_append(3)
    p = ls.maybe_shrink_isr(LAG + 1)
    assert p is not None
    out = ls.on_isr_update_result(p, None)
    assert not out.committed and out.stop_leading is not None
    assert out.stop_leading.leader_epoch == 5
    assert not ls.is_leading
    with pytest.raises(NotLeadingError):
        ls.on_local_append(4)
    with pytest.raises(NotLeadingError):
        ls.on_follower_fetch(2, 3, LAG + 2)
    with pytest.raises(NotLeadingError):
        ls.can_accept_acks_all()


def test_isr_result_for_unknown_proposal_is_rejected():
    ls = leader(leo=0)
    ls.on_follower_fetch(2, 0, 0)
    ls.on_follower_fetch(3, 0, 0)
    ls.on_local_append(3)
    p = ls.maybe_shrink_isr(LAG + 1)
    ls.on_isr_update_result(p, 8)
    with pytest.raises(ValueError):
        ls.on_isr_update_result(p, 9)


# -- ISR expand ----------------------------------------------------------------------------


def test_follower_joins_isr_at_hw_and_epoch_start():
    ls = leader(isr=(1, 2), leo=20, hw=10, start=15)
    ls.on_follower_fetch(2, 20, 0)
    assert ls.high_watermark == 20
    assert ls.on_follower_fetch(3, 12, 1).isr_change is None  # below HW
    out = ls.on_follower_fetch(3, 20, 2)
    p = out.isr_change
    assert p is not None and p.kind is IsrState.PENDING_EXPAND_ISR and p.new_isr == (1, 2, 3)
    ls.on_local_append(25)
    ls.on_follower_fetch(2, 25, 3)
    assert ls.high_watermark == 20  # maximal ISR includes 3 while pending
    ls.on_isr_update_result(p, 8)
    assert ls.in_sync_replicas == (1, 2, 3)
    ls.on_follower_fetch(3, 25, 4)
    assert ls.high_watermark == 25


def test_follower_below_epoch_start_does_not_join():
    ls = leader(isr=(1,), leo=20, hw=5, start=20)
    assert ls.high_watermark == 20
    ls2 = leader(isr=(1, 2), leo=20, hw=5, start=20)
    ls2.on_follower_fetch(2, 10, 0)
    assert ls2.high_watermark == 10
    assert ls2.on_follower_fetch(3, 12, 0).isr_change is None  # >= HW but < epoch start
    assert ls2.on_follower_fetch(3, 20, 1).isr_change is not None


def test_expansion_carries_broker_epoch_and_ineligible_reverts_without_resigning():
    ls = leader(isr=(1, 2), leo=4, hw=4)
    ls.on_follower_fetch(2, 4, 0)
    # offline / fenced / other broker epoch according to the metadata: no proposal at all
    assert ls.on_follower_fetch(3, 4, 1, broker_epoch=41, isr_eligible=False).isr_change is None
    p = ls.on_follower_fetch(3, 4, 2, broker_epoch=42).isr_change
    assert p is not None and p.added == {3} and p.added_broker_epochs == ((3, 42),)
    ls.on_isr_update_ineligible(p)  # ZooKeeper: 3 is not registered at broker epoch 42
    assert ls.is_leading and ls.isr_state is IsrState.COMMITTED
    assert ls.in_sync_replicas == (1, 2) and ls.maximal_in_sync_replicas == (1, 2)
    with pytest.raises(ValueError):
        ls.on_isr_update_ineligible(p)
    p2 = ls.on_follower_fetch(3, 4, 3, broker_epoch=43).isr_change
    assert p2 is not None and p2.added_broker_epochs == ((3, 43),)
    ls.on_isr_update_result(p2, 8)
    assert ls.in_sync_replicas == (1, 2, 3)


def test_follower_that_lost_records_is_proposed_for_removal_at_once():
    ls = leader(leo=10)
    ls.on_follower_fetch(2, 10, 0)
    ls.on_follower_fetch(3, 10, 0)
    assert ls.high_watermark == 10
    out = ls.on_follower_fetch(3, 6, 1)  # restarted and lost an unflushed tail
    assert out.follower_lost_records
    assert out.isr_change is not None and out.isr_change.removed == {3}
    ls.check_invariants()  # the lost follower is excluded from the HW check


# -- acks=all ---------------------------------------------------------------------------------


def test_acks_all_and_min_insync_replicas():
    ls = leader(isr=(1, 2), leo=0, min_isr=2)
    assert ls.can_accept_acks_all() is None
    ls.on_local_append(1)
    assert ls.acks_all_status(1) is AcksAllStatus.PENDING
    ls.on_follower_fetch(2, 1, 0)
    assert ls.acks_all_satisfied(1)
    ls.on_local_append(2)
    p = ls.maybe_shrink_isr(LAG + 1)
    ls.on_isr_update_result(p, 8)
    assert ls.in_sync_replicas == (1,)
    assert ls.can_accept_acks_all() is ErrorCode.not_enough_replicas
    status = ls.acks_all_status(2)
    assert status is AcksAllStatus.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    assert status.error is ErrorCode.not_enough_replicas_after_append


# -- ISR change propagation (seed 003) --------------------------------------------------------


def test_isr_change_propagation_batches():
    p = IsrChangePropagation.starting_at(90_000)
    assert p.maybe_propagate(100_000) is None  # nothing pending
    p.record_isr_change(("t", 0), 100_000)
    assert p.maybe_propagate(103_000) is None  # a change within the last 5 s
    p.record_isr_change(("t", 1), 104_000)
    assert p.maybe_propagate(109_000) is None  # exactly 5 s: not yet
    assert p.maybe_propagate(109_001) == {("t", 0), ("t", 1)}
    assert p.maybe_propagate(200_000) is None
    # a change long after the last propagation goes out at the next check
    p.record_isr_change(("t", 2), 200_000)
    assert p.maybe_propagate(200_001) == {("t", 2)}


def test_isr_change_propagation_forced_after_a_minute_of_constant_changes():
    p = IsrChangePropagation.starting_at(0)
    now = 0
    got = None
    while got is None:
        now += 2_500
        p.record_isr_change(("t", now), now)  # never quiet for 5 s
        got = p.maybe_propagate(now)
    assert now == 62_500 and len(got) == 25
    assert isr_expiration_interval_ms(30_000) == 15_000


def test_isr_state_transition_table():
    check_isr_transition(IsrState.COMMITTED, IsrState.PENDING_SHRINK_ISR)
    with pytest.raises(IllegalIsrStateTransition):
        check_isr_transition(IsrState.PENDING_EXPAND_ISR, IsrState.PENDING_SHRINK_ISR)


# -- fetch rules --------------------------------------------------------------------------------


def test_fetch_bounds_table():
    kw = dict(log_start_offset=10, high_watermark=20, log_end_offset=30)
    consumer = FetchIsolation.HIGH_WATERMARK
    b = fetch_bounds(fetch_offset=15, isolation=consumer, **kw)
    assert (b.error, b.start_offset, b.end_offset) == (ErrorCode.none, 15, 20)
    for off in (20, 25, 30):  # [HW, LEO]: empty, not out of range
        b = fetch_bounds(fetch_offset=off, isolation=consumer, **kw)
        assert b.error is ErrorCode.none and b.is_empty
    for off in (9, 31):
        b = fetch_bounds(fetch_offset=off, isolation=consumer, **kw)
        assert b.error is ErrorCode.offset_out_of_range and not b.is_empty
    b = fetch_bounds(fetch_offset=25, isolation=FetchIsolation.LOG_END, **kw)
    assert (b.start_offset, b.end_offset) == (25, 30)
    b = fetch_bounds(
        fetch_offset=12, isolation=FetchIsolation.TXN_COMMITTED, last_stable_offset=15, **kw
    )
    assert b.end_offset == 15
    assert fetch_isolation(2, 0) is FetchIsolation.LOG_END
    assert fetch_isolation(-1, 1) is FetchIsolation.TXN_COMMITTED
    assert fetch_isolation(-1, 0) is FetchIsolation.HIGH_WATERMARK


@given(
    st.integers(0, 50),
    st.integers(0, 50),
    st.integers(0, 50),
    st.integers(-5, 120),
    st.sampled_from(list(FetchIsolation)),
)
def test_fetch_bounds_properties(a, b, c, fetch_offset, isolation):
    start, hw, leo = sorted((a, a + b, a + b + c))
    r = fetch_bounds(
        fetch_offset=fetch_offset,
        log_start_offset=start,
        high_watermark=hw,
        log_end_offset=leo,
        isolation=isolation,
    )
    if start <= fetch_offset <= leo:
        assert r.error is ErrorCode.none and r.start_offset == fetch_offset
        limit = leo if isolation is FetchIsolation.LOG_END else hw
        assert r.end_offset <= max(limit, fetch_offset)  # consumers never see above HW
        assert r.end_offset == max(fetch_offset, limit)
    else:
        assert r.error is ErrorCode.offset_out_of_range


def test_kip_320_epoch_validation():
    assert validate_current_leader_epoch(-1, 5) is ErrorCode.none
    assert validate_current_leader_epoch(5, 5) is ErrorCode.none
    assert validate_current_leader_epoch(4, 5) is ErrorCode.fenced_leader_epoch
    assert validate_current_leader_epoch(6, 5) is ErrorCode.unknown_leader_epoch


# -- leader epoch cache and truncation ----------------------------------------------------------


def test_end_offset_for_epoch_cases():
    entries = ((1, 0), (3, 10), (6, 25))
    assert end_offset_for_epoch(entries, 40, 6) == EpochEndOffset(6, 40)
    assert end_offset_for_epoch(entries, 40, 3) == EpochEndOffset(3, 25)
    assert end_offset_for_epoch(entries, 40, 4) == EpochEndOffset(3, 25)
    assert end_offset_for_epoch(entries, 40, 0) == EpochEndOffset(0, 0)
    assert end_offset_for_epoch(entries, 40, 7) == UNDEFINED_EPOCH_END_OFFSET
    assert end_offset_for_epoch(entries, 40, UNDEFINED_EPOCH) == UNDEFINED_EPOCH_END_OFFSET
    assert end_offset_for_epoch((), 40, 2) == UNDEFINED_EPOCH_END_OFFSET


def test_assign_and_truncate_epochs():
    e = assign_epoch((), 1, 0)
    e = assign_epoch(e, 3, 10)
    assert assign_epoch(e, 2, 12) == e  # older epoch ignored
    assert assign_epoch(e, 3, 11) == e  # latest epoch at a later offset ignored
    assert assign_epoch(e, 4, 10) == ((1, 0), (4, 10))  # same start offset replaces
    assert assign_epoch(e, 5, 7) == ((1, 0), (5, 7))
    assert truncate_epochs_from_end(e, 10) == ((1, 0),)
    assert truncate_epochs_from_end(e, 11) == e
    check_epoch_entries(e)
    with pytest.raises(ValueError):
        check_epoch_entries(((3, 0), (2, 5)))


def test_truncation_offset_cases():
    follower = ((0, 0), (1, 3))
    # the leader knows our latest epoch and it ends earlier in its log
    assert truncation_offset(follower, 6, 2, EpochEndOffset(1, 4)) == TruncationDecision(4, True)
    # the leader's epoch 0 ended at 3, where ours did too
    assert truncation_offset(follower, 6, 2, EpochEndOffset(0, 3)) == TruncationDecision(3, True)
    # no epoch information at the leader: fall back to the high watermark
    assert truncation_offset(follower, 6, 2, UNDEFINED_EPOCH_END_OFFSET) == TruncationDecision(
        2, True
    )
    # an old-format answer without an epoch
    assert truncation_offset(follower, 6, 2, EpochEndOffset(-1, 5)) == TruncationDecision(5, True)
    # the leader answers with an epoch (2) we skipped: go to where our epoch 1 ends, ask again
    follower2 = ((0, 0), (1, 2), (3, 3))
    assert truncation_offset(follower2, 5, 0, EpochEndOffset(2, 4)) == TruncationDecision(3, False)
    # the leader's offset beyond our log: keep our log
    assert truncation_offset(follower, 6, 2, EpochEndOffset(1, 9)) == TruncationDecision(6, True)
    assert high_watermark_truncation(6, 2) == TruncationDecision(2, True)


@st.composite
def log_histories(draw):
    """Logs as lists of per-offset epochs, built the way leaders build them.

    Leader k takes a prefix of an earlier leader's log (the replica it ran on
    had followed that leader), then appends records in its own, larger epoch.
    Returns (leader_log, leader_cache, follower_log, follower_cache).
    """
    logs: list[tuple[list[int], tuple[tuple[int, int], ...]]] = [([], ())]
    epoch = 0
    for _ in range(draw(st.integers(1, 6))):
        epoch += draw(st.integers(1, 2))
        base_log, base_cache = logs[draw(st.integers(0, len(logs) - 1))]
        cut = draw(st.integers(0, len(base_log)))
        log = base_log[:cut]
        cache = assign_epoch(truncate_epochs_from_end(base_cache, cut), epoch, cut)
        log = log + [epoch] * draw(st.integers(0, 4))
        logs.append((log, cache))
    leader_log, leader_cache = logs[-1]
    f_log, f_cache = logs[draw(st.integers(0, len(logs) - 1))]
    f_cut = draw(st.integers(0, len(f_log)))
    if f_cut < len(f_log):
        f_log = f_log[:f_cut]
        f_cache = truncate_epochs_from_end(f_cache, f_cut)
    # else: keep the cache whole, possibly with an epoch that got no records (a leader
    # that was replaced before its first append)
    return leader_log, leader_cache, f_log, f_cache


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@settings(max_examples=400)
@given(log_histories())
def test_epoch_truncation_finds_exactly_where_logs_diverge(history):
    leader_log, leader_cache, f_log, f_cache = history
    original = list(f_log)
    check_epoch_entries(leader_cache)
    check_epoch_entries(f_cache)
    follower = FollowerState(
        broker_id=2, leader_id=1, leader_epoch=99, log_end_offset=len(f_log), high_watermark=0
    )
    rounds = 0
    while follower.phase is FollowerPhase.TRUNCATING:
        rounds += 1
        assert rounds <= len(f_cache) + 2
        step = follower.next_truncation_step(f_cache)
        if isinstance(step, EpochRequest):
            answer = end_offset_for_epoch(leader_cache, len(leader_log), step.requested_epoch)
            step = follower.on_epoch_response(f_cache, answer)
        f_log = f_log[: step.offset]
        # like Kafka's truncateTo, the epoch cache is cut at the new end even on a no-op
        f_cache = truncate_epochs_from_end(f_cache, len(f_log))
        follower.on_truncated(step, len(f_log))
    # what is left is a prefix of the leader's log, and nothing shared was thrown away
    assert f_log == leader_log[: len(f_log)]
    assert len(f_log) == common_prefix(original, leader_log)


@settings(max_examples=60, deadline=None)  # the storage cache writes its checkpoint file
@given(
    st.lists(st.tuples(st.integers(0, 30), st.integers(0, 100)), max_size=10),
    st.integers(0, 120),
    st.integers(-1, 35),
)
def test_pure_epoch_cache_agrees_with_storage_cache(tmp_path_factory, ops, leo, requested):
    cache = LeaderEpochFileCache(tmp_path_factory.mktemp("epochs") / "leader-epoch-checkpoint")
    entries: tuple[tuple[int, int], ...] = ()
    for epoch, start in ops:
        if start % 7 == 0 and entries:  # sometimes truncate instead of assigning
            cache.truncate_from_end(start)
            entries = truncate_epochs_from_end(entries, start)
        else:
            cache.assign(epoch, start)
            entries = assign_epoch(entries, epoch, start)
        assert tuple(cache.entries()) == entries
    assume(not entries or leo >= entries[-1][1])
    assert (
        tuple(cache.end_offset_for(requested, leo))
        == tuple(
            (a.leader_epoch, a.end_offset) for a in [end_offset_for_epoch(entries, leo, requested)]
        )[0]
    )


# -- follower state ----------------------------------------------------------------------------


def test_follower_state_flow():
    f = FollowerState(
        broker_id=2, leader_id=1, leader_epoch=4, log_end_offset=10, high_watermark=12
    )
    assert f.high_watermark == 10  # clamped to the log
    with pytest.raises(IllegalFollowerTransition):
        _ = f.fetch_offset
    assert f.next_truncation_step(()) == TruncationDecision(10, True)  # no epochs: HW
    step = f.next_truncation_step(((1, 0), (3, 6)))
    assert step == EpochRequest(current_leader_epoch=4, requested_epoch=3)
    d = f.on_epoch_response(((1, 0), (3, 6)), EpochEndOffset(3, 8))
    assert d == TruncationDecision(8, True)
    with pytest.raises(ReplicationInvariantError):
        f.on_truncated(d, 9)
    f.on_truncated(d, 8)
    assert f.phase is FollowerPhase.FETCHING and f.fetch_offset == 8 and f.high_watermark == 8
    change = f.on_fetch_response(12, 11)
    assert change is not None and change.new == 11
    assert f.on_fetch_response(12, 20).new == 12  # HW capped by own LEO
    assert f.on_fetch_response(12, 9).new == 9  # a new leader's lagging HW is taken as is
    with pytest.raises(ReplicationInvariantError):
        f.on_fetch_response(11, 9)
    assert f.on_offset_out_of_range(0, 15) is None
    assert f.on_offset_out_of_range(20, 25) == RestartAt(20)
    assert f.fetch_offset == 20
    d = f.on_offset_out_of_range(0, 15)
    assert d == TruncationDecision(15, True) and f.phase is FollowerPhase.TRUNCATING
    f.on_truncated(d, 15)
    assert f.fetch_offset == 15


# -- stateful property test of LeaderState -----------------------------------------------------


class LeaderMachine(RuleBasedStateMachine):
    """Random appends, fetches, shrinks and ZooKeeper answers; invariants after each."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.zk_version = 3
        self.ls = leader(isr=(1, 2, 3), assigned=(1, 2, 3, 4), leo=5, hw=2, zk_version=3)
        self.follower_logs = {2: 5, 3: 4, 4: 0}  # what each follower really holds
        self.last_hw = self.ls.high_watermark
        self.pending = None

    @rule(n=st.integers(1, 50))
    def append(self, n):
        self.ls.on_local_append(self.ls.log_end_offset + n)

    @rule(r=st.sampled_from([2, 3, 4]), dt=st.integers(0, 4000), grab=st.integers(0, 60))
    def fetch(self, r, dt, grab):
        self.now += dt
        offset = self.follower_logs[r]
        out = self.ls.on_follower_fetch(r, offset, self.now)
        self.follower_logs[r] = min(self.ls.log_end_offset, offset + grab)
        if out.isr_change is not None:
            assert self.pending is None
            self.pending = out.isr_change

    @rule(dt=st.integers(0, 15_000))
    def shrink(self, dt):
        self.now += dt
        p = self.ls.maybe_shrink_isr(self.now)
        if p is not None:
            assert self.pending is None
            assert self.ls.leader_epoch == p.leader_epoch and 1 in p.new_isr
            self.pending = p

    @precondition(lambda self: self.pending is not None)
    @rule(ok=st.booleans())
    def zk_answer(self, ok):
        if ok:
            self.zk_version += 1
            out = self.ls.on_isr_update_result(self.pending, self.zk_version)
            assert out.committed and out.in_sync_replicas == self.pending.new_isr
            self.pending = None
        else:
            # keep the machine going: a rejected answer ends leadership, so only check it once
            out = self.ls.on_isr_update_result(self.pending, None)
            self.pending = None
            assert out.stop_leading is not None and not self.ls.is_leading
            self.ls = leader(
                isr=out.in_sync_replicas,
                assigned=(1, 2, 3, 4),
                leo=self.ls.log_end_offset,
                hw=self.ls.high_watermark,
                now=self.now,
                zk_version=self.zk_version + 10,
                epoch=self.ls.leader_epoch + 1,
            )
            self.zk_version += 10
            self.last_hw = self.ls.high_watermark

    @invariant()
    def invariants(self):
        ls = self.ls
        ls.check_invariants()
        assert ls.high_watermark >= self.last_hw
        self.last_hw = ls.high_watermark
        # the HW never passes what an ISR member really holds
        for r in ls.maximal_in_sync_replicas:
            if r != 1 and ls.follower_log_end_offset(r) is not None:
                assert ls.high_watermark <= self.follower_logs[r]
        # committed ISR members are always at least caught up to the HW when they joined
        assert 1 in ls.in_sync_replicas


LeaderMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=60, deadline=None)
TestLeaderMachine = LeaderMachine.TestCase
