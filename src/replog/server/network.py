"""The asyncio listener: frames in, handler calls, responses out in request order.

Each connection has a reader task that decodes frames and starts one handler
task per request; responses go out in the order their requests arrived, written
by whichever handler completes the one at the head (``ResponseQueue``). A bounded number of
requests may be in flight per connection; past that the reader stops reading
(back-pressure), so a client cannot make the broker allocate without bound.
A malformed frame, an oversize length prefix or an unknown API closes that one
connection with a log line; other connections are not affected.

A listener's security (``replog.server.authentication.ListenerSecurity``) decides what a
connection must do first: a TLS handshake (SSL, SASL_SSL; a client certificate names the
principal) and a SASL exchange (SASL_PLAINTEXT, SASL_SSL) before any other request. Each
request carries its principal and listener to the handlers, and its stage times to the
request metrics (``request_observer``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from replog.protocol import apis, frames
from replog.security.principal import ANONYMOUS, KafkaPrincipal
from replog.security.tls import certificate_principal
from replog.server.authentication import (
    ALLOWED_BEFORE_AUTHENTICATION,
    ListenerSecurity,
    SaslConnection,
)

log = logging.getLogger(__name__)

MAX_IN_FLIGHT_PER_CONNECTION = 16
SASL_APIS = (apis.ApiKey.SASL_HANDSHAKE, apis.ApiKey.SASL_AUTHENTICATE)
SSL_HANDSHAKE_TIMEOUT_S = 10.0  # a client that stalls its TLS handshake is dropped


@dataclass(slots=True)
class RequestContext:
    """What a handler knows about the request besides its body."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    peer: str
    # Who sent it: set by the connection's authentication (TLS client certificate or
    # SASL); ``User:ANONYMOUS`` on a listener that does not authenticate.
    principal: KafkaPrincipal = ANONYMOUS
    # Request stages (``time.monotonic()`` seconds), as Kafka's RequestMetrics splits them:
    # read off the socket, handler started, handler done; ``remote_s`` is the part of the
    # handler's time spent waiting on others (acks=all, a fetch's long poll), which the
    # handler adds itself.
    received_s: float = 0.0
    started_s: float = 0.0
    handled_s: float = 0.0
    remote_s: float = 0.0
    # The request's name in the metrics when not the API's (FetchConsumer, FetchFollower).
    request_name: str | None = None
    # The listener it came in on (Metadata answers with that listener's endpoints).
    listener: str = "PLAINTEXT"


Handler = Callable[[RequestContext, Any], Awaitable[Any]]
# Called once a request's response is handed to the socket (or dropped, acks=0), with the
# time it was: the request metrics.
RequestObserver = Callable[[RequestContext, float], None]
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
        request_observer: RequestObserver | None = None,
        security: ListenerSecurity | None = None,
        serves: Callable[[int], bool] | None = None,
    ) -> None:
        """``serves(api_key)``: False closes the connection instead of answering (a
        broker fenced from ZooKeeper turns its clients away; see ``server.zk_fence``)."""
        self.host = host
        self.port = port
        self._handlers = handlers
        self._max_request = socket_request_max_bytes
        self._on_unsupported_version = on_unsupported_version
        self._observer = request_observer
        self._serves = serves
        self.security = security or ListenerSecurity("PLAINTEXT", "PLAINTEXT")
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        context = self.security.ssl_context
        self._server = await asyncio.start_server(
            self._serve_connection,
            self.host,
            self.port,
            limit=1 << 20,
            backlog=512,
            ssl=context,
            ssl_handshake_timeout=SSL_HANDSHAKE_TIMEOUT_S if context is not None else None,
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
        responses = ResponseQueue(writer, MAX_IN_FLIGHT_PER_CONNECTION, self._observer)
        handlers: set[asyncio.Task[None]] = set()
        principal = ANONYMOUS
        if self.security.ssl_context is not None:
            principal = certificate_principal(writer.get_extra_info("peercert"))
        sasl = SaslConnection(self.security, peer) if self.security.uses_sasl else None
        try:
            await self._read_requests(reader, responses, handlers, peer, principal, sasl)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # The server is stopping. Returning (rather than re-raising) keeps asyncio's
            # stream callback from logging the cancellation as an error.
            for handler in handlers:
                handler.cancel()
        finally:
            # The client stopped sending: answer what it already asked, then close.
            if handlers:
                await asyncio.gather(*handlers, return_exceptions=True)
            writer.close()
            self._connections.discard(task)

    async def _read_requests(
        self,
        reader: asyncio.StreamReader,
        responses: ResponseQueue,
        handlers: set[asyncio.Task[None]],
        peer: str,
        principal: KafkaPrincipal,
        sasl: SaslConnection | None,
    ) -> None:
        while not responses.closed:
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
            received_s = time.monotonic()
            try:
                request = frames.decode_request(frame)
            except frames.UnsupportedVersion as exc:
                response = self._on_unsupported_version(exc)
                if response is None:
                    log.warning("closing connection from %s: %s", peer, exc)
                    return
                responses.complete(await responses.reserve(), (response,))
                continue
            except frames.InvalidFrame as exc:
                log.warning(
                    "closing connection from %s: %s (frame starts %s)", peer, exc, frame[:48].hex()
                )
                return
            if sasl is not None:
                if not sasl.authenticated or request.api_key in SASL_APIS:
                    # authenticating, or re-authenticating (KIP-368)
                    if not await self._authenticate(sasl, request, responses, peer):
                        return
                    if sasl.authenticated:
                        principal = sasl.principal or principal
                    continue
                if sasl.expired(time.monotonic()):
                    log.info(
                        "closing connection from %s: its SASL session ended "
                        "(connections.max.reauth.ms) without a re-authentication",
                        peer,
                    )
                    return
            if self._serves is not None and not self._serves(request.api_key):
                log.info(
                    "closing connection from %s: %s is not served while this broker is "
                    "fenced from ZooKeeper",
                    peer,
                    apis.ApiKey(request.api_key).name,
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
                received_s=received_s,
                principal=principal,
                listener=self.security.listener_name,
            )
            slot = responses.try_reserve(context) or await responses.reserve(context)
            handler_task = asyncio.create_task(
                self._handle(handler, context, request.body, responses, slot)
            )
            handlers.add(handler_task)
            handler_task.add_done_callback(handlers.discard)

    async def _authenticate(
        self,
        sasl: SaslConnection,
        request: frames.Request,
        responses: ResponseQueue,
        peer: str,
    ) -> bool:
        """One request of a connection that has not authenticated yet, or that
        re-authenticates (Kafka ``SaslServerAuthenticator``, KIP-368); False: close the
        connection."""
        if request.api_key not in ALLOWED_BEFORE_AUTHENTICATION:
            log.warning(
                "closing connection from %s: %s before SASL authentication",
                peer,
                apis.ApiKey(request.api_key).name,
            )
            return False
        close = False
        if request.api_key == apis.ApiKey.SASL_HANDSHAKE:
            if request.api_version == 0:  # raw tokens after it: Kafka's pre-KIP-152 flow
                log.warning("closing connection from %s: SaslHandshake v0 is not served", peer)
                return False
            body = sasl.handshake(request.api_version, request.body)
        elif request.api_key == apis.ApiKey.SASL_AUTHENTICATE:
            body, close = await sasl.authenticate(request.api_version, request.body)
        else:
            handler = self._handlers[request.api_key]  # ApiVersions
            context = RequestContext(
                request.api_key,
                request.api_version,
                request.correlation_id,
                request.client_id,
                peer,
                listener=self.security.listener_name,
            )
            body = await handler(context, request.body)
        slot = await responses.reserve()
        responses.complete(
            slot, frames.encode_response_parts(request.api_key, request.correlation_id, body)
        )
        if close:
            await responses.drain_if_needed()
        return not close

    async def _handle(
        self,
        handler: Handler,
        context: RequestContext,
        body: Any,
        responses: ResponseQueue,
        slot: Slot,
    ) -> None:
        context.started_s = time.monotonic()
        try:
            response = await handler(context, body)
            context.handled_s = time.monotonic()
            data = (
                None
                if response is None
                else frames.encode_response_parts(context.api_key, context.correlation_id, response)
            )
        except Exception:
            log.exception(
                "handler for %s v%d from %s failed; closing the connection",
                apis.ApiKey(context.api_key).name,
                context.api_version,
                context.peer,
            )
            responses.close()
            return
        responses.complete(slot, data)
        if responses.needs_drain():
            await responses.drain_if_needed()


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
    At most ``limit`` requests are in flight; ``reserve`` waits for room (the
    reader stops reading: back-pressure). Concurrency: event-loop only; no
    method awaits between taking slots off the queue and writing them.
    """

    def __init__(
        self,
        writer: asyncio.StreamWriter,
        limit: int,
        observer: RequestObserver | None = None,
    ) -> None:
        self._writer = writer
        self._transport = writer.transport
        self._limit = limit
        self._observer = observer
        self._slots: deque[Slot] = deque()
        self._room = asyncio.Event()
        self._room.set()
        self.closed = False

    def try_reserve(self, context: RequestContext | None = None) -> Slot | None:
        """A slot at once when there is room (the usual case: no coroutine); else None."""
        if len(self._slots) >= self._limit and not self.closed:
            return None
        slot = Slot(context)
        self._slots.append(slot)
        return slot

    async def reserve(self, context: RequestContext | None = None) -> Slot:
        while len(self._slots) >= self._limit and not self.closed:
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
        if len(slots) < self._limit:
            self._room.set()

    def close(self) -> None:
        """A handler failed: nothing more is answered on this connection."""
        self.closed = True
        self._room.set()
        self._writer.close()

    def needs_drain(self) -> bool:
        """More than 1 MiB waits in the transport: the writer should wait for it."""
        return not self.closed and self._transport.get_write_buffer_size() > (1 << 20)

    async def drain_if_needed(self) -> None:
        if self.needs_drain():
            try:
                await self._writer.drain()
            except ConnectionError:
                self.closed = True  # the client went away; the reader sees it too
