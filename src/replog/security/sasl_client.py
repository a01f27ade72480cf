"""SASL mechanisms on the client's side: PLAIN and SCRAM-SHA-256/512, as Kafka's
``PlainSaslClient`` and ``ScramSaslClient`` run them (sans-IO; the broker's side is
``replog.security.sasl``).

A mechanism gives its first token (``first``), then takes each server token and answers
the next client token (``evaluate``), or None when the exchange is over. The SCRAM client
checks the server's final signature, so a server that does not know the password cannot
pass for the broker, and refuses fewer iterations than Kafka's minimum. A failure raises
``AuthenticationFailed`` with a one-line reason that never holds the password.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable

from replog.security import sasl
from replog.security.sasl import AuthenticationFailed

# The GS2 header of a client that neither asks for channel binding nor names an authzid
# (sent base64 again as the ``c=`` attribute of the client-final message).
GS2_HEADER = "n,,"


class SaslClient:
    mechanism: str
    complete: bool = False

    def first(self) -> bytes:
        raise NotImplementedError

    def evaluate(self, token: bytes) -> bytes | None:
        raise NotImplementedError


class PlainClient(SaslClient):
    """RFC 4616: one token, ``NUL user NUL password``; the server answers nothing."""

    mechanism = sasl.PLAIN

    def __init__(self, username: str, password: str) -> None:
        self.username = username
        self._password = password

    def first(self) -> bytes:
        return f"\0{self.username}\0{self._password}".encode()

    def evaluate(self, token: bytes) -> bytes | None:
        self.complete = True
        return None


def _sasl_name(name: str) -> str:
    """RFC 5802 saslname: ``=`` is ``=3D`` and ``,`` is ``=2C``."""
    return name.replace("=", "=3D").replace(",", "=2C")


def _attributes(message: str) -> dict[str, str]:
    out = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise AuthenticationFailed(f"malformed SCRAM message from the server: {part[:20]!r}")
        out.setdefault(part[0], part[2:])
    return out


class ScramClient(SaslClient):
    """RFC 5802 client: client-first -> server-first -> client-final -> server-final."""

    def __init__(
        self,
        mechanism: str,
        username: str,
        password: str,
        nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24),
    ) -> None:
        if mechanism not in sasl.SCRAM_MECHANISMS:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self.algorithm = sasl.SCRAM_MECHANISMS[mechanism]
        self.username = username
        self._password = password
        self._nonce = nonce()
        self._client_first_bare = ""
        self._server_signature = b""
        self._step = 0

    def first(self) -> bytes:
        self._client_first_bare = f"n={_sasl_name(self.username)},r={self._nonce}"
        self._step = 1
        return (GS2_HEADER + self._client_first_bare).encode()

    def evaluate(self, token: bytes) -> bytes | None:
        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("the server's SCRAM message is not UTF-8") from None
        if self._step == 1:
            return self._final(message)
        if self._step == 2:
            return self._verify(message)
        raise AuthenticationFailed("SCRAM exchange already over")

    def _final(self, server_first: str) -> bytes:
        attrs = _attributes(server_first)
        if "e" in attrs:
            raise AuthenticationFailed(f"SCRAM error from the server: {attrs['e']}")
        try:
            nonce, salt, iterations = attrs["r"], base64.b64decode(attrs["s"]), int(attrs["i"])
        except (KeyError, ValueError):
            raise AuthenticationFailed("the server's first SCRAM message lacks r, s or i") from None
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise AuthenticationFailed("the server's SCRAM nonce does not extend the client's")
        if iterations < sasl.MIN_ITERATIONS:  # Kafka ScramSaslClient: too cheap to guess
            raise AuthenticationFailed(
                f"requested iterations {iterations} is less than the minimum "
                f"{sasl.MIN_ITERATIONS} for {self.mechanism}"
            )
        salted = hashlib.pbkdf2_hmac(self.algorithm, self._password.encode(), salt, iterations)
        without_proof = f"c={base64.b64encode(GS2_HEADER.encode()).decode()},r={nonce}"
        auth_message = f"{self._client_first_bare},{server_first},{without_proof}".encode()
        client_key = hmac.new(salted, b"Client Key", self.algorithm).digest()
        stored_key = hashlib.new(self.algorithm, client_key).digest()
        signature = hmac.new(stored_key, auth_message, self.algorithm).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.new(salted, b"Server Key", self.algorithm).digest()
        self._server_signature = hmac.new(server_key, auth_message, self.algorithm).digest()
        self._step = 2
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _verify(self, server_final: str) -> None:
        attrs = _attributes(server_final)
        if "e" in attrs:
            raise AuthenticationFailed(f"SCRAM error from the server: {attrs['e']}")
        try:
            signature = base64.b64decode(attrs["v"])
        except (KeyError, ValueError):
            raise AuthenticationFailed("the server's final SCRAM message lacks v") from None
        if not hmac.compare_digest(signature, self._server_signature):
            raise AuthenticationFailed("the server's SCRAM signature is wrong: not the broker")
        self._step = 3
        self.complete = True
        return None


def client_for(mechanism: str, username: str, password: str) -> SaslClient:
    """The client side of ``mechanism`` (ValueError for one replog does not speak)."""
    mechanism = mechanism.upper()
    if mechanism == sasl.PLAIN:
        return PlainClient(username, password)
    if mechanism in sasl.SCRAM_MECHANISMS:
        return ScramClient(mechanism, username, password)
    raise ValueError(f"SASL mechanism {mechanism} is not supported; use one of {sasl.MECHANISMS}")
