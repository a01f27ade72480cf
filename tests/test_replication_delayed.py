"""Delayed operations (``replog.replication.delayed_operations``) completed by the broker's
own ``Partition`` over a real log: the partition that owns the condition completes the
waiting operation when it moves (its high watermark, its log end, its role), and the
timeout answers what is left."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kio.schema.errors import ErrorCode

from replog.protocol.records import simple_batch
from replog.replication.delayed_operations import DelayedFetch, DelayedProduce, ProduceResult
from replog.replication.fetch_rules import FetchPartitionRequest
from replog.replication.machine import PartitionLeadership
from replog.replication.partition import Partition
from replog.storage.log import Log
from replog.storage.log_config import LogConfig

EPOCH = 5


def leader(tmp_path: Path, name: str = "t") -> Partition:
    """Broker 1 leading ``name``-0 at EPOCH, with broker 2 in the ISR."""
    log = Log.open(
        tmp_path / f"{name}-0",
        LogConfig(),
        recovery_point=0,
        log_start_offset=0,
        now_ms=0,
        clean_shutdown=True,
    )
    part = Partition(name, 0, 1, log, high_watermark=0, replica_lag_time_max_ms=10_000)
    code, _ = part.make_leader_or_follower(leadership(leader=1, epoch=EPOCH), 0)
    assert code is ErrorCode.none and part.is_leader
    return part


def leadership(*, leader: int, epoch: int) -> PartitionLeadership:
    return PartitionLeadership(leader, epoch, (1, 2), (1, 2), 0, 1)


def append(part: Partition) -> ProduceResult:
    error, info = part.append_as_leader(bytearray(simple_batch([b"v"])), acks=-1, now_ms=0)
    assert error is ErrorCode.none and info is not None
    return ProduceResult(
        ErrorCode.none, required_offset=info.last_offset + 1, leader_epoch=part.leader_epoch
    )


def follower_fetch(part: Partition, offset: int) -> None:
    request = FetchPartitionRequest(part.topic, 0, offset, 1 << 20, current_leader_epoch=EPOCH)
    decision, _ = part.fetch(2, request, 0, isr_eligible=True, replication_throttled=False)
    assert decision.error is ErrorCode.none


def test_an_acks_all_produce_completes_when_the_follower_fetch_moves_the_hw(tmp_path) -> None:
    async def go() -> None:
        part = leader(tmp_path)
        results = {("t", 0): append(part)}
        op = DelayedProduce(lambda t, p: part if (t, p) == ("t", 0) else None, results)
        waiting = asyncio.create_task(op.wait(op.partitions(), 60))
        await asyncio.sleep(0)  # let it register with the partition
        follower_fetch(part, 0)  # the follower has nothing yet: the HW stays
        assert not op.done
        follower_fetch(part, 1)  # it has the record: the HW passes it
        assert op.done and await waiting
        assert results[("t", 0)].error is ErrorCode.none

    asyncio.run(go())


def test_an_acks_all_produce_ends_with_its_leadership_or_its_timeout(tmp_path) -> None:
    async def go() -> None:
        part = leader(tmp_path)
        results = {("t", 0): append(part)}
        op = DelayedProduce(lambda t, p: part, results)
        waiting = asyncio.create_task(op.wait(op.partitions(), 60))
        await asyncio.sleep(0)
        part.make_leader_or_follower(leadership(leader=2, epoch=EPOCH + 1), 0)
        assert op.done and await waiting
        assert results[("t", 0)].error is ErrorCode.not_leader_or_follower

        other = leader(tmp_path, "u")
        results = {("u", 0): append(other)}
        op = DelayedProduce(lambda t, p: other, results)
        assert not await op.wait(op.partitions(), 0.01)  # nobody fetched
        assert results[("u", 0)].error is ErrorCode.request_timed_out

    asyncio.run(go())


def test_a_long_poll_waits_for_what_its_reader_may_read(tmp_path) -> None:
    """A follower's fetch waits for the log end to pass its offset; a consumer's for the
    high watermark; each is completed by the partition that moved, not by the other."""

    async def go() -> None:
        t, u = leader(tmp_path, "t"), leader(tmp_path, "u")
        follower = DelayedFetch(2, [(t, 0), (u, 0)])
        consumer = DelayedFetch(-1, [(t, 0)])
        waits = [asyncio.create_task(op.wait(op.partitions(), 60)) for op in (follower, consumer)]
        await asyncio.sleep(0)
        append(u)  # the log end moves: the follower's fetch has something to read
        assert follower.done and not consumer.done
        append(t)
        assert not consumer.done  # not below the high watermark yet
        follower_fetch(t, 1)
        assert consumer.done
        assert await asyncio.gather(*waits) == [True, True]

    asyncio.run(go())
