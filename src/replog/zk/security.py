"""How a broker authenticates to ZooKeeper and protects what it writes there, as Kafka does.

Kafka's brokers log in to ZooKeeper with SASL when the JVM has a JAAS file
(``-Djava.security.auth.login.config=<file>`` in ``KAFKA_OPTS``) holding a ``Client``
section, usually ZooKeeper's ``DigestLoginModule``::

    Client {
      org.apache.zookeeper.server.auth.DigestLoginModule required
      username="kafka"
      password="kafka-secret";
    };

replog reads the same file from the same place (``KAFKA_OPTS``) and logs in with SASL
DIGEST-MD5 (kazoo with ``pure-sasl``). With ``zookeeper.set.acl=true`` every znode the
broker creates gets Kafka's ``ZkData.defaultAcls``: all rights for the creator
(``sasl:kafka``) and read for everyone, except the sensitive paths (SCRAM credentials
under ``/config/users``), which only the creator may read. Without a login,
``zookeeper.set.acl=true`` is refused at startup, as in Kafka.

The ZooKeeper side (``replog.cluster.zookeeper``) gets a ``Server`` section with
``user_<name>="<password>"`` entries and ZooKeeper's SASL authentication provider.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from kazoo.security import ACL, CREATOR_ALL_ACL, READ_ACL_UNSAFE

from replog.security.client_security import jaas_options

JAAS_PROPERTY = "java.security.auth.login.config"
CLIENT_SECTION = "Client"  # ZooKeeper's zookeeper.sasl.clientconfig default
SENSITIVE_ROOTS = ("/config/users",)  # Kafka ZkData.sensitivePath: SCRAM credentials
_SECTION = re.compile(r"(\w+)\s*\{(.*?)\}\s*;", re.S)


class ZkSecurityError(ValueError):
    """A JAAS file or setting that cannot be used; the message is one line."""


@dataclass(frozen=True)
class ZkLogin:
    username: str
    password: str = field(repr=False)

    def sasl_options(self) -> dict[str, str]:
        """kazoo's ``sasl_options`` (ZooKeeper's DigestLoginModule is SASL DIGEST-MD5)."""
        return {"mechanism": "DIGEST-MD5", "username": self.username, "password": self.password}


def jaas_sections(text: str) -> dict[str, dict[str, str]]:
    """``{section: {option: value}}`` of a JAAS file (its quoted options only)."""
    return {name: jaas_options(body) for name, body in _SECTION.findall(text)}


def jaas_file_from(kafka_opts: str) -> str | None:
    """The file ``-Djava.security.auth.login.config=...`` names in ``KAFKA_OPTS``."""
    for word in shlex.split(kafka_opts or ""):
        if word.startswith(f"-D{JAAS_PROPERTY}="):
            return word.split("=", 1)[1]
    return None


def login_from_jaas(path: str) -> ZkLogin | None:
    """The ``Client`` section's login, None when the file has no such section."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ZkSecurityError(f"{JAAS_PROPERTY}: cannot read {path}: {exc}") from None
    client = jaas_sections(text).get(CLIENT_SECTION)
    if client is None:
        return None
    if not client.get("username"):
        raise ZkSecurityError(f"{path}: the {CLIENT_SECTION} section has no username")
    return ZkLogin(client["username"], client.get("password", ""))


def login_from_environment(environ: dict[str, str]) -> ZkLogin | None:
    """The ZooKeeper login a Kafka broker started with this environment would use."""
    path = jaas_file_from(environ.get("KAFKA_OPTS", ""))
    return None if path is None else login_from_jaas(path)


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_server_jaas(path: Path, users: dict[str, str]) -> Path:
    """ZooKeeper's ``Server`` section accepting ``users`` (DigestLoginModule)."""
    options = "\n".join(f"  user_{u}={_quoted(p)}" for u, p in users.items())
    path.write_text(
        f"Server {{\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n{options};\n}};\n"
    )
    path.chmod(0o600)
    return path


def write_client_jaas(path: Path, login: ZkLogin) -> Path:
    """The ``Client`` section a broker (or ``KAFKA_OPTS``) names."""
    path.write_text(
        f"{CLIENT_SECTION} {{\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
        f"  username={_quoted(login.username)}\n  password={_quoted(login.password)};\n}};\n"
    )
    path.chmod(0o600)
    return path


def default_acls(path: str, secure: bool) -> list[ACL] | None:
    """Kafka ``ZkData.defaultAcls``: None (ZooKeeper's open default) unless ``secure``."""
    if not secure:
        return None
    if any(path == root or path.startswith(root + "/") for root in SENSITIVE_ROOTS):
        return list(CREATOR_ALL_ACL)
    return list(CREATOR_ALL_ACL) + list(READ_ACL_UNSAFE)
