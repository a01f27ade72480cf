"""Brokers' connections to each other notice a silent peer within seconds
(``replog.protocol.client.detect_dead_peer``): the socket options are set on a real TCP
connection, and a follower's connection carries them."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import pytest

from replog.protocol.client import KafkaConnection, detect_dead_peer

linux_only = pytest.mark.skipif(
    not hasattr(socket, "TCP_USER_TIMEOUT"), reason="TCP_USER_TIMEOUT is Linux's"
)


@linux_only
def test_a_silent_peer_ends_the_connection_within_the_limit() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    try:
        client = socket.create_connection(server.getsockname())
        try:
            detect_dead_peer(client, 5.0)
            assert client.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert client.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 5000
            idle = client.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE)
            interval = client.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL)
            count = client.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT)
            assert idle + interval * count <= 5  # an idle, silent peer is dropped in time
        finally:
            client.close()
    finally:
        server.close()


@linux_only
def test_a_connection_asked_to_watch_its_peer_does() -> None:
    async def scenario() -> tuple[int, int]:
        async def serve(_reader, writer) -> None:
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        watched = KafkaConnection("127.0.0.1", port, dead_peer_s=4.0)
        plain = KafkaConnection("127.0.0.1", port)
        await watched.connect()
        await plain.connect()
        options = tuple(
            c._writer.get_extra_info("socket").getsockopt(
                socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT
            )
            for c in (watched, plain)
        )
        await watched.close()
        await plain.close()
        server.close()
        await server.wait_closed()
        return options

    watched, plain = asyncio.run(scenario())
    assert (watched, plain) == (4000, 0)


def test_a_request_on_a_transport_closed_underneath_is_a_connection_error() -> None:
    """Found by the fault campaign (a proxy resetting connections): under uvloop, a write
    to a transport that had closed before the connection's reader noticed raised
    RuntimeError, which no caller retried, and a replica fetcher died for good. It must be
    a ConnectionClosed (an OSError), which fetchers and controller channels retry."""
    import uvloop

    from replog.protocol.apis import ApiKey, request_schema
    from replog.protocol.client import ConnectionClosed

    async def scenario() -> BaseException | None:
        served = asyncio.get_running_loop().create_future()

        async def serve(reader, writer) -> None:
            with contextlib.suppress(ConnectionError):
                await reader.read()  # until the client's connection goes
            writer.close()
            served.set_result(None)

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        conn = KafkaConnection("127.0.0.1", server.sockets[0].getsockname()[1])
        await conn.connect()
        body = request_schema(ApiKey.API_VERSIONS, 3)(
            client_software_name="t", client_software_version="1"
        )
        # The transport goes (a reset) and the request comes before the reader runs.
        conn._writer.transport.abort()
        await asyncio.sleep(0)  # the transport's connection_lost runs, the reader not yet
        caught: BaseException | None = None
        try:
            await conn.request(body, timeout_s=5)
        except Exception as exc:  # noqa: BLE001 - which exception is the point
            caught = exc
        await conn.close()
        await served
        server.close()
        await server.wait_closed()
        return caught

    loop = uvloop.new_event_loop()
    try:
        caught = loop.run_until_complete(scenario())
    finally:
        loop.close()
    assert isinstance(caught, ConnectionClosed), repr(caught)


def test_closing_a_connection_keeps_the_callers_cancellation() -> None:
    """A task cancelled while it closes a connection (awaiting the reader's end) ends
    cancelled. The close used to swallow that cancellation: a controller channel's sender,
    cancelled while dropping a timed-out connection, went on for ever, and the
    controller's resignation, which waits for its senders, never finished."""

    async def scenario() -> None:
        server = await asyncio.start_server(lambda _r, _w: None, "127.0.0.1", 0)
        try:
            port = server.sockets[0].getsockname()[1]
            conn = KafkaConnection("127.0.0.1", port)
            await conn.connect()
            closing = asyncio.create_task(conn.close())
            await asyncio.sleep(0)  # the close is now waiting for its reader to end
            closing.cancel()
            with pytest.raises(asyncio.CancelledError):
                await closing
            await conn.close()  # closing again finishes the job
        finally:
            server.close()
            with contextlib.suppress(Exception):
                await server.wait_closed()

    asyncio.run(scenario())
