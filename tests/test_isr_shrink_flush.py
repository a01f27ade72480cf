"""A leader whose ISR shrinks below ``min.insync.replicas`` becomes the only replica
holding its acknowledged records: it makes them durable (fsync, then its dir's recovery
point checkpoint) before the ISR write is even started, and so does a broker the
controller makes leader with such an ISR (the others died), so an OS crash of the last ISR
member cannot take acknowledged records with it. Found by the fault campaign (seed 14):
a follower cut off for longer than ``replica.lag.time.max.ms`` left the ISR, then the
leader crashed with its unflushed tail lost, came back as the only ISR member, and the
followers truncated to it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from replog.common.clock import now_ms
from replog.config import KafkaConfig
from replog.protocol.records import simple_batch
from replog.replication.actions import PartitionLeadership
from replog.replication.fetch_rules import FetchPartitionRequest
from replog.replication.replica_manager import ReplicaManager
from replog.storage.checkpoints import RECOVERY_POINT_CHECKPOINT, OffsetCheckpointFile
from replog.storage.log_config import LogConfig
from replog.storage.log_manager import LogManager

LAG_MS = 3_000


def recovery_points(log_dir: Path) -> dict:
    path = log_dir / RECOVERY_POINT_CHECKPOINT
    return OffsetCheckpointFile(path).read() if path.exists() else {}


def leading_with_three_records(tmp_path: Path, min_isr: int) -> tuple[LogManager, ReplicaManager]:
    """Broker 1 leading t-0 with ISR [1, 2] and three records appended, nothing flushed."""
    config = KafkaConfig.from_properties(
        {
            "zookeeper.connect": "127.0.0.1:1",
            "broker.id": "1",
            "log.dirs": str(tmp_path),
            "replica.lag.time.max.ms": str(LAG_MS),
        }
    )
    manager = LogManager([tmp_path], LogConfig())
    manager.startup(0)
    topic_config = LogConfig(min_insync_replicas=min_isr)
    # No ZooKeeper: the tests look before an ISR write would start, and cancel it.
    rm = ReplicaManager(config, manager, lambda _t: topic_config, zk=None)  # type: ignore[arg-type]
    state = PartitionLeadership(1, 1, (1, 2), (1, 2), 0, 1)
    assert rm.become_leader_or_follower("t", 0, state, live_leaders={}, is_new=True) is (
        ErrorCode.none
    )
    part = rm.partitions[("t", 0)]
    for _ in range(3):
        error, _info = part.append_as_leader(bytearray(simple_batch([b"v"])), acks=-1, now_ms=0)
        assert error is ErrorCode.none
    assert recovery_points(tmp_path).get(("t", 0), 0) == 0
    return manager, rm


@pytest.mark.parametrize("min_isr, flushed", [(2, True), (1, False)])
def test_a_shrink_below_min_isr_flushes_first(tmp_path: Path, min_isr: int, flushed: bool) -> None:
    async def go() -> None:
        manager, rm = leading_with_three_records(tmp_path, min_isr)
        part = rm.partitions[("t", 0)]
        request = FetchPartitionRequest("t", 0, 3, 1 << 20, current_leader_epoch=1)
        fetched_at = now_ms()
        part.fetch(2, request, fetched_at, isr_eligible=True, replication_throttled=False)
        assert part.high_watermark == 3  # acknowledged by both replicas
        error, _info = part.append_as_leader(bytearray(simple_batch([b"w"])), acks=-1, now_ms=0)
        assert error is ErrorCode.none  # one more the follower never gets: it falls behind

        rm.maybe_shrink_isr(fetched_at + 10 * LAG_MS)  # follower 2 silent for longer than the lag

        assert len(rm.isr_writer._tasks) == 1  # the ISR write was submitted
        assert (recovery_points(tmp_path).get(("t", 0), 0) == 4) is flushed  # the log end
        for task in list(rm.isr_writer._tasks):
            task.cancel()
        await asyncio.gather(*rm.isr_writer._tasks, return_exceptions=True)
        manager.shutdown()

    asyncio.run(go())


@pytest.mark.parametrize("min_isr, flushed", [(2, True), (1, False)])
def test_leading_with_an_isr_below_min_isr_flushes(
    tmp_path: Path, min_isr: int, flushed: bool
) -> None:
    manager, rm = leading_with_three_records(tmp_path, min_isr)
    alone = PartitionLeadership(1, 2, (1,), (1, 2), 1, 2)  # broker 2 died: the controller's ISR
    assert rm.become_leader_or_follower("t", 0, alone, live_leaders={}) is ErrorCode.none
    assert (recovery_points(tmp_path).get(("t", 0), 0) == 3) is flushed
    manager.shutdown()
