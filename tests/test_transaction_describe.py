"""DescribeTransactions and ListTransactions over the transaction coordinator's state."""

from __future__ import annotations

from kio.schema.errors import ErrorCode as E

from replog.coordinator.transaction.describe import (
    ListedTransaction,
    describe_transaction,
    list_transactions,
)
from transaction_util import NONE, World

TP = ("orders", 0)


def test_describe_transaction() -> None:
    w = World(partitions=50)
    p = w.init_ok("txn-1")
    w.add_ok("txn-1", p, TP, ("orders", 2), ("audit", 0))
    got = describe_transaction(w.coordinator.state, "txn-1")
    assert got.error is NONE
    assert (got.transaction_state, got.transaction_timeout_ms) == ("Ongoing", 60_000)
    assert (got.producer_id, got.producer_epoch) == (p.producer_id, 0)
    assert got.transaction_start_time_ms == w.now
    assert got.topics == (("audit", (0,)), ("orders", (0, 2)))
    assert describe_transaction(w.coordinator.state, "").error is E.invalid_request
    assert describe_transaction(w.coordinator.state, "nobody").error is E.transactional_id_not_found
    w.coordinator.on_resignation(10)  # txn-1's partition
    assert describe_transaction(w.coordinator.state, "txn-1").error is E.not_coordinator


def test_list_transactions_filters() -> None:
    w = World()
    a = w.init_ok("a")
    w.add_ok("a", a, TP)
    w.now += 100
    b = w.init_ok("b")
    w.add_ok("b", b, TP)
    w.settle(w.end("b", b, True))
    w.init_ok("c")
    state = w.coordinator.state

    def names(result) -> list[str]:
        return sorted(t.transactional_id for t in result.transaction_states)

    everything = list_transactions(state, [], [], -1, w.now)
    assert everything.error is NONE and names(everything) == ["a", "b", "c"]
    assert ListedTransaction("a", a.producer_id, "Ongoing") in everything.transaction_states
    assert names(list_transactions(state, [b.producer_id], [], -1, w.now)) == ["b"]
    only = list_transactions(state, [], ["Ongoing", "Bogus"], -1, w.now)
    assert names(only) == ["a"] and only.unknown_state_filters == ("Bogus",)
    assert names(list_transactions(state, [], ["Bogus"], -1, w.now)) == []
    # Running for longer than 50 ms: "a" started 100 ms ago, "b" has just started (and
    # completed); "c" never started (-1), which Kafka counts as running since the epoch.
    assert names(list_transactions(state, [], [], 50, w.now)) == ["a", "c"]
    w.coordinator.on_election(0, 9)
    assert list_transactions(state, [], [], -1, w.now).error is E.coordinator_load_in_progress
