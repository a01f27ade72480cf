"""Guards on a broker's data directory and on ``replog cluster``, with real processes.

A second broker on a live broker's log dir is refused by the dir's lock; a broker with
another ``broker.id`` or pointed at another cluster (another ZooKeeper chroot, so another
``/cluster/id``) is refused by ``meta.properties``; a broker whose ZooKeeper is out of
reach leaves after ``zookeeper.connection.timeout.ms`` with one line; ``replog cluster up``
refuses a directory whose cluster runs; the other ``cluster`` actions refuse a directory
without one. One ZooKeeper (the session's) serves the whole file, one chroot per cluster.

Every broker started here is a child of the test, stopped by its pid in a ``finally``.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from clients_util import Rec, consume_confluent, create_topic, produce_confluent, wait_for
from fixtures.processes import free_port
from replog.cli.main import main
from replog.cluster.launcher import LocalCluster, pid_alive
from replog.config import KafkaConfig
from replog.server.broker_startup import zookeeper_connection_timeout_ms
from replog.storage.meta_properties import META_PROPERTIES_FILE, read_meta_properties

REPLOG = [sys.executable, "-m", "replog.cli.main"]
LOCK_MESSAGE = (
    "Failed to acquire lock on file .lock in {dir}. A Kafka instance in another process or "
    "thread is using this directory."
)


def broker_config(path: Path, broker_id: int, log_dir: Path, zk: str, **extra: str) -> Path:
    props = {
        "broker.id": str(broker_id),
        "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
        "log.dirs": str(log_dir),
        "zookeeper.connect": zk,
        "zookeeper.session.timeout.ms": "6000",
        # Nothing written on a timer: whatever changes in the dir, a test did.
        "log.flush.offset.checkpoint.interval.ms": "600000",
        "replica.high.watermark.checkpoint.interval.ms": "600000",
        **extra,
    }
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def port_of(config: Path) -> int:
    for line in config.read_text().splitlines():
        if line.startswith("listeners="):
            return int(line.rsplit(":", 1)[1])
    raise AssertionError(f"no listeners in {config}")


class BrokerProcess:
    """``replog broker start`` as a child of the test."""

    def __init__(self, config: Path, log_path: Path) -> None:
        self.config, self.log_path = config, log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{port_of(self.config)}"

    def start(self) -> None:
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [*REPLOG, "broker", "start", "--config", str(self.config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def wait_registered(self, zk: str, broker_id: int, timeout_s: float = 90) -> None:
        def registered() -> bool:
            assert self.proc is not None and self.proc.poll() is None, self.log()[-3000:]
            client = KazooClient(hosts=zk, timeout=10)
            with warnings.catch_warnings():  # the broker makes the chroot
                warnings.filterwarnings("ignore", "No chroot path exists")
                client.start(timeout=10)
            try:
                return client.exists(f"/brokers/ids/{broker_id}") is not None
            finally:
                client.stop()
                client.close()

        wait_for(registered, timeout_s, f"broker {broker_id} to register")

    def signal_and_wait(self, sig: signal.Signals, timeout_s: float = 60) -> int:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)
        return self.proc.wait(timeout_s)

    def cleanup(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def run_broker(config: Path, timeout_s: float = 90) -> subprocess.CompletedProcess[str]:
    """A broker expected to refuse to start: run it to its exit."""
    return subprocess.run(
        [*REPLOG, "broker", "start", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        start_new_session=True,
    )


def replog(*args: str, timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*REPLOG, *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )


def error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The refusal: stderr's last line, with no traceback anywhere."""
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert lines, "nothing on stderr"
    assert lines[-1].startswith("replog: broker "), done.stderr[-3000:]
    return lines[-1]


def snapshot(directory: Path, contents: bool) -> dict[str, str]:
    """Every file and directory under ``directory``: its name, and with ``contents`` a
    digest of each file's bytes."""
    out = {}
    for path in sorted(directory.rglob("*")):
        rel = str(path.relative_to(directory))
        if path.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest() if contents else "file"
    return out


def records(tag: str, count: int) -> list[Rec]:
    now = int(time.time() * 1000)
    return [
        Rec(0, -1, f"{tag}-k{i}".encode(), f"{tag}-v{i}".encode(), (), now + i)
        for i in range(count)
    ]


def produce_and_consume(bootstrap: str, topic: str, tag: str, already: int) -> None:
    """A produce with a real client, then a consume of the whole partition."""
    acked = produce_confluent(bootstrap, topic, records(tag, 20))
    assert sorted(r.offset for r in acked) == list(range(already, already + 20))
    read = consume_confluent(bootstrap, topic, {0: already + 20})
    assert [r.value for r in read[already:]] == [r.value for r in records(tag, 20)]


@dataclass
class LiveBroker:
    broker: BrokerProcess
    zk: str
    data: Path
    tmp: Path
    topic: str = "guarded"
    produced: int = 0


@pytest.fixture(scope="module")
def live(zookeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveBroker]:
    """Broker 0 serving one topic from its own chroot; tests may stop and restart it."""
    tmp = tmp_path_factory.mktemp("guards")
    zk = f"{zookeeper.connect}/replog-guards-{uuid.uuid4().hex[:8]}"
    data = tmp / "data"
    broker = BrokerProcess(broker_config(tmp / "broker-0.properties", 0, data, zk), tmp / "b0.log")
    state = LiveBroker(broker, zk, data, tmp)
    try:
        broker.start()
        broker.wait_registered(zk, 0)
        create_topic(broker.bootstrap, state.topic, 1)
        produce_and_consume(broker.bootstrap, state.topic, "first", 0)
        state.produced = 20
        yield state
    finally:
        broker.cleanup()


# -- the log dir lock ----------------------------------------------------------------


def test_a_second_broker_on_a_live_log_dir_is_refused(live: LiveBroker) -> None:
    before = snapshot(live.data, contents=False)
    meta = (live.data / META_PROPERTIES_FILE).read_bytes()
    config = broker_config(live.tmp / "intruder.properties", 1, live.data, live.zk)

    done = run_broker(config)

    assert done.returncode != 0
    assert error_line(done).endswith(LOCK_MESSAGE.format(dir=live.data)), done.stderr[-2000:]
    assert snapshot(live.data, contents=False) == before, "the refused broker wrote here"
    assert (live.data / META_PROPERTIES_FILE).read_bytes() == meta
    assert not (live.data / ".kafka_cleanShutdown").exists()
    # The first broker never noticed.
    assert live.broker.proc is not None and live.broker.proc.poll() is None
    produce_and_consume(live.broker.bootstrap, live.topic, "after-intruder", live.produced)
    live.produced += 20


def test_a_failed_cluster_up_stops_the_brokers_it_started(
    live: LiveBroker, zookeeper, tmp_path: Path
) -> None:
    """Broker 1 of a new cluster is pointed at the live broker's dir: it is refused, and
    ``up`` stops broker 0, which it started, and nothing else."""
    cluster = LocalCluster(tmp_path / "cluster")
    try:
        with pytest.raises(RuntimeError, match="broker 1 exited during start-up") as failed:
            cluster.up(
                2,
                zookeeper=f"{zookeeper.connect}/replog-{uuid.uuid4().hex[:8]}",
                broker_overrides={1: {"log.dirs": str(live.data)}},
            )
        assert "Failed to acquire lock on file .lock" in str(failed.value)
        started = cluster.broker_pid(0)
        assert started is not None and not pid_alive(started)
        assert cluster.live_processes() == []
        assert live.broker.proc is not None and live.broker.proc.poll() is None
    finally:
        cluster.down()


def test_cluster_up_says_in_one_line_why_a_broker_did_not_start(
    live: LiveBroker, zookeeper, tmp_path: Path
) -> None:
    directory = tmp_path / "cli-cluster"
    zk = f"{zookeeper.connect}/replog-{uuid.uuid4().hex[:8]}"
    try:
        done = replog(
            "cluster", "up", "--brokers", "1", "--dir", str(directory), "--zookeeper", zk,
            "--override", f"log.dirs={live.data}",
        )  # fmt: skip
        assert done.returncode == 1
        [line] = done.stderr.strip().splitlines()
        assert line.startswith("replog: cluster did not come up: broker 0 exited during "), line
        assert LOCK_MESSAGE.format(dir=live.data) in line
        assert LocalCluster(directory).live_processes() == []
    finally:
        LocalCluster(directory).down()


# -- meta.properties ---------------------------------------------------------------------


def test_meta_properties_refuse_another_broker_id_and_another_cluster(live: LiveBroker) -> None:
    stored = read_meta_properties(live.data)
    assert stored is not None and stored.broker_id == 0
    client = KazooClient(hosts=live.zk, timeout=10)
    client.start(timeout=10)
    try:
        cluster_id = client.get("/cluster/id")[0].decode()
    finally:
        client.stop()
        client.close()
    assert stored.cluster_id is not None and stored.cluster_id in cluster_id

    assert live.broker.signal_and_wait(signal.SIGTERM) == 0, live.broker.log()[-3000:]
    stopped = snapshot(live.data, contents=True)

    other_id = run_broker(broker_config(live.tmp / "id-7.properties", 7, live.data, live.zk))
    assert other_id.returncode != 0
    assert error_line(other_id).endswith(
        "Configured broker.id 7 doesn't match stored broker.id 0 in meta.properties. If you "
        "moved your data, make sure your configured broker.id matches. If you intend to "
        "create a new broker, you should remove all data in your data directories (log.dirs)."
    ), other_id.stderr[-2000:]
    assert snapshot(live.data, contents=True) == stopped

    elsewhere = f"{live.zk}-elsewhere"  # another chroot: another /cluster/id
    other_cluster = run_broker(
        broker_config(live.tmp / "other.properties", 0, live.data, elsewhere)
    )
    assert other_cluster.returncode != 0
    line = error_line(other_cluster)
    assert f"doesn't match stored clusterId {stored.cluster_id} in meta.properties. " in line
    assert line.endswith(
        "The broker is trying to join the wrong cluster. Configured zookeeper.connect may be wrong."
    ), line
    assert snapshot(live.data, contents=True) == stopped

    # Its own id and cluster: it starts again, after a kill -9 too (the kernel drops the
    # lock). A dir with data but no meta.properties is the broker's, as in Kafka's
    # ZooKeeper mode: the file is written again once the broker has registered.
    (live.data / META_PROPERTIES_FILE).unlink()
    for stop in (signal.SIGKILL, None):
        live.broker.start()
        live.broker.wait_registered(live.zk, 0)
        produce_and_consume(live.broker.bootstrap, live.topic, f"restart-{stop}", live.produced)
        live.produced += 20
        if stop is not None:
            live.broker.signal_and_wait(stop)
    assert read_meta_properties(live.data) == stored


# -- ZooKeeper out of reach -------------------------------------------------------------------


def test_an_unreachable_zookeeper_ends_the_broker_after_the_connection_timeout(
    tmp_path: Path,
) -> None:
    """Connection timeout 1 s, session timeout 60 s: the connection timeout is the one
    honoured. The bound is generous (the interpreter starts on a loaded machine)."""
    nowhere = f"127.0.0.1:{free_port()}"
    config = broker_config(
        tmp_path / "server.properties",
        0,
        tmp_path / "data",
        nowhere,
        **{"zookeeper.connection.timeout.ms": "1000", "zookeeper.session.timeout.ms": "60000"},
    )
    done = run_broker(config, timeout_s=30)
    assert done.returncode != 0
    line = error_line(done)
    assert line == (
        f"replog: broker 0 failed to start: Timed out waiting for connection to ZooKeeper "
        f"{nowhere} (zookeeper.connection.timeout.ms=1000)"
    )
    assert not (tmp_path / "data" / META_PROPERTIES_FILE).exists()


def test_the_connection_timeout_defaults_to_the_session_timeout() -> None:
    """Kafka's default for an unset ``zookeeper.connection.timeout.ms``."""

    def timeout(**props: str) -> int:
        return zookeeper_connection_timeout_ms(
            KafkaConfig.from_properties({"zookeeper.connect": "127.0.0.1:1", **props})
        )

    assert timeout() == 18000
    assert timeout(**{"zookeeper.session.timeout.ms": "6000"}) == 6000
    assert timeout(**{"zookeeper.connection.timeout.ms": "1500"}) == 1500


# -- replog cluster ---------------------------------------------------------------------------


def test_cluster_up_twice_refuses_and_the_first_cluster_serves_on(
    zookeeper, tmp_path: Path
) -> None:
    directory = tmp_path / "cluster"
    zk = f"{zookeeper.connect}/replog-{uuid.uuid4().hex[:8]}"
    try:
        first = replog(
            "cluster", "up", "--brokers", "1", "--dir", str(directory), "--zookeeper", zk
        )
        assert first.returncode == 0, first.stderr[-3000:]
        bootstrap = first.stdout.splitlines()[0]
        state = (directory / "cluster.json").read_bytes()
        broker_pid = LocalCluster(directory).broker_pid(0)

        second = replog(
            "cluster", "up", "--brokers", "1", "--dir", str(directory), "--zookeeper", zk
        )

        assert second.returncode != 0
        assert "Traceback" not in second.stderr
        [line] = second.stderr.strip().splitlines()
        assert line.startswith(f"replog: a cluster is running in {directory}: "), line
        assert f"broker 0 (pid {broker_pid})" in line
        assert (directory / "cluster.json").read_bytes() == state
        assert LocalCluster(directory).broker_pid(0) == broker_pid
        create_topic(bootstrap, "twice", 1)
        produce_and_consume(bootstrap, "twice", "first-cluster", 0)
    finally:
        LocalCluster(directory).down()


@pytest.mark.parametrize(
    "args",
    [
        ["down"],
        ["status"],
        ["roll"],
        ["kill", "--broker", "0"],
        ["start", "--broker", "0"],
        ["stop", "--broker", "0"],
    ],
)
def test_cluster_actions_on_a_directory_without_a_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    assert main(["cluster", args[0], "--dir", str(tmp_path), *args[1:]]) != 0
    out, err = capsys.readouterr()
    assert err.strip() == (
        f"replog: no cluster in {tmp_path} (replog cluster up --dir makes one)"
    ), err
    assert out == ""
    assert list(tmp_path.iterdir()) == []


def test_help_lists_the_sub_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "``" not in out
    for command in ("broker", "zookeeper", "cluster", "topics", "groups", "acls", "console"):
        assert any(line.split()[:1] == [command] for line in out.splitlines()), command
