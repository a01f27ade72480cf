"""A kill at any point of a cleaning or of its swap loses nothing: the log loaded
afterwards holds every record the finished cleaning keeps, nothing it did not have, the
same latest record of every key and the same log end offset, and no ``.cleaned`` or
``.swap`` file is left.

The kill is real: a forked child runs the cleaner on a copy of the log and ``_exit``s
just before its n-th rename, unlink or fsync, for every n until it finishes. Two
states no kill of replog's own order produces (a ``.swap`` log already renamed while its
indexes are not, a torn ``.cleaned`` file) are made by hand.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from replog.storage.log import Log
from replog.storage.segment import CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX, segment_paths
from test_log_cleaner import Harness, open_log, read_all, write

NOW = 1_700_000_000_000


def make_dirty_log(root: Path) -> Path:
    """Three closed segments of updates and a tombstone, one active segment; closed."""
    log = open_log(root, segment_bytes=1 << 20, min_cleanable_dirty_ratio=0.01)
    for segment in range(3):
        for i in range(40):
            key = b"key-%d" % (i % 7)
            write(log, key, None if (segment, i) == (1, 3) else b"v-%d-%d" % (segment, i))
        write(log, b"only-in-%d" % segment, b"x")
        log.roll(NOW)
    write(log, b"key-1", b"active")
    log.close()
    return log.dir


def load(dir: Path) -> Log:
    log = open_log(dir.parent, segment_bytes=1 << 20, min_cleanable_dirty_ratio=0.01)
    assert log.dir == dir
    return log


def clean_copy(template: Path, dest_root: Path) -> Log:
    shutil.copytree(template, dest_root / template.name)
    log = load(dest_root / template.name)
    log.update_high_watermark(log.log_end_offset)
    return log


def check_nothing_lost(log: Log, original: list, cleaned: list) -> None:
    records = read_all(log)
    assert set(records) <= set(original)  # nothing invented
    assert set(cleaned) <= set(records)  # nothing the cleaning keeps is lost
    assert {k: (o, v) for o, k, v in records} == {k: (o, v) for o, k, v in original}
    assert log.log_end_offset == original[-1][0] + 1
    leftovers = [p.name for p in log.dir.iterdir() if p.name.endswith((".cleaned", ".swap"))]
    assert not leftovers


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> tuple[Path, list, list]:
    root = tmp_path_factory.mktemp("dirty")
    dir = make_dirty_log(root)
    original = read_all(load(dir))
    done = clean_copy(dir, tmp_path_factory.mktemp("cleaned"))
    assert Harness(done).clean()
    cleaned = read_all(done)
    assert len(cleaned) < len(original)
    return dir, original, cleaned


def _clean_until_op(dir: Path, step: int) -> None:
    """In the child: clean the log, ``_exit(9)`` just before file operation ``step``."""
    log = load(dir)
    log.update_high_watermark(log.log_end_offset)
    count = [0]

    def counted(real):
        def op(*args, **kwargs):
            if count[0] == step:
                os._exit(9)
            count[0] += 1
            return real(*args, **kwargs)

        return op

    os.replace = counted(os.replace)
    os.unlink = counted(os.unlink)
    os.fsync = counted(os.fsync)
    Harness(log).clean()
    os._exit(0)


def test_a_kill_at_any_file_operation_of_a_cleaning_loses_nothing(template, tmp_path: Path) -> None:
    dir, original, cleaned = template
    step = 0
    while True:
        root = tmp_path / f"step-{step}"
        root.mkdir()
        shutil.copytree(dir, root / dir.name)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                _clean_until_op(root / dir.name, step)
            finally:
                os._exit(3)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        assert code in (0, 9), f"child failed at step {step} with {code}"
        check_nothing_lost(load(root / dir.name), original, cleaned)
        if code == 0:
            break
        step += 1
        assert step < 200
    assert step > 10  # the swap's renames, unlinks and fsyncs were all crash points


def test_a_torn_cleaned_file_is_dropped(template, tmp_path: Path) -> None:
    dir, original, cleaned = template
    copy = tmp_path / dir.name
    shutil.copytree(dir, copy)
    for path in segment_paths(copy, 0, CLEANED_FILE_SUFFIX):
        path.write_bytes(b"\x00" * 100)
    log = load(copy)
    assert read_all(log) == original
    check_nothing_lost(log, original, cleaned)


def test_a_swap_log_renamed_before_its_indexes_is_completed(template, tmp_path: Path) -> None:
    """The cleaned segment's log already live, its indexes still ``.swap``, the old
    segments it replaced deleted: the indexes are rebuilt."""
    dir, original, cleaned = template
    done = clean_copy(dir, tmp_path / "done")
    assert Harness(done).clean()
    done.close()
    bases = sorted(int(p.name[:20]) for p in done.dir.glob("*.log"))
    for path in segment_paths(done.dir, bases[0])[1:]:
        os.replace(path, path.with_name(path.name + SWAP_FILE_SUFFIX))
    check_nothing_lost(load(done.dir), original, cleaned)
