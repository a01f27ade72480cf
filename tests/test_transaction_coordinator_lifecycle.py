"""The transaction coordinator's work around the requests: writing the markers and
completing, aborting timed-out transactions, expiring transactional ids, and loading
``__transaction_state`` on a new leader (finishing what the old one left prepared)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from kio.schema.errors import ErrorCode as E

from replog.coordinator.transaction import transaction_log as txlog
from replog.coordinator.transaction.effects import AppendPurpose, Outcome, TransactionResult
from replog.coordinator.transaction.metadata import IllegalStateTransition
from replog.coordinator.transaction.metadata import TransactionState as S
from transaction_util import NONE, TIMEOUT, World

TP = ("orders", 0)
TP2 = ("orders", 1)


def committing(w: World, tid: str = "t"):
    """A transaction on TP and TP2 whose PrepareCommit is written; its markers."""
    p = w.init_ok(tid)
    w.add_ok(tid, p, TP, TP2)
    done = w.append(w.end(tid, p, True))
    (marker,) = done.markers
    return p, marker


# -- markers --------------------------------------------------------------------------------


def test_retriable_marker_errors_resend_only_those_partitions() -> None:
    w = World()
    _, marker = committing(w)
    for error in (
        E.unknown_topic_or_partition,
        E.not_leader_or_follower,
        E.not_enough_replicas,
        E.not_enough_replicas_after_append,
        E.request_timed_out,
        E.kafka_storage_error,
    ):
        out = w.write_markers(marker, {TP: error})
        assert not out.appends
        assert [m.partitions for m in out.markers] == [{TP}]
    assert w.metadata("t").topic_partitions == {TP}  # TP2 is written
    final = w.write_markers(marker, {TP: NONE, TP2: NONE})
    assert final.appends[0].purpose is AppendPurpose.COMPLETE_TXN


@pytest.mark.parametrize("error", [E.invalid_producer_epoch, E.transaction_coordinator_fenced])
def test_a_refused_marker_gives_the_transaction_up_here(error) -> None:
    w = World()
    _, marker = committing(w)
    assert w.write_markers(marker, {TP: error}) == Outcome()
    assert "t" not in w.coordinator.markers.pending
    assert w.write_markers(marker) == Outcome()  # later answers are ignored
    md = w.metadata("t")
    assert md.state is S.PREPARE_COMMIT and md.pending_state is S.COMPLETE_COMMIT


@pytest.mark.parametrize("error", [E.unsupported_for_message_format, E.unsupported_version])
def test_partitions_that_cannot_take_markers_are_skipped(error) -> None:
    w = World()
    _, marker = committing(w)
    out = w.write_markers(marker, {TP: error})
    assert out.appends[0].purpose is AppendPurpose.COMPLETE_TXN


@pytest.mark.parametrize("error", [E.corrupt_message, E.message_too_large, E.invalid_required_acks])
def test_fatal_marker_errors_raise(error) -> None:
    w = World()
    _, marker = committing(w)
    with pytest.raises(IllegalStateTransition):
        w.write_markers(marker, {TP: error})


def test_undelivered_markers_are_sent_again_and_deleted_partitions_skipped() -> None:
    w = World()
    _, marker = committing(w)
    (again,) = w.coordinator.markers_undelivered(marker).markers
    assert again == replace(marker, attempt=marker.attempt + 1)  # backs off
    assert w.coordinator.markers_partitions_deleted(marker, [TP]) == Outcome()
    out = w.coordinator.markers_partitions_deleted(marker, [TP2])
    assert out.appends[0].purpose is AppendPurpose.COMPLETE_TXN


def test_the_completion_is_appended_again_while_the_coordinator_is_not_available() -> None:
    w = World()
    _, marker = committing(w)
    final = w.write_markers(marker)
    again = w.append(final, E.not_enough_replicas)
    assert again.appends == final.appends  # Kafka's retry queue
    md = w.metadata("t")
    assert md.pending_state is S.COMPLETE_COMMIT  # kept for the retry
    assert w.append(again) == Outcome()
    assert md.state is S.COMPLETE_COMMIT and md.pending_state is None


def test_a_completion_refused_as_not_coordinator_is_left_to_the_next_coordinator() -> None:
    w = World()
    _, marker = committing(w)
    final = w.write_markers(marker)
    assert w.append(final, E.not_leader_or_follower) == Outcome()
    assert w.metadata("t").state is S.PREPARE_COMMIT
    other = World()
    _, marker = committing(other)
    with pytest.raises(IllegalStateTransition):  # any other error: Kafka's fatal
        other.append(other.write_markers(marker), E.invalid_record)


def test_markers_of_an_old_coordinator_epoch_are_ignored() -> None:
    w = World()
    _, marker = committing(w)
    w.coordinator.on_resignation(0)
    assert w.coordinator.markers.pending == {}
    assert w.write_markers(marker) == Outcome()
    w.coordinator.on_election(0, 2)
    resend = w.coordinator.complete_loading(0, 2, [(k, v) for _, k, v in w.log], w.now)
    (fresh,) = resend.markers
    assert fresh.coordinator_epoch == 2
    assert w.write_markers(marker) == Outcome()  # epoch 1's answer
    assert w.coordinator.markers_undelivered(marker) == Outcome()
    assert w.write_markers(fresh).appends[0].coordinator_epoch == 2


# -- timed-out transactions --------------------------------------------------------------------


def test_a_timed_out_transaction_is_fenced_and_aborted() -> None:
    w = World()
    p = w.init_ok("t")
    w.add_ok("t", p, TP)
    w.now += TIMEOUT  # start + timeout == now: not yet
    assert w.coordinator.abort_timed_out_transactions(w.now) == Outcome()
    w.now += 1
    out = w.coordinator.abort_timed_out_transactions(w.now)
    assert out.answer is None
    (effect,) = out.appends
    assert effect.purpose is AppendPurpose.TIMEOUT_ABORT
    assert effect.transit.txn_state is S.PREPARE_ABORT
    assert effect.transit.producer_epoch == p.producer_epoch + 1
    done = w.append(out)
    assert done.answer is None  # nobody waits
    (marker,) = done.markers
    assert marker.result is TransactionResult.ABORT and marker.producer_epoch == 1
    # The producer learns it is fenced.
    assert w.end("t", p, True).answer.error is E.producer_fenced
    w.settle(done)
    assert w.metadata("t").state is S.COMPLETE_ABORT
    assert w.coordinator.abort_timed_out_transactions(w.now + 10 * TIMEOUT) == Outcome()


def test_a_pending_transaction_is_not_timed_out() -> None:
    w = World()
    p = w.init_ok("t")
    w.add_ok("t", p, TP)
    in_flight = w.add("t", p, TP2)
    assert w.coordinator.abort_timed_out_transactions(w.now + 2 * TIMEOUT) == Outcome()
    w.append(in_flight)


def test_a_timed_out_abort_that_fails_to_append_is_tried_again() -> None:
    w = World()
    p = w.init_ok("t")
    w.add_ok("t", p, TP)
    w.now += 2 * TIMEOUT
    failed = w.append(w.coordinator.abort_timed_out_transactions(w.now), E.not_enough_replicas)
    assert failed == Outcome()
    out = w.coordinator.abort_timed_out_transactions(w.now)
    assert out.appends[0].transit.producer_epoch == 1  # bumped once only
    w.settle(out)
    assert w.metadata("t").state is S.COMPLETE_ABORT


# -- transactional.id.expiration.ms ------------------------------------------------------------


def test_idle_transactional_ids_expire_with_a_tombstone() -> None:
    w = World(transactional_id_expiration_ms=1000)
    done = w.init_ok("done")
    w.add_ok("done", done, TP)
    w.settle(w.end("done", done, True))
    w.init_ok("idle")
    ongoing = w.init_ok("ongoing")
    w.add_ok("ongoing", ongoing, TP)
    w.now += 999
    assert w.coordinator.expire_transactional_ids(w.now) == Outcome()
    w.now += 1
    out = w.coordinator.expire_transactional_ids(w.now)
    (batch,) = out.appends
    assert sorted(tid for tid, _ in batch.expired) == ["done", "idle"]
    assert sorted(batch.keys) == sorted([txlog.encode_key("done"), txlog.encode_key("idle")])
    assert w.metadata("idle").pending_state is S.DEAD
    assert w.init("idle").answer.error is E.concurrent_transactions
    assert sorted(w.tombstones(out)) == ["done", "idle"]
    assert w.coordinator.state.lookup("idle").metadata is None
    assert w.metadata("ongoing").state is S.ONGOING  # never expired while open
    assert w.init_ok("idle").producer_id == w.next_producer_id  # a new producer id


def test_an_expiration_whose_tombstone_fails_keeps_the_id() -> None:
    w = World(transactional_id_expiration_ms=1000)
    w.init_ok("idle")
    w.now += 5000
    assert w.tombstones(w.coordinator.expire_transactional_ids(w.now), E.not_enough_replicas) == []
    md = w.metadata("idle")
    assert md.state is S.EMPTY and md.pending_state is None
    assert w.init_ok("idle").producer_epoch == 1


# -- loading ------------------------------------------------------------------------------------


def test_loading_rebuilds_the_state_the_log_holds() -> None:
    w = World()
    a = w.init_ok("a")
    w.add_ok("a", a, TP)
    b = w.init_ok("b")
    w.add_ok("b", b, TP2)
    w.settle(w.end("b", b, False))
    w.init_ok("c")
    before = {tid: w.metadata(tid).snapshot() for tid in "abc"}
    records = [(k, v) for _, k, v in w.log]
    # Another broker becomes the leader and loads the partition.
    other = World(partitions=1)
    other.coordinator.on_resignation(0)
    other.coordinator.on_election(0, 5)
    assert other.coordinator.state.lookup("a").error is E.coordinator_load_in_progress
    assert other.coordinator.complete_loading(0, 5, records, w.now) == Outcome()
    for tid in "abc":
        # The last epoch is not in the log (Kafka's loader sets it to -1).
        assert other.metadata(tid).snapshot() == replace(before[tid], last_producer_epoch=-1)
    # It serves the ids: the producer of "a" commits on the new coordinator.
    assert other.settle(other.end("a", a, True)).error is NONE
    assert other.metadata("a").state is S.COMPLETE_COMMIT


def test_loading_resends_the_markers_of_prepared_transactions() -> None:
    w = World()
    p, _ = committing(w, "t")
    q = w.init_ok("u")
    w.add_ok("u", q, TP)
    w.append(w.end("u", q, False))
    records = [(k, v) for _, k, v in w.log]
    other = World(partitions=1)
    other.coordinator.on_election(0, 7)
    out = other.coordinator.complete_loading(0, 7, records, w.now)
    markers = {m.transactional_id: m for m in out.markers}
    assert markers["t"].result is TransactionResult.COMMIT
    assert markers["t"].partitions == {TP, TP2}
    assert (markers["t"].producer_id, markers["t"].producer_epoch) == (p.producer_id, 0)
    assert markers["u"].result is TransactionResult.ABORT and markers["u"].coordinator_epoch == 7
    assert other.init("t").answer.error is E.concurrent_transactions
    other.settle(Outcome(markers=out.markers))
    assert other.metadata("t").state is S.COMPLETE_COMMIT
    assert other.metadata("u").state is S.COMPLETE_ABORT


def test_loading_applies_tombstones_and_skips_unknown_keys() -> None:
    w = World(transactional_id_expiration_ms=1)
    w.init_ok("gone")
    w.init_ok("kept")
    w.now += 10
    out = w.coordinator.expire_transactional_ids(w.now)
    w.tombstones(out)
    w.init_ok("kept")
    records = [(k, v) for _, k, v in w.log]
    records.insert(1, (b"\x00\x09\x00\x01x", b"whatever a later Kafka writes"))
    other = World(partitions=1)
    other.coordinator.on_election(0, 2)
    other.coordinator.complete_loading(0, 2, records, w.now)
    assert other.coordinator.state.lookup("gone").metadata is None
    assert other.metadata("kept").producer_epoch == 0


def test_a_stale_load_installs_nothing() -> None:
    w = World()
    w.init_ok("t")
    records = [(k, v) for _, k, v in w.log]
    w.coordinator.on_election(0, 2)
    w.coordinator.on_election(0, 3)  # led again before the first load finished
    assert w.coordinator.complete_loading(0, 2, records, w.now) == Outcome()
    assert w.coordinator.state.lookup("t").error is E.coordinator_load_in_progress
    w.coordinator.complete_loading(0, 3, records, w.now)
    assert w.metadata("t").producer_epoch == 0
    assert not w.coordinator.state.unload(0, 2)  # another term's resignation
    assert w.coordinator.state.unload(0, 3)
    assert w.coordinator.state.lookup("t").error is E.not_coordinator


def test_a_late_resignation_of_an_older_term_changes_nothing() -> None:
    w = World()
    _, marker = committing(w)
    w.coordinator.on_resignation(0, coordinator_epoch=0)
    assert "t" in w.coordinator.markers.pending
    assert w.write_markers(marker).appends[0].purpose is AppendPurpose.COMPLETE_TXN
