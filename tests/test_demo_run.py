"""``make demo``'s full flow in short form, so the demo cannot silently break.

``python -m replog.demo`` runs as `make demo` does (its own ZooKeeper, 3 brokers, the
console, Spark on spark://, a broker killed and restarted) with a short, slow workload; the
test reads its final table (stdout) and ``summary.json``: every record acknowledged, in
the log and counted once, the kill recorded, and nothing but the demo's own lines on the
terminal (librdkafka's and Spark's go to the run directory's logs).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from replog.cluster.launcher import LocalCluster
from replog.cluster.spark_cluster import StandaloneSpark


def _run_demo(
    command: list[str], env: dict[str, str], out: Path, timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """Run the demo; past ``timeout_s`` interrupt it (SIGINT: its ``finally`` stops its
    processes by pid) and fail. Whatever it leaves running (it was killed) is stopped by
    pid from its run directory: a demo killed by a plain timeout left its ZooKeeper, three
    brokers, the console and a Spark cluster running for the rest of the session."""
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                stdout, stderr = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                stdout, stderr = proc.communicate()
            pytest.fail(f"the demo did not end within {timeout_s:.0f} s\n{stdout}{stderr}")
        return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)
    finally:
        for run_dir in out.glob("run-*"):
            if (run_dir / "cluster" / "cluster.json").exists():
                LocalCluster(run_dir / "cluster").down()
            if (run_dir / "spark-standalone").is_dir():
                StandaloneSpark(run_dir / "spark-standalone").down()


def test_short_demo_passes_and_reports_its_table(tmp_path: Path) -> None:
    """On a ``spark://`` cluster (``--spark standalone``: executors in worker processes),
    the stream goes on through the broker kill. (``make demo``'s default, ``local[2]``,
    differs only in the master; every Spark test runs on both.)"""
    out = tmp_path / "demo-out"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    command = [
        sys.executable,
        "-m",
        "replog.demo",
        "--duration",
        "12",
        "--rate",
        "300",
        "--restart-after",
        "4",
        "--out",
        str(out),
        "--spark",
        "standalone",
    ]
    proc = _run_demo(command, env, out, timeout_s=280)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "RESULT: PASS" in proc.stdout
    [run_dir] = list(out.iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    produced = summary["records_produced"]
    assert produced == 12 * 300
    assert summary["records_acknowledged"] == produced
    assert summary["records_in_log"] == produced
    assert summary["records_consumed"] == produced
    assert summary["lost"] == 0 and summary["counted_twice"] == 0
    assert summary["timeline"]["killed_broker"] is not None
    assert summary["timeline"]["restart_at"] > summary["timeline"]["kill_at"]
    # The table the person reads agrees with the summary.
    table = proc.stdout
    assert re.search(rf"records produced\s+{produced:,}", table)
    assert re.search(r"lost\s+0\b", table) and re.search(r"counted twice\s+0\b", table)
    # librdkafka's lines ("%3|...|FAIL|...") and the JVM's go to the logs, not the terminal.
    terminal = proc.stdout + proc.stderr
    assert not re.search(r"^%\d\|", terminal, re.MULTILINE), terminal
    assert "watch it live: http://127.0.0.1:" in proc.stderr
    assert (run_dir / "native-output.log").exists() and (run_dir / "spark.log").exists()
