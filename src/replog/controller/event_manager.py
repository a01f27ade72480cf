"""The controller's single event queue and the one task that drains it (Kafka
``ControllerEventManager``).

Everything the controller does is an event: ZooKeeper watches, session changes, broker
responses and requests from handlers only *enqueue* a typed event from
``replog.controller.events``; one asyncio task takes them in order and awaits
``process(queued)`` for each, so no two events ever run at the same time and the
controller's state needs no lock.

Concurrency rules
-----------------
* ``put`` / ``clear_and_put`` run on the event loop's thread.
* ``put_threadsafe`` may be called from any thread (kazoo's watch and session threads);
  it only schedules a ``put`` on the loop with ``loop.call_soon_threadsafe`` and returns.
  After the loop is closed the event is dropped (the controller is gone anyway).
* Once the event task has ended (``close``), events still queued and events put later
  are preempted, so a request waiting on one is answered (NOT_CONTROLLER) at once.
* ``process`` exceptions are logged and the loop goes on with the next event; the
  processor decides what an error means (Kafka resigns on ``ControllerMovedException``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from replog.controller.events import ControllerEvent, ShutdownEventThread

log = logging.getLogger("replog.controller.events")


@dataclass(slots=True)
class QueuedEvent:
    """An event and when it was enqueued (``time.monotonic()`` seconds), so the
    processor can measure from the moment the watch fired, not from when its turn came."""

    event: ControllerEvent
    enqueue_time_s: float = field(default_factory=time.monotonic)


class ControllerEventManager:
    """One ``asyncio.Queue`` of ``QueuedEvent`` and the task that processes it.

    ``process`` is awaited for each event in turn. ``preempt`` is called instead for
    events dropped by ``clear_and_put`` or ``close`` (Kafka ``preempt``: answer a
    waiting caller instead of leaving it hanging).
    """

    def __init__(
        self,
        process: Callable[[QueuedEvent], Awaitable[None]],
        preempt: Callable[[ControllerEvent], None] | None = None,
        name: str = "controller-event-thread",
    ) -> None:
        self._process = process
        self._preempt = preempt
        self.name = name
        self._queue: asyncio.Queue[QueuedEvent] = asyncio.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self.current_event: ControllerEvent | None = None
        """The event being processed (Kafka ``ControllerState``), None while idle."""
        self.processed: Counter[str] = Counter()
        """Number of events processed, by event class name."""

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        if self._task is not None:
            raise RuntimeError(f"{self.name} already started")
        self._loop = asyncio.get_running_loop()
        self._task = self._loop.create_task(self._run(), name=self.name)

    async def close(self, timeout_s: float = 30.0) -> None:
        """Drop queued events, let the current one finish (up to ``timeout_s``), stop."""
        task = self._task
        if task is None or task.done():
            return
        self.clear_and_put(ShutdownEventThread())
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout_s)
        except TimeoutError:
            log.warning(
                "%s: event %r still running after %.0f s: cancelling it",
                self.name,
                self.current_event,
                timeout_s,
            )
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        # Events put behind the shutdown are never processed: answer their callers now
        # (a ControlledShutdown left here kept its broker waiting controller.socket.timeout.ms).
        self._clear()

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    # --- enqueueing --------------------------------------------------------------------

    def put(self, event: ControllerEvent) -> QueuedEvent:
        """Enqueue ``event`` (event loop thread only); once the event task has ended,
        preempt it at once instead: nothing would ever process it."""
        queued = QueuedEvent(event)
        self._put_queued(queued, clear=False)
        return queued

    def put_threadsafe(self, event: ControllerEvent, clear: bool = False) -> None:
        """Enqueue ``event`` from any thread (kazoo callbacks); returns at once.

        ``clear``: drop the queued events first, as ``clear_and_put``.
        """
        loop = self._loop
        if loop is None or loop.is_closed():
            log.debug("%s: dropping %r: no running loop", self.name, event)
            return
        queued = QueuedEvent(event)  # stamped now, on the watch thread
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self._put_queued, queued, clear)

    def _put_queued(self, queued: QueuedEvent, clear: bool) -> None:
        if clear:
            self._clear()
        if self._task is not None and self._task.done():
            self._preempt_one(queued.event)
            return
        self._queue.put_nowait(queued)

    def clear_and_put(self, event: ControllerEvent) -> QueuedEvent:
        """Drop every queued event (preempting them) and enqueue ``event``
        (Kafka uses it for session expiry and shutdown)."""
        self._clear()
        return self.put(event)

    def _clear(self) -> None:
        while True:
            try:
                dropped = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            self._preempt_one(dropped.event)

    def is_empty(self) -> bool:
        return self._queue.empty()

    def size(self) -> int:
        """Events waiting (not counting the one being processed)."""
        return self._queue.qsize()

    # --- the task ----------------------------------------------------------------------

    def _preempt_one(self, event: ControllerEvent) -> None:
        if self._preempt is None:
            return
        try:
            self._preempt(event)
        except Exception:
            log.exception("%s: preempting %r failed", self.name, event)

    async def _run(self) -> None:
        while True:
            queued = await self._queue.get()
            event = queued.event
            if isinstance(event, ShutdownEventThread):
                log.debug("%s: shutting down", self.name)
                return
            self.current_event = event
            try:
                await self._process(queued)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: error processing %r", self.name, event)
            finally:
                self.current_event = None
                self.processed[type(event).__name__] += 1
