"""The transaction state machine: Kafka's table of valid previous states, and the
prepare / complete / roll back discipline of ``TransactionMetadata``."""

from __future__ import annotations

import itertools

import pytest

from replog.coordinator.transaction import transaction_log as txlog
from replog.coordinator.transaction.metadata import (
    VALID_PREVIOUS_STATES,
    IllegalStateTransition,
    TransactionMetadata,
)
from replog.coordinator.transaction.metadata import TransactionState as S

KAFKA_TABLE = {
    # Kafka 4 TransactionState.validPreviousStates, state by state.
    S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_COMMIT: {S.ONGOING},
    S.PREPARE_ABORT: {
        S.ONGOING,
        S.PREPARE_EPOCH_FENCE,
        S.EMPTY,
        S.COMPLETE_COMMIT,
        S.COMPLETE_ABORT,
    },
    S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
    S.COMPLETE_ABORT: {S.PREPARE_ABORT},
    S.DEAD: {S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT},
    S.PREPARE_EPOCH_FENCE: {S.ONGOING},
}


def test_states_ids_names_and_table_are_kafkas() -> None:
    assert [s.id for s in S] == list(range(8))
    assert [s.kafka_name for s in S] == [
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "CompleteCommit",
        "CompleteAbort",
        "Dead",
        "PrepareEpochFence",
    ]
    assert VALID_PREVIOUS_STATES == KAFKA_TABLE
    assert {s for s in S if s.expiration_allowed} == {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
    assert S.from_name("PrepareAbort") is S.PREPARE_ABORT
    assert S.from_name("Nope") is None
    with pytest.raises(IllegalStateTransition):
        S.from_id(8)


def md(state: S = S.EMPTY, epoch: int = 3, partitions: set | None = None) -> TransactionMetadata:
    start = 100 if state not in (S.EMPTY,) else -1
    return TransactionMetadata(
        transactional_id="t",
        producer_id=42,
        producer_epoch=epoch,
        txn_timeout_ms=1000,
        state=state,
        txn_last_update_timestamp=100,
        topic_partitions=set(partitions or ()),
        txn_start_timestamp=start,
    )


def prepare(m: TransactionMetadata, target: S):
    """Ask ``m`` for the transition to ``target`` the way the coordinator would."""
    if target is S.EMPTY:
        return m.prepare_increment_producer_epoch(1000, None, 200)
    if target is S.ONGOING:
        return m.prepare_add_partitions(frozenset({("x", 0)}), 200)
    if target in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        return m.prepare_abort_or_commit(target, 200)
    if target in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
        m.state = S.PREPARE_COMMIT if target is S.COMPLETE_COMMIT else S.PREPARE_ABORT
        return m.prepare_complete(200)
    if target is S.DEAD:
        return m.prepare_dead()
    return m.prepare_fence_producer_epoch()


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (c, t)
        for c, t in itertools.product(S, S)
        # prepare_complete picks its target from the current state; tested on its own.
        if t not in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
    ],
)
def test_every_transition_follows_the_table(current: S, target: S) -> None:
    m = md(current, partitions={("x", 0)} if current is not S.EMPTY else None)
    if current in KAFKA_TABLE[target]:
        transit = prepare(m, target)
        assert transit.txn_state is target
        assert m.pending_state is target
        assert m.state is current  # nothing applied until the append completes
    else:
        with pytest.raises(IllegalStateTransition):
            prepare(m, target)
        assert m.pending_state is None


def test_prepare_while_pending_raises() -> None:
    m = md(S.ONGOING, partitions={("x", 0)})
    m.prepare_abort_or_commit(S.PREPARE_COMMIT, 200)
    with pytest.raises(IllegalStateTransition):
        m.prepare_add_partitions(frozenset({("y", 0)}), 200)


def test_rolled_back_transition_changes_nothing() -> None:
    m = md(S.EMPTY)
    before = m.snapshot()
    m.prepare_add_partitions(frozenset({("x", 0)}), 200)
    m.abort_pending_transition()
    assert m.snapshot() == before and m.pending_state is None
    m.prepare_add_partitions(frozenset({("x", 0)}), 300)  # a new attempt is allowed


def test_a_whole_transaction_completes_step_by_step() -> None:
    m = md(S.EMPTY, epoch=-1)
    m.complete_transition_to(m.prepare_increment_producer_epoch(1000, None, 110))
    assert (m.state, m.producer_epoch, m.last_producer_epoch) == (S.EMPTY, 0, -1)
    m.complete_transition_to(m.prepare_add_partitions(frozenset({("a", 0)}), 120))
    m.complete_transition_to(m.prepare_add_partitions(frozenset({("b", 1)}), 130))
    assert m.state is S.ONGOING
    assert m.topic_partitions == {("a", 0), ("b", 1)}
    assert m.txn_start_timestamp == 120  # the first partition started it
    m.complete_transition_to(m.prepare_abort_or_commit(S.PREPARE_COMMIT, 140))
    m.remove_partition(("a", 0))
    m.remove_partition(("b", 1))
    complete = m.prepare_complete(150)
    assert complete.txn_state is S.COMPLETE_COMMIT and complete.topic_partitions == frozenset()
    m.complete_transition_to(complete)
    assert (m.state, m.topic_partitions, m.txn_last_update_timestamp) == (
        S.COMPLETE_COMMIT,
        set(),
        150,
    )
    # The next transaction restarts the clock.
    m.complete_transition_to(m.prepare_add_partitions(frozenset({("a", 0)}), 160))
    assert m.txn_start_timestamp == 160


def test_complete_checks_the_transit_against_the_metadata() -> None:
    m = md(S.ONGOING, partitions={("x", 0)})
    transit = m.prepare_abort_or_commit(S.PREPARE_ABORT, 200)
    m.producer_epoch += 1  # someone changed the epoch behind the coordinator's back
    with pytest.raises(IllegalStateTransition):
        m.complete_transition_to(transit)
    other = md(S.ONGOING, partitions={("x", 0)})
    with pytest.raises(IllegalStateTransition):  # no pending state
        other.complete_transition_to(transit)


def test_epoch_fence_and_dead_are_never_completed() -> None:
    m = md(S.ONGOING, partitions={("x", 0)})
    fence = m.prepare_fence_producer_epoch()
    assert fence.producer_epoch == 4 and fence.last_producer_epoch == -1
    with pytest.raises(IllegalStateTransition):
        m.complete_transition_to(fence)
    d = md(S.EMPTY)
    dead = d.prepare_dead()
    with pytest.raises(IllegalStateTransition):
        d.complete_transition_to(dead)


def test_a_failed_fence_does_not_bump_twice() -> None:
    m = md(S.ONGOING, partitions={("x", 0)})
    m.has_failed_epoch_fence = True
    assert m.prepare_fence_producer_epoch().producer_epoch == 3
    at_max = md(S.ONGOING, epoch=32767, partitions={("x", 0)})
    with pytest.raises(IllegalStateTransition):
        at_max.prepare_fence_producer_epoch()


def test_remove_partition_only_while_markers_are_written() -> None:
    m = md(S.ONGOING, partitions={("x", 0)})
    with pytest.raises(IllegalStateTransition):
        m.remove_partition(("x", 0))


@pytest.mark.parametrize(
    ("current", "last", "expected", "result"),
    [
        (3, -1, None, (4, -1)),  # a new producer: bump, no last epoch
        (3, -1, 3, (4, 3)),  # KIP-360: recovering at the current epoch
        (4, 3, 3, (4, 3)),  # a retry of that bump: the same answer
        (5, 3, 4, None),  # neither current nor last: PRODUCER_FENCED
        (-1, -1, 7, (0, -1)),  # a new metadata accepts any expected epoch
    ],
)
def test_increment_producer_epoch(current: int, last: int, expected: int | None, result) -> None:
    m = md(S.EMPTY, epoch=current)
    m.last_producer_epoch = last
    transit = m.prepare_increment_producer_epoch(2000, expected, 300)
    if result is None:
        assert transit is None and m.pending_state is None
        return
    assert transit is not None
    assert (transit.producer_epoch, transit.last_producer_epoch) == result
    m.complete_transition_to(transit)
    assert (m.producer_epoch, m.txn_timeout_ms) == (result[0], 2000)


def test_exhausted_epoch_raises_and_rotation_takes_a_new_id() -> None:
    m = md(S.COMPLETE_ABORT, epoch=32766)
    assert m.is_producer_epoch_exhausted
    with pytest.raises(IllegalStateTransition):
        m.prepare_increment_producer_epoch(1000, None, 200)
    transit = m.prepare_producer_id_rotation(43, 1000, 200, record_last_epoch=True)
    assert (transit.producer_id, transit.producer_epoch, transit.last_producer_epoch) == (
        43,
        0,
        32766,
    )
    assert transit.prev_producer_id == 42
    m.complete_transition_to(transit)
    assert (m.producer_id, m.producer_epoch, m.previous_producer_id) == (43, 0, 42)
    ongoing = md(S.ONGOING, partitions={("x", 0)})
    with pytest.raises(IllegalStateTransition):
        ongoing.prepare_producer_id_rotation(44, 1000, 200, record_last_epoch=False)


def test_log_value_round_trip_through_the_metadata() -> None:
    m = md(S.ONGOING, partitions={("b", 1), ("a", 0), ("a", 2)})
    transit = m.prepare_abort_or_commit(S.PREPARE_COMMIT, 200)
    value = transit.to_log_value()
    assert value.transaction_partitions == (("a", (0, 2)), ("b", (1,)))
    loaded = TransactionMetadata.from_log_value("t", txlog.decode_value(txlog.encode_value(value)))
    assert loaded.state is S.PREPARE_COMMIT
    assert loaded.topic_partitions == {("a", 0), ("a", 2), ("b", 1)}
    assert (loaded.producer_id, loaded.producer_epoch, loaded.last_producer_epoch) == (42, 3, -1)
    assert loaded.txn_start_timestamp == 100 and loaded.txn_last_update_timestamp == 200


@pytest.mark.parametrize("current", list(S))
def test_prepare_complete_only_from_prepare_commit_or_abort(current: S) -> None:
    m = md(current, partitions=None)
    if current in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        transit = m.prepare_complete(200)
        expected = S.COMPLETE_COMMIT if current is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        assert transit.txn_state is expected and m.pending_state is expected
    else:
        with pytest.raises(IllegalStateTransition):
            m.prepare_complete(200)
