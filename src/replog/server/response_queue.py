"""A connection's responses, written in the order their requests arrived.

Split from ``replog.server.network`` (the listener and its connections), which reserves
a ``Slot`` for each request it reads and completes it when the handler answers.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from replog.server.request_context import RequestContext, RequestObserver


class ResponseConnection(Protocol):
    """What the queue needs of its connection (``KafkaConnectionProtocol``)."""

    @property
    def waits_for_room(self) -> bool: ...

    def room(self) -> None: ...

    async def drain(self) -> None: ...

    def response_queue_closed(self) -> None: ...


class Slot:
    """The place of one request's response in its connection's order."""

    __slots__ = ("done", "data", "context")

    def __init__(self, context: RequestContext | None) -> None:
        self.done = False
        self.data: tuple[bytes, ...] | None = None
        self.context = context


class ResponseQueue:
    """One connection's responses, written in request order as soon as the first is ready.

    The handler that completes the response at the head writes it, with every
    completed one behind it, in one ``writelines``: no writer task in between.
    At most ``limit`` requests are in flight; the connection stops reading while
    ``full`` and is told when there is ``room``; ``reserve`` waits for room (an
    authentication step's answer). Concurrency: event-loop only; no method awaits
    between taking slots off the queue and writing them.
    """

    def __init__(
        self,
        transport: asyncio.Transport,
        limit: int,
        observer: RequestObserver | None,
        connection: ResponseConnection,
    ) -> None:
        self._transport = transport
        self._limit = limit
        self._observer = observer
        self._connection = connection
        self._slots: deque[Slot] = deque()
        self._room = asyncio.Event()
        self._room.set()
        self._awaiting_room = False  # a ``reserve`` waits
        self.closed = False

    def full(self) -> bool:
        return len(self._slots) >= self._limit and not self.closed

    def try_reserve(self, context: RequestContext | None = None) -> Slot | None:
        """A slot at once when there is room (the usual case: no coroutine); else None."""
        if len(self._slots) >= self._limit and not self.closed:
            return None
        slot = Slot(context)
        self._slots.append(slot)
        return slot

    async def reserve(self, context: RequestContext | None = None) -> Slot:
        while len(self._slots) >= self._limit and not self.closed:
            self._awaiting_room = True
            self._room.clear()
            await self._room.wait()
        slot = Slot(context)
        self._slots.append(slot)
        return slot

    def complete(self, slot: Slot, data: tuple[bytes, ...] | None) -> None:
        """``data`` is the encoded response (buffers written one after the other: see
        ``frames.encode_response_parts``), or None when the request gets none (acks=0)."""
        slot.done = True
        slot.data = data
        slots = self._slots
        if slots[0] is not slot:
            return  # an earlier response is not ready: it writes this one with its own
        if len(slots) == 1 or not slots[1].done:
            # The usual case: this response alone goes out.
            slots.popleft()
            if data is not None and not self.closed:
                self._transport.writelines(data)
            if self._observer is not None and slot.context is not None:
                self._observer(slot.context, time.monotonic())
        else:
            self._write_ready()
        if self._awaiting_room or self._connection.waits_for_room:
            self.room()

    def _write_ready(self) -> None:
        """Every completed response at the head, in one ``writelines``."""
        slots = self._slots
        out = []
        written: list[RequestContext] = []
        while slots and slots[0].done:
            head = slots.popleft()
            if head.data is not None:
                out.extend(head.data)
            if head.context is not None:
                written.append(head.context)
        if out and not self.closed:
            self._transport.writelines(out)
        if self._observer is not None and written:
            now = time.monotonic()
            for context in written:
                self._observer(context, now)

    def room(self) -> None:
        """Tell whoever waits for room (``reserve``, the connection's reading) if any."""
        if len(self._slots) < self._limit or self.closed:
            self._awaiting_room = False
            self._room.set()
            self._connection.room()

    def close(self) -> None:
        """A handler failed: nothing more is answered on this connection."""
        self.closed = True
        self._room.set()
        self._connection.response_queue_closed()

    def needs_drain(self) -> bool:
        """More than 1 MiB waits in the transport: the writer should wait for it."""
        return not self.closed and self._transport.get_write_buffer_size() > (1 << 20)

    async def drain_if_needed(self) -> None:
        if self.needs_drain():
            await self._connection.drain()
