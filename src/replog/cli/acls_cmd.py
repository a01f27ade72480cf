"""``replog acls``: ACLs as Kafka's ``kafka-acls.sh`` manages them, through CreateAcls,
DescribeAcls and DeleteAcls.

    replog acls --bootstrap-server H:P [--command-config FILE] --list
                [--topic T | --group G | --cluster | --transactional-id X]
                [--resource-pattern-type literal|prefixed|any|match] [--principal User:x]
    replog acls ... --add --allow-principal User:alice [--allow-host H]
                [--deny-principal User:bob [--deny-host H]] --operation Read [--operation ...]
                --topic T [--resource-pattern-type prefixed]
    replog acls ... --add --allow-principal User:alice --producer [--idempotent] --topic T
    replog acls ... --add --allow-principal User:alice --consumer --topic T --group G
    replog acls ... --remove --force --topic T [the principals, hosts and operations to remove]

As in Kafka: ``--operation`` defaults to All; a principal's host defaults to ``*``;
``--producer`` is Write, Describe and Create on the topics (Write and Describe on
transactional ids; with ``--idempotent`` IdempotentWrite on the cluster), ``--consumer``
Read and Describe on the topics and Read on the groups; ``--remove`` without principals
deletes every ACL of the resources, with principals exactly the entries the options name;
after a change the resources' ACLs are listed. Unlike Kafka, ``--remove`` never asks: it
needs ``--force``; and ``--operation`` beside ``--producer``/``--consumer`` is an error
rather than ignored.

The options become resource patterns and entries in pure functions (``plan``), apart
from the requests that carry them out.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from kio.schema.create_acls.v3 import request as create_req
from kio.schema.delete_acls.v3 import request as delete_req
from kio.schema.describe_acls.v3 import request as describe_req
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from replog.cli.connection import CommandError, command_config, connect_any
from replog.protocol.client import KafkaConnection
from replog.security import acl
from replog.security.acl import (
    CLUSTER_NAME,
    OPERATION_NAMES,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from replog.security.principal import KafkaPrincipal

CLIENT_ID = "replog-acls"
WILDCARD_HOST = "*"
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation

# What --producer grants (Kafka ``AclCommand``); the operations each resource type takes
# are ``acl.SUPPORTED_OPERATIONS`` (and All).
PRODUCER_TOPIC = (Op.WRITE, Op.DESCRIBE, Op.CREATE)
PRODUCER_TRANSACTIONAL_ID = (Op.WRITE, Op.DESCRIBE)
CONSUMER_TOPIC = (Op.READ, Op.DESCRIBE)
CONSUMER_GROUP = (Op.READ,)
PATTERN_TYPES = {
    "literal": PatternType.LITERAL,
    "prefixed": PatternType.PREFIXED,
    "any": PatternType.ANY,
    "match": PatternType.MATCH,
}


@dataclass(frozen=True, order=True)
class ResourcePattern:
    """A resource pattern, or a filter of them when the pattern type is ANY or MATCH (and
    the type ANY and no name: every resource)."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType

    def __str__(self) -> str:
        return (
            f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
            f"patternType={self.pattern_type.name})"
        )

    @property
    def as_filter(self) -> str:
        return str(self).replace("ResourcePattern(", "ResourcePatternFilter(", 1)


EVERY_RESOURCE = ResourcePattern(ResourceType.ANY, None, PatternType.ANY)


@dataclass(frozen=True, order=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def __str__(self) -> str:
        return (
            f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
            f"permissionType={self.permission.name})"
        )


@dataclass(frozen=True)
class Plan:
    """What a command line asks: ``changes`` are the entries to add (or remove; none: all
    of the resource) per resource pattern; ``listed`` the patterns whose ACLs to show
    (none: every ACL), for ``principals`` only when some are named."""

    action: str  # "add", "remove" or "list"
    changes: tuple[tuple[ResourcePattern, tuple[AccessControlEntry, ...]], ...]
    listed: tuple[ResourcePattern, ...]
    principals: tuple[str, ...] = ()


# -- the command line, parsed (pure) -------------------------------------------------------


def parse_operation(name: str) -> AclOperation:
    """``Read``, ``READ``, ``read``, ``IdempotentWrite``, ``idempotent_write``..."""
    wanted = name.strip().replace("_", "").replace("-", "").lower()
    for op, spelled in OPERATION_NAMES.items():
        if spelled.lower() == wanted:
            return op
    raise CommandError(f"unknown operation {name!r}; one of {', '.join(OPERATION_NAMES.values())}")


def parse_principal(text: str) -> str:
    try:
        return str(KafkaPrincipal.parse(text.strip()))
    except ValueError:
        raise CommandError(
            f"a principal is Type:name (such as User:alice), not {text.strip()!r}"
        ) from None


def parse_pattern_type(text: str) -> PatternType:
    try:
        return PATTERN_TYPES[text.strip().lower()]
    except KeyError:
        raise CommandError(
            f"--resource-pattern-type is one of {', '.join(PATTERN_TYPES)}, not {text!r}"
        ) from None


def _resources(args: argparse.Namespace, pattern: PatternType) -> list[ResourcePattern]:
    """The resources the options name, in Kafka's order (topics, cluster, groups, ids)."""
    found = [ResourcePattern(ResourceType.TOPIC, t.strip(), pattern) for t in args.topic]
    if args.cluster:
        if pattern == PatternType.PREFIXED:
            raise CommandError("the cluster is a literal resource: no prefixed pattern for it")
        found.append(ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, pattern))
    found += [ResourcePattern(ResourceType.GROUP, g.strip(), pattern) for g in args.group]
    found += [
        ResourcePattern(ResourceType.TRANSACTIONAL_ID, x.strip(), pattern)
        for x in args.transactional_id
    ]
    if any(not r.name for r in found):
        raise CommandError("a resource name may not be empty")
    return found


def _entries(
    args: argparse.Namespace, operations: Iterable[AclOperation]
) -> tuple[AccessControlEntry, ...]:
    """Every (principal, host, operation) of the allow and deny options (Kafka ``getAcl``)."""
    out: set[AccessControlEntry] = set()
    for principals, hosts, permission in (
        (args.allow_principal, args.allow_host, ALLOW),
        (args.deny_principal, args.deny_host, DENY),
    ):
        for principal in principals:
            for host in [h.strip() for h in hosts] or [WILDCARD_HOST]:
                for op in operations:
                    out.add(AccessControlEntry(parse_principal(principal), host, op, permission))
    return tuple(sorted(out))


def _check_operations(resource: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
    valid = (*acl.SUPPORTED_OPERATIONS[resource.resource_type], Op.ALL)
    for entry in entries:
        if entry.operation not in valid:
            takes = ", ".join(OPERATION_NAMES[op] for op in valid)
            raise CommandError(
                f"operation {OPERATION_NAMES[entry.operation]} does not apply to a "
                f"{resource.resource_type.name} resource (it takes {takes})"
            )


def _check_options(args: argparse.Namespace, action: str) -> None:
    """Kafka ``AclCommandOptions.checkArgs``, each failure one line."""
    principals = args.allow_principal or args.deny_principal
    if action == "list":
        for given, option in (
            (args.producer, "--producer"),
            (args.consumer, "--consumer"),
            (args.allow_principal, "--allow-principal"),
            (args.deny_principal, "--deny-principal"),
            (args.allow_host, "--allow-host"),
            (args.deny_host, "--deny-host"),
            (args.operation, "--operation"),
        ):
            if given:
                raise CommandError(f"{option} does not go with --list (--principal filters it)")
    elif args.principal:
        raise CommandError("--principal goes with --list only")
    if args.allow_host and not args.allow_principal:
        raise CommandError("--allow-host needs --allow-principal")
    if args.deny_host and not args.deny_principal:
        raise CommandError("--deny-host needs --deny-principal")
    if action == "add" and not principals:
        raise CommandError("--add needs --allow-principal or --deny-principal")
    if action == "remove" and not args.force:
        raise CommandError("--remove deletes ACLs without asking: confirm with --force")
    if args.idempotent and not args.producer:
        raise CommandError("--idempotent goes with --producer")
    if (args.producer or args.consumer) and args.operation:
        raise CommandError("--operation does not go with --producer or --consumer")
    if args.producer and not args.topic:
        raise CommandError("with --producer give a --topic")
    if args.consumer and (not args.topic or not args.group):
        raise CommandError("with --consumer give a --topic and a --group")
    if args.consumer and (args.cluster or args.transactional_id):
        raise CommandError("--consumer takes no --cluster or --transactional-id")


def plan(args: argparse.Namespace) -> Plan:
    """The command line as a ``Plan``; ``CommandError`` with a one-line reason."""
    chosen = [a for a in ("add", "remove", "list") if getattr(args, a)]
    if len(chosen) != 1:
        raise CommandError("give exactly one of --add, --remove or --list")
    [action] = chosen
    _check_options(args, action)
    pattern = parse_pattern_type(args.resource_pattern_type)
    if action == "add" and pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise CommandError(
            f"--resource-pattern-type {pattern.name.lower()} is a filter: "
            "add ACLs with literal or prefixed"
        )
    resources = _resources(args, pattern)
    if action == "list":
        return Plan("list", (), tuple(resources), tuple(parse_principal(p) for p in args.principal))
    if not resources:
        raise CommandError(
            "name at least one resource: --topic T, --group G, --cluster or --transactional-id X"
        )
    changes: dict[ResourcePattern, set[AccessControlEntry]] = {}
    if args.producer or args.consumer:
        for r in resources:
            ops: tuple[AclOperation, ...] = ()
            if args.producer and r.resource_type == ResourceType.TOPIC:
                ops += PRODUCER_TOPIC
            if args.producer and r.resource_type == ResourceType.TRANSACTIONAL_ID:
                ops += PRODUCER_TRANSACTIONAL_ID
            if args.consumer and r.resource_type == ResourceType.TOPIC:
                ops += CONSUMER_TOPIC
            if args.consumer and r.resource_type == ResourceType.GROUP:
                ops += CONSUMER_GROUP
            if ops:
                changes.setdefault(r, set()).update(_entries(args, ops))
        if args.idempotent:
            cluster = ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)
            changes.setdefault(cluster, set()).update(_entries(args, [Op.IDEMPOTENT_WRITE]))
    else:
        operations = [parse_operation(o) for o in args.operation] or [Op.ALL]
        for r in resources:
            changes[r] = set(_entries(args, operations))
    for r, entries in changes.items():
        _check_operations(r, entries)
    ordered = tuple((r, tuple(sorted(changes[r]))) for r in changes)
    return Plan(action, ordered, tuple(changes))


# -- the requests ---------------------------------------------------------------------------


def _failure(doing: str, code: ErrorCode, message: str | None) -> CommandError:
    return CommandError(
        f"cannot {doing}: {code.name.upper()}" + (f": {message}" if message else "")
    )


async def describe(
    conn: KafkaConnection, resource: ResourcePattern
) -> dict[ResourcePattern, set[AccessControlEntry]]:
    response = await conn.request(
        describe_req.DescribeAclsRequest(
            resource_type_filter=i8(resource.resource_type),
            resource_name_filter=resource.name,
            pattern_type_filter=i8(resource.pattern_type),
            principal_filter=None,
            host_filter=None,
            operation=i8(AclOperation.ANY),
            permission_type=i8(AclPermissionType.ANY),
        )
    )
    if response.error_code != ErrorCode.none:
        raise _failure("list ACLs", response.error_code, response.error_message)
    found: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for r in response.resources:
        pattern = ResourcePattern(
            ResourceType(int(r.resource_type)), r.resource_name, PatternType(int(r.pattern_type))
        )
        found.setdefault(pattern, set()).update(
            AccessControlEntry(
                a.principal,
                a.host,
                AclOperation(int(a.operation)),
                AclPermissionType(int(a.permission_type)),
            )
            for a in r.acls
        )
    return found


def print_acls(heading: str, by_resource: dict[ResourcePattern, set[AccessControlEntry]]) -> None:
    """Kafka's listing: the resource, then one entry a line."""
    for resource in sorted(by_resource):
        if by_resource[resource]:
            print(f"{heading} `{resource}`:")
            for entry in sorted(by_resource[resource]):
                print(f"\t{entry}")
            print()


async def list_acls(conn: KafkaConnection, p: Plan) -> None:
    found: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for resource in p.listed or (EVERY_RESOURCE,):
        for pattern, entries in (await describe(conn, resource)).items():
            found.setdefault(pattern, set()).update(entries)
    if not p.principals:
        print_acls("Current ACLs for resource", found)
        return
    for principal in p.principals:
        print(f"ACLs for principal `{principal}`")
        print_acls(
            "Current ACLs for resource",
            {r: {e for e in es if e.principal == principal} for r, es in found.items()},
        )


async def add_acls(conn: KafkaConnection, p: Plan) -> None:
    for resource, entries in p.changes:
        print(f"Adding ACLs for resource `{resource}`:")
        for entry in entries:
            print(f"\t{entry}")
        print()
        response = await conn.request(
            create_req.CreateAclsRequest(
                creations=tuple(
                    create_req.AclCreation(
                        resource_type=i8(resource.resource_type),
                        resource_name=resource.name or "",
                        resource_pattern_type=i8(resource.pattern_type),
                        principal=e.principal,
                        host=e.host,
                        operation=i8(e.operation),
                        permission_type=i8(e.permission),
                    )
                    for e in entries
                )
            )
        )
        for result in response.results:
            if result.error_code != ErrorCode.none:
                raise _failure("add ACLs", result.error_code, result.error_message)


def _delete_filter(
    resource: ResourcePattern, entry: AccessControlEntry | None
) -> delete_req.DeleteAclsFilter:
    return delete_req.DeleteAclsFilter(
        resource_type_filter=i8(resource.resource_type),
        resource_name_filter=resource.name,
        pattern_type_filter=i8(resource.pattern_type),
        principal_filter=entry.principal if entry else None,
        host_filter=entry.host if entry else None,
        operation=i8(entry.operation if entry else AclOperation.ANY),
        permission_type=i8(entry.permission if entry else AclPermissionType.ANY),
    )


async def remove_acls(conn: KafkaConnection, p: Plan) -> None:
    for resource, entries in p.changes:
        filters = tuple(_delete_filter(resource, e) for e in entries) or (
            _delete_filter(resource, None),
        )
        response = await conn.request(delete_req.DeleteAclsRequest(filters=filters))
        removed: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for result in response.filter_results:
            if result.error_code != ErrorCode.none:
                raise _failure("remove ACLs", result.error_code, result.error_message)
            for m in result.matching_acls:
                if m.error_code != ErrorCode.none:
                    raise _failure("remove ACLs", m.error_code, m.error_message)
                pattern = ResourcePattern(
                    ResourceType(int(m.resource_type)),
                    m.resource_name,
                    PatternType(int(m.pattern_type)),
                )
                removed.setdefault(pattern, set()).add(
                    AccessControlEntry(
                        m.principal,
                        m.host,
                        AclOperation(int(m.operation)),
                        AclPermissionType(int(m.permission_type)),
                    )
                )
        if removed:
            print_acls("Removed ACLs for resource", removed)
        else:
            print(f"No ACLs matched resource filter `{resource.as_filter}`")
            print()


async def _run(args: argparse.Namespace, p: Plan) -> int:
    security = command_config(args.command_config)
    conn = await connect_any(args.bootstrap_server, CLIENT_ID, security)
    try:
        if p.action == "add":
            await add_acls(conn, p)
        elif p.action == "remove":
            await remove_acls(conn, p)
        await list_acls(conn, p)
    finally:
        await conn.close()
    return 0


def _main(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_run(args, plan(args)))
    except (CommandError, OSError) as exc:
        print(f"replog: {exc}", file=sys.stderr)
        return 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "acls",
        help="list, add and remove ACLs (kafka-acls.sh)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    p.add_argument(
        "--command-config",
        metavar="FILE",
        help="client properties: security.protocol, sasl.mechanism, sasl.username and "
        "sasl.password (or sasl.jaas.config), ssl.ca.location",
    )
    p.add_argument("--list", action="store_true", help="show ACLs (of the resources named)")
    p.add_argument("--add", action="store_true", help="add ACLs")
    p.add_argument(
        "--remove",
        action="store_true",
        help="remove ACLs: never asks, so it needs --force",
    )
    p.add_argument("--force", action="store_true", help="confirm --remove")
    p.add_argument("--topic", action="append", default=[], metavar="T")
    p.add_argument("--group", action="append", default=[], metavar="G")
    p.add_argument("--cluster", action="store_true", help=f"the cluster ({CLUSTER_NAME})")
    p.add_argument("--transactional-id", action="append", default=[], metavar="X")
    p.add_argument(
        "--resource-pattern-type",
        default="literal",
        metavar="literal|prefixed|any|match",
        help="literal or prefixed to add; to list or remove also any (every pattern type, "
        "the name exactly) or match (every ACL that applies to the name) (default literal)",
    )
    p.add_argument("--allow-principal", action="append", default=[], metavar="User:x")
    p.add_argument("--deny-principal", action="append", default=[], metavar="User:x")
    p.add_argument("--allow-host", action="append", default=[], metavar="H", help="default *")
    p.add_argument("--deny-host", action="append", default=[], metavar="H", help="default *")
    p.add_argument(
        "--operation",
        action="append",
        default=[],
        metavar="OP",
        help=f"one of {', '.join(OPERATION_NAMES.values())} (default All)",
    )
    p.add_argument("--principal", action="append", default=[], help="--list: only these")
    p.add_argument(
        "--producer",
        action="store_true",
        help="Write, Describe, Create on the topics (Write, Describe on transactional ids)",
    )
    p.add_argument(
        "--idempotent", action="store_true", help="--producer: IdempotentWrite on the cluster"
    )
    p.add_argument(
        "--consumer",
        action="store_true",
        help="Read, Describe on the topics and Read on the groups",
    )
    p.set_defaults(func=_main)
