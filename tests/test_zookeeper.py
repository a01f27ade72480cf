"""The ZooKeeper launcher against real ZooKeeper processes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from fixtures.processes import free_port
from replog.cluster.zookeeper import (
    ZooKeeperServer,
    ZooKeeperStartError,
    find_zookeeper_classpath,
    four_letter_word,
    start_zookeeper,
    stop_zookeeper,
)


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _listen_addresses(port: int) -> set[str]:
    """Local addresses listening on ``port``, from /proc/net/tcp{,6} (state 0A = LISTEN)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            address, port_hex = fields[1].rsplit(":", 1)
            if int(port_hex, 16) == port and fields[3] == "0A":
                found.add(address)
    return found


LOOPBACK_V4 = "0100007F"  # 127.0.0.1 as /proc/net/tcp prints it
LOOPBACK_V4_IN_V6 = "0000000000000000FFFF00000100007F"  # ::ffff:127.0.0.1


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    server = start_zookeeper(tmp_path / "zk", free_port())
    try:
        yield server
    finally:
        stop_zookeeper(server)


def test_classpath_is_minimal_and_complete() -> None:
    entries, backend = find_zookeeper_classpath()
    assert entries, "no class path"
    names = [Path(e).name for e in entries]
    assert any(n.startswith("zookeeper-") and "jute" not in n for n in names) or any(
        e.endswith("*") for e in entries
    )
    for entry in entries:
        assert entry.endswith("*") or Path(entry).is_file(), entry
    if not any(e.endswith("*") for e in entries):
        assert backend is not None


def test_server_serves_on_loopback_only(own_server: ZooKeeperServer) -> None:
    assert own_server.connect == f"127.0.0.1:{own_server.port}"
    assert "Mode: standalone" in four_letter_word(own_server.port, "srvr")
    addresses = _listen_addresses(own_server.port)
    assert addresses, "nothing listens on the port"
    assert addresses <= {LOOPBACK_V4, LOOPBACK_V4_IN_V6}, addresses
    assert own_server.log_path.exists()


def test_stop_by_pid_and_restart_keeps_data(tmp_path: Path) -> None:
    port = free_port()
    server = start_zookeeper(tmp_path / "zk", port)
    try:
        client = KazooClient(hosts=server.connect)
        client.start(timeout=10)
        client.create("/kept", b"value")
        client.stop()
        client.close()
    finally:
        stop_zookeeper(server.pid)  # by pid only
    assert not _alive(server.pid)
    with pytest.raises(OSError):
        four_letter_word(port, "ruok")
    stop_zookeeper(server)  # idempotent

    again = start_zookeeper(tmp_path / "zk", port)
    try:
        client = KazooClient(hosts=again.connect)
        client.start(timeout=10)
        assert client.get("/kept")[0] == b"value"
        client.stop()
        client.close()
    finally:
        stop_zookeeper(again)
    assert not _alive(again.pid)


def test_start_failure_raises_with_log_tail(tmp_path: Path) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        with pytest.raises(ZooKeeperStartError) as failure:
            start_zookeeper(tmp_path / "zk", port, wait_s=30)
    assert "Address already in use" in str(failure.value) or "BindException" in str(failure.value)


def _children_of(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found.extend(int(child) for child in text)
    return found


def test_foreground_forwards_sigterm(tmp_path: Path) -> None:
    port = free_port()
    code = (
        "import sys; from pathlib import Path;"
        "from replog.cluster.zookeeper import run_zookeeper_foreground;"
        f"sys.exit(run_zookeeper_foreground(Path({str(tmp_path / 'zk')!r}), {port}))"
    )
    log = open(tmp_path / "fg.log", "wb")
    runner = subprocess.Popen(
        [sys.executable, "-c", code], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    java: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if "Mode: standalone" in four_letter_word(port, "srvr"):
                    break
            except OSError:
                pass
            assert runner.poll() is None, (tmp_path / "fg.log").read_text()
            assert time.monotonic() < deadline, "foreground ZooKeeper never served"
            time.sleep(0.05)
        java = _children_of(runner.pid)
        assert len(java) == 1
        runner.send_signal(signal.SIGTERM)
        exit_code = runner.wait(30)
        assert exit_code == 128 + signal.SIGTERM  # the JVM's exit code, passed through
        assert not _alive(java[0])
    finally:
        log.close()
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        for pid in java:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
