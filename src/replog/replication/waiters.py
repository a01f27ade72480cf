"""Delayed operations (Kafka's purgatory) on asyncio futures.

A waiting produce or fetch registers a predicate with the partitions it waits
on; whoever advances a partition's high watermark or log end offset calls
``notify``, which completes the waiters whose predicate now holds. Nothing
polls. Concurrency: event-loop only; ``notify`` never awaits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Waiters:
    def __init__(self) -> None:
        self._waiters: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []

    def add(self, predicate: Callable[[], bool]) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if len(self._waiters) > 64:
            self._waiters = [(p, f) for p, f in self._waiters if not f.done()]
        if predicate():
            future.set_result(None)
        else:
            self._waiters.append((predicate, future))
        return future

    def notify(self) -> None:
        if not self._waiters:
            return
        keep = []
        for predicate, future in self._waiters:
            if future.done():
                continue
            if predicate():
                future.set_result(None)
            else:
                keep.append((predicate, future))
        self._waiters = keep

    def wake_all(self) -> None:
        """Complete every waiter (leadership moved, partition stopped): they re-check state."""
        for _, future in self._waiters:
            if not future.done():
                future.set_result(None)
        self._waiters = []


async def wait_any(futures: list[asyncio.Future[None]], timeout_s: float) -> bool:
    """Wait until one of ``futures`` completes or ``timeout_s`` passes; True if one did."""
    if not futures:
        await asyncio.sleep(max(timeout_s, 0))
        return False
    done, _ = await asyncio.wait(
        futures, timeout=max(timeout_s, 0), return_when=asyncio.FIRST_COMPLETED
    )
    for future in futures:
        if not future.done():
            future.cancel()
    return bool(done)
