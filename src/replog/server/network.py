"""The asyncio listener: frames in, handler calls, responses out in request order.

Each connection is an ``asyncio.Protocol`` (``KafkaConnectionProtocol``): the bytes
that arrive are cut into frames in the transport's callback, and each request's handler
is started there at once; a handler that must wait (a long poll, acks=all) carries on in a
task from where it first waited, one that answers at once needs no task at all.
Responses go out in the order their requests arrived, written by whichever handler
completes the one at the head (``ResponseQueue``). A bounded number of requests may be in
flight per connection; past that the connection stops reading (back-pressure), so a
client cannot make the broker allocate without bound.
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
from collections.abc import Awaitable, Callable, Coroutine, Generator
from types import CoroutineType
from typing import Any

from replog.protocol import apis, frames
from replog.security.principal import ANONYMOUS
from replog.security.tls import certificate_principal
from replog.server.authentication import (
    ALLOWED_BEFORE_AUTHENTICATION,
    ListenerSecurity,
    SaslConnection,
)

# RequestContext is imported from here by the handlers.
from replog.server.request_context import Handler, RequestContext, RequestObserver
from replog.server.response_queue import ResponseQueue, Slot

log = logging.getLogger(__name__)

# Requests read and unanswered per connection. librdkafka sends one ProduceRequest per
# partition: at acks=all each waits for a replication round, so the window is how many
# partitions one round acknowledges (16: 36.9 s to acknowledge one record to each of
# 3,000 partitions RF 3 on 3 brokers; 128: 3.5 s; bench/README.md, issue 27).
MAX_IN_FLIGHT_PER_CONNECTION = 128
SASL_APIS = (apis.ApiKey.SASL_HANDSHAKE, apis.ApiKey.SASL_AUTHENTICATE)
SSL_HANDSHAKE_TIMEOUT_S = 10.0  # a client that stalls its TLS handshake is dropped


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
        self._connections: set[KafkaConnectionProtocol] = set()

    async def start(self) -> None:
        context = self.security.ssl_context
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: KafkaConnectionProtocol(self),
            self.host,
            self.port,
            backlog=512,
            ssl=context,
            ssl_handshake_timeout=SSL_HANDSHAKE_TIMEOUT_S if context is not None else None,
        )
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        handlers: list[asyncio.Task[None]] = []
        for connection in list(self._connections):
            handlers.extend(connection.cancel_handlers())
        if handlers:
            await asyncio.gather(*handlers, return_exceptions=True)
        for connection in list(self._connections):
            connection.close()
        if self._server is not None:
            await self._server.wait_closed()

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


class _CarryOn:
    """Awaitable that carries on a coroutine already started by hand, from the awaitable
    it yielded when it first suspended (what a task would have been handed): the task
    that awaits this drives the coroutine exactly as if it had run it from its start.
    Python 3.12's eager tasks, by hand for 3.11. Its value is the coroutine's."""

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine[Any, Any, None], first: Any) -> None:
        self._coro = coro
        self._first = first

    def __await__(self) -> Generator[Any, None, Any]:
        coro, value = self._coro, self._first
        self._first = None
        while True:
            try:
                yield value
            except BaseException as exc:  # a cancellation, or a future's exception
                try:
                    value = coro.throw(exc)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    value = coro.send(None)
                except StopIteration as done:
                    return done.value


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    """A handler's awaitable that is not a coroutine, as one."""
    return await awaitable


class KafkaConnectionProtocol(asyncio.Protocol):
    """One client connection: frames cut from the bytes as they arrive, each request's
    handler started at once, in the callback that read it (no reader task, no task per
    request): a handler that answers without waiting (a produce at acks=1, a fetch with
    data, Metadata) runs to its response there; one that waits (a long poll, acks=all)
    carries on in a task from where it first waited.

    Reading pauses (the transport's ``pause_reading``) while the connection has
    ``MAX_IN_FLIGHT_PER_CONNECTION`` requests unanswered (back-pressure: what is already
    read waits in the buffer), while a SASL step runs (requests after it wait for its
    outcome) and once the connection is finishing. Finishing (a bad frame, a refused
    request, the client's end of stream): nothing more is read, what was asked is
    answered, then the transport closes.

    Concurrency: event-loop callbacks only; no method awaits.
    """

    def __init__(self, server: KafkaServer) -> None:
        self._server = server
        self._max_request = server._max_request
        self._buffer = bytearray()
        self._handlers: set[asyncio.Task[None]] = set()
        self._transport: asyncio.Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._responses: ResponseQueue | None = None
        self._peer = "?"
        self._principal = ANONYMOUS
        self._sasl: SaslConnection | None = None
        self._over_ssl = server.security.ssl_context is not None
        self._authenticating = False  # a SASL step runs; later frames wait for it
        self._full = False  # MAX_IN_FLIGHT_PER_CONNECTION unanswered
        self._finishing = False  # nothing more is read; close once all is answered
        self._lost = False
        self._reading_paused = False
        self._processing = False
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods
        self._transport = transport  # type: ignore[assignment]
        # Kept: asyncio.get_running_loop() costs a getpid() system call on each call.
        self._loop = asyncio.get_running_loop()
        peername = transport.get_extra_info("peername")
        self._peer = f"{peername[0]}:{peername[1]}" if peername else "?"
        server = self._server
        self._responses = ResponseQueue(
            transport, MAX_IN_FLIGHT_PER_CONNECTION, server._observer, self
        )
        if server.security.ssl_context is not None:
            self._principal = certificate_principal(transport.get_extra_info("peercert"))
        if server.security.uses_sasl:
            self._sasl = SaslConnection(server.security, self._peer)
        server._connections.add(self)

    def data_received(self, data: bytes) -> None:
        if self._finishing:
            return
        if not self._buffer and not self._authenticating and len(data) >= 4:
            # The usual case: the bytes are one whole request. It is taken from them as
            # it is, without going through the buffer (one copy instead of three).
            (size,) = frames.SIZE.unpack_from(data, 0)
            if len(data) == 4 + size and 8 <= size <= self._max_request:
                responses = self._responses
                assert responses is not None
                if not responses.full():
                    self._processing = True
                    try:
                        self._request(data[4:])
                    finally:
                        self._processing = False
                        self._update_reading()
                    return
        self._buffer += data
        self._process()

    def eof_received(self) -> bool:
        # The client stopped sending: answer what it already asked, then close. Over
        # TLS the transport closes itself (half-closed TLS is not supported).
        self._finish()
        return not self._over_ssl

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._finishing = True
        self._buffer.clear()
        if self._responses is not None:
            self._responses.closed = True
            self._responses.room()
        self._wake_drain_waiters()
        self._server._connections.discard(self)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_drain_waiters()

    # -- the server's --------------------------------------------------------------------

    def cancel_handlers(self) -> list[asyncio.Task[None]]:
        """The server is stopping: the handlers still waiting are cancelled."""
        self._finishing = True
        handlers = list(self._handlers)
        for handler in handlers:
            handler.cancel()
        return handlers

    def close(self) -> None:
        if self._transport is not None and not self._lost:
            self._transport.close()

    # -- the response queue's --------------------------------------------------------

    @property
    def waits_for_room(self) -> bool:
        return self._full

    def room(self) -> None:
        """A response went out and the connection has room again: read on."""
        if self._full:
            self._full = False
            self._update_reading()
            if not self._processing:
                self._process()

    async def drain(self) -> None:
        """Wait until the transport takes writes again (its buffer below the high mark)."""
        if not self._write_paused or self._lost:
            return
        assert self._loop is not None
        waiter = self._loop.create_future()
        self._drain_waiters.append(waiter)
        await waiter

    def response_queue_closed(self) -> None:
        """A handler failed: nothing more is read or answered on this connection."""
        self._finish()
        self.close()

    # -- reading -------------------------------------------------------------------------

    def _process(self) -> None:
        """Cut the buffered frames and start their requests, until the buffer holds no
        whole frame or the connection cannot take more now."""
        responses = self._responses
        assert responses is not None
        buffer = self._buffer
        self._processing = True
        position = 0
        try:
            while not (self._finishing or self._authenticating):
                available = len(buffer) - position
                if available < 4:
                    break
                (size,) = frames.SIZE.unpack_from(buffer, position)
                if size < 8 or size > self._max_request:
                    log.warning(
                        "closing connection from %s: request size %d outside [8, %d] "
                        "(socket.request.max.bytes)",
                        self._peer,
                        size,
                        self._max_request,
                    )
                    self._finish()
                    break
                if available - 4 < size:
                    break
                if responses.full():
                    self._full = True
                    break
                frame = bytes(buffer[position + 4 : position + 4 + size])
                position += 4 + size
                self._request(frame)
        finally:
            self._processing = False
            if position:
                del buffer[:position]
            self._update_reading()

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or self._lost:
            return
        pause = self._full or self._authenticating or self._finishing
        if pause != self._reading_paused:
            self._reading_paused = pause
            if pause:
                transport.pause_reading()
            else:
                transport.resume_reading()

    def _request(self, frame: bytes) -> None:
        """One frame: decoded, checked, its handler started."""
        server = self._server
        responses = self._responses
        assert responses is not None
        peer = self._peer
        received_s = time.monotonic()
        try:
            request = frames.decode_request(frame)
        except frames.UnsupportedVersion as exc:
            response = server._on_unsupported_version(exc)
            if response is None:
                log.warning("closing connection from %s: %s", peer, exc)
                self._finish()
                return
            slot = responses.try_reserve()
            assert slot is not None  # room was checked before the frame was taken
            responses.complete(slot, (response,))
            return
        except frames.InvalidFrame as exc:
            log.warning(
                "closing connection from %s: %s (frame starts %s)", peer, exc, frame[:48].hex()
            )
            self._finish()
            return
        sasl = self._sasl
        if sasl is not None:
            if not sasl.authenticated or request.api_key in SASL_APIS:
                # authenticating, or re-authenticating (KIP-368)
                self._start_authentication(sasl, request)
                return
            if sasl.expired(time.monotonic()):
                log.info(
                    "closing connection from %s: its SASL session ended "
                    "(connections.max.reauth.ms) without a re-authentication",
                    peer,
                )
                self._finish()
                return
        if server._serves is not None and not server._serves(request.api_key):
            log.info(
                "closing connection from %s: %s is not served while this broker is "
                "fenced from ZooKeeper",
                peer,
                apis.ApiKey(request.api_key).name,
            )
            self._finish()
            return
        handler = server._handlers.get(request.api_key)
        if handler is None:
            log.warning(
                "closing connection from %s: no handler for api key %d", peer, request.api_key
            )
            self._finish()
            return
        # Built positionally (the fields' order), the handler started at once.
        context = RequestContext(
            request.api_key,
            request.api_version,
            request.correlation_id,
            request.client_id,
            peer,
            self._principal,
            received_s,
            time.monotonic(),
            0.0,
            0.0,
            None,
            server.security.listener_name,
        )
        slot = responses.try_reserve(context)
        assert slot is not None  # room was checked before the frame was taken
        # The handler runs until it first waits, in this callback (inlined here: one
        # call less a request); a task carries it on from there. One that answers
        # without waiting costs no task and no coroutine besides its own.
        try:
            coro = handler(context, request.body)
            if type(coro) is not CoroutineType:
                coro = _awaited(coro)
            first = coro.send(None)
        except StopIteration as answered:
            self._answer(context, answered.value, responses, slot)
            return
        except Exception:
            self._handler_failed(context, responses)
            return
        self._track(self._carry_on(coro, first, context, responses, slot))

    async def _carry_on(
        self,
        coro: Coroutine[Any, Any, Any],
        first: Any,
        context: RequestContext,
        responses: ResponseQueue,
        slot: Slot,
    ) -> None:
        try:
            response = await _CarryOn(coro, first)
        except Exception:
            self._handler_failed(context, responses)
            return
        self._answer(context, response, responses, slot)

    def _answer(
        self, context: RequestContext, response: Any, responses: ResponseQueue, slot: Slot
    ) -> None:
        """The handler's response (None: none, acks=0) encoded and put in its place."""
        context.handled_s = time.monotonic()
        try:
            data = (
                None
                if response is None
                else frames.encode_response_parts(context.api_key, context.correlation_id, response)
            )
        except Exception:
            self._handler_failed(context, responses)
            return
        responses.complete(slot, data)
        if responses.needs_drain():
            self._track(responses.drain_if_needed())

    def _handler_failed(self, context: RequestContext, responses: ResponseQueue) -> None:
        """Called in the ``except`` of a handler's (or its response's encoding's) error:
        the connection closes, nothing more is answered on it."""
        log.exception(
            "handler for %s v%d from %s failed; closing the connection",
            apis.ApiKey(context.api_key).name,
            context.api_version,
            context.peer,
        )
        responses.close()

    def _track(self, coro: Coroutine[Any, Any, None]) -> None:
        """A task for ``coro``, among the connection's handlers until it ends."""
        assert self._loop is not None
        task = self._loop.create_task(coro)
        self._handlers.add(task)
        task.add_done_callback(self._handler_done)

    def _handler_done(self, task: asyncio.Task[None]) -> None:
        self._handlers.discard(task)
        if self._finishing and not self._handlers:
            self._close_when_answered()

    def _start_authentication(self, sasl: SaslConnection, request: frames.Request) -> None:
        self._authenticating = True
        self._update_reading()
        self._track(self._authentication_step(sasl, request))

    async def _authentication_step(self, sasl: SaslConnection, request: frames.Request) -> None:
        responses = self._responses
        assert responses is not None
        try:
            ok = await self._server._authenticate(sasl, request, responses, self._peer)
        except (ConnectionError, asyncio.CancelledError):
            ok = False
        self._authenticating = False
        if not ok:
            self._finish()
            return
        if sasl.authenticated:
            self._principal = sasl.principal or self._principal
        self._update_reading()
        if not self._processing:
            self._process()

    def _finish(self) -> None:
        """Read nothing more; close once every request read is answered."""
        if self._finishing:
            return
        self._finishing = True
        self._update_reading()
        if not self._handlers:
            self._close_when_answered()

    def _close_when_answered(self) -> None:
        # Handlers that ran to their end have written (or dropped) their responses.
        self.close()

    def _wake_drain_waiters(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
