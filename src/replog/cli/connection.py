"""What the admin commands share: reaching a broker from ``--bootstrap-server``, and, with
``--command-config``, over TLS and SASL as a Kafka client does.

A failure the user should read on one line is a ``CommandError``; the commands print
it and exit 1.

``--command-config`` is a Kafka client properties file; these keys are read (both the
Java client's and librdkafka's spelling where they differ), the others ignored:

* ``security.protocol``: PLAINTEXT (the default), SSL, SASL_PLAINTEXT or SASL_SSL;
* ``sasl.mechanism`` / ``sasl.mechanisms``: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512;
* ``sasl.username`` and ``sasl.password``, or ``sasl.jaas.config`` with the
  ``username="..." password="..."`` options of Kafka's PlainLoginModule or
  ScramLoginModule;
* ``ssl.ca.location`` / ``ssl.truststore.location``: the CAs to trust, PEM (the system's
  when absent); ``ssl.certificate.location`` and ``ssl.key.location``, or
  ``ssl.keystore.location`` holding both, for a client certificate, PEM, with
  ``ssl.key.password``; ``ssl.endpoint.identification.algorithm`` empty or ``none`` to
  skip checking the broker's host name (checked by default, as in Kafka).
"""

from __future__ import annotations

from pathlib import Path

from replog.config import ConfigError, read_properties
from replog.protocol.client import AuthenticationError, KafkaConnection
from replog.security.client_security import PLAINTEXT, ClientSecurity


class CommandError(Exception):
    """A failure to report on one line and exit 1."""


def command_config(path: str | None) -> ClientSecurity:
    """The security settings of a ``--command-config`` file (PLAINTEXT without one)."""
    if not path:
        return PLAINTEXT
    try:
        security = ClientSecurity.from_properties(read_properties(Path(path)), path)
        security.ssl_context()  # unreadable TLS files: one line now, not at connect
    except (ConfigError, ValueError) as exc:
        raise CommandError(str(exc)) from None
    return security


async def connect(
    server: str, client_id: str, security: ClientSecurity = PLAINTEXT
) -> KafkaConnection:
    """A connection to ``host:port``, secured as ``security`` says (a refused login is
    an OSError, as an unreachable broker is)."""
    host, _, port = server.strip().rpartition(":")
    try:
        conn = KafkaConnection(host or "127.0.0.1", int(port), client_id, security)
    except ValueError as exc:
        raise CommandError(f"{server!r} is not host:port") from exc
    await conn.connect()
    return conn


async def connect_any(
    bootstrap: str, client_id: str, security: ClientSecurity = PLAINTEXT
) -> KafkaConnection:
    """A connection to the first reachable server of a comma-separated list."""
    last: Exception | None = None
    for server in bootstrap.split(","):
        try:
            return await connect(server, client_id, security)
        except (
            AuthenticationError
        ) as exc:  # the next broker would refuse it too, as Kafka's tools stop
            raise CommandError(f"{server.strip()}: {exc}") from None
        except OSError as exc:
            last = exc
    raise CommandError(f"cannot reach any of {bootstrap}: {last}")
