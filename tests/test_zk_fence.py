"""``ZkSessionFence``: when a broker cut off from ZooKeeper stops leading. Driven with a
loop whose timers the test fires itself, so the order of events is exact."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from replog.server.zk_fence import ZkSessionFence
from replog.zk.ops import ZkSessionState

TIMEOUT_S = 6.0


class Timer:
    def __init__(self, delay: float, callback: Callable[..., None], args: tuple) -> None:
        self.delay, self.callback, self.args = delay, callback, args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Loop:
    """The three loop methods the fence uses; timers fire when the test says."""

    def __init__(self) -> None:
        self.timers: list[Timer] = []
        self.tasks: list[Any] = []

    def call_later(self, delay: float, callback: Callable[..., None], *args: Any) -> Timer:
        timer = Timer(delay, callback, args)
        self.timers.append(timer)
        return timer

    def call_soon_threadsafe(self, callback: Callable[..., None], *args: Any) -> None:
        callback(*args)

    def create_task(self, coroutine: Any) -> None:
        self.tasks.append(coroutine)
        asyncio.run(coroutine)

    def is_closed(self) -> bool:
        return False

    def fire(self) -> int:
        """Run the pending timers; how many ran."""
        due = [t for t in self.timers if not t.cancelled]
        self.timers = []
        for t in due:
            t.callback(*t.args)
        return len(due)


class Broker:
    def __init__(self) -> None:
        self.fences = 0
        self.rejoins = 0

    def fence(self) -> None:
        self.fences += 1

    async def rejoin(self) -> None:
        self.rejoins += 1


def make() -> tuple[ZkSessionFence, Loop, Broker]:
    loop, broker = Loop(), Broker()
    fence = ZkSessionFence(loop, TIMEOUT_S, broker.fence, broker.rejoin)  # type: ignore[arg-type]
    return fence, loop, broker


def test_a_connection_gone_for_a_session_timeout_fences_once() -> None:
    fence, loop, broker = make()
    fence.on_state(ZkSessionState.SUSPENDED)  # (from kazoo's thread)
    assert [t.delay for t in loop.timers] == [TIMEOUT_S] and broker.fences == 0
    fence.handle(ZkSessionState.SUSPENDED)  # a second report starts no second timer
    assert loop.fire() == 1
    assert broker.fences == 1 and fence.fenced
    fence.handle(ZkSessionState.SUSPENDED)
    assert loop.fire() == 0 and broker.fences == 1


def test_a_connection_back_in_time_does_not_fence() -> None:
    fence, loop, broker = make()
    fence.handle(ZkSessionState.SUSPENDED)
    fence.handle(ZkSessionState.CONNECTED)
    assert loop.fire() == 0
    assert (broker.fences, broker.rejoins, fence.fenced) == (0, 0, False)


def test_a_lost_session_fences_at_once_and_a_new_one_ends_the_fence() -> None:
    fence, loop, broker = make()
    fence.handle(ZkSessionState.SUSPENDED)
    fence.handle(ZkSessionState.LOST)
    assert broker.fences == 1 and loop.fire() == 0  # the timer went with it
    fence.handle(ZkSessionState.NEW_SESSION)
    assert not fence.fenced and broker.rejoins == 0  # registering again is the broker's
    fence.handle(ZkSessionState.SUSPENDED)  # a second cut fences again
    assert loop.fire() == 1 and broker.fences == 2


def test_a_session_that_outlived_the_fence_registers_again() -> None:
    fence, loop, broker = make()
    fence.handle(ZkSessionState.SUSPENDED)
    loop.fire()
    fence.handle(ZkSessionState.CONNECTED)  # the same session: ZooKeeper's clock ran slow
    assert (broker.fences, broker.rejoins, fence.fenced) == (1, 1, False)


def test_closing_ignores_what_the_client_reports_on_its_way_out() -> None:
    fence, loop, broker = make()
    fence.handle(ZkSessionState.SUSPENDED)
    fence.close()
    fence.handle(ZkSessionState.LOST)
    assert loop.fire() == 0 and broker.fences == 0
