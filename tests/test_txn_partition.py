"""The partition side of transactions, on a storage ``Log``: transactional batches open a
producer's transaction, COMMIT/ABORT markers end it, the last stable offset, the
``.txnindex`` of aborted transactions (written with the marker, rebuilt after a crash,
cut with a truncation) and the leader's checks (INVALID_TXN_STATE, INVALID_PRODUCER_EPOCH,
TRANSACTION_COORDINATOR_FENCED, no control batches from clients), and the log cleaner
with transactions (aborted data removed, markers kept until their delete horizon, never
past an open transaction)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replog.protocol.errors import (
    InvalidProducerEpoch,
    InvalidTxnState,
    OutOfOrderSequence,
    TransactionCoordinatorFenced,
)
from replog.protocol.records import (
    ATTR_TRANSACTIONAL,
    EndTxnMarker,
    InvalidRecord,
    build_batch,
    encode_record,
    end_txn_marker_batch,
    iter_batches,
    read_end_txn_marker,
    read_header,
)
from replog.storage.cleaner_filter import empty_batch
from replog.storage.cleaner_manager import cleanable_offsets
from replog.storage.log import Log
from replog.storage.log_config import LogConfig
from replog.storage.producer_state import ProducerStateManager, decode_snapshot, encode_snapshot
from replog.storage.record_reader import iter_records
from replog.storage.txn_index import AbortedTxn, TransactionIndex
from test_log_cleaner import DAY, Harness, write
from test_log_cleaner import open_log as compacted_log

NOW = 1_700_000_000_000


def open_log(dir: Path, *, clean: bool = False, recovery_point: int = 0, **config: object) -> Log:
    return Log.open(
        dir,
        LogConfig(**config),  # type: ignore[arg-type]
        recovery_point=recovery_point,
        log_start_offset=0,
        now_ms=NOW,
        clean_shutdown=clean,
    )


def txn_batch(pid: int, seq: int, n: int = 2, *, epoch: int = 0, transactional: bool = True):
    records = b"".join(encode_record(i, 0, None, b"v%d" % (seq + i)) for i in range(n))
    return bytearray(
        build_batch(
            base_offset=0,
            partition_leader_epoch=0,
            attributes=ATTR_TRANSACTIONAL if transactional else 0,
            last_offset_delta=n - 1,
            base_timestamp=NOW,
            max_timestamp=NOW,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            record_count=n,
            records=records,
        )
    )


def marker(log: Log, pid: int, *, commit: bool, epoch: int = 0, coordinator_epoch: int = 0):
    return log.append_marker_as_leader(
        pid, epoch, EndTxnMarker(commit, coordinator_epoch), leader_epoch=0, now_ms=NOW
    )


def test_marker_batch_round_trip() -> None:
    batch = end_txn_marker_batch(
        producer_id=7, producer_epoch=3, commit=False, coordinator_epoch=12, timestamp=NOW
    )
    header = read_header(batch)
    assert header.is_control and header.is_transactional and header.base_sequence == -1
    assert read_end_txn_marker(batch, header) == EndTxnMarker(False, 12)


def test_transactions_move_the_last_stable_offset_and_index_aborts(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(txn_batch(1, 0), leader_epoch=0, now_ms=NOW)  # 0-1, pid 1 opens
    log.append_as_leader(txn_batch(2, 0), leader_epoch=0, now_ms=NOW)  # 2-3, pid 2 opens
    log.update_high_watermark(log.log_end_offset)
    assert log.producer_state.first_unstable_offset() == 0
    assert log.last_stable_offset() == 0
    assert marker(log, 1, commit=True).first_offset == 4  # pid 1 commits
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset() == 2
    assert log.active_segment.txn_index.entries == []  # a commit is not indexed
    marker(log, 2, commit=False)  # pid 2 aborts at 5
    assert log.last_stable_offset() == 5  # the HW, not yet past the marker
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset() == 6
    assert log.active_segment.txn_index.entries == [AbortedTxn(2, 2, 5, 6)]
    assert log.collect_aborted_transactions(0, 6) == [AbortedTxn(2, 2, 5, 6)]
    assert log.collect_aborted_transactions(4, 6) == [AbortedTxn(2, 2, 5, 6)]
    assert log.collect_aborted_transactions(0, 2) == []
    assert log.collect_aborted_transactions(6, 7) == []
    # the markers are in the log as control batches, readable by anyone
    data = log.read(0, 1 << 20).records
    controls = [h for _, h in iter_batches(data) if h.is_control]
    assert [(h.base_offset, h.producer_id) for h in controls] == [(4, 1), (5, 2)]


def test_an_empty_transaction_marker_is_not_indexed(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    marker(log, 9, commit=False)
    assert log.active_segment.txn_index.entries == []
    assert log.producer_state.first_unstable_offset() is None


def test_leader_checks(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(txn_batch(1, 0, epoch=2), leader_epoch=0, now_ms=NOW)
    end = log.log_end_offset
    with pytest.raises(InvalidTxnState):
        log.append_as_leader(
            txn_batch(1, 2, epoch=2, transactional=False), leader_epoch=0, now_ms=NOW
        )
    with pytest.raises(InvalidProducerEpoch):
        log.append_as_leader(txn_batch(1, 0, epoch=1), leader_epoch=0, now_ms=NOW)
    with pytest.raises(InvalidProducerEpoch):
        marker(log, 1, commit=True, epoch=1)
    marker(log, 1, commit=True, epoch=2, coordinator_epoch=5)
    with pytest.raises(TransactionCoordinatorFenced):
        marker(log, 1, commit=False, epoch=2, coordinator_epoch=4)
    with pytest.raises(InvalidRecord):
        forged = bytearray(
            end_txn_marker_batch(
                producer_id=1, producer_epoch=2, commit=True, coordinator_epoch=9, timestamp=NOW
            )
        )
        log.append_as_leader(forged, leader_epoch=0, now_ms=NOW)
    assert log.log_end_offset == end + 1  # only the accepted marker was written
    # after the commit the producer may write outside a transaction again
    log.append_as_leader(txn_batch(1, 2, epoch=2, transactional=False), leader_epoch=0, now_ms=NOW)


def test_a_batch_of_an_ended_transaction_is_no_duplicate_for_the_next(tmp_path: Path) -> None:
    """Campaign seed 14: librdkafka aborted a transaction whose batch (sequences 82-83)
    its killed leader had written, and reused 82-83 in the next transaction at the same
    epoch. Answering the aborted batch's offsets acknowledged records never written."""
    log = open_log(tmp_path / "t-0")
    first = log.append_as_leader(txn_batch(1, 0), leader_epoch=0, now_ms=NOW)
    again = log.append_as_leader(txn_batch(1, 0), leader_epoch=0, now_ms=NOW)
    assert again.duplicate and again.first_offset == first.first_offset == 0  # a retry
    marker(log, 1, commit=False)
    end = log.log_end_offset
    with pytest.raises(OutOfOrderSequence):
        log.append_as_leader(txn_batch(1, 0), leader_epoch=0, now_ms=NOW)
    assert log.log_end_offset == end
    # the same after a restart, from the snapshot or the log
    log.producer_state.write_snapshot(tmp_path / "t-0")
    log.close()
    log = open_log(tmp_path / "t-0", recovery_point=end)
    with pytest.raises(OutOfOrderSequence):
        log.append_as_leader(txn_batch(1, 0), leader_epoch=0, now_ms=NOW)
    # the next transaction's batches follow on, and its own retries are duplicates
    nxt = log.append_as_leader(txn_batch(1, 2), leader_epoch=0, now_ms=NOW)
    assert not nxt.duplicate and nxt.first_offset == end
    assert log.append_as_leader(txn_batch(1, 2), leader_epoch=0, now_ms=NOW).duplicate
    # an idempotent (non-transactional) producer's retries are unchanged
    marker(log, 1, commit=True)
    plain = log.append_as_leader(txn_batch(1, 4, transactional=False), leader_epoch=0, now_ms=NOW)
    retry = log.append_as_leader(txn_batch(1, 4, transactional=False), leader_epoch=0, now_ms=NOW)
    assert retry.duplicate and retry.first_offset == plain.first_offset


def test_snapshot_keeps_open_transactions(tmp_path: Path) -> None:
    state = ProducerStateManager("t-0")
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(txn_batch(4, 0), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(txn_batch(5, 0), leader_epoch=0, now_ms=NOW)
    marker(log, 5, commit=True)
    state.producers = decode_snapshot(encode_snapshot(log.producer_state.producers))
    assert state.producers[4].current_txn_first_offset == 0
    assert state.producers[5].current_txn_first_offset == -1
    path = log.producer_state.write_snapshot(tmp_path)
    assert state.load_snapshot(path, log.log_end_offset)
    assert state.first_unstable_offset() == 0


def test_follower_rebuilds_the_same_state(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "l-0")
    follower = open_log(tmp_path / "f-0")
    leader.append_as_leader(txn_batch(1, 0), leader_epoch=0, now_ms=NOW)
    leader.append_as_leader(txn_batch(2, 0), leader_epoch=0, now_ms=NOW)
    marker(leader, 1, commit=False)
    follower.append_as_follower(leader.read(0, 1 << 20).records, now_ms=NOW)
    assert follower.producer_state.ongoing_txns == {2: 2}
    assert follower.active_segment.txn_index.entries == leader.active_segment.txn_index.entries


def test_txn_index_rebuilt_after_a_crash_and_cut_by_truncation(tmp_path: Path) -> None:
    dir = tmp_path / "t-0"
    log = open_log(dir, segment_bytes=300)
    for pid in range(1, 5):
        log.append_as_leader(txn_batch(pid, 0), leader_epoch=0, now_ms=NOW)
    for pid in range(1, 5):
        marker(log, pid, commit=pid % 2 == 0)  # 1 and 3 abort
    assert len(log.segments) > 1
    expected = [t for s in log.segments for t in s.txn_index.entries]
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in expected] == [
        (1, 0, 8),
        (3, 4, 10),
    ]
    # An unclean stop: nothing of the indexes was written (no flush since the rolls'),
    # and the newest .txnindex files are gone entirely.
    for path in dir.glob("*.txnindex"):
        path.unlink()
    reopened = open_log(dir, segment_bytes=300)
    assert [t for s in reopened.segments for t in s.txn_index.entries] == expected
    assert reopened.producer_state.first_unstable_offset() is None
    # A truncation below the second abort's marker drops its entry and reopens pid 3's
    # (and pid 4's) transaction.
    reopened.truncate_to(10)
    assert [t for s in reopened.segments for t in s.txn_index.entries] == expected[:1]
    assert reopened.producer_state.ongoing_txns == {3: 4, 4: 6}
    reopened.flush()
    reopened.close()
    clean = open_log(dir, clean=True, recovery_point=10, segment_bytes=300)
    assert [t for s in clean.segments for t in s.txn_index.entries] == expected[:1]
    assert clean.producer_state.ongoing_txns == {3: 4, 4: 6}


def test_txn_index_file_round_trip_and_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex(path, load=False)
    index.append(AbortedTxn(1, 0, 5, 6))
    index.append(AbortedTxn(2, 3, 9, 10))
    index.flush()
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x01")  # a torn entry
    again = TransactionIndex(path, load=True)
    assert again.entries == index.entries
    assert path.stat().st_size == 2 * 34
    with pytest.raises(ValueError):
        again.append(AbortedTxn(3, 0, 9, 10))
    again.truncate_to(9)
    assert TransactionIndex(path, load=True).entries == [AbortedTxn(1, 0, 5, 6)]


# -- the log cleaner --------------------------------------------------------------------


def keyed_txn(pid: int, seq: int, key: bytes, value: bytes) -> bytearray:
    return bytearray(
        build_batch(
            base_offset=0,
            partition_leader_epoch=0,
            attributes=ATTR_TRANSACTIONAL,
            last_offset_delta=0,
            base_timestamp=NOW,
            max_timestamp=NOW,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=seq,
            record_count=1,
            records=encode_record(0, 0, key, value),
        )
    )


def batches_of(log: Log) -> list[tuple[int, bool, int, bytes | None]]:
    """``(base offset, is control, record count, first key)`` of every batch."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).records
        if not data:
            break
        for pos, h in iter_batches(data):
            records = list(iter_records(data[pos : pos + h.size], h))
            key = None if h.is_control or not records else records[0].key
            out.append((h.base_offset, h.is_control, h.record_count, key))
            offset = max(offset, h.next_offset)
    return out


def test_the_cleaner_removes_aborted_data_and_markers_after_their_horizon(tmp_path: Path) -> None:
    log = compacted_log(tmp_path, delete_retention_ms=DAY, min_cleanable_dirty_ratio=0.01)
    write(log, b"k1", b"v0")  # 0
    log.append_as_leader(keyed_txn(10, 0, b"k1", b"aborted"), leader_epoch=0, now_ms=NOW)  # 1
    log.append_as_leader(keyed_txn(11, 0, b"k2", b"c"), leader_epoch=0, now_ms=NOW)  # 2
    marker(log, 10, commit=False)  # 3
    marker(log, 11, commit=True)  # 4
    log.append_as_leader(keyed_txn(10, 1, b"k3", b"x"), leader_epoch=0, now_ms=NOW)  # 5
    marker(log, 10, commit=True)  # 6
    log.roll(NOW)
    log.update_high_watermark(log.log_end_offset)
    h = Harness(log)
    assert h.clean(NOW)
    # The aborted k1 neither survives nor hides the committed one; both markers stay
    # (the ABORT one removed data now, so its range stays indexed).
    assert batches_of(log) == [
        (0, False, 1, b"k1"),
        (2, False, 1, b"k2"),
        (3, True, 1, None),
        (4, True, 1, None),
        (5, False, 1, b"k3"),
        (6, True, 1, None),
    ]
    assert [t.producer_id for s in log.segments for t in s.txn_index.entries] == [10]

    write(log, b"k1", b"v1")  # 7: supersedes offset 0
    log.roll(NOW)
    log.update_high_watermark(log.log_end_offset)
    assert h.clean(NOW + 1)
    # No data of the aborted transaction is left: its marker gets a delete horizon and
    # its range leaves the index; the committed ones still mark data.
    assert [b[0] for b in batches_of(log)] == [2, 3, 4, 5, 6, 7]
    assert [t for s in log.segments for t in s.txn_index.entries] == []
    assert not h.clean(NOW + 1 + DAY - 1)
    assert h.clean(NOW + 1 + DAY)
    assert [b[0] for b in batches_of(log)] == [2, 4, 5, 6, 7]
    # the producer state rebuilt from the cleaned log is the same
    end = log.log_end_offset
    log.close()
    again = compacted_log(tmp_path)
    assert again.log_end_offset == end
    assert again.producer_state.first_unstable_offset() is None


def test_the_cleaner_stops_at_an_open_transaction(tmp_path: Path) -> None:
    log = compacted_log(tmp_path)
    write(log, b"a", b"1")
    log.roll(NOW)
    log.append_as_leader(keyed_txn(10, 0, b"a", b"open"), leader_epoch=0, now_ms=NOW)  # 1
    log.roll(NOW)
    write(log, b"a", b"2")
    log.roll(NOW)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset() == 1
    assert cleanable_offsets(log, None, NOW) == (0, 1)
    marker(log, 10, commit=False)
    log.update_high_watermark(log.log_end_offset)
    assert cleanable_offsets(log, None, NOW) == (0, log.active_segment.base_offset)


def test_an_emptied_control_batch_is_no_marker(tmp_path: Path) -> None:
    batch = end_txn_marker_batch(
        producer_id=3, producer_epoch=0, commit=False, coordinator_epoch=0, timestamp=NOW
    )
    emptied = bytearray(empty_batch(read_header(batch)))
    assert read_end_txn_marker(emptied, read_header(emptied)) is None
    # a follower (or a reload) takes it as it is
    log = open_log(tmp_path / "t-0")
    log.append_as_follower(emptied, now_ms=NOW)
    assert log.log_end_offset == 1 and log.producer_state.first_unstable_offset() is None


# -- KIP-890 part 1: verification guards --------------------------------------------------


def test_a_transaction_opens_only_with_a_current_verification_guard(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    state = log.producer_state

    def append(seq: int, guard) -> None:  # type: ignore[no-untyped-def]
        log.append_as_leader(
            txn_batch(1, seq),
            leader_epoch=0,
            now_ms=NOW,
            verification_required=True,
            verification_guard=guard,
        )

    with pytest.raises(InvalidTxnState):
        append(0, None)  # never verified
    guard = state.maybe_start_verification(1)
    assert guard is not None and state.maybe_start_verification(1) is guard  # shared
    assert state.maybe_start_verification(2) is not guard
    append(0, guard)
    assert state.maybe_start_verification(1) is None  # open here: nothing to verify
    append(2, None)  # later batches of the open transaction need none
    # A verification in flight when the transaction ends is void: its late batch cannot
    # open a (hanging) transaction.
    late = state.maybe_start_verification(2)
    log.append_as_leader(txn_batch(2, 0), leader_epoch=0, now_ms=NOW)  # (verification off)
    marker(log, 2, commit=False)
    end = log.log_end_offset
    with pytest.raises(InvalidTxnState):
        log.append_as_leader(
            txn_batch(2, 2),
            leader_epoch=0,
            now_ms=NOW,
            verification_required=True,
            verification_guard=late,
        )
    assert log.log_end_offset == end and 2 not in state.ongoing_txns
    # plain and idempotent batches never need one
    log.append_as_leader(
        txn_batch(3, 0, transactional=False),
        leader_epoch=0,
        now_ms=NOW,
        verification_required=True,
    )


# -- the aborted ranges a read gets ---------------------------------------------------------


def test_interleaved_aborts_keep_the_search_going(tmp_path: Path) -> None:
    """Transaction 2 opens before 1 and aborts after it: 1's entry records the LSO at its
    abort (2's first offset), so a search ending before 1's marker does not stop at 1's
    entry and still finds 2's (Kafka ``collectAbortedTxns``' completeness rule)."""
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(txn_batch(2, 0), leader_epoch=0, now_ms=NOW)  # 0-1
    log.append_as_leader(txn_batch(1, 0), leader_epoch=0, now_ms=NOW)  # 2-3
    marker(log, 1, commit=False)  # 4
    marker(log, 2, commit=False)  # 5
    assert log.active_segment.txn_index.entries == [AbortedTxn(1, 2, 4, 0), AbortedTxn(2, 0, 5, 6)]
    assert [t.producer_id for t in log.collect_aborted_transactions(0, 3)] == [1, 2]
    assert [t.producer_id for t in log.collect_aborted_transactions(0, 1)] == [2]


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("data"), st.integers(1, 3)),
        st.tuples(st.sampled_from(["commit", "abort"]), st.integers(1, 3)),
        st.tuples(st.just("plain"), st.just(0)),
        st.tuples(st.just("roll"), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=40, deadline=None)
@given(ops=OPS, data=st.data())
def test_collected_aborted_transactions_are_exactly_those_a_range_overlaps(
    tmp_path_factory: pytest.TempPathFactory, ops, data
) -> None:  # type: ignore[no-untyped-def]
    dir = tmp_path_factory.mktemp("prop") / "t-0"
    log = open_log(dir)
    seqs = dict.fromkeys(range(5), 0)
    open_at: dict[int, int] = {}
    aborted: list[tuple[int, int, int]] = []  # the model: (pid, first, marker offset)
    for op, pid in ops:
        if op == "data":
            open_at.setdefault(pid, log.log_end_offset)
            log.append_as_leader(txn_batch(pid, seqs[pid]), leader_epoch=0, now_ms=NOW)
            seqs[pid] += 2
        elif op in ("commit", "abort"):
            at = marker(log, pid, commit=op == "commit").first_offset
            first = open_at.pop(pid, None)
            if op == "abort" and first is not None:
                aborted.append((pid, first, at))
        elif op == "plain":
            log.append_as_leader(
                txn_batch(9, seqs[0], transactional=False), leader_epoch=0, now_ms=NOW
            )
            seqs[0] += 2
        else:
            log.roll(NOW)
    log.update_high_watermark(log.log_end_offset)
    expected_lso = min(open_at.values(), default=log.log_end_offset)
    assert log.last_stable_offset() == expected_lso
    end = log.log_end_offset

    def check(lg: Log) -> None:
        for _ in range(30):
            start = data.draw(st.integers(0, end))
            upper = data.draw(st.integers(start + 1, end + 1))
            got = [
                (t.producer_id, t.first_offset, t.last_offset)
                for t in lg.collect_aborted_transactions(start, upper)
            ]
            assert got == [t for t in aborted if t[2] >= start and t[1] < upper]

    check(log)
    # the same after an unclean stop that lost every .txnindex
    for path in dir.glob("*.txnindex"):
        path.unlink()
    again = open_log(dir)
    assert again.producer_state.ongoing_txns == open_at
    check(again)
