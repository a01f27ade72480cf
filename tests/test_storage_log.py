"""Log: append/read, bounds, rolls, retention, timestamps, idempotence, truncation."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import lz4.frame
import pytest
import snappy
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from replog.protocol.errors import (
    InvalidProducerEpoch,
    OffsetOutOfRange,
    OutOfOrderSequence,
    RecordTooLarge,
)
from replog.protocol.records import (
    ATTR_TIMESTAMP_TYPE,
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    CorruptRecordBatch,
    InvalidRecordBatch,
    build_batch,
    encode_record,
    iter_batches,
    read_header,
    simple_batch,
    verify_crc,
)
from replog.storage.log import Log, TimestampAndOffset
from replog.storage.log_config import LogConfig
from replog.storage.log_validator import UnexpectedAppendOffset

NOW = 1_700_000_000_000


def open_log(tmp_path: Path, name: str = "orders.v1-0", **config: object) -> Log:
    return Log.open(
        tmp_path / name,
        LogConfig(**config),  # type: ignore[arg-type]
        recovery_point=0,
        log_start_offset=0,
        now_ms=NOW,
        clean_shutdown=False,
    )


def batch(n: int, *, ts: int = NOW, size: int = 10, **kw: int) -> bytearray:
    return bytearray(
        simple_batch([bytes([65 + i % 26]) * size for i in range(n)], timestamp=ts, **kw)
    )


def spans(records: bytes) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for _, h in iter_batches(records)]


def test_append_assigns_dense_offsets_and_stores_bytes_as_sent(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert (log.topic, log.partition) == ("orders.v1", 0)
    sent = [batch(n) for n in (1, 3, 2, 5)]
    infos = [log.append_as_leader(bytearray(b), leader_epoch=7, now_ms=NOW) for b in sent]
    assert [(i.first_offset, i.last_offset) for i in infos] == [(0, 0), (1, 3), (4, 5), (6, 10)]
    assert all(i.num_batches == 1 and not i.duplicate and i.log_append_time == -1 for i in infos)
    assert log.log_end_offset == 11
    data = log.read(0, 1 << 20).records
    assert spans(data) == [(0, 0), (1, 3), (4, 5), (6, 10)]
    # byte for byte as sent, except the patched baseOffset and partitionLeaderEpoch
    pos = 0
    for original in sent:
        stored = data[pos : pos + len(original)]
        assert stored[16:] == original[16:]
        assert struct.unpack_from(">i", stored, 12)[0] == 7
        verify_crc(stored, 0, read_header(stored))
        pos += len(original)
    assert log.leader_epoch_cache.entries() == [(7, 0)]
    for offset in range(11):
        first = spans(log.read(offset, 1).records)[0]
        assert first[0] <= offset <= first[1]


def test_one_request_with_several_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    request = bytearray(batch(2) + batch(3) + batch(1))
    info = log.append_as_leader(request, leader_epoch=0, now_ms=NOW)
    assert (info.first_offset, info.last_offset, info.num_batches) == (0, 5, 3)
    assert spans(log.read(0, 1 << 20).records) == [(0, 1), (2, 4), (5, 5)]


def test_read_bounds(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for _ in range(5):
        log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)  # offsets 0-9, 2 per batch
    size = len(batch(2))
    assert spans(log.read(0, 1 << 20, max_offset=6).records) == [(0, 1), (2, 3), (4, 5)]
    assert spans(log.read(3, 1 << 20, max_offset=6).records) == [(2, 3), (4, 5)]
    assert log.read(6, 1 << 20, max_offset=6).records == b""
    assert spans(log.read(0, 2 * size).records) == [(0, 1), (2, 3)]
    assert spans(log.read(0, 2 * size + size - 1).records) == [(0, 1), (2, 3)]
    # KIP-74: the first batch comes whole even when it exceeds max_bytes
    assert spans(log.read(4, 1).records) == [(4, 5)]
    assert log.read(4, 1, min_one_batch=False).records == b""
    empty = log.read(10, 1 << 20)
    assert (empty.records, empty.first_offset) == (b"", 10)
    with pytest.raises(OffsetOutOfRange):
        log.read(11, 100)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 100)


def test_bad_batch_rejects_whole_append(tmp_path: Path) -> None:
    log = open_log(tmp_path, max_message_bytes=500)
    log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    size = log.size_in_bytes()
    corrupt = batch(2)
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptRecordBatch):
        log.append_as_leader(batch(1) + corrupt, leader_epoch=0, now_ms=NOW)
    with pytest.raises(InvalidRecordBatch):
        log.append_as_leader(batch(1) + batch(2)[:-3], leader_epoch=0, now_ms=NOW)
    with pytest.raises(RecordTooLarge):
        log.append_as_leader(batch(1) + batch(2, size=600), leader_epoch=0, now_ms=NOW)
    assert (log.log_end_offset, log.size_in_bytes()) == (1, size)


def test_roll_by_bytes(tmp_path: Path) -> None:
    one = len(batch(1))
    log = open_log(tmp_path, segment_bytes=3 * one, index_interval_bytes=1)
    for _ in range(10):
        log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    assert [s.base_offset for s in log.segments] == [0, 3, 6, 9]
    assert all(s.size <= 3 * one for s in log.segments)
    names = sorted(p.name for p in log.dir.iterdir() if p.suffix == ".log")
    assert names == [f"{b:020d}.log" for b in (0, 3, 6, 9)]
    # a read never spans segments, and continues in the next one
    assert spans(log.read(1, 1 << 20).records) == [(1, 1), (2, 2)]
    assert spans(log.read(3, 1 << 20).records) == [(3, 3), (4, 4), (5, 5)]


def test_roll_by_time(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_ms=1000)
    log.append_as_leader(batch(1, ts=NOW), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(batch(1, ts=NOW + 1000), leader_epoch=0, now_ms=NOW + 1000)
    assert len(log.segments) == 1  # not past segment.ms yet (Kafka: strictly greater)
    log.append_as_leader(batch(1, ts=NOW + 1001), leader_epoch=0, now_ms=NOW + 1001)
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.maybe_roll(NOW + 1500)
    assert len(log.segments) == 2
    log.maybe_roll(NOW + 2002)
    assert [s.base_offset for s in log.segments] == [0, 2, 3]
    log.maybe_roll(NOW + 10_000)  # the active segment is empty: Kafka keeps it
    assert len(log.segments) == 3


def test_roll_jitter_rolls_each_segment_earlier_by_its_own_amount(tmp_path: Path) -> None:
    """Kafka's segment.jitter.ms: a segment rolls once it is older than segment.ms minus
    its jitter, below min(segment.jitter.ms, segment.ms) and not the same for every log."""
    rolled_at = {}
    for name in ("a-0", "b-0", "c-0", "d-0", "e-0", "f-0"):
        log = open_log(tmp_path, name, segment_ms=1000, segment_jitter_ms=600)
        log.append_as_leader(batch(1, ts=NOW), leader_epoch=0, now_ms=NOW)
        for w in range(1, 1002):
            log.maybe_roll(NOW + w)
            if len(log.segments) == 2:
                break
        rolled_at[name] = w
    assert all(400 < w <= 1001 for w in rolled_at.values()), rolled_at
    assert len(set(rolled_at.values())) > 1, rolled_at  # spread over the logs
    # without jitter every log waits the whole segment.ms
    plain = open_log(tmp_path, "g-0", segment_ms=1000)
    plain.append_as_leader(batch(1, ts=NOW), leader_epoch=0, now_ms=NOW)
    plain.maybe_roll(NOW + 1000)
    assert len(plain.segments) == 1
    plain.maybe_roll(NOW + 1001)
    assert len(plain.segments) == 2


def test_roll_by_time_without_record_timestamps_uses_creation_time(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_ms=1000)
    log.append_as_leader(batch(1, ts=-1), leader_epoch=0, now_ms=NOW + 500)
    log.append_as_leader(batch(1, ts=-1), leader_epoch=0, now_ms=NOW + 1001)
    assert [s.base_offset for s in log.segments] == [0, 1]


def fill(log: Log, batches: int, *, ts: int) -> None:
    for _ in range(batches):
        log.append_as_leader(batch(1, ts=ts), leader_epoch=0, now_ms=ts)


def test_retention_by_time_advances_log_start_offset(tmp_path: Path) -> None:
    one = len(batch(1))
    log = open_log(tmp_path, segment_bytes=2 * one, retention_ms=10_000)
    fill(log, 4, ts=NOW)  # segments [0,1] [2,3]
    fill(log, 3, ts=NOW + 20_000)  # [4,5] [6]
    assert [s.base_offset for s in log.segments] == [0, 2, 4, 6]
    assert log.delete_old_segments(NOW + 10_000) == 0
    assert log.delete_old_segments(NOW + 10_001) == 2
    assert log.log_start_offset == 4
    assert [s.base_offset for s in log.segments] == [4, 6]
    assert not (log.dir / f"{0:020d}.log").exists()
    assert not (log.dir / f"{0:020d}.index").exists()
    with pytest.raises(OffsetOutOfRange):
        log.read(3, 100)
    assert spans(log.read(4, 1 << 20).records) == [(4, 4), (5, 5)]
    # everything expired, active segment included: roll first, keep an empty segment
    assert log.delete_old_segments(NOW + 40_000) == 2
    assert (log.log_start_offset, log.log_end_offset) == (7, 7)
    assert [(s.base_offset, s.size) for s in log.segments] == [(7, 0)]
    assert log.read(7, 100).records == b""
    log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    assert spans(log.read(7, 100).records) == [(7, 7)]


def test_retention_by_size(tmp_path: Path) -> None:
    one = len(batch(1))
    log = open_log(tmp_path, segment_bytes=2 * one, retention_bytes=3 * one)
    fill(log, 7, ts=NOW)  # [0,1] [2,3] [4,5] [6] = 7 batches
    assert log.delete_old_segments(NOW) == 2  # 7 - 3 = 4 batches over: two whole segments
    assert log.log_start_offset == 4
    assert log.size_in_bytes() == 3 * one
    assert log.delete_old_segments(NOW) == 0


def test_retention_never_passes_high_watermark(tmp_path: Path) -> None:
    one = len(batch(1))
    log = open_log(tmp_path, segment_bytes=2 * one, retention_ms=0)
    fill(log, 5, ts=NOW)  # [0,1] [2,3] [4]
    log.update_high_watermark(3)
    assert log.delete_old_segments(NOW + 1) == 1  # [2,3] ends at 4 > HW 3
    assert log.log_start_offset == 2
    log.update_high_watermark(5)
    assert log.delete_old_segments(NOW + 1) == 2
    assert log.log_start_offset == 5


def test_compact_policy_is_not_deleted_by_retention(tmp_path: Path) -> None:
    keyed = build_batch(
        base_offset=0,
        partition_leader_epoch=0,
        attributes=0,
        last_offset_delta=0,
        base_timestamp=NOW,
        max_timestamp=NOW,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        record_count=1,
        records=encode_record(0, 0, b"key", b"value"),
    )
    log = open_log(tmp_path, segment_bytes=len(keyed), retention_ms=0, cleanup_policy="compact")
    for _ in range(5):  # one batch per segment (a compacted log takes keyed records only)
        log.append_as_leader(bytearray(keyed), leader_epoch=0, now_ms=NOW)
    assert log.delete_old_segments(NOW + 10) == 0
    # segments wholly below the log start offset go whatever the policy (DeleteRecords)
    assert log.maybe_increment_log_start_offset(3)
    assert log.delete_old_segments(NOW + 10) == 3
    assert [s.base_offset for s in log.segments] == [3, 4]


def compressed_batch(codec: int, timestamps: list[int], *, xerial: bool = False) -> bytearray:
    base = min(timestamps)
    raw = b"".join(
        encode_record(i, ts - base, b"k%d" % i, b"value-%d" % i) for i, ts in enumerate(timestamps)
    )
    if codec == COMPRESSION_GZIP:
        body = gzip.compress(raw)
    elif codec == COMPRESSION_SNAPPY:
        body = snappy.compress(raw)
        if xerial:
            body = (
                b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", len(body)) + body
            )
    elif codec == COMPRESSION_LZ4:
        body = lz4.frame.compress(raw)
    else:
        body = zstandard.ZstdCompressor().compress(raw)
    return bytearray(
        build_batch(
            base_offset=0,
            partition_leader_epoch=0,
            attributes=codec,
            last_offset_delta=len(timestamps) - 1,
            base_timestamp=base,
            max_timestamp=max(timestamps),
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            record_count=len(timestamps),
            records=body,
        )
    )


def test_log_start_offset_moves_up_for_delete_records(tmp_path: Path) -> None:
    """DeleteRecords: the log start moves mid-segment; only whole segments below it go,
    the epoch cache starts there, and a reopen with the checkpointed offset keeps it."""
    one = len(batch(1))
    log = open_log(tmp_path, segment_bytes=2 * one)
    for _ in range(5):  # segments [0,1] [2,3] [4]
        log.append_as_leader(batch(1), leader_epoch=3, now_ms=NOW)
    log.update_high_watermark(5)
    assert log.earliest_epoch() == 3
    assert not log.maybe_increment_log_start_offset(0)
    assert log.maybe_increment_log_start_offset(3)
    assert not log.maybe_increment_log_start_offset(2)  # never back
    assert log.log_start_offset == 3
    assert log.leader_epoch_cache.entries() == [(3, 3)]
    assert log.earliest_epoch() == 3
    with pytest.raises(OffsetOutOfRange):
        log.read(2, 100)
    assert log.delete_segments_below_log_start() == 1  # [0,1]; [2,3] still holds offset 3
    assert [s.base_offset for s in log.segments] == [2, 4]
    assert log.offset_for_timestamp(0) == TimestampAndOffset(NOW, 3, 3)
    log.flush()
    log.close()
    reopened = Log.open(
        log.dir,
        LogConfig(segment_bytes=2 * one),
        recovery_point=log.recovery_point,
        log_start_offset=3,
        now_ms=NOW,
        clean_shutdown=True,
    )
    assert (reopened.log_start_offset, reopened.log_end_offset) == (3, 5)
    assert reopened.leader_epoch_cache.entries() == [(3, 3)]


def test_found_records_carry_their_batch_leader_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(2, ts=NOW), leader_epoch=1, now_ms=NOW)
    log.append_as_leader(batch(1, ts=NOW + 9), leader_epoch=4, now_ms=NOW)
    log.append_as_leader(batch(1, ts=NOW + 5), leader_epoch=6, now_ms=NOW)
    assert log.offset_for_timestamp(NOW + 1) == TimestampAndOffset(NOW + 9, 2, 4)
    assert log.max_timestamp_and_offset() == TimestampAndOffset(NOW + 9, 2, 4)
    assert log.offset_for_timestamp(NOW + 10) is None


@pytest.mark.parametrize(
    ("codec", "xerial"),
    [
        (COMPRESSION_GZIP, False),
        (COMPRESSION_SNAPPY, False),
        (COMPRESSION_SNAPPY, True),
        (COMPRESSION_LZ4, False),
        (COMPRESSION_ZSTD, False),
    ],
)
def test_offset_for_timestamp_exact_in_compressed_batch(
    tmp_path: Path, codec: int, xerial: bool
) -> None:
    log = open_log(tmp_path, index_interval_bytes=1)
    log.append_as_leader(batch(3, ts=NOW), leader_epoch=0, now_ms=NOW)  # offsets 0-2
    # out-of-order timestamps inside one compressed batch, offsets 3-7
    log.append_as_leader(
        compressed_batch(codec, [NOW + 50, NOW + 10, NOW + 70, NOW + 30, NOW + 60], xerial=xerial),
        leader_epoch=0,
        now_ms=NOW,
    )
    log.append_as_leader(batch(2, ts=NOW + 100), leader_epoch=0, now_ms=NOW)  # offsets 8-9
    assert log.offset_for_timestamp(NOW - 5) == TimestampAndOffset(NOW, 0, 0)
    assert log.offset_for_timestamp(NOW) == TimestampAndOffset(NOW, 0, 0)
    assert log.offset_for_timestamp(NOW + 1) == TimestampAndOffset(NOW + 50, 3, 0)
    assert log.offset_for_timestamp(NOW + 55) == TimestampAndOffset(NOW + 70, 5, 0)
    assert log.offset_for_timestamp(NOW + 70) == TimestampAndOffset(NOW + 70, 5, 0)
    assert log.offset_for_timestamp(NOW + 71) == TimestampAndOffset(NOW + 100, 8, 0)
    assert log.offset_for_timestamp(NOW + 101) is None
    assert log.max_timestamp_and_offset() == TimestampAndOffset(NOW + 100, 8, 0)


def test_max_timestamp_inside_a_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert log.max_timestamp_and_offset() is None
    log.append_as_leader(compressed_batch(COMPRESSION_GZIP, [5, 9, 7]), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(batch(1, ts=8), leader_epoch=0, now_ms=NOW)
    assert log.max_timestamp_and_offset() == TimestampAndOffset(9, 1, 0)


def test_log_append_time(tmp_path: Path) -> None:
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    info = log.append_as_leader(batch(2, ts=5), leader_epoch=0, now_ms=NOW + 7)
    assert (info.max_timestamp, info.log_append_time) == (NOW + 7, NOW + 7)
    stored = log.read(0, 1000).records
    header = read_header(stored)
    assert header.max_timestamp == NOW + 7 and header.attributes & ATTR_TIMESTAMP_TYPE
    verify_crc(stored, 0, header)
    assert log.offset_for_timestamp(NOW) == TimestampAndOffset(NOW + 7, 0, 0)


def idem(n: int, seq: int, *, pid: int = 42, epoch: int = 0) -> bytearray:
    return batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_idempotent_producer_duplicates_and_gaps(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    first = log.append_as_leader(idem(2, 0), leader_epoch=0, now_ms=NOW)
    second = log.append_as_leader(idem(3, 2), leader_epoch=0, now_ms=NOW)
    end = log.log_end_offset
    retry = log.append_as_leader(idem(2, 0), leader_epoch=0, now_ms=NOW)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (
        first.first_offset,
        first.last_offset,
    )
    retry = log.append_as_leader(idem(3, 2), leader_epoch=0, now_ms=NOW)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (2, 4)
    assert second.last_offset == 4 and log.log_end_offset == end
    with pytest.raises(OutOfOrderSequence):
        log.append_as_leader(idem(1, 6), leader_epoch=0, now_ms=NOW)  # expected 5
    with pytest.raises(OutOfOrderSequence):
        log.append_as_leader(idem(1, 3, epoch=1), leader_epoch=0, now_ms=NOW)  # new epoch, not 0
    log.append_as_leader(idem(1, 0, epoch=1), leader_epoch=0, now_ms=NOW)
    with pytest.raises(InvalidProducerEpoch):
        log.append_as_leader(idem(1, 5, epoch=0), leader_epoch=0, now_ms=NOW)
    # a different producer is independent; unknown producers may start anywhere
    log.append_as_leader(idem(1, 17, pid=7), leader_epoch=0, now_ms=NOW)
    assert log.log_end_offset == end + 2


def test_duplicate_detection_survives_clean_reopen(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(idem(2, 0), leader_epoch=0, now_ms=NOW)
    log.flush()
    log.close()
    log = Log.open(
        tmp_path / "orders.v1-0",
        LogConfig(),
        recovery_point=2,
        log_start_offset=0,
        now_ms=NOW,
        clean_shutdown=True,
    )
    retry = log.append_as_leader(idem(2, 0), leader_epoch=0, now_ms=NOW)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (0, 1)
    with pytest.raises(OutOfOrderSequence):
        log.append_as_leader(idem(1, 5), leader_epoch=0, now_ms=NOW)


def test_truncate_to_drops_data_epochs_and_producer_state(tmp_path: Path) -> None:
    one = len(batch(2))
    log = open_log(tmp_path, segment_bytes=2 * one)
    log.append_as_leader(idem(2, 0), leader_epoch=1, now_ms=NOW)  # 0-1
    log.append_as_leader(idem(2, 2), leader_epoch=1, now_ms=NOW)  # 2-3
    log.append_as_leader(idem(2, 4), leader_epoch=2, now_ms=NOW)  # 4-5, new segment
    log.append_as_leader(idem(2, 6), leader_epoch=3, now_ms=NOW)  # 6-7
    assert log.leader_epoch_cache.entries() == [(1, 0), (2, 4), (3, 6)]
    log.truncate_to(4)
    assert log.log_end_offset == 4
    assert [s.base_offset for s in log.segments] == [0, 4]
    assert log.leader_epoch_cache.entries() == [(1, 0)]
    assert spans(log.read(0, 1 << 20).records) == [(0, 1), (2, 3)]
    # the truncated batch is no longer a duplicate: it is appended again at offset 4
    again = log.append_as_leader(idem(2, 4), leader_epoch=4, now_ms=NOW)
    assert not again.duplicate and again.first_offset == 4
    log.truncate_to(3)  # inside batch 2-3: the whole batch goes
    assert log.log_end_offset == 2
    log.truncate_to(100)  # beyond the end: nothing happens
    assert log.log_end_offset == 2


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(batch(3), leader_epoch=1, now_ms=NOW)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (100, 100, 100)
    assert log.leader_epoch_cache.entries() == []
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 10)
    info = log.append_as_leader(batch(1), leader_epoch=2, now_ms=NOW)
    assert info.first_offset == 100
    assert [s.base_offset for s in log.segments] == [100]


def test_follower_append_keeps_offsets_and_learns_epochs(tmp_path: Path) -> None:
    leader = open_log(tmp_path, name="a-0")
    leader.append_as_leader(batch(2), leader_epoch=1, now_ms=NOW)
    leader.append_as_leader(batch(1), leader_epoch=3, now_ms=NOW)
    fetched = leader.read(0, 1 << 20).records
    follower = open_log(tmp_path, name="a-1")
    info = follower.append_as_follower(fetched)
    assert (info.first_offset, info.last_offset, info.num_batches) == (0, 2, 2)
    with pytest.raises(UnexpectedAppendOffset):  # starts below the log end offset
        follower.append_as_follower(leader.read(2, 1 << 20).records)
    assert follower.read(0, 1 << 20).records == fetched
    assert follower.leader_epoch_cache.entries() == [(1, 0), (3, 2)]
    assert follower.leader_epoch_cache.end_offset_for(1, follower.log_end_offset) == (1, 2)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 4), st.integers(1, 120)), min_size=1, max_size=30),
    st.integers(1, 3000),
    st.integers(60, 3000),
    st.data(),
)
def test_read_matches_model(
    tmp_path_factory: pytest.TempPathFactory,
    shapes: list[tuple[int, int]],
    interval: int,
    segment_bytes: int,
    data: st.DataObject,
) -> None:
    """Reads against a brute-force model over random batches, segments and bounds."""
    log = open_log(
        tmp_path_factory.mktemp("read"), index_interval_bytes=interval, segment_bytes=segment_bytes
    )
    model: list[tuple[int, int, int, int]] = []  # base, last, size, segment base
    for count, size in shapes:
        info = log.append_as_leader(batch(count, size=size), leader_epoch=0, now_ms=NOW)
        model.append((info.first_offset, info.last_offset, len(batch(count, size=size)), 0))
    bases = [s.base_offset for s in log.segments]
    model = [(b, last, n, max(x for x in bases if x <= b)) for b, last, n, _ in model]
    end = log.log_end_offset
    for _ in range(8):
        start = data.draw(st.integers(0, end), label="start")
        following = [m for m in model if m[1] >= start]
        sums = [sum(m[2] for m in following[: i + 1]) for i in range(min(6, len(following)))]
        exact = [x + d for x in sums for d in (-1, 0, 1)]
        max_bytes = data.draw(
            st.integers(1, 1200) | st.sampled_from(exact or [1]), label="max_bytes"
        )
        max_offset = data.draw(st.none() | st.integers(0, end + 1), label="max_offset")
        min_one = data.draw(st.booleans(), label="min_one_batch")
        expected: list[tuple[int, int]] = []
        if start < end and (max_offset is None or start < max_offset):
            first = next(m for m in model if m[1] >= start)
            total = 0
            for base, last, size, seg in model:
                if last < start:
                    continue
                if seg != first[3] or (max_offset is not None and base >= max_offset):
                    break
                if total + size > max_bytes and not (min_one and not expected):
                    break
                expected.append((base, last))
                total += size
        assert (
            spans(log.read(start, max_bytes, max_offset=max_offset, min_one_batch=min_one).records)
            == expected
        )
    log.close()


def test_index_entries_only_every_index_interval_bytes(tmp_path: Path) -> None:
    one = len(batch(1))
    log = open_log(tmp_path, index_interval_bytes=3 * one)
    for _ in range(20):
        log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    # Kafka indexes a batch once strictly more than the interval was written since the last entry
    entries = log.active_segment.offset_index.entries()
    assert entries == [(o, o * one) for o in (4, 8, 12, 16)]
    log.flush()
    assert log.active_segment.offset_index.path.stat().st_size == 8 * len(entries)
