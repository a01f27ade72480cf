"""The classic consumer protocol's opaque bytes, read where the coordinator needs them:
a member's subscription (JoinGroup metadata) and its assignment (SyncGroup).

Kafka ``ConsumerProtocolSubscription`` / ``ConsumerProtocolAssignment``: an int16 version,
then the topics (subscription) or the topics with their partitions (assignment); later
versions only append fields, so every version starts alike. The coordinator never
interprets them otherwise: OffsetDelete asks whether a topic is subscribed to, tools
show the assignment.
"""

from __future__ import annotations

from replog.protocol import wire
from replog.protocol.wire import CodecError


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
