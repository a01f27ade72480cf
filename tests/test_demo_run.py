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
import subprocess
import sys
from pathlib import Path


def test_short_demo_passes_and_reports_its_table(tmp_path: Path) -> None:
    """On a ``spark://`` cluster (``--spark standalone``: executors in worker processes),
    the stream goes on through the broker kill. (``make demo``'s default, ``local[2]``,
    differs only in the master; every Spark test runs on both.)"""
    out = tmp_path / "demo-out"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.run(
        [
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
        ],
        capture_output=True,
        text=True,
        timeout=280,
        env=env,
    )
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
