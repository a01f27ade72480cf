"""Brokers log in to ZooKeeper with SASL and protect their znodes (``zookeeper.set.acl``).

A real ZooKeeper with SASL logins (a JAAS ``Server`` section: users ``kafka`` and
``intruder``); two brokers started, as Kafka's are, with ``KAFKA_OPTS`` naming a JAAS file
whose ``Client`` section logs in as ``kafka``, and ``zookeeper.set.acl=true``. Every znode
they create is then writable by ``sasl:kafka`` alone and readable by everyone, except the
SCRAM credentials under ``/config/users``, which nobody else may read. An anonymous
client and one logged in as another user can read the cluster's state but change
nothing: no topic rewritten, no controller deleted, no reassignment started.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AdminClient,
    NewPartitions,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import Permissions

from clients_util import wait_for_leaders
from replog.cluster.launcher import LocalCluster, free_port
from replog.cluster.zookeeper import start_zookeeper, stop_zookeeper
from replog.zk.client import KafkaZkClient
from replog.zk.security import (
    ZkLogin,
    ZkSecurityError,
    jaas_file_from,
    login_from_jaas,
    write_client_jaas,
    write_server_jaas,
)

KAFKA = ZkLogin("kafka", "kafka-" + uuid.uuid4().hex[:8])
INTRUDER = ZkLogin("intruder", "intruder-" + uuid.uuid4().hex[:8])
CHROOT = f"/replog-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def secured(tmp_path_factory) -> Iterator[tuple[LocalCluster, str]]:
    d = tmp_path_factory.mktemp("zk-sasl")
    server_jaas = write_server_jaas(
        d / "zookeeper_jaas.conf",
        {KAFKA.username: KAFKA.password, INTRUDER.username: INTRUDER.password},
    )
    client_jaas = write_client_jaas(d / "kafka_client_jaas.conf", KAFKA)
    zk = start_zookeeper(d / "zookeeper", free_port(), jaas_config=str(server_jaas))
    cluster = LocalCluster(d / "cluster")
    try:
        cluster.up(
            2,
            zookeeper=f"{zk.connect}{CHROOT}",
            overrides={"zookeeper.set.acl": "true", "offsets.topic.replication.factor": "2"},
            broker_env={"KAFKA_OPTS": f"-Djava.security.auth.login.config={client_jaas}"},
        )
        yield cluster, zk.connect
    finally:
        cluster.down()
        stop_zookeeper(zk)


def _kazoo(connect: str, login: ZkLogin | None) -> KazooClient:
    client = KazooClient(
        hosts=f"{connect}{CHROOT}",
        sasl_options=None if login is None else login.sasl_options(),
    )
    client.start(timeout=20)
    return client


def test_znodes_are_the_brokers_and_other_clients_only_read(secured) -> None:
    cluster, connect = secured
    bootstrap = cluster.bootstrap_servers()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("zk-acl", 1, 2)])["zk-acl"].result(timeout=40)
    wait_for_leaders(bootstrap, {"zk-acl": 1})
    upsert = UserScramCredentialUpsertion(
        "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"alice-secret"
    )
    admin.alter_user_scram_credentials([upsert])["alice"].result(timeout=30)

    for login in (None, INTRUDER):
        other = _kazoo(connect, login)
        try:
            data, _ = other.get("/brokers/topics/zk-acl")  # the cluster's state is readable
            assert b'"partitions"' in data
            acls, _ = other.get_acls("/brokers/topics/zk-acl")
            assert {(a.id.scheme, a.id.id, a.perms) for a in acls} == {
                ("sasl", "kafka", Permissions.ALL),
                ("world", "anyone", Permissions.READ),
            }
            with pytest.raises(NoAuthError):
                other.set("/brokers/topics/zk-acl", b'{"version":2,"partitions":{"0":[9]}}')
            with pytest.raises(NoAuthError):
                other.delete("/controller")
            with pytest.raises(NoAuthError):
                other.create(
                    "/admin/reassign_partitions",
                    b'{"version":1,"partitions":[{"topic":"zk-acl","partition":0,"replicas":[1]}]}',
                )
            with pytest.raises(NoAuthError):  # SCRAM credentials: not even readable
                other.get("/config/users/alice")
        finally:
            other.stop()
            other.close()
    # Nothing changed: the topic still has its two replicas and a leader.
    topic = AdminClient({"bootstrap.servers": bootstrap}).list_topics("zk-acl", timeout=20)
    assert sorted(topic.topics["zk-acl"].partitions[0].replicas) == [0, 1]
    assert topic.topics["zk-acl"].partitions[0].leader in (0, 1)
    # The brokers themselves (sasl:kafka) can still change it: a new partition.
    admin.create_partitions([NewPartitions("zk-acl", 2)])["zk-acl"].result(timeout=30)
    wait_for_leaders(bootstrap, {"zk-acl": 2})


def test_set_acl_without_a_login_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ZkSecurityError, match="zookeeper.set.acl"):
        KafkaZkClient("127.0.0.1:1/x", set_acl=True)
    jaas = write_client_jaas(tmp_path / "client.conf", ZkLogin("kafka", 'p"w'))
    assert jaas_file_from(f"-Xmx1g -Djava.security.auth.login.config={jaas} -Dx=y") == str(jaas)
    assert login_from_jaas(str(jaas)) == ZkLogin("kafka", 'p"w')
    (tmp_path / "server_only.conf").write_text(
        "Server {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
        '  user_kafka="x";\n};\n'
    )
    assert login_from_jaas(str(tmp_path / "server_only.conf")) is None
    with pytest.raises(ZkSecurityError, match="cannot read"):
        login_from_jaas(str(tmp_path / "missing.conf"))
