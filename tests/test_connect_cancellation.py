"""A connection attempt cancelled just as it fails stays cancelled. Python 3.11's
``asyncio.wait_for`` raises the inner OSError instead of the cancellation when both
arrive in one turn of the loop; a caller that retries OSErrors then goes on for ever in a
task that was told to stop (the controller's request sender to a stopped broker did, and
the broker never exited)."""

from __future__ import annotations

import asyncio
import socket

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
