"""A local cluster: ZooKeeper and N broker processes under one directory.

Layout of DIR::

    cluster.json            ports, ZooKeeper address, broker overrides
    zookeeper/              data, zookeeper.pid, zookeeper.log (when we started it)
    broker-<id>/            server.properties, data/, broker.pid, broker.log

Every process is started in its own session and stopped by its own pid.
Used by ``replog cluster ...``, by the tests and by ``make demo``.

``up`` refuses a directory where a process of an earlier ``up`` still runs
(``ClusterRunningError`` names them), so that ``cluster.json`` and the data of a live
cluster are never taken over; when ``up`` fails it stops, by pid, the processes it
started, and only those.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kio.schema.metadata.v8.request import MetadataRequest

from replog.cluster.processes import (
    cmdline_names,
    free_port,
    listening,
    pid_alive,
    read_pid,
    spawn,
    stop_pid,
    tail_log,
    wait_dead,
)
from replog.cluster.zookeeper import MAIN_CLASS as ZOOKEEPER_MAIN
from replog.cluster.zookeeper import start_zookeeper, stop_zookeeper
from replog.protocol.client import KafkaConnection
from replog.server.stack_dump import STACKS_DUMPED
from replog.zk import data as zk_data

STATE_FILE = "cluster.json"

DUMP_WAIT_S = 5
"""How long a broker killed past its stop timeout gets to write its stacks first."""


MAIN = "replog.cli.main"
"""In the command line of every replog process the launcher starts."""


class RollFailed(Exception):
    """A rolling restart stopped; the message is the one-line reason."""


class ClusterRunningError(Exception):
    """``up`` on a directory whose processes still run; the message names them."""


@dataclass
class UnderReplicated:
    topic: str
    partition: int
    replicas: list[int]
    isr: list[int]
    leader: int


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

    def bootstrap_servers(
        self, broker_ids: list[int] | None = None, listener: str = "PLAINTEXT"
    ) -> str:
        """``host:port,...`` of ``listener`` (the PLAINTEXT one, or one of ``up``'s
        ``extra_listeners``)."""
        ids = broker_ids if broker_ids is not None else self.broker_ids
        if listener == "PLAINTEXT":
            return ",".join(f"127.0.0.1:{self.port(b)}" for b in ids)
        return ",".join(
            f"127.0.0.1:{self.state['brokers'][str(b)]['listeners'][listener]}" for b in ids
        )

    def metrics_url(self, broker_id: int) -> str | None:
        """Where broker ``broker_id`` serves Prometheus metrics (None: not enabled)."""
        return self.state["brokers"][str(broker_id)].get("metrics_url")

    def broker_dir(self, broker_id: int) -> Path:
        return self.dir / f"broker-{broker_id}"

    def broker_pid(self, broker_id: int) -> int | None:
        return read_pid(self.broker_dir(broker_id) / "broker.pid")

    def live_processes(self) -> list[tuple[str, int]]:
        """The processes of this directory still alive, as (name, pid): ZooKeeper (if
        started here), the console and every ``broker-<id>/broker.pid`` (a pid another
        program has taken since does not count)."""
        found: dict[int, str] = {}
        for name, pid in (
            ("zookeeper", self.state.get("zookeeper_pid")),
            ("zookeeper", read_pid(self.dir / "zookeeper" / "zookeeper.pid")),
            ("console", self.state.get("console_pid")),
        ):
            if pid:
                found.setdefault(int(pid), name)
        for pid_file in sorted(self.dir.glob("broker-*/broker.pid")):
            pid = read_pid(pid_file)
            if pid is not None:
                found.setdefault(pid, pid_file.parent.name.replace("-", " "))
        return sorted(
            (name, pid)
            for pid, name in found.items()
            if pid_alive(pid)
            and cmdline_names(pid, ZOOKEEPER_MAIN if name == "zookeeper" else MAIN)
        )

    def check_not_running(self) -> None:
        """``ClusterRunningError`` if a process of this directory is still alive."""
        live = self.live_processes()
        if live:
            names = ", ".join(f"{name} (pid {pid})" for name, pid in live)
            raise ClusterRunningError(
                f"a cluster is running in {self.dir}: {names}; "
                f"stop it first (replog cluster down --dir {self.dir})"
            )

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
        metrics: bool = False,
        extra_listeners: tuple[str, ...] = (),
        broker_env: dict[str, str] | None = None,
        broker_overrides: dict[int, dict[str, str]] | None = None,
    ) -> str:
        """Start ZooKeeper (unless given) and ``brokers`` brokers; return bootstrap servers.

        ``metrics``: each broker serves Prometheus metrics on a port of its own
        (``metrics.port``; see ``metrics_url``). ``extra_listeners``: listener names
        (``SSL``, ``SASL_SSL``, ...) each broker serves besides PLAINTEXT; their settings
        come in ``overrides``, as does ``inter.broker.listener.name`` (PLAINTEXT unless
        set). ``broker_env``: environment variables the brokers start with (e.g.
        ``KAFKA_OPTS`` naming a JAAS file for their ZooKeeper login). ``broker_overrides``:
        settings of single brokers, by id (e.g. a ``zookeeper.connect`` through a proxy a
        test cuts).

        ``ClusterRunningError`` (and nothing touched) if a process of an earlier ``up``
        here still runs. If ``up`` fails, the processes it started are stopped by pid."""
        self.check_not_running()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.state = {}  # nothing of an earlier cluster here runs any more
        started: list[tuple[str, int]] = []
        with _stopped_on_failure(started):
            if zookeeper is None:
                zk_port = free_port()
                server = start_zookeeper(
                    self.dir / "zookeeper",
                    zk_port,
                    log_path=self.dir / "zookeeper" / "zookeeper.log",
                )
                started.append(("zookeeper", server.pid))
                (self.dir / "zookeeper" / "zookeeper.pid").write_text(str(server.pid))
                zookeeper = server.connect
                self.state["zookeeper_pid"] = server.pid
            self.state["zookeeper"] = zookeeper
            self.state["overrides"] = dict(overrides or {})
            self.state["broker_env"] = dict(broker_env or {})
            self.state["brokers"] = {
                str(i): {"port": free_port(), "rack": (racks[i % len(racks)] if racks else "")}
                for i in range(brokers)
            }
            for entry in self.state["brokers"].values():
                entry["listeners"] = {name: free_port() for name in extra_listeners}
            for broker_id, settings in (broker_overrides or {}).items():
                self.state["brokers"][str(broker_id)]["overrides"] = dict(settings)
            if metrics:
                for entry in self.state["brokers"].values():
                    entry["metrics_port"] = free_port()
                    entry["metrics_url"] = f"http://127.0.0.1:{entry['metrics_port']}/metrics"
            self._save()
            for broker_id in self.broker_ids:
                started.append((f"broker {broker_id}", self.start_broker(broker_id, wait=False)))
            self.wait_until_ready(self.broker_ids, wait_s)
            return self.bootstrap_servers()

    def _write_config(self, broker_id: int) -> Path:
        bdir = self.broker_dir(broker_id)
        bdir.mkdir(parents=True, exist_ok=True)
        entry = self.state["brokers"][str(broker_id)]
        props = {
            "broker.id": str(broker_id),
            "listeners": ",".join(
                [f"PLAINTEXT://127.0.0.1:{entry['port']}"]
                + [f"{n}://127.0.0.1:{p}" for n, p in entry.get("listeners", {}).items()]
            ),
            "log.dirs": str(bdir / "data"),
            "zookeeper.connect": self.zookeeper_connect,
            "zookeeper.session.timeout.ms": "6000",
            # A local cluster is often stopped whole: the last broker's controlled
            # shutdown cannot move its leaderships, and each of its 3 attempts fails, so
            # retry sooner than Kafka's 5 s: after 100 ms, as Kafka's own test brokers do
            # (TestUtils.createBrokerConfig). At 1 s, every whole-cluster stop (a single
            # broker's too) spent 2 s in retries.
            "controlled.shutdown.retry.backoff.ms": "100",
        }
        if entry.get("rack"):
            props["broker.rack"] = entry["rack"]
        if entry.get("metrics_port"):
            props["metrics.port"] = str(entry["metrics_port"])
        props.update(self.state.get("overrides", {}))
        props.update(entry.get("overrides", {}))
        path = bdir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        path.chmod(0o600)  # (it may hold passwords: JAAS entries, key passwords)
        return path

    def start_broker(self, broker_id: int, *, wait: bool = True, wait_s: float = 60) -> int:
        pid = self.broker_pid(broker_id)
        if pid is not None and pid_alive(pid):
            return pid
        config = self._write_config(broker_id)
        bdir = self.broker_dir(broker_id)
        pid = spawn(
            [sys.executable, "-m", MAIN, "broker", "start", "--config", str(config)],
            bdir / "broker.log",
            env={**os.environ, **self.state.get("broker_env", {})},
        )
        (bdir / "broker.pid").write_text(str(pid))
        if wait:
            self.wait_until_ready([broker_id], wait_s)
        return pid

    def _signal_broker(self, broker_id: int, sig: signal.Signals) -> int | None:
        pid = self.broker_pid(broker_id)
        if pid is None or not pid_alive(pid):
            return None
        os.kill(pid, sig)
        return pid

    def stop_broker(self, broker_id: int, timeout_s: float = 60) -> bool:
        """SIGTERM, wait for a clean exit, SIGKILL past the timeout (then False). With
        ``controlled.shutdown.enable`` (the default) the broker first moves its
        leaderships away (``replog.server.controlled_shutdown``)."""
        pid = self._signal_broker(broker_id, signal.SIGTERM)
        if pid is None:
            return True
        if not wait_dead(pid, timeout_s):
            _dump_stacks_then_kill(pid, self.broker_dir(broker_id) / "broker.log")
            return False
        return True

    def stop_brokers(self, broker_ids: list[int], timeout_s: float = 60) -> list[tuple[str, int]]:
        """Stop several brokers at once, as Kafka's ``kafka-server-stop.sh`` does: SIGCONT
        (one may be paused) and SIGTERM to each, then wait for them all, SIGKILL to those
        still running past ``timeout_s``. Returns those stopped (name, pid).

        Their controlled shutdowns overlap: a broker that leads only partitions whose other
        replicas are stopping too gives up after its retries, as the last broker of a
        cluster stopped one by one does; one by one, every broker would wait for the
        previous one's exit."""
        signalled: list[tuple[int, int]] = []
        for broker_id in broker_ids:
            pid = self.broker_pid(broker_id)
            if pid is not None and pid_alive(pid):
                with contextlib.suppress(ProcessLookupError):  # it may have just exited
                    os.kill(pid, signal.SIGCONT)
                    os.kill(pid, signal.SIGTERM)
                signalled.append((broker_id, pid))
        deadline = time.monotonic() + timeout_s
        for broker_id, pid in signalled:
            if not wait_dead(pid, max(deadline - time.monotonic(), 0)):
                _dump_stacks_then_kill(pid, self.broker_dir(broker_id) / "broker.log")
        return [(f"broker {broker_id}", pid) for broker_id, pid in signalled]

    def kill_broker(self, broker_id: int) -> None:
        pid = self._signal_broker(broker_id, signal.SIGKILL)
        if pid is not None:
            wait_dead(pid, 10)

    def pause_broker(self, broker_id: int) -> None:
        self._signal_broker(broker_id, signal.SIGSTOP)

    def resume_broker(self, broker_id: int) -> None:
        self._signal_broker(broker_id, signal.SIGCONT)

    def start_console(self, port: int | None = None, wait_s: float = 30) -> str:
        """``replog console`` for this cluster as a process of its own (pid in
        ``cluster.json``, stopped by ``down``); returns its URL."""
        pid = self.state.get("console_pid")
        if pid and pid_alive(int(pid)):
            return self.console_url() or ""
        port = port or free_port()
        pid = spawn(
            [sys.executable, "-m", MAIN, "console"]
            + ["--cluster-dir", str(self.dir), "--port", str(port)],
            self.dir / "console.log",
        )
        self.state["console_pid"] = pid
        self.state["console_port"] = port
        self._save()
        deadline = time.monotonic() + wait_s
        while not listening(port):
            if not pid_alive(pid) or time.monotonic() > deadline:
                raise RuntimeError(f"console did not start:\n{tail_log(self.dir / 'console.log')}")
            time.sleep(0.1)
        return self.console_url() or ""

    def console_url(self) -> str | None:
        port = self.state.get("console_port")
        return f"http://127.0.0.1:{port}/" if port else None

    def stop_console(self) -> None:
        if "console_pid" not in self.state:
            return
        pid = self.state.pop("console_pid")
        if pid and pid_alive(int(pid)):
            os.kill(int(pid), signal.SIGTERM)
            if not wait_dead(int(pid), 10):
                os.kill(int(pid), signal.SIGKILL)
                wait_dead(int(pid), 10)
        self._save()

    def down(self) -> list[tuple[str, int]]:
        """Stop every process of the cluster by its pid; returns those stopped (name, pid)."""
        stopped = []
        console = self.state.get("console_pid")
        if console and pid_alive(int(console)):
            stopped.append(("console", int(console)))
        self.stop_console()
        stopped += self.stop_brokers(self.broker_ids)
        zk_pid = self.state.get("zookeeper_pid")
        if zk_pid and pid_alive(int(zk_pid)):
            stop_zookeeper(int(zk_pid))
            stopped.append(("zookeeper", int(zk_pid)))
        return stopped

    # -- observation --------------------------------------------------------------

    def _zk(self) -> KazooClient:
        """A client of the cluster's ZooKeeper; TimeoutError if it does not answer in 10 s."""
        client = KazooClient(hosts=self.zookeeper_connect, timeout=10)
        with warnings.catch_warnings():
            # A chroot the brokers have not made yet reads as empty: no warning.
            warnings.filterwarnings("ignore", "No chroot path exists")
            try:
                client.start(timeout=10)
            except client.handler.timeout_exception:
                raise TimeoutError(
                    f"ZooKeeper {self.zookeeper_connect} did not answer within 10 s"
                ) from None
        return client

    def registered_brokers(self) -> set[int]:
        with self._zk_session() as client:
            return _registered(client)

    @contextlib.contextmanager
    def _zk_session(self) -> Iterator[KazooClient]:
        """One ZooKeeper client for a whole wait: a client per poll opened and closed a
        ZooKeeper session (two logged, fsynced transactions) ten times a second."""
        client = self._zk()
        try:
            yield client
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

    def under_replicated(self) -> list[UnderReplicated]:
        """Every partition whose ISR (ZooKeeper's state znode) is not its full replica set,
        or that has no leader. Reads every topic and state znode in batches."""
        with self._zk_session() as client:
            return _under_replicated(client)

    def wait_full_isr(self, timeout_s: float) -> None:
        """Until every partition's ISR is its full replica set; TimeoutError names the
        partitions still short past ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self._zk_session() as client:
            while True:
                try:
                    short = _under_replicated(client)
                except KazooException:  # connection lost for a moment: kazoo reconnects
                    short = None
                if short == []:
                    return
                if time.monotonic() > deadline:
                    if short is None:
                        raise TimeoutError(f"ZooKeeper unreachable after {timeout_s:.0f} s")
                    names = ", ".join(f"{u.topic}-{u.partition}" for u in short[:5])
                    more = f" and {len(short) - 5} more" if len(short) > 5 else ""
                    raise TimeoutError(
                        f"{len(short)} partition(s) without a full ISR after {timeout_s:.0f} s: "
                        f"{names}{more}"
                    )
                time.sleep(0.2)

    def roll(
        self,
        progress: Callable[[str], None],
        *,
        isr_timeout_s: float = 300,
        stop_timeout_s: float = 60,
        start_timeout_s: float = 120,
    ) -> None:
        """A rolling restart: each broker in turn (the controller last, so the controller
        moves once) is stopped by SIGTERM to its pid (a controlled shutdown unless
        disabled), started again, and every partition's ISR must be full again before the
        next one. Raises ``RollFailed`` with a one-line reason."""
        for broker_id in self.broker_ids:
            pid = self.broker_pid(broker_id)
            if pid is None or not pid_alive(pid):
                raise RollFailed(f"broker {broker_id} is not running; start it before a roll")
        try:
            self.wait_full_isr(isr_timeout_s)
        except TimeoutError as exc:
            raise RollFailed(f"not rolling: {exc}") from exc
        controller = self.controller_id()
        order = [b for b in self.broker_ids if b != controller]
        order += [b for b in self.broker_ids if b == controller]
        started = time.monotonic()
        for n, broker_id in enumerate(order, 1):
            t0 = time.monotonic()
            progress(f"[{n}/{len(order)}] stopping broker {broker_id} (controlled shutdown)")
            if not self.stop_broker(broker_id, stop_timeout_s):
                progress(f"broker {broker_id} did not exit in {stop_timeout_s:.0f} s; killed it")
            stopped = time.monotonic()
            progress(f"[{n}/{len(order)}] broker {broker_id} stopped in {stopped - t0:.2f} s")
            try:
                self.start_broker(broker_id, wait_s=start_timeout_s)
            except (RuntimeError, TimeoutError) as exc:
                first = str(exc).splitlines()[0]
                raise RollFailed(f"broker {broker_id} did not come back: {first}") from exc
            back = time.monotonic()
            progress(
                f"[{n}/{len(order)}] broker {broker_id} serving again in {back - stopped:.2f} s"
            )
            try:
                self.wait_full_isr(isr_timeout_s)
            except TimeoutError as exc:
                raise RollFailed(f"after restarting broker {broker_id}: {exc}") from exc
            progress(f"[{n}/{len(order)}] every ISR full again in {time.monotonic() - back:.2f} s")
        progress(f"rolled {len(order)} brokers in {time.monotonic() - started:.1f} s")

    def wait_until_ready(self, broker_ids: list[int], wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        with self._zk_session() as client:
            while True:
                for broker_id in broker_ids:
                    pid = self.broker_pid(broker_id)
                    if pid is None or not pid_alive(pid):
                        path = self.broker_dir(broker_id) / "broker.log"
                        tail = tail_log(path)
                        reason = tail.splitlines()[-1] if tail.strip() else "(no output)"
                        raise RuntimeError(
                            f"broker {broker_id} exited during start-up: {reason} "
                            f"(log: {path})\n{tail}"
                        )
                try:
                    registered = _registered(client)
                except KazooException:  # connection lost for a moment: kazoo reconnects
                    registered = set()
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


def _under_replicated(client: KazooClient) -> list[UnderReplicated]:
    if not client.exists(zk_data.TOPICS_PATH):
        return []
    topics = sorted(client.get_children(zk_data.TOPICS_PATH))
    pending = [(t, client.get_async(zk_data.topic_path(t))) for t in topics]
    replicas: dict[tuple[str, int], list[int]] = {}
    for topic, result in pending:
        data, _ = result.get(timeout=10)
        for p, r in zk_data.decode_topic_assignment(topic, data).items():
            replicas[(topic, p)] = list(r)
    states = [(tp, client.get_async(zk_data.partition_state_path(*tp))) for tp in sorted(replicas)]
    out = []
    for (topic, p), result in states:
        try:
            data, stat = result.get(timeout=10)
        except NoNodeError:
            out.append(UnderReplicated(topic, p, replicas[(topic, p)], [], -1))
            continue
        lai = zk_data.decode_partition_state(data, stat.version).leader_and_isr
        if lai.leader < 0 or set(lai.isr) != set(replicas[(topic, p)]):
            out.append(UnderReplicated(topic, p, replicas[(topic, p)], list(lai.isr), lai.leader))
    return out


def _registered(client: KazooClient) -> set[int]:
    if not client.exists("/brokers/ids"):
        return set()
    return {int(c) for c in client.get_children("/brokers/ids")}


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


def _dump_stacks_then_kill(pid: int, log_path: Path) -> None:
    """SIGKILL a broker that outlived its stop timeout, after asking it (SIGUSR1) to
    write its asyncio tasks' and threads' stacks to its log: what it was waiting on. The
    dump is awaited up to ``DUMP_WAIT_S`` (a broker whose event loop is stuck never writes
    it)."""
    try:
        start = log_path.stat().st_size
    except OSError:
        start = 0
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + DUMP_WAIT_S
    while pid_alive(pid) and time.monotonic() < deadline:
        try:
            with open(log_path, "rb") as log:
                log.seek(start)
                if STACKS_DUMPED.encode() in log.read():
                    break
        except OSError:
            break
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    wait_dead(pid, 10)


@contextlib.contextmanager
def _stopped_on_failure(started: list[tuple[str, int]]) -> Iterator[None]:
    """On the way out with an exception, stop by pid the processes in ``started`` (name,
    pid), last first: what a failed ``up`` started, and nothing else."""
    try:
        yield
    except BaseException:
        for name, pid in reversed(started):
            if name == "zookeeper":
                stop_zookeeper(pid)
            else:
                stop_pid(pid, 10)
        raise
