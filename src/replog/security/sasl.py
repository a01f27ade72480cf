"""SASL mechanisms on the broker's side: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802,
RFC 7677), as Kafka's ``PlainSaslServer`` and ``ScramSaslServer`` run them (sans-IO).

A mechanism takes the client's tokens one at a time (``evaluate``) and answers the next
server token; when ``complete`` it names the authenticated user. A wrong password, an
unknown user and a malformed token all raise ``AuthenticationFailed`` with one message
that tells the client nothing about which it was (Kafka: "Authentication failed during
authentication due to invalid credentials with SASL mechanism ..."). Passwords are never
put in a message.

SCRAM credentials are Kafka's ``ScramCredential`` (salt, stored key, server key,
iterations), kept in ZooKeeper ``/config/users/<user>`` as
``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>`` under the mechanism name
(``format_credential`` / ``parse_credential``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
SCRAM_MECHANISMS = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)
# Kafka's ScramMechanism minIterations / maxIterations; the default of kafka-configs
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
# AlterUserScramCredentials / DescribeUserScramCredentials mechanism codes
MECHANISM_CODES = {SCRAM_SHA_256: 1, SCRAM_SHA_512: 2}
DEFAULT_ITERATIONS = 4096


class AuthenticationFailed(Exception):
    """The client did not prove who it is (SASL_AUTHENTICATION_FAILED)."""


def failure(mechanism: str) -> AuthenticationFailed:
    return AuthenticationFailed(
        f"Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _hmac(algorithm: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, algorithm).digest()


def scram_credential(
    mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    """What the broker stores for ``password`` (Kafka ``ScramFormatter.generateCredential``)."""
    algorithm = SCRAM_MECHANISMS[mechanism]
    if iterations < MIN_ITERATIONS:
        raise ValueError(f"{mechanism} needs at least {MIN_ITERATIONS} iterations")
    salt = salt if salt is not None else secrets.token_bytes(32)
    salted = hashlib.pbkdf2_hmac(algorithm, password.encode(), salt, iterations)
    return credential_from_salted_password(mechanism, salted, salt, iterations)


def credential_from_salted_password(
    mechanism: str, salted_password: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    """The stored credential of a salted password (as AlterUserScramCredentials sends it:
    the client salts and hashes, the password never travels)."""
    algorithm = SCRAM_MECHANISMS[mechanism]
    client_key = _hmac(algorithm, salted_password, b"Client Key")
    return ScramCredential(
        salt,
        hashlib.new(algorithm, client_key).digest(),
        _hmac(algorithm, salted_password, b"Server Key"),
        iterations,
    )


def format_credential(c: ScramCredential) -> str:
    b64 = base64.b64encode
    return (
        f"salt={b64(c.salt).decode()},stored_key={b64(c.stored_key).decode()},"
        f"server_key={b64(c.server_key).decode()},iterations={c.iterations}"
    )


def parse_credential(text: str) -> ScramCredential:
    fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
    try:
        return ScramCredential(
            base64.b64decode(fields["salt"]),
            base64.b64decode(fields["stored_key"]),
            base64.b64decode(fields["server_key"]),
            int(fields["iterations"]),
        )
    except (KeyError, ValueError) as exc:
        raise ValueError(f"not a SCRAM credential: {exc}") from None


class SaslServer:
    """One authentication exchange. ``evaluate`` returns the next server token."""

    mechanism: str
    complete: bool = False
    user: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        raise NotImplementedError


class PlainServer(SaslServer):
    """``[authzid] NUL authcid NUL password``, checked against ``users`` (name -> password,
    Kafka's ``user_<name>="<password>"`` JAAS options)."""

    mechanism = PLAIN

    def __init__(self, users: Mapping[str, str]) -> None:
        self.users = users

    def evaluate(self, token: bytes) -> bytes:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise failure(PLAIN)
        authzid, authcid, password = (p.decode("utf-8", "replace") for p in parts)
        expected = self.users.get(authcid)
        if not authcid or expected is None or not hmac.compare_digest(expected, password):
            raise failure(PLAIN)
        if authzid and authzid != authcid:  # Kafka: "Authentication failed: Client requested
            raise failure(PLAIN)  # an authorization id that is different from username"
        self.complete, self.user = True, authcid
        return b""


def _attributes(message: str) -> dict[str, str]:
    out = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ValueError(f"bad SCRAM attribute {part[:20]!r}")
        out.setdefault(part[0], part[2:])
    return out


def _sasl_name(name: str) -> str:
    """RFC 5802 saslname: ``=2C`` is ``,`` and ``=3D`` is ``=``."""
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer(SaslServer):
    """RFC 5802 server: client-first -> server-first -> client-final -> server-final.

    ``lookup(user)`` returns the user's credential for this mechanism, or None; an
    unknown user is carried on with a made-up credential so that the answer is the same
    failure, after the same exchange, as a wrong password."""

    def __init__(
        self,
        mechanism: str,
        lookup: Callable[[str], ScramCredential | None],
        nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24),
    ) -> None:
        self.mechanism = mechanism
        self.algorithm = SCRAM_MECHANISMS[mechanism]
        self.lookup = lookup
        self._nonce = nonce
        self._step = 0
        self._client_first_bare = ""
        self._server_first = ""
        self._gs2_header = ""
        self._credential: ScramCredential | None = None
        self._known = False
        self._name = ""

    def evaluate(self, token: bytes) -> bytes:
        try:
            message = token.decode("utf-8")
            if self._step == 0:
                return self._first(message)
            if self._step == 1:
                return self._final(message)
        except (ValueError, KeyError, UnicodeDecodeError):
            raise failure(self.mechanism) from None
        raise failure(self.mechanism)

    def _first(self, message: str) -> bytes:
        gs2, sep, bare = message.partition(",")
        authzid, sep2, bare = bare.partition(",")
        if not sep or not sep2 or gs2 not in ("n", "y"):  # no channel binding ("p=")
            raise ValueError("bad gs2 header")
        attrs = _attributes(bare)
        name, client_nonce = _sasl_name(attrs["n"]), attrs["r"]
        if not name or not client_nonce:
            raise ValueError("no user name or nonce")
        if authzid and _sasl_name(authzid.removeprefix("a=")) != name:
            raise ValueError("authorization id differs from the user")
        credential = self.lookup(name)
        self._known = credential is not None
        self._credential = credential or scram_credential(
            self.mechanism, secrets.token_hex(16), salt=hashlib.sha256(name.encode()).digest()
        )
        self._name = name
        self._gs2_header = f"{gs2},{authzid},"
        self._client_first_bare = bare
        nonce = client_nonce + self._nonce()
        self._server_first = (
            f"r={nonce},s={base64.b64encode(self._credential.salt).decode()},"
            f"i={self._credential.iterations}"
        )
        self._step = 1
        return self._server_first.encode()

    def _final(self, message: str) -> bytes:
        assert self._credential is not None
        without_proof, sep, proof_part = message.rpartition(",p=")
        if not sep:
            raise ValueError("no proof")
        attrs = _attributes(without_proof)
        server_nonce = _attributes(self._server_first)["r"]
        # Kafka's ScramSaslServer checks that the nonce ends with the server's (librdkafka
        # 2.0 sends the client nonce before the whole server nonce, its own part twice)
        if not attrs["r"].endswith(server_nonce):
            raise ValueError("nonce mismatch")
        if base64.b64decode(attrs["c"]) != self._gs2_header.encode():
            raise ValueError("channel binding mismatch")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        proof = base64.b64decode(proof_part)
        signature = _hmac(self.algorithm, self._credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ValueError("bad proof length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        stored = hashlib.new(self.algorithm, client_key).digest()
        if not self._known or not hmac.compare_digest(stored, self._credential.stored_key):
            raise failure(self.mechanism)
        server_signature = _hmac(self.algorithm, self._credential.server_key, auth_message)
        self._step = 2
        self.complete, self.user = True, self._name
        return f"v={base64.b64encode(server_signature).decode()}".encode()


def parse_plain_jaas_users(jaas: str) -> dict[str, str]:
    """``user_alice="secret"`` options of a ``PlainLoginModule`` JAAS entry -> users."""
    users = {}
    for chunk in jaas.replace(";", " ").split():
        key, sep, value = chunk.partition("=")
        if sep and key.startswith("user_") and len(value) >= 2 and value[0] == value[-1] == '"':
            users[key[len("user_") :]] = value[1:-1]
    return users
