"""Offset and time index lookups against brute-force models (Hypothesis)."""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replog.protocol.records import read_header, simple_batch
from replog.storage.index import CorruptIndex, OffsetIndex, TimeIndex
from replog.storage.segment import LogSegment

BASE = 1000


@st.composite
def offset_entries(draw: st.DrawFn) -> list[tuple[int, int]]:
    """Strictly increasing offsets (>= BASE) with non-decreasing positions."""
    gaps = draw(st.lists(st.integers(1, 50), max_size=40))
    steps = draw(st.lists(st.integers(0, 5000), min_size=len(gaps), max_size=len(gaps)))
    entries, offset, position = [], BASE - 1, 0
    for gap, step in zip(gaps, steps, strict=True):
        offset += gap
        position += step
        entries.append((offset, position))
    return entries


def model_offset_lookup(entries: list[tuple[int, int]], target: int) -> tuple[int, int]:
    below = [e for e in entries if e[0] <= target]
    return below[-1] if below else (BASE, 0)


@settings(max_examples=150)
@given(offset_entries(), st.lists(st.integers(BASE - 5, BASE + 2100), max_size=30))
def test_offset_index_lookup_matches_model(entries: list, targets: list) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        index = OffsetIndex(Path(tmp) / "x.index", BASE, load=False)
        for offset, position in entries:
            index.append(offset, position)
        for target in targets:
            assert index.lookup(target) == model_offset_lookup(entries, target)
        index.flush()
        reloaded = OffsetIndex(Path(tmp) / "x.index", BASE)
        assert reloaded.entries() == entries
        for target in targets:
            assert reloaded.lookup(target) == model_offset_lookup(entries, target)


@settings(max_examples=100)
@given(offset_entries(), st.integers(BASE - 5, BASE + 2100), st.booleans())
def test_offset_index_truncate_matches_model(entries: list, cut: int, flush_first: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.index"
        index = OffsetIndex(path, BASE, load=False)
        for offset, position in entries:
            index.append(offset, position)
        if flush_first:
            index.flush()
        index.truncate_to(cut)
        kept = [e for e in entries if e[0] < cut]
        assert index.entries() == kept
        index.flush()
        assert OffsetIndex(path, BASE).entries() == kept


@st.composite
def time_appends(draw: st.DrawFn) -> list[tuple[int, int]]:
    """(timestamp, offset) attempts: offsets non-decreasing, timestamps arbitrary."""
    n = draw(st.integers(0, 40))
    offsets = sorted(draw(st.lists(st.integers(BASE, BASE + 500), min_size=n, max_size=n)))
    stamps = draw(st.lists(st.integers(0, 300), min_size=n, max_size=n))
    return list(zip(stamps, offsets, strict=True))


@settings(max_examples=150)
@given(time_appends(), st.lists(st.integers(-5, 320), max_size=30))
def test_time_index_matches_model(attempts: list, targets: list) -> None:
    model: list[tuple[int, int]] = []
    for ts, offset in attempts:
        if not model or ts > model[-1][0]:
            model.append((ts, offset))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.timeindex"
        index = TimeIndex(path, BASE, load=False)
        for ts, offset in attempts:
            index.maybe_append(ts, offset)
        assert index.entries() == model
        for target in targets:
            below = [e for e in model if e[0] <= target]
            assert index.lookup(target) == (below[-1] if below else (-1, BASE))
        index.flush()
        assert TimeIndex(path, BASE).entries() == model


def test_torn_and_out_of_order_index_files(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    path.write_bytes(struct.pack(">ii", 5, 100) + struct.pack(">ii", 9, 200) + b"\x00\x01")
    assert OffsetIndex(path, BASE).entries() == [(BASE + 5, 100), (BASE + 9, 200)]
    path.write_bytes(struct.pack(">ii", 9, 100) + struct.pack(">ii", 5, 200))
    with pytest.raises(CorruptIndex):
        OffsetIndex(path, BASE)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 6), min_size=1, max_size=25),
    st.integers(0, 400),
    st.data(),
)
def test_segment_find_batch_matches_model(counts: list, interval: int, data: st.DataObject) -> None:
    """Sparse index + forward scan finds the batch holding every offset."""
    with tempfile.TemporaryDirectory() as tmp:
        segment = LogSegment(
            Path(tmp), BASE, index_interval_bytes=interval, created_ms=0, fresh=True
        )
        spans, offset = [], BASE
        for count in counts:
            raw = simple_batch([b"v" * 7] * count, base_offset=offset)
            segment.append(raw, [(0, read_header(raw))])
            spans.append((offset, offset + count - 1))
            offset += count
        targets = data.draw(st.lists(st.integers(BASE - 2, offset + 2), max_size=20))
        for target in targets:
            found = segment.find_batch(target)
            expected = next((s for s in spans if s[1] >= target), None)
            if expected is None:
                assert found is None
            else:
                assert found is not None
                assert (found[1].base_offset, found[1].last_offset) == expected
        segment.close()
