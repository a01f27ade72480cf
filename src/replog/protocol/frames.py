"""Kafka request and response frames: size prefix, headers, bodies.

Pure functions over bytes; the network layer owns the sockets.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import Any, NamedTuple

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

from replog.protocol import apis, controller_codec, metadata_codec, schema_reader
from replog.protocol.controller_codec import REQUEST_ENCODERS

# Response bodies a hand codec writes (all flexible: response header v1), by kio class.
RESPONSE_ENCODERS = {**controller_codec.RESPONSE_ENCODERS, **metadata_codec.RESPONSE_ENCODERS}

_PREFIX = struct.Struct(">hhi")
SIZE = struct.Struct(">i")
_I16 = struct.Struct(">h")
_RESPONSE_V0_PREFIX = struct.Struct(">ii")  # size, correlation id
_RESPONSE_V1_HEAD = struct.Struct(">iiB")  # size, correlation id, no tagged fields
_REQUEST_V1_PREFIX = struct.Struct(">ihhih")  # size, api key, version, correlation id, client len


class InvalidFrame(ValueError):
    """A request that cannot be decoded; the connection is closed."""


class UnsupportedVersion(InvalidFrame):
    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(f"unsupported version {api_version} of api key {api_key}")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class Request(NamedTuple):
    """A decoded request (a tuple: built once per request, so built cheaply)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    size: int


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """``(api_key, api_version, correlation_id)`` from the first 8 bytes of a frame."""
    if len(frame) < _PREFIX.size:
        raise InvalidFrame(f"request of {len(frame)} bytes is shorter than a header")
    return _PREFIX.unpack_from(frame, 0)


# (api key, version) -> (header class, schema, header reader, body reader), filled as
# requests arrive: a request then costs two dictionary lookups before kio's readers.
_READERS: dict[tuple[int, int], tuple[type, type, Any, Any]] = {}


def _readers(api_key: int, api_version: int) -> tuple[type, type, Any, Any]:
    schema = apis.request_schema(api_key, api_version)
    header_cls = RequestHeaderV2 if schema.__flexible__ else RequestHeaderV1
    readers = _READERS[api_key, api_version] = (
        header_cls,
        schema,
        entity_reader(header_cls),
        entity_reader(schema),
    )
    return readers


def decode_request(frame: bytes) -> Request:
    """Decode a whole request frame (without its size prefix)."""
    if len(frame) < 8:  # peek_header's check, inlined: once a request
        raise InvalidFrame(f"request of {len(frame)} bytes is shorter than a header")
    api_key, api_version, correlation_id = _PREFIX.unpack_from(frame, 0)
    readers = _READERS.get((api_key, api_version))
    if readers is None:
        if not apis.is_supported(api_key, api_version):
            raise UnsupportedVersion(api_key, api_version, correlation_id)
        readers = _readers(api_key, api_version)
    header_cls, schema, read_header, read_body = readers
    try:
        # The header's one field left, client_id (a nullable int16-length string in
        # header v1 and v2), read here; then header v2's tagged fields, which kio reads
        # when there are any. (kio's header reader built an object for it.)
        (length,) = _I16.unpack_from(frame, 8)
        if length < 0:
            client_id, offset = None, 10
        else:
            offset = 10 + length
            if offset > len(frame):
                raise InvalidFrame("client_id runs past the frame")
            client_id = frame[10:offset].decode()
        if header_cls is RequestHeaderV2:
            if frame[offset]:  # tagged fields in the header
                header, offset = read_header(frame, 0)
            else:
                offset += 1
        body, used = read_body(frame, offset)
    except Exception:  # kio raises several types for malformed input
        # kio's native reader rejects tagged fields it does not know; Kafka's rule is to
        # skip them. Read again with the schema walker that does (slower, rare).
        try:
            header, offset = schema_reader.read_entity(header_cls, frame, 0)
            body, used = schema_reader.read_entity(schema, frame, offset)
        except Exception as exc:
            raise InvalidFrame(
                f"malformed {apis.ApiKey(api_key).name} v{api_version} request: {exc}"
            ) from None
        client_id = header.client_id
    # Bytes after the body are ignored, as Kafka's parseRequest does: librdkafka's
    # all-topics Metadata v9+ leaves 3 of its array count placeholder behind them.
    return Request(api_key, api_version, correlation_id, client_id, body, len(frame))


# A value, never changed once built, but not frozen: built on every request, and a frozen
# dataclass costs ~0.3 µs a field to build here (bench/README.md, issue 27).
@dataclass(slots=True, unsafe_hash=True)
class EncodedBody:
    """A body a hand codec already encoded.

    ``flexible`` bodies get response header v1 (an empty tagged-field section
    after the correlation id); the others header v0.
    """

    data: bytes
    flexible: bool = False


def encode_response_parts(api_key: int, correlation_id: int, body: Any) -> tuple[bytes, ...]:
    """The response frame as buffers to write one after the other: a hand codec's body
    (``EncodedBody``: a fetch's record sets, up to megabytes) goes out as it is, after
    a separate size prefix and header, instead of being copied behind them."""
    if isinstance(body, EncodedBody):
        data = body.data
        if body.flexible:
            return _RESPONSE_V1_HEAD.pack(len(data) + 5, correlation_id, 0), data
        return _RESPONSE_V0_PREFIX.pack(len(data) + 4, correlation_id), data
    return (encode_response(api_key, correlation_id, body),)


def encode_response(api_key: int, correlation_id: int, body: Any) -> bytes:
    """Size-prefixed response frame; the header version follows the body's schema."""
    if isinstance(body, EncodedBody):
        if body.flexible:
            return _RESPONSE_V0_PREFIX.pack(len(body.data) + 5, correlation_id) + b"\0" + body.data
        return _RESPONSE_V0_PREFIX.pack(len(body.data) + 4, correlation_id) + body.data
    hand = RESPONSE_ENCODERS.get(type(body))
    if hand is not None:  # a flexible body: response header v1
        data = hand(body)
        return _RESPONSE_V0_PREFIX.pack(len(data) + 5, correlation_id) + b"\0" + data
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    flexible = type(body).__flexible__
    # ApiVersions answers with header v0 whatever its version (KIP-511).
    if flexible and api_key != apis.ApiKey.API_VERSIONS:
        entity_writer(ResponseHeaderV1)(buf, ResponseHeaderV1(correlation_id=i32(correlation_id)))
    else:
        entity_writer(ResponseHeaderV0)(buf, ResponseHeaderV0(correlation_id=i32(correlation_id)))
    entity_writer(type(body))(buf, body)
    data = buf.getbuffer()
    SIZE.pack_into(data, 0, len(data) - 4)
    out = bytes(data)
    del data
    return out


def encode_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: Any
) -> bytes:
    """Size-prefixed request frame (inter-broker client side)."""
    hand = REQUEST_ENCODERS.get(type(body))
    if hand is not None:  # a flexible body (controller_codec): request header v2
        data = hand(body)
        client = b"" if client_id is None else client_id.encode()
        head = _REQUEST_V1_PREFIX.pack(
            _REQUEST_V1_PREFIX.size - 4 + len(client) + 1 + len(data),
            api_key,
            api_version,
            correlation_id,
            -1 if client_id is None else len(client),
        )
        return head + client + b"\0" + data
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    header_cls = RequestHeaderV2 if type(body).__flexible__ else RequestHeaderV1
    entity_writer(header_cls)(
        buf,
        header_cls(
            request_api_key=api_key,
            request_api_version=api_version,
            correlation_id=i32(correlation_id),
            client_id=client_id,
        ),
    )
    entity_writer(type(body))(buf, body)
    data = buf.getbuffer()
    SIZE.pack_into(data, 0, len(data) - 4)
    out = bytes(data)
    del data
    return out


def encode_request_body(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: bytes
) -> bytes:
    """Size-prefixed request frame (header v1) around a body a hand codec encoded."""
    client = b"" if client_id is None else client_id.encode()
    head = _REQUEST_V1_PREFIX.pack(
        _REQUEST_V1_PREFIX.size - 4 + len(client) + len(body),
        api_key,
        api_version,
        correlation_id,
        -1 if client_id is None else len(client),
    )
    return head + client + body


def decode_response(api_key: int, api_version: int, frame: bytes) -> tuple[int, Any]:
    """``(correlation_id, body)`` of a response frame without its size prefix."""
    schema = apis.response_schema(api_key, api_version)
    flexible = schema.__flexible__ and api_key != apis.ApiKey.API_VERSIONS
    header_cls = ResponseHeaderV1 if flexible else ResponseHeaderV0
    header, offset = entity_reader(header_cls)(frame, 0)
    body, _ = entity_reader(schema)(frame, offset)
    return int(header.correlation_id), body
