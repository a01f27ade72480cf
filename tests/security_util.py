"""What the secured-cluster tests share: certificates from a CA made with ``openssl``, a
cluster whose brokers serve SASL_SSL (and other listeners) beside the PLAINTEXT one they
use between themselves, SCRAM users written to ZooKeeper as ``replog users add`` would,
and librdkafka's settings for a SASL_SSL client."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from replog.cluster.certificates import make_ca, make_cert
from replog.cluster.launcher import LocalCluster
from replog.security import sasl
from replog.zk.client import KafkaZkClient


def make_broker_certs(directory: Path) -> Path:
    """``ca.pem`` and ``broker.pem`` (for 127.0.0.1) in ``directory``."""
    make_ca(directory, "ca", days=2)
    make_cert(directory, "broker", "ca", "/CN=127.0.0.1", "IP:127.0.0.1")
    return directory


@contextmanager
def secure_cluster(
    zookeeper_connect: str,
    certs: Path,
    directory: Path,
    *,
    brokers: int = 3,
    extra_listeners: tuple[str, ...] = ("SASL_SSL",),
    overrides: Mapping[str, str] | None = None,
) -> Iterator[LocalCluster]:
    """Brokers in a chroot of their own, TLS from ``certs``; stopped (by pid) at the end."""
    cluster = LocalCluster(directory)
    chroot = f"{zookeeper_connect}/replog-{uuid.uuid4().hex[:8]}"
    try:
        cluster.up(
            brokers,
            zookeeper=chroot,
            extra_listeners=extra_listeners,
            overrides={
                "ssl.keystore.location": str(certs / "broker.pem"),
                "ssl.truststore.location": str(certs / "ca.pem"),
                **(overrides or {}),
            },
        )
        yield cluster
    finally:
        cluster.down()


def add_scram_user(
    cluster: LocalCluster | str,
    user: str,
    password: str,
    mechanisms: tuple[str, ...] = (sasl.SCRAM_SHA_256, sasl.SCRAM_SHA_512),
) -> None:
    """The user's SCRAM credentials in ZooKeeper ``/config/users/<user>``, of a cluster or
    of a ZooKeeper connect string (chroot created: before the brokers start)."""
    connect = cluster if isinstance(cluster, str) else cluster.zookeeper_connect
    zk = KafkaZkClient(connect)
    zk.start()
    try:
        zk.change_entity_config(
            "users",
            user,
            {m: sasl.format_credential(sasl.scram_credential(m, password)) for m in mechanisms},
            None,
        )
    finally:
        zk.close()


def sasl_config(
    cluster: LocalCluster, certs: Path, mechanism: str, user: str, password: str
) -> dict[str, str]:
    """librdkafka's settings (confluent-kafka, kcat) for SASL_SSL with ``mechanism``."""
    return {
        "bootstrap.servers": cluster.bootstrap_servers(listener="SASL_SSL"),
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": mechanism,
        "sasl.username": user,
        "sasl.password": password,
        "ssl.ca.location": str(certs / "ca.pem"),
    }
