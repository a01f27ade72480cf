"""ZooKeeper and brokers as real processes, each inside its own namespace.

Processes are started with ``ip netns exec NS command``, which execs the command in place:
the pid we hold is the JVM's or the broker's own. Every process is stopped by that pid
(SIGCONT first, in case a nemesis paused it; SIGTERM; SIGKILL past a timeout).

Layout under the run directory::

    zk<i>/          zoo.cfg (bound to the namespace's address), myid, data, zookeeper.log
    broker-<id>/    server.properties, data/, broker.log

With ``proxies``, a ``chaos.proxy`` process runs in each broker's namespace (log in
``broker-<id>/proxy.log``) and the other brokers' connections to the broker cross it, so a
nemesis can delay or lose the inter-broker traffic of one broker (``proxies[id].set``).

With ``small_disk_mb``, each broker's ``data/`` (its ``log.dirs``) is a tmpfs of that size,
mounted before the broker first starts and unmounted by ``release_disks`` (after the
replicas were compared), so a nemesis can fill it.

Concurrency: owned by the campaign's thread; the workload threads only use the addresses.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from chaos.net import Network, Node
from chaos.proxy import ProxyProcess
from replog.cluster.launcher import _knows_itself, pid_alive, tail_log, wait_dead
from replog.cluster.zookeeper import CONFIG_NAME, MAIN_CLASS, _command
from replog.zk import data as zk_data

ZK_PORT = 2181
ZK_PEER_PORT = 2888
ZK_ELECTION_PORT = 3888
# replog starts ZooKeeperServerMain, which runs standalone whatever zoo.cfg lists: an
# ensemble member needs the quorum peer's main class.
QUORUM_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
BROKER_PORT = 9092
# with proxies: each broker's proxy listens here, and the other brokers reach it through it
PROXY_PORT = 9192
# a nemesis's file that fills a small log dir: a file, which the broker's log manager skips
FILLER = ".chaos-filler"

# Timeouts short enough that a campaign sees faults detected and healed within seconds.
BROKER_DEFAULTS = {
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "200",
    "controlled.shutdown.retry.backoff.ms": "1000",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "unclean.leader.election.enable": "false",
    "auto.create.topics.enable": "false",
    "group.initial.rebalance.delay.ms": "0",
}


class ChaosCluster:
    def __init__(
        self,
        network: Network,
        directory: Path,
        brokers: int = 3,
        zookeepers: int = 1,
        overrides: dict[str, str] | None = None,
        small_disk_mb: int = 0,
        proxies: bool = False,
    ) -> None:
        self.net = network
        self.dir = Path(directory)
        self.broker_count = brokers
        self.zookeeper_count = zookeepers
        self.overrides = dict(overrides or {})
        self.zk_nodes: dict[int, Node] = {}
        self.broker_nodes: dict[int, Node] = {}
        self.processes: dict[str, subprocess.Popen[bytes]] = {}  # "zk0", "b1"
        self.paused: set[str] = set()
        self.small_disk_mb = small_disk_mb
        self.mounts: list[Path] = []
        self.with_proxies = proxies
        self.proxies: dict[int, ProxyProcess] = {}
        self._zk_client: KazooClient | None = None

    # -- addresses --------------------------------------------------------------

    @property
    def zookeeper_connect(self) -> str:
        return ",".join(f"{n.address}:{ZK_PORT}" for n in self.zk_nodes.values())

    def bootstrap_servers(self) -> str:
        return ",".join(f"{n.address}:{BROKER_PORT}" for n in self.broker_nodes.values())

    def node(self, name: str) -> Node:
        return self.net.nodes[name]

    def pid(self, name: str) -> int | None:
        process = self.processes.get(name)
        return None if process is None else process.pid

    # -- start ------------------------------------------------------------------

    def start(self, wait_s: float = 90) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        for i in range(self.zookeeper_count):
            self.zk_nodes[i] = self.net.add_node(f"zk{i}", 10 + i)
        for broker_id in range(self.broker_count):
            self.broker_nodes[broker_id] = self.net.add_node(f"b{broker_id}", 20 + broker_id)
        if self.with_proxies:
            for broker_id in self.broker_nodes:
                self.start_proxy(broker_id)
        for i in self.zk_nodes:
            self.start_zookeeper(i, wait=False)
        for i in self.zk_nodes:
            self.wait_zookeeper(i, wait_s)
        for broker_id in self.broker_nodes:
            self.start_broker(broker_id, wait=False)
        self.wait_ready(list(self.broker_nodes), wait_s)
        # one cluster, not one per ZooKeeper: every broker registered in the same ensemble
        deadline = time.monotonic() + wait_s
        while self.registered() != set(self.broker_nodes):
            if time.monotonic() > deadline:
                raise TimeoutError(f"brokers registered in ZooKeeper: {sorted(self.registered())}")
            time.sleep(0.1)

    def start_proxy(self, broker_id: int) -> int:
        """A ``chaos.proxy`` process in the broker's namespace, forwarding to the broker, and
        the other brokers' connections to the broker redirected to it; returns its pid.
        Started before the brokers, so every inter-broker connection crosses it."""
        node = self.broker_nodes[broker_id]
        bdir = self.broker_dir(broker_id).resolve()
        bdir.mkdir(parents=True, exist_ok=True)
        proxy = ProxyProcess(
            (node.address, PROXY_PORT),
            (node.address, BROKER_PORT),
            bdir / "proxy.log",
            prefix=node.exec_prefix(),
            seed=broker_id,
        )
        self.proxies[broker_id] = proxy
        proxy.wait_listening()
        others = [n for b, n in self.broker_nodes.items() if b != broker_id]
        self.net.redirect(node, others, BROKER_PORT, PROXY_PORT)
        return proxy.pid

    def start_zookeeper(self, index: int, *, wait: bool = True, wait_s: float = 60) -> None:
        node = self.zk_nodes[index]
        data_dir = (self.dir / node.name).resolve()
        command = _command(data_dir, ZK_PORT, False)  # writes zoo.cfg for 127.0.0.1 ...
        cfg = data_dir / CONFIG_NAME
        text = cfg.read_text().replace(  # ... which we rebind to the namespace's address
            "clientPortAddress=127.0.0.1", f"clientPortAddress={node.address}"
        )
        if self.zookeeper_count > 1:
            text += "initLimit=5\nsyncLimit=2\n" + "".join(
                f"server.{i + 1}={n.address}:{ZK_PEER_PORT}:{ZK_ELECTION_PORT}\n"
                for i, n in self.zk_nodes.items()
            )
            (data_dir / "myid").write_text(f"{index + 1}\n")
            command = [QUORUM_MAIN_CLASS if part == MAIN_CLASS else part for part in command]
        cfg.write_text(text)
        self._spawn(node.name, node.exec_prefix() + command, data_dir / "zookeeper.log")
        if wait:
            self.wait_zookeeper(index, wait_s)

    def wait_zookeeper(self, index: int, wait_s: float) -> None:
        node = self.zk_nodes[index]
        self._wait(
            lambda: _zk_serving(node.address, ZK_PORT),
            wait_s,
            f"ZooKeeper {node.name} serving",
            node.name,
            self.dir / node.name / "zookeeper.log",
        )

    def broker_dir(self, broker_id: int) -> Path:
        return self.dir / f"broker-{broker_id}"

    def start_broker(self, broker_id: int, *, wait: bool = True, wait_s: float = 60) -> int:
        node = self.broker_nodes[broker_id]
        bdir = self.broker_dir(broker_id).resolve()
        bdir.mkdir(parents=True, exist_ok=True)
        if self.small_disk_mb and (bdir / "data") not in self.mounts:
            self._mount_small_disk(bdir / "data")
        props = {
            "broker.id": str(broker_id),
            "listeners": f"PLAINTEXT://{node.address}:{BROKER_PORT}",
            "log.dirs": str(bdir / "data"),
            "zookeeper.connect": self.zookeeper_connect,
            **BROKER_DEFAULTS,
            **self.overrides,
        }
        config = bdir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        command = [sys.executable, "-m", "replog.cli.main", "broker", "start", "--config"]
        pid = self._spawn(
            node.name, node.exec_prefix() + command + [str(config)], bdir / "broker.log"
        )
        if wait:
            self.wait_ready([broker_id], wait_s)
        return pid

    def _mount_small_disk(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        size = f"size={self.small_disk_mb}m"
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", size, "tmpfs", str(path)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if done.returncode != 0:
            raise RuntimeError(f"mount -t tmpfs -o {size} {path}: {done.stderr.strip()}")
        self.mounts.append(path)

    def release_disks(self) -> list[str]:
        """Unmount the small disks (processes stopped first), keeping a copy of each log dir
        beside it (``data-kept``, without the filler) to study; return the errors met."""
        errors = []
        while self.mounts:
            path = self.mounts.pop()
            try:
                shutil.copytree(
                    path,
                    path.with_name("data-kept"),
                    ignore=shutil.ignore_patterns(FILLER),
                    dirs_exist_ok=True,
                )
            except (OSError, shutil.Error) as exc:
                errors.append(f"copying {path}: {exc}")
            done = subprocess.run(["umount", str(path)], capture_output=True, text=True)
            if done.returncode != 0:  # still busy: detach it now, it goes when released
                lazy = subprocess.run(["umount", "-l", str(path)], capture_output=True, text=True)
                if lazy.returncode != 0:
                    errors.append(f"umount {path}: {lazy.stderr.strip()}")
        return errors

    def exited(self) -> dict[str, int]:
        """Processes that ended on their own (a nemesis's kill is followed by a restart):
        name -> exit status; a proxy is ``p<broker>``."""
        ended = {
            name: process.returncode
            for name, process in self.processes.items()
            if process.poll() is not None
        }
        for broker_id, proxy in self.proxies.items():
            if proxy.process.poll() is not None:
                ended[f"p{broker_id}"] = proxy.process.returncode
        return ended

    def _spawn(self, name: str, command: list[str], log_path: Path) -> int:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=log_path.parent,
                env=env,
                start_new_session=True,
            )
        self.processes[name] = process
        self.paused.discard(name)
        return process.pid

    def wait_ready(self, broker_ids: list[int], wait_s: float) -> None:
        for broker_id in broker_ids:
            node = self.broker_nodes[broker_id]
            self._wait(
                lambda n=node, b=broker_id: _broker_serving(n.address, b),
                wait_s,
                f"broker {broker_id} serving",
                node.name,
                self.broker_dir(broker_id) / "broker.log",
            )

    def _wait(self, condition, wait_s: float, what: str, name: str, log: Path) -> None:
        deadline = time.monotonic() + wait_s
        while not condition():
            process = self.processes[name]
            if process.poll() is not None:
                raise RuntimeError(
                    f"{name} exited ({process.returncode}) before {what}:\n{tail_log(log)}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {what} after {wait_s} s:\n{tail_log(log)}")
            time.sleep(0.1)

    # -- signals ------------------------------------------------------------------

    def kill(self, name: str) -> None:
        """kill -9 by pid; waits until the process is gone."""
        process = self.processes[name]
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(30)
        self.paused.discard(name)

    def pause(self, name: str) -> None:
        os.kill(self.processes[name].pid, signal.SIGSTOP)
        self.paused.add(name)

    def resume(self, name: str) -> None:
        os.kill(self.processes[name].pid, signal.SIGCONT)
        self.paused.discard(name)

    def restart(self, name: str, wait_s: float = 60) -> None:
        if name.startswith("zk"):
            self.start_zookeeper(int(name[2:]), wait_s=wait_s)
        else:
            self.start_broker(int(name[1:]), wait_s=wait_s)

    def stop(self) -> list[str]:
        """Stop every process by pid (brokers first); return the errors met, never raise."""
        errors = []
        self.close_zk()
        names = sorted(self.processes, key=lambda n: n.startswith("zk"))  # brokers first
        for name in names:
            process = self.processes[name]
            try:
                if process.poll() is not None:
                    continue
                os.kill(process.pid, signal.SIGCONT)
                os.kill(process.pid, signal.SIGTERM)
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    os.kill(process.pid, signal.SIGKILL)
                    process.wait(15)
            except (OSError, subprocess.TimeoutExpired) as exc:
                errors.append(f"stopping {name} (pid {process.pid}): {exc}")
            if pid_alive(process.pid) and not wait_dead(process.pid, 5):
                errors.append(f"{name} (pid {process.pid}) still alive")
        while self.proxies:
            _, proxy = self.proxies.popitem()
            if (error := proxy.stop()) is not None:
                errors.append(error)
        return errors

    # -- ZooKeeper views ------------------------------------------------------------

    def zk(self) -> KazooClient:
        if self._zk_client is None:
            client = KazooClient(hosts=self.zookeeper_connect, timeout=10)
            client.start(timeout=20)
            self._zk_client = client
        return self._zk_client

    def close_zk(self) -> None:
        if self._zk_client is not None:
            try:
                self._zk_client.stop()
                self._zk_client.close()
            finally:
                self._zk_client = None

    def controller(self) -> int | None:
        try:
            return int(json.loads(self.zk().get("/controller")[0])["brokerid"])
        except NoNodeError:
            return None

    def partition_state(self, topic: str, partition: int) -> tuple[int, list[int]] | None:
        """``(leader, isr)`` from the partition's state znode."""
        try:
            data, stat = self.zk().get(zk_data.partition_state_path(topic, partition))
        except NoNodeError:
            return None
        lai = zk_data.decode_partition_state(data, stat.version).leader_and_isr
        return int(lai.leader), [int(b) for b in lai.isr]

    def zookeeper_leader(self) -> int | None:
        """Index of the ensemble member whose ``srvr`` says ``Mode: leader`` (None: none, or
        a single standalone server)."""
        for index, node in self.zk_nodes.items():
            if _zk_mode(node.address, ZK_PORT) == "leader":
                return index
        return None

    def registered(self) -> set[int]:
        try:
            return {int(b) for b in self.zk().get_children("/brokers/ids")}
        except NoNodeError:
            return set()

    def full_isr(self, topic: str, partitions: int) -> bool:
        everyone = set(self.broker_nodes)
        for p in range(partitions):
            state = self.partition_state(topic, p)
            if state is None or state[0] < 0 or set(state[1]) != everyone:
                return False
        return True


def _zk_mode(address: str, port: int) -> str | None:
    """The ``Mode:`` that ``srvr`` answers (standalone, leader, follower), or None."""
    try:
        with socket.create_connection((address, port), timeout=1) as sock:
            sock.sendall(b"srvr")
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
    except OSError:
        return None
    for line in b"".join(chunks).decode("utf-8", "replace").splitlines():
        if line.startswith("Mode: "):
            return line.removeprefix("Mode: ").strip()
    return None


def _zk_serving(address: str, port: int) -> bool:
    """``srvr`` answers with a mode: standalone, or leader/follower once a quorum formed."""
    return _zk_mode(address, port) in ("standalone", "leader", "follower")


def _broker_serving(address: str, broker_id: int) -> bool:
    try:
        return asyncio.run(_knows_itself(address, BROKER_PORT, broker_id))
    except (OSError, TimeoutError, ConnectionError):
        return False
