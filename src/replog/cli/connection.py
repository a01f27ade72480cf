"""What the admin commands share: reaching a broker from ``--bootstrap-server``.

A failure the user should read on one line is a ``CommandError``; the commands print
it and exit 1.
"""

from __future__ import annotations

from replog.protocol.client import KafkaConnection


class CommandError(Exception):
    """A failure to report on one line and exit 1."""


async def connect(server: str, client_id: str) -> KafkaConnection:
    """A connection to ``host:port``."""
    host, _, port = server.strip().rpartition(":")
    try:
        conn = KafkaConnection(host or "127.0.0.1", int(port), client_id=client_id)
    except ValueError as exc:
        raise CommandError(f"{server!r} is not host:port") from exc
    await conn.connect()
    return conn


async def connect_any(bootstrap: str, client_id: str) -> KafkaConnection:
    """A connection to the first reachable server of a comma-separated list."""
    last: Exception | None = None
    for server in bootstrap.split(","):
        try:
            return await connect(server, client_id)
        except OSError as exc:
            last = exc
    raise CommandError(f"cannot reach any of {bootstrap}: {last}")
