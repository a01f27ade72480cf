"""A small asyncio Kafka-protocol client for broker-to-broker calls and tools.

Used by the controller (LeaderAndIsr, StopReplica, UpdateMetadata), by replica
fetchers (Fetch, OffsetsForLeaderEpoch) and by ``replog topics``. One
connection; requests may be pipelined; responses are matched by correlation id.

With a ``ClientSecurity`` that asks for them, ``connect`` opens TLS and authenticates
with SASL (SaslHandshake v1, then SaslAuthenticate until the mechanism is done, as
Kafka's ``SaslClientAuthenticator``) before any other request. A SASL session the broker
limits (KIP-368 ``session_lifetime_ms``) stops counting as ``connected`` once 85% of its
lifetime has passed, so the next user of the connection opens a new one, before the
broker would close it.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2 import request as authenticate_req
from kio.schema.sasl_handshake.v1 import request as handshake_req

from replog.protocol import frames
from replog.security import sasl_client
from replog.security.client_security import PLAINTEXT, ClientSecurity
from replog.security.sasl import AuthenticationFailed

# A session is renewed (by reconnecting) after this share of its lifetime.
REAUTH_SHARE = 0.85
NEVER = float("inf")
CLOSE_WAIT_S = 1.0  # how long close() waits for unsent bytes to go before dropping them


def detect_dead_peer(sock: Any, dead_after_s: float) -> None:
    """Close the connection when the peer goes silent for about ``dead_after_s``: data
    unacknowledged that long (TCP_USER_TIMEOUT), or an idle connection whose keepalive
    probes go unanswered. A partition then ends the connection within seconds instead of
    TCP's retransmission backoff, and after a heal a new connection starts at once."""
    if sock is None:
        return
    idle = max(1, int(dead_after_s / 3))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (
        ("TCP_KEEPIDLE", idle),
        ("TCP_KEEPINTVL", 1),
        ("TCP_KEEPCNT", max(1, int(dead_after_s) - idle)),
        ("TCP_USER_TIMEOUT", int(dead_after_s * 1000)),
    ):
        if hasattr(socket, option):  # (Linux; elsewhere the request timeout still applies)
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


class ConnectionClosed(ConnectionError):
    pass


class AuthenticationError(ConnectionError):
    """The broker refused this connection's SASL login (or offers no such mechanism):
    a connection failure to its users, with the reason on one line."""


def _time_out(future: asyncio.Future[Any], timeout_s: float) -> None:
    if not future.done():
        future.set_exception(TimeoutError(f"no response within {timeout_s:.1f} s"))


def raise_if_cancelling() -> None:
    """Raise CancelledError if the current task was asked to stop. Python 3.11's
    ``asyncio.wait_for`` loses a cancellation that arrives as its inner future fails (a
    refused connection): it raises the inner OSError instead, and a caller that retries
    OSErrors goes on for ever, its task stuck in "cancelling" (seen in a broker's stack
    dump: the controller's request sender to a stopped broker kept retrying after the
    controller's shutdown had cancelled it, and the broker never exited). Call it where
    an OSError is caught to be retried."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class KafkaConnection:
    """Concurrency: one reader task per connection; ``request`` may be called concurrently."""

    def __init__(
        self,
        host: str,
        port: int,
        client_id: str = "replog",
        security: ClientSecurity = PLAINTEXT,
        dead_peer_s: float | None = None,
    ) -> None:
        """``dead_peer_s``: end the connection when the peer is silent that long (see
        ``detect_dead_peer``; brokers' own connections to each other)."""
        self.host = host
        self.dead_peer_s = dead_peer_s
        self.port = port
        self.client_id = client_id
        self.security = security
        self._renew_at = NEVER  # monotonic time the SASL session should be renewed
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, tuple[int, int, asyncio.Future[Any], bool]] = {}
        self._next_correlation_id = 0
        self._read_task: asyncio.Task[None] | None = None
        self._closed = False

    async def connect(self, timeout_s: float = 10) -> None:
        """Open the connection (TLS and SASL as ``security`` says). A refused
        authentication raises ``AuthenticationError`` (an OSError, as a failed connection
        is); an unreadable TLS file ``ValueError``."""
        context = self.security.ssl_context()
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(
                    self.host,
                    self.port,
                    limit=1 << 20,
                    ssl=context,
                    server_hostname=self.host if context is not None else None,
                ),
                timeout_s,
            )
        except OSError:
            raise_if_cancelling()
            raise
        if self.dead_peer_s is not None:
            detect_dead_peer(self._writer.get_extra_info("socket"), self.dead_peer_s)
        self._read_task = asyncio.create_task(self._read_loop())
        if self.security.uses_sasl:
            try:
                await self._authenticate(timeout_s)
            except BaseException:
                await self.close()
                raise

    async def _authenticate(self, timeout_s: float) -> None:
        mechanism = self.security.mechanism
        handshake = await self.request(
            handshake_req.SaslHandshakeRequest(mechanism=mechanism), timeout_s
        )
        if handshake.error_code != ErrorCode.none:
            offered = ", ".join(handshake.mechanisms) or "none"
            raise AuthenticationError(
                f"the broker does not offer SASL mechanism {mechanism} (it offers {offered})"
            )
        client = sasl_client.client_for(mechanism, self.security.username, self.security.password)
        token: bytes | None = client.first()
        started, lifetime_s = time.monotonic(), 0.0
        while token is not None:
            answer = await self.request(
                authenticate_req.SaslAuthenticateRequest(auth_bytes=token), timeout_s
            )
            if answer.error_code != ErrorCode.none:
                reason = answer.error_message or answer.error_code.name
                raise AuthenticationError(f"authentication failed: {reason}")
            try:
                token = client.evaluate(bytes(answer.auth_bytes))
            except AuthenticationFailed as exc:  # e.g. not the broker's SCRAM signature
                raise AuthenticationError(f"authentication failed: {exc}") from None
            lifetime_s = answer.session_lifetime.total_seconds()
        if lifetime_s > 0:
            self._renew_at = started + REAUTH_SHARE * lifetime_s

    @property
    def connected(self) -> bool:
        return (
            self._writer is not None
            and not self._closed
            and (self._renew_at == NEVER or time.monotonic() < self._renew_at)
        )

    async def request(self, body: Any, timeout_s: float = 30) -> Any:
        """Send ``body`` (a kio request entity) and wait for its response entity."""
        api_key = int(type(body).__api_key__)
        version = int(type(body).__version__)
        return await self._exchange(
            api_key,
            version,
            lambda correlation_id: frames.encode_request(
                api_key, version, correlation_id, self.client_id, body
            ),
            raw=False,
            timeout_s=timeout_s,
        )

    async def request_encoded(
        self, api_key: int, version: int, body: bytes, timeout_s: float = 30
    ) -> bytes:
        """Send a body a hand codec encoded; the answer is the response frame after its
        size prefix (correlation id first: response header v0)."""
        return await self._exchange(
            api_key,
            version,
            lambda correlation_id: frames.encode_request_body(
                api_key, version, correlation_id, self.client_id, body
            ),
            raw=True,
            timeout_s=timeout_s,
        )

    async def _exchange(
        self,
        api_key: int,
        version: int,
        encode: Callable[[int], bytes],
        *,
        raw: bool,
        timeout_s: float,
    ) -> Any:
        if not self.connected or self._writer is None or self._writer.is_closing():
            raise ConnectionClosed(f"not connected to {self.host}:{self.port}")
        self._next_correlation_id = (self._next_correlation_id + 1) & 0x7FFFFFFF
        correlation_id = self._next_correlation_id
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending[correlation_id] = (api_key, version, future, raw)
        try:
            self._writer.write(encode(correlation_id))
        except RuntimeError as exc:  # uvloop: the transport closed before our reader saw it
            self._pending.pop(correlation_id, None)
            self._fail_all(ConnectionClosed(f"connection to {self.host}:{self.port} lost: {exc}"))
            raise ConnectionClosed(f"connection to {self.host}:{self.port} lost") from exc
        # The timeout completes the same future: no wait_for task in between.
        timer = loop.call_later(timeout_s, _time_out, future, timeout_s)
        try:
            await self._writer.drain()
            return await future
        finally:
            timer.cancel()
            self._pending.pop(correlation_id, None)

    async def _read_loop(self) -> None:
        assert self._reader is not None
        try:
            while True:
                prefix = await self._reader.readexactly(4)
                (size,) = frames.SIZE.unpack(prefix)
                frame = await self._reader.readexactly(size)
                (correlation_id,) = frames.SIZE.unpack_from(frame, 0)
                entry = self._pending.get(correlation_id)
                if entry is None:
                    continue
                api_key, version, future, raw = entry
                if future.done():
                    continue
                if raw:
                    future.set_result(frame)
                    continue
                try:
                    _, body = frames.decode_response(api_key, version, frame)
                except Exception as exc:
                    future.set_exception(exc)
                else:
                    future.set_result(body)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            self._fail_all(ConnectionClosed(f"connection to {self.host}:{self.port} lost: {exc}"))
        except asyncio.CancelledError:
            self._fail_all(ConnectionClosed("connection closed"))
            raise

    def _fail_all(self, exc: Exception) -> None:
        self._closed = True
        for _, _, future, _ in self._pending.values():
            if not future.done():
                future.set_exception(exc)
        self._pending.clear()

    async def close(self) -> None:
        self._closed = True
        if self._read_task is not None:
            self._read_task.cancel()
            try:
                await self._read_task
            except asyncio.CancelledError:
                # the reader's end, expected; but if the caller itself is being cancelled,
                # that cancellation must go on (swallowed, a controller channel's sender
                # went on for ever and the controller's resignation waited on it)
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
            except Exception:
                pass
        if self._writer is not None:
            self._writer.close()
            # A transport closes once its buffer is written: to a peer that went silent
            # (partitioned, paused) that is TCP's retransmission timeout, a quarter of an
            # hour, and a controller resigning waited that long on its channel's close
            # (campaign seed 14: the broker never registered again). Past a moment, drop
            # the unsent bytes.
            try:
                async with asyncio.timeout(CLOSE_WAIT_S):
                    await self._writer.wait_closed()
            except asyncio.CancelledError:
                self._writer.transport.abort()
                raise
            except Exception:  # TimeoutError, or the connection's own error
                self._writer.transport.abort()
