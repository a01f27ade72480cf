"""Kafka's primitive encodings, by hand, for the codecs of the hot path.

``fetch_codec`` and ``produce_codec`` write and read their frames with
``struct`` and these helpers rather than kio's generic entity machinery. The
flexible versions (KIP-482) add unsigned varints, compact strings, arrays and
bytes (length + 1, 0 meaning null) and a tagged-field section at the end of
every structure: a varint count, then per field its tag, its size and its
bytes. A reader must step over the tags it does not know, so a newer client
can add fields without breaking an older broker.

Readers take ``(data, pos)`` and return ``(value, new position)``; they raise
:class:`CodecError` for anything that does not parse: a varint longer than 5
bytes, a negative or overrunning length, a null where the schema forbids one,
a tagged field that overruns its frame or whose content disagrees with its
declared size. Callers turn it into dropping the one connection it came from.

The KIP-951 structures (``LeaderIdAndEpoch``, ``NodeEndpoint``), which both
Produce and Fetch responses carry in tagged fields, live here too.

Concurrency: pure functions; safe anywhere.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

MAX_VARINT_BYTES = 5

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
_LEADER = struct.Struct(">ii")

_SMALL_UVARINTS = [bytes((i,)) for i in range(128)]
EMPTY_TAGS = b"\x00"


class CodecError(ValueError):
    """A frame that does not parse (truncated, negative lengths, bad varints, bad tags)."""


@dataclass(frozen=True, slots=True)
class LeaderIdAndEpoch:
    """KIP-951: where a partition's leader is now, in a NOT_LEADER_OR_FOLLOWER answer."""

    leader_id: int = -1
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class NodeEndpoint:
    """KIP-951: the address of a leader named in a response's ``current_leader``."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


# -- writers ---------------------------------------------------------------------------


def uvarint(value: int) -> bytes:
    """Unsigned varint (7 bits a byte, least significant first)."""
    if value < 0x80:
        if value < 0:
            raise ValueError(f"unsigned varint of negative {value}")
        return _SMALL_UVARINTS[value]
    # Record sets up to 2 MB take 2 or 3 bytes: spelled out, they skip the loop.
    if value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    if value < 0x200000:
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def string(value: str) -> bytes:
    data = value.encode()
    return I16.pack(len(data)) + data


def nullable_string(value: str | None) -> bytes:
    return b"\xff\xff" if value is None else string(value)


def compact_string(value: str) -> bytes:
    data = value.encode()
    return uvarint(len(data) + 1) + data


def compact_nullable_string(value: str | None) -> bytes:
    return b"\x00" if value is None else compact_string(value)


_int32_arrays: dict[tuple[int, ...], bytes] = {}


def compact_int32_array(values: tuple[int, ...]) -> bytes:
    """A compact array of int32 (replica ids), cached by value: the same few tuples
    repeat across partitions and requests."""
    if type(values) is not tuple:
        values = tuple(values)
    encoded = _int32_arrays.get(values)
    if encoded is None:
        encoded = uvarint(len(values) + 1) + struct.pack(f">{len(values)}i", *values)
        if len(_int32_arrays) < 65536:
            _int32_arrays[values] = encoded
    return encoded


def tagged_fields(fields: Sequence[tuple[int, bytes]]) -> bytes:
    """A tagged-field section from ``(tag, encoded value)`` pairs in ascending tag order."""
    if not fields:
        return EMPTY_TAGS
    out = [uvarint(len(fields))]
    for tag, value in fields:
        out.append(uvarint(tag))
        out.append(uvarint(len(value)))
        out.append(value)
    return b"".join(out)


def leader_id_and_epoch(leader: LeaderIdAndEpoch) -> bytes:
    """A flexible ``LeaderIdAndEpoch`` structure (for a tagged field's value)."""
    return _LEADER.pack(leader.leader_id, leader.leader_epoch) + EMPTY_TAGS


def node_endpoints(endpoints: Sequence[NodeEndpoint]) -> bytes:
    """A compact array of flexible ``NodeEndpoint`` structures (for a tagged field's value)."""
    out = [uvarint(len(endpoints) + 1)]
    for e in endpoints:
        out.append(I32.pack(e.node_id))
        out.append(compact_string(e.host))
        out.append(I32.pack(e.port))
        out.append(compact_nullable_string(e.rack))
        out.append(EMPTY_TAGS)
    return b"".join(out)


# -- readers ---------------------------------------------------------------------------


def read_uvarint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes."""
    value = 0
    for i in range(MAX_VARINT_BYTES):
        if pos >= len(data):
            raise CodecError(f"truncated varint at byte {pos}")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << (7 * i)
        if b < 0x80:
            return value, pos
    raise CodecError(f"varint longer than {MAX_VARINT_BYTES} bytes at byte {pos - 5}")


def read_compact_length(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """A compact length: -1 for null, else a length that fits in what is left."""
    start = pos
    n, pos = read_uvarint(data, pos)
    n -= 1
    if n > len(data) - pos:
        raise CodecError(f"compact length {n} at byte {start} overruns the frame")
    return n, pos


def read_compact_array_count(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """A compact array's item count; a null array is an error (none of ours is nullable)."""
    start = pos
    n, pos = read_compact_length(data, pos)
    if n < 0:
        raise CodecError(f"null array at byte {start} where the schema forbids it")
    return n, pos


def read_array_count(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """A legacy (i32) array's item count; null or negative is an error."""
    if pos + 4 > len(data):
        raise CodecError(f"truncated array length at byte {pos}")
    (n,) = I32.unpack_from(data, pos)
    if n < 0 or n > len(data) - pos - 4:
        raise CodecError(f"bad array length {n} at byte {pos}")
    return n, pos + 4


def _text(data: bytes | memoryview, start: int, end: int) -> str:
    try:
        return str(data[start:end], "utf-8")
    except UnicodeDecodeError as exc:
        raise CodecError(f"string at byte {start} is not UTF-8") from exc


def read_string(data: bytes | memoryview, pos: int) -> tuple[str, int]:
    """A legacy (i16 length) string; null is an error."""
    value, pos = read_nullable_string(data, pos)
    if value is None:
        raise CodecError(f"null string at byte {pos - 2} where the schema forbids it")
    return value, pos


def read_nullable_string(data: bytes | memoryview, pos: int) -> tuple[str | None, int]:
    if pos + 2 > len(data):
        raise CodecError(f"truncated string length at byte {pos}")
    (n,) = I16.unpack_from(data, pos)
    pos += 2
    if n == -1:
        return None, pos
    if n < 0 or pos + n > len(data):
        raise CodecError(f"bad string length {n} at byte {pos - 2}")
    return _text(data, pos, pos + n), pos + n


def read_compact_string(data: bytes | memoryview, pos: int) -> tuple[str, int]:
    start = pos
    value, pos = read_compact_nullable_string(data, pos)
    if value is None:
        raise CodecError(f"null compact string at byte {start} where the schema forbids it")
    return value, pos


def read_compact_nullable_string(data: bytes | memoryview, pos: int) -> tuple[str | None, int]:
    n, pos = read_compact_length(data, pos)
    if n < 0:
        return None, pos
    return _text(data, pos, pos + n), pos + n


def read_compact_nullable_bytes(data: bytes | memoryview, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_compact_length(data, pos)
    if n < 0:
        return None, pos
    return bytes(data[pos : pos + n]), pos + n


def read_nullable_bytes(data: bytes | memoryview, pos: int) -> tuple[bytes | None, int]:
    """Legacy (i32 length) nullable bytes, as records are in non-flexible versions."""
    if pos + 4 > len(data):
        raise CodecError(f"truncated bytes length at byte {pos}")
    (n,) = I32.unpack_from(data, pos)
    pos += 4
    if n == -1:
        return None, pos
    if n < 0 or pos + n > len(data):
        raise CodecError(f"bad bytes length {n} at byte {pos - 4}")
    return bytes(data[pos : pos + n]), pos + n


def read_uuid(data: bytes | memoryview, pos: int) -> tuple[uuid.UUID, int]:
    if pos + 16 > len(data):
        raise CodecError(f"truncated uuid at byte {pos}")
    return uuid.UUID(bytes=bytes(data[pos : pos + 16])), pos + 16


def read_tagged_fields(
    data: bytes | memoryview, pos: int
) -> tuple[list[tuple[int, int, int]], int]:
    """A tagged-field section: ``[(tag, start, end)]`` of each field's bytes, and the end.

    Every field is checked to lie inside ``data``; the caller reads the tags it
    knows from their ``[start, end)`` (see :func:`check_field_end`) and ignores the
    rest, as Kafka's rule for unknown tags says.
    """
    count, pos = read_uvarint(data, pos)
    if count > len(data) - pos:
        raise CodecError(f"{count} tagged fields at byte {pos} overrun the frame")
    fields = []
    for _ in range(count):
        tag, pos = read_uvarint(data, pos)
        size, pos = read_uvarint(data, pos)
        end = pos + size
        if end > len(data):
            raise CodecError(f"tagged field {tag} of {size} bytes at byte {pos} overruns the frame")
        fields.append((tag, pos, end))
        pos = end
    return fields, pos


def skip_tagged_fields(data: bytes | memoryview, pos: int) -> int:
    """Step over a tagged-field section whose tags are all unknown here."""
    if pos < len(data) and data[pos] == 0:
        return pos + 1
    return read_tagged_fields(data, pos)[1]


def check_field_end(tag: int, used_to: int, end: int) -> None:
    """A known tagged field's content must fill exactly its declared size."""
    if used_to != end:
        raise CodecError(f"tagged field {tag} declares {end} but its content ends at {used_to}")


def read_leader_id_and_epoch(data: bytes | memoryview, pos: int) -> tuple[LeaderIdAndEpoch, int]:
    if pos + 8 > len(data):
        raise CodecError(f"truncated LeaderIdAndEpoch at byte {pos}")
    leader_id, epoch = _LEADER.unpack_from(data, pos)
    return LeaderIdAndEpoch(leader_id, epoch), skip_tagged_fields(data, pos + 8)


def read_node_endpoints(data: bytes | memoryview, pos: int) -> tuple[list[NodeEndpoint], int]:
    count, pos = read_compact_array_count(data, pos)
    out = []
    for _ in range(count):
        if pos + 4 > len(data):
            raise CodecError(f"truncated NodeEndpoint at byte {pos}")
        (node_id,) = I32.unpack_from(data, pos)
        host, pos = read_compact_string(data, pos + 4)
        if pos + 4 > len(data):
            raise CodecError(f"truncated NodeEndpoint at byte {pos}")
        (port,) = I32.unpack_from(data, pos)
        rack, pos = read_compact_nullable_string(data, pos + 4)
        pos = skip_tagged_fields(data, pos)
        out.append(NodeEndpoint(node_id, host, port, rack))
    return out, pos
