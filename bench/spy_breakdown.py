"""Where a broker's request CPU goes, from ``py-spy record --native --format raw`` stacks.

    .venv/bin/python bench/spy_breakdown.py DIR/<case>-broker-<id>.txt ...

(``bench/request_cpu.py --py-spy DIR`` writes these files and prints this breakdown.)
Only the event loop's thread counts (its stacks pass through ``replog/cli/main.py``).
Each sample goes to the innermost frame that names a part of the request path:

* ``syscall``: the thread inside a socket or file system call. py-spy samples wall
  time, and a write to a loopback socket is often caught waiting (the receiver's
  wake-up): these samples overstate the kernel's CPU, which ``/proc``'s ``stime``
  gives (``request_cpu.py`` prints it), so they are left out of the fractions;
* ``gc``: the cyclic garbage collector;
* ``metrics``: the request metrics and topic stats (``request_metrics.py``,
  ``topic_stats.py``, ``server/metrics.py``); ``loop lag``: its monitor's timer;
* ``encode``: a response's encoding (the hand codecs, kio's writer, the fetch
  handler's ``_encoded``/``_answers``); ``decode``: the request's (``decode_request``,
  kio's native reader, the fetch handler's ``_requested``, a session's read requests);
* ``transport``: the transport's write (uvloop's ``writelines`` but its system call);
* ``handler``: the handler and what it calls (replication, storage, fetch sessions,
  the metadata cache, the authorizer);
* ``request path``: ``server/network.py``, ``response_queue.py``, ``frames.py``;
* ``event loop``: the rest (uvloop's loop, callbacks, timers, task steps).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

_RULES = (
    ("gc", ("gc_collect", "gcmodule.c", "collect_with_callback")),
    (
        "syscall",
        ("writev (", "write (libc", "read (libc", "pread64", "pwrite64", "epoll_pwait"),
    ),
    ("metrics", ("request_metrics.py", "topic_stats.py", "server/metrics.py")),
    ("loop lag", ("loop_lag.py",)),
    ("encode", ("encode_", "kio/serial/writers", "_serialize.py", "_encoded (", "_answers (")),
    ("decode", ("decode_request", "_kio_native", "read_request", "decode_", "_requested (")),
    ("transport", ("writelines", "UVStream", "uv__try_write")),
    (
        "handler",
        (
            "server/handlers/",
            "replication/",
            "storage/",
            "fetch_session",
            "metadata_cache",
            "coordinator/",
            "security/",
            "authorizer",
        ),
    ),
    ("request path", ("network.py", "response_queue.py", "frames.py", "request_context.py")),
)
PARTS = tuple(name for name, _ in _RULES if name != "syscall") + ("event loop",)


def part_of(frames: list[str]) -> str:
    for frame in reversed(frames):
        for name, patterns in _RULES:
            if any(p in frame for p in patterns):
                return name
    return "event loop"


def breakdown(path: Path) -> tuple[dict[str, float], int, float]:
    """``(fraction of the non-syscall samples per part, samples, syscall fraction)``."""
    counts: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        if not any("cli/main.py" in f for f in frames):
            continue
        counts[part_of(frames)] += int(n)
    total = sum(counts.values())
    cpu = total - counts["syscall"]
    if not cpu:
        return {}, total, 0.0
    return (
        {part: counts[part] / cpu for part in PARTS if counts[part]},
        total,
        counts["syscall"] / total,
    )


def text(path: Path) -> str:
    parts, samples, syscall = breakdown(path)
    shares = "  ".join(
        f"{part} {share:.0%}" for part, share in sorted(parts.items(), key=lambda kv: -kv[1])
    )
    return f"{path.name}: {samples} samples ({syscall:.0%} in system calls, left out): {shares}"


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(text(Path(arg)))
