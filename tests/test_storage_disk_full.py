"""A full disk under a log: the append that does not fit is refused with
KAFKA_STORAGE_ERROR, nothing written before it is lost or damaged (also after reopening
the log, as a restart would), and appends succeed again once there is room.

The log lives on a real, small tmpfs mounted for the test (root is needed; otherwise the
test is skipped with the reason) and unmounted in a ``finally``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from disk_util import small_tmpfs
from replog.protocol.errors import error_code_for
from replog.protocol.records import iter_batches, simple_batch
from replog.storage.log import Log
from replog.storage.log_config import LogConfig

NOW = 1_700_000_000_000
SIZE_KB = 512


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path, f"{SIZE_KB}k") as mount:
        yield mount


def open_log(directory: Path) -> Log:
    return Log.open(
        directory / "full-0",
        LogConfig(segment_bytes=1 << 20),
        recovery_point=0,
        log_start_offset=0,
        now_ms=NOW,
        clean_shutdown=False,
    )


def record_batch(i: int) -> bytearray:
    return bytearray(simple_batch([f"record-{i:05d}-".encode() + b"x" * 900], timestamp=NOW))


def read_all(log: Log) -> list[tuple[int, int]]:
    data = log.read(0, 1 << 24).records
    return [(h.base_offset, h.size) for _, h in iter_batches(data)]


def test_a_full_disk_refuses_the_append_and_damages_nothing(small_disk: Path) -> None:
    filler = small_disk / "filler"  # other data on the disk, deleted later to make room
    filler.write_bytes(b"f" * 64 * 1024)
    log = open_log(small_disk)
    acked: list[int] = []
    failure: OSError | None = None
    for i in range(2000):  # ~1 KB each: the 512 KB disk fills long before
        try:
            acked.append(
                log.append_as_leader(record_batch(i), leader_epoch=0, now_ms=NOW).first_offset
            )
        except OSError as exc:
            failure = exc
            break
    assert failure is not None, "the disk never filled"
    assert error_code_for(failure) == ErrorCode.kafka_storage_error
    assert acked == list(range(len(acked))) and log.log_end_offset == len(acked)
    segment = log.active_segment
    assert os.fstat(segment.fd).st_size == segment.size, "a partial batch was left behind"
    before = read_all(log)
    assert [offset for offset, _ in before] == acked

    # Still full: refused again, still nothing damaged.
    with pytest.raises(OSError):
        log.append_as_leader(record_batch(9999), leader_epoch=0, now_ms=NOW)
    assert read_all(log) == before

    # A crash now and a restart (recovery of the unflushed log) read back exactly what
    # was acknowledged. (A clean close would need room for its checkpoints.)
    crashed, log = log, open_log(small_disk)
    assert read_all(log) == before and log.log_end_offset == len(acked)
    del crashed

    # Room again: appends go on at the next offset.
    filler.unlink()
    resumed = log.append_as_leader(record_batch(10_000), leader_epoch=0, now_ms=NOW)
    assert resumed.first_offset == len(acked)
    assert [offset for offset, _ in read_all(log)] == [*acked, len(acked)]
    log.close()
