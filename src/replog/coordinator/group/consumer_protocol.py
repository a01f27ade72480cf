"""The classic consumer protocol's opaque bytes, read where the coordinator needs them:
a member's subscription (JoinGroup metadata) and its assignment (SyncGroup).

Kafka ``ConsumerProtocolSubscription`` / ``ConsumerProtocolAssignment``: an int16 version,
then the topics (subscription) or the topics with their partitions (assignment); later
versions only append fields, so every version starts alike. A classic group only asks
which topics are subscribed to (OffsetDelete); a classic member inside a consumer group
(KIP-848's upgrade path) is read whole (``decode_subscription``: topics, owned
partitions from v1, rack from v3) and handed its assignment as the server-side assignor
computed it (``encode_assignment``), in the version of its subscription.
"""

from __future__ import annotations

from dataclasses import dataclass

from replog.protocol import wire
from replog.protocol.wire import I16, I32, CodecError

CONSUMER_PROTOCOL_TYPE = "consumer"
LATEST_VERSION = 3  # ConsumerProtocolSubscription / ConsumerProtocolAssignment v3


@dataclass(frozen=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    owned_partitions: tuple[tuple[str, tuple[int, ...]], ...] = ()
    rack_id: str | None = None


def decode_subscription(metadata: bytes) -> Subscription:
    """A JoinGroup protocol's metadata as Kafka's ``ConsumerProtocolSubscription``;
    CodecError when it is not one."""
    version, pos = _read_int16(metadata, 0)
    if version < 0:
        raise CodecError(f"subscription version {version}")
    count, pos = wire.read_array_count(metadata, pos)
    topics = []
    for _ in range(count):
        topic, pos = wire.read_string(metadata, pos)
        topics.append(topic)
    owned: list[tuple[str, tuple[int, ...]]] = []
    rack = None
    if pos == len(metadata):  # some clients end a v0 subscription before its user data
        return Subscription(version, tuple(topics))
    _, pos = wire.read_nullable_bytes(metadata, pos)  # user data
    if version >= 1 and pos < len(metadata):
        count, pos = wire.read_array_count(metadata, pos)
        for _ in range(count):
            topic, pos = wire.read_string(metadata, pos)
            partitions, pos = _read_int32s(metadata, pos)
            owned.append((topic, partitions))
    if version >= 2:
        pos += 4  # generation id
    if version >= 3 and pos < len(metadata):
        rack, pos = wire.read_nullable_string(metadata, pos)
    return Subscription(version, tuple(topics), tuple(owned), rack)


def encode_assignment(version: int, partitions: dict[str, list[int]]) -> bytes:
    """A ``ConsumerProtocolAssignment`` (no user data) in ``version`` (capped at 3)."""
    out = [I16.pack(min(max(version, 0), LATEST_VERSION)), I32.pack(len(partitions))]
    for topic in sorted(partitions):
        out.append(wire.string(topic))
        out.append(I32.pack(len(partitions[topic])))
        out.extend(I32.pack(p) for p in sorted(partitions[topic]))
    out.append(I32.pack(-1))  # user data: null
    return b"".join(out)


def _read_int16(data: bytes, pos: int) -> tuple[int, int]:
    if pos + 2 > len(data):
        raise CodecError("truncated consumer protocol version")
    return I16.unpack_from(data, pos)[0], pos + 2


def _read_int32s(data: bytes, pos: int) -> tuple[tuple[int, ...], int]:
    count, pos = wire.read_array_count(data, pos)
    if pos + 4 * count > len(data):
        raise CodecError("truncated partition list")
    values = tuple(I32.unpack_from(data, pos + 4 * i)[0] for i in range(count))
    return values, pos + 4 * count


def subscribed_topics(metadata: bytes) -> set[str]:
    """The topics of a subscription; empty when the bytes are not the consumer protocol's."""
    try:
        count, pos = wire.read_array_count(metadata, 2)
        topics = set()
        for _ in range(count):
            topic, pos = wire.read_string(metadata, pos)
            topics.add(topic)
        return topics
    except CodecError:
        return set()


def assigned_partitions(assignment: bytes) -> list[tuple[str, int]]:
    """The ``(topic, partition)`` pairs of an assignment; empty when unreadable."""
    if not assignment:
        return []
    try:
        count, pos = wire.read_array_count(assignment, 2)
        out = []
        for _ in range(count):
            topic, pos = wire.read_string(assignment, pos)
            n, pos = wire.read_array_count(assignment, pos)
            for _ in range(n):
                if pos + 4 > len(assignment):
                    raise CodecError("truncated partition")
                out.append((topic, wire.I32.unpack_from(assignment, pos)[0]))
                pos += 4
        return out
    except CodecError:
        return []
