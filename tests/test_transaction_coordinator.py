"""The transaction coordinator's decisions for InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn and EndTxn: every transition and every error Kafka answers."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode as E

from replog.coordinator.group.offsets_topic import partition_for as offsets_partition_for
from replog.coordinator.transaction import transaction_log as txlog
from replog.coordinator.transaction.coordinator import error_for_version, rejected_partitions
from replog.coordinator.transaction.effects import AppendPurpose, Outcome, TransactionResult
from replog.coordinator.transaction.metadata import TransactionState as S
from transaction_util import NONE, World

TP = ("orders", 0)
TP2 = ("orders", 1)


def error_of(outcome) -> E:
    assert outcome.answer is not None, outcome
    return outcome.answer.error


# -- InitProducerId ------------------------------------------------------------------------


def test_init_producer_id_for_a_new_id_allocates_one_and_writes_epoch_0() -> None:
    w = World()
    first = w.coordinator.handle_init_producer_id("t", 60_000, -1, -1, w.now)
    assert first.needs_producer_id and first.answer is None and not first.appends
    out = w.init("t")
    assert out.answer is None  # waits for the append
    (effect,) = out.appends
    assert effect.purpose is AppendPurpose.INIT_PRODUCER_ID
    assert effect.key == txlog.encode_key("t")
    value = txlog.decode_value(effect.value)
    assert (value.producer_id, value.producer_epoch, value.transaction_status) == (1001, 0, 0)
    assert value.transaction_timeout_ms == 60_000
    done = w.append(out)
    assert (done.answer.error, done.answer.producer_id, done.answer.producer_epoch) == (
        NONE,
        1001,
        0,
    )
    assert w.metadata("t").state is S.EMPTY


def test_transaction_version_0_writes_value_v0() -> None:
    w = World(transaction_version=0)
    (effect,) = w.init("t").appends
    assert effect.value[:2] == b"\x00\x00"
    assert txlog.decode_value(effect.value).producer_epoch == 0
    (v1,) = World().init("t").appends
    assert v1.value[:2] == b"\x00\x01"


def test_init_producer_id_again_bumps_the_epoch_and_keeps_the_id() -> None:
    w = World()
    w.init_ok("t")
    again = w.init_ok("t")
    assert (again.producer_id, again.producer_epoch) == (1001, 1)


@pytest.mark.parametrize(
    ("tid", "producer_id", "producer_epoch", "timeout_ms", "error"),
    [
        ("", -1, -1, 60_000, E.invalid_request),
        ("t", 5, -1, 60_000, E.invalid_request),  # KafkaApis: both or neither
        ("t", -1, 0, 60_000, E.invalid_request),
        ("t", -1, -1, 0, E.invalid_transaction_timeout),
        ("t", -1, -1, -5, E.invalid_transaction_timeout),
        ("t", -1, -1, 120_001, E.invalid_transaction_timeout),  # over transaction.max.timeout.ms
    ],
)
def test_init_producer_id_bad_requests(tid, producer_id, producer_epoch, timeout_ms, error) -> None:
    w = World()
    out = w.coordinator.handle_init_producer_id(tid, timeout_ms, producer_id, producer_epoch, w.now)
    assert error_of(out) is error and not out.appends and not out.needs_producer_id


def test_not_coordinator_and_loading() -> None:
    w = World(partitions=50)
    w.coordinator.on_resignation(46)  # "my-transactional-id" lives in partition 46
    assert error_of(w.init("my-transactional-id")) is E.not_coordinator
    w.coordinator.on_election(46, 2)
    assert error_of(w.init("my-transactional-id")) is E.coordinator_load_in_progress
    assert error_of(w.end("my-transactional-id", w.init_ok("txn-1"), True)) is (
        E.coordinator_load_in_progress
    )
    w.coordinator.complete_loading(46, 2, [], w.now)
    assert w.init_ok("my-transactional-id").producer_epoch == 0


def test_init_producer_id_while_an_append_is_in_flight_is_concurrent() -> None:
    w = World()
    w.init_ok("t")
    in_flight = w.init("t")
    assert error_of(w.init("t")) is E.concurrent_transactions
    w.append(in_flight)
    assert w.init_ok("t").producer_epoch == 2


def test_init_producer_id_append_failure_rolls_back_with_the_mapped_error() -> None:
    w = World()
    w.init_ok("t")
    failed = w.append(w.init("t"), E.not_enough_replicas)
    assert failed.answer.error is E.coordinator_not_available
    assert (failed.answer.producer_id, failed.answer.producer_epoch) == (-1, -1)
    assert w.metadata("t").pending_state is None and w.metadata("t").producer_epoch == 0
    assert w.append(w.init("t"), E.not_leader_or_follower).answer.error is E.not_coordinator
    assert w.append(w.init("t"), E.record_list_too_large).answer.error is E.unknown_server_error
    assert w.init_ok("t").producer_epoch == 1


def test_kip_360_recovery_with_the_current_epoch_bumps_it() -> None:
    w = World()
    first = w.init_ok("t")
    again = w.init_ok("t", first.producer_id, first.producer_epoch)
    assert (again.producer_id, again.producer_epoch) == (first.producer_id, 1)
    # The answer was lost; the producer retries with the epoch it had: the same answer.
    retry = w.init_ok("t", first.producer_id, first.producer_epoch)
    assert (retry.producer_id, retry.producer_epoch) == (first.producer_id, 1)


def test_kip_360_with_a_stale_epoch_or_another_id_is_fenced() -> None:
    w = World()
    first = w.init_ok("t")
    w.init_ok("t")  # epoch 1, last epoch -1 (a new producer took over)
    w.init_ok("t")  # epoch 2
    assert error_of(w.init("t", first.producer_id, 0)) is E.producer_fenced
    assert error_of(w.init("t", 999, 2)) is E.producer_fenced
    assert w.metadata("t").pending_state is None


def test_kip_360_on_a_new_metadata_accepts_any_producer() -> None:
    w = World()
    # A producer recovering from UNKNOWN_PRODUCER_ID on a coordinator that lost the id.
    answer = w.init_ok("t", 77, 3)
    assert (answer.producer_id, answer.producer_epoch) == (1001, 0)


def test_exhausted_epoch_rotates_the_producer_id() -> None:
    w = World()
    w.init_ok("t")
    md = w.metadata("t")
    md.producer_epoch = 32766  # Short.MaxValue - 1: exhausted
    rotated = w.init_ok("t", md.producer_id, 32766)
    assert (rotated.producer_id, rotated.producer_epoch) == (1002, 0)
    assert w.metadata("t").previous_producer_id == 1001
    # The answer was lost: a retry with the old id and exhausted epoch gets the same.
    retry = w.init_ok("t", 1001, 32766)
    assert (retry.producer_id, retry.producer_epoch) == (1002, 0)
    # A stale producer of the old id with another epoch is fenced.
    assert error_of(w.init("t", 1001, 5)) is E.producer_fenced


def test_exhausted_epoch_without_kip_360_rotates_too() -> None:
    w = World()
    w.init_ok("t")
    w.metadata("t").producer_epoch = 32767
    assert w.init_ok("t").producer_id == 1002


def test_init_producer_id_on_an_ongoing_transaction_fences_and_aborts_it() -> None:
    w = World()
    old = w.init_ok("t")
    w.add_ok("t", old, TP, TP2)
    out = w.init("t")
    (effect,) = out.appends
    assert effect.purpose is AppendPurpose.FENCE_ABORT and effect.is_epoch_fence
    assert effect.transit.txn_state is S.PREPARE_ABORT and effect.transit.producer_epoch == 1
    done = w.append(out)
    assert done.answer.error is E.concurrent_transactions  # the client retries
    (marker,) = done.markers
    assert marker.result is TransactionResult.ABORT
    assert (marker.producer_id, marker.producer_epoch) == (old.producer_id, 1)
    assert marker.partitions == {TP, TP2} and marker.coordinator_epoch == w.epoch
    # The old producer is fenced while the markers are written, and after.
    assert error_of(w.add("t", old, ("x", 0))) is E.producer_fenced
    assert error_of(w.init("t")) is E.concurrent_transactions
    w.settle(done)
    assert w.metadata("t").state is S.COMPLETE_ABORT
    assert w.init_ok("t").producer_epoch == 2
    assert error_of(w.end("t", old, True)) is E.producer_fenced


def test_a_failed_fence_does_not_bump_the_epoch_twice() -> None:
    w = World()
    old = w.init_ok("t")
    w.add_ok("t", old, TP)
    failed = w.append(w.init("t"), E.request_timed_out)
    assert failed.answer.error is E.coordinator_not_available
    md = w.metadata("t")
    assert md.has_failed_epoch_fence and md.producer_epoch == 1 and md.pending_state is None
    assert md.state is S.ONGOING
    out = w.init("t")
    assert out.appends[0].transit.producer_epoch == 1  # not 2
    assert w.settle(out).error is E.concurrent_transactions
    assert not w.metadata("t").has_failed_epoch_fence


def test_init_producer_id_while_markers_are_written_is_concurrent() -> None:
    w = World()
    p = w.init_ok("t")
    w.add_ok("t", p, TP)
    done = w.append(w.end("t", p, True))
    assert done.markers  # not yet written
    assert error_of(w.init("t")) is E.concurrent_transactions
    assert error_of(w.init("t", p.producer_id, p.producer_epoch)) is E.concurrent_transactions
    # PrepareCommit without a pending completion (the markers were given up here) too.
    w.metadata("t").pending_state = None
    assert error_of(w.init("t")) is E.concurrent_transactions


# -- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------------


def test_add_partitions_starts_and_grows_a_transaction() -> None:
    w = World()
    p = w.init_ok("t")
    out = w.add("t", p, TP)
    (effect,) = out.appends
    assert effect.purpose is AppendPurpose.ADD_PARTITIONS
    value = txlog.decode_value(effect.value)
    assert value.transaction_status == S.ONGOING.id and value.topic_partitions() == {TP}
    assert w.append(out).answer.error is NONE
    assert w.metadata("t").txn_start_timestamp == w.now
    w.now += 5
    w.add_ok("t", p, TP2)
    md = w.metadata("t")
    assert md.topic_partitions == {TP, TP2} and md.txn_start_timestamp == w.now - 5
    for already in ([TP], [TP, TP2]):
        again = w.add("t", p, *already)
        assert error_of(again) is NONE and not again.appends  # already there: no append


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"tid": ""}, E.invalid_request),
        ({"tid": "unknown"}, E.invalid_producer_id_mapping),
        ({"producer_id": 5}, E.invalid_producer_id_mapping),
        ({"producer_epoch": 7}, E.producer_fenced),
        ({"producer_epoch": -1}, E.producer_fenced),
    ],
)
def test_add_partitions_errors(change, error) -> None:
    w = World()
    p = w.init_ok("t")
    args = {"tid": "t", "producer_id": p.producer_id, "producer_epoch": p.producer_epoch, **change}
    out = w.coordinator.handle_add_partitions_to_txn(
        args["tid"], args["producer_id"], args["producer_epoch"], [TP], w.now
    )
    assert error_of(out) is error and not out.appends


def test_add_partitions_while_completing_is_concurrent() -> None:
    w = World()
    p = w.init_ok("t")
    w.add_ok("t", p, TP)
    pending = w.add("t", p, TP2)
    assert error_of(w.add("t", p, ("x", 0))) is E.concurrent_transactions  # an append in flight
    w.append(pending)
    done = w.append(w.end("t", p, False))
    assert error_of(w.add("t", p, ("x", 0))) is E.concurrent_transactions  # markers
    w.settle(done)
    w.add_ok("t", p, ("x", 0))  # the next transaction
    assert w.metadata("t").topic_partitions == {("x", 0)}


def test_add_partitions_append_failure_leaves_the_transaction_as_it_was() -> None:
    w = World()
    p = w.init_ok("t")
    w.add_ok("t", p, TP)
    assert w.append(w.add("t", p, TP2), E.not_enough_replicas_after_append).answer.error is (
        E.coordinator_not_available
    )
    md = w.metadata("t")
    assert md.topic_partitions == {TP} and md.pending_state is None and md.state is S.ONGOING


def test_add_offsets_adds_the_groups_offsets_partition() -> None:
    w = World()
    p = w.init_ok("t")
    out = w.coordinator.handle_add_offsets_to_txn("t", p.producer_id, p.producer_epoch, "g1", w.now)
    assert w.append(out).answer.error is NONE
    assert w.metadata("t").topic_partitions == {
        ("__consumer_offsets", offsets_partition_for("g1", 50))
    }
    fenced = w.coordinator.handle_add_offsets_to_txn("t", p.producer_id, 9, "g1", w.now)
    assert error_of(fenced) is E.producer_fenced


def test_verify_only_answers_per_partition_and_appends_nothing() -> None:
    w = World()
    p = w.init_ok("t")
    verify = w.coordinator.handle_verify_partitions_in_txn
    assert verify("t", p.producer_id, p.producer_epoch, [TP]).partition_errors == {
        TP: E.transaction_abortable
    }
    w.add_ok("t", p, TP)
    answer = verify("t", p.producer_id, p.producer_epoch, [TP, TP2])
    assert answer.error is NONE
    assert answer.partition_errors == {TP: NONE, TP2: E.transaction_abortable}
    assert verify("t", p.producer_id, 5, [TP, TP2]).partition_errors == {
        TP: E.producer_fenced,
        TP2: E.producer_fenced,
    }
    assert verify("t", 3, p.producer_epoch, [TP]).error is E.invalid_producer_id_mapping
    assert verify("nobody", 3, 0, [TP]).error is E.invalid_producer_id_mapping
    assert verify("", 3, 0, [TP]).partition_errors == {TP: E.invalid_request}
    pending = w.add("t", p, TP2)  # a pending state is not checked by verification
    assert verify("t", p.producer_id, p.producer_epoch, [TP]).partition_errors == {TP: NONE}
    w.append(pending)
    done = w.append(w.end("t", p, True))
    assert verify("t", p.producer_id, p.producer_epoch, [TP]).error is E.concurrent_transactions
    w.settle(done)
    assert verify("t", p.producer_id, p.producer_epoch, [TP]).partition_errors == {
        TP: E.transaction_abortable
    }


def test_rejected_partitions_fail_the_whole_transaction() -> None:
    assert rejected_partitions([("secret", 0)], [("gone", 1)], [TP]) == {
        ("secret", 0): E.topic_authorization_failed,
        ("gone", 1): E.unknown_topic_or_partition,
        TP: E.operation_not_attempted,
    }


# -- EndTxn -------------------------------------------------------------------------------


@pytest.mark.parametrize("committed", [True, False])
def test_end_txn_prepares_sends_markers_and_completes(committed: bool) -> None:
    w = World()
    p = w.init_ok("t")
    w.add_ok("t", p, TP, TP2)
    out = w.end("t", p, committed)
    (effect,) = out.appends
    prepare = S.PREPARE_COMMIT if committed else S.PREPARE_ABORT
    assert effect.purpose is AppendPurpose.END_TXN and effect.transit.txn_state is prepare
    done = w.append(out)
    assert (done.answer.error, done.answer.producer_id, done.answer.producer_epoch) == (
        NONE,
        p.producer_id,
        p.producer_epoch,
    )
    md = w.metadata("t")
    assert md.state is prepare
    complete = S.COMPLETE_COMMIT if committed else S.COMPLETE_ABORT
    assert md.pending_state is complete
    (marker,) = done.markers
    assert marker.result is (TransactionResult.COMMIT if committed else TransactionResult.ABORT)
    assert marker.partitions == {TP, TP2}
    assert w.write_markers(marker, {TP2: E.not_leader_or_follower}).markers[0].partitions == {TP2}
    final = w.write_markers(marker, {TP: NONE, TP2: NONE})
    (completion,) = final.appends
    assert completion.purpose is AppendPurpose.COMPLETE_TXN
    assert txlog.decode_value(completion.value).transaction_partitions == ()
    assert w.append(final) == Outcome()
    assert md.state is complete and md.topic_partitions == set() and md.pending_state is None


def test_end_txn_retries_after_completion_succeed_without_an_append() -> None:
    w = World()
    p = w.init_ok("t")
    w.add_ok("t", p, TP)
    w.settle(w.end("t", p, True))
    again = w.end("t", p, True)
    assert error_of(again) is NONE and not again.appends
    assert (again.answer.producer_id, again.answer.producer_epoch) == (
        p.producer_id,
        p.producer_epoch,
    )
    assert error_of(w.end("t", p, False)) is E.invalid_txn_state
    w.add_ok("t", p, TP)
    w.settle(w.end("t", p, False))
    assert error_of(w.end("t", p, False)) is NONE
    assert error_of(w.end("t", p, True)) is E.invalid_txn_state


def test_end_txn_with_no_transaction_is_invalid_txn_state() -> None:
    w = World()
    p = w.init_ok("t")
    assert error_of(w.end("t", p, True)) is E.invalid_txn_state
    assert error_of(w.end("t", p, False)) is E.invalid_txn_state


def test_end_txn_while_markers_are_written() -> None:
    w = World()
    p = w.init_ok("t")
    w.add_ok("t", p, TP)
    done = w.append(w.end("t", p, True))
    assert error_of(w.end("t", p, True)) is E.concurrent_transactions
    assert error_of(w.end("t", p, False)) is E.concurrent_transactions  # pending first
    # Without a pending completion (between the append and the markers), the other
    # result is an invalid state.
    md = w.metadata("t")
    md.pending_state = None
    assert error_of(w.end("t", p, False)) is E.invalid_txn_state
    assert error_of(w.end("t", p, True)) is E.concurrent_transactions
    assert done.markers


@pytest.mark.parametrize(
    ("tid", "producer_id", "producer_epoch", "error"),
    [
        ("", 1001, 0, E.invalid_request),
        ("nobody", 1001, 0, E.invalid_producer_id_mapping),
        ("t", 5, 0, E.invalid_producer_id_mapping),
        ("t", 1001, 1, E.producer_fenced),  # a client's epoch must be the current one
        ("t", 1001, -1, E.producer_fenced),
    ],
)
def test_end_txn_errors(tid, producer_id, producer_epoch, error) -> None:
    w = World()
    p = w.init_ok("t")
    w.add_ok("t", p, TP)
    out = w.coordinator.handle_end_txn(tid, producer_id, producer_epoch, True, w.now)
    assert error_of(out) is error and not out.appends
    assert w.metadata("t").state is S.ONGOING


def test_end_txn_append_failure_keeps_the_transaction_open() -> None:
    w = World()
    p = w.init_ok("t")
    w.add_ok("t", p, TP)
    failed = w.append(w.end("t", p, True), E.not_enough_replicas)
    assert failed.answer.error is E.coordinator_not_available and not failed.markers
    md = w.metadata("t")
    assert md.state is S.ONGOING and md.pending_state is None
    assert w.settle(w.end("t", p, True)).error is NONE


def test_end_txn_after_the_coordinator_moved_is_not_coordinator() -> None:
    w = World()
    p = w.init_ok("t")
    w.add_ok("t", p, TP)
    out = w.end("t", p, True)
    (effect,) = out.appends
    w.coordinator.on_resignation(0, w.epoch)
    assert not w.coordinator.can_append(effect)
    assert w.coordinator.append_completed(effect, NONE, w.now).answer.error is E.not_coordinator
    w.coordinator.on_election(0, 2)
    w.coordinator.complete_loading(0, 2, [(k, v) for _, k, v in w.log], w.now)
    # Loaded again at a new epoch: the old append's completion is refused.
    assert w.coordinator.append_completed(effect, NONE, w.now).answer.error is E.not_coordinator
    assert w.metadata("t").state is S.ONGOING


def test_producer_fenced_reads_as_invalid_producer_epoch_to_old_clients() -> None:
    fenced = E.producer_fenced
    assert error_for_version("InitProducerId", 3, fenced) is E.invalid_producer_epoch
    assert error_for_version("InitProducerId", 4, fenced) is fenced
    for api in ("AddPartitionsToTxn", "AddOffsetsToTxn", "EndTxn"):
        assert error_for_version(api, 1, fenced) is E.invalid_producer_epoch
        assert error_for_version(api, 2, fenced) is fenced
        assert error_for_version(api, 0, E.concurrent_transactions) is E.concurrent_transactions
