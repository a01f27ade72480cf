"""A hand encoder for Metadata responses, v9 to v13 (the flexible versions).

kio's generic writer walks a Metadata answer field by field through Python closures;
for a one-topic answer that was half of the broker's CPU for the request (issue 27).
This writes the same bytes (tests/test_metadata_codec.py checks it against kio's writer
for every flexible version) from the same kio objects, the handler unchanged: fixed
fields packed together, broker ids arrays and strings cached by value (they repeat
across partitions and requests).

Which fields a version has is read once from its kio class (v10 adds a topic's id,
v11 drops the cluster's authorized operations, v13 adds a top-level error code); none
of these versions has tagged fields, so each structure ends with an empty section.

The encoder reads attributes only, so the handler gives it ``MetadataResponse`` and its
parts below (plain slots classes with every version's fields, built without kio's
frozen dataclasses' cost: ~40% of a one-topic Metadata request's handler went to
building kio objects) and calls ``encode(version, body)``; kio's objects are still
what the versions before v9 are built from, and what the tests compare against.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from replog.protocol import apis
from replog.protocol.wire import EMPTY_TAGS, compact_int32_array, uvarint

FIRST_FLEXIBLE = 9
_ZERO_UUID_BYTES = bytes(16)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">hiii")  # error, index, leader, leader epoch
_TOPIC_TAIL = struct.Struct(">iB")  # authorized operations, no tagged fields
_ERROR_AND_TAGS = struct.Struct(">hB")  # v13's top-level error code, no tagged fields
_FALSE_TRUE = (b"\x00", b"\x01")

_strings: dict[str | None, bytes] = {None: b"\x00"}


def _compact_nullable_string(value: str | None) -> bytes:
    """A compact (nullable) string, cached by value: names, hosts and racks repeat."""
    encoded = _strings.get(value)
    if encoded is None:
        assert value is not None
        data = value.encode()
        encoded = uvarint(len(data) + 1) + data
        if len(_strings) < 65536:
            _strings[value] = encoded
    return encoded


def _ms(value: Any) -> int:
    """A ``timedelta_i32`` field as kio writes it (milliseconds, rounded)."""
    return round(value.total_seconds() * 1000)


def _fields(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def _encoder(version: int) -> Callable[[Any], bytes]:
    top = _fields(apis.response_schema(apis.ApiKey.METADATA, version))
    has_topic_id = version >= 10
    has_cluster_operations = "cluster_authorized_operations" in top
    has_error = "error_code" in top

    def encode(body: Any) -> bytes:
        out: list[bytes] = [_I32.pack(_ms(body.throttle_time))]
        append = out.append
        brokers = body.brokers
        append(uvarint(len(brokers) + 1))
        for b in brokers:
            append(_I32.pack(b.node_id))
            append(_compact_nullable_string(b.host))
            append(_I32.pack(b.port))
            append(_compact_nullable_string(b.rack))
            append(EMPTY_TAGS)
        append(_compact_nullable_string(body.cluster_id))
        append(_I32.pack(body.controller_id))
        topics = body.topics
        append(uvarint(len(topics) + 1))
        for t in topics:
            append(_I16.pack(t.error_code))
            append(_compact_nullable_string(t.name))
            if has_topic_id:
                topic_id = t.topic_id
                append(_ZERO_UUID_BYTES if topic_id is None else topic_id.bytes)
            append(_FALSE_TRUE[bool(t.is_internal)])
            partitions = t.partitions
            append(uvarint(len(partitions) + 1))
            for p in partitions:
                append(
                    _PARTITION_HEAD.pack(
                        p.error_code, p.partition_index, p.leader_id, p.leader_epoch
                    )
                )
                append(compact_int32_array(p.replica_nodes))
                append(compact_int32_array(p.isr_nodes))
                append(compact_int32_array(p.offline_replicas))
                append(EMPTY_TAGS)
            append(_TOPIC_TAIL.pack(t.topic_authorized_operations, 0))
        if has_cluster_operations:
            append(_I32.pack(body.cluster_authorized_operations))
        if has_error:
            append(_ERROR_AND_TAGS.pack(body.error_code, 0))
        else:
            append(EMPTY_TAGS)
        return b"".join(out)

    return encode


_ENCODERS: dict[int, Callable[[Any], bytes]] = {
    v: _encoder(v)
    for v in range(FIRST_FLEXIBLE, apis.supported_versions()[apis.ApiKey.METADATA][1] + 1)
}
# kio's response class of each flexible version -> its encoder (frames.encode_response
# looks a body's type up here).
RESPONSE_ENCODERS: dict[type, Callable[[Any], bytes]] = {
    apis.response_schema(apis.ApiKey.METADATA, v): encode for v, encode in _ENCODERS.items()
}


def encode(version: int, body: Any) -> bytes:
    """A Metadata response body (v9 or later: ``FIRST_FLEXIBLE``) from ``body``, a
    ``MetadataResponse`` or kio's response object of any flexible version."""
    return _ENCODERS[version](body)


# What the handler builds for the flexible versions: every version's fields (those a
# version lacks are not written). Not frozen: built per request (see EncodedBody).


@dataclass(slots=True)
class MetadataBroker:
    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(slots=True)
class MetadataPartition:
    error_code: int
    partition_index: int
    leader_id: int
    leader_epoch: int
    replica_nodes: Sequence[int]
    isr_nodes: Sequence[int]
    offline_replicas: Sequence[int]


@dataclass(slots=True)
class MetadataTopic:
    error_code: int
    name: str | None
    topic_id: uuid.UUID | None
    is_internal: bool
    partitions: Sequence[MetadataPartition]
    topic_authorized_operations: int


@dataclass(slots=True)
class MetadataResponse:
    throttle_time: Any  # a timedelta, as kio's
    brokers: Sequence[MetadataBroker]
    cluster_id: str | None
    controller_id: int
    topics: Sequence[MetadataTopic]
    cluster_authorized_operations: int
    error_code: int
