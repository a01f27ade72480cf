"""Crash recovery, clean shutdown and the LogManager's checkpoints."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from replog.protocol.records import iter_batches, simple_batch
from replog.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    OffsetCheckpointFile,
)
from replog.storage.log import Log
from replog.storage.log_config import LogConfig
from replog.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager

NOW = 1_700_000_000_000
CONFIG = LogConfig(index_interval_bytes=100)


def batch(n: int = 2, *, ts: int = NOW) -> bytearray:
    return bytearray(simple_batch([b"payload-%03d" % i for i in range(n)], timestamp=ts + n))


def open_log(dir: Path, *, recovery_point: int = 0, clean: bool = False, **config: int) -> Log:
    cfg = LogConfig(index_interval_bytes=100, **config)  # type: ignore[arg-type]
    return Log.open(
        dir,
        cfg,
        recovery_point=recovery_point,
        log_start_offset=0,
        now_ms=NOW,
        clean_shutdown=clean,
    )


def write_batches(dir: Path, count: int, **config: int) -> tuple[Log, list[int]]:
    """Append ``count`` 2-record batches; returns the log and each batch's file end position."""
    log = open_log(dir, **config)
    ends = []
    for _ in range(count):
        log.append_as_leader(batch(), leader_epoch=1, now_ms=NOW)
        ends.append(log.active_segment.size)
    return log, ends


def dropped_bytes(caplog: pytest.LogCaptureFixture) -> int:
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    found = [int(m.group(1)) for msg in messages if (m := re.search(r"dropped (\d+) bytes", msg))]
    assert len(found) == 1, messages
    return found[0]


def damage_append_garbage(path: Path) -> None:
    with path.open("ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x63garbage that is not a batch")


def damage_half_batch(path: Path) -> None:
    with path.open("ab") as f:
        f.write(bytes(simple_batch([b"x" * 50]))[:40])


def damage_flip_crc_byte_in_last_batch(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x5A  # inside the last batch's records: covered by its CRC
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "lost_batches"),
    [
        (damage_append_garbage, 0),
        (damage_half_batch, 0),
        (damage_flip_crc_byte_in_last_batch, 1),
    ],
)
def test_torn_tail_is_truncated_and_indexes_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage, lost_batches: int
) -> None:
    dir = tmp_path / "events-0"
    crashed, ends = write_batches(dir, 20)
    reference = [e for e in crashed.active_segment.offset_index.entries()]
    segment_file = crashed.active_segment.log_path
    size_before = segment_file.stat().st_size
    # crash: no flush, no close; indexes never reached the disk
    damage(segment_file)
    damaged_size = segment_file.stat().st_size
    with caplog.at_level(logging.WARNING):
        log = open_log(dir, recovery_point=0)
    kept = 20 - lost_batches
    assert log.log_end_offset == 2 * kept
    valid_end = ends[kept - 1]
    assert segment_file.stat().st_size == valid_end
    assert dropped_bytes(caplog) == damaged_size - valid_end
    assert damaged_size - valid_end >= (damaged_size - size_before)
    # rebuilt index equals the one built while appending (minus entries past the end)
    assert log.active_segment.offset_index.entries() == [e for e in reference if e[0] < 2 * kept]
    index_file = log.active_segment.offset_index.path
    log.flush()
    assert index_file.stat().st_size == 8 * len(log.active_segment.offset_index.entries())
    records = log.read(0, 1 << 20).records
    assert [h.base_offset for _, h in iter_batches(records)] == list(range(0, 2 * kept, 2))
    for offset in range(2 * kept):
        first = next(iter_batches(log.read(offset, 1).records))[1]
        assert first.base_offset <= offset <= first.last_offset
    info = log.append_as_leader(batch(), leader_epoch=1, now_ms=NOW)
    assert info.first_offset == 2 * kept


def test_corruption_in_an_older_segment_drops_later_segments(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dir = tmp_path / "events-0"
    one = len(batch())
    crashed, _ = write_batches(dir, 9, segment_bytes=3 * one)  # [0..5] [6..11] [12..17]
    files = [s.log_path for s in crashed.segments]
    assert len(files) == 3
    damage_flip_crc_byte_in_last_batch(files[1])
    total = sum(f.stat().st_size for f in files)
    with caplog.at_level(logging.WARNING):
        log = open_log(dir, recovery_point=3, segment_bytes=3 * one)
    assert log.log_end_offset == 10
    assert [s.base_offset for s in log.segments] == [0, 6]
    assert not files[2].exists()
    assert dropped_bytes(caplog) == total - log.size_in_bytes() == 4 * one


def test_segments_before_the_recovery_point_are_not_scanned(tmp_path: Path) -> None:
    dir = tmp_path / "events-0"
    one = len(batch())
    crashed, _ = write_batches(dir, 6, segment_bytes=2 * one)  # [0..3] [4..7] [8..11]
    crashed.flush()
    first = crashed.segments[0].log_path
    damage_flip_crc_byte_in_last_batch(first)  # silent corruption below the recovery point
    log = open_log(dir, recovery_point=8, segment_bytes=2 * one)
    assert log.log_end_offset == 12  # Kafka trusts flushed segments: nothing was cut


def test_clean_shutdown_skips_scanning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    dir = tmp_path / "events-0"
    log, _ = write_batches(dir, 10)
    log.flush()
    log.close()
    damage_flip_crc_byte_in_last_batch(log.active_segment.log_path)
    with caplog.at_level(logging.WARNING):
        reopened = open_log(dir, recovery_point=0, clean=True)
    assert reopened.log_end_offset == 20 and reopened.recovery_point == 20
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    reopened.close()
    # the same files after a crash are scanned and the bad batch is cut
    assert open_log(dir, recovery_point=0).log_end_offset == 18


def test_missing_index_is_rebuilt(tmp_path: Path) -> None:
    dir = tmp_path / "events-0"
    log, _ = write_batches(dir, 10)
    log.flush()
    log.close()
    entries = log.active_segment.offset_index.entries()
    assert entries
    log.active_segment.offset_index.path.unlink()
    reopened = open_log(dir, recovery_point=20, clean=True)
    assert reopened.active_segment.offset_index.entries() == entries
    assert reopened.log_end_offset == 20


def test_leader_epochs_recovered_from_batches(tmp_path: Path) -> None:
    dir = tmp_path / "events-0"
    log = open_log(dir)
    log.append_as_leader(batch(), leader_epoch=2, now_ms=NOW)
    log.append_as_leader(batch(), leader_epoch=5, now_ms=NOW)
    (dir / "leader-epoch-checkpoint").unlink(missing_ok=True)  # not written before a flush
    reopened = open_log(dir)
    assert reopened.leader_epoch_cache.entries() == [(2, 0), (5, 2)]


@pytest.mark.parametrize("shutdown_threads", [1, 4])  # num.recovery.threads.per.data.dir
def test_log_manager_round_trip(tmp_path: Path, shutdown_threads: int) -> None:
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    manager = LogManager(dirs, CONFIG, shutdown_threads_per_dir=shutdown_threads)
    manager.startup(NOW)
    names = [("my.topic", 0), ("my.topic", 1), ("a-b_c", 12), ("x", 3)]
    for topic, partition in names:
        lg = manager.get_or_create_log(topic, partition, CONFIG, NOW)
        for _ in range(partition + 1):
            lg.append_as_leader(batch(), leader_epoch=0, now_ms=NOW)
    assert manager.get_or_create_log("x", 3, CONFIG, NOW) is manager.get_log("x", 3)
    per_dir = [sorted(p.name for p in d.iterdir() if p.is_dir()) for d in dirs]
    assert sorted(map(len, per_dir)) == [2, 2]  # fewest-partitions placement
    assert manager.local_partitions_on_disk() == set(names)
    manager.shutdown()
    for d in dirs:
        assert (d / CLEAN_SHUTDOWN_FILE).exists()
        assert not list(d.glob("*.tmp"))
    recovery = OffsetCheckpointFile(dirs[0] / RECOVERY_POINT_CHECKPOINT).read()
    recovery.update(OffsetCheckpointFile(dirs[1] / RECOVERY_POINT_CHECKPOINT).read())
    assert recovery == {(t, p): 2 * (p + 1) for t, p in names}
    text = (dirs[0] / LOG_START_OFFSET_CHECKPOINT).read_text()
    assert text.startswith("0\n2\n")

    again = LogManager(dirs, CONFIG)
    again.startup(NOW)
    for d in dirs:
        assert not (d / CLEAN_SHUTDOWN_FILE).exists()
    assert {(lg.topic, lg.partition): lg.log_end_offset for lg in again.all_logs()} == recovery
    again.delete_log("a-b_c", 12)
    assert again.get_log("a-b_c", 12) is None
    assert not any((d / "a-b_c-12").exists() for d in dirs)
    assert again.cleanup_logs(NOW) == 0
    again.flush_dirty_logs()
    again.checkpoint()
    assert ("a-b_c", 12) not in OffsetCheckpointFile(dirs[0] / RECOVERY_POINT_CHECKPOINT).read()


def test_log_manager_unclean_start_recovers_from_checkpoint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = tmp_path / "logs"
    manager = LogManager([d], CONFIG)
    manager.startup(NOW)
    lg = manager.get_or_create_log("t", 0, CONFIG, NOW)
    for _ in range(3):
        lg.append_as_leader(batch(), leader_epoch=0, now_ms=NOW)
    manager.flush_dirty_logs()
    manager.checkpoint()
    lg.append_as_leader(batch(), leader_epoch=0, now_ms=NOW)
    damage_half_batch(lg.active_segment.log_path)
    (d / "stale-topic-0.123-delete").mkdir()
    (d / "not a partition").mkdir()
    # crash: no shutdown
    with caplog.at_level(logging.WARNING):
        after = LogManager([d], CONFIG)
        after.startup(NOW)
    recovered = after.get_log("t", 0)
    assert recovered is not None
    assert recovered.log_end_offset == 8 and recovered.recovery_point == 6
    assert dropped_bytes(caplog) == 40
    assert not (d / "stale-topic-0.123-delete").exists()
    assert after.local_partitions_on_disk() == {("t", 0)}
