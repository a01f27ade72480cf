"""The asyncio listener: frames in, handler calls, responses out in request order.

Each connection has a reader task that decodes frames and starts one handler
task per request, and a writer task that awaits those handler tasks in the
order their requests arrived and writes the responses. A bounded number of
requests may be in flight per connection; past that the reader stops reading
(back-pressure), so a client cannot make the broker allocate without bound.
A malformed frame, an oversize length prefix or an unknown API closes that one
connection with a log line; other connections are not affected.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from replog.protocol import apis, frames

log = logging.getLogger(__name__)

MAX_IN_FLIGHT_PER_CONNECTION = 16


@dataclass(slots=True)
class RequestContext:
    """What a handler knows about the request besides its body."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    peer: str


Handler = Callable[[RequestContext, Any], Awaitable[Any]]
UnsupportedVersionResponder = Callable[[frames.UnsupportedVersion], bytes | None]


class KafkaServer:
    """Serves the Kafka protocol on one listener.

    Concurrency: all state lives on the event loop; handlers are coroutines.
    """

    def __init__(
        self,
        host: str,
        port: int,
        handlers: dict[int, Handler],
        *,
        socket_request_max_bytes: int,
        on_unsupported_version: UnsupportedVersionResponder,
    ) -> None:
        self.host = host
        self.port = port
        self._handlers = handlers
        self._max_request = socket_request_max_bytes
        self._on_unsupported_version = on_unsupported_version
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve_connection, self.host, self.port, limit=1 << 20, backlog=512
        )
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peername = writer.get_extra_info("peername")
        peer = f"{peername[0]}:{peername[1]}" if peername else "?"
        pending: asyncio.Queue[asyncio.Task[bytes | None] | None] = asyncio.Queue(
            MAX_IN_FLIGHT_PER_CONNECTION
        )
        writer_task = asyncio.create_task(self._write_responses(pending, writer))
        try:
            await self._read_requests(reader, pending, peer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # The server is stopping. Returning (rather than re-raising) keeps asyncio's
            # stream callback from logging the cancellation as an error.
            writer_task.cancel()
        finally:
            try:
                pending.put_nowait(None)
            except asyncio.QueueFull:
                writer_task.cancel()
            try:
                await writer_task
            except (asyncio.CancelledError, ConnectionError):
                pass
            writer.close()
            self._connections.discard(task)

    async def _read_requests(
        self,
        reader: asyncio.StreamReader,
        pending: asyncio.Queue[asyncio.Task[bytes | None] | None],
        peer: str,
    ) -> None:
        while True:
            prefix = await reader.readexactly(4)
            (size,) = frames.SIZE.unpack(prefix)
            if size < 8 or size > self._max_request:
                log.warning(
                    "closing connection from %s: request size %d outside [8, %d] "
                    "(socket.request.max.bytes)",
                    peer,
                    size,
                    self._max_request,
                )
                return
            frame = await reader.readexactly(size)
            try:
                request = frames.decode_request(frame)
            except frames.UnsupportedVersion as exc:
                response = self._on_unsupported_version(exc)
                if response is None:
                    log.warning("closing connection from %s: %s", peer, exc)
                    return
                done: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
                done.set_result(response)
                await pending.put(done)  # type: ignore[arg-type]
                continue
            except frames.InvalidFrame as exc:
                log.warning(
                    "closing connection from %s: %s (frame starts %s)", peer, exc, frame[:48].hex()
                )
                return
            handler = self._handlers.get(request.api_key)
            if handler is None:
                log.warning(
                    "closing connection from %s: no handler for api key %d", peer, request.api_key
                )
                return
            context = RequestContext(
                api_key=request.api_key,
                api_version=request.api_version,
                correlation_id=request.correlation_id,
                client_id=request.client_id,
                peer=peer,
            )
            await pending.put(asyncio.create_task(self._handle(handler, context, request.body)))

    async def _handle(self, handler: Handler, context: RequestContext, body: Any) -> bytes | None:
        try:
            response = await handler(context, body)
        except Exception:
            log.exception(
                "handler for %s v%d from %s failed; closing the connection",
                apis.ApiKey(context.api_key).name,
                context.api_version,
                context.peer,
            )
            raise
        if response is None:
            return None
        return frames.encode_response(context.api_key, context.correlation_id, response)

    async def _write_responses(
        self,
        pending: asyncio.Queue[asyncio.Task[bytes | None] | None],
        writer: asyncio.StreamWriter,
    ) -> None:
        while True:
            item = await pending.get()
            if item is None:
                return
            try:
                data = await item
            except asyncio.CancelledError:
                raise
            except Exception:
                writer.close()
                return
            if data is not None:
                writer.write(data)
                if writer.transport.get_write_buffer_size() > (1 << 20) or pending.empty():
                    await writer.drain()
