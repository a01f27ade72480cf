"""Local processes by pid: free ports, whether a pid still lives (and runs what we
started), starting a command in a session of its own, stopping it by its pid, and the
tail of its log. Used by ``LocalCluster``, the Spark cluster launcher and the tests;
nothing here stops a process by name.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); reap it if it is ours.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return _not_zombie(pid)
    return done == 0


def _not_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def cmdline_names(pid: int, marker: str) -> bool:
    """Whether ``pid``'s command line names ``marker`` (True where /proc cannot tell)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return marker.encode() in f.read()
    except FileNotFoundError:
        return False
    except OSError:
        return True


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def spawn(command: list[str], log_path: Path, env: dict[str, str] | None = None) -> int:
    """Start ``command`` in a session of its own (a terminal's signals do not reach it),
    output appended to ``log_path``; its pid, to stop it by."""
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    return proc.pid


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def stop_pid(pid: int, timeout_s: float) -> None:
    """SIGTERM to ``pid``, SIGKILL past ``timeout_s`` (SIGCONT first: it may be paused)."""
    if not pid_alive(pid):
        return
    for sig in (signal.SIGCONT, signal.SIGTERM):
        os.kill(pid, sig)
    if not wait_dead(pid, timeout_s):
        os.kill(pid, signal.SIGKILL)
        wait_dead(pid, 10)


def wait_dead(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def tail_log(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
