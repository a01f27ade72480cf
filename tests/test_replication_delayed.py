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
from replog.replication.fetch_reader import FetchReader
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


class CountingReader(FetchReader):
    """The broker's ``FetchReader`` over a dict of partitions, counting its reads."""

    def __init__(self, partitions: dict[tuple[str, int], Partition]) -> None:
        super().__init__(
            lambda topic, partition: partitions.get((topic, partition)),
            lambda topic, partition: ErrorCode.unknown_topic_or_partition,
            lambda broker_id: True,
            lambda part, actions: None,
            lambda part, what, exc: None,
        )
        self.reads: list[str] = []

    def read_partition(self, replica_id, request, *args, **kwargs):
        self.reads.append(request.topic)
        return super().read_partition(replica_id, request, *args, **kwargs)


def test_after_a_long_poll_only_the_partitions_that_moved_are_read_again(tmp_path) -> None:
    """A consumer's long poll over two partitions: one gets a record and its high
    watermark moves during the wait. The answer carries its record and new HW; the
    other, which did not move, is not read a second time (its first read stands)."""

    async def go() -> None:
        t, u = leader(tmp_path, "t"), leader(tmp_path, "u")
        reader = CountingReader({("t", 0): t, ("u", 0): u})
        requests = [
            FetchPartitionRequest(name, 0, 0, 1 << 20, current_leader_epoch=EPOCH)
            for name in ("t", "u")
        ]
        fetch = asyncio.create_task(reader.fetch(-1, 60_000, 1, 1 << 20, requests))
        await asyncio.sleep(0)
        assert reader.reads == ["t", "u"] and not fetch.done()
        append(t)
        follower_fetch(t, 1)  # the HW passes the record: the consumer may read it
        results = await fetch
        assert reader.reads == ["t", "u", "t"]
        assert results[0].error is ErrorCode.none
        assert results[0].high_watermark == 1 and results[0].records
        assert results[1].error is ErrorCode.none
        assert results[1].high_watermark == 0 and not results[1].records

    asyncio.run(go())


def test_a_long_poll_that_times_out_with_nothing_moved_reads_once(tmp_path) -> None:
    """Nothing moved during the wait: the timeout answers the first read."""

    async def go() -> None:
        t = leader(tmp_path, "t")
        reader = CountingReader({("t", 0): t})
        request = FetchPartitionRequest("t", 0, 0, 1 << 20, current_leader_epoch=EPOCH)
        results = await reader.fetch(-1, 10, 1, 1 << 20, [request])
        assert reader.reads == ["t"]
        assert results[0].error is ErrorCode.none and results[0].high_watermark == 0

    asyncio.run(go())


def test_a_long_poll_answers_a_move_made_after_its_completion(tmp_path) -> None:
    """A partition that moves between the wait's completion and the waiting task's turn
    is read again too: its answer carries the move."""

    async def go() -> None:
        t, u = leader(tmp_path, "t"), leader(tmp_path, "u")
        reader = CountingReader({("t", 0): t, ("u", 0): u})
        requests = [
            FetchPartitionRequest(name, 0, 0, 1 << 20, current_leader_epoch=EPOCH)
            for name in ("t", "u")
        ]
        fetch = asyncio.create_task(reader.fetch(2, 60_000, 1, 1 << 20, requests))
        await asyncio.sleep(0)
        append(t)  # the follower's fetch may read t: completed
        append(u)  # in the same turn, before the fetch resumes
        results = await fetch
        assert sorted(reader.reads[2:]) == ["t", "u"]
        assert results[0].records and results[1].records

    asyncio.run(go())
