"""A request's Python cost in the broker, hot: one broker in this process, requests fed
to a connection whose transport is in memory.

    .venv/bin/python bench/request_path.py [--requests 5000] [--rounds 3] [--only CASE ...]
        [--profile DIR] [--src CHECKOUT] [--ab CHECKOUT]

``request_cpu.py`` measures what a request costs a broker process on this machine, from
``/proc``, in 10 ms ticks and moved by ±25% by the machine's other load. This script
measures the same request paths without the kernel and with the caches warm, so that a
change of a few microseconds of Python shows: a broker (``replog.server.broker.Broker``,
its real handlers, request metrics and ``/metrics`` port) runs in this process against a
real ZooKeeper; each case's request frames are handed to ``data_received`` of a
``KafkaConnectionProtocol`` whose transport keeps nothing (8 connections, round robin),
and the loop thread's CPU time (``time.thread_time``) is divided by the answers. Cases as
``request_cpu.py``'s: ``longpoll`` (Fetch v16 at the end of an empty partition, ``max_wait``
100 ms; fed 512 at a time, each batch waited for, the loop thread's time while idle for as
long subtracted), ``fetch1``, ``produce1``, ``metadata``; and ``apiversions`` (ApiVersions v3,
answered from bytes encoded once: the request path alone). Medians of ``--rounds``.

``--ab CHECKOUT`` runs this script's measurement in two child processes, one importing
replog from ``CHECKOUT/src`` and one from this tree (or ``--src``), alternated
``--rounds`` times; both share one ZooKeeper (a chroot each). ``--profile DIR`` writes
a cProfile (wall time: the loop does not wait but in ``longpoll``) of each case.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import free_port, say, work_dir

CASES = ("apiversions", "metadata", "produce1", "fetch1", "longpoll")
CONNECTIONS = 8
LONG_POLL_BATCH = 512  # 64 a connection: under MAX_IN_FLIGHT_PER_CONNECTION


class NullTransport:
    """What ``KafkaConnectionProtocol`` asks of a transport; writes are counted."""

    def __init__(self) -> None:
        self.responses = 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def writelines(self, buffers: Any) -> None:
        self.responses += 1

    def write(self, data: bytes) -> None:
        self.responses += 1

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


def frames_of(body: Any, count: int, client_id: str = "bench-path") -> list[bytes]:
    from replog.protocol import frames

    key, version = int(type(body).__api_key__), int(type(body).__version__)
    return [frames.encode_request(key, version, i, client_id, body) for i in range(count)]


async def run_cases(args: argparse.Namespace) -> dict[str, float]:
    """The child's measurement: a broker here, every case ``--rounds`` times."""
    import request_cpu as rc

    from replog.config import KafkaConfig
    from replog.protocol.apis import ApiKey, make, request_schema
    from replog.protocol.client import KafkaConnection
    from replog.server.broker import Broker
    from replog.server.network import KafkaConnectionProtocol

    port = free_port()
    config = KafkaConfig.from_properties(
        {
            "broker.id": "0",
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "log.dirs": str(Path(args.dir) / "data"),
            "zookeeper.connect": args.zookeeper,
            "metrics.port": str(free_port()),
        }
    )
    broker = Broker(config)
    await broker.start()
    try:
        admin = KafkaConnection("127.0.0.1", port, "bench-path")
        await admin.connect()
        deadline = time.monotonic() + 60
        while True:  # the broker is its own controller once it registered
            try:
                for topic in ("empty", "one", "produced"):
                    await rc.create_topic(admin, topic, 1)
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        _, empty_id = await rc.leader_and_id(admin, "empty")
        _, one_id = await rc.leader_and_id(admin, "one")
        await rc.leader_and_id(admin, "produced")
        assert rc._first_error(await admin.request(rc.produce_request("one", 1))) == 0
        await admin.close()
        versions = request_schema(ApiKey.API_VERSIONS, 3)
        bodies = {
            "apiversions": make(
                versions, client_software_name="bench", client_software_version="1"
            ),
            "metadata": rc.metadata_request("one"),
            "produce1": rc.produce_request("produced", 1),
            "fetch1": rc.fetch_request(one_id, 0, 0),
            "longpoll": rc.fetch_request(empty_id, 0, rc.LONG_POLL_MS),
        }
        server = broker.servers[0]
        loop = asyncio.get_running_loop()
        transports = [NullTransport() for _ in range(CONNECTIONS)]
        connections = []
        for transport in transports:
            connection = KafkaConnectionProtocol(server)
            connection.connection_made(transport)  # type: ignore[arg-type]
            connections.append(connection)

        def answered() -> int:
            return sum(t.responses for t in transports)

        async def feed(requests: list[bytes], batch: int | None) -> float:
            """Loop thread seconds for answering ``requests`` (``batch``: at most that
            many unanswered; the idle loop's time for as long is subtracted)."""
            idle = 0.0
            start_cpu = time.thread_time()
            if batch is None:
                for i, frame in enumerate(requests):
                    connections[i % CONNECTIONS].data_received(frame)
                await asyncio.sleep(0)
                return time.thread_time() - start_cpu
            for at in range(0, len(requests), batch):
                target = answered() + len(requests[at : at + batch])
                for i, frame in enumerate(requests[at : at + batch]):
                    connections[i % CONNECTIONS].data_received(frame)
                began = time.monotonic()
                while answered() < target:
                    await asyncio.sleep(0.002)
                idle += await idle_cpu(time.monotonic() - began)
            return time.thread_time() - start_cpu - idle

        async def idle_cpu(seconds: float) -> float:
            before = time.thread_time()
            await asyncio.sleep(seconds)
            return time.thread_time() - before

        results: dict[str, list[float]] = {case: [] for case in args.only}
        for case in args.only:  # a round to warm up (caches, first-use paths)
            n = min(args.requests, 600)
            await feed(frames_of(bodies[case], n), LONG_POLL_BATCH if case == "longpoll" else None)
        for _ in range(args.rounds):
            for case in args.only:
                requests = frames_of(bodies[case], args.requests)
                before = answered()
                profiler = None
                if args.profile is not None and not results[case]:
                    profiler = cProfile.Profile()
                    profiler.enable()
                seconds = await feed(requests, LONG_POLL_BATCH if case == "longpoll" else None)
                if profiler is not None:
                    profiler.disable()
                    Path(args.profile).mkdir(parents=True, exist_ok=True)
                    profiler.dump_stats(str(Path(args.profile) / f"{args.tag}-{case}.prof"))
                got = answered() - before
                assert got == len(requests), (case, got, len(requests))
                results[case].append(seconds / got * 1e6)
        del loop
        for connection in connections:
            connection.connection_lost(None)
        return {case: statistics.median(v) for case, v in results.items()} | {
            f"{case}-all": v for case, v in results.items()
        }
    finally:
        await broker.stop()


def child(args: argparse.Namespace) -> None:
    import gc

    import uvloop

    gc.set_threshold(50_000, 20, 10)  # as the broker's command line sets it
    uvloop.install()
    import logging

    logging.basicConfig(level=logging.WARNING)
    result = asyncio.run(run_cases(args))
    print("RESULT " + json.dumps(result), flush=True)


def spawn(args: argparse.Namespace, tree: Path | None, tag: str, zk: str, out: Path) -> dict:
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(tree.resolve() / "src"), env.get("PYTHONPATH", "")) if p
        )
    directory = out / f"{tag}-{time.monotonic_ns()}"
    directory.mkdir(parents=True)
    command = [
        sys.executable,
        __file__,
        "--child",
        "--zookeeper",
        f"{zk}/{directory.name}",
        "--dir",
        str(directory),
        "--tag",
        tag,
        "--requests",
        str(args.requests),
        "--rounds",
        str(args.rounds),
        "--only",
        *args.only,
    ]
    if args.profile is not None:
        command += ["--profile", str(args.profile)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise RuntimeError(f"{tag}: no result\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--profile", type=Path)
    parser.add_argument("--src", type=Path, help="replog from this checkout's src/")
    parser.add_argument("--ab", type=Path, help="alternate with a broker from this checkout")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--zookeeper", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    parser.add_argument("--tag", default="this", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    from replog.cluster.zookeeper import start_zookeeper, stop_zookeeper

    print("command: .venv/bin/python " + " ".join(["bench/request_path.py", *sys.argv[1:]]))
    with open("/proc/loadavg") as f:
        print(f"load average {f.read().split()[0]}", flush=True)
    with work_dir("request-path") as out:
        zk = start_zookeeper(out / "zookeeper", free_port())
        try:
            sides: list[tuple[str, Path | None]] = [("after" if args.ab else "this", args.src)]
            if args.ab is not None:
                sides.insert(0, ("before", args.ab))
            runs: dict[str, list[dict]] = {tag: [] for tag, _ in sides}
            for run in range(args.rounds if args.ab else 1):
                for tag, tree in sides if run % 2 == 0 else list(reversed(sides)):
                    say(f"run {run + 1}: {tag}")
                    one = argparse.Namespace(
                        **{**vars(args), "rounds": 1 if args.ab else args.rounds}
                    )
                    runs[tag].append(spawn(one, tree, tag, zk.connect, out))
        finally:
            stop_zookeeper(zk)
    print(f"\nloop thread CPU per request (µs, hot), {args.requests} requests a case")
    header = f"{'case':<13}" + "".join(f"{tag:>9}" for tag in runs)
    print(header + ("  after/before   runs before | after" if args.ab else "   rounds"))
    for case in args.only:
        medians = {tag: statistics.median(r[case] for r in rs) for tag, rs in runs.items()}
        line = f"{case:<13}" + "".join(f"{v:>9.1f}" for v in medians.values())
        if args.ab:
            ratio = medians["after"] / medians["before"]
            line += f"{ratio:>14.2f}   " + " ".join(f"{r[case]:.1f}" for r in runs["before"])
            line += " | " + " ".join(f"{r[case]:.1f}" for r in runs["after"])
        else:
            line += "   " + " ".join(f"{v:.1f}" for v in runs["this"][0][f"{case}-all"])
        print(line)


if __name__ == "__main__":
    main()
