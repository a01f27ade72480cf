"""Kafka's ``Uuid`` (``org.apache.kafka.common.Uuid``): topic ids (KIP-516) and their text form.

On the wire a Uuid is its 16 bytes (kio reads the all-zero one as ``None``); in text
(the ``topic_id`` of ``/brokers/topics/<t>``, ``partition.metadata``, tools' output) it is
the 22-character url-safe base64 of those bytes without padding, which is what Kafka's
``Uuid.toString`` prints and ``Uuid.fromString`` reads.

``random_uuid`` never returns Kafka's reserved ids (``ZERO_UUID``, which means "none", and
``METADATA_TOPIC_ID``, KRaft's metadata topic) nor one whose text starts with ``-`` (a
command-line tool would take it for an option), as Kafka's ``Uuid.randomUuid`` does.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid
from collections.abc import Callable

__all__ = [
    "METADATA_TOPIC_ID",
    "RESERVED",
    "ZERO_UUID",
    "InvalidUuid",
    "random_uuid",
    "uuid_from_string",
    "uuid_to_string",
]

ZERO_UUID = uuid.UUID(int=0)
METADATA_TOPIC_ID = uuid.UUID(int=1)  # Kafka's ONE_UUID
RESERVED = frozenset({ZERO_UUID, METADATA_TOPIC_ID})

_URL_SAFE_BASE64 = re.compile(r"[A-Za-z0-9_-]*={0,2}")


class InvalidUuid(ValueError):
    """Text that is not a base64 Kafka Uuid."""


def uuid_to_string(value: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: url-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def uuid_from_string(text: str) -> uuid.UUID:
    """Kafka's ``Uuid.fromString``; raises :class:`InvalidUuid` for anything else."""
    if not isinstance(text, str) or len(text) > 24 or not _URL_SAFE_BASE64.fullmatch(text):
        raise InvalidUuid(f"not a base64 Uuid: {text!r}")
    unpadded = text.rstrip("=")
    padded = unpadded + "=" * (-len(unpadded) % 4)
    try:
        raw = base64.b64decode(padded.encode("ascii"), altchars=b"-_", validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
        raise InvalidUuid(f"not a base64 Uuid: {text!r}") from exc
    if len(raw) != 16:
        raise InvalidUuid(f"{text!r} decodes to {len(raw)} bytes, not 16")
    return uuid.UUID(bytes=raw)


def random_uuid(source: Callable[[], uuid.UUID] = uuid.uuid4) -> uuid.UUID:
    """Kafka's ``Uuid.randomUuid``: a version 4 UUID that is not reserved and whose text
    does not start with ``-``. ``source`` draws candidates (tests pass a seeded one)."""
    while True:
        candidate = source()
        if candidate not in RESERVED and not uuid_to_string(candidate).startswith("-"):
            return candidate
