"""ACLs: Kafka's authorization rules directly (``replog.security.acl``), their ZooKeeper
codec, and an authorizing broker used by real clients over SASL_PLAINTEXT (PLAIN users):
a principal that may only read a topic is refused on produce, a prefixed ACL covers its
prefix and never a neighbour, Metadata hides what a principal may not describe, ACLs
are created, described and deleted through confluent-kafka's AdminClient, and a
non-broker principal sending LeaderAndIsr gets CLUSTER_AUTHORIZATION_FAILED."""

from __future__ import annotations

import datetime
import socket
import struct
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding as CkAclBinding,
)
from confluent_kafka.admin import (
    AclBindingFilter as CkAclBindingFilter,
)
from confluent_kafka.admin import (
    AclOperation as CkOperation,
)
from confluent_kafka.admin import (
    AclPermissionType as CkPermission,
)
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ResourcePatternType,
)
from confluent_kafka.admin import (
    ResourceType as CkResourceType,
)
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from clients_util import wait_for_leaders
from cluster_util import wait_for
from fixtures.cluster import INTERNAL_TOPICS
from replog.cluster.launcher import LocalCluster
from replog.protocol import apis, frames
from replog.protocol.apis import ApiKey
from replog.protocol.controller_schemas import LeaderAndIsrRequest
from replog.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    authorize,
)
from replog.zk import acls as zk_acls
from replog.zk.client import KafkaZkClient

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
TOPIC = ResourceType.TOPIC


def acl(name, op, perm=ALLOW, principal="User:alice", host="*", pattern=PatternType.LITERAL):
    return AclBinding(TOPIC, name, pattern, principal, host, op, perm)


def allowed(op, name, acls, **kw) -> bool:
    return authorize("User:alice", "10.0.0.1", op, TOPIC, name, acls, **kw)


# -- the rules ------------------------------------------------------------------------------


def test_kafkas_rules() -> None:
    read = acl("t", AclOperation.READ)
    assert allowed(AclOperation.READ, "t", [read])
    assert not allowed(AclOperation.WRITE, "t", [read])
    assert allowed(AclOperation.DESCRIBE, "t", [read])  # implied by Read
    assert not allowed(AclOperation.READ, "u", [read])
    # deny beats allow, All covers every operation, User:* and host * match anyone
    assert not allowed(AclOperation.READ, "t", [read, acl("t", AclOperation.ALL, DENY)])
    assert allowed(AclOperation.ALTER, "t", [acl("t", AclOperation.ALL, principal="User:*")])
    assert not allowed(AclOperation.READ, "t", [acl("t", AclOperation.READ, host="10.9.9.9")])
    assert allowed(AclOperation.READ, "t", [acl("t", AclOperation.READ, host="10.0.0.1")])
    assert allowed(AclOperation.READ, "any", [acl("*", AclOperation.READ)])  # literal *
    # no ACL on the resource at all: allow.everyone.if.no.acl.found decides
    assert not allowed(AclOperation.READ, "free", [read])
    assert allowed(AclOperation.READ, "free", [read], allow_if_no_acl=True)
    assert not allowed(
        AclOperation.READ,
        "t",
        [acl("t", AclOperation.WRITE, principal="User:bob")],
        allow_if_no_acl=True,
    )
    assert allowed(AclOperation.DELETE, "t", [], super_users=frozenset({"User:alice"}))
    assert allowed(AclOperation.DESCRIBE_CONFIGS, "t", [acl("t", AclOperation.ALTER_CONFIGS)])


names = st.text(alphabet="ab-._x", min_size=1, max_size=8)


@given(prefix=names, name=names)
def test_a_prefixed_acl_covers_exactly_its_prefix(prefix: str, name: str) -> None:
    binding = acl(prefix, AclOperation.WRITE, pattern=PatternType.PREFIXED)
    assert allowed(AclOperation.WRITE, name, [binding]) == name.startswith(prefix)


def test_filters_and_the_zookeeper_codec() -> None:
    bindings = [
        acl("t", AclOperation.READ),
        acl("t", AclOperation.WRITE, DENY, principal="User:bob"),
        acl("t-", AclOperation.WRITE, pattern=PatternType.PREFIXED),
    ]
    everything = AclBindingFilter(
        ResourceType.ANY, None, PatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    assert [b for b in bindings if everything.matches(b)] == bindings
    match = AclBindingFilter(
        TOPIC, "t-1", PatternType.MATCH, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    assert [b for b in bindings if match.matches(b)] == [bindings[2]]
    literal = bindings[:2]
    data = zk_acls.encode(literal)
    assert b'"permissionType":"Deny"' in data and b'"operation":"Read"' in data
    assert set(zk_acls.decode(data, TOPIC, PatternType.LITERAL, "t")) == set(literal)
    assert zk_acls.resource_path(TOPIC, PatternType.PREFIXED, "t-") == (
        "/kafka-acl-extended/prefixed/Topic/t-"
    )
    assert zk_acls.valid_binding(acl("a/b", AclOperation.READ)) is not None
    assert (
        zk_acls.valid_binding(
            AclBinding(
                ResourceType.CLUSTER,
                "x",
                PatternType.LITERAL,
                "User:a",
                "*",
                AclOperation.ALTER,
                ALLOW,
            )
        )
        is not None
    )


def test_change_notifications_expire_after_15_minutes(zookeeper) -> None:
    """Every ACL write leaves a change notification; those older than Kafka's 15 minutes
    are deleted (by the broker that processes the next change), the newer ones stay."""
    zk = KafkaZkClient(f"{zookeeper.connect}/replog-{uuid.uuid4().hex[:8]}")
    zk.start()
    try:
        client = zk.client
        zk_acls.add(client, [acl("t", AclOperation.READ)])
        zk_acls.add(client, [acl("t-", AclOperation.READ, pattern=PatternType.PREFIXED)])
        notes = [
            f"{root}/{n}"
            for root in (zk_acls.LITERAL_CHANGES, zk_acls.EXTENDED_CHANGES)
            for n in client.get_children(root)
        ]
        assert len(notes) == 2
        ctimes = [client.exists(n).ctime for n in notes]
        oldest, newest = min(ctimes), max(ctimes)
        fifteen_minutes = 15 * 60 * 1000
        assert zk_acls.purge_expired_changes(client, oldest + fifteen_minutes) == []
        assert sorted(
            zk_acls.purge_expired_changes(client, newest + fifteen_minutes + 1)
        ) == sorted(notes)
        assert all(client.exists(n) is None for n in notes)
        assert zk_acls.load_all(client), "the ACLs themselves stay"
    finally:
        zk.close()


# -- an authorizing broker --------------------------------------------------------------------

USERS = {
    "admin": "admin-secret",
    "alice": "alice-secret",
    "bob": "bob-secret",
    "carol": "carol-secret",
    "dave": "dave-secret",
}


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory) -> Iterator[LocalCluster]:
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items())
        + ";"
    )
    c = LocalCluster(tmp_path_factory.mktemp("acl"))
    try:
        c.up(
            1,
            zookeeper=f"{zookeeper.connect}/replog-{uuid.uuid4().hex[:8]}",
            extra_listeners=("SASL_PLAINTEXT",),
            overrides={
                **INTERNAL_TOPICS,
                "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                # the brokers' own PLAINTEXT traffic is anonymous (keep that listener internal)
                "super.users": "User:ANONYMOUS;User:admin",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
                "offsets.topic.replication.factor": "1",
                "transaction.state.log.num.partitions": "1",
                "transaction.state.log.min.isr": "1",  # one broker (Kafka's advice too)
            },
        )
        yield c
    finally:
        c.down()


def client(cluster: LocalCluster, user: str) -> dict:
    return {
        "bootstrap.servers": cluster.bootstrap_servers(listener="SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": user,
        "sasl.password": USERS[user],
    }


def produce_error(config: dict, topic: str) -> KafkaError | None:
    results: list = []
    producer = Producer({**config, "message.timeout.ms": 10_000, "acks": "all"})
    producer.produce(topic, b"x", on_delivery=lambda err, msg: results.append(err))
    producer.flush(20)
    assert results, "no delivery report"
    return results[0]


def test_topic_acls_with_real_clients(cluster: LocalCluster) -> None:
    admin = AdminClient(client(cluster, "admin"))
    topics = ["acl-read", "acl-pre-1", "acl-other"]
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        f.result(timeout=30)
    wait_for_leaders(cluster.bootstrap_servers(), {t: 1 for t in topics})
    assert produce_error(client(cluster, "admin"), "acl-read") is None  # super user
    bindings = [
        CkAclBinding(
            CkResourceType.TOPIC,
            "acl-read",
            ResourcePatternType.LITERAL,
            "User:alice",
            "*",
            CkOperation.READ,
            CkPermission.ALLOW,
        ),
        CkAclBinding(
            CkResourceType.TOPIC,
            "acl-pre-",
            ResourcePatternType.PREFIXED,
            "User:alice",
            "*",
            CkOperation.WRITE,
            CkPermission.ALLOW,
        ),
    ]
    for f in admin.create_acls(bindings).values():
        f.result(timeout=20)
    alice = client(cluster, "alice")
    # Read only: producing is refused, reading works.
    error = produce_error(alice, "acl-read")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    consumer = Consumer({**alice, "group.id": "unused", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("acl-read", 0, 0)])
        # (alice may not use group "unused": librdkafka reports that as an error event
        # beside the records; reading by assignment needs no group)
        msg = wait_for(
            lambda: (m := consumer.poll(0.5)) is not None and m.error() is None and m,
            30,
            "alice's read of acl-read",
        )
        assert msg.value() == b"x"
    finally:
        consumer.close()
    # The prefix covers acl-pre-1, not its neighbour acl-other. (ACLs reach the brokers
    # other than the one that took CreateAcls through ZooKeeper's change notifications, as
    # in Kafka: the leader of acl-pre-1 may learn of them a moment later.)
    wait_for(
        lambda: produce_error(alice, "acl-pre-1") is None,
        30,
        "alice's prefixed Write ACL at acl-pre-1's leader",
    )
    error = produce_error(alice, "acl-other")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Metadata shows alice what she may describe (Read and Write imply Describe), only.
    listed = set(AdminClient(alice).list_topics(timeout=20).topics)
    assert listed == {"acl-read", "acl-pre-1"}
    # Bob has no ACL at all: nothing.
    assert set(AdminClient(client(cluster, "bob")).list_topics(timeout=20).topics) == set()
    # Describe and delete through the admin API.
    described = admin.describe_acls(
        CkAclBindingFilter(
            CkResourceType.ANY,
            None,
            ResourcePatternType.ANY,
            None,
            None,
            CkOperation.ANY,
            CkPermission.ANY,
        )
    ).result(timeout=20)
    assert {(b.name, b.operation) for b in described} == {
        ("acl-read", CkOperation.READ),
        ("acl-pre-", CkOperation.WRITE),
    }
    deleted = admin.delete_acls(
        [
            CkAclBindingFilter(
                CkResourceType.TOPIC,
                "acl-pre-",
                ResourcePatternType.PREFIXED,
                None,
                None,
                CkOperation.ANY,
                CkPermission.ANY,
            )
        ]
    )
    assert len(list(deleted.values())[0].result(timeout=20)) == 1
    wait_for(
        lambda: (
            (e := produce_error(alice, "acl-pre-1")) is not None
            and e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        ),
        30,
        "the deleted ACL to stop covering acl-pre-1",
    )
    # Alice may not manage ACLs.
    alice_admin = AdminClient(alice)
    with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED|uthoriz"):
        list(alice_admin.create_acls(bindings[:1]).values())[0].result(timeout=20)


def _plain_connection(port: int, user: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    handshake = apis.request_schema(ApiKey.SASL_HANDSHAKE, 1)(mechanism="PLAIN")
    sock.sendall(frames.encode_request(ApiKey.SASL_HANDSHAKE, 1, 1, "raw", handshake))
    _read_frame(sock)
    token = f"\0{user}\0{USERS[user]}".encode()
    authenticate = apis.request_schema(ApiKey.SASL_AUTHENTICATE, 2)(auth_bytes=token)
    sock.sendall(frames.encode_request(ApiKey.SASL_AUTHENTICATE, 2, 2, "raw", authenticate))
    _, answer = frames.decode_response(ApiKey.SASL_AUTHENTICATE, 2, _read_frame(sock))
    assert answer.error_code == ErrorCode.none
    return sock


def _read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            assert chunk, "connection closed"
            out += chunk
        return out

    return exactly(struct.unpack(">i", exactly(4))[0])


def test_a_client_cannot_send_controller_requests(cluster: LocalCluster) -> None:
    port = int(cluster.bootstrap_servers(listener="SASL_PLAINTEXT").split(":")[1])
    sock = _plain_connection(port, "alice")
    try:
        request = LeaderAndIsrRequest(
            controller_id=0,
            controller_epoch=999,
            broker_epoch=-1,
            type=0,
            topic_states=(),
            live_leaders=(),
        )
        version = apis.supported_versions()[ApiKey.LEADER_AND_ISR][1]
        sock.sendall(frames.encode_request(ApiKey.LEADER_AND_ISR, version, 3, "raw", request))
        _, answer = frames.decode_response(ApiKey.LEADER_AND_ISR, version, _read_frame(sock))
        assert answer.error_code == ErrorCode.cluster_authorization_failed
    finally:
        sock.close()
    # The broker still leads its partitions: nothing changed.
    assert len(AdminClient(client(cluster, "admin")).list_topics(timeout=20).brokers) == 1


def test_group_offset_and_producer_id_acls(cluster: LocalCluster) -> None:
    """Groups need Read (Describe to find the coordinator); committed offsets need Read on
    the topic too; ListOffsets needs Describe; an idempotent producer IdempotentWrite."""
    admin = AdminClient(client(cluster, "admin"))
    for f in admin.create_topics([NewTopic("acl-grp", 1, 1)]).values():
        f.result(timeout=30)
    wait_for_leaders(cluster.bootstrap_servers(), {"acl-grp": 1})
    for f in admin.create_acls(
        [
            CkAclBinding(
                CkResourceType.TOPIC,
                "acl-grp",
                ResourcePatternType.LITERAL,
                "User:bob",
                "*",
                CkOperation.READ,
                CkPermission.ALLOW,
            ),
        ]
    ).values():
        f.result(timeout=20)
    bob = client(cluster, "bob")
    assert (
        _find_coordinator_error(cluster, "bob", "bob-group") == ErrorCode.group_authorization_failed
    )
    consumer = Consumer({**bob, "group.id": "bob-group", "enable.auto.commit": False})
    try:
        for f in admin.create_acls(
            [
                CkAclBinding(
                    CkResourceType.GROUP,
                    "bob-",
                    ResourcePatternType.PREFIXED,
                    "User:bob",
                    "*",
                    CkOperation.READ,
                    CkPermission.ALLOW,
                )
            ]
        ).values():
            f.result(timeout=20)
        wait_for(  # (the offsets topic is created by the first allowed FindCoordinator)
            lambda: _find_coordinator_error(cluster, "bob", "bob-group") == ErrorCode.none,
            30,
            "bob's group coordinator",
        )
        committed = wait_for(
            lambda: _try_commit(consumer, "acl-grp"), 30, "bob's commit once he may read the group"
        )
        assert committed[0].offset == 0 and committed[0].error is None
    finally:
        consumer.close()
    # ListOffsets on a topic bob may not describe (librdkafka never sends it: Metadata
    # hides the topic; the broker answers TOPIC_AUTHORIZATION_FAILED to a raw request)
    assert _list_offsets_error(cluster, "bob", "acl-other") == ErrorCode.topic_authorization_failed
    assert _list_offsets_error(cluster, "bob", "acl-grp") == ErrorCode.none
    # An idempotent producer without IdempotentWrite on the cluster: a fatal error
    errors: list = []
    producer = Producer({**bob, "enable.idempotence": True, "error_cb": errors.append})

    def refused() -> bool:
        try:
            producer.poll(0.2)
        except KafkaException as exc:  # librdkafka raises the fatal error from poll
            errors.append(exc.args[0])
        return any(e.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED for e in errors)

    wait_for(refused, 30, "the producer id refusal (IdempotentWrite)")


def _find_coordinator_error(
    cluster: LocalCluster, user: str, group: str, key_type: int = 0
) -> ErrorCode:
    port = int(cluster.bootstrap_servers(listener="SASL_PLAINTEXT").split(":")[1])
    sock = _plain_connection(port, user)
    try:
        body = apis.request_schema(ApiKey.FIND_COORDINATOR, 3)(key=group, key_type=key_type)
        sock.sendall(frames.encode_request(ApiKey.FIND_COORDINATOR, 3, 5, "raw", body))
        _, answer = frames.decode_response(ApiKey.FIND_COORDINATOR, 3, _read_frame(sock))
        return answer.error_code
    finally:
        sock.close()


def _list_offsets_error(cluster: LocalCluster, user: str, topic: str) -> ErrorCode:
    port = int(cluster.bootstrap_servers(listener="SASL_PLAINTEXT").split(":")[1])
    sock = _plain_connection(port, user)
    try:
        cls = apis.request_schema(ApiKey.LIST_OFFSETS, 1)
        part = apis.nested(cls, "ListOffsetsPartition")(partition_index=0, timestamp=-1)
        body = cls(
            replica_id=-1,
            topics=(apis.nested(cls, "ListOffsetsTopic")(name=topic, partitions=(part,)),),
        )
        sock.sendall(frames.encode_request(ApiKey.LIST_OFFSETS, 1, 6, "raw", body))
        _, answer = frames.decode_response(ApiKey.LIST_OFFSETS, 1, _read_frame(sock))
        return answer.topics[0].partitions[0].error_code
    finally:
        sock.close()


def _try_commit(consumer: Consumer, topic: str):
    try:
        return consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    except KafkaException:  # refused, or still waiting for a coordinator it may use
        return None


def test_admin_operations_need_their_acls(cluster: LocalCluster) -> None:
    """Configs, partitions, records, elections and reassignments: refused to a principal
    without the grant, with Kafka's error; the super user may."""
    from confluent_kafka import ElectionType
    from confluent_kafka.admin import ConfigResource, NewPartitions

    admin = AdminClient(client(cluster, "admin"))
    for f in admin.create_topics([NewTopic("acl-admin", 1, 1)]).values():
        f.result(timeout=30)
    wait_for_leaders(cluster.bootstrap_servers(), {"acl-admin": 1})
    bob = AdminClient(client(cluster, "bob"))
    resource = ConfigResource(ConfigResource.Type.TOPIC, "acl-admin")
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED|uthoriz"):
        bob.describe_configs([resource])[resource].result(timeout=20)
    assert admin.describe_configs([resource])[resource].result(timeout=20)  # super user
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED|uthoriz"):
        bob.create_partitions([NewPartitions("acl-admin", 2)])["acl-admin"].result(timeout=20)
    partition = TopicPartition("acl-admin", 0)
    with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED|uthoriz"):
        bob.elect_leaders(ElectionType.PREFERRED, [partition]).result(timeout=20)
    # The super user's own request goes through.
    admin.create_partitions([NewPartitions("acl-admin", 2)])["acl-admin"].result(timeout=20)


def _ask(cluster: LocalCluster, user: str, api_key: ApiKey, version: int, body) -> object:
    """One request over a fresh SASL/PLAIN connection as ``user``; the decoded answer."""
    port = int(cluster.bootstrap_servers(listener="SASL_PLAINTEXT").split(":")[1])
    sock = _plain_connection(port, user)
    try:
        sock.sendall(frames.encode_request(api_key, version, 7, "raw", body))
        return frames.decode_response(api_key, version, _read_frame(sock))[1]
    finally:
        sock.close()


def test_describe_and_epoch_apis_need_their_acls(cluster: LocalCluster) -> None:
    """DescribeCluster and DescribeLogDirs (Describe on the cluster), DescribeProducers
    (Read on the topic), OffsetForLeaderEpoch (Describe on the topic; ClusterAction for a
    follower), OffsetDelete (Delete on the group, Read on the topic) and the KIP-848 APIs
    (Read / Describe on the group): refused to bob, answered to the super user; the
    authorized operations a client asks for are the principal's own."""
    admin = AdminClient(client(cluster, "admin"))
    for f in admin.create_topics([NewTopic("acl-desc", 1, 1)]).values():
        f.result(timeout=30)
    wait_for_leaders(cluster.bootstrap_servers(), {"acl-desc": 1})
    bob = AdminClient(client(cluster, "bob"))
    # librdkafka's describe_cluster asks Metadata, which anyone may; the operations it
    # reports are the principal's own
    every = admin.describe_cluster(include_authorized_operations=True).result(timeout=30)
    assert {op.name for op in every.authorized_operations} == {
        "CREATE",
        "ALTER",
        "DESCRIBE",
        "CLUSTER_ACTION",
        "DESCRIBE_CONFIGS",
        "ALTER_CONFIGS",
        "IDEMPOTENT_WRITE",
    }
    none = bob.describe_cluster(include_authorized_operations=True).result(timeout=30)
    assert not none.authorized_operations
    cluster_api = apis.request_schema(ApiKey.DESCRIBE_CLUSTER, 1)(
        include_cluster_authorized_operations=True, endpoint_type=1
    )
    refused = _ask(cluster, "bob", ApiKey.DESCRIBE_CLUSTER, 1, cluster_api)
    assert refused.error_code == ErrorCode.cluster_authorization_failed and refused.brokers == ()
    grant = CkAclBinding(
        CkResourceType.BROKER,
        "kafka-cluster",
        ResourcePatternType.LITERAL,
        "User:bob",
        "*",
        CkOperation.DESCRIBE,
        CkPermission.ALLOW,
    )
    for f in admin.create_acls([grant]).values():
        f.result(timeout=20)
    described = wait_for(
        lambda: _described_or_none(cluster, "bob", cluster_api), 30, "bob's DescribeCluster"
    )
    assert described.cluster_authorized_operations == 1 << 8  # DESCRIBE alone
    assert len(described.brokers) == 1

    logdirs = apis.request_schema(ApiKey.DESCRIBE_LOG_DIRS, 3)(topics=None)
    # bob now may describe the cluster; carol (no grant) may not
    refused = _ask(cluster, "carol", ApiKey.DESCRIBE_LOG_DIRS, 3, logdirs)
    assert refused.error_code == ErrorCode.cluster_authorization_failed and refused.results == ()
    answered = _ask(cluster, "admin", ApiKey.DESCRIBE_LOG_DIRS, 3, logdirs)
    assert answered.error_code == ErrorCode.none and answered.results

    cls = apis.request_schema(ApiKey.DESCRIBE_PRODUCERS, 0)
    producers = cls(
        topics=(apis.nested(cls, "TopicRequest")(name="acl-desc", partition_indexes=(0,)),)
    )
    for user, error in (("bob", ErrorCode.topic_authorization_failed), ("admin", ErrorCode.none)):
        answer = _ask(cluster, user, ApiKey.DESCRIBE_PRODUCERS, 0, producers)
        assert answer.topics[0].partitions[0].error_code == error, user

    cls = apis.request_schema(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4)

    def epochs(replica_id: int):
        part = apis.nested(cls, "OffsetForLeaderPartition")(
            partition=0, current_leader_epoch=-1, leader_epoch=0
        )
        topic = apis.nested(cls, "OffsetForLeaderTopic")(topic="acl-desc", partitions=(part,))
        return cls(replica_id=replica_id, topics=(topic,))

    for user, replica_id, error in (
        ("bob", -1, ErrorCode.topic_authorization_failed),
        ("bob", 0, ErrorCode.cluster_authorization_failed),  # posing as a follower
        ("admin", -1, ErrorCode.none),
    ):
        answer = _ask(cluster, user, ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, epochs(replica_id))
        assert answer.topics[0].partitions[0].error_code == error, (user, replica_id)

    cls = apis.request_schema(ApiKey.OFFSET_DELETE, 0)
    delete = cls(
        group_id="carol-group",
        topics=(
            apis.nested(cls, "OffsetDeleteRequestTopic")(
                name="acl-desc",
                partitions=(apis.nested(cls, "OffsetDeleteRequestPartition")(partition_index=0),),
            ),
        ),
    )
    answer = _ask(cluster, "bob", ApiKey.OFFSET_DELETE, 0, delete)
    assert answer.error_code == ErrorCode.group_authorization_failed

    cls = apis.request_schema(ApiKey.CONSUMER_GROUP_DESCRIBE, 0)
    body = cls(group_ids=("carol-group",), include_authorized_operations=True)
    answer = _ask(cluster, "bob", ApiKey.CONSUMER_GROUP_DESCRIBE, 0, body)
    assert answer.groups[0].error_code == ErrorCode.group_authorization_failed
    cls = apis.request_schema(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0)
    heartbeat = cls(
        group_id="carol-group",
        member_id="m-1",
        member_epoch=0,
        instance_id=None,
        rack_id=None,
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        subscribed_topic_names=("acl-desc",),
        server_assignor=None,
        topic_partitions=(),
    )
    answer = _ask(cluster, "bob", ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, heartbeat)
    assert answer.error_code == ErrorCode.group_authorization_failed


def _described_or_none(cluster: LocalCluster, user: str, body):
    answer = _ask(cluster, user, ApiKey.DESCRIBE_CLUSTER, 1, body)
    return answer if answer.error_code == ErrorCode.none else None


def _grant(admin: AdminClient, resource, name: str, pattern, user: str, operation) -> None:
    binding = CkAclBinding(
        resource, name, pattern, f"User:{user}", "*", operation, CkPermission.ALLOW
    )
    for f in admin.create_acls([binding]).values():
        f.result(timeout=20)


def test_transactional_id_and_kip679_acls(cluster: LocalCluster) -> None:
    """An idempotent producer with Write on a topic needs no IdempotentWrite (KIP-679); a
    transactional one needs Write on its TransactionalId (Describe alone finds the
    coordinator but may not initialise)."""
    admin = AdminClient(client(cluster, "admin"))
    for f in admin.create_topics([NewTopic("acl-txn", 1, 1)]).values():
        f.result(timeout=30)
    wait_for_leaders(cluster.bootstrap_servers(), {"acl-txn": 1})
    _grant(
        admin,
        CkResourceType.TOPIC,
        "acl-txn",
        ResourcePatternType.LITERAL,
        "dave",
        CkOperation.WRITE,
    )
    dave = client(cluster, "dave")
    wait_for(
        lambda: produce_error({**dave, "enable.idempotence": True}, "acl-txn") is None,
        30,
        "dave's idempotent producer with Write on the topic only",
    )

    def init_error(transactional_id: str) -> KafkaError | None:
        producer = Producer({**dave, "transactional.id": transactional_id})
        try:
            producer.init_transactions(30)
        except KafkaException as exc:
            return exc.args[0]
        return None

    refused = init_error("dave-tx")
    assert refused is not None
    assert refused.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    _grant(
        admin,
        CkResourceType.TRANSACTIONAL_ID,
        "dave-tx",
        ResourcePatternType.LITERAL,
        "dave",
        CkOperation.DESCRIBE,
    )
    wait_for(
        lambda: _find_coordinator_error(cluster, "dave", "dave-tx", key_type=1) == ErrorCode.none,
        30,
        "dave's transaction coordinator once he may describe the id",
    )
    refused = init_error("dave-tx")
    assert refused is not None
    assert refused.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    _grant(
        admin,
        CkResourceType.TRANSACTIONAL_ID,
        "dave-",
        ResourcePatternType.PREFIXED,
        "dave",
        CkOperation.WRITE,
    )
    producer = Producer({**dave, "transactional.id": "dave-tx"})
    wait_for(lambda: _try_init(producer), 30, "dave's init_transactions with Write on the id")
    producer.begin_transaction()
    producer.produce("acl-txn", b"in a transaction")
    producer.commit_transaction(30)


def _try_init(producer: Producer) -> bool:
    try:
        producer.init_transactions(10)
    except KafkaException as exc:
        if exc.args[0].fatal():
            raise
        return False
    return True
