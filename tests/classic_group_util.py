"""A stand-in for the group coordinator's runtime, on a virtual clock, for the classic
group protocol's tests (``tests/test_classic_group*.py``).

Only the runtime is replaced (Kafka's ``MockCoordinatorTimer``, ``MockPartitionWriter``):
the shard's groups, its ``write`` (acks=all, here a list that can be made to fail or to
hang), its timers (fired only when the test advances the clock), and ``shard_for``. The
classic group service and state are the code that ships.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from replog.config import KafkaConfig
from replog.coordinator.group.classic_group_service import (
    ClassicGroupService,
    JoinRequest,
    JoinResult,
    SyncResult,
)
from replog.coordinator.group.group import Record
from replog.coordinator.group.offsets import OffsetStore

PROTOCOL_TYPE = "consumer"
INITIAL_DELAY_MS = 3000  # Kafka's default group.initial.rebalance.delay.ms
RANGE = [("range", b"range-metadata")]


def config(**settings: str) -> KafkaConfig:
    return KafkaConfig.from_properties(
        {
            "broker.id": "0",
            "zookeeper.connect": "127.0.0.1:1",
            "log.dirs": "/nonexistent",
            "group.initial.rebalance.delay.ms": str(INITIAL_DELAY_MS),
            "group.min.session.timeout.ms": "100",
            **settings,
        }
    )


class StandInShard:
    """GroupShard's interface with a virtual clock; timers fire in ``advance``."""

    def __init__(self, partition: int = 0) -> None:
        self.partition = partition
        self.groups: dict = {}
        self.offsets = OffsetStore()
        self.active = True
        self.log: list[Record] = []
        self.fail_with = ErrorCode.none
        self.gate: asyncio.Event | None = None  # set: writes wait for it
        self.clock = 0
        self._timers: dict[str, tuple[int, int, Callable[[], None]]] = {}
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return self.clock

    async def write(self, records: list[Record]) -> ErrorCode:
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_with != ErrorCode.none:
            return self.fail_with
        self.log += records
        return ErrorCode.none

    def schedule(self, key: str, delay_ms: int, callback: Callable[[], None]) -> None:
        if self.active:
            self._timers[key] = (self.clock + max(delay_ms, 0), next(self._seq), callback)

    def scheduled(self, key: str) -> bool:
        return key in self._timers

    def cancel(self, key: str) -> None:
        self._timers.pop(key, None)

    def timer(self, key: str) -> int | None:
        """When the timer under ``key`` fires (None: none is set)."""
        entry = self._timers.get(key)
        return None if entry is None else entry[0]

    def timer_keys(self) -> set[str]:
        return set(self._timers)

    def fire_due(self) -> bool:
        due = [(t, s, k) for k, (t, s, _) in self._timers.items() if t <= self.clock]
        if not due:
            return False
        heapq.heapify(due)
        _, _, key = due[0]
        _, _, callback = self._timers.pop(key)
        callback()
        return True

    def next_due(self) -> int | None:
        return min((t for t, _, _ in self._timers.values()), default=None)


class StandInCoordinator:
    def __init__(self, shard: StandInShard, cfg: KafkaConfig) -> None:
        self.shard = shard
        self.config = cfg
        self.listeners: list = []
        self.error = ErrorCode.none

    def shard_for(self, group_id: str):
        if self.error != ErrorCode.none:
            return self.error, None
        return ErrorCode.none, self.shard


@dataclass
class Harness:
    """One group coordinator shard and the classic service on a virtual clock."""

    shard: StandInShard
    coordinator: StandInCoordinator
    service: ClassicGroupService
    tasks: list[asyncio.Task] = field(default_factory=list)  # the requests sent
    created: list[asyncio.Task] = field(default_factory=list)  # every task of the loop

    @classmethod
    def make(cls, **settings: str) -> Harness:
        shard = StandInShard()
        coordinator = StandInCoordinator(shard, config(**settings))
        return cls(shard, coordinator, ClassicGroupService(coordinator))

    def record_tasks(self) -> None:
        """Keep every task the loop creates from now on (the service's background
        writes included), so that ``settle`` sees their errors."""
        loop = asyncio.get_running_loop()

        def factory(loop, coro, **kwargs):
            task = asyncio.Task(coro, loop=loop, **kwargs)
            self.created.append(task)
            return task

        loop.set_task_factory(factory)

    async def settle(self) -> None:
        """Let every runnable task run, and every timer due now fire, until nothing
        changes (a timer of 0 ms fires here, as ``loop.call_later(0)`` would). A task
        that raised (the service's own background writes too) fails the test here."""
        for _ in range(1000):
            for _ in range(20):
                await asyncio.sleep(0)
            self.raise_task_errors()
            if not self.shard.fire_due():
                return
        raise AssertionError("timers keep firing at the same instant")

    def raise_task_errors(self) -> None:
        for task in self.created:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()

    async def advance(self, ms: int) -> None:
        """Move the clock ``ms`` forward, firing timers in order as they fall due."""
        target = self.shard.clock + ms
        await self.settle()
        while True:
            due = self.shard.next_due()
            if due is None or due > target:
                break
            self.shard.clock = max(self.shard.clock, due)
            await self.settle()
        self.shard.clock = target
        await self.settle()

    def join(
        self,
        member_id: str = "",
        *,
        group: str = "g",
        instance: str | None = None,
        client_id: str = "client",
        protocols: list[tuple[str, bytes]] | None = None,
        protocol_type: str = PROTOCOL_TYPE,
        session_ms: int = 10_000,
        rebalance_ms: int = 30_000,
        require_known_member_id: bool = True,
        api_version: int = 5,
    ) -> asyncio.Task[JoinResult]:
        request = JoinRequest(
            group_id=group,
            member_id=member_id,
            group_instance_id=instance,
            client_id=client_id,
            client_host="/127.0.0.1",
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms,
            protocol_type=protocol_type,
            protocols=list(RANGE if protocols is None else protocols),
            require_known_member_id=require_known_member_id,
            api_version=api_version,
        )
        task = asyncio.get_running_loop().create_task(self.service.join_group(request))
        self.tasks.append(task)
        return task

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        group: str = "g",
        instance: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> asyncio.Task[SyncResult]:
        task = asyncio.get_running_loop().create_task(
            self.service.sync_group(
                group,
                generation,
                member_id,
                instance,
                protocol_type,
                protocol_name,
                assignments or {},
            )
        )
        self.tasks.append(task)
        return task

    def heartbeat(
        self, member_id: str, generation: int, *, group: str = "g", instance: str | None = None
    ) -> ErrorCode:
        return self.service.heartbeat(group, generation, member_id, instance)

    def leave(
        self, *members: tuple[str, str | None], group: str = "g"
    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        return self.service.leave_group(group, list(members))

    async def join_dynamic(self, **kwargs) -> asyncio.Task[JoinResult]:
        """KIP-394's two steps: MEMBER_ID_REQUIRED, then the join with the given id
        (the returned task is the second JoinGroup, maybe still parked)."""
        first = self.join(**kwargs)
        await self.settle()
        answer = first.result()
        assert answer.error == ErrorCode.member_id_required, answer
        task = self.join(answer.member_id, **kwargs)
        await self.settle()
        return task

    async def until_done(self, *tasks: asyncio.Task, limit_ms: int = 600_000, step_ms: int = 100):
        """Advance the clock in steps until every task is answered; their results."""
        waited = 0
        await self.settle()
        while not all(t.done() for t in tasks):
            assert waited < limit_ms, "still parked"
            await self.advance(step_ms)
            waited += step_ms
        return [t.result() for t in tasks]

    async def join_dynamic_or_error(self, **kwargs) -> JoinResult:
        """As ``join_dynamic``, answering the first JoinGroup's error if it is not
        MEMBER_ID_REQUIRED, else the second's."""
        first = self.join(**kwargs)
        await self.settle()
        answer = first.result()
        if answer.error != ErrorCode.member_id_required:
            return answer
        second = self.join(answer.member_id, **kwargs)
        await self.settle()
        return second.result()

    async def stable_group(self, count: int, **kwargs) -> list[JoinResult]:
        """``count`` dynamic members joined a new group within its initial delay and
        synced: the group is Stable; each member's assignment is
        ``<member id>@<generation>``."""
        tasks = [await self.join_dynamic(**kwargs) for _ in range(count)]
        answers = await self.until_done(*tasks)
        await self.sync_all(answers)
        return answers

    async def sync_all(self, answers: list[JoinResult], group: str = "g") -> list[SyncResult]:
        leader = next(a for a in answers if a.member_id == a.leader_id)
        plan = {m: assignment_of(m, leader.generation_id) for m, _, _ in leader.members}
        syncs = [
            self.sync(a.member_id, a.generation_id, plan if a is leader else None, group=group)
            for a in answers
        ]
        await self.settle()
        return [s.result() for s in syncs]


def assignment_of(member_id: str, generation: int) -> bytes:
    return f"{member_id}@{generation}".encode()


def run(coro_fn: Callable[[Harness], object], **settings: str) -> None:
    """Run ``coro_fn(harness)`` on a fresh harness and event loop."""

    async def main() -> None:
        harness = Harness.make(**settings)
        harness.record_tasks()
        try:
            await coro_fn(harness)
        finally:
            for task in harness.created:
                task.cancel()

    asyncio.run(main())
