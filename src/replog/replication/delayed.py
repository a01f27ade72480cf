"""Delayed operations (Kafka's ``DelayedOperation`` and purgatory), on asyncio futures.

A request that must wait for a condition of some partitions (an acks=all produce
for the high watermark, a long-poll fetch for data, a DeleteRecords for the low
watermark) is one small object whose ``try_complete`` asks the partitions'
machines whether the condition holds. It is watched by each partition it waits
on (``WatchList``, one per partition); the partition, which owns what the
condition reads, tries its watchers whenever that moves (its high watermark,
its log end, its log start, a follower's log start, its role). Nothing polls:
the waiting task resumes straight from the future's ``set_result``, or from the
timeout (``on_expiration``). The concrete operations are in
``delayed_operations``.

Concurrency: event-loop only; ``try_complete`` never awaits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Protocol


class Watchable(Protocol):
    """What an operation waits on: a partition (or its ``WatchList``)."""

    def watch(self, operation: DelayedOperation) -> None: ...


class DelayedOperation:
    """Kafka ``DelayedOperation``: ``wait`` until ``try_complete`` succeeds or time is up.

    Subclasses define ``ready`` (the condition, asked of the partitions, settling
    what it can) and may define ``on_expiration`` (the timeout's answer).
    ``ready(changed)`` is told which watched partition moved (None: look at all of
    them): what it reads of the others has not moved since it last looked, since
    their moves try it too, so it need only look at that one.
    """

    __slots__ = ("_future", "done")

    def __init__(self) -> None:
        self._future: asyncio.Future[bool] | None = None
        self.done = False  # completed, or expired: no watch list needs to keep it

    def ready(self, changed: Watchable | None) -> bool:
        raise NotImplementedError

    def on_expiration(self) -> None:
        """Time ran out: the answer for what is still pending (default: nothing)."""

    def try_complete(self, changed: Watchable | None = None) -> bool:
        """Complete the operation if its condition holds now (``changed``: the watched
        partition that moved, None for all); whether it is done."""
        if self.done:
            return True
        if not self.ready(changed):
            return False
        self.done = True
        if self._future is not None and not self._future.done():
            self._future.set_result(True)
        return True

    def _expire(self) -> None:
        if self.done:
            return
        self.done = True
        self.on_expiration()
        if self._future is not None and not self._future.done():
            self._future.set_result(False)

    async def wait(self, watched: Iterable[Watchable], timeout_s: float) -> bool:
        """Complete now, or be watched by ``watched`` until complete (True) or
        ``timeout_s`` passes (False, after ``on_expiration``)."""
        if self.try_complete():
            return True
        loop = asyncio.get_running_loop()
        self._future = loop.create_future()
        for partition in watched:
            partition.watch(self)
        handle = loop.call_later(max(timeout_s, 0), self._expire)
        try:
            return await self._future
        finally:
            handle.cancel()
            if not self.done:  # the waiting task was cancelled
                self.done = True


class WatchList:
    """The delayed operations waiting on one partition, ``owner`` (Kafka's ``WatcherList``)."""

    __slots__ = ("_operations", "_owner", "_compact_at")

    def __init__(self, owner: Watchable) -> None:
        self._owner = owner
        self._operations: list[DelayedOperation] = []
        self._compact_at = 64

    def watch(self, operation: DelayedOperation) -> None:
        operations = self._operations
        if len(operations) >= self._compact_at:
            # Those done (expired: completed ones left at try_complete_all) are dropped
            # once the list doubled since: amortized O(1) a watch, where dropping them at
            # every watch past 64 cost O(waiters) each (many long polls on one partition).
            operations = self._operations = [op for op in operations if not op.done]
            self._compact_at = max(64, 2 * len(operations))
        operations.append(operation)

    def try_complete_all(self) -> None:
        """Something the watchers read moved: try each, keep those still waiting."""
        if not self._operations:
            return
        owner = self._owner
        self._operations = [op for op in self._operations if not op.try_complete(owner)]

    def __len__(self) -> int:
        return len(self._operations)
