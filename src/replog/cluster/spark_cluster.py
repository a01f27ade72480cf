"""A standalone Spark cluster (``spark://``) on this machine, from the pyspark distribution.

    cluster = StandaloneSpark(Path("/tmp/spark"))
    master = cluster.up(workers=2)      # "spark://127.0.0.1:PORT"
    ...
    cluster.down()

One master and ``workers`` workers, each a JVM started with pyspark's ``bin/spark-class``
(which ``exec``s java, so the pid we start is the JVM's), bound to 127.0.0.1, logs and
work directories under the given directory, pids and ports in ``spark.json``. Stopped by
pid (SIGTERM, then SIGKILL), never by name. Executors run the driver's Python
(``spark.pyspark.python``), so they import replog from the same environment.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from replog.cluster.processes import free_port, pid_alive, spawn, tail_log, wait_dead

STATE_FILE = "spark.json"


def session_settings(master: str) -> dict[str, str]:
    """The SparkSession settings for ``master``: on a ``spark://`` cluster, executors of
    512 MB, two cores in all, running this Python; nothing for ``local[*]``."""
    if not master.startswith("spark://"):
        return {}
    return {
        "spark.executor.memory": "512m",
        "spark.cores.max": "2",
        "spark.pyspark.python": sys.executable,
    }


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class StandaloneSpark:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        path = directory / STATE_FILE
        self.state: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}

    @property
    def master_url(self) -> str | None:
        port = self.state.get("master_port")
        return f"spark://127.0.0.1:{port}" if port else None

    @property
    def web_url(self) -> str | None:
        port = self.state.get("master_webui_port")
        return f"http://127.0.0.1:{port}" if port else None

    def _save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / STATE_FILE).write_text(json.dumps(self.state, indent=2))

    def _start(self, name: str, args: list[str]) -> int:
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_HOME": str(spark_home())}
        env.pop("SPARK_MASTER_HOST", None)
        return spawn(
            [str(spark_home() / "bin" / "spark-class"), *args], self.dir / f"{name}.log", env
        )

    def up(self, workers: int = 2, cores: int = 1, memory: str = "1g", wait_s: float = 90) -> str:
        """Start the master and ``workers`` workers; wait until every worker registered."""
        self.dir.mkdir(parents=True, exist_ok=True)
        port, webui = free_port(), free_port()
        self.state = {"master_port": port, "master_webui_port": webui, "workers": []}
        self.state["master_pid"] = self._start(
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(webui),
            ],
        )
        self._save()
        for i in range(workers):
            work_dir = self.dir / f"worker-{i}"
            work_dir.mkdir(exist_ok=True)
            pid = self._start(
                f"worker-{i}",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    f"spark://127.0.0.1:{port}",
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    str(cores),
                    "--memory",
                    memory,
                    "--webui-port",
                    str(free_port()),
                    "--work-dir",
                    str(work_dir),
                ],
            )
            self.state["workers"].append(pid)
            self._save()
        deadline = time.monotonic() + wait_s
        while self.alive_workers() < workers:
            dead = [p for p in self.pids() if not pid_alive(p)]
            if dead or time.monotonic() > deadline:
                logs = "\n".join(tail_log(p) for p in sorted(self.dir.glob("*.log")))
                self.down()
                raise RuntimeError(f"Spark standalone cluster did not come up:\n{logs}")
            time.sleep(0.5)
        url = self.master_url
        assert url is not None
        return url

    def pids(self) -> list[int]:
        return [p for p in [self.state.get("master_pid"), *self.state.get("workers", [])] if p]

    def alive_workers(self) -> int:
        """Workers the master lists as ALIVE (its web UI's JSON); 0 if it does not answer."""
        if not self.web_url:
            return 0
        try:
            with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as response:
                status = json.loads(response.read())
        except (OSError, ValueError):
            return 0
        return int(status.get("aliveworkers", 0))

    def down(self) -> None:
        """Stop the workers, then the master, by pid."""
        for pid in [*self.state.get("workers", []), self.state.get("master_pid")]:
            if pid and pid_alive(pid):
                os.kill(pid, signal.SIGTERM)
                if not wait_dead(pid, 20):
                    os.kill(pid, signal.SIGKILL)
                    wait_dead(pid, 10)
        self.state = {}
        if self.dir.exists():
            self._save()
