"""Delayed operations (Kafka's purgatory) on asyncio futures.

A waiting produce or fetch makes one future and registers it, with a predicate,
on every partition it waits on; whoever advances a partition's high watermark
or log end offset calls ``notify``, which completes the futures whose predicate
now holds. Nothing polls, and the waiting task resumes straight from the
``set_result`` (no ``asyncio.wait`` in between). Concurrency: event-loop only;
``notify`` never awaits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

Predicate = Callable[[], bool]


class Waiters:
    def __init__(self) -> None:
        self._waiters: list[tuple[Predicate, asyncio.Future[bool]]] = []

    def add(self, predicate: Predicate, future: asyncio.Future[bool]) -> None:
        """Complete ``future`` (with True) once ``predicate()`` holds; at once if it does now."""
        if future.done():
            return
        if predicate():
            future.set_result(True)
            return
        if len(self._waiters) > 64:
            self._waiters = [(p, f) for p, f in self._waiters if not f.done()]
        self._waiters.append((predicate, future))

    def notify(self) -> None:
        if not self._waiters:
            return
        keep = []
        for predicate, future in self._waiters:
            if future.done():
                continue
            if predicate():
                future.set_result(True)
            else:
                keep.append((predicate, future))
        self._waiters = keep

    def wake_all(self) -> None:
        """Complete every waiter (leadership moved, partition stopped): they re-check state."""
        for _, future in self._waiters:
            if not future.done():
                future.set_result(True)
        self._waiters = []


def _expire(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(False)


async def wait_until(registrations: Sequence[tuple[Waiters, Predicate]], timeout_s: float) -> bool:
    """Wait until one predicate holds (True) or ``timeout_s`` passes (False)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[bool] = loop.create_future()
    for waiters, predicate in registrations:
        waiters.add(predicate, future)
        if future.done():
            return True
    handle = loop.call_later(max(timeout_s, 0), _expire, future)
    try:
        return await future
    finally:
        handle.cancel()
