"""Kafka's ACLs as data and the authorization rule (Kafka ``AclAuthorizer.authorize``), pure.

An ``AclBinding`` allows or denies one principal, from one host (``*``: any), one
operation on the resources one pattern names: LITERAL (that name; ``*`` is every
resource of the type) or PREFIXED (every name starting with it). ``authorize`` applies
Kafka's rules: super users may do everything; a matching DENY beats any ALLOW; ``All``
covers every operation; Describe is implied by Read, Write, Delete and Alter, and
DescribeConfigs by AlterConfigs; a resource no ACL names at all is allowed only with
``allow.everyone.if.no.acl.found``. Codes and names are Kafka's (the protocol's numbers,
ZooKeeper's JSON words).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# The words Kafka writes in ZooKeeper (ResourceType.name / AclOperation.name in CamelCase).
RESOURCE_NAMES = {
    ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group",
    ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
    ResourceType.DELEGATION_TOKEN: "DelegationToken",
    ResourceType.USER: "User",
}
OPERATION_NAMES = {
    op: "".join(w.capitalize() for w in op.name.split("_"))
    for op in AclOperation
    if op not in (AclOperation.UNKNOWN, AclOperation.ANY)
}
PERMISSION_NAMES = {AclPermissionType.ALLOW: "Allow", AclPermissionType.DENY: "Deny"}
CLUSTER_NAME = "kafka-cluster"

# Kafka ``AclEntry.supportedOperations``, what ``authorized_operations`` fields speak of.
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.CLUSTER: (
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
}

IMPLIED = {
    AclOperation.DESCRIBE: {
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.DELETE,
        AclOperation.ALTER,
    },
    AclOperation.DESCRIBE_CONFIGS: {AclOperation.ALTER_CONFIGS},
}


@dataclass(frozen=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType  # LITERAL or PREFIXED
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType


@dataclass(frozen=True)
class AclBindingFilter:
    """DescribeAcls / DeleteAcls: ANY (and None) match everything; MATCH finds the
    bindings that would apply to the named resource."""

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: AclPermissionType

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.resource_name is not None and not pattern_matches(
                b, b.resource_type, self.resource_name
            ):
                return False
        else:
            if self.pattern_type != PatternType.ANY and self.pattern_type != b.pattern_type:
                return False
            if self.resource_name is not None and self.resource_name != b.resource_name:
                return False
        return (
            (self.principal is None or self.principal == b.principal)
            and (self.host is None or self.host == b.host)
            and self.operation in (AclOperation.ANY, b.operation)
            and self.permission in (AclPermissionType.ANY, b.permission)
        )


def pattern_matches(b: AclBinding, resource_type: ResourceType, name: str) -> bool:
    """Whether ``b``'s resource pattern names ``name`` of ``resource_type``."""
    if b.resource_type != resource_type:
        return False
    if b.pattern_type == PatternType.LITERAL:
        return b.resource_name in (name, WILDCARD)
    if b.pattern_type == PatternType.PREFIXED:
        return name.startswith(b.resource_name)
    return False


def authorize(
    principal: str,
    host: str,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
    acls: Iterable[AclBinding],
    *,
    super_users: frozenset[str] = frozenset(),
    allow_if_no_acl: bool = False,
) -> bool:
    if principal in super_users:
        return True
    matching = [b for b in acls if pattern_matches(b, resource_type, name)]
    if not matching:
        return allow_if_no_acl

    def applies(b: AclBinding, operations: set[AclOperation]) -> bool:
        return (
            b.principal in (principal, WILDCARD_PRINCIPAL)
            and b.host in (host, WILDCARD)
            and b.operation in operations
        )

    denying = {operation, AclOperation.ALL}
    if any(b.permission == AclPermissionType.DENY and applies(b, denying) for b in matching):
        return False
    allowing = {operation, AclOperation.ALL} | IMPLIED.get(operation, set())
    return any(b.permission == AclPermissionType.ALLOW and applies(b, allowing) for b in matching)


def authorize_by_resource_type(
    principal: str,
    host: str,
    operation: AclOperation,
    resource_type: ResourceType,
    acls: Iterable[AclBinding],
    *,
    super_users: frozenset[str] = frozenset(),
    allow_if_no_acl: bool = False,
) -> bool:
    """Whether ``operation`` is allowed on at least one resource of ``resource_type``
    (Kafka ``AclAuthorizer.authorizeByResourceType``, KIP-679: an idempotent producer
    with Write on some topic). A literal wildcard DENY denies; else, with
    ``allow.everyone.if.no.acl.found``, allowed; else an ALLOW literal or prefixed
    pattern that no DENY covers (a literal of the same name, or a prefix of it)."""
    if principal in super_users:
        return True
    applying = [
        b
        for b in acls
        if b.resource_type == resource_type
        and b.principal in (principal, WILDCARD_PRINCIPAL)
        and b.host in (host, WILDCARD)
        and b.operation in (operation, AclOperation.ALL)
    ]
    denied = [b for b in applying if b.permission == AclPermissionType.DENY]
    if any(b.pattern_type == PatternType.LITERAL and b.resource_name == WILDCARD for b in denied):
        return False
    if allow_if_no_acl:
        return True
    deny_literals = {b.resource_name for b in denied if b.pattern_type == PatternType.LITERAL}
    deny_prefixes = [b.resource_name for b in denied if b.pattern_type == PatternType.PREFIXED]
    for b in applying:
        if b.permission != AclPermissionType.ALLOW:
            continue
        name = b.resource_name
        if b.pattern_type == PatternType.LITERAL:
            if name == WILDCARD or (
                name not in deny_literals and not any(name.startswith(p) for p in deny_prefixes)
            ):
                return True
        elif b.pattern_type == PatternType.PREFIXED:
            if not any(name.startswith(p) for p in deny_prefixes):
                return True
    return False
