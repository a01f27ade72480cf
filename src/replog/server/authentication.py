"""Authentication on a listener: what its security protocol asks of each connection.

``ListenerSecurity`` is built from the broker's config per listener: its TLS context
(SSL, SASL_SSL) and its SASL mechanisms (SASL_PLAINTEXT, SASL_SSL) with where their
credentials come from: PLAIN users from ``listener.name.<l>.plain.sasl.jaas.config``
(``user_<name>="<password>"``, Kafka's ``PlainLoginModule`` options), SCRAM credentials
from ZooKeeper ``/config/users/<user>`` (as ``kafka-configs --alter --add-config
'SCRAM-SHA-512=[password=...]' --entity-type users`` writes them).

``SaslConnection`` is one connection's exchange (Kafka ``SaslServerAuthenticator``):
until it succeeds only ApiVersions, SaslHandshake (v1) and SaslAuthenticate are
answered; any other request closes the connection. A failed authentication is answered
with SASL_AUTHENTICATION_FAILED and the connection closed; it is logged once per
connection, without the password.

``inter_broker_client_security`` is the other side: how this broker connects to the
others (replica fetchers, the controller's requests, ControlledShutdown) over
``inter.broker.listener.name``. It trusts the listener's ``ssl.truststore.location``,
presents its ``ssl.keystore.location`` (for ``ssl.client.auth``), checks host names unless
``ssl.endpoint.identification.algorithm`` is empty, and logs in with
``sasl.mechanism.inter.broker.protocol`` as the ``username``/``password`` of that
mechanism's ``listener.name.<l>.<mechanism>.sasl.jaas.config``, as a Kafka broker does.

Concurrency: one ``SaslConnection`` per connection, driven by its reader task; credential
lookups (ZooKeeper reads) run in a thread.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i64Timedelta

from replog.config import KafkaConfig
from replog.protocol.apis import ApiKey, response_schema
from replog.security import sasl, tls
from replog.security.client_security import ClientSecurity, jaas_options
from replog.security.principal import USER_TYPE, KafkaPrincipal

log = logging.getLogger(__name__)

ALLOWED_BEFORE_AUTHENTICATION = {
    ApiKey.API_VERSIONS,
    ApiKey.SASL_HANDSHAKE,
    ApiKey.SASL_AUTHENTICATE,
}

ScramLookup = Callable[[str, str], sasl.ScramCredential | None]  # (mechanism, user)


@dataclass
class ListenerSecurity:
    listener_name: str
    security_protocol: str
    ssl_context: ssl.SSLContext | None = None
    mechanisms: tuple[str, ...] = ()
    plain_users: dict[str, str] = field(default_factory=dict)
    scram_lookup: ScramLookup | None = None
    reauth_ms: int = 0

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    def sasl_server(self, mechanism: str) -> sasl.SaslServer:
        if mechanism == sasl.PLAIN:
            return sasl.PlainServer(self.plain_users)
        lookup = self.scram_lookup

        def credential(user: str) -> sasl.ScramCredential | None:
            return None if lookup is None else lookup(mechanism, user)

        return sasl.ScramServer(mechanism, credential)


def listener_security(
    config: KafkaConfig, listener_name: str, scram_lookup: ScramLookup | None
) -> ListenerSecurity:
    """The security of ``listener_name``; ``ValueError`` naming the setting that is wrong."""
    protocol = config.security_protocol(listener_name)
    security = ListenerSecurity(listener_name, protocol)
    setting = lambda key: config.listener_setting(listener_name, key)  # noqa: E731
    if protocol in ("SSL", "SASL_SSL"):
        security.ssl_context = tls.server_context(
            setting("ssl.keystore.location"),
            key_password=setting("ssl.key.password"),
            truststore=setting("ssl.truststore.location"),
            client_auth=setting("ssl.client.auth") or "none",
            enabled_protocols=setting("ssl.enabled.protocols") or "TLSv1.2,TLSv1.3",
        )
    if security.uses_sasl:
        wanted = [m.strip().upper() for m in setting("sasl.enabled.mechanisms").split(",")]
        unknown = [m for m in wanted if m and m not in sasl.MECHANISMS]
        if unknown:
            raise ValueError(
                f"sasl.enabled.mechanisms: {', '.join(unknown)} not offered "
                f"(replog has {', '.join(sasl.MECHANISMS)})"
            )
        security.mechanisms = tuple(m for m in wanted if m)
        security.plain_users = sasl.parse_plain_jaas_users(setting("plain.sasl.jaas.config"))
        security.scram_lookup = scram_lookup
        security.reauth_ms = config.connections_max_reauth_ms
    return security


def inter_broker_client_security(config: KafkaConfig) -> ClientSecurity:
    """How this broker's connections to other brokers are secured; ``ValueError`` naming
    the setting that is missing."""
    listener = config.inter_broker_listener_name.upper()
    protocol = config.security_protocol(listener)
    setting = lambda key: config.listener_setting(listener, key)  # noqa: E731
    mechanism = config.sasl_mechanism_inter_broker_protocol.upper()
    username = password = ""
    if protocol.startswith("SASL_"):
        key = f"{mechanism.lower()}.sasl.jaas.config"
        options = jaas_options(setting(key))
        username, password = options.get("username", ""), options.get("password", "")
        if not username:
            raise ValueError(
                f'listener.name.{listener.lower()}.{key} needs username="..." and '
                f'password="...": the broker logs in with them to the other brokers'
            )
    security = ClientSecurity(
        protocol=protocol,
        mechanism=mechanism,
        username=username,
        password=password,
        ca_location=setting("ssl.truststore.location"),
        certificate_location=setting("ssl.keystore.location"),
        key_password=setting("ssl.key.password"),
        check_hostname=setting("ssl.endpoint.identification.algorithm").strip().lower()
        not in ("", "none"),
    )
    security.check(f" (listener {listener})")
    security.ssl_context()  # a missing or unreadable file fails at startup, not later
    return security


async def handle_sasl_without_sasl(ctx: Any, request: Any) -> Any:
    """SaslHandshake or SaslAuthenticate on a listener without SASL (or again after a
    connection authenticated): ILLEGAL_SASL_STATE, as Kafka answers."""
    cls = response_schema(ctx.api_key, ctx.api_version)
    if ctx.api_key == ApiKey.SASL_HANDSHAKE:
        return cls(error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    fields: dict[str, Any] = {}
    if ctx.api_version >= 1:
        fields["session_lifetime"] = i64Timedelta.parse(datetime.timedelta(0))
    return cls(
        error_code=ErrorCode.illegal_sasl_state,
        error_message="SASL is not in use on this listener or connection",
        auth_bytes=b"",
        **fields,
    )


class SaslConnection:
    """One connection's SASL exchange. ``principal`` is set once it succeeded.

    With ``connections.max.reauth.ms`` (KIP-368) the session lasts that long: the client
    re-authenticates on the same connection (SaslHandshake and SaslAuthenticate again, as
    the same principal) before ``expires_at`` or the connection is closed at its next
    request after it."""

    def __init__(self, security: ListenerSecurity, peer: str) -> None:
        self.security = security
        self.peer = peer
        self.principal: KafkaPrincipal | None = None
        self.expires_at: float | None = None  # time.monotonic() seconds
        self._server: sasl.SaslServer | None = None

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def handshake(self, version: int, request: Any) -> Any:
        """SaslHandshake: choose the mechanism (UNSUPPORTED_SASL_MECHANISM with the
        enabled list otherwise)."""
        mechanism = str(request.mechanism)
        cls = response_schema(ApiKey.SASL_HANDSHAKE, version)
        if self._server is not None and not self._server.complete:
            return cls(error_code=ErrorCode.illegal_sasl_state, mechanisms=self.security.mechanisms)
        if mechanism not in self.security.mechanisms:
            log.info("%s: SASL mechanism %r not enabled", self.peer, mechanism[:40])
            return cls(
                error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=self.security.mechanisms
            )
        self._server = self.security.sasl_server(mechanism)
        return cls(error_code=ErrorCode.none, mechanisms=self.security.mechanisms)

    async def authenticate(self, version: int, request: Any) -> tuple[Any, bool]:
        """SaslAuthenticate: ``(response, close the connection after it)``."""
        cls = response_schema(ApiKey.SASL_AUTHENTICATE, version)
        fields: dict[str, Any] = {}
        if version >= 1:
            fields["session_lifetime"] = i64Timedelta.parse(
                datetime.timedelta(milliseconds=self.security.reauth_ms)
            )
        server = self._server
        if server is None or server.complete:
            return (
                cls(
                    error_code=ErrorCode.illegal_sasl_state,
                    error_message="SaslAuthenticate before a SaslHandshake",
                    auth_bytes=b"",
                    **fields,
                ),
                True,
            )
        try:
            token = await asyncio.to_thread(server.evaluate, bytes(request.auth_bytes))
        except sasl.AuthenticationFailed as exc:
            log.warning("%s: %s", self.peer, exc)
            return (
                cls(
                    error_code=ErrorCode.sasl_authentication_failed,
                    error_message=str(exc),
                    auth_bytes=b"",
                    **fields,
                ),
                True,
            )
        if server.complete:
            assert server.user is not None
            principal = KafkaPrincipal(USER_TYPE, server.user)
            if self.principal is not None and principal != self.principal:
                log.warning(
                    "%s: re-authentication as %s on a connection of %s refused",
                    self.peer,
                    principal,
                    self.principal,
                )
                return (
                    cls(
                        error_code=ErrorCode.sasl_authentication_failed,
                        error_message="Cannot change principals during re-authentication",
                        auth_bytes=b"",
                        **fields,
                    ),
                    True,
                )
            self.principal = principal
            if self.security.reauth_ms > 0:
                self.expires_at = time.monotonic() + self.security.reauth_ms / 1000
            log.debug("%s: authenticated as %s (%s)", self.peer, self.principal, server.mechanism)
        return cls(error_code=ErrorCode.none, error_message=None, auth_bytes=token, **fields), False
