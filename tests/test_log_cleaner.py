"""The log cleaner over real logs on disk, in the test's thread (the cleaner's owner calls
run directly): what a cleaning keeps, which log it chooses and up to where, tombstones on
a passed-in clock, producers' last batches, checkpoints, gaps, faults."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from replog.protocol.errors import error_code_for
from replog.protocol.records import (
    InvalidRecord,
    build_batch,
    encode_record,
    iter_batches,
    simple_batch,
)
from replog.storage.checkpoints import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
from replog.storage.cleaner_manager import LogCleanerManager, cleanable_offsets, log_to_clean
from replog.storage.cleaner_threads import CleanerThread, InThreadRunner, direct_owner
from replog.storage.log import Log
from replog.storage.log_config import LogConfig
from replog.storage.record_reader import iter_records
from replog.storage.segment import LogSegment

NOW = 1_700_000_000_000
DAY = 86_400_000
TP = ("changes", 0)


def open_log(root: Path, **config: object) -> Log:
    settings = {"cleanup_policy": "compact", "segment_bytes": 2048, **config}
    return Log.open(
        root / "changes-0",
        LogConfig(**settings),  # type: ignore[arg-type]
        recovery_point=0,
        log_start_offset=0,
        now_ms=NOW,
        clean_shutdown=False,
    )


def keyed(
    pairs: list[tuple[bytes | None, bytes | None]], *, ts: int = NOW, **producer: int
) -> bytearray:
    section = b"".join(encode_record(i, 0, k, v) for i, (k, v) in enumerate(pairs))
    return bytearray(
        build_batch(
            base_offset=0,
            partition_leader_epoch=0,
            attributes=0,
            last_offset_delta=len(pairs) - 1,
            base_timestamp=ts,
            max_timestamp=ts,
            producer_id=producer.get("producer_id", -1),
            producer_epoch=producer.get("producer_epoch", -1),
            base_sequence=producer.get("base_sequence", -1),
            record_count=len(pairs),
            records=section,
        )
    )


def write(log: Log, key: bytes, value: bytes | None, *, ts: int = NOW) -> int:
    return log.append_as_leader(
        keyed([(key, value)], ts=ts), leader_epoch=0, now_ms=ts
    ).first_offset


def read_all(log: Log, start: int | None = None) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    offset = log.log_start_offset if start is None else start
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).records
        if not data:
            break
        for pos, header in iter_batches(data):
            for r in iter_records(data[pos : pos + header.size], header):
                if r.offset >= offset:
                    out.append((r.offset, r.key, r.value))
            offset = max(offset, header.next_offset)
    return out


class Harness:
    """One log, its cleaner manager and one cleaner thread that is never started."""

    def __init__(self, log: Log, memory: int = 1 << 20) -> None:
        self.log = log
        self.logs = {TP: log}
        self.root = log.dir.parent
        self.manager = LogCleanerManager([self.root], lambda: self.logs, lambda tp: self.root)
        self.now = NOW
        self.thread = CleanerThread(
            0,
            self.manager,
            direct_owner,
            InThreadRunner(memory, float("inf")),
            1000,
            threading.Event(),
            lambda: self.now / 1000,
        )

    def clean(self, now: int | None = None) -> bool:
        if now is not None:
            self.now = now
        return self.thread.clean_filthiest_log()


def fill(log: Log, rounds: int, keys: int) -> dict[bytes, tuple[int, bytes]]:
    latest = {}
    for r in range(rounds):
        for k in range(keys):
            key, value = b"key-%03d" % k, b"value-%d-%d" % (r, k)
            latest[key] = (write(log, key, value), value)
    return latest


def test_a_cleaning_keeps_the_latest_record_of_each_key_at_its_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path, min_cleanable_dirty_ratio=0.1)
    latest = fill(log, rounds=20, keys=30)
    log.update_high_watermark(log.log_end_offset)
    end, segments_before = log.log_end_offset, len(log.segments)
    active = log.active_segment.base_offset
    h = Harness(log)
    assert h.clean()
    assert log.log_end_offset == end and len(log.segments) == segments_before
    records = read_all(log)
    cleaned = [r for r in records if r[0] < active]
    # Each key once below the active segment, at the offset it was written at.
    assert len({k for _, k, _ in cleaned}) == len(cleaned)
    by_key = {k: (o, v) for o, k, v in records}
    assert by_key == latest
    assert h.manager.checkpointed_offset(TP) == active
    assert OffsetCheckpointFile(tmp_path / CLEANER_OFFSET_CHECKPOINT).read() == {TP: active}
    # The next cleaning merges the now small segments into one.
    for k in range(30):
        write(log, b"key-%03d" % k, b"again")
    log.roll(NOW)
    log.update_high_watermark(log.log_end_offset)
    assert h.clean()
    assert len(log.segments) < segments_before
    assert {k: v for _, k, v in read_all(log)} == {k: b"again" for k in latest}
    # It survives a restart (indexes and all).
    records = read_all(log)
    log.close()
    assert read_all(open_log(tmp_path)) == records


def test_a_read_inside_a_gap_returns_the_next_record(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(40):
        write(log, b"hot" if i % 10 else b"cold-%d" % i, b"v%d" % i)
    log.roll(NOW)
    log.update_high_watermark(log.log_end_offset)
    Harness(log).clean()
    kept = [o for o, _, _ in read_all(log)]
    assert kept == [0, 10, 20, 30, 39]
    for offset in range(40):
        first = read_all(log, offset)[0][0]
        assert first == min(o for o in kept if o >= offset)
        assert log.read(offset, 1 << 20).first_offset == first


def test_the_cleaner_stops_at_the_high_watermark_and_never_cleans_the_active_segment(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path)
    fill(log, rounds=20, keys=5)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 4
    assert cleanable_offsets(log, None, NOW) == (0, 0)  # no high watermark yet
    log.update_high_watermark(bases[2] + 1)  # inside the third segment
    ltc = log_to_clean(TP, log, None, NOW)
    assert (ltc.first_dirty_offset, ltc.first_uncleanable_offset) == (0, bases[2])
    before = read_all(log)
    assert Harness(log).clean()
    assert [r for r in read_all(log) if r[0] >= bases[2]] == [r for r in before if r[0] >= bases[2]]
    log.update_high_watermark(log.log_end_offset)
    assert cleanable_offsets(log, None, NOW)[1] == log.active_segment.base_offset


def test_min_and_max_compaction_lag(tmp_path: Path) -> None:
    log = open_log(tmp_path, min_compaction_lag_ms=60_000)
    for i in range(30):
        write(log, b"k%d" % (i % 3), b"x" * 100, ts=NOW + i * 10_000)
    log.update_high_watermark(log.log_end_offset)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) == 3
    # Segments with records newer than now - 60 s are not cleanable yet.
    now = NOW + 200_000
    young = next(s.base_offset for s in log.segments if s.largest_timestamp() > now - 60_000)
    assert cleanable_offsets(log, None, now)[1] == young == bases[1]
    # Below its dirty ratio, a log is cleaned only once max.compaction.lag.ms has passed.
    log.update_config(LogConfig(cleanup_policy="compact", segment_bytes=2048,
                                min_cleanable_dirty_ratio=0.9))  # fmt: skip
    ltc = log_to_clean(TP, log, bases[1], NOW + 300_000)
    assert ltc.cleanable_bytes > 0 and ltc.cleanable_ratio < 0.9 and not ltc.need_compaction_now
    log.update_config(LogConfig(cleanup_policy="compact", segment_bytes=2048,
                                min_cleanable_dirty_ratio=0.9, max_compaction_lag_ms=100_000))  # fmt: skip
    assert log_to_clean(TP, log, bases[1], NOW + 300_000).need_compaction_now
    assert not log_to_clean(TP, log, bases[1], NOW + 200_000).need_compaction_now
    with pytest.raises(ValueError, match="min.compaction.lag.ms"):
        LogConfig.from_properties({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})


def test_tombstones_stay_for_delete_retention_ms_then_go(tmp_path: Path) -> None:
    log = open_log(tmp_path, delete_retention_ms=DAY)
    write(log, b"gone", b"v1")
    write(log, b"kept", b"v1")
    write(log, b"gone", None)
    log.roll(NOW)
    write(log, b"kept", b"v2")
    log.roll(NOW)
    log.update_high_watermark(log.log_end_offset)
    h = Harness(log)
    assert h.clean(NOW)
    assert read_all(log) == [(2, b"gone", None), (3, b"kept", b"v2")]
    # Not yet: nothing is due before the horizon.
    assert not h.clean(NOW + DAY - 1)
    assert read_all(log) == [(2, b"gone", None), (3, b"kept", b"v2")]
    # Once the horizon has passed, a cleaning runs without new records and drops the tombstone.
    assert h.clean(NOW + DAY)
    assert read_all(log) == [(3, b"kept", b"v2")]
    assert not h.clean(NOW + 2 * DAY)


def test_an_active_producers_last_batch_stays_even_emptied(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    pid = dict(producer_id=77, producer_epoch=0)
    log.append_as_leader(keyed([(b"a", b"1")], base_sequence=0, **pid), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(keyed([(b"b", b"1")], base_sequence=1, **pid), leader_epoch=0, now_ms=NOW)
    write(log, b"b", b"2")  # supersedes the producer's last batch
    write(log, b"c", b"1")
    log.roll(NOW)
    log.update_high_watermark(log.log_end_offset)
    Harness(log).clean()
    data = log.read(0, 1 << 20).records
    batches = [
        (h.base_offset, h.record_count, h.producer_id, h.base_sequence)
        for _, h in iter_batches(data)
    ]
    # The producer's last batch (b=1, superseded) stays, empty, with its sequence.
    assert batches == [(0, 1, 77, 0), (1, 0, 77, 1), (2, 1, -1, -1), (3, 1, -1, -1)]
    log.close()
    again = open_log(tmp_path)
    assert again.producer_state.last_entry(77).last_seq == 1


def test_a_truncation_lowers_the_checkpoint_and_aborts_a_cleaning_planned_before_it(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path)
    fill(log, rounds=10, keys=5)
    log.update_high_watermark(log.log_end_offset)
    h = Harness(log)
    assert h.clean()
    checkpoint = h.manager.checkpointed_offset(TP)
    plan = h.manager.grab_filthiest_compacted_log(NOW)
    assert plan is None  # nothing dirty
    log.truncate_to(checkpoint - 3)
    fill(log, rounds=10, keys=5)
    log.update_high_watermark(log.log_end_offset)
    plan = h.manager.grab_filthiest_compacted_log(NOW)
    assert plan is not None and plan.task.first_dirty_offset == checkpoint - 3
    log.truncate_to(log.log_end_offset - 1)  # after the plan: its swaps are refused
    runner = InThreadRunner(1 << 20, float("inf"))
    with pytest.raises(Exception, match="changed"):
        runner.clean(plan.task, lambda g: h.manager.swap_cleaned_group(plan, g), lambda: False)
    h.manager.done_cleaning(plan, None)
    assert not list(log.dir.glob("*.cleaned"))


def test_a_deleted_log_forgets_its_checkpoint(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, rounds=5, keys=5)
    log.update_high_watermark(log.log_end_offset)
    h = Harness(log)
    assert h.clean()
    h.manager.remove_log(TP, tmp_path)
    assert OffsetCheckpointFile(tmp_path / CLEANER_OFFSET_CHECKPOINT).read() == {}


def test_a_corrupt_segment_is_skipped_and_left_as_it_is(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, rounds=10, keys=5)
    log.update_high_watermark(log.log_end_offset)
    victim = log.segments[1].log_path
    raw = bytearray(victim.read_bytes())
    raw[200] ^= 0xFF
    victim.write_bytes(raw)
    files = {p.name: p.read_bytes() for p in log.dir.iterdir() if p.suffix == ".log"}
    h = Harness(log)
    assert h.clean()
    assert h.manager.is_uncleanable(TP)
    assert {p.name: p.read_bytes() for p in log.dir.iterdir() if p.suffix == ".log"} == files
    assert not list(log.dir.glob("*.cleaned"))
    assert h.manager.grab_filthiest_compacted_log(NOW) is None  # skipped from now on


def test_disk_full_while_cleaning_keeps_the_old_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path)
    for k in range(8):  # keys written once: the first segment keeps several batches
        write(log, b"static-%d" % k, b"v")
    fill(log, rounds=10, keys=5)
    log.update_high_watermark(log.log_end_offset)
    before = read_all(log)
    files = {p.name: p.read_bytes() for p in log.dir.iterdir() if p.suffix == ".log"}
    real = LogSegment.append
    calls = []

    def full_disk(self, data, batches):
        if self.suffix == ".cleaned":
            calls.append(len(data))
            if len(calls) == 2:  # the first group's second write
                raise OSError(errno.ENOSPC, "No space left on device")
        real(self, data, batches)

    monkeypatch.setattr(LogSegment, "append", full_disk)
    h = Harness(log)
    h.thread.runner.cleaner.io_buffer_size = 64  # write every batch on its own
    assert not h.clean()  # an I/O error: back off
    assert read_all(log) == before
    assert {p.name: p.read_bytes() for p in log.dir.iterdir() if p.suffix == ".log"} == files
    assert not [p for p in log.dir.iterdir() if ".cleaned" in p.name]
    assert not h.manager.is_uncleanable(TP) and h.manager.checkpointed_offset(TP) is None
    monkeypatch.setattr(LogSegment, "append", real)
    assert h.clean()


def test_a_small_offset_map_cleans_in_several_passes(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=4096, min_cleanable_dirty_ratio=0.01)
    latest = fill(log, rounds=3, keys=40)
    log.roll(NOW)
    log.update_high_watermark(log.log_end_offset)
    h = Harness(log, memory=128 * 12)  # ten keys per pass
    passes = 0
    while h.clean():
        passes += 1
        assert passes < 30
    assert passes > 3
    assert {k: (o, v) for o, k, v in read_all(log)} == latest
    assert len(read_all(log)) == 40


def test_compacted_topics_refuse_records_without_a_key(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    with pytest.raises(InvalidRecord) as err:
        log.append_as_leader(keyed([(b"k", b"v"), (None, b"v")]), leader_epoch=0, now_ms=NOW)
    assert error_code_for(err.value) is ErrorCode.invalid_record == 87
    assert log.log_end_offset == 0
    plain = Log.open(tmp_path / "plain-0", LogConfig(), recovery_point=0, log_start_offset=0,
                     now_ms=NOW, clean_shutdown=False)  # fmt: skip
    plain.append_as_leader(bytearray(simple_batch([b"v"])), leader_epoch=0, now_ms=NOW)


def test_a_follower_appends_past_a_gap_the_leader_left(tmp_path: Path) -> None:
    leader = open_log(tmp_path)
    for i in range(20):
        write(leader, b"k%d" % (i % 2), b"v%d" % i)
    leader.roll(NOW)
    write(leader, b"k0", b"last")
    leader.update_high_watermark(leader.log_end_offset)
    Harness(leader).clean()
    follower = Log.open(tmp_path / "follower-0", LogConfig(cleanup_policy="compact"),
                        recovery_point=0, log_start_offset=0, now_ms=NOW, clean_shutdown=False)  # fmt: skip
    while follower.log_end_offset < leader.log_end_offset:
        follower.append_as_follower(leader.read(follower.log_end_offset, 1 << 20).records)
    assert read_all(follower) == read_all(leader) == [(18, b"k0", b"v18"), (19, b"k1", b"v19"),
                                                       (20, b"k0", b"last")]  # fmt: skip


def test_compaction_topic_configs_are_validated_as_kafka_does() -> None:
    from replog.server.dynamic_config import ConfigRejected, validate_topic_config

    config = validate_topic_config(
        "t",
        {
            "cleanup.policy": "compact,delete",
            "min.cleanable.dirty.ratio": "0.25",
            "min.compaction.lag.ms": "10",
            "max.compaction.lag.ms": "1000",
            "delete.retention.ms": "0",
        },
    )
    assert config.compact and config.delete_enabled
    assert (config.min_cleanable_dirty_ratio, config.min_compaction_lag_ms) == (0.25, 10)
    for bad, why in [
        ({"min.cleanable.dirty.ratio": "1.5"}, "no more than 1"),
        ({"min.cleanable.dirty.ratio": "x"}, "DOUBLE"),
        ({"max.compaction.lag.ms": "0"}, "at least 1"),
        ({"delete.retention.ms": "-1"}, "at least 0"),
    ]:
        with pytest.raises(ConfigRejected, match=why):
            validate_topic_config("t", bad)
    assert LogConfig().to_properties()["delete.retention.ms"] == "86400000"
