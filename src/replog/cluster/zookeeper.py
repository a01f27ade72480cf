"""Start and stop a real, standalone Apache ZooKeeper server for a local replog cluster.

The server jars come from, in order:

1. pyspark's bundled jars (``<site-packages>/pyspark/jars``): pyspark ships
   ``zookeeper-*.jar`` with its dependencies in the same directory;
2. ``$ZOOKEEPER_HOME/lib`` plus the jars at ``$ZOOKEEPER_HOME``'s root;
3. Debian's ``/usr/share/zookeeper`` (and its ``lib/``) and ``/usr/share/java``.

From the first directory holding a ZooKeeper server jar we build a minimal class path
(``zookeeper``, ``zookeeper-jute``, ``slf4j-api``, ``metrics-core``, ``snappy-java`` and one
SLF4J logging backend) instead of ``dir/*``: with all of Spark's ~280 jars on the class path
the JVM needs ~1.2 s to answer, with the minimal one ~0.4 s. If a needed jar is missing we
fall back to the whole directory.

The server always binds to 127.0.0.1 (``clientPortAddress``), runs without the AdminServer
(port 8080 stays free) and allows the four-letter words ``ruok``, ``srvr``, ``stat`` and
``mntr``. Readiness is judged by ``srvr`` reporting ``Mode: standalone``: ``ruok`` alone
answers ``imok`` even when the server failed to load its database.

Concurrency: these are blocking helpers for the launcher, tests and the CLI; none of them
touches an event loop.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from replog.zk.security import JAAS_PROPERTY, jaas_file_from

__all__ = [
    "ZooKeeperNotFoundError",
    "ZooKeeperServer",
    "ZooKeeperStartError",
    "find_zookeeper_classpath",
    "run_zookeeper_foreground",
    "start_zookeeper",
    "stop_zookeeper",
    "write_zookeeper_config",
]

MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
CONFIG_NAME = "zoo.cfg"
LOG4J2_CONFIG_NAME = "log4j2.properties"
LOGBACK_CONFIG_NAME = "logback.xml"

# Small, fast-starting JVM: ZooKeeper for a local cluster needs neither C2 nor a parallel GC.
JVM_OPTIONS = (
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Xms32m",
    "-Xmx512m",
    "-Djava.awt.headless=true",
    "-Dzookeeper.jmx.log4j.disable=true",
)

_REQUIRED_JARS = ("zookeeper", "zookeeper-jute", "slf4j-api", "metrics-core", "snappy-java")
# With an authentication provider configured, ZooKeeper's server loads Netty's TLS classes.
_AUTH_JARS = (
    "netty-handler",
    "netty-common",
    "netty-buffer",
    "netty-transport",
    "netty-codec",
    "netty-codec-base",
    "netty-resolver",
    "netty-transport-native-unix-common",
)
_LOG_BACKENDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("log4j2", ("log4j-slf4j2-impl", "log4j-api", "log4j-core")),
    ("logback", ("logback-classic", "logback-core")),
    ("reload4j", ("slf4j-reload4j", "reload4j")),
    ("simple", ("slf4j-simple",)),
)
_VERSIONED_JAR = re.compile(r"^(?P<name>.+?)(?:-(?P<version>\d[\w.+-]*))?\.jar$")


class ZooKeeperNotFoundError(RuntimeError):
    """No ZooKeeper server jars (or no ``java``) on this machine."""


class ZooKeeperStartError(RuntimeError):
    """The server process exited or did not answer in time; the message has the log tail."""


@dataclass
class ZooKeeperServer:
    """A ZooKeeper server process started by :func:`start_zookeeper`."""

    pid: int
    port: int
    data_dir: Path
    log_path: Path
    connect: str  # "127.0.0.1:PORT"
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class _ClassPath:
    entries: tuple[str, ...]
    log_backend: str | None
    auth_entries: tuple[str, ...] = ()  # (the Netty jars found, for a SASL server)


def _jar_name(path: Path) -> str | None:
    match = _VERSIONED_JAR.match(path.name)
    return match.group("name") if match else None


def _jars_by_name(dirs: Iterable[Path]) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for directory in dirs:
        if not directory.is_dir():
            continue
        for jar in sorted(directory.glob("*.jar")):
            name = _jar_name(jar)
            if name is not None:
                found.setdefault(name, jar)
    return found


def _candidate_dirs() -> list[tuple[Path, ...]]:
    candidates: list[tuple[Path, ...]] = []
    spec = importlib.util.find_spec("pyspark")  # locates pyspark without importing it
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidates.append((Path(location) / "jars",))
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        candidates.append((Path(home) / "lib", Path(home)))
    candidates.append((Path("/usr/share/zookeeper/lib"), Path("/usr/share/zookeeper")))
    candidates.append((Path("/usr/share/java"),))
    return candidates


def find_zookeeper_classpath() -> tuple[list[str], str | None]:
    """Return ``(class path entries, logging backend)`` for the first ZooKeeper install found.

    The backend is ``"log4j2"``, ``"logback"``, ``"reload4j"``, ``"simple"`` or ``None``
    (no backend known: SLF4J then logs nothing). Raises :class:`ZooKeeperNotFoundError`.
    """
    cp = _find_classpath()
    return list(cp.entries), cp.log_backend


def _find_classpath() -> _ClassPath:
    for dirs in _candidate_dirs():
        jars = _jars_by_name(dirs)
        if "zookeeper" not in jars:
            continue
        if all(name in jars for name in _REQUIRED_JARS):
            entries = [str(jars[name]) for name in _REQUIRED_JARS]
            auth = tuple(str(jars[name]) for name in _AUTH_JARS if name in jars)
            for backend, names in _LOG_BACKENDS:
                if all(name in jars for name in names):
                    entries.extend(str(jars[name]) for name in names)
                    return _ClassPath(tuple(entries), backend, auth)
            return _ClassPath(tuple(entries), None, auth)
        # Something we do not know is needed: take whole directories (slower JVM start).
        entries = [str(d / "*") for d in dirs if d.is_dir()]
        return _ClassPath(tuple(entries), None)
    raise ZooKeeperNotFoundError(
        "no ZooKeeper server jar found (looked in pyspark/jars, $ZOOKEEPER_HOME/lib, "
        "/usr/share/zookeeper, /usr/share/java); install pyspark or set ZOOKEEPER_HOME"
    )


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise ZooKeeperNotFoundError("no `java` on PATH and no usable $JAVA_HOME")
    return java


SASL_PROVIDER = "authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider"


def write_zookeeper_config(
    data_dir: Path, port: int, *, force_sync: bool = False, sasl: bool = False
) -> Path:
    """Write ``zoo.cfg`` (and logging configs) into ``data_dir``; return the ``zoo.cfg`` path.

    ZooKeeper keeps its snapshots and transaction logs under ``data_dir/version-2``.
    ``force_sync=False`` skips the fsync per transaction: fine for a local development
    cluster and much faster on a shared disk; a machine crash may lose recent ZooKeeper
    writes. ``sasl``: clients may log in with SASL (the JVM's JAAS ``Server`` section),
    and ACLs naming ``sasl:<user>`` apply to them.
    """
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    lines = [
        "tickTime=2000",
        f"dataDir={data_dir}",
        f"clientPort={port}",
        "clientPortAddress=127.0.0.1",
        "maxClientCnxns=0",
        "admin.enableServer=false",
        "4lw.commands.whitelist=ruok,srvr,stat,mntr",
        f"forceSync={'yes' if force_sync else 'no'}",
        "autopurge.snapRetainCount=3",
        "autopurge.purgeInterval=1",
    ]
    if sasl:
        lines.append(SASL_PROVIDER)
    cfg = data_dir / CONFIG_NAME
    cfg.write_text("\n".join(lines) + "\n")
    (data_dir / LOG4J2_CONFIG_NAME).write_text(
        "status = warn\n"
        "appender.console.type = Console\n"
        "appender.console.name = STDOUT\n"
        "appender.console.layout.type = PatternLayout\n"
        "appender.console.layout.pattern = [%d{ISO8601}] %p %c{1}: %m%n\n"
        "rootLogger.level = info\n"
        "rootLogger.appenderRef.stdout.ref = STDOUT\n"
    )
    (data_dir / LOGBACK_CONFIG_NAME).write_text(
        "<configuration>\n"
        '  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">\n'
        "    <encoder><pattern>[%d{ISO8601}] %level %logger{0}: %msg%n</pattern></encoder>\n"
        "  </appender>\n"
        '  <root level="INFO"><appender-ref ref="STDOUT"/></root>\n'
        "</configuration>\n"
    )
    return cfg


def _command(
    data_dir: Path, port: int, force_sync: bool, jaas_config: str | None = None
) -> list[str]:
    cp = _find_classpath()
    cfg = write_zookeeper_config(
        data_dir, port, force_sync=force_sync, sasl=jaas_config is not None
    )
    data_dir = cfg.parent
    options = list(JVM_OPTIONS)
    entries = list(cp.entries)
    if jaas_config is not None:
        options.append(f"-D{JAAS_PROPERTY}={Path(jaas_config).resolve()}")
        entries.extend(cp.auth_entries)
    if cp.log_backend == "log4j2":
        options.append(f"-Dlog4j2.configurationFile={data_dir / LOG4J2_CONFIG_NAME}")
    elif cp.log_backend == "logback":
        options.append(f"-Dlogback.configurationFile={data_dir / LOGBACK_CONFIG_NAME}")
    return [_java(), *options, "-cp", os.pathsep.join(entries), MAIN_CLASS, str(cfg)]


def four_letter_word(port: int, word: str, timeout_s: float = 1.0) -> str:
    """Send a four-letter word (``ruok``, ``srvr``...) to 127.0.0.1:port; return the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(word.encode("ascii"))
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def _is_serving(port: int) -> bool:
    try:
        return "Mode: standalone" in four_letter_word(port, "srvr")
    except OSError:
        return False


def _log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"<no log: {exc}>"


def start_zookeeper(
    data_dir: Path,
    port: int,
    *,
    log_path: Path | None = None,
    wait_s: float = 30,
    force_sync: bool = False,
    jaas_config: str | None = None,
) -> ZooKeeperServer:
    """Start ZooKeeper in the background (own process group) and wait until it serves.

    ``jaas_config``: a JAAS file whose ``Server`` section lists the SASL users
    (``replog.zk.security.write_server_jaas``); clients may then log in with them.

    Output goes to ``log_path`` (default ``data_dir/zookeeper.log``). Raises
    :class:`ZooKeeperStartError` with the log tail if the process exits or does not serve
    within ``wait_s``; the process is stopped in that case.
    """
    data_dir = Path(data_dir).resolve()
    command = _command(data_dir, port, force_sync, jaas_config)
    log_path = Path(log_path) if log_path is not None else data_dir / "zookeeper.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=data_dir,
            start_new_session=True,
        )
    server = ZooKeeperServer(
        pid=process.pid,
        port=port,
        data_dir=data_dir,
        log_path=log_path,
        connect=f"127.0.0.1:{port}",
        process=process,
    )
    deadline = time.monotonic() + wait_s
    delay = 0.02
    while True:
        code = process.poll()
        if code is not None:
            raise ZooKeeperStartError(
                f"ZooKeeper exited with code {code} before serving on 127.0.0.1:{port}; "
                f"log {log_path}:\n{_log_tail(log_path)}"
            )
        if _is_serving(port):
            return server
        if time.monotonic() >= deadline:
            stop_zookeeper(server)
            raise ZooKeeperStartError(
                f"ZooKeeper did not serve on 127.0.0.1:{port} within {wait_s}s; "
                f"log {log_path}:\n{_log_tail(log_path)}"
            )
        time.sleep(delay)
        delay = min(delay * 1.5, 0.25)


def _reap(pid: int) -> bool | None:
    """True if ``pid`` (our child) has exited and was reaped; None if it is not our child."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    return done == pid


def _gone(pid: int) -> bool:
    reaped = _reap(pid)
    if reaped is not None:
        return reaped
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def stop_zookeeper(server_or_pid: ZooKeeperServer | int, timeout_s: float = 10) -> None:
    """Stop the server by its pid: SIGTERM, then SIGKILL after ``timeout_s``. Idempotent."""
    if isinstance(server_or_pid, ZooKeeperServer):
        pid, process = server_or_pid.pid, server_or_pid.process
    else:
        pid, process = int(server_or_pid), None
    if process is not None:
        if process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        return
    if _gone(pid):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _gone(pid):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    while not _gone(pid):
        time.sleep(0.05)


def run_zookeeper_foreground(data_dir: Path, port: int, *, force_sync: bool = False) -> int:
    """Run ZooKeeper attached to this terminal until it exits; return its exit code.

    For ``replog zookeeper start --dir DIR --port P``. SIGTERM, SIGINT and SIGHUP received by
    this process are forwarded to the JVM, which shuts down cleanly. As Kafka's
    ``zookeeper-server-start.sh``, a JAAS file named in ``KAFKA_OPTS``
    (``-Djava.security.auth.login.config=...``) turns on SASL logins with its ``Server``
    section.
    """
    jaas = jaas_file_from(os.environ.get("KAFKA_OPTS", ""))
    command = _command(Path(data_dir).resolve(), port, force_sync, jaas)
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, cwd=Path(data_dir).resolve())

    def forward(signum: int, _frame: object) -> None:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM if signum == signal.SIGINT else signum)

    forwarded = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    previous = {signum: signal.signal(signum, forward) for signum in forwarded}
    try:
        while True:
            try:
                return process.wait()
            except KeyboardInterrupt:
                forward(signal.SIGINT, None)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
