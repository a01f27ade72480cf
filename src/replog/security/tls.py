"""TLS settings of a listener (Kafka's ``ssl.*`` keys, PEM files only) and the principal
of a client certificate.

``server_context`` builds the ``ssl.SSLContext`` a listener serves with: its certificate
chain and key from ``ssl.keystore.location`` (one PEM file holding both, or
``ssl.keystore.certificate.chain``-style: the key in the same file), the CAs that sign
client certificates from ``ssl.truststore.location``, ``ssl.client.auth``
(``none``/``requested``/``required``) and TLS 1.2 as the lowest version.
"""

from __future__ import annotations

import ssl
from typing import Any

from replog.security.principal import ANONYMOUS, USER_TYPE, KafkaPrincipal

CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def server_context(
    keystore: str,
    *,
    key_password: str = "",
    truststore: str = "",
    client_auth: str = "none",
    enabled_protocols: str = "TLSv1.2,TLSv1.3",
) -> ssl.SSLContext:
    """The listener's TLS context; ``ValueError`` with a one-line reason when a file or
    setting is unusable."""
    if not keystore:
        raise ValueError("an SSL listener needs ssl.keystore.location (a PEM file)")
    versions = [VERSIONS[v.strip()] for v in enabled_protocols.split(",") if v.strip() in VERSIONS]
    if not versions:
        raise ValueError("ssl.enabled.protocols names neither TLSv1.2 nor TLSv1.3")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = min(versions)
    context.maximum_version = max(versions)
    try:
        context.load_cert_chain(keystore, password=key_password or None)
        if truststore:
            context.load_verify_locations(truststore)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot load the listener's certificates: {exc}") from None
    context.verify_mode = CLIENT_AUTH[client_auth]
    if context.verify_mode != ssl.CERT_NONE and not truststore:
        raise ValueError("ssl.client.auth needs ssl.truststore.location to check clients")
    return context


def certificate_principal(peer_cert: dict[str, Any] | None) -> KafkaPrincipal:
    """Kafka's default principal of a TLS client: ``User:`` and the certificate subject's
    distinguished name in RFC 2253 order (``CN=alice,OU=dev,O=example``); anonymous
    without a certificate."""
    if not peer_cert or not peer_cert.get("subject"):
        return ANONYMOUS
    parts = []
    names = {
        "commonName": "CN",
        "organizationalUnitName": "OU",
        "organizationName": "O",
        "localityName": "L",
        "stateOrProvinceName": "ST",
        "countryName": "C",
    }
    for rdn in reversed(peer_cert["subject"]):
        for key, value in rdn:
            parts.append(f"{names.get(key, key)}={value}")
    return KafkaPrincipal(USER_TYPE, ",".join(parts))
