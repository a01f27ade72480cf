"""``replog users``: SCRAM users (Kafka ``kafka-configs --entity-type users``), through
AlterUserScramCredentials / DescribeUserScramCredentials.

    replog users --bootstrap-server H:P list
    replog users --bootstrap-server H:P add NAME --mechanism SCRAM-SHA-512
                 (--password-file FILE | --password P) [--iterations 4096]
    replog users --bootstrap-server H:P delete NAME --mechanism SCRAM-SHA-512

The password is salted and hashed here (PBKDF2, a random salt); only the salted password
travels, as Kafka's admin client sends it. It is never printed or logged.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import secrets
import sys
from pathlib import Path

from kio.schema.alter_user_scram_credentials.v0 import request as alter_req
from kio.schema.describe_user_scram_credentials.v0 import request as describe_req
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32

from replog.cli.connection import CommandError, command_config, connect_any
from replog.security import sasl

CLIENT_ID = "replog-users"
NAMES = {code: name for name, code in sasl.MECHANISM_CODES.items()}


async def _list(args: argparse.Namespace) -> int:
    conn = await connect_any(args.bootstrap_server, CLIENT_ID, command_config(args.command_config))
    try:
        response = await conn.request(describe_req.DescribeUserScramCredentialsRequest(users=None))
    finally:
        await conn.close()
    if response.error_code != ErrorCode.none:
        raise CommandError(f"cannot list users: {response.error_code.name}")
    for result in response.results:
        mechanisms = ", ".join(
            f"{NAMES.get(int(i.mechanism), i.mechanism)} (iterations {int(i.iterations)})"
            for i in result.credential_infos
        )
        print(f"{result.user}: {mechanisms}")
    return 0


def _password(args: argparse.Namespace) -> str:
    if args.password_file:
        return Path(args.password_file).read_text().rstrip("\n")
    if args.password is not None:
        return args.password
    raise CommandError("give --password-file or --password")


async def _alter(args: argparse.Namespace, upsert: bool) -> int:
    mechanism = args.mechanism.upper()
    if mechanism not in sasl.MECHANISM_CODES:
        raise CommandError(f"--mechanism must be one of {', '.join(sasl.MECHANISM_CODES)}")
    code = i8(sasl.MECHANISM_CODES[mechanism])
    if upsert:
        salt = secrets.token_bytes(32)
        salted = hashlib.pbkdf2_hmac(
            sasl.SCRAM_MECHANISMS[mechanism], _password(args).encode(), salt, args.iterations
        )
        body = alter_req.AlterUserScramCredentialsRequest(
            deletions=(),
            upsertions=(
                alter_req.ScramCredentialUpsertion(
                    name=args.name,
                    mechanism=code,
                    iterations=i32(args.iterations),
                    salt=salt,
                    salted_password=salted,
                ),
            ),
        )
    else:
        body = alter_req.AlterUserScramCredentialsRequest(
            deletions=(alter_req.ScramCredentialDeletion(name=args.name, mechanism=code),),
            upsertions=(),
        )
    conn = await connect_any(args.bootstrap_server, CLIENT_ID, command_config(args.command_config))
    try:
        response = await conn.request(body)
    finally:
        await conn.close()
    [result] = response.results
    if result.error_code != ErrorCode.none:
        raise CommandError(f"{result.error_code.name}: {result.error_message or ''}".strip())
    print(f"{'set' if upsert else 'deleted'} {mechanism} credential of {args.name}")
    return 0


def _main(args: argparse.Namespace) -> int:
    try:
        if args.users_command == "list":
            return asyncio.run(_list(args))
        return asyncio.run(_alter(args, upsert=args.users_command == "add"))
    except (CommandError, OSError) as exc:
        print(f"replog: {exc}", file=sys.stderr)
        return 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("users", help="SCRAM users (AlterUserScramCredentials)")
    p.add_argument("--bootstrap-server", required=True)
    p.add_argument(
        "--command-config",
        help="Kafka client properties (security.protocol, sasl.*, ssl.*) for a secured listener",
    )
    actions = p.add_subparsers(dest="users_command", required=True)
    actions.add_parser("list", help="users and their SCRAM mechanisms")
    add = actions.add_parser("add", help="set a user's SCRAM credential")
    add.add_argument("name")
    add.add_argument("--mechanism", default=sasl.SCRAM_SHA_512)
    add.add_argument("--password-file")
    add.add_argument("--password", help="prefer --password-file: a command line is visible")
    add.add_argument("--iterations", type=int, default=sasl.DEFAULT_ITERATIONS)
    delete = actions.add_parser("delete", help="remove a user's SCRAM credential")
    delete.add_argument("name")
    delete.add_argument("--mechanism", default=sasl.SCRAM_SHA_512)
    p.set_defaults(func=_main)
