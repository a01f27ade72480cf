"""The log cleaner as the broker runs it: a ``LogManager`` on an asyncio loop, a cleaner
thread handing its calls to the loop (``LoopOwner``) and a real worker process doing the
cleaning, while the loop keeps appending; a killed worker is replaced."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

from replog.storage.cleaner_threads import CleanerConfig, LoopOwner
from replog.storage.log_config import LogConfig
from replog.storage.log_manager import LogManager
from test_log_cleaner import read_all, write

NOW = 1_700_000_000_000
COMPACTED = LogConfig(
    cleanup_policy="compact", segment_bytes=64 * 1024, min_cleanable_dirty_ratio=0.1
)


async def wait_for(condition, timeout_s: float = 30, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)
    return value


def fill(log, rounds: int, keys: int, tag: str) -> dict[bytes, bytes]:
    latest = {}
    for r in range(rounds):
        for k in range(keys):
            key, value = b"key-%04d" % k, f"{tag}-{r}-{k}".encode().ljust(100, b".")
            write(log, key, value)
            latest[key] = value
    log.roll(NOW)
    log.update_high_watermark(log.log_end_offset)
    return latest


def test_the_cleaner_process_cleans_while_the_loop_appends(tmp_path: Path) -> None:
    async def main() -> None:
        manager = LogManager([tmp_path], LogConfig(), CleanerConfig(backoff_ms=50, num_threads=1))
        manager.startup(NOW)
        log = manager.get_or_create_log("table", 0, COMPACTED, NOW)
        other = manager.get_or_create_log("table", 1, COMPACTED, NOW)
        latest = fill(log, rounds=20, keys=200, tag="a")
        manager.start_cleaner(LoopOwner(asyncio.get_running_loop()))
        assert manager.cleaner is not None
        cleaner = manager.cleaner.manager
        try:
            # Appends go on meanwhile, on the loop, to this log and another one.
            for i in range(20):
                write(other, b"other-%d" % (i % 3), b"x")
                await asyncio.sleep(0.01)
            await wait_for(lambda: cleaner.checkpointed_offset(("table", 0)), what="a cleaning")
            records = read_all(log)
            assert {k: v for _, k, v in records} == latest
            assert len(records) == 200
            assert not list(log.dir.glob("*.cleaned*"))
        finally:
            await asyncio.to_thread(manager.stop_cleaner)
            manager.shutdown()
        assert manager.cleaner is None

    asyncio.run(main())


def test_a_killed_worker_is_replaced_and_its_cleaning_redone(tmp_path: Path) -> None:
    async def main() -> None:
        config = CleanerConfig(backoff_ms=50, num_threads=1, max_io_bytes_per_second=2e6)
        manager = LogManager([tmp_path], LogConfig(), config)
        manager.startup(NOW)
        log = manager.get_or_create_log("table", 0, COMPACTED, NOW)
        latest = fill(log, rounds=20, keys=1000, tag="b")  # ~3 MB: over a second throttled
        manager.start_cleaner(LoopOwner(asyncio.get_running_loop()))
        assert manager.cleaner is not None
        thread = manager.cleaner.threads[0]
        try:
            proc = await wait_for(lambda: thread.runner._proc, what="the worker")
            await asyncio.sleep(0.5)
            os.kill(proc.pid, signal.SIGKILL)
            await wait_for(
                lambda: manager.cleaner.manager.checkpointed_offset(("table", 0)),
                timeout_s=60,
                what="a cleaning by a new worker",
            )
            assert thread.runner._proc is not proc
            assert {k: v for _, k, v in read_all(log)} == latest
            assert len(read_all(log)) == 1000
        finally:
            await asyncio.to_thread(manager.stop_cleaner)
            manager.shutdown()

    asyncio.run(main())
