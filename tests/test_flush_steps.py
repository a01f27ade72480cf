"""The minute's flush in steps: the broker's event loop serves requests between logs.

After a LeaderAndIsr for thousands of partitions each has a leader epoch checkpoint to
write durably (two fsyncs). ``LogManager.flush_dirty_log_steps`` yields after each log
it flushed, and ``Broker._flush_dirty_logs`` gives the loop back every
``FLUSH_SLICE_S``; before, the whole flush held the loop (5 s for 3,333 partitions).
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from replog.config import KafkaConfig
from replog.protocol.records import simple_batch
from replog.server import broker as broker_module
from replog.server.broker import Broker
from replog.storage.checkpoints import read_checkpoint_lines
from replog.storage.log_config import LogConfig
from replog.storage.log_manager import LogManager

NOW = 1_700_000_000_000
CONFIG = LogConfig()


def manager_with_logs(tmp_path: Path, count: int) -> LogManager:
    manager = LogManager([tmp_path / "logs"], CONFIG)
    manager.startup(NOW)
    for p in range(count):
        manager.get_or_create_log("t", p, CONFIG, NOW)
    manager.flush_dirty_logs()
    return manager


def test_steps_yield_once_per_dirty_log_and_leave_every_log_flushed(tmp_path: Path) -> None:
    manager = manager_with_logs(tmp_path, 6)
    logs = {p: manager.get_log("t", p) for p in range(6)}
    for p in (0, 2, 4):
        logs[p].leader_epoch_cache.assign(3, 0)  # a LeaderAndIsr's new epoch
    logs[5].append_as_leader(
        bytearray(simple_batch([b"v"], timestamp=NOW)), leader_epoch=3, now_ms=NOW
    )
    assert logs[5].recovery_point == 0 and logs[5].log_end_offset == 1

    steps = sum(1 for _ in manager.flush_dirty_log_steps())

    assert steps == 4  # logs 0, 2, 4 (epochs) and 5 (data); 1 and 3 had nothing to flush
    assert logs[5].recovery_point == 1
    for p in (0, 2, 4, 5):
        assert not logs[p].leader_epoch_cache.dirty
        assert read_checkpoint_lines(logs[p].dir / "leader-epoch-checkpoint") == [["3", "0"]]


def test_steps_stopped_early_leave_the_rest_for_the_next_flush(tmp_path: Path) -> None:
    manager = manager_with_logs(tmp_path, 4)
    logs = [manager.get_log("t", p) for p in range(4)]
    for lg in logs:
        lg.leader_epoch_cache.assign(1, 0)
        assert manager.assign_topic_id("t", lg.partition, uuid.uuid4())
    steps = manager.flush_dirty_log_steps()
    next(steps)
    steps.close()  # the broker stopped between two steps
    assert [lg.leader_epoch_cache.dirty for lg in logs] == [False, True, True, True]
    assert len(manager._unflushed_topic_ids) == 4

    manager.flush_dirty_logs()
    assert not any(lg.leader_epoch_cache.dirty for lg in logs)
    assert manager._unflushed_topic_ids == set()


def test_a_log_deleted_between_steps_is_skipped(tmp_path: Path) -> None:
    manager = manager_with_logs(tmp_path, 3)
    for p in range(3):
        manager.get_log("t", p).leader_epoch_cache.assign(2, 0)
    steps = manager.flush_dirty_log_steps()
    next(steps)
    manager.delete_log("t", 1)  # a StopReplica with delete, served between two steps
    rest = sum(1 for _ in steps)
    assert rest == 1
    assert manager.get_log("t", 1) is None
    assert not manager.get_log("t", 2).leader_epoch_cache.dirty


def test_the_broker_serves_its_event_loop_between_flush_slices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a zero slice, another task runs between every two logs the flush writes;
    a flush that held the loop would let it run only after the last."""
    config = KafkaConfig.from_properties(
        {
            "broker.id": "0",
            "log.dirs": str(tmp_path / "logs"),
            "zookeeper.connect": "127.0.0.1:1",  # never connected: start() is not called
        }
    )
    broker = Broker(config)
    broker.log_manager.startup(NOW)
    for p in range(20):
        lg = broker.log_manager.get_or_create_log("t", p, CONFIG, NOW)
        lg.leader_epoch_cache.assign(1, 0)
    monkeypatch.setattr(broker_module, "FLUSH_SLICE_S", 0.0)

    async def run() -> tuple[int, int]:
        ticks = 0
        done = False

        async def ticker() -> None:
            nonlocal ticks
            while not done:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        before = ticks
        await broker._flush_dirty_logs()
        during = ticks - before
        done = True
        await task
        return during, sum(lg.leader_epoch_cache.dirty for lg in broker.log_manager.all_logs())

    during, still_dirty = asyncio.run(run())
    assert still_dirty == 0
    assert during >= 19
