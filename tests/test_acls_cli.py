"""``replog acls`` (Kafka's ``kafka-acls.sh``): the command line as a plan (pure), then the
command against an authorizing broker over SASL_SSL, configured by ``--command-config``
files in both the librdkafka and the Java client's spelling.

A confluent-kafka producer and consumer of a principal without ACLs are refused; after
``--add --producer`` and ``--add --consumer`` they produce and read in their group; the
listing is Kafka's; ``--remove --force`` takes the grant away again. Bad options, a
principal that may not manage ACLs and a wrong password each end the command with a
non-zero status and one line on stderr.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from clients_util import wait_for_leaders
from cluster_util import wait_for
from fixtures.cluster import INTERNAL_TOPICS
from replog.cli.acls_cmd import AccessControlEntry, ResourcePattern, plan
from replog.cli.connection import CommandError
from replog.cli.main import build_parser
from replog.cluster.certificates import make_ca
from replog.cluster.launcher import LocalCluster
from replog.security import sasl
from replog.security.acl import AclOperation as Op
from replog.security.acl import AclPermissionType, PatternType, ResourceType
from replog.security.client_security import ClientSecurity
from replog.zk.client import KafkaZkClient
from security_util import make_broker_certs

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
SCRAM_USERS = {"admin": "admin-secret", "alice": "alice-secret"}
PLAIN_USERS = {"admin": "admin-plain-secret"}


# -- the command line as a plan ---------------------------------------------------------------


def _plan(*argv: str):
    return plan(build_parser().parse_args(["acls", "--bootstrap-server", "h:1", *argv]))


def _changes(p) -> dict[ResourcePattern, set[tuple[str, str, Op, AclPermissionType]]]:
    return {
        r: {(e.principal, e.host, e.operation, e.permission) for e in es} for r, es in p.changes
    }


def topic(name: str, pattern: PatternType = PatternType.LITERAL) -> ResourcePattern:
    return ResourcePattern(ResourceType.TOPIC, name, pattern)


def test_producer_and_consumer_grant_what_kafka_grants() -> None:
    p = _plan(
        "--add", "--allow-principal", "User:alice", "--producer", "--idempotent", "--topic", "t"
    )
    cluster = ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL)
    assert _changes(p) == {
        topic("t"): {("User:alice", "*", op, ALLOW) for op in (Op.WRITE, Op.DESCRIBE, Op.CREATE)},
        cluster: {("User:alice", "*", Op.IDEMPOTENT_WRITE, ALLOW)},
    }
    p = _plan(
        "--add",
        "--allow-principal",
        "User:bob",
        "--allow-host",
        "10.0.0.1",
        "--consumer",
        "--topic",
        "t-",
        "--group",
        "g",
        "--resource-pattern-type",
        "prefixed",
    )
    group = ResourcePattern(ResourceType.GROUP, "g", PatternType.PREFIXED)
    assert _changes(p) == {
        topic("t-", PatternType.PREFIXED): {
            ("User:bob", "10.0.0.1", op, ALLOW) for op in (Op.READ, Op.DESCRIBE)
        },
        group: {("User:bob", "10.0.0.1", Op.READ, ALLOW)},
    }


def test_operations_principals_and_hosts() -> None:
    # every principal x host x operation; --operation defaults to All, a host to *
    p = _plan(
        "--add",
        "--allow-principal",
        "User:a",
        "--deny-principal",
        "User:b",
        "--deny-host",
        "10.1.1.1",
        "--operation",
        "read",
        "--operation",
        "DescribeConfigs",
        "--topic",
        "t",
    )
    assert _changes(p) == {
        topic("t"): {
            ("User:a", "*", Op.READ, ALLOW),
            ("User:a", "*", Op.DESCRIBE_CONFIGS, ALLOW),
            ("User:b", "10.1.1.1", Op.READ, DENY),
            ("User:b", "10.1.1.1", Op.DESCRIBE_CONFIGS, DENY),
        }
    }
    assert _changes(_plan("--add", "--allow-principal", "User:a", "--cluster")) == {
        ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL): {
            ("User:a", "*", Op.ALL, ALLOW)
        }
    }
    # --remove without principals: every ACL of the resource (no entries)
    assert _plan("--remove", "--force", "--topic", "t").changes == ((topic("t"), ()),)
    # --list without a resource: every ACL
    assert _plan("--list").listed == ()
    assert _plan("--list", "--topic", "t", "--resource-pattern-type", "match").listed == (
        topic("t", PatternType.MATCH),
    )
    entry = AccessControlEntry("User:a", "*", Op.READ, ALLOW)
    assert str(entry) == "(principal=User:a, host=*, operation=READ, permissionType=ALLOW)"
    assert str(topic("t")) == "ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)"


@pytest.mark.parametrize(
    "argv, reason",
    [
        (["--add", "--allow-principal", "User:a", "--operation", "Reed", "--topic", "t"], "Reed"),
        (["--add", "--allow-principal", "User:a", "--operation", "Read"], "resource"),
        (["--add", "--allow-principal", "alice", "--topic", "t"], "Type:name"),
        (["--add", "--operation", "Read", "--topic", "t"], "--allow-principal"),
        (
            [
                "--add",
                "--allow-principal",
                "User:a",
                "--operation",
                "IdempotentWrite",
                "--topic",
                "t",
            ],
            "does not apply to a TOPIC",
        ),
        (["--remove", "--topic", "t"], "--force"),
        (["--list", "--add", "--topic", "t"], "exactly one"),
        (["--topic", "t"], "exactly one"),
        (
            [
                "--add",
                "--allow-principal",
                "User:a",
                "--topic",
                "t",
                "--resource-pattern-type",
                "match",
            ],
            "literal or prefixed",
        ),
        (["--list", "--resource-pattern-type", "fuzzy"], "fuzzy"),
        (["--add", "--allow-principal", "User:a", "--consumer", "--topic", "t"], "--group"),
        (["--add", "--allow-principal", "User:a", "--idempotent", "--topic", "t"], "--producer"),
        (["--list", "--allow-principal", "User:a"], "--list"),
    ],
)
def test_bad_command_lines(argv: list[str], reason: str) -> None:
    with pytest.raises(CommandError, match=reason.replace("-", r"\-")):
        _plan(*argv)


def test_command_config_in_both_spellings(tmp_path: Path) -> None:
    librdkafka = ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "u",
            "sasl.password": "s3cret",
            "ssl.ca.location": "/ca.pem",
        }
    )
    java = ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
            'required username="u" password="s3cret";',
            "ssl.truststore.location": "/ca.pem",
        }
    )
    assert librdkafka == java and java.uses_tls and java.uses_sasl
    assert "s3cret" not in repr(java)
    with pytest.raises(ValueError, match="sasl.username"):
        ClientSecurity.from_properties({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"})
    with pytest.raises(ValueError, match="GSSAPI"):
        ClientSecurity.from_properties(
            {"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI", "sasl.username": "u"}
        )


# -- against an authorizing broker -------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    return make_broker_certs(tmp_path_factory.mktemp("acls-certs"))


@pytest.fixture(scope="module")
def cluster(zookeeper, certs: Path, tmp_path_factory) -> Iterator[LocalCluster]:
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in PLAIN_USERS.items())
        + ";"
    )
    c = LocalCluster(tmp_path_factory.mktemp("acls-cli"))
    chroot = f"{zookeeper.connect}/replog-{uuid.uuid4().hex[:8]}"
    try:
        c.up(
            1,
            zookeeper=chroot,
            extra_listeners=("SASL_SSL",),
            overrides={
                **INTERNAL_TOPICS,
                "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                # the broker's own PLAINTEXT traffic is anonymous (keep that listener internal)
                "super.users": "User:ANONYMOUS;User:admin",
                "ssl.keystore.location": str(certs / "broker.pem"),
                "ssl.truststore.location": str(certs / "ca.pem"),
                "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas,
                "offsets.topic.replication.factor": "1",
            },
        )
        zk = KafkaZkClient(chroot)
        zk.start()
        try:
            for user, password in SCRAM_USERS.items():
                credential = sasl.scram_credential(sasl.SCRAM_SHA_512, password)
                zk.change_entity_config(
                    "users", user, {sasl.SCRAM_SHA_512: sasl.format_credential(credential)}, None
                )
        finally:
            zk.close()
        yield c
    finally:
        c.down()


def client(cluster: LocalCluster, certs: Path, user: str, password: str | None = None) -> dict:
    return {
        "bootstrap.servers": cluster.bootstrap_servers(listener="SASL_SSL"),
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": sasl.SCRAM_SHA_512,
        "sasl.username": user,
        "sasl.password": SCRAM_USERS[user] if password is None else password,
        "ssl.ca.location": str(certs / "ca.pem"),
    }


def command_config(path: Path, settings: dict) -> Path:
    """A properties file of ``settings`` (as ``cluster up --secure`` writes one)."""
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items() if k != "bootstrap.servers"))
    return path


class Acls:
    """``replog acls`` run as its own process against the SASL_SSL listener."""

    def __init__(self, cluster: LocalCluster, config: Path) -> None:
        self.bootstrap = cluster.bootstrap_servers(listener="SASL_SSL")
        self.config = config

    def __call__(self, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "replog.cli.main", "acls", "--bootstrap-server", self.bootstrap]
            + ["--command-config", str(self.config), *argv],
            capture_output=True,
            text=True,
            timeout=60,
        )

    def ok(self, *argv: str) -> str:
        done = self(*argv)
        assert done.returncode == 0, done.stderr
        assert done.stderr == "", done.stderr
        return done.stdout

    def fails(self, *argv: str) -> str:
        """The one line a failing command prints."""
        done = self(*argv)
        assert done.returncode != 0, done.stdout
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("replog: "), done.stderr
        assert "Traceback" not in done.stderr
        return lines[0]


def produce_error(config: dict, topic: str, value: bytes) -> KafkaError | None:
    results: list = []
    producer = Producer({**config, "message.timeout.ms": 10_000, "acks": "all"})
    producer.produce(topic, value, on_delivery=lambda err, msg: results.append(err))
    producer.flush(20)
    assert results, "no delivery report"
    return results[0]


def consume(config: dict, topic: str, group: str, count: int) -> tuple[list[bytes], list]:
    """What a consumer in ``group`` reads of ``topic`` from the start (and its errors),
    until ``count`` records or an error."""
    consumer = Consumer(
        {**config, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    values: list[bytes] = []
    errors: list = []
    consumer.subscribe([topic])
    try:

        def done() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is not None:
                errors.append(msg.error())
            elif msg is not None:
                values.append(msg.value())
            return len(values) >= count or bool(errors)

        wait_for(done, 40, f"{count} records of {topic} or an error")
        if not errors:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return values, errors


LISTED_ORDERS = """\
Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:
\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)
\t(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)
\t(principal=User:alice, host=*, operation=CREATE, permissionType=ALLOW)
\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)

"""


def test_acls_command_grants_and_takes_away(cluster, certs, tmp_path) -> None:
    admin_config = client(cluster, certs, "admin")
    admin = AdminClient(admin_config)
    admin.create_topics([NewTopic("orders", 1, 1)])["orders"].result(30)
    wait_for_leaders(cluster.bootstrap_servers(), {"orders": 1})
    acls = Acls(cluster, command_config(tmp_path / "admin.properties", admin_config))
    alice = client(cluster, certs, "alice")

    # No ACL yet: alice may neither write nor read.
    error = produce_error(alice, "orders", b"refused")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert acls.ok("--list") == ""

    added = acls.ok("--add", "--allow-principal", "User:alice", "--producer", "--topic", "orders")
    assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders," in added
    assert "\t(principal=User:alice, host=*, operation=CREATE, permissionType=ALLOW)" in added
    for i in range(3):
        assert produce_error(alice, "orders", f"order-{i}".encode()) is None
    # Producing is not consuming: the group is refused before any record is read.
    values, errors = consume(alice, "orders", "billing", 3)
    assert values == [] and errors, "alice read without Read on the group"
    assert errors[0].code() in (
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
    ), errors

    acls.ok(
        "--add",
        "--allow-principal",
        "User:alice",
        "--consumer",
        "--topic",
        "orders",
        "--group",
        "billing",
    )
    values, errors = consume(alice, "orders", "billing", 3)
    assert errors == [] and values == [b"order-0", b"order-1", b"order-2"]

    # Kafka's listing of one resource, and of every resource.
    assert acls.ok("--list", "--topic", "orders") == LISTED_ORDERS
    everything = acls.ok("--list")
    assert everything == LISTED_ORDERS + (
        "Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=billing, "
        "patternType=LITERAL)`:\n"
        "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n\n"
    )
    # A prefixed ACL; match finds every pattern that applies to a name, literal finds one.
    acls.ok(
        "--add",
        "--deny-principal",
        "User:bob",
        "--operation",
        "Describe",
        "--topic",
        "ord",
        "--resource-pattern-type",
        "prefixed",
    )
    matched = acls.ok("--list", "--topic", "orders", "--resource-pattern-type", "match")
    assert (
        "name=ord, patternType=PREFIXED)`:\n"
        "\t(principal=User:bob, host=*, operation=DESCRIBE, permissionType=DENY)\n"
    ) in matched
    assert "name=orders, patternType=LITERAL" in matched
    assert acls.ok("--list", "--topic", "orders") == LISTED_ORDERS
    only_bob = acls.ok("--list", "--principal", "User:bob")
    assert "ACLs for principal `User:bob`" in only_bob and "User:alice" not in only_bob

    # Remove exactly named entries: Write on orders; reading goes on, writing stops.
    removed = acls.ok(
        "--remove",
        "--force",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Write",
        "--topic",
        "orders",
    )
    assert "Removed ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders," in removed
    assert "operation=WRITE" in removed.split("Current ACLs")[0]
    assert "operation=WRITE" not in removed.split("Current ACLs")[1]
    error = produce_error(alice, "orders", b"refused")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Every ACL of the topic: alice may no longer read it either.
    removed = acls.ok("--remove", "--force", "--topic", "orders")
    assert removed.count("\t(principal=User:alice") == 3
    values, errors = consume(alice, "orders", "billing-2", 3)
    assert values == [] and errors
    assert acls.ok("--list", "--topic", "orders") == ""
    nothing = acls.ok("--remove", "--force", "--topic", "orders")
    assert nothing.startswith("No ACLs matched resource filter `ResourcePatternFilter(")


def test_the_command_refuses_with_one_line(cluster, certs, tmp_path) -> None:
    admin = Acls(
        cluster, command_config(tmp_path / "admin.properties", client(cluster, certs, "admin"))
    )
    alice = Acls(
        cluster, command_config(tmp_path / "alice.properties", client(cluster, certs, "alice"))
    )
    # Bad options: nothing reaches the broker.
    assert "unknown operation 'Reed'" in admin.fails(
        "--add", "--allow-principal", "User:alice", "--operation", "Reed", "--topic", "t"
    )
    assert "name at least one resource" in admin.fails(
        "--add", "--allow-principal", "User:alice", "--operation", "Read"
    )
    assert "--force" in admin.fails("--remove", "--topic", "t")
    # The broker's refusals: alice may not manage ACLs (Describe/Alter on the cluster).
    assert alice.fails("--list").endswith("cannot list ACLs: CLUSTER_AUTHORIZATION_FAILED")
    assert alice.fails(
        "--add", "--allow-principal", "User:alice", "--operation", "All", "--topic", "t"
    ).endswith("cannot add ACLs: CLUSTER_AUTHORIZATION_FAILED")
    assert alice.fails("--remove", "--force", "--topic", "t").endswith(
        "cannot remove ACLs: CLUSTER_AUTHORIZATION_FAILED"
    )
    assert admin.ok("--list", "--topic", "t") == ""  # alice's attempt added nothing
    # The broker refuses a binding it would not store, and says why.
    assert admin.fails(
        "--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "a/b"
    ).endswith("cannot add ACLs: INVALID_REQUEST: invalid resource name 'a/b'")
    # A wrong password; no SASL on a SASL port.
    wrong = Acls(
        cluster,
        command_config(
            tmp_path / "wrong.properties", client(cluster, certs, "alice", password="nope")
        ),
    )
    line = wrong.fails("--list")
    assert "authentication failed" in line and "nope" not in line
    plaintext = Acls(cluster, command_config(tmp_path / "plain.properties", {}))
    assert "lost" in plaintext.fails("--list")


def test_java_style_command_config_with_plain(cluster, certs, tmp_path) -> None:
    """sasl.mechanism, sasl.jaas.config (PlainLoginModule) and ssl.truststore.location, as
    a Java client's properties spell them."""
    config = tmp_path / "java.properties"
    config.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="admin" password="{PLAIN_USERS["admin"]}";\n'
        f"ssl.truststore.location={certs / 'ca.pem'}\n"
    )
    acls = Acls(cluster, config)
    acls.ok("--add", "--allow-principal", "User:carol", "--operation", "Read", "--group", "java")
    listed = acls.ok("--list", "--group", "java")
    assert listed == (
        "Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=java, "
        "patternType=LITERAL)`:\n"
        "\t(principal=User:carol, host=*, operation=READ, permissionType=ALLOW)\n\n"
    )
    # A CA the broker's certificate does not come from: the TLS handshake fails.
    make_ca(tmp_path, "other-ca", days=1)
    config.write_text(
        config.read_text().replace(str(certs / "ca.pem"), str(tmp_path / "other-ca.pem"))
    )
    assert "CERTIFICATE_VERIFY_FAILED" in acls.fails("--list")
