"""How a client connection is secured: Kafka's client ``security.protocol``, ``sasl.*`` and
``ssl.*`` settings, read by the tools (``--command-config``) and by a broker for its own
connections to other brokers (the inter-broker listener's settings).

``ClientSecurity`` is plain data; ``ssl_context`` builds the TLS context (PEM files, TLS
1.2 or later, the broker's host name checked unless
``ssl.endpoint.identification.algorithm`` is empty, as in Kafka). The SASL exchange
itself runs in ``replog.protocol.client`` with the mechanisms of
``replog.security.sasl_client``. Errors are ``ValueError`` with a one-line reason that
never holds a password.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass, field

from replog.security import sasl

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
_UNESCAPE = re.compile(r"\\(.)")


def jaas_options(jaas: str) -> dict[str, str]:
    """The ``key="value"`` options of a JAAS entry (``username``, ``password``,
    ``user_<name>``...)."""
    return {k: _UNESCAPE.sub(r"\1", v) for k, v in _JAAS_OPTION.findall(jaas)}


@dataclass(frozen=True)
class ClientSecurity:
    """The security of one client's connections."""

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
        """From Kafka client properties (the Java client's and librdkafka's spellings)."""
        where = f" in {source}" if source else ""
        protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
        if protocol not in PROTOCOLS:
            raise ValueError(
                f"security.protocol{where} must be one of {', '.join(PROTOCOLS)}, not {protocol}"
            )
        mechanism = (props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "").strip()
        username = props.get("sasl.username", "")
        password = props.get("sasl.password", "")
        jaas = props.get("sasl.jaas.config", "")
        if jaas and not username:
            options = jaas_options(jaas)
            username, password = options.get("username", ""), options.get("password", "")
        keystore = props.get("ssl.keystore.location", "")
        identification = props.get("ssl.endpoint.identification.algorithm", "https")
        security = cls(
            protocol=protocol,
            mechanism=mechanism.upper(),
            username=username,
            password=password,
            ca_location=props.get("ssl.ca.location") or props.get("ssl.truststore.location", ""),
            certificate_location=props.get("ssl.certificate.location") or keystore,
            key_location=props.get("ssl.key.location") or keystore,
            key_password=props.get("ssl.key.password", ""),
            check_hostname=identification.strip().lower() not in ("", "none"),
        )
        security.check(where)
        return security

    def check(self, where: str = "") -> None:
        """ValueError unless a SASL protocol has a served mechanism and a user name."""
        if not self.uses_sasl:
            return
        if self.mechanism not in sasl.MECHANISMS:  # Kafka's default, GSSAPI, is not served
            raise ValueError(
                f"sasl.mechanism{where} must be one of {', '.join(sasl.MECHANISMS)}, "
                f"not {self.mechanism or '(unset)'}"
            )
        if not self.username:
            raise ValueError(
                f"{self.protocol} needs sasl.username and sasl.password (or sasl.jaas.config)"
                f"{where}"
            )

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context of SSL and SASL_SSL (None otherwise)."""
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
            raise ValueError(f"cannot load the TLS files (PEM): {exc}") from None
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.check_hostname = self.check_hostname
        return context


PLAINTEXT = ClientSecurity()
