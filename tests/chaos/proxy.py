"""A userspace TCP proxy that delays and loses, for the faults ``tc netem`` would make.

    python -m chaos.proxy --listen 10.77.5.20:9192 --target 10.77.5.20:9092 --control-fd 5

One process (started and stopped by its pid), forwarding every connection it accepts on
``--listen`` to ``--target``. It starts transparent; a controller switches it at run time
through ``--control-fd``, an inherited stream socket (one end of a ``socketpair``): each
line written to it is a JSON object whose keys change the mode, and the proxy answers each
line with one JSON line of the mode now in force and its counters, so the caller knows the
change took effect before it goes on. ``{}`` only asks.

- ``delay_ms``: every chunk read from either side is written to the other side this long
  after it was read (chunks keep their order; the delay adds to each direction, not to
  throughput);
- ``loss``: the share of new connections and of chunks that are "lost". TCP hides lost
  packets behind retransmission, so a loss is modelled as what a lossy link does to a
  connection: it stalls (nothing more forwarded either way) for ``stall_ms``, then both
  ends are reset (RST, by ``SO_LINGER`` 0);
- ``seed``: reseeds the proxy's random choices (the proxy starts from ``--seed``).

``ChaosCluster(proxies=True)`` starts one inside each broker's namespace and sends the
other brokers' connections to its broker through it (``Network.redirect``), so the
inter-broker traffic (followers' fetches, the controller's requests) crosses it and the
clients' does not.

Concurrency: one asyncio loop; the mode is read by every connection's tasks and changed
only by the control task, between awaits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

CHUNK = 65536


@dataclass
class Mode:
    delay_ms: int = 0
    loss: float = 0.0
    stall_ms: int = 2000


@dataclass
class Counters:
    accepted: int = 0  # connections accepted
    open: int = 0  # connections forwarding now
    chunks: int = 0  # chunks forwarded
    delayed: int = 0  # of which with a delay
    lost: int = 0  # connections stalled and reset by the loss
    refused: int = 0  # connections the target refused (reset at once)


class Connection:
    """Both directions of one accepted connection; ``lose`` stalls and resets them."""

    def __init__(self, proxy: Proxy, down: asyncio.StreamWriter) -> None:
        self.proxy = proxy
        self.writers = [down]
        self.stalled = False
        self.done = asyncio.Event()

    async def lose(self) -> None:
        if self.stalled:
            return
        self.stalled = True
        self.proxy.counters.lost += 1
        await asyncio.sleep(self.proxy.mode.stall_ms / 1000)
        self.reset()

    def reset(self) -> None:
        for writer in self.writers:
            _reset(writer)
        self.done.set()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST rather than FIN."""
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class Proxy:
    def __init__(self, target: tuple[str, int], seed: int) -> None:
        self.target = target
        self.mode = Mode()
        self.counters = Counters()
        self.rng = random.Random(seed)
        self.port = 0  # the port listened on, once listening
        self._tasks: set[asyncio.Task[None]] = set()

    def _lost(self) -> bool:
        return self.mode.loss > 0 and self.rng.random() < self.mode.loss

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.counters.accepted += 1
        connection = Connection(self, writer)
        if self._lost():
            await connection.lose()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            self.counters.refused += 1
            connection.reset()
            return
        connection.writers.append(up_writer)
        self.counters.open += 1
        try:
            pipes = [
                asyncio.ensure_future(self._pipe(connection, reader, up_writer)),
                asyncio.ensure_future(self._pipe(connection, up_reader, writer)),
            ]
            ended = asyncio.ensure_future(connection.done.wait())
            await asyncio.wait([*pipes, ended], return_when=asyncio.FIRST_COMPLETED)
            if not connection.stalled:  # one side closed: close the other once flushed
                await asyncio.wait(pipes)
            for task in (*pipes, ended):
                task.cancel()
        finally:
            self.counters.open -= 1
            if not connection.stalled:
                for w in connection.writers:
                    w.close()

    async def _pipe(
        self, connection: Connection, source: asyncio.StreamReader, sink: asyncio.StreamWriter
    ) -> None:
        """Read chunks, hand each to a writer task with the time it is due."""
        queue: asyncio.Queue[tuple[float, bytes, bool] | None] = asyncio.Queue()
        writer = asyncio.ensure_future(self._deliver(connection, queue, sink))
        try:
            while not connection.stalled:
                try:
                    data = await source.read(CHUNK)
                except (ConnectionError, OSError):
                    data = b""
                if connection.stalled:
                    break
                if not data:
                    queue.put_nowait(None)
                    await writer
                    return
                if self._lost():
                    self._spawn(connection.lose())
                    break
                delay = self.mode.delay_ms / 1000
                queue.put_nowait((time.monotonic() + delay, data, delay > 0))
            await connection.done.wait()
        finally:
            writer.cancel()

    async def _deliver(
        self,
        connection: Connection,
        queue: asyncio.Queue[tuple[float, bytes, bool] | None],
        sink: asyncio.StreamWriter,
    ) -> None:
        try:
            while (item := await queue.get()) is not None:
                due, data, delayed = item
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if connection.stalled:
                    return
                sink.write(data)
                await sink.drain()
                self.counters.chunks += 1
                self.counters.delayed += delayed
            if not connection.stalled:
                with contextlib.suppress(OSError):
                    sink.write_eof()
        except (ConnectionError, OSError):
            connection.reset()

    def _spawn(self, coroutine) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def control(self, request: dict) -> dict:
        for key in ("delay_ms", "stall_ms"):
            if key in request:
                setattr(self.mode, key, max(0, int(request[key])))
        if "loss" in request:
            self.mode.loss = min(1.0, max(0.0, float(request["loss"])))
        if "seed" in request:
            self.rng.seed(int(request["seed"]))
        return {**asdict(self.mode), **asdict(self.counters), "port": self.port}


async def serve(listen: tuple[str, int], target: tuple[str, int], control_fd: int, seed: int):
    proxy = Proxy(target, seed)
    server = await asyncio.start_server(proxy.accept, *listen, reuse_address=True)
    proxy.port = server.sockets[0].getsockname()[1]
    print(f"proxy {listen[0]}:{listen[1]} -> {target[0]}:{target[1]} (seed {seed})", flush=True)
    control = socket.socket(fileno=control_fd)
    reader, writer = await asyncio.open_connection(sock=control)
    while line := await reader.readline():
        try:
            answer = proxy.control(json.loads(line))
        except (ValueError, TypeError) as exc:
            answer = {"error": str(exc)}
        print(f"{time.strftime('%H:%M:%S')} control {line.decode().strip()} -> {answer}")
        sys.stdout.flush()
        writer.write(json.dumps(answer).encode() + b"\n")
        await writer.drain()
    # the controller went away: go on forwarding as set, until stopped by pid
    async with server:
        await server.serve_forever()


class ProxyProcess:
    """The harness's handle on one proxy process: started with ``prefix`` (``ip netns exec
    NS``, which execs in place, so the pid is the proxy's own), switched by ``set``,
    stopped by pid.

    Concurrency: one thread calls ``set`` at a time (the campaign's, or a test's)."""

    def __init__(
        self,
        listen: tuple[str, int],
        target: tuple[str, int],
        log_path,
        prefix: list[str] | None = None,
        seed: int = 0,
    ) -> None:
        ours, theirs = socket.socketpair()
        self._control = ours
        self._lines = ours.makefile("rb")
        command = [
            *(prefix or []),
            sys.executable,
            "-m",
            "chaos.proxy",
            f"--listen={listen[0]}:{listen[1]}",
            f"--target={target[0]}:{target[1]}",
            f"--control-fd={theirs.fileno()}",
            f"--seed={seed}",
        ]
        env = dict(os.environ)
        tests = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (tests, env.get("PYTHONPATH")) if p)
        try:
            with open(log_path, "ab") as log:
                self.process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    pass_fds=(theirs.fileno(),),
                    env=env,
                    start_new_session=True,
                )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.pid = self.process.pid
        self.listen = listen

    def set(self, timeout_s: float = 10, **mode) -> dict:
        """Change the mode (``delay_ms``, ``loss``, ``stall_ms``, ``seed``; none: only ask)
        and return the proxy's answer once it is in force."""
        self._control.settimeout(timeout_s)
        self._control.sendall(json.dumps(mode).encode() + b"\n")
        line = self._lines.readline()
        if not line:
            raise ConnectionError(f"proxy (pid {self.pid}) closed its control socket")
        answer = json.loads(line)
        if "error" in answer:
            raise ValueError(f"proxy (pid {self.pid}) refused {mode}: {answer['error']}")
        return answer

    def wait_listening(self, timeout_s: float = 10) -> int:
        """Until the proxy answers on its control socket (it listens before reading it);
        the port it listens on (``--listen`` may say 0)."""
        return self.set(timeout_s)["port"]

    def stop(self) -> str | None:
        """SIGTERM then SIGKILL by pid; the control socket closed. An error, or None."""
        error = None
        try:
            if self.process.poll() is None:
                os.kill(self.pid, signal.SIGTERM)
                try:
                    self.process.wait(5)
                except subprocess.TimeoutExpired:
                    os.kill(self.pid, signal.SIGKILL)
                    self.process.wait(5)
        except (OSError, subprocess.TimeoutExpired) as exc:
            error = f"stopping proxy (pid {self.pid}): {exc}"
        finally:
            self._lines.close()
            self._control.close()
        return error


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", type=_address, required=True, help="HOST:PORT")
    parser.add_argument("--target", type=_address, required=True, help="HOST:PORT")
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    asyncio.run(serve(args.listen, args.target, args.control_fd, args.seed))


if __name__ == "__main__":
    main()
