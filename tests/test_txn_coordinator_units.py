"""Pure pieces of the transaction coordinator's wiring: KIP-679's check by resource type
(an idempotent producer needs IdempotentWrite on the cluster or Write on some topic, Kafka
``AclAuthorizer.authorizeByResourceType``), and ids mapped by ``__transaction_state``'s
actual partition count."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog.coordinator.transaction.coordinator import TransactionCoordinator
from replog.coordinator.transaction.transaction_topic import TransactionConfig, partition_for
from replog.security.acl import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    authorize_by_resource_type,
)

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED


def _acl(name, pattern, permission, principal="User:bob", op=AclOperation.WRITE, host="*"):
    return AclBinding(ResourceType.TOPIC, name, pattern, principal, host, op, permission)


def _allowed(acls, principal="User:bob", **kw) -> bool:
    return authorize_by_resource_type(
        principal, "10.0.0.1", AclOperation.WRITE, ResourceType.TOPIC, acls, **kw
    )


def test_write_on_some_topic() -> None:
    assert not _allowed([])
    assert _allowed([_acl("orders", LITERAL, ALLOW)])
    assert _allowed([_acl("ord", PREFIXED, ALLOW)])
    assert _allowed([_acl("*", LITERAL, ALLOW)])
    assert _allowed([_acl("orders", LITERAL, ALLOW, op=AclOperation.ALL)])
    assert _allowed([_acl("orders", LITERAL, ALLOW, principal="User:*")])
    # someone else's grant, another operation, another host
    assert not _allowed([_acl("orders", LITERAL, ALLOW, principal="User:alice")])
    assert not _allowed([_acl("orders", LITERAL, ALLOW, op=AclOperation.READ)])
    assert not _allowed([_acl("orders", LITERAL, ALLOW, host="10.9.9.9")])


def test_denials_that_cover_the_grant() -> None:
    grant = _acl("orders", LITERAL, ALLOW)
    assert not _allowed([grant, _acl("orders", LITERAL, DENY)])
    assert not _allowed([grant, _acl("ord", PREFIXED, DENY)])
    assert not _allowed([_acl("ord", PREFIXED, ALLOW), _acl("o", PREFIXED, DENY)])
    assert not _allowed([_acl("*", LITERAL, ALLOW), _acl("*", LITERAL, DENY)])
    # a denial elsewhere leaves the grant
    assert _allowed([grant, _acl("payments", LITERAL, DENY)])
    assert _allowed([_acl("ord", PREFIXED, ALLOW), _acl("orders", LITERAL, DENY)])


def test_super_users_and_allow_if_no_acl() -> None:
    assert _allowed([], principal="User:admin", super_users=frozenset({"User:admin"}))
    assert _allowed([], allow_if_no_acl=True)
    assert not _allowed([_acl("*", LITERAL, DENY)], allow_if_no_acl=True)


def test_ids_map_by_the_topics_actual_partition_count() -> None:
    """A topic created with 3 partitions by another broker: this one, configured for 50,
    maps ids as the topic has them once it knows the count."""
    core = TransactionCoordinator(TransactionConfig(), offsets_topic_partitions=50)
    tid = next(
        t for t in (f"t-{i}" for i in range(100)) if partition_for(t, 3) != partition_for(t, 50)
    )
    core.on_election(partition_for(tid, 3), 7)
    core.complete_loading(partition_for(tid, 3), 7, [], 0)
    assert core.state.lookup(tid).error is ErrorCode.not_coordinator
    core.set_partition_count(3)
    assert core.state.partition_for(tid) == partition_for(tid, 3)
    assert core.state.lookup(tid).error is ErrorCode.none
    assert core.config.transaction_log_num_partitions == 3
