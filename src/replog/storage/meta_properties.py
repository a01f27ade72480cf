"""``meta.properties``: whose data a log dir holds (Kafka's ``BrokerMetadataCheckpoint``).

Every log dir of a broker holds ``meta.properties`` in Kafka's ZooKeeper-mode format
(version 0), as ``java.util.Properties.store`` writes it::

    #
    #Sat Nov 28 06:02:29 UTC 2026
    cluster.id=3kq0Kc0mQ0ix0uBTYtWKMw
    version=0
    broker.id=0

At every start the broker reads it from each log dir and refuses to go on when the dirs
disagree (``InconsistentBrokerMetadataError``), when the configured ``broker.id`` is not
the stored one (``InconsistentBrokerIdError``) or when ZooKeeper's ``/cluster/id`` is
not the stored one (``InconsistentClusterIdError``); the messages are Kafka's. A dir
without the file, with data or without, is taken as this broker's, as Kafka does in
ZooKeeper mode (the upgrade path of logs older than the file): once registered, the
broker writes the file into every live dir whose file is missing or different.

A write is atomic and durable (temp file, fsync, rename, fsync of the dir); a read first
removes a temp file a crash may have left, as Kafka does. An unreadable file (an I/O
error, an unknown ``version``) takes its dir offline; a file without a valid
``broker.id`` stops the broker. These are plain functions over one dir; the log manager
applies them to its dirs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from replog.storage.checkpoints import atomic_write

META_PROPERTIES_FILE = "meta.properties"
VERSION = 0


class MetaPropertiesError(Exception):
    """The log dirs' ``meta.properties`` forbid this start; the message is one line."""


class InconsistentBrokerIdError(MetaPropertiesError):
    """Kafka's ``InconsistentBrokerIdException``."""


class InconsistentClusterIdError(MetaPropertiesError):
    """Kafka's ``InconsistentClusterIdException``."""


class InconsistentBrokerMetadataError(MetaPropertiesError):
    """Kafka's ``InconsistentBrokerMetadataException``."""


@dataclass(frozen=True)
class BrokerMetadata:
    """What ``meta.properties`` records (Kafka ``ZkMetaProperties``)."""

    broker_id: int
    cluster_id: str | None

    def __str__(self) -> str:
        return f"ZkMetaProperties(brokerId={self.broker_id}, clusterId={self.cluster_id})"


# -- the file's text (pure) ----------------------------------------------------------


def encode(metadata: BrokerMetadata, now_s: float) -> bytes:
    """The file as ``Properties.store(out, "")`` writes it: an empty comment, the date,
    then the keys (their values need no escaping: digits and base64url)."""
    lines = ["#", "#" + time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime(now_s))]
    if metadata.cluster_id is not None:
        lines.append(f"cluster.id={metadata.cluster_id}")
    lines += [f"version={VERSION}", f"broker.id={metadata.broker_id}"]
    return ("\n".join(lines) + "\n").encode()


def parse_properties(text: str) -> dict[str, str]:
    """``java.util.Properties.load`` for what meta.properties holds: ``#``/``!`` comments,
    ``key=value``, ``key:value`` or ``key value``, surrounding blanks ignored."""
    props = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = next((i for i, c in enumerate(line) if c in "=: \t\f"), len(line))
        value = line[cut:].lstrip(" \t\f")
        if value[:1] in ("=", ":"):
            value = value[1:]
        props[line[:cut]] = value.lstrip(" \t\f")
    return props


def decode(text: str, where: Path) -> BrokerMetadata:
    """The metadata in ``text`` (the file at ``where``). ``OSError`` for a version other
    than 0 (Kafka: an ``IOException``, the dir goes offline); ``MetaPropertiesError``
    without a valid ``broker.id``."""
    props = parse_properties(text)
    try:
        version = int(props.get("version", "0"))
    except ValueError:
        raise MetaPropertiesError(
            f"{where}: Failed to parse version property as an int: {props['version']!r}"
        ) from None
    if version != VERSION:
        raise OSError(f"Unrecognized version of the server meta.properties file: {version}")
    if "broker.id" not in props:
        raise MetaPropertiesError(f"{where}: Missing required property 'broker.id'")
    try:
        broker_id = int(props["broker.id"])
    except ValueError:
        broker_id = -1
    if broker_id < 0:
        raise MetaPropertiesError(
            f"{where}: property 'broker.id' must be an int >= 0, not {props['broker.id']!r}"
        )
    return BrokerMetadata(broker_id, props.get("cluster.id"))


# -- one dir's file ------------------------------------------------------------------


def read_meta_properties(log_dir: Path) -> BrokerMetadata | None:
    """The dir's metadata, or None without the file. Removes a leftover temp file first."""
    path = log_dir / META_PROPERTIES_FILE
    path.with_name(path.name + ".tmp").unlink(missing_ok=True)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as exc:
        raise OSError(f"{path} is not text: {exc}") from None
    return decode(text, path)


def write_meta_properties(log_dir: Path, metadata: BrokerMetadata, now_s: float) -> None:
    """Replace the dir's file atomically and durably."""
    atomic_write(log_dir / META_PROPERTIES_FILE, encode(metadata, now_s))


# -- the checks at start (pure) ----------------------------------------------------------


def common_metadata(found: Mapping[Path, BrokerMetadata]) -> BrokerMetadata | None:
    """The one metadata every dir holding a file agrees on (None: no dir has one)."""
    distinct = set(found.values())
    if len(distinct) > 1:
        listing = "; ".join(f"{d} -> {m}" for d, m in sorted(found.items()))
        raise InconsistentBrokerMetadataError(
            "BrokerMetadata is not consistent across log.dirs. This could happen if multiple "
            "brokers shared a log directory (log.dirs) or partial data was manually copied "
            f"from another broker. Found: {listing}"
        )
    return next(iter(distinct), None)


def check_broker_id(configured: int, stored: BrokerMetadata | None) -> None:
    """Kafka ``getOrGenerateBrokerId`` with a configured id."""
    if stored is not None and stored.broker_id != configured:
        raise InconsistentBrokerIdError(
            f"Configured broker.id {configured} doesn't match stored broker.id "
            f"{stored.broker_id} in meta.properties. If you moved your data, make sure your "
            "configured broker.id matches. If you intend to create a new broker, you should "
            "remove all data in your data directories (log.dirs)."
        )


def check_cluster_id(cluster_id: str, stored: BrokerMetadata | None) -> None:
    """Kafka ``KafkaServer.startup``'s check of ZooKeeper's ``/cluster/id``."""
    if stored is not None and stored.cluster_id is not None and stored.cluster_id != cluster_id:
        raise InconsistentClusterIdError(
            f"The Cluster ID {cluster_id} doesn't match stored clusterId {stored.cluster_id} "
            "in meta.properties. The broker is trying to join the wrong cluster. Configured "
            "zookeeper.connect may be wrong."
        )
