"""A local cluster: ZooKeeper and N broker processes under one directory.

Layout of DIR::

    cluster.json            ports, ZooKeeper address, broker overrides
    zookeeper/              data, zookeeper.pid, zookeeper.log (when we started it)
    broker-<id>/            server.properties, data/, broker.pid, broker.log

Every process is started in its own session and stopped by its own pid.
Used by ``replog cluster ...``, by the tests and by ``make demo``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kazoo.client import KazooClient
from kio.schema.metadata.v8.request import MetadataRequest

from replog.cluster.zookeeper import start_zookeeper, stop_zookeeper
from replog.protocol.client import KafkaConnection

STATE_FILE = "cluster.json"


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


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


@dataclass
class BrokerStatus:
    broker_id: int
    pid: int | None
    listener: str
    alive: bool
    registered: bool
    controller: bool


class LocalCluster:
    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        self.state: dict = {}
        if (self.dir / STATE_FILE).exists():
            self.state = json.loads((self.dir / STATE_FILE).read_text())

    # -- state ----------------------------------------------------------------

    @property
    def zookeeper_connect(self) -> str:
        return self.state["zookeeper"]

    @property
    def broker_ids(self) -> list[int]:
        return sorted(int(b) for b in self.state.get("brokers", {}))

    def port(self, broker_id: int) -> int:
        return int(self.state["brokers"][str(broker_id)]["port"])

    def bootstrap_servers(self, broker_ids: list[int] | None = None) -> str:
        ids = broker_ids if broker_ids is not None else self.broker_ids
        return ",".join(f"127.0.0.1:{self.port(b)}" for b in ids)

    def broker_dir(self, broker_id: int) -> Path:
        return self.dir / f"broker-{broker_id}"

    def broker_pid(self, broker_id: int) -> int | None:
        return _read_pid(self.broker_dir(broker_id) / "broker.pid")

    def _save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(self.state, indent=2))
        tmp.replace(self.dir / STATE_FILE)

    # -- up / down --------------------------------------------------------------

    def up(
        self,
        brokers: int,
        *,
        zookeeper: str | None = None,
        overrides: dict[str, str] | None = None,
        racks: list[str] | None = None,
        wait_s: float = 60,
    ) -> str:
        """Start ZooKeeper (unless given) and ``brokers`` brokers; return bootstrap servers."""
        self.dir.mkdir(parents=True, exist_ok=True)
        if zookeeper is None:
            zk_port = free_port()
            server = start_zookeeper(
                self.dir / "zookeeper", zk_port, log_path=self.dir / "zookeeper" / "zookeeper.log"
            )
            (self.dir / "zookeeper" / "zookeeper.pid").write_text(str(server.pid))
            zookeeper = server.connect
            self.state["zookeeper_pid"] = server.pid
        self.state["zookeeper"] = zookeeper
        self.state["overrides"] = dict(overrides or {})
        self.state["brokers"] = {
            str(i): {"port": free_port(), "rack": (racks[i % len(racks)] if racks else "")}
            for i in range(brokers)
        }
        self._save()
        for broker_id in self.broker_ids:
            self.start_broker(broker_id, wait=False)
        self.wait_until_ready(self.broker_ids, wait_s)
        return self.bootstrap_servers()

    def _write_config(self, broker_id: int) -> Path:
        bdir = self.broker_dir(broker_id)
        bdir.mkdir(parents=True, exist_ok=True)
        entry = self.state["brokers"][str(broker_id)]
        props = {
            "broker.id": str(broker_id),
            "listeners": f"PLAINTEXT://127.0.0.1:{entry['port']}",
            "log.dirs": str(bdir / "data"),
            "zookeeper.connect": self.zookeeper_connect,
            "zookeeper.session.timeout.ms": "6000",
            "offsets.topic.replication.factor": "1",
            # A local cluster is often stopped whole: the last broker's controlled
            # shutdown cannot move its leaderships, so retry sooner than Kafka's 5 s.
            "controlled.shutdown.retry.backoff.ms": "1000",
        }
        if entry.get("rack"):
            props["broker.rack"] = entry["rack"]
        props.update(self.state.get("overrides", {}))
        path = bdir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return path

    def start_broker(self, broker_id: int, *, wait: bool = True, wait_s: float = 60) -> int:
        pid = self.broker_pid(broker_id)
        if pid is not None and pid_alive(pid):
            return pid
        config = self._write_config(broker_id)
        bdir = self.broker_dir(broker_id)
        with open(bdir / "broker.log", "ab") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "replog.cli.main",
                    "broker",
                    "start",
                    "--config",
                    str(config),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        (bdir / "broker.pid").write_text(str(proc.pid))
        if wait:
            self.wait_until_ready([broker_id], wait_s)
        return proc.pid

    def _signal_broker(self, broker_id: int, sig: signal.Signals) -> int | None:
        pid = self.broker_pid(broker_id)
        if pid is None or not pid_alive(pid):
            return None
        os.kill(pid, sig)
        return pid

    def stop_broker(self, broker_id: int, timeout_s: float = 60) -> None:
        """SIGTERM, wait for a clean exit, SIGKILL past the timeout. With
        ``controlled.shutdown.enable`` (the default) the broker first moves its
        leaderships away (``replog.server.controlled_shutdown``)."""
        pid = self._signal_broker(broker_id, signal.SIGTERM)
        if pid is None:
            return
        if not _wait_dead(pid, timeout_s):
            os.kill(pid, signal.SIGKILL)
            _wait_dead(pid, 10)

    def kill_broker(self, broker_id: int) -> None:
        pid = self._signal_broker(broker_id, signal.SIGKILL)
        if pid is not None:
            _wait_dead(pid, 10)

    def pause_broker(self, broker_id: int) -> None:
        self._signal_broker(broker_id, signal.SIGSTOP)

    def resume_broker(self, broker_id: int) -> None:
        self._signal_broker(broker_id, signal.SIGCONT)

    def down(self) -> None:
        for broker_id in self.broker_ids:
            pid = self.broker_pid(broker_id)
            if pid is not None and pid_alive(pid):
                os.kill(pid, signal.SIGCONT)
                self.stop_broker(broker_id)
        zk_pid = self.state.get("zookeeper_pid")
        if zk_pid and pid_alive(int(zk_pid)):
            stop_zookeeper(int(zk_pid))

    # -- observation --------------------------------------------------------------

    def _zk(self) -> KazooClient:
        client = KazooClient(hosts=self.zookeeper_connect, timeout=10)
        client.start(timeout=10)
        return client

    def registered_brokers(self) -> set[int]:
        client = self._zk()
        try:
            if not client.exists("/brokers/ids"):
                return set()
            return {int(c) for c in client.get_children("/brokers/ids")}
        finally:
            client.stop()
            client.close()

    def controller_id(self) -> int | None:
        client = self._zk()
        try:
            if not client.exists("/controller"):
                return None
            data, _ = client.get("/controller")
            return int(json.loads(data)["brokerid"])
        finally:
            client.stop()
            client.close()

    def wait_until_ready(self, broker_ids: list[int], wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        while True:
            for broker_id in broker_ids:
                pid = self.broker_pid(broker_id)
                if pid is None or not pid_alive(pid):
                    tail = _tail(self.broker_dir(broker_id) / "broker.log")
                    raise RuntimeError(f"broker {broker_id} exited during start-up:\n{tail}")
            registered = self.registered_brokers()
            if set(broker_ids) <= registered and all(self._serving(b) for b in broker_ids):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"brokers {sorted(set(broker_ids) - registered)} not registered "
                    f"(or no controller) after {wait_s} s"
                )
            time.sleep(0.1)

    def _serving(self, broker_id: int) -> bool:
        """The broker answers Metadata listing itself and a controller: registered with its
        current session and told the cluster's state by the controller."""
        try:
            return asyncio.run(_knows_itself("127.0.0.1", self.port(broker_id), broker_id))
        except (OSError, TimeoutError, ConnectionError):
            return False

    def status(self) -> list[BrokerStatus]:
        try:
            registered = self.registered_brokers()
            controller = self.controller_id()
        except Exception:
            registered, controller = set(), None
        out = []
        for broker_id in self.broker_ids:
            pid = self.broker_pid(broker_id)
            out.append(
                BrokerStatus(
                    broker_id=broker_id,
                    pid=pid,
                    listener=f"127.0.0.1:{self.port(broker_id)}",
                    alive=pid is not None and pid_alive(pid),
                    registered=broker_id in registered,
                    controller=controller == broker_id,
                )
            )
        return out


async def _knows_itself(host: str, port: int, broker_id: int) -> bool:
    conn = KafkaConnection(host, port, client_id="replog-launcher")
    await conn.connect(timeout_s=2)
    try:
        request = MetadataRequest(
            topics=(),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        response = await conn.request(request, timeout_s=5)
    finally:
        await conn.close()
    return response.controller_id >= 0 and any(b.node_id == broker_id for b in response.brokers)


def _wait_dead(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
