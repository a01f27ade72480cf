"""ACLs in ZooKeeper, in Kafka's ``AclAuthorizer`` layout.

    /kafka-acl/<ResourceType>/<name>                      LITERAL patterns
    /kafka-acl-extended/prefixed/<ResourceType>/<name>    PREFIXED patterns
    {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
                          "operation":"Read","host":"*"}]}
    /kafka-acl-changes/acl_changes_<seq>                  "Topic:name" (a literal changed)
    /kafka-acl-extended-changes/acl_changes_<seq>         {"version":1,"resourceType":"Topic",
                                                           "name":"x","patternType":"Prefixed"}

Writes are conditional on the znode version read (a concurrent writer makes the caller
read again); each is followed by a change notification, which every broker watches.
Notifications older than 15 minutes are deleted by whichever broker processes a change
(``purge_expired_changes``, Kafka ``ZkNodeChangeNotificationListener.purgeObsoleteNotifications``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from replog.security.acl import (
    CLUSTER_NAME,
    OPERATION_NAMES,
    PERMISSION_NAMES,
    RESOURCE_NAMES,
    AclBinding,
    AclBindingFilter,
    PatternType,
    ResourceType,
)
from replog.zk.config_znodes import CHANGE_EXPIRATION_MS, expired_changes

LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"

_TYPES = {name: rtype for rtype, name in RESOURCE_NAMES.items()}
_OPERATIONS = {name: op for op, name in OPERATION_NAMES.items()}
_PERMISSIONS = {name: p for p, name in PERMISSION_NAMES.items()}


class AclDataError(ValueError):
    """A znode that is not Kafka's ACL JSON."""


def purge_expired_changes(
    zk: KazooClient, now_ms: int, expiration_ms: int = CHANGE_EXPIRATION_MS
) -> list[str]:
    """Delete the change notifications created more than ``expiration_ms`` before
    ``now_ms``; the paths deleted (one already gone is skipped)."""
    deleted = []
    for root in (LITERAL_CHANGES, EXTENDED_CHANGES):
        try:
            children = zk.get_children(root)
        except NoNodeError:
            continue
        ctimes = []
        for name in children:
            try:
                ctimes.append((name, zk.exists(f"{root}/{name}").ctime))
            except (NoNodeError, AttributeError):  # (exists is None once gone)
                continue
        for name in expired_changes(ctimes, now_ms, expiration_ms):
            try:
                zk.delete(f"{root}/{name}")
            except NoNodeError:
                continue
            deleted.append(f"{root}/{name}")
    return deleted


def resource_path(resource_type: ResourceType, pattern: PatternType, name: str) -> str:
    root = LITERAL_ROOT if pattern == PatternType.LITERAL else PREFIXED_ROOT
    if not name or "/" in name:
        raise ValueError(f"bad resource name {name!r}")
    return f"{root}/{RESOURCE_NAMES[resource_type]}/{name}"


def encode(bindings: Iterable[AclBinding]) -> bytes:
    acls = [
        {
            "principal": b.principal,
            "permissionType": PERMISSION_NAMES[b.permission],
            "operation": OPERATION_NAMES[b.operation],
            "host": b.host,
        }
        for b in sorted(bindings, key=lambda b: (b.principal, b.operation, b.permission, b.host))
    ]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def decode(
    data: bytes, resource_type: ResourceType, pattern: PatternType, name: str
) -> list[AclBinding]:
    try:
        body = json.loads(data)
        return [
            AclBinding(
                resource_type,
                name,
                pattern,
                str(a["principal"]),
                str(a["host"]),
                _OPERATIONS[a["operation"]],
                _PERMISSIONS[a["permissionType"]],
            )
            for a in body["acls"]
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise AclDataError(f"ACLs of {name}: {exc}") from None


def load_all(zk: KazooClient) -> list[AclBinding]:
    """Every ACL stored; unreadable znodes are skipped (the caller logs the count)."""
    out: list[AclBinding] = []
    for root, pattern in (
        (LITERAL_ROOT, PatternType.LITERAL),
        (PREFIXED_ROOT, PatternType.PREFIXED),
    ):
        for type_name, rtype in _TYPES.items():
            try:
                names = zk.get_children(f"{root}/{type_name}")
            except NoNodeError:
                continue
            for name in names:
                try:
                    data, _ = zk.get(f"{root}/{type_name}/{name}")
                    out.extend(decode(data, rtype, pattern, name))
                except (NoNodeError, AclDataError):
                    continue
    return out


def _notify(zk: KazooClient, resource_type: ResourceType, pattern: PatternType, name: str) -> None:
    if pattern == PatternType.LITERAL:
        zk.create(
            f"{LITERAL_CHANGES}/{CHANGE_PREFIX}",
            f"{RESOURCE_NAMES[resource_type]}:{name}".encode(),
            sequence=True,
            makepath=True,
        )
    else:
        note = {
            "version": 1,
            "resourceType": RESOURCE_NAMES[resource_type],
            "name": name,
            "patternType": pattern.name.capitalize(),
        }
        zk.create(
            f"{EXTENDED_CHANGES}/{CHANGE_PREFIX}",
            json.dumps(note).encode(),
            sequence=True,
            makepath=True,
        )


def _update(zk: KazooClient, path: str, change) -> bool:
    """Read-modify-write ``path`` with ``change(current) -> new`` (None: no change);
    retried on a concurrent write. True if it wrote."""
    rtype, pattern, name = _parse_path(path)
    while True:
        try:
            data, stat = zk.get(path)
            current = decode(data, rtype, pattern, name)
            version: int | None = stat.version
        except NoNodeError:
            current, version = [], None
        updated = change(current)
        if updated is None:
            return False
        try:
            if version is None:
                zk.create(path, encode(updated), makepath=True)
            elif updated:
                zk.set(path, encode(updated), version=version)
            else:
                zk.delete(path, version=version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            continue
        _notify(zk, rtype, pattern, name)
        return True


def _parse_path(path: str) -> tuple[ResourceType, PatternType, str]:
    if path.startswith(PREFIXED_ROOT + "/"):
        pattern, rest = PatternType.PREFIXED, path[len(PREFIXED_ROOT) + 1 :]
    else:
        pattern, rest = PatternType.LITERAL, path[len(LITERAL_ROOT) + 1 :]
    type_name, name = rest.split("/", 1)
    return _TYPES[type_name], pattern, name


def add(zk: KazooClient, bindings: Iterable[AclBinding]) -> None:
    by_path: dict[str, list[AclBinding]] = {}
    for b in bindings:
        by_path.setdefault(
            resource_path(b.resource_type, b.pattern_type, b.resource_name), []
        ).append(b)
    for path, new in by_path.items():
        _update(
            zk,
            path,
            lambda current, new=new: (
                None if set(new) <= set(current) else list(set(current) | set(new))
            ),
        )


def remove(zk: KazooClient, filters: Iterable[AclBindingFilter]) -> list[list[AclBinding]]:
    """Delete what each filter matches; per filter, the bindings it deleted."""
    filters = list(filters)
    everything = load_all(zk)
    deleted: list[list[AclBinding]] = [[b for b in everything if f.matches(b)] for f in filters]
    gone = {b for found in deleted for b in found}
    by_path: dict[str, set[AclBinding]] = {}
    for b in gone:
        by_path.setdefault(
            resource_path(b.resource_type, b.pattern_type, b.resource_name), set()
        ).add(b)
    for path, drop in by_path.items():
        _update(
            zk,
            path,
            lambda current, drop=drop: (
                None if not (set(current) & drop) else [b for b in current if b not in drop]
            ),
        )
    return deleted


def valid_binding(b: AclBinding) -> str | None:
    """Why ``b`` cannot be stored (Kafka's CreateAcls checks), or None."""
    if b.resource_type not in RESOURCE_NAMES:
        return "resource type must be a specific type"
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return "pattern type must be LITERAL or PREFIXED"
    if b.operation not in OPERATION_NAMES:
        return "operation must be a specific operation"
    if b.permission not in PERMISSION_NAMES:
        return "permission type must be ALLOW or DENY"
    if not b.resource_name or "/" in b.resource_name:
        return f"invalid resource name {b.resource_name!r}"
    if ":" not in b.principal:
        return f"principal {b.principal!r} is not TYPE:NAME"
    if b.resource_type == ResourceType.CLUSTER and b.resource_name != CLUSTER_NAME:
        return "the cluster resource is named kafka-cluster"
    if b.pattern_type == PatternType.PREFIXED and b.resource_name == "*":
        return "a PREFIXED pattern cannot be *"
    return None
