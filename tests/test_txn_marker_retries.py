"""Two things the transactional fault campaign's trial runs showed (issue 26):

- a marker that a partition leader refuses with a retriable error (NOT_ENOUGH_REPLICAS
  while its ISR is below ``min.insync.replicas``) is asked again with a backoff growing
  from ``retry.backoff.ms`` to ``retry.backoff.max.ms``, not at once round after round;
- EndTxn(abort) after a produce that timed out answers INVALID_TXN_STATE when the
  producer's previous transaction was still having its markers written: the new
  transaction never started on the coordinator (AddPartitionsToTxn got
  CONCURRENT_TRANSACTIONS until the message timed out) and librdkafka sends EndTxn
  anyway; Kafka's ``handleEndTransaction`` answers the same (CompleteCommit + ABORT).
  An abort of a transaction that did start (Ongoing) succeeds.
"""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode as E

from replog.coordinator.transaction.effects import (
    MARKER_RETRY_BACKOFF_MAX_MS,
    MARKER_RETRY_BACKOFF_MS,
    SendTxnMarkers,
    TransactionResult,
    marker_retry_backoff_ms,
)
from replog.coordinator.transaction.marker_channel import TransactionMarkerChannel
from replog.coordinator.transaction.metadata import TransactionState as S
from transaction_util import NONE, World

TP = ("orders", 0)
TP2 = ("orders", 1)


def _error(outcome) -> E:
    assert outcome.answer is not None, outcome
    return outcome.answer.error


def test_backoff_grows_from_retry_backoff_to_its_maximum() -> None:
    assert marker_retry_backoff_ms(0) == 0  # the first send goes at once
    delays = [marker_retry_backoff_ms(n) for n in range(1, 40)]
    assert delays[0] == MARKER_RETRY_BACKOFF_MS == 100
    assert delays[:5] == [100, 200, 400, 800, 1000]
    assert all(a <= b for a, b in zip(delays, delays[1:], strict=False))
    assert max(delays) == MARKER_RETRY_BACKOFF_MAX_MS == 1000
    assert marker_retry_backoff_ms(3, backoff_ms=50, max_backoff_ms=120) == 120


def test_retriable_marker_errors_come_back_with_one_attempt_more() -> None:
    w = World()
    p = w.init_ok("t")
    w.add_ok("t", p, TP, TP2)
    prepared = w.append(w.end("t", p, True))
    (marker,) = prepared.markers
    assert marker.attempt == 0
    for attempt in range(1, 6):
        retry = w.write_markers(marker, {TP: E.not_enough_replicas})
        (marker,) = retry.markers
        assert marker.partitions == {TP}  # TP2 was written
        assert marker.attempt == attempt
    # a request without an answer is asked again with one attempt more too
    (marker,) = w.coordinator.markers_undelivered(marker).markers
    assert marker.attempt == 6
    done = w.write_markers(marker)
    assert not done.markers and done.appends  # CompleteCommit


def test_channel_waits_before_routing_a_marker_asked_again() -> None:
    """A first send is queued for its leader at once; one asked again waits for its
    backoff (the leader's queue stays empty meanwhile), then is routed."""
    sent: list[int] = []

    class Listener:
        def markers_written(self, marker, errors):
            raise AssertionError("no request is answered here")

        def markers_undelivered(self, marker):
            sent.append(marker.attempt)

        def markers_partitions_deleted(self, marker, partitions):
            raise AssertionError("no partition is deleted here")

    async def run() -> None:
        channel = TransactionMarkerChannel(
            0,
            leader_of=lambda topic, partition: 1,
            endpoint_of=lambda broker: ("127.0.0.1", 1),  # refused: undelivered
            listener=Listener(),
            request_timeout_ms=1000,
        )
        marker = SendTxnMarkers("t", 1, 7, 0, TransactionResult.COMMIT, frozenset({TP}))
        try:
            channel.send(marker)
            assert channel.queued_count() == 1 and channel.retrying_count() == 0
            channel.send(SendTxnMarkers("u", 1, 8, 0, TransactionResult.ABORT, frozenset({TP}), 3))
            assert channel.retrying_count() == 1
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while channel.retrying_count() and loop.time() < deadline:
                await asyncio.sleep(0.01)
            assert channel.retrying_count() == 0  # routed after its backoff
        finally:
            await channel.close()
        assert channel.retrying_count() == 0

    asyncio.run(run())


def test_abort_after_the_previous_commit_is_stuck_in_its_markers() -> None:
    """The trial run's INVALID_TXN_STATE, step by step, with Kafka's answers."""
    w = World()
    p = w.init_ok("t")
    w.add_ok("t", p, TP)
    prepared = w.append(w.end("t", p, True))  # commit answered; markers go out
    assert _error(prepared) is NONE
    (marker,) = prepared.markers
    stuck = w.write_markers(marker, {TP: E.not_enough_replicas})  # ISR below min.isr
    assert w.metadata("t").state is S.PREPARE_COMMIT
    # the next transaction's AddPartitionsToTxn: retriable, the client tries again until
    # its message times out; the transaction never starts on the coordinator
    assert _error(w.add("t", p, TP)) is E.concurrent_transactions
    # librdkafka counted the AddPartitionsToTxn it sent and sends EndTxn(abort):
    # retriable while the previous commit's markers are being written
    assert _error(w.end("t", p, False)) is E.concurrent_transactions
    (marker,) = stuck.markers
    w.settle(w.write_markers(marker))  # the ISR is back: the commit completes
    assert w.metadata("t").state is S.COMPLETE_COMMIT
    # then the abort refers to the committed transaction: Kafka's INVALID_TXN_STATE
    assert _error(w.end("t", p, False)) is E.invalid_txn_state
    assert w.metadata("t").state is S.COMPLETE_COMMIT  # nothing changed by it


def test_abort_of_an_ongoing_transaction_succeeds() -> None:
    w = World()
    p = w.init_ok("t")
    w.add_ok("t", p, TP)
    assert w.metadata("t").state is S.ONGOING
    assert w.settle(w.end("t", p, False)).error is NONE
    assert w.metadata("t").state is S.COMPLETE_ABORT
