"""Reading a broker's settings: ``server.properties`` files and ``--override`` pairs.

An unreadable file or a malformed line raises ``ConfigError`` with a one-line
message, so ``replog broker start`` can exit non-zero with that line.
"""

from __future__ import annotations

from pathlib import Path


class ConfigError(ValueError):
    """A configuration problem, described in one line."""


def read_properties(path: Path) -> dict[str, str]:
    """Parse a Java-style ``.properties`` file (``key=value``, ``#`` comments)."""
    props: dict[str, str] = {}
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            raise ConfigError(f"{path}:{number}: expected key=value, got {line!r}")
        props[line[:sep].strip()] = line[sep + 1 :].strip()
    return props


def parse_overrides(overrides: list[str]) -> dict[str, str]:
    out = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form key=value")
        key, value = item.split("=", 1)
        out[key.strip()] = value.strip()
    return out
