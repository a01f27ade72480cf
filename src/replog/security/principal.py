"""Kafka's ``KafkaPrincipal``: who sent a request, as ACLs name it (``User:alice``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``"User:alice"`` -> ``KafkaPrincipal("User", "alice")`` (ValueError without ``:``)."""
        principal_type, sep, name = text.partition(":")
        if not sep or not principal_type or not name:
            raise ValueError(f"a principal is TYPE:NAME, got {text!r}")
        return cls(principal_type, name)


USER_TYPE = "User"
# Kafka's principal for connections that did not authenticate (PLAINTEXT, SSL without a
# client certificate).
ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
