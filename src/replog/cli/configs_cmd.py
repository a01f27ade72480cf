"""``replog configs``: describe and alter topic and broker configs, like kafka-configs.sh.

    replog configs --bootstrap-server H:P --entity-type topics --entity-name T --describe [--all]
    replog configs --bootstrap-server H:P --entity-type topics --entity-name T --alter \\
        --add-config 'retention.ms=60000,cleanup.policy=[compact,delete]' \\
        --delete-config segment.ms
    replog configs --bootstrap-server H:P --entity-type brokers (--entity-name 0 | --entity-default) ...

Alterations are IncrementalAlterConfigs (SET for ``--add-config``, DELETE for
``--delete-config``), as kafka-configs.sh sends them; a broker's own configs go to that
broker. Output is kafka-configs.sh's; a failure prints one line and exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from kio.schema.describe_configs.v4 import request as describe_req
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as alter_req
from kio.schema.metadata.v8 import request as metadata_req
from kio.static.primitive import i8

from replog.cli.connection import CommandError, connect, connect_any
from replog.protocol.client import KafkaConnection

TOPIC, BROKER = 2, 4
SOURCE_NAMES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
}
SET, DELETE = 0, 1
CLIENT_ID = "replog-configs"


def parse_add_config(text: str) -> dict[str, str]:
    """kafka-configs.sh's ``k1=v1,k2=[v1,v2]``: commas inside brackets belong to the value."""
    items, depth, current = [], 0, ""
    for char in text:
        if char == "," and depth == 0:
            items.append(current)
            current = ""
            continue
        depth += {"[": 1, "]": -1}.get(char, 0)
        current += char
    items.append(current)
    out: dict[str, str] = {}
    for item in (i.strip() for i in items):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CommandError(f"--add-config entry {item!r} is not of the form key=value")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        out[key.strip()] = value
    return out


async def _connect(server: str) -> KafkaConnection:
    return await connect(server, CLIENT_ID)


async def _connection_for(args: argparse.Namespace) -> KafkaConnection:
    """A broker's own configs are that broker's to describe and alter."""
    conn = await connect_any(args.bootstrap_server, CLIENT_ID)
    if args.entity_type != "brokers" or args.entity_default:
        return conn
    try:
        body = metadata_req.MetadataRequest(
            topics=(),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        response = await conn.request(body)
    finally:
        await conn.close()
    for b in response.brokers:
        if str(b.node_id) == args.entity_name:
            return await _connect(f"{b.host}:{b.port}")
    raise CommandError(f"broker {args.entity_name} is not in the cluster")


def _entity_text(args: argparse.Namespace) -> str:
    if args.entity_type == "topics":
        return f"topic {args.entity_name}"
    return "brokers in the cluster" if args.entity_default else f"broker {args.entity_name}"


async def _describe(conn: KafkaConnection, args: argparse.Namespace, rtype: int, name: str) -> None:
    body = describe_req.DescribeConfigsRequest(
        resources=(
            describe_req.DescribeConfigsResource(
                resource_type=i8(rtype), resource_name=name, configuration_keys=None
            ),
        ),
        include_synonyms=True,
        include_documentation=False,
    )
    response = await conn.request(body)
    result = response.results[0]
    if result.error_code != ErrorCode.none:
        raise CommandError(f"{result.error_code.name.upper()}: {result.error_message or ''}")
    if args.all:
        wanted = None
    elif rtype == TOPIC:
        wanted = 1
    else:
        wanted = 3 if args.entity_default else 2
    if args.entity_default:
        title = "Default configs for brokers in the cluster are:"
    else:
        kind = "All configs" if args.all else "Dynamic configs"
        title = f"{kind} for {_entity_text(args)} are:"
    print(title)
    for entry in result.configs:
        if wanted is not None and int(entry.config_source) != wanted:
            continue
        synonyms = ", ".join(
            f"{SOURCE_NAMES.get(int(s.source), 'UNKNOWN')}:{s.name}={s.value}"
            for s in entry.synonyms
        )
        sensitive = "true" if entry.is_sensitive else "false"
        value = "null" if entry.value is None else entry.value  # as Java prints a null
        print(f"  {entry.name}={value} sensitive={sensitive} synonyms={{{synonyms}}}")


async def _alter(conn: KafkaConnection, args: argparse.Namespace, rtype: int, name: str) -> None:
    added: dict[str, str] = {}
    for text in args.add_config or []:
        added.update(parse_add_config(text))
    deleted = [k.strip() for text in args.delete_config or [] for k in text.split(",") if k.strip()]
    both = sorted(set(added) & set(deleted))
    if both:
        raise CommandError(f"configs both added and deleted: {', '.join(both)}")
    if not added and not deleted:
        raise CommandError("--alter needs --add-config or --delete-config")
    configs = tuple(
        alter_req.AlterableConfig(name=k, config_operation=i8(SET), value=v)
        for k, v in added.items()
    ) + tuple(
        alter_req.AlterableConfig(name=k, config_operation=i8(DELETE), value=None) for k in deleted
    )
    body = alter_req.IncrementalAlterConfigsRequest(
        resources=(
            alter_req.AlterConfigsResource(
                resource_type=i8(rtype), resource_name=name, configs=configs
            ),
        ),
        validate_only=False,
    )
    response = await conn.request(body)
    result = response.responses[0]
    if result.error_code != ErrorCode.none:
        raise CommandError(f"{result.error_code.name.upper()}: {result.error_message or ''}")
    if args.entity_default:
        print("Completed updating default config for brokers in the cluster.")
    else:
        print(f"Completed updating config for {_entity_text(args)}.")


async def _run(args: argparse.Namespace) -> int:
    if args.entity_type == "topics" and (args.entity_default or not args.entity_name):
        raise CommandError("topics need --entity-name")
    if args.entity_type == "brokers" and bool(args.entity_default) == bool(args.entity_name):
        raise CommandError("brokers need either --entity-name or --entity-default")
    rtype = TOPIC if args.entity_type == "topics" else BROKER
    name = "" if args.entity_default else args.entity_name
    conn = await _connection_for(args)
    try:
        if args.describe:
            await _describe(conn, args, rtype, name)
        else:
            await _alter(conn, args, rtype, name)
    finally:
        await conn.close()
    return 0


def _main(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_run(args))
    except (CommandError, ConnectionError, TimeoutError, OSError) as exc:
        print(f"replog: Error while executing config command: {exc}", file=sys.stderr)
        return 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("configs", help="describe and alter topic and broker configs")
    p.add_argument("--bootstrap-server", required=True)
    p.add_argument("--entity-type", required=True, choices=("topics", "brokers"))
    p.add_argument("--entity-name")
    p.add_argument("--entity-default", action="store_true", help="the cluster-wide defaults")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true")
    action.add_argument("--alter", action="store_true")
    p.add_argument("--all", action="store_true", help="with --describe: every config")
    p.add_argument("--add-config", action="append", metavar="K1=V1,K2=[V2,V3]")
    p.add_argument("--delete-config", action="append", metavar="K1,K2")
    p.set_defaults(func=_main)
