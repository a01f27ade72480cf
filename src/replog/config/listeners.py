"""Listeners (``listeners``, ``advertised.listeners``): ``NAME://host:port`` lists."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


_LISTENER = re.compile(r"^(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[^\]]*\]|[^:/]*):(?P<port>\d+)$")
LISTENER_PREFIX = "listener.name."
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def parse_listeners(value: str) -> list[Listener]:
    listeners = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        # (not urlsplit: listener names such as SASL_SSL are not URL schemes)
        match = _LISTENER.match(item)
        if match is None or int(match["port"]) > 65535:
            raise ValueError(f"listener {item!r} is not of the form NAME://host:port")
        listeners.append(
            Listener(match["name"].upper(), match["host"].strip("[]"), int(match["port"]))
        )
    if not listeners:
        raise ValueError("no listener given")
    return listeners
