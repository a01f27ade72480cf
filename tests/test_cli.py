"""The ``replog`` command: broker start-up errors, SIGTERM, and ``replog topics``.

Brokers started here are children of the test, stopped by their pid in a
``finally`` (SIGTERM, then SIGKILL if they do not leave).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource
from kazoo.client import KazooClient

from clients_util import (
    Rec,
    consume_confluent,
    create_topic,
    produce_confluent,
    wait_for,
    wait_for_leaders,
    watermarks,
)
from fixtures.processes import free_port
from replog.cli.main import main
from replog.cluster.launcher import LocalCluster
from replog.storage.checkpoints import OffsetCheckpointFile

REPLOG = [sys.executable, "-m", "replog.cli.main"]


def run_replog(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*REPLOG, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


# -- bad configuration ------------------------------------------------------------------

GOOD = {
    "broker.id": "0",
    "listeners": "PLAINTEXT://127.0.0.1:1",
    "log.dirs": "/nonexistent/replog-never-used",
    "zookeeper.connect": "127.0.0.1:1",
}


@pytest.mark.parametrize(
    ("lines", "overrides", "message"),
    [
        ({"foo.bar": "1"}, [], r"unknown configuration key 'foo\.bar'"),
        ({"broker.id": "abc"}, [], r"invalid value 'abc' for broker\.id"),
        ({"broker.id": "-3"}, [], r"broker\.id"),
        ({"log.segment.bytes": "ten"}, [], r"log\.segment\.bytes"),
        ({"log.message.timestamp.type": "Sometime"}, [], r"log\.message\.timestamp\.type"),
        ({"log.roll.hours": "0"}, [], r"log\.roll\.hours: Value must be at least 1"),
        ({"log.retention.minutes": "soon"}, [], r"log\.retention\.minutes"),
        ({"listeners": "127.0.0.1:9092"}, [], r"listeners"),
        ({"auto.create.topics.enable": "yes"}, [], r"auto\.create\.topics\.enable"),
        ({"zookeeper.connect": ""}, [], r"zookeeper\.connect"),
        ({}, ["no-equals-sign"], r"override 'no-equals-sign'"),
        ({}, ["num.partitions=0"], r"num\.partitions"),
    ],
)
def test_bad_config_exits_with_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    lines: dict[str, str],
    overrides: list[str],
    message: str,
) -> None:
    """``main()`` in-process: the same code path as the command, minus the interpreter."""
    config = tmp_path / "server.properties"
    props = {**GOOD, **lines}
    config.write_text("# a broker config\n" + "".join(f"{k}={v}\n" for k, v in props.items()))
    args = ["broker", "start", "--config", str(config)]
    for item in overrides:
        args += ["--override", item]
    assert main(args) != 0
    out, err = capsys.readouterr()
    error_lines = err.strip().splitlines()
    assert len(error_lines) == 1, err
    assert error_lines[0].startswith("replog: "), error_lines[0]
    assert re.search(message, error_lines[0]), error_lines[0]
    assert out == ""


def test_bad_config_as_a_process(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in {**GOOD, "foo.bar": "1"}.items()))
    done = run_replog("broker", "start", "--config", str(config), timeout=60)
    assert done.returncode == 2
    assert done.stdout == ""
    [line] = done.stderr.strip().splitlines()
    assert line == "replog: bad configuration: unknown configuration key 'foo.bar'"


def test_missing_or_unreadable_config_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["broker", "start", "--config", str(tmp_path / "absent.properties")]) != 0
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "absent.properties" in line and line.startswith("replog: ")

    broken = tmp_path / "broken.properties"
    broken.write_text("broker.id=0\nthis line has no separator\n")
    assert main(["broker", "start", "--config", str(broken)]) != 0
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "broken.properties:2" in line


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "replog"
    done = subprocess.run(
        [str(script), "broker", "start", "--config", "/nonexistent/server.properties"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0 and done.stderr.startswith("replog: ")


# -- SIGTERM ----------------------------------------------------------------------------


class BrokerProcess:
    """A broker run by the test itself, so that its exit status can be read."""

    def __init__(self, config: Path, log_path: Path) -> None:
        self.config = config
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [*REPLOG, "broker", "start", "--config", str(self.config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def wait_listening(self, port: int, timeout_s: float = 60) -> None:
        def listening() -> bool:
            assert self.proc is not None and self.proc.poll() is None, self.log()[-3000:]
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                return False
            return True

        wait_for(listening, timeout_s, f"the broker to listen on port {port}")

    def terminate(self, timeout_s: float = 60) -> int:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGTERM)
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


@pytest.fixture
def own_broker(zookeeper, tmp_path: Path) -> Iterator[tuple[BrokerProcess, str, Path]]:
    port = free_port()
    data = tmp_path / "data"
    config = tmp_path / "server.properties"
    props = {
        "broker.id": "0",
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "log.dirs": str(data),
        "zookeeper.connect": f"{zookeeper.connect}/replog-cli-{uuid.uuid4().hex[:8]}",
        "zookeeper.session.timeout.ms": "6000",
        # Long intervals: the checkpoints found after SIGTERM are the shutdown's own.
        "log.flush.offset.checkpoint.interval.ms": "600000",
        "replica.high.watermark.checkpoint.interval.ms": "600000",
    }
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    broker = BrokerProcess(config, tmp_path / "broker.log")
    try:
        yield broker, f"127.0.0.1:{port}", data
    finally:
        broker.cleanup()


def test_sigterm_exits_0_with_marker_and_checkpoints(own_broker) -> None:
    broker, bootstrap, data = own_broker
    broker.start()
    broker.wait_listening(int(bootstrap.rsplit(":", 1)[1]))
    topic = "cli-shutdown"
    create_topic(bootstrap, topic, 2)
    assert not (data / ".kafka_cleanShutdown").exists(), "the marker must go while running"
    now = int(time.time() * 1000)
    records = [Rec(i % 2, -1, b"k%d" % i, b"v%d" % i, (), now + i) for i in range(600)]
    acked = produce_confluent(bootstrap, topic, records)
    ends = {p: sum(1 for r in acked if r.partition == p) for p in (0, 1)}

    assert broker.terminate() == 0, broker.log()[-3000:]
    assert "stopped cleanly" in broker.log()
    assert (data / ".kafka_cleanShutdown").exists()
    recovery = OffsetCheckpointFile(data / "recovery-point-offset-checkpoint").read()
    starts = OffsetCheckpointFile(data / "log-start-offset-checkpoint").read()
    high_watermarks = OffsetCheckpointFile(data / "replication-offset-checkpoint").read()
    for partition, end in ends.items():
        assert recovery[(topic, partition)] == end
        assert starts[(topic, partition)] == 0
        assert high_watermarks[(topic, partition)] == end

    # Started again: a clean start (nothing rescanned), everything still there.
    log_size = len(broker.log())
    broker.start()
    broker.wait_listening(int(bootstrap.rsplit(":", 1)[1]))
    wait_for_leaders(bootstrap, {topic: 2})
    restart_log = broker.log()[log_size:]
    assert re.search(r"loaded 2 log\(s\) from .* \(clean shutdown\)", restart_log), restart_log
    assert "recovered" not in restart_log
    assert not (data / ".kafka_cleanShutdown").exists()
    read = consume_confluent(bootstrap, topic, ends)
    assert sorted(read, key=lambda r: (r.partition, r.offset)) == sorted(
        acked, key=lambda r: (r.partition, r.offset)
    )
    assert broker.terminate() == 0


# -- replog topics ------------------------------------------------------------------------


def test_topics_create_describe_list_delete(replog_broker: LocalCluster) -> None:
    bootstrap = replog_broker.bootstrap_servers()
    topic = "cli-topic"
    data = replog_broker.broker_dir(0) / "data"

    done = run_replog(
        "topics", "create", "--bootstrap-server", bootstrap, "--topic", topic,
        "--partitions", "3", "--replication-factor", "1",
        "--config", "retention.ms=123456", "--config", "segment.bytes=1048576",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"Created topic {topic}."

    again = run_replog("topics", "create", "--bootstrap-server", bootstrap, "--topic", topic)
    assert again.returncode == 1
    assert re.search(r"already.exists", again.stderr, re.IGNORECASE), again.stderr

    bad = run_replog(
        "topics", "create", "--bootstrap-server", bootstrap, "--topic", "cli-bad-config",
        "--config", "no.such.key=1",
    )  # fmt: skip
    assert bad.returncode == 1
    assert re.search(r"invalid.config", bad.stderr, re.IGNORECASE), bad.stderr

    listed = run_replog("topics", "list", "--bootstrap-server", bootstrap)
    assert listed.returncode == 0, listed.stderr
    assert topic in listed.stdout.split()
    assert "cli-bad-config" not in listed.stdout.split()

    described = run_replog("topics", "describe", "--bootstrap-server", bootstrap, "--topic", topic)
    assert described.returncode == 0, described.stderr
    lines = described.stdout.strip().splitlines()
    head = dict(f.split(": ", 1) for f in lines[0].split("\t"))
    assert head == {
        "Topic": topic,
        "TopicId": head["TopicId"],
        "PartitionCount": "3",
        "ReplicationFactor": "1",
    }
    # Kafka's text form of the topic's id, the one in its ZooKeeper znode.
    zk = KazooClient(hosts=replog_broker.zookeeper_connect)
    zk.start(timeout=30)
    try:
        znode, _ = zk.get(f"/brokers/topics/{topic}")
    finally:
        zk.stop()
        zk.close()
    assert head["TopicId"] == json.loads(znode)["topic_id"]
    rows = [dict(f.split(": ", 1) for f in line.strip().split("\t")) for line in lines[1:]]
    assert [row["Partition"] for row in rows] == ["0", "1", "2"]
    assert all(
        row["Leader"] == "0" and row["Replicas"] == "0" and row["Isr"] == "0" for row in rows
    )

    # The configs given to the CLI are the topic's.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    assert configs["retention.ms"].value == "123456"
    assert configs["segment.bytes"].value == "1048576"

    # The topic works.
    wait_for_leaders(bootstrap, {topic: 3})
    acked = produce_confluent(
        bootstrap, topic, [Rec(p, -1, None, b"cli", (), int(time.time() * 1000)) for p in range(3)]
    )
    assert sorted((r.partition, r.offset) for r in acked) == [(0, 0), (1, 0), (2, 0)]
    assert all((data / f"{topic}-{p}").is_dir() for p in range(3))

    deleted = run_replog("topics", "delete", "--bootstrap-server", bootstrap, "--topic", topic)
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.strip() == f"Deleted topic {topic}."
    wait_for(
        lambda: not any((data / f"{topic}-{p}").exists() for p in range(3)),
        30,
        "the deleted topic's partition directories to go",
    )
    listed = run_replog("topics", "list", "--bootstrap-server", bootstrap)
    assert topic not in listed.stdout.split()

    gone = run_replog("topics", "describe", "--bootstrap-server", bootstrap, "--topic", topic)
    assert gone.returncode == 1
    again = run_replog("topics", "delete", "--bootstrap-server", bootstrap, "--topic", topic)
    assert again.returncode == 1
    assert re.search(r"unknown.topic", again.stderr, re.IGNORECASE), again.stderr

    # The name can be used again, from scratch.
    create_topic(bootstrap, topic, 1)
    assert watermarks(bootstrap, topic, 0) == (0, 0)


def test_topics_cannot_reach_broker() -> None:
    done = run_replog("topics", "list", "--bootstrap-server", f"127.0.0.1:{free_port()}")
    assert done.returncode != 0
    assert done.stderr.startswith("replog: ")
