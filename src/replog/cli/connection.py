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

import asyncio
import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2 import request as authenticate_req
from kio.schema.sasl_handshake.v1 import request as handshake_req

from replog.config import ConfigError, read_properties
from replog.protocol.client import KafkaConnection
from replog.security import sasl, sasl_client

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


class CommandError(Exception):
    """A failure to report on one line and exit 1."""


@dataclass(frozen=True)
class ClientSecurity:
    """How a command's connections are secured (the ``--command-config`` file)."""

    protocol: str = "PLAINTEXT"
    mechanism: str = ""
    username: str = ""
    password: str = field(default="", repr=False)
    ca_location: str = ""
    certificate_location: str = ""
    key_location: str = ""
    key_password: str = field(default="", repr=False)
    check_hostname: bool = True

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def from_properties(cls, props: dict[str, str], source: str = "") -> ClientSecurity:
        where = f" in {source}" if source else ""
        protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
        if protocol not in PROTOCOLS:
            raise CommandError(
                f"security.protocol{where} must be one of {', '.join(PROTOCOLS)}, not {protocol}"
            )
        mechanism = (props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "").strip()
        username = props.get("sasl.username", "")
        password = props.get("sasl.password", "")
        jaas = props.get("sasl.jaas.config", "")
        if jaas and not username:
            options = {k: v.replace('\\"', '"') for k, v in _JAAS_OPTION.findall(jaas)}
            username, password = options.get("username", ""), options.get("password", "")
        if protocol.startswith("SASL_"):
            mechanism = mechanism.upper()  # (Kafka's default, GSSAPI, is not served)
            if mechanism not in sasl.MECHANISMS:
                raise CommandError(
                    f"sasl.mechanism{where} must be one of {', '.join(sasl.MECHANISMS)}, "
                    f"not {mechanism or '(unset)'}"
                )
            if not username:
                raise CommandError(
                    f"{protocol} needs sasl.username and sasl.password (or sasl.jaas.config){where}"
                )
        keystore = props.get("ssl.keystore.location", "")
        identification = props.get("ssl.endpoint.identification.algorithm", "https")
        return cls(
            protocol=protocol,
            mechanism=mechanism,
            username=username,
            password=password,
            ca_location=props.get("ssl.ca.location") or props.get("ssl.truststore.location", ""),
            certificate_location=props.get("ssl.certificate.location") or keystore,
            key_location=props.get("ssl.key.location") or keystore,
            key_password=props.get("ssl.key.password", ""),
            check_hostname=identification.strip().lower() not in ("", "none"),
        )

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context of SSL and SASL_SSL (None otherwise); one-line errors."""
        if not self.uses_tls:
            return None
        try:
            context = ssl.create_default_context(cafile=self.ca_location or None)
            if self.certificate_location:
                context.load_cert_chain(
                    self.certificate_location,
                    self.key_location or None,
                    password=self.key_password or None,
                )
        except (OSError, ssl.SSLError) as exc:
            raise CommandError(f"cannot load the TLS files (PEM): {exc}") from None
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.check_hostname = self.check_hostname
        return context


PLAINTEXT = ClientSecurity()


def command_config(path: str | None) -> ClientSecurity:
    """The security settings of a ``--command-config`` file (PLAINTEXT without one)."""
    if not path:
        return PLAINTEXT
    try:
        props = read_properties(Path(path))
    except ConfigError as exc:
        raise CommandError(str(exc)) from None
    return ClientSecurity.from_properties(props, path)


class SecuredConnection(KafkaConnection):
    """A ``KafkaConnection`` that ``connect`` opens over TLS and authenticates with SASL,
    as ``security`` asks, before any other request is sent."""

    def __init__(self, host: str, port: int, client_id: str, security: ClientSecurity) -> None:
        super().__init__(host, port, client_id=client_id)
        self._security = security
        self._ssl_context = security.ssl_context()

    async def connect(self, timeout_s: float = 10) -> None:
        # KafkaConnection.connect's steps, with TLS when asked
        self._reader, self._writer = await asyncio.wait_for(
            asyncio.open_connection(
                self.host,
                self.port,
                ssl=self._ssl_context,
                server_hostname=self.host if self._ssl_context is not None else None,
                limit=1 << 20,
            ),
            timeout_s,
        )
        self._read_task = asyncio.create_task(self._read_loop())
        if self._security.uses_sasl:
            try:
                await self._sasl_login()
            except BaseException:
                await self.close()
                raise

    async def _sasl_login(self) -> None:
        """SaslHandshake v1, then SaslAuthenticate until the mechanism is done (Kafka's
        ``SaslClientAuthenticator``)."""
        mechanism = self._security.mechanism
        handshake = await self.request(handshake_req.SaslHandshakeRequest(mechanism=mechanism))
        if handshake.error_code != ErrorCode.none:
            offered = ", ".join(handshake.mechanisms) or "none"
            raise CommandError(
                f"the broker does not offer SASL mechanism {mechanism} (it offers {offered})"
            )
        client = sasl_client.client_for(mechanism, self._security.username, self._security.password)
        token: bytes | None = client.first()
        while token is not None:
            answer = await self.request(authenticate_req.SaslAuthenticateRequest(auth_bytes=token))
            if answer.error_code != ErrorCode.none:
                reason = answer.error_message or answer.error_code.name.upper()
                raise CommandError(f"authentication failed: {reason}")
            try:
                token = client.evaluate(bytes(answer.auth_bytes))
            except sasl.AuthenticationFailed as exc:
                raise CommandError(f"authentication failed: {exc}") from None


async def connect(
    server: str, client_id: str, security: ClientSecurity = PLAINTEXT
) -> KafkaConnection:
    """A connection to ``host:port``, secured as ``security`` says."""
    host, _, port = server.strip().rpartition(":")
    try:
        if not security.uses_tls and not security.uses_sasl:
            conn = KafkaConnection(host or "127.0.0.1", int(port), client_id=client_id)
        else:
            conn = SecuredConnection(host or "127.0.0.1", int(port), client_id, security)
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
        except OSError as exc:
            last = exc
    raise CommandError(f"cannot reach any of {bootstrap}: {last}")
