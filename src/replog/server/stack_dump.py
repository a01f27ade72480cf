"""A broker's stacks on SIGUSR1: every asyncio task's and every thread's, written to stderr
(the broker's log), to see what a broker that does not stop is waiting on.
``replog broker start`` installs it; ``LocalCluster`` sends SIGUSR1 to a broker that
outlived its stop timeout before it kills it, and waits for ``STACKS_DUMPED``.

Concurrency: ``dump_stacks`` runs on the event loop (a signal handler added with
``loop.add_signal_handler``), so a loop that is stuck writes nothing.
"""

from __future__ import annotations

import asyncio
import faulthandler
import io
import signal
import sys
from typing import Any

STACKS_DUMPED = "--- end of stacks ---"
"""The last line ``dump_stacks`` writes."""


def await_chain(coro: Any) -> list[str]:
    """Where a suspended coroutine waits, outermost first: each coroutine it awaits, down to
    the innermost (``Task.print_stack`` shows the outermost frame only)."""
    lines = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            code = frame.f_code
            lines.append(f"{code.co_filename}:{frame.f_lineno} in {code.co_name}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return lines


def dump_stacks() -> None:
    out = io.StringIO()
    tasks = asyncio.all_tasks()
    out.write(f"--- {len(tasks)} asyncio tasks ---\n")
    for task in tasks:
        out.write(f"{task!r}\n")
        for line in await_chain(task.get_coro()):
            out.write(f"  {line}\n")
    out.write("--- threads ---\n")
    sys.stderr.write(out.getvalue())
    sys.stderr.flush()
    faulthandler.dump_traceback(all_threads=True)
    sys.stderr.write(f"{STACKS_DUMPED}\n")
    sys.stderr.flush()


def install(loop: asyncio.AbstractEventLoop) -> None:
    """``dump_stacks`` on SIGUSR1."""
    loop.add_signal_handler(signal.SIGUSR1, dump_stacks)
