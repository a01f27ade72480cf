"""TLS and SASL listeners (``replog.server.authentication``) on real broker processes.

Three brokers serve PLAINTEXT (between brokers), SASL_SSL (SCRAM-SHA-256/512 from
ZooKeeper ``/config/users``, PLAIN from the listener's JAAS options) and SSL with
required client certificates; certificates come from a CA made here with ``openssl``.
Real clients (confluent-kafka, kafka-python) produce and consume over them; wrong
passwords, unknown mechanisms, requests before authentication, plaintext spoken to a TLS
port, untrusted certificates and a stalled TLS handshake are refused without disturbing
anyone else. The SCRAM arithmetic is checked against ``scramp``'s client.
"""

from __future__ import annotations

import socket
import ssl
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from scramp import ScramClient

from cluster_util import wait_for
from replog.cluster.certificates import make_ca, make_cert
from replog.cluster.launcher import LocalCluster
from replog.protocol import apis, frames
from replog.protocol.apis import ApiKey
from replog.security import sasl
from security_util import add_scram_user, make_broker_certs, sasl_config, secure_cluster

SCRAM_USER, SCRAM_PASSWORD = "alice", "alice-secret"
REAUTH_MS = 3000
PLAIN_USER, PLAIN_PASSWORD = "bob", "bob-secret"


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    d = make_broker_certs(tmp_path_factory.mktemp("certs"))
    make_ca(d, "rogue-ca", days=2)
    make_cert(d, "client", "ca", "/CN=carol/OU=dev")
    make_cert(d, "rogue", "rogue-ca", "/CN=mallory")
    return d


@pytest.fixture(scope="module")
def cluster(zookeeper, certs: Path, tmp_path_factory) -> Iterator[LocalCluster]:
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'user_{PLAIN_USER}="{PLAIN_PASSWORD}";'
    )
    with secure_cluster(
        zookeeper.connect,
        certs,
        tmp_path_factory.mktemp("security"),
        extra_listeners=("SASL_SSL", "SSL"),
        overrides={
            "listener.name.ssl.ssl.client.auth": "required",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas,
            # KIP-368: SASL sessions last 3 s; clients re-authenticate or are closed
            "connections.max.reauth.ms": str(REAUTH_MS),
        },
    ) as c:
        add_scram_user(c, SCRAM_USER, SCRAM_PASSWORD)
        yield c


def round_trip(config: dict, topic: str, count: int = 20) -> list[bytes]:
    admin = AdminClient(config)
    admin.create_topics([NewTopic(topic, 1, 3)], operation_timeout=30)[topic].result(timeout=40)
    producer = Producer({**config, "acks": "all"})
    for i in range(count):
        producer.produce(topic, value=f"{topic}-{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({**config, "group.id": f"g-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        while len(values) < count:
            msg = consumer.poll(20)
            assert msg is not None, f"read {len(values)} of {count}"
            assert msg.error() is None, msg.error()
            values.append(msg.value())
    finally:
        consumer.close()
    return values


@pytest.mark.parametrize("mechanism", [sasl.SCRAM_SHA_512, sasl.SCRAM_SHA_256])
def test_scram_over_tls_with_confluent_kafka(cluster, certs, mechanism) -> None:
    config = sasl_config(cluster, certs, mechanism, SCRAM_USER, SCRAM_PASSWORD)
    topic = f"scram-{mechanism.lower()}"
    assert round_trip(config, topic) == [f"{topic}-{i}".encode() for i in range(20)]
    # Metadata over SASL_SSL names the brokers' SASL_SSL endpoints, not PLAINTEXT ones.
    md = AdminClient(config).list_topics(timeout=20)
    ports = {
        int(s.split(":")[1]) for s in cluster.bootstrap_servers(listener="SASL_SSL").split(",")
    }
    assert {b.port for b in md.brokers.values()} == ports


def test_plain_over_tls_with_kafka_python(cluster, certs) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    settings = dict(
        bootstrap_servers=cluster.bootstrap_servers(listener="SASL_SSL").split(","),
        security_protocol="SASL_SSL",
        sasl_mechanism="PLAIN",
        sasl_plain_username=PLAIN_USER,
        sasl_plain_password=PLAIN_PASSWORD,
        ssl_cafile=str(certs / "ca.pem"),
    )
    topic = "plain-kafka-python"
    admin = AdminClient(sasl_config(cluster, certs, "PLAIN", PLAIN_USER, PLAIN_PASSWORD))
    admin.create_topics([NewTopic(topic, 1, 3)], operation_timeout=30)[topic].result(timeout=40)
    producer = KafkaProducer(acks="all", **settings)
    for i in range(5):
        producer.send(topic, f"p{i}".encode(), partition=0).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(**settings, consumer_timeout_ms=20_000)
    consumer.assign([KTopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    got = [m.value for _, m in zip(range(5), consumer, strict=False)]
    consumer.close()
    assert got == [f"p{i}".encode() for i in range(5)]


def test_mutual_tls_listener(cluster, certs) -> None:
    config = {
        "bootstrap.servers": cluster.bootstrap_servers(listener="SSL"),
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs / "ca.pem"),
        "ssl.certificate.location": str(certs / "client.crt"),
        "ssl.key.location": str(certs / "client.key"),
    }
    assert len(AdminClient(config).list_topics(timeout=20).brokers) == 3
    # Without a client certificate the handshake is refused (ssl.client.auth=required).
    anonymous = {k: v for k, v in config.items() if not k.startswith(("ssl.cert", "ssl.key"))}
    with pytest.raises(KafkaException):
        AdminClient(anonymous).list_topics(timeout=5)


@pytest.mark.parametrize(
    "mechanism, user, password",
    [
        (sasl.SCRAM_SHA_512, SCRAM_USER, "wrong"),
        (sasl.SCRAM_SHA_512, "nobody", "x"),
        ("PLAIN", PLAIN_USER, "wrong"),
    ],
)
def test_bad_credentials_are_refused(cluster, certs, mechanism, user, password) -> None:
    errors: list = []
    producer = Producer(
        {**sasl_config(cluster, certs, mechanism, user, password), "error_cb": errors.append}
    )
    wait_for(
        lambda: producer.poll(0.2) is not None and errors,
        30,
        "the client to report an authentication error",
    )
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert "Authentication failed" in str(errors[0])
    with pytest.raises(KafkaException):  # no metadata for a client that did not authenticate
        producer.list_topics(timeout=3)


# -- raw exchanges over TLS ----------------------------------------------------------------


class RawTls:
    """A TLS connection speaking Kafka frames by hand (requests out of order on purpose)."""

    def __init__(self, port: int, certs: Path) -> None:
        context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        self.sock = context.wrap_socket(
            socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname="127.0.0.1"
        )
        self.correlation = 0

    def call(self, api_key: int, version: int, body) -> object | None:
        """The decoded response, or None when the broker closed the connection."""
        self.correlation += 1
        self.sock.sendall(frames.encode_request(api_key, version, self.correlation, "raw", body))
        try:
            head = self._read(4)
        except ConnectionError:
            return None
        if head is None:
            return None
        data = self._read(struct.unpack(">i", head)[0])
        return None if data is None else frames.decode_response(api_key, version, data)[1]

    def _read(self, n: int) -> bytes | None:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                return None
            out += chunk
        return out

    def close(self) -> None:
        self.sock.close()


def _sasl_port(cluster: LocalCluster) -> int:
    return int(cluster.bootstrap_servers([0], listener="SASL_SSL").split(":")[1])


def test_unknown_mechanism_and_requests_out_of_order(cluster, certs) -> None:
    handshake = apis.request_schema(ApiKey.SASL_HANDSHAKE, 1)
    raw = RawTls(_sasl_port(cluster), certs)
    try:
        answer = raw.call(ApiKey.SASL_HANDSHAKE, 1, handshake(mechanism="GSSAPI"))
        assert answer.error_code == ErrorCode.unsupported_sasl_mechanism
        assert set(answer.mechanisms) == set(sasl.MECHANISMS)
        authenticate = apis.request_schema(ApiKey.SASL_AUTHENTICATE, 2)
        answer = raw.call(ApiKey.SASL_AUTHENTICATE, 2, authenticate(auth_bytes=b"n,,n=x,r=y"))
        assert answer.error_code == ErrorCode.illegal_sasl_state
        assert (
            raw.call(ApiKey.API_VERSIONS, 0, apis.request_schema(ApiKey.API_VERSIONS, 0)()) is None
        )
    finally:
        raw.close()
    raw = RawTls(_sasl_port(cluster), certs)
    try:  # Metadata before authenticating: the connection is closed
        metadata = apis.request_schema(ApiKey.METADATA, 4)
        body = metadata(topics=None, allow_auto_topic_creation=False)
        assert raw.call(ApiKey.METADATA, 4, body) is None
    finally:
        raw.close()


def test_scram_exchange_matches_an_independent_client(cluster, certs) -> None:
    """The broker's SCRAM-SHA-512 over SaslAuthenticate, driven by scramp's client, which
    also checks the server's signature."""
    raw = RawTls(_sasl_port(cluster), certs)
    try:
        assert _scram_login(raw, SCRAM_USER, SCRAM_PASSWORD).error_code == ErrorCode.none
        answer = _metadata(raw)
        assert answer is not None and len(answer.brokers) == 3
    finally:
        raw.close()


def test_plaintext_to_tls_port_untrusted_cert_and_stalled_handshake(cluster, certs) -> None:
    port = _sasl_port(cluster)
    # Kafka bytes without TLS: the broker drops the connection.
    with socket.create_connection(("127.0.0.1", port), timeout=15) as plain:
        versions = apis.request_schema(ApiKey.API_VERSIONS, 0)()
        plain.sendall(frames.encode_request(ApiKey.API_VERSIONS, 0, 1, "p", versions))
        data = plain.recv(100)
        # closed, or a TLS alert record (content type 21); never a Kafka answer
        assert data == b"" or data[0] == 21, data[:20]
    # A client trusting another CA refuses the broker's certificate.
    rogue = ssl.create_default_context(cafile=str(certs / "rogue-ca.pem"))
    with pytest.raises(ssl.SSLError):
        rogue.wrap_socket(
            socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname="127.0.0.1"
        )
    # A connection that never starts its handshake does not hold others up.
    stalled = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        config = sasl_config(cluster, certs, sasl.SCRAM_SHA_512, SCRAM_USER, SCRAM_PASSWORD)
        assert len(AdminClient(config).list_topics(timeout=20).brokers) == 3
    finally:
        stalled.close()


def test_scram_credentials_through_the_admin_api(cluster, certs) -> None:
    """AlterUserScramCredentials / DescribeUserScramCredentials (KIP-554) from
    confluent-kafka's AdminClient on the PLAINTEXT listener; the new user logs in over
    SASL_SSL, and no longer once deleted."""
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("dave", info, b"dave-secret")]
    )
    futures["dave"].result(timeout=20)
    described = admin.describe_user_scram_credentials(["dave"])["dave"].result(timeout=20)
    [found] = described.scram_credential_infos
    assert (found.mechanism, found.iterations) == (ScramMechanism.SCRAM_SHA_256, 8192)
    config = sasl_config(cluster, certs, sasl.SCRAM_SHA_256, "dave", "dave-secret")
    assert len(AdminClient(config).list_topics(timeout=20).brokers) == 3
    # Too few iterations: refused, nothing stored.
    weak = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 100)
    bad = admin.alter_user_scram_credentials([UserScramCredentialUpsertion("erin", weak, b"x")])
    with pytest.raises(KafkaException, match="UNACCEPTABLE_CREDENTIAL|Iterations"):
        bad["erin"].result(timeout=20)
    with pytest.raises(KafkaException, match="RESOURCE_NOT_FOUND|does not exist"):
        admin.describe_user_scram_credentials(["erin"])["erin"].result(timeout=20)
    gone = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("dave", ScramMechanism.SCRAM_SHA_256)]
    )
    gone["dave"].result(timeout=20)
    errors: list = []
    producer = Producer({**config, "error_cb": errors.append})
    wait_for(lambda: producer.poll(0.2) is not None and errors, 30, "dave to be refused")
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


def test_users_command(cluster, certs, tmp_path) -> None:
    """``replog users add|list|delete``; the password comes from a file and never shows."""
    replog = [sys.executable, "-m", "replog.cli.main", "users"]
    bootstrap = ["--bootstrap-server", cluster.bootstrap_servers()]
    secret = tmp_path / "pw"
    secret.write_text("frank-secret\n")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*replog, *bootstrap, *args], capture_output=True, text=True, timeout=60
        )

    added = run("add", "frank", "--mechanism", "SCRAM-SHA-512", "--password-file", str(secret))
    assert added.returncode == 0, added.stderr
    listed = run("list")
    assert "frank: SCRAM-SHA-512 (iterations 4096)" in listed.stdout
    assert "frank-secret" not in added.stdout + added.stderr + listed.stdout + listed.stderr
    config = sasl_config(cluster, certs, sasl.SCRAM_SHA_512, "frank", "frank-secret")
    assert len(AdminClient(config).list_topics(timeout=20).brokers) == 3
    missing = run("delete", "nobody-here")
    assert missing.returncode == 1 and "RESOURCE_NOT_FOUND" in missing.stderr.upper()
    assert run("add", "x", "--mechanism", "MD5", "--password", "p").returncode == 1
    # Over the SASL_SSL listener, logged in as frank (--command-config, Kafka's spelling)
    props = tmp_path / "frank.properties"
    props.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="frank" password="frank-secret";\n'
        f"ssl.truststore.location={certs / 'ca.pem'}\n"
    )
    secured = subprocess.run(
        [*replog, "--bootstrap-server", cluster.bootstrap_servers(listener="SASL_SSL")]
        + ["--command-config", str(props), "list"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert secured.returncode == 0, secured.stderr
    assert "frank: SCRAM-SHA-512" in secured.stdout
    props.write_text(props.read_text().replace("frank-secret", "wrong"))
    refused = subprocess.run(
        [*replog, "--bootstrap-server", cluster.bootstrap_servers(listener="SASL_SSL")]
        + ["--command-config", str(props), "list"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 1 and "authentication failed" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr


def test_cluster_up_secure(tmp_path) -> None:
    """``replog cluster up --secure``: a client configured from its client.properties
    (SASL_SSL, SCRAM, the generated CA) reaches every broker; the password is in the file,
    not on the terminal; the brokers replicate over SASL_SSL."""
    directory = tmp_path / "secure"
    replog = [sys.executable, "-m", "replog.cli.main", "cluster"]
    try:
        up = subprocess.run(
            [*replog, "up", "--brokers", "2", "--dir", str(directory), "--secure"],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert up.returncode == 0, up.stderr
        props = (directory / "client.properties").read_text()
        config = dict(line.split("=", 1) for line in props.splitlines())
        assert config["security.protocol"] == "SASL_SSL"
        assert config["sasl.password"] not in up.stdout + up.stderr
        admin = AdminClient(config)
        assert len(admin.list_topics(timeout=20).brokers) == 2
        admin.create_topics([NewTopic("secure-up", 1, 2)])["secure-up"].result(timeout=40)

        def isr() -> list[int]:
            partition = admin.list_topics("secure-up", timeout=10).topics["secure-up"].partitions
            return sorted(partition[0].isrs) if 0 in partition else []

        wait_for(lambda: isr() == [0, 1], 30, "the follower in the ISR (fetching over SASL_SSL)")
        server = (directory / "broker-0" / "server.properties").read_text()
        assert "inter.broker.listener.name=SASL_SSL" in server
    finally:
        subprocess.run([*replog, "down", "--dir", str(directory)], capture_output=True, timeout=120)


def _scram_login(raw: RawTls, user: str, password: str) -> object:
    """A SCRAM-SHA-512 exchange on ``raw``; the last SaslAuthenticate answer."""
    handshake = apis.request_schema(ApiKey.SASL_HANDSHAKE, 1)
    assert (
        raw.call(ApiKey.SASL_HANDSHAKE, 1, handshake(mechanism=sasl.SCRAM_SHA_512)).error_code
        == ErrorCode.none
    )
    client = ScramClient([sasl.SCRAM_SHA_512], user, password)
    authenticate = apis.request_schema(ApiKey.SASL_AUTHENTICATE, 2)
    first = raw.call(
        ApiKey.SASL_AUTHENTICATE, 2, authenticate(auth_bytes=client.get_client_first().encode())
    )
    if first.error_code != ErrorCode.none:
        return first
    client.set_server_first(bytes(first.auth_bytes).decode())
    final = raw.call(
        ApiKey.SASL_AUTHENTICATE, 2, authenticate(auth_bytes=client.get_client_final().encode())
    )
    if final.error_code == ErrorCode.none:
        client.set_server_final(bytes(final.auth_bytes).decode())  # raises if forged
    return final


def _metadata(raw: RawTls) -> object | None:
    metadata = apis.request_schema(ApiKey.METADATA, 4)
    return raw.call(ApiKey.METADATA, 4, metadata(topics=None, allow_auto_topic_creation=False))


def test_sessions_end_unless_the_client_re_authenticates(cluster, certs) -> None:
    """KIP-368: SaslAuthenticate announces the session lifetime; a connection that does
    not re-authenticate is closed at its first request after it; re-authenticating as the
    same user continues it, as another user ends it."""
    raw = RawTls(_sasl_port(cluster), certs)
    try:
        answer = _scram_login(raw, SCRAM_USER, SCRAM_PASSWORD)
        assert answer.error_code == ErrorCode.none
        assert answer.session_lifetime.total_seconds() * 1000 == REAUTH_MS
        assert _metadata(raw) is not None
        # The same principal again: the session goes on.
        assert _scram_login(raw, SCRAM_USER, SCRAM_PASSWORD).error_code == ErrorCode.none
        assert _metadata(raw) is not None
        # Then nothing: the broker closes the connection once the session is over.
        wait_for(lambda: _metadata(raw) is None, 30, "the expired session to be closed")
    finally:
        raw.close()
    raw = RawTls(_sasl_port(cluster), certs)
    try:
        assert _scram_login(raw, SCRAM_USER, SCRAM_PASSWORD).error_code == ErrorCode.none
        # another SCRAM user to try switching to
        add_scram_user(cluster, "grace", "grace-secret", (sasl.SCRAM_SHA_512,))
        switched = _scram_login(raw, "grace", "grace-secret")
        assert switched.error_code == ErrorCode.sasl_authentication_failed
        assert _metadata(raw) is None
    finally:
        raw.close()


def test_librdkafka_re_authenticates_across_sessions(cluster, certs) -> None:
    """A producer over SASL_SSL keeps producing through several 3 s sessions."""
    config = sasl_config(cluster, certs, sasl.SCRAM_SHA_512, SCRAM_USER, SCRAM_PASSWORD)
    topic = "reauth"
    admin = AdminClient(config)
    admin.create_topics([NewTopic(topic, 1, 3)], operation_timeout=30)[topic].result(timeout=40)
    errors: list = []
    producer = Producer({**config, "acks": "all", "error_cb": errors.append})
    delivered: list = []
    deadline = time.monotonic() + 3 * REAUTH_MS / 1000
    while time.monotonic() < deadline:
        producer.produce(topic, b"x", on_delivery=lambda err, msg: delivered.append(err))
        producer.poll(0.25)
    assert producer.flush(30) == 0
    assert delivered and all(err is None for err in delivered), delivered[:3]
    assert not errors, errors[:3]
