"""The listener's connection (``replog.server.network``) on a real loopback socket:
responses in request order whatever order the handlers finish in, back-pressure at
``MAX_IN_FLIGHT_PER_CONNECTION``, answers to what was asked before the client's end of
stream, and a failing handler closing only its connection."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from replog.protocol import apis, frames
from replog.server.network import MAX_IN_FLIGHT_PER_CONNECTION, KafkaServer, RequestContext

API_VERSIONS = int(apis.ApiKey.API_VERSIONS)
Run = Callable[[Coroutine[Any, Any, None]], None]


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request) -> Run:
    """Each test on asyncio's own loop and on uvloop's (the broker's)."""
    factory = uvloop.new_event_loop if request.param == "uvloop" else None

    def runner(coro: Coroutine[Any, Any, None]) -> None:
        with asyncio.Runner(loop_factory=factory) as r:
            r.run(coro)

    return runner


class Handlers:
    """ApiVersions v0 answered with the correlation id as the body; every third request
    waits for ``gate``; correlation id 1000 fails."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.started: list[int] = []

    async def handle(self, ctx: RequestContext, body: object) -> frames.EncodedBody:
        self.started.append(ctx.correlation_id)
        if ctx.correlation_id == 1000:
            raise RuntimeError("a handler bug")
        if ctx.correlation_id % 3 == 0:
            await self.gate.wait()
        return frames.EncodedBody(struct.pack(">i", ctx.correlation_id))


def request(correlation_id: int) -> bytes:
    return frames.encode_request_body(API_VERSIONS, 0, correlation_id, "test", b"")


async def read_response(reader: asyncio.StreamReader) -> tuple[int, int]:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    correlation_id, echoed = struct.unpack(">ii", await reader.readexactly(size))
    return correlation_id, echoed


async def serve(handlers: Handlers) -> KafkaServer:
    server = KafkaServer(
        "127.0.0.1",
        0,
        {API_VERSIONS: handlers.handle},
        socket_request_max_bytes=1 << 20,
        on_unsupported_version=lambda exc: None,
    )
    await server.start()
    return server


async def wait_until(condition, what: str) -> None:
    async with asyncio.timeout(10):
        while not condition():
            await asyncio.sleep(0.001)
    assert condition(), what


def test_order_and_back_pressure(run: Run) -> None:
    async def main() -> None:
        handlers = Handlers()
        server = await serve(handlers)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            count = MAX_IN_FLIGHT_PER_CONNECTION * 3
            writer.write(b"".join(request(i) for i in range(count)))
            await writer.drain()
            # Request 0 waits: the 15 behind it are read, then reading stops.
            await wait_until(
                lambda: len(handlers.started) >= MAX_IN_FLIGHT_PER_CONNECTION,
                f"{MAX_IN_FLIGHT_PER_CONNECTION} started",
            )
            for _ in range(20):
                await asyncio.sleep(0)
            assert handlers.started == list(range(MAX_IN_FLIGHT_PER_CONNECTION))
            handlers.gate.set()
            answers = [await read_response(reader) for _ in range(count)]
            assert answers == [(i, i) for i in range(count)]
            assert handlers.started == list(range(count))
            writer.close()
        finally:
            await server.stop()

    run(main())


def test_what_was_asked_is_answered_after_the_end_of_stream(run: Run) -> None:
    async def main() -> None:
        handlers = Handlers()
        server = await serve(handlers)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"".join(request(i) for i in range(1, 8)))
            writer.write_eof()
            await wait_until(lambda: len(handlers.started) == 7, "7 started")
            handlers.gate.set()
            answers = [await read_response(reader) for _ in range(7)]
            assert answers == [(i, i) for i in range(1, 8)]
            assert await reader.read() == b""  # then the broker closes
        finally:
            await server.stop()

    run(main())


def test_a_failing_handler_closes_its_connection_only(run: Run) -> None:
    async def main() -> None:
        handlers = Handlers()
        handlers.gate.set()
        server = await serve(handlers)
        try:
            bad_reader, bad_writer = await asyncio.open_connection("127.0.0.1", server.port)
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            bad_writer.write(request(1) + request(1000) + request(2))
            assert await read_response(bad_reader) == (1, 1)
            assert await bad_reader.read() == b""  # closed, 2 not answered
            writer.write(request(4) + request(5))
            assert [await read_response(reader) for _ in range(2)] == [(4, 4), (5, 5)]
            writer.close()
        finally:
            await server.stop()

    run(main())


def test_a_server_stopping_cancels_waiting_handlers(run: Run) -> None:
    async def main() -> None:
        handlers = Handlers()
        server = await serve(handlers)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(request(3))
        await wait_until(lambda: handlers.started == [3], "3 started")
        await server.stop()
        assert await reader.read() == b""
        assert not handlers.gate.is_set()

    run(main())


def test_requests_cut_anywhere_are_answered_in_order(run: Run) -> None:
    """A request read whole in one piece skips the connection's buffer; one cut across
    reads (or several in one read) goes through it: the answers are the same, in order."""

    async def main() -> None:
        handlers = Handlers()
        handlers.gate.set()
        server = await serve(handlers)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            data = b"".join(request(i) for i in (1, 2, 3))
            for start in range(0, len(data), 5):  # pieces of 5 bytes
                writer.write(data[start : start + 5])
                await writer.drain()
            assert [await read_response(reader) for _ in range(3)] == [(1, 1), (2, 2), (3, 3)]
            for i in (4, 5):  # one whole request per write
                writer.write(request(i))
                assert await read_response(reader) == (i, i)
            writer.write(request(6) + request(7)[:6])  # one and a half, then the rest
            await writer.drain()
            writer.write(request(7)[6:])
            assert [await read_response(reader) for _ in range(2)] == [(6, 6), (7, 7)]
            writer.close()
        finally:
            await server.stop()

    run(main())


def test_an_oversize_request_closes_the_connection(run: Run) -> None:
    async def main() -> None:
        handlers = Handlers()
        handlers.gate.set()
        server = await serve(handlers)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            too_big = (1 << 20) + 1
            writer.write(struct.pack(">i", too_big) + bytes(8))
            assert await reader.read() == b""
            assert handlers.started == []
        finally:
            await server.stop()

    run(main())
