"""Elections (pure functions) and the state-transition tables."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replog.controller.election import (
    controlled_shutdown_leader,
    offline_partition_leader,
    preferred_replica_leader,
    reassign_partition_leader,
)
from replog.controller.states import (
    PARTITION_VALID_PREVIOUS_STATES,
    REPLICA_VALID_PREVIOUS_STATES,
    IllegalStateTransition,
    PartitionState,
    ReplicaState,
    check_partition_transition,
    check_replica_transition,
)

brokers = st.integers(min_value=0, max_value=9)


@st.composite
def partitions(draw: st.DrawFn) -> tuple[list[int], list[int], set[int]]:
    assignment = draw(st.lists(brokers, min_size=1, max_size=5, unique=True))
    isr = draw(st.lists(st.sampled_from(assignment), min_size=1, unique=True))
    live = draw(st.sets(brokers))
    return assignment, isr, live


@given(partitions())
def test_clean_offline_election_picks_live_isr_member_in_assignment_order(p) -> None:
    assignment, isr, live = p
    result = offline_partition_leader(assignment, isr, live, unclean_allowed=False)
    candidates = [r for r in assignment if r in isr and r in live]
    if not candidates:
        assert result is None
        return
    assert result is not None
    assert result.leader == candidates[0]
    assert result.leader in live and result.leader in isr
    assert not result.was_unclean
    # New ISR: the live part of the old ISR, order kept, leader included.
    assert result.isr == tuple(r for r in isr if r in live)
    assert result.leader in result.isr


@given(partitions())
def test_unclean_election_only_when_no_live_isr_member(p) -> None:
    assignment, isr, live = p
    clean = offline_partition_leader(assignment, isr, live, unclean_allowed=False)
    unclean = offline_partition_leader(assignment, isr, live, unclean_allowed=True)
    if clean is not None:
        assert unclean == clean
    elif any(r in live for r in assignment):
        assert unclean is not None and unclean.was_unclean
        assert unclean.leader == next(r for r in assignment if r in live)
        assert unclean.isr == (unclean.leader,)
    else:
        assert unclean is None


def test_offline_election_examples() -> None:
    # Preferred replica dead: next ISR member in assignment order, not ISR order.
    assert offline_partition_leader([1, 2, 3], [3, 2, 1], {2, 3}, False) == (2, (3, 2), False)
    # Live replica 3 is not in the ISR: no clean leader.
    assert offline_partition_leader([1, 2, 3], [1, 2], {3}, False) is None
    assert offline_partition_leader([1, 2, 3], [1, 2], {3}, True) == (3, (3,), True)


@given(partitions(), st.sets(brokers))
def test_controlled_shutdown_never_picks_shutting_down_broker(p, shutting_down) -> None:
    assignment, isr, live = p
    live_or_shutting = live | shutting_down
    result = controlled_shutdown_leader(assignment, isr, live_or_shutting, shutting_down)
    candidates = [
        r for r in assignment if r in isr and r in live_or_shutting and r not in shutting_down
    ]
    if not candidates:
        assert result is None
        return
    assert result is not None
    assert result.leader == candidates[0]
    assert not set(result.isr) & shutting_down
    assert result.leader in result.isr


@given(partitions())
def test_preferred_replica(p) -> None:
    assignment, isr, live = p
    result = preferred_replica_leader(assignment, isr, live)
    if assignment[0] in live and assignment[0] in isr:
        assert result is not None and result.leader == assignment[0] and result.isr == tuple(isr)
    else:
        assert result is None


def test_reassign_leader() -> None:
    assert reassign_partition_leader([4, 5, 6], [5, 6], {4, 5, 6}) == (5, (5, 6), False)
    assert reassign_partition_leader([4, 5], [6], {4, 5, 6}) is None


# --- state tables ------------------------------------------------------------------------


def test_partition_table_matches_kafka() -> None:
    P = PartitionState
    assert PARTITION_VALID_PREVIOUS_STATES == {
        P.NewPartition: {P.NonExistentPartition},
        P.OnlinePartition: {P.NewPartition, P.OnlinePartition, P.OfflinePartition},
        P.OfflinePartition: {P.NewPartition, P.OnlinePartition, P.OfflinePartition},
        P.NonExistentPartition: {P.OfflinePartition},
    }


def test_replica_table_matches_kafka() -> None:
    R = ReplicaState
    live_states = {R.NewReplica, R.OnlineReplica, R.OfflineReplica, R.ReplicaDeletionIneligible}
    assert REPLICA_VALID_PREVIOUS_STATES == {
        R.NewReplica: {R.NonExistentReplica},
        R.OnlineReplica: live_states,
        R.OfflineReplica: live_states,
        R.ReplicaDeletionStarted: {R.OfflineReplica},
        R.ReplicaDeletionSuccessful: {R.ReplicaDeletionStarted},
        R.ReplicaDeletionIneligible: {R.OfflineReplica, R.ReplicaDeletionStarted},
        R.NonExistentReplica: {R.ReplicaDeletionSuccessful},
    }


@pytest.mark.parametrize("target", list(PartitionState))
@pytest.mark.parametrize("current", list(PartitionState))
def test_partition_transition_check(current: PartitionState, target: PartitionState) -> None:
    if current in PARTITION_VALID_PREVIOUS_STATES[target]:
        check_partition_transition(("t", 0), current, target)
    else:
        with pytest.raises(IllegalStateTransition) as info:
            check_partition_transition(("t", 0), current, target)
        assert info.value.current is current and info.value.target is target


@pytest.mark.parametrize("target", list(ReplicaState))
@pytest.mark.parametrize("current", list(ReplicaState))
def test_replica_transition_check(
    current: ReplicaState, target: ReplicaState, caplog: pytest.LogCaptureFixture
) -> None:
    if current in REPLICA_VALID_PREVIOUS_STATES[target]:
        check_replica_transition((("t", 0), 1), current, target)
        assert not caplog.records
    else:
        with pytest.raises(IllegalStateTransition):
            check_replica_transition((("t", 0), 1), current, target)
        assert any("illegal state transition" in r.getMessage() for r in caplog.records)


def test_deleted_replica_cannot_come_back_online() -> None:
    with pytest.raises(IllegalStateTransition):
        check_replica_transition(
            (("t", 0), 1), ReplicaState.ReplicaDeletionSuccessful, ReplicaState.OnlineReplica
        )
