"""Hand encoders for the controller's big requests: LeaderAndIsr v6, UpdateMetadata v7,
and the LeaderAndIsr v6 response.

After a broker failure at 10,000 partitions the controller encodes about 20,000
partition states of LeaderAndIsr and as many of UpdateMetadata; kio's generic writer
spends about 6 µs on each (a type check and a buffer write per field), over 0.2 s of the
controller's event loop. These write the same bytes from the same schema objects
(``replog.protocol.controller_schemas``) with ``struct`` and caches of the small int
arrays (an ISR or replica list takes a handful of values across the whole cluster).
Decoding stays with kio's native reader, which is fast.

``frames.encode_request`` and ``frames.encode_response`` use them for these types; the
bytes are checked equal to kio's by ``tests/test_controller_codec.py``.

Concurrency: pure functions (the caches only grow, with values that never change);
safe anywhere.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

from replog.protocol.controller_schemas.leader_and_isr import (
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
)
from replog.protocol.controller_schemas.update_metadata import UpdateMetadataRequest
from replog.protocol.kafka_uuid import ZERO_UUID
from replog.protocol.wire import (
    EMPTY_TAGS,
    I16,
    I32,
    compact_int32_array,
    compact_nullable_string,
    uvarint,
)

_HEAD = struct.Struct(">iiq")  # controller_id, controller_epoch, broker_epoch
_PARTITION_HEAD = struct.Struct(">iiii")  # index, controller epoch, leader, leader epoch
_ERROR = struct.Struct(">ih")  # partition index, error code

_strings: dict[str, bytes] = {}


def _compact_string(value: str) -> bytes:
    encoded = _strings.get(value)
    if encoded is None:
        data = value.encode()
        encoded = uvarint(len(data) + 1) + data
        if len(_strings) < 65536:
            _strings[value] = encoded
    return encoded


def _uuid(value: uuid.UUID | None) -> bytes:
    return ZERO_UUID.bytes if value is None else value.bytes


def _topic_head(topic: Any) -> bytes:
    """A topic state's name, id and partition count, as LeaderAndIsr v6 and UpdateMetadata
    v7 both start it."""
    return (
        _compact_string(topic.topic_name)
        + _uuid(topic.topic_id)
        + uvarint(len(topic.partition_states) + 1)
    )


def encode_leader_and_isr_request(body: LeaderAndIsrRequest) -> bytes:
    """The body of a LeaderAndIsr v6 request (after the request header)."""
    array, i32, head = compact_int32_array, I32.pack, _PARTITION_HEAD.pack
    out = [
        _HEAD.pack(body.controller_id, body.controller_epoch, body.broker_epoch),
        bytes((body.type & 0xFF,)),
        uvarint(len(body.topic_states) + 1),
    ]
    append = out.append
    for topic in body.topic_states:
        append(_topic_head(topic))
        for p in topic.partition_states:
            append(head(p.partition_index, p.controller_epoch, p.leader, p.leader_epoch))
            append(array(p.isr))
            append(i32(p.zk_version))
            append(array(p.replicas))
            append(array(p.adding_replicas))
            append(array(p.removing_replicas))
            append(bytes((1 if p.is_new else 0, p.leader_recovery_state & 0xFF, 0)))
        append(EMPTY_TAGS)
    append(uvarint(len(body.live_leaders) + 1))
    for leader in body.live_leaders:
        append(i32(leader.broker_id))
        append(_compact_string(leader.host_name))
        append(i32(leader.port))
        append(EMPTY_TAGS)
    append(EMPTY_TAGS)
    return b"".join(out)


def encode_update_metadata_request(body: UpdateMetadataRequest) -> bytes:
    """The body of an UpdateMetadata v7 request (after the request header)."""
    array, i32, head = compact_int32_array, I32.pack, _PARTITION_HEAD.pack
    out = [
        _HEAD.pack(body.controller_id, body.controller_epoch, body.broker_epoch),
        uvarint(len(body.topic_states) + 1),
    ]
    append = out.append
    for topic in body.topic_states:
        append(_topic_head(topic))
        for p in topic.partition_states:
            append(head(p.partition_index, p.controller_epoch, p.leader, p.leader_epoch))
            append(array(p.isr))
            append(i32(p.zk_version))
            append(array(p.replicas))
            append(array(p.offline_replicas))
            append(EMPTY_TAGS)
        append(EMPTY_TAGS)
    append(uvarint(len(body.live_brokers) + 1))
    for broker in body.live_brokers:
        append(i32(broker.id))
        append(uvarint(len(broker.endpoints) + 1))
        for e in broker.endpoints:
            append(i32(e.port))
            append(_compact_string(e.host))
            append(_compact_string(e.listener))
            append(I16.pack(e.security_protocol))
            append(EMPTY_TAGS)
        append(compact_nullable_string(broker.rack))
        append(EMPTY_TAGS)
    append(EMPTY_TAGS)
    return b"".join(out)


def encode_leader_and_isr_response(body: LeaderAndIsrResponse) -> bytes:
    """The body of a LeaderAndIsr v6 response (after the response header)."""
    error = _ERROR.pack
    out = [I16.pack(body.error_code), uvarint(len(body.topics) + 1)]
    append = out.append
    for topic in body.topics:
        append(_uuid(topic.topic_id))
        append(uvarint(len(topic.partition_errors) + 1))
        for p in topic.partition_errors:
            append(error(p.partition_index, p.error_code))
            append(EMPTY_TAGS)
        append(EMPTY_TAGS)
    append(EMPTY_TAGS)
    return b"".join(out)


REQUEST_ENCODERS: dict[type, Callable[[Any], bytes]] = {
    LeaderAndIsrRequest: encode_leader_and_isr_request,
    UpdateMetadataRequest: encode_update_metadata_request,
}
"""Request body type -> hand encoder of the body (the header is the caller's)."""

RESPONSE_ENCODERS: dict[type, Callable[[Any], bytes]] = {
    LeaderAndIsrResponse: encode_leader_and_isr_response,
}
"""Response body type -> hand encoder of the body (the header is the caller's)."""
