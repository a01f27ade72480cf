"""Random interleavings of producers, appends, markers, timeouts and coordinator moves
against the transaction coordinator's core, with its invariants checked after every step:
the log replayed gives the state in memory, a fenced producer never gets NONE, an Empty or
completed transaction holds no partitions, epochs of a producer id never go down."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import event, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode as E

from replog.coordinator.transaction.effects import (
    Answer,
    AppendPurpose,
    AppendTxnState,
    Outcome,
    SendTxnMarkers,
)
from replog.coordinator.transaction.metadata import TransactionState as S
from replog.coordinator.transaction.state_manager import TransactionStateManager
from transaction_util import NONE, World

IDS = ("a", "b")
PARTITIONS = (("t", 0), ("t", 1), ("u", 0))
APPEND_ERRORS = (E.not_enough_replicas, E.not_leader_or_follower, E.request_timed_out)
MARKER_ERRORS = (E.not_leader_or_follower, E.request_timed_out)


class Run:
    def __init__(self) -> None:
        self.w = World(transaction_max_timeout_ms=1000)
        self.epoch = 1
        self.appends: list[AppendTxnState] = []
        self.markers: list[SendTxnMarkers] = []
        # producer slot -> its last good InitProducerId answer
        self.producers: dict[tuple[str, int], Answer] = {}
        # an InitProducerId append in flight -> the producer slot waiting for it
        self.waiting: dict[int, tuple[str, int]] = {}
        self.epochs: dict[int, int] = {}  # producer id -> highest epoch seen
        self.successes = 0

    def take(self, out: Outcome) -> Outcome:
        for effect in out.appends:
            assert isinstance(effect, AppendTxnState)
            self.appends.append(effect)
        self.markers.extend(out.markers)
        return out

    def append(self, effect: AppendTxnState, error: E) -> Outcome:
        """Carry out one append as the broker would; track InitProducerId's answers."""
        self.appends.remove(effect)
        c = self.w.coordinator
        if not c.can_append(effect):
            error = E.not_coordinator
        elif error is NONE:
            self.w.log.append((effect.partition, effect.key, effect.value))
        out = self.take(c.append_completed(effect, error, self.w.now))
        waiting = self.waiting.pop(id(effect), None)
        if waiting is not None and out.answer is not None and out.answer.error is NONE:
            self.producers[waiting] = out.answer
        return out

    def drain(self) -> None:
        """Every append and marker goes through, until none is left."""
        while self.appends or self.markers:
            while self.appends:
                self.append(self.appends[0], NONE)
            while self.markers:
                marker = self.markers.pop(0)
                self.take(
                    self.w.coordinator.markers_written(
                        marker, dict.fromkeys(marker.partitions, NONE)
                    )
                )

    def check(self) -> None:
        c = self.w.coordinator
        entry = c.state.partitions.get(0)
        if entry is None or entry.loading:
            return
        replayed = TransactionStateManager(self.w.config)
        replayed.begin_loading(0, 0)
        replayed.complete_loading(0, 0, [(k, v) for _, k, v in self.w.log], 0)
        for tid, md in entry.metadata.items():
            if md.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
                assert not md.topic_partitions, md
            if md.pending_state is not None:
                assert md.state in md.pending_state.valid_previous_states, md
            if (
                md.pending_state is None
                and not md.has_failed_epoch_fence
                and md.producer_epoch >= 0
            ):
                # No transition under way: the log holds this state (a failed fence's
                # epoch lives in memory only, never answered nor written: it may be lost).
                log_state = replayed.partitions[0].metadata[tid].snapshot()
                mine = replace(md.snapshot(), last_producer_epoch=-1)
                if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                    # Markers written since remove partitions in memory only.
                    assert mine.topic_partitions <= log_state.topic_partitions
                    mine = replace(mine, topic_partitions=log_state.topic_partitions)
                assert mine == log_state, (mine, log_state)
                assert md.producer_epoch >= self.epochs.get(md.producer_id, -1), md
                self.epochs[md.producer_id] = md.producer_epoch

    def current(self, tid: str) -> tuple[int, int] | None:
        found = self.w.coordinator.state.lookup(tid)
        if found.metadata is None:
            return None
        return found.metadata.producer_id, found.metadata.producer_epoch


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_random_interleavings_keep_the_invariants(data: st.DataObject) -> None:
    run = Run()
    w, c = run.w, run.w.coordinator
    for _ in range(data.draw(st.integers(5, 45))):
        op = data.draw(
            st.sampled_from(
                ["init", "add", "end", "append", "marker", "tick", "move", "init", "add", "append"]
            )
        )
        tid = data.draw(st.sampled_from(IDS))
        slot = (tid, data.draw(st.integers(0, 1)))
        mine = run.producers.get(slot)
        if op == "init":
            recover = mine is not None and data.draw(st.booleans())
            expected = (mine.producer_id, mine.producer_epoch) if recover else (-1, -1)
            out = w.init(tid, *expected, timeout_ms=500)
            run.take(out)
            if out.appends and out.appends[0].purpose is AppendPurpose.INIT_PRODUCER_ID:
                run.waiting[id(out.appends[0])] = slot
            if out.appends and data.draw(st.integers(0, 3)) > 0:
                run.append(out.appends[0], NONE)
        elif op in ("add", "end") and mine is not None:
            before = run.current(tid)
            if op == "add":
                out = w.add(tid, mine, data.draw(st.sampled_from(PARTITIONS)))
            else:
                out = w.end(tid, mine, data.draw(st.booleans()))
            run.take(out)
            if out.appends and data.draw(st.integers(0, 3)) > 0:
                out = run.append(out.appends[0], NONE)
            if out.answer is not None and out.answer.error is NONE:
                # Only the producer holding the current id and epoch hears NONE.
                run.successes += 1
                assert before == (mine.producer_id, mine.producer_epoch)
        elif op == "append" and run.appends:
            effect = run.appends[data.draw(st.integers(0, len(run.appends) - 1))]
            error = NONE if data.draw(st.booleans()) else data.draw(st.sampled_from(APPEND_ERRORS))
            run.append(effect, error)
        elif op == "marker" and run.markers:
            marker = run.markers.pop(data.draw(st.integers(0, len(run.markers) - 1)))
            errors = {tp: NONE for tp in marker.partitions}
            if data.draw(st.booleans()):
                tp = data.draw(st.sampled_from(sorted(marker.partitions)))
                errors[tp] = data.draw(st.sampled_from(MARKER_ERRORS))
            run.take(c.markers_written(marker, errors))
        elif op == "tick":
            w.now += data.draw(st.integers(0, 1500))
            run.take(c.abort_timed_out_transactions(w.now))
        elif op == "move":
            c.on_resignation(0)
            run.epoch += 1
            c.on_election(0, run.epoch)
            run.take(c.complete_loading(0, run.epoch, [(k, v) for _, k, v in w.log], w.now))
        run.check()
    # Liveness: once every append and marker goes through, no transition is left
    # pending; once the coordinator moves too, no transaction is left prepared.
    run.drain()
    entry = c.state.partitions[0]
    assert entry.loading or all(md.pending_state is None for md in entry.metadata.values())
    c.on_resignation(0)
    c.on_election(0, run.epoch + 1)
    run.take(c.complete_loading(0, run.epoch + 1, [(k, v) for _, k, v in w.log], w.now))
    run.drain()
    run.check()
    for md in c.state.partitions[0].metadata.values():
        assert md.pending_state is None and md.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT), md
    event(f"requests answered NONE: {min(run.successes, 5)}+")
