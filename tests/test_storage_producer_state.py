"""Idempotent producer state: the last five batches per producer, across restarts,
replication and truncation (Kafka's ProducerStateManager, NumBatchesToRetain = 5)."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from replog.protocol.errors import OutOfOrderSequence
from replog.protocol.records import iter_batches, simple_batch
from replog.storage.log import Log
from replog.storage.log_config import LogConfig
from replog.storage.producer_state import (
    NUM_BATCHES_TO_RETAIN,
    BatchMetadata,
    ProducerStateEntry,
    ProducerStateManager,
    decode_snapshot,
    encode_snapshot,
    list_snapshots,
    snapshot_path,
)

NOW = 1_700_000_000_000
PID = 42

# segment.bytes per layout: every batch rolls a segment (so snapshots hold every
# producer's state at every batch boundary), or all in one segment (no snapshot but
# the one close writes: state comes from replaying the batches)
LAYOUTS = {"segment per batch": 1, "one segment": 1 << 30}


@dataclass(frozen=True)
class Sent:
    """One idempotent batch as the producer sent it and where the log put it."""

    pid: int
    epoch: int
    seq: int
    count: int
    first_offset: int
    last_offset: int

    def records(self) -> bytearray:
        return idem(self.count, self.seq, pid=self.pid, epoch=self.epoch)


def idem(n: int, seq: int, *, pid: int = PID, epoch: int = 0) -> bytearray:
    return bytearray(
        simple_batch(
            [bytes([65 + i]) * 10 for i in range(n)],
            timestamp=NOW,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
        )
    )


def open_log(dir: Path, segment_bytes: int, *, clean: bool = False) -> Log:
    return Log.open(
        dir,
        LogConfig(segment_bytes=segment_bytes),
        recovery_point=0,
        log_start_offset=0,
        now_ms=NOW,
        clean_shutdown=clean,
    )


def send(
    log: Log, counts: list[int], *, pid: int = PID, epoch: int = 0, seq: int = 0
) -> list[Sent]:
    sent = []
    for n in counts:
        info = log.append_as_leader(idem(n, seq, pid=pid, epoch=epoch), leader_epoch=0, now_ms=NOW)
        assert not info.duplicate
        sent.append(Sent(pid, epoch, seq, n, info.first_offset, info.last_offset))
        seq += n
    return sent


def assert_retry(log: Log, batch: Sent, *, duplicate: bool) -> None:
    """A retry of ``batch`` answers its original offsets, or OUT_OF_ORDER_SEQUENCE_NUMBER."""
    end = log.log_end_offset
    if duplicate:
        info = log.append_as_leader(batch.records(), leader_epoch=0, now_ms=NOW)
        assert info.duplicate, batch
        assert (info.first_offset, info.last_offset) == (batch.first_offset, batch.last_offset)
    else:
        with pytest.raises(OutOfOrderSequence):
            log.append_as_leader(batch.records(), leader_epoch=0, now_ms=NOW)
    assert log.log_end_offset == end


COUNTS = [1, 3, 2, 1, 4, 2, 1, 3]  # eight batches of different sizes


def leader_log(tmp_path: Path, where: str, segment_bytes: int) -> tuple[Log, list[Sent]]:
    """Eight batches from one producer, then the log that must recognise their retries."""
    log = open_log(tmp_path / "t-0", segment_bytes)
    sent = send(log, COUNTS)
    if where == "leader":
        return log, sent
    if where == "leader after clean restart":
        log.flush()
        log.close()
        return open_log(tmp_path / "t-0", segment_bytes, clean=True), sent
    if where == "leader after crash":  # no close, so no snapshot at the log end
        log.flush()
        return open_log(tmp_path / "t-0", segment_bytes), sent
    follower = open_log(tmp_path / "t-1", segment_bytes)
    replicate(log, follower)
    if where == "follower become leader":
        return follower, sent
    assert where == "follower become leader after crash"
    follower.flush()
    return open_log(tmp_path / "t-1", segment_bytes), sent


def replicate(leader: Log, follower: Log) -> None:
    """Fetch until the follower has the leader's log, at most two batches per append."""
    while follower.log_end_offset < leader.log_end_offset:
        records = leader.read(follower.log_end_offset, 1 << 20).records
        bounds = [(pos, pos + h.size) for pos, h in iter_batches(records)]
        for first, last in zip(bounds[::2], bounds[1::2] + bounds[-1:], strict=False):
            follower.append_as_follower(records[first[0] : last[1]])
    for offset in range(leader.log_end_offset):
        assert follower.read(offset, 1).records == leader.read(offset, 1).records


WHERE = [
    "leader",
    "leader after clean restart",
    "leader after crash",
    "follower become leader",
    "follower become leader after crash",
]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("where", WHERE)
def test_a_retry_of_each_of_the_last_five_batches_is_a_duplicate(
    tmp_path: Path, where: str, layout: str
) -> None:
    log, sent = leader_log(tmp_path, where, LAYOUTS[layout])
    for age, batch in enumerate(reversed(sent), start=1):
        # Kafka keeps five batches per producer; an older retry is out of order, like a gap
        assert_retry(log, batch, duplicate=age <= NUM_BATCHES_TO_RETAIN)
    gap = Sent(PID, 0, sum(COUNTS) + 1, 1, -1, -1)
    assert_retry(log, gap, duplicate=False)
    # and the producer carries on where it was
    nxt = send(log, [2], seq=sum(COUNTS))
    assert nxt[0].first_offset == sent[-1].last_offset + 1


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("cut", [0, 1, 4, 5, 6, 7])
@pytest.mark.parametrize("role", ["leader", "follower", "after restart"])
def test_truncation_rolls_producer_state_back(
    tmp_path: Path, layout: str, cut: int, role: str
) -> None:
    """Truncate to the start of batch ``cut``: the batches before it are still duplicates
    (as many as five), and the truncated ones are not: batch ``cut`` is appended afresh."""
    segment_bytes = LAYOUTS[layout]
    log = open_log(tmp_path / "t-0", segment_bytes)
    sent = send(log, COUNTS)
    if role == "follower":
        follower = open_log(tmp_path / "t-1", segment_bytes)
        replicate(log, follower)
        log = follower
    elif role == "after restart":
        log.flush()
        log.close()
        log = open_log(tmp_path / "t-0", segment_bytes, clean=True)
    log.truncate_to(sent[cut].first_offset)
    assert log.log_end_offset == sent[cut].first_offset
    assert all(offset <= log.log_end_offset for offset, _ in list_snapshots(log.dir))
    kept = sent[:cut]
    for age, batch in enumerate(reversed(kept), start=1):
        assert_retry(log, batch, duplicate=age <= NUM_BATCHES_TO_RETAIN)
    if kept:  # (with nothing kept the producer is unknown, and may start anywhere)
        for batch in sent[cut + 1 :]:
            assert_retry(log, batch, duplicate=False)  # beyond the retained state: a gap
    again = log.append_as_leader(sent[cut].records(), leader_epoch=1, now_ms=NOW)
    assert not again.duplicate
    assert (again.first_offset, again.last_offset) == (
        sent[cut].first_offset,
        sent[cut].last_offset,
    )


# -- a model of several producers, restarts in between -------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([7, 8, 9]), st.integers(1, 3), st.booleans()),
        min_size=1,
        max_size=30,
    ),
    st.sampled_from(sorted(LAYOUTS.values())),
    st.sampled_from(["none", "clean", "crash"]),
)
def test_duplicates_follow_the_five_batch_model(
    tmp_path_factory: pytest.TempPathFactory,
    appends: list[tuple[int, int, bool]],
    segment_bytes: int,
    restart: str,
) -> None:
    """Producers interleave (``bump`` starts a new producer epoch at sequence 0); after an
    optional restart every retry is a duplicate exactly when it is among its producer's
    last five batches of its current epoch."""
    dir = tmp_path_factory.mktemp("model") / "t-0"
    log = open_log(dir, segment_bytes)
    history: dict[int, list[Sent]] = {}
    epochs: dict[int, int] = {}
    for pid, n, bump in appends:
        mine = history.setdefault(pid, [])
        if bump and mine:
            epochs[pid] = epochs.get(pid, 0) + 1
        epoch = epochs.get(pid, 0)
        seq = mine[-1].seq + mine[-1].count if mine and mine[-1].epoch == epoch else 0
        mine.extend(send(log, [n], pid=pid, epoch=epoch, seq=seq))
    if restart != "none":
        log.flush()
        if restart == "clean":
            log.close()
        log = open_log(dir, segment_bytes, clean=restart == "clean")
    for mine in history.values():
        current = [b for b in mine if b.epoch == mine[-1].epoch]
        for age, batch in enumerate(reversed(current), start=1):
            assert_retry(log, batch, duplicate=age <= NUM_BATCHES_TO_RETAIN)


# -- snapshots -------------------------------------------------------------------------------


entries = st.builds(
    lambda pid, epoch, ts, metas: _entry(pid, epoch, ts, metas),
    st.integers(0, 2**63 - 1),
    st.integers(-1, 2**15 - 1),
    st.integers(-1, 2**62),
    st.lists(
        st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**62), st.integers(0, 2**31 - 1)),
        max_size=NUM_BATCHES_TO_RETAIN,
    ),
)


def _entry(pid: int, epoch: int, ts: int, metas: list[tuple[int, int, int]]) -> ProducerStateEntry:
    entry = ProducerStateEntry(pid, epoch, last_timestamp=ts)
    for last_seq, last_offset, delta in metas:
        entry.batches.append(BatchMetadata(last_seq, last_offset, delta, ts))
    return entry


@given(st.lists(entries, max_size=6, unique_by=lambda e: e.producer_id))
def test_snapshot_round_trip(producers: list[ProducerStateEntry]) -> None:
    state = {e.producer_id: e for e in producers}
    assert decode_snapshot(encode_snapshot(state)) == state


def v1_snapshot(entries: list[tuple[int, int, int, int, int, int]]) -> bytes:
    """Kafka's version 1 snapshot: (pid, epoch, last seq, last offset, delta, timestamp)."""
    body = struct.pack(">i", len(entries)) + b"".join(
        struct.pack(">qhiqiqiq", pid, epoch, seq, off, delta, ts, -1, -1)
        for pid, epoch, seq, off, delta, ts in entries
    )
    return struct.pack(">hI", 1, crc32c(body)) + body


def test_version_1_snapshots_still_load(tmp_path: Path) -> None:
    """A snapshot from before version 2 knows each producer's last batch only."""
    dir = tmp_path / "t-0"
    log = open_log(dir, 1 << 30)
    sent = send(log, COUNTS)
    log.flush()
    log.close()
    last = sent[-1]
    for _, path in list_snapshots(dir):
        path.unlink()
    snapshot_path(dir, log.log_end_offset).write_bytes(
        v1_snapshot([(PID, 0, last.seq + last.count - 1, last.last_offset, last.count - 1, NOW)])
    )
    log = open_log(dir, 1 << 30, clean=True)
    entry = log.producer_state.producers[PID]
    assert [(b.first_seq, b.first_offset, b.last_offset) for b in entry.batches] == [
        (last.seq, last.first_offset, last.last_offset)
    ]
    assert_retry(log, last, duplicate=True)
    assert_retry(log, sent[-2], duplicate=False)  # no metadata for it in a v1 snapshot
    send(log, [1], seq=last.seq + last.count)


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:-1],  # truncated
        lambda b: b[:6] + bytes([b[6] ^ 1]) + b[7:],  # flipped bit: bad CRC
        lambda b: struct.pack(">h", 9) + b[2:],  # unknown version
    ],
)
def test_corrupt_snapshot_is_ignored_and_state_rebuilt_from_the_log(tmp_path: Path, damage) -> None:
    dir = tmp_path / "t-0"
    log = open_log(dir, 1 << 30)
    sent = send(log, COUNTS)
    log.flush()
    log.close()
    ((offset, path),) = list_snapshots(dir)
    path.write_bytes(damage(path.read_bytes()))
    state = ProducerStateManager("t-0")
    assert not state.load_snapshot(path, offset)
    log = open_log(dir, 1 << 30, clean=True)
    for age, batch in enumerate(reversed(sent), start=1):
        assert_retry(log, batch, duplicate=age <= NUM_BATCHES_TO_RETAIN)


def test_coordinator_batch_without_sequence_checks_the_epoch_only(tmp_path: Path) -> None:
    """Kafka's AppendOrigin.COORDINATOR: the group coordinator writes a TxnOffsetCommit's
    records as the producer's batch with no sequence; the epoch is still checked, and a
    client's batch without a sequence is still refused."""
    from replog.protocol.errors import InvalidProducerEpoch, InvalidRecordBatch

    log = open_log(tmp_path / "t-0", 1 << 30)
    send(log, [2], epoch=3)
    info = log.append_as_leader(
        idem(1, -1, epoch=3), leader_epoch=0, now_ms=NOW, from_coordinator=True
    )
    assert (info.first_offset, info.duplicate) == (2, False)
    with pytest.raises(InvalidProducerEpoch):
        log.append_as_leader(
            idem(1, -1, epoch=2), leader_epoch=0, now_ms=NOW, from_coordinator=True
        )
    with pytest.raises(InvalidRecordBatch):
        log.append_as_leader(idem(1, -1, epoch=3), leader_epoch=0, now_ms=NOW)
    assert log.log_end_offset == 3
    # the producer's own sequence goes on from where its last batch left it
    send(log, [1], epoch=3, seq=2)
