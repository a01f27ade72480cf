"""The floor under a broker's CPU per request: the listener with nothing behind it.

    .venv/bin/python bench/request_floor.py [--rate 400] [--window 3] [--windows 4] [--src CHECKOUT]
        [--ab CHECKOUT]

Two servers in processes of their own, on uvloop as the broker runs: ``raw``, an
``asyncio.Protocol`` that answers each request's bytes with 8 bytes and nothing else
(uvloop and the kernel's loopback TCP: the least any Python server on this machine
costs), and ``replog``, ``replog.server.network.KafkaServer`` with a handler that answers
ApiVersions v0 at once with 4 bytes (frames cut and decoded, the request context, the
response queue, the request metrics' observer). One client process drives each at
``--rate`` requests a second over 8 connections, the two alternated window by window;
the server's ``utime + stime`` from ``/proc`` over a load window minus an idle window,
per answered request (medians). ``--src`` runs the ``replog`` server from another
checkout's ``src/``; ``--ab CHECKOUT`` adds a third server, ``before``, that is replog's
from ``CHECKOUT/src``, alternated with the other two. What ``request_cpu.py`` measures
above this floor is the handlers'.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
CONNECTIONS = 8
API_VERSIONS = 18


def cpu_split(pid: int) -> tuple[float, float]:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICKS, int(fields[12]) / TICKS


# -- the servers (run as ``request_floor.py --serve raw|replog``) ----------------------


class RawEcho:
    """Answers each read with 8 bytes: the request's correlation id, twice."""

    def connection_made(self, transport) -> None:  # type: ignore[no-untyped-def]
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        correlation_id = data[8:12]
        self.transport.write(b"\x00\x00\x00\x08" + correlation_id + correlation_id)

    def eof_received(self) -> None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        return None


async def serve(kind: str) -> None:
    loop = asyncio.get_running_loop()
    if kind == "raw":
        server = await loop.create_server(RawEcho, "127.0.0.1", 0)  # type: ignore[arg-type]
        port = server.sockets[0].getsockname()[1]
    else:
        from replog.protocol import frames
        from replog.server.network import KafkaServer

        async def handle(ctx, body):  # type: ignore[no-untyped-def]
            return frames.EncodedBody(struct.pack(">i", ctx.correlation_id))

        replog = KafkaServer(
            "127.0.0.1",
            0,
            {API_VERSIONS: handle},
            socket_request_max_bytes=1 << 20,
            on_unsupported_version=lambda exc: None,
            request_observer=lambda context, written_s: None,
        )
        await replog.start()
        port = replog.port
    print(port, flush=True)
    await loop.run_in_executor(None, sys.stdin.read)  # until the driver closes our stdin


# -- the driver ---------------------------------------------------------------------------


class Side:
    def __init__(self, kind: str, src: Path | None, name: str | None = None) -> None:
        env = dict(os.environ)
        if src is not None and kind == "replog":
            env["PYTHONPATH"] = os.pathsep.join(
                [str(src.resolve() / "src"), env.get("PYTHONPATH", "")]
            )
        self.kind = name or kind
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve", kind],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        assert self.process.stdout is not None
        self.port = int(self.process.stdout.readline())
        self.answered = 0
        self.writers: list[asyncio.StreamWriter] = []
        self.readers: list[asyncio.Task[None]] = []
        self.per_request: list[float] = []
        self.kernel: list[float] = []

    async def connect(self) -> None:
        for _ in range(CONNECTIONS):
            reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            self.writers.append(writer)
            self.readers.append(asyncio.create_task(self._read(reader)))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                await reader.readexactly(size)
                self.answered += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            return

    async def window(self, rate: float, seconds: float) -> None:
        from replog.protocol import frames

        pid = self.process.pid
        user, system = cpu_split(pid)
        await asyncio.sleep(seconds)
        idle = sum(cpu_split(pid)) - user - system
        answered, (user, system) = self.answered, cpu_split(pid)
        start = time.monotonic()
        next_at, i = start, 0
        while time.monotonic() - start < seconds:
            next_at += 1 / rate
            delay = next_at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            request = frames.encode_request_body(API_VERSIONS, 0, i, "floor", b"")
            self.writers[i % CONNECTIONS].write(request)
            i += 1
        await asyncio.sleep(0.05)  # the last answers
        user2, system2 = cpu_split(pid)
        busy = user2 + system2 - user - system
        count = self.answered - answered
        self.per_request.append((busy - idle) / max(count, 1))
        self.kernel.append((system2 - system) / busy if busy else float("nan"))

    async def close(self) -> None:
        for w in self.writers:
            w.close()
        for t in self.readers:
            t.cancel()
        await asyncio.gather(*self.readers, return_exceptions=True)

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


async def drive(sides: list[Side], args: argparse.Namespace) -> None:
    for side in sides:
        await side.connect()
    try:
        for window in range(args.windows):
            for side in sides if window % 2 == 0 else reversed(sides):
                await side.window(args.rate, args.window)
                print(
                    f"  {side.kind} window {window + 1}: {side.per_request[-1] * 1e6:.0f} "
                    f"us/request ({side.kernel[-1]:.0%} kernel)",
                    flush=True,
                )
    finally:
        for side in sides:
            await side.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--serve", choices=("raw", "replog"), help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, default=400)
    parser.add_argument("--window", type=float, default=3)
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--src", type=Path, help="the replog server from this checkout's src/")
    parser.add_argument("--ab", type=Path, help="also replog's server from this checkout")
    args = parser.parse_args()
    import uvloop

    uvloop.install()
    if args.serve:
        asyncio.run(serve(args.serve))
        return
    print("command: .venv/bin/python " + " ".join(["bench/request_floor.py", *sys.argv[1:]]))
    with open("/proc/loadavg") as f:
        print(f"load average {f.read().split()[0]}")
    sides: list[Side] = []
    try:
        for kind in ("raw", "replog"):
            sides.append(Side(kind, args.src))
        if args.ab is not None:
            sides.insert(1, Side("replog", args.ab, "before"))
        asyncio.run(drive(sides, args))
    finally:
        for side in sides:
            side.stop()
    print(
        f"\nserver CPU per request (µs), median of {args.windows} windows of "
        f"{args.window:g} s at {args.rate:g}/s"
    )
    for side in sides:
        print(
            f"{side.kind:<8}{statistics.median(side.per_request) * 1e6:>6.0f}  "
            f"kernel {statistics.median(side.kernel):.0%}  windows "
            + " ".join(f"{v * 1e6:.0f}" for v in side.per_request)
        )


if __name__ == "__main__":
    main()
