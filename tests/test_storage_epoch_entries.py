"""The leader epoch rules (storage/epoch_entries.py): properties under random changes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from replog.protocol.epochs import UNDEFINED_EPOCH_END_OFFSET, EpochEndOffset
from replog.storage.epoch_entries import (
    assign_epoch,
    check_epoch_entries,
    end_offset_for_epoch,
    epoch_for_offset,
    truncate_epochs_from_end,
    truncate_epochs_from_start,
)

ops = st.lists(
    st.one_of(
        st.tuples(st.just("assign"), st.integers(0, 20), st.integers(0, 60)),
        st.tuples(st.just("end"), st.integers(-1, 60), st.just(0)),
        st.tuples(st.just("start"), st.integers(0, 60), st.just(0)),
    ),
    max_size=25,
)


def apply(entries, op):
    kind, a, b = op
    if kind == "assign":
        return assign_epoch(entries, a, b)
    if kind == "end":
        return truncate_epochs_from_end(entries, a)
    return truncate_epochs_from_start(entries, a)


@given(ops)
def test_every_change_keeps_entries_strictly_increasing(changes) -> None:
    entries: tuple[tuple[int, int], ...] = ()
    for op in changes:
        entries = apply(entries, op)
        check_epoch_entries(entries)


@given(ops, st.integers(0, 20), st.integers(0, 60))
def test_assign(changes, epoch, start) -> None:
    entries: tuple[tuple[int, int], ...] = ()
    for op in changes:
        entries = apply(entries, op)
    after = assign_epoch(entries, epoch, start)
    if entries and (
        epoch < entries[-1][0] or (epoch == entries[-1][0] and start >= entries[-1][1])
    ):
        assert after == entries  # an older epoch, or the latest again later: ignored
    else:
        assert after[-1] == (epoch, start)
        assert after[:-1] == entries[: len(after) - 1]  # a prefix survives
        # every offset before the new start keeps the epoch it had
        for offset in range(start):
            assert epoch_for_offset(after, offset) == epoch_for_offset(entries, offset)


@given(ops, st.integers(0, 60))
def test_truncate_from_end_keeps_the_prefix_before_the_cut(changes, end) -> None:
    entries: tuple[tuple[int, int], ...] = ()
    for op in changes:
        entries = apply(entries, op)
    after = truncate_epochs_from_end(entries, end)
    assert after == tuple(e for e in entries if e[1] < end)
    assert truncate_epochs_from_end(entries, -1) == entries  # undefined offset: no change


@given(ops, st.integers(0, 60))
def test_truncate_from_start_keeps_the_epoch_of_every_later_offset(changes, start) -> None:
    entries: tuple[tuple[int, int], ...] = ()
    for op in changes:
        entries = apply(entries, op)
    after = truncate_epochs_from_start(entries, start)
    for offset in range(start, 70):
        assert epoch_for_offset(after, offset) == epoch_for_offset(entries, offset)
    if entries and entries[0][1] <= start:
        assert after[0][1] == start


@given(ops, st.integers(-1, 22), st.integers(0, 10))
def test_end_offset_for_epoch_against_the_timeline(changes, requested, past_end) -> None:
    """The answer read off a timeline (offset -> epoch) instead of the entries."""
    entries: tuple[tuple[int, int], ...] = ()
    for op in changes:
        entries = apply(entries, op)
    log_end_offset = (entries[-1][1] if entries else 0) + past_end
    answer = end_offset_for_epoch(entries, log_end_offset, requested)
    if not entries or requested < 0 or requested > entries[-1][0]:
        assert answer == UNDEFINED_EPOCH_END_OFFSET
        return
    timeline = [epoch_for_offset(entries, o) for o in range(log_end_offset)]
    later = [o for o, e in enumerate(timeline) if e is not None and e > requested]
    end = later[0] if later else log_end_offset
    known = [e for e, _ in entries if e <= requested]
    epoch = known[-1] if known else requested
    assert answer == EpochEndOffset(epoch, end)
