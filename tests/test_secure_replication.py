"""Replication, controller requests and failover between brokers over SASL_SSL.

Three real brokers with ``inter.broker.listener.name=SASL_SSL``: followers fetch, the
controller sends LeaderAndIsr/UpdateMetadata/StopReplica and a stopping broker asks for
ControlledShutdown over TLS, logged in with SCRAM-SHA-512 as ``User:broker``. An
authorizer runs and ``super.users`` names only ``User:broker`` and ``User:admin``: a
broker request arriving anonymously (on the PLAINTEXT listener, which stays for tools)
would be refused ClusterAction, so full ISRs show that the brokers authenticated to each
other. SASL sessions last 4 s (``connections.max.reauth.ms``): the brokers' own
connections are renewed while records keep flowing. A leader's SIGKILL loses no
acknowledged record.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from clients_util import consume_confluent, make_records, produce_confluent
from cluster_util import wait_for
from replog.cluster.launcher import LocalCluster
from replog.protocol.client import AuthenticationError, KafkaConnection
from replog.security import sasl
from replog.security.client_security import ClientSecurity
from security_util import add_scram_user, make_broker_certs, sasl_config

BROKER_PASSWORD = "broker-" + uuid.uuid4().hex[:8]
ADMIN_PASSWORD = "admin-" + uuid.uuid4().hex[:8]
REAUTH_MS = 4000


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    return make_broker_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def cluster(zookeeper, certs: Path, tmp_path_factory) -> Iterator[LocalCluster]:
    chroot = f"{zookeeper.connect}/replog-{uuid.uuid4().hex[:8]}"
    # the brokers' own user exists before they start, as with Kafka
    add_scram_user(chroot, "broker", BROKER_PASSWORD, (sasl.SCRAM_SHA_512,))
    add_scram_user(chroot, "admin", ADMIN_PASSWORD, (sasl.SCRAM_SHA_512,))
    login = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="broker" password="{BROKER_PASSWORD}";'
    )
    c = LocalCluster(tmp_path_factory.mktemp("secure-replication"))
    try:
        c.up(
            3,
            zookeeper=chroot,
            extra_listeners=("SASL_SSL",),
            overrides={
                "inter.broker.listener.name": "SASL_SSL",
                "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": login,
                "ssl.keystore.location": str(certs / "broker.pem"),
                "ssl.truststore.location": str(certs / "ca.pem"),
                "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                "super.users": "User:broker;User:admin",
                "connections.max.reauth.ms": str(REAUTH_MS),
                "replica.lag.time.max.ms": "3000",
                "offsets.topic.replication.factor": "3",
            },
        )
        yield c
    finally:
        c.down()


def admin_config(cluster: LocalCluster, certs: Path) -> dict:
    return sasl_config(cluster, certs, sasl.SCRAM_SHA_512, "admin", ADMIN_PASSWORD)


def isrs(config: dict, topic: str) -> dict[int, tuple[int, ...]]:
    """Each partition's ISR (empty while it has no leader), as the admin user sees it."""
    md = AdminClient(config).list_topics(topic, timeout=20)
    return {
        p: tuple(sorted(m.isrs)) if m.leader >= 0 else ()
        for p, m in md.topics[topic].partitions.items()
    }


def test_replication_and_failover_over_sasl_ssl(cluster: LocalCluster, certs: Path) -> None:
    config = admin_config(cluster, certs)
    topic = "secure-repl"
    admin = AdminClient(config)
    new = NewTopic(topic, 2, 3, config={"min.insync.replicas": "2"})
    admin.create_topics([new], operation_timeout=30)[topic].result(timeout=40)
    wait_for(lambda: all(len(isr) >= 2 for isr in isrs(config, topic).values()), 30, "leaders")
    secure = cluster.bootstrap_servers(listener="SASL_SSL")
    client = {k: v for k, v in config.items() if k != "bootstrap.servers"}
    first = produce_confluent(secure, topic, make_records("a", 200, 2, 1_000), acks="all", **client)
    # Every follower fetches over SASL_SSL as User:broker (anonymous would be refused).
    wait_for(lambda: all(len(isr) == 3 for isr in isrs(config, topic).values()), 30, "full ISRs")

    # Sessions expire every 4 s; the brokers' connections are renewed, the ISR stays whole
    # (replica.lag.time.max.ms is 3 s) while records keep arriving for three sessions.
    more: list = []
    started = time.monotonic()
    while time.monotonic() - started < 3 * REAUTH_MS / 1000:
        batch = make_records(f"b{len(more)}", 20, 2, 2_000)
        more += produce_confluent(secure, topic, batch, acks="all", **client)
        assert all(len(isr) == 3 for isr in isrs(config, topic).values()), "an ISR shrank"

    leader = AdminClient(config).list_topics(topic, timeout=20).topics[topic].partitions[0].leader
    cluster.kill_broker(leader)
    wait_for(
        lambda: (
            AdminClient(config).list_topics(topic, timeout=5).topics[topic].partitions[0].leader
            not in (-1, leader)
        ),
        30,
        "a new leader after the kill",
    )
    after = produce_confluent(secure, topic, make_records("c", 100, 2, 3_000), acks="all", **client)
    cluster.start_broker(leader)
    wait_for(
        lambda: all(len(isr) == 3 for isr in isrs(config, topic).values()),
        60,
        "the restarted broker back in every ISR (its fetchers log in again)",
    )
    acked = first + more + after
    ends = {p: max(r.offset for r in acked if r.partition == p) + 1 for p in (0, 1)}
    read = consume_confluent(secure, topic, ends, **client)
    assert {(r.partition, r.offset, r.value) for r in acked} <= {
        (r.partition, r.offset, r.value) for r in read
    }, "an acknowledged record is missing after the failover"


def test_a_wrong_inter_broker_password_is_refused(cluster: LocalCluster, certs: Path) -> None:
    """What a broker configured with the wrong password gets: a refused login, raised
    as a connection failure its fetchers and controller channels retry."""
    port = int(cluster.bootstrap_servers(listener="SASL_SSL").split(",")[0].split(":")[1])
    security = ClientSecurity(
        protocol="SASL_SSL",
        mechanism="SCRAM-SHA-512",
        username="broker",
        password="not-the-password",
        ca_location=str(certs / "ca.pem"),
    )

    async def attempt() -> None:
        conn = KafkaConnection("127.0.0.1", port, client_id="impostor", security=security)
        await conn.connect(timeout_s=10)

    with pytest.raises(AuthenticationError, match="authentication failed"):
        asyncio.run(attempt())
    assert isinstance(AuthenticationError("x"), OSError)
