"""A connection attempt cancelled just as it fails stays cancelled. Python 3.11's
``asyncio.wait_for`` raises the inner OSError instead of the cancellation when both
arrive in one turn of the loop; a caller that retries OSErrors then goes on for ever in a
task that was told to stop (the controller's request sender to a stopped broker did, and
the broker never exited)."""

from __future__ import annotations

import asyncio
import socket
import time

from replog.protocol.client import KafkaConnection


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_cancel_that_meets_a_refused_connection_is_not_lost() -> None:
    async def go() -> str:
        connection = KafkaConnection("127.0.0.1", free_port(), client_id="t")

        async def attempt() -> str:
            try:
                await connection.connect(timeout_s=5)
            except OSError:
                return "OSError"  # what a retrying caller would catch, and retry
            return "connected"

        task = asyncio.create_task(attempt())
        # Cancel in the turn the refusal completes wait_for's waiter, before the task
        # resumes: the task's private _fut_waiter is the only way to see that turn.
        while not task.done():
            await asyncio.sleep(0)
            waiter = getattr(task, "_fut_waiter", None)
            if waiter is not None and waiter.done():
                task.cancel()
                break
        try:
            return await task
        except asyncio.CancelledError:
            return "cancelled"

    assert asyncio.run(go()) == "cancelled"


def test_close_to_a_peer_that_reads_nothing_drops_the_unsent_bytes() -> None:
    """A peer that stopped reading (paused, partitioned) leaves bytes in the transport's
    buffer; close() waited for them for TCP's retransmission timeout, and a resigning
    controller waited on its channel's close with it. It now gives up within a second."""

    async def go() -> float:
        accepted: list[asyncio.StreamWriter] = []

        async def silent(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.append(writer)  # never reads

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        connection = KafkaConnection("127.0.0.1", port, client_id="t")
        await connection.connect(timeout_s=5)
        assert connection._writer is not None
        connection._writer.write(b"\0" * (64 << 20))  # far more than the socket buffers
        await asyncio.sleep(0.1)
        assert connection._writer.transport.get_write_buffer_size() > 0
        started = time.monotonic()
        await asyncio.wait_for(connection.close(), 10)
        took = time.monotonic() - started
        for writer in accepted:
            writer.transport.abort()
        server.close()
        return took

    assert asyncio.run(go()) < 5
