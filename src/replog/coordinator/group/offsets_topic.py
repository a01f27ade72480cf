"""``__consumer_offsets``: its name, its settings, and which partition holds a group.

A group lives in partition ``abs(hash(group_id)) % partitions`` where ``hash`` is
Java's ``String.hashCode`` and ``abs`` Kafka's ``Utils.abs`` (Integer.MIN_VALUE maps
to 0), so a group's coordinator is the broker Kafka's tools expect.
"""

from __future__ import annotations


def java_string_hash(value: str) -> int:
    """Java ``String.hashCode``: over UTF-16 code units, in 32-bit two's complement."""
    h = 0
    for unit in _utf16_units(value):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _utf16_units(value: str):
    encoded = value.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(encoded), 2):
        yield (encoded[i] << 8) | encoded[i + 1]


def kafka_abs(n: int) -> int:
    """Kafka ``Utils.abs``: |n|, and 0 for Integer.MIN_VALUE."""
    return 0 if n == -(1 << 31) else abs(n)


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition that holds ``group_id``."""
    return kafka_abs(java_string_hash(group_id)) % num_partitions


def offsets_topic_configs(segment_bytes: int) -> dict[str, str]:
    """The topic configs Kafka creates ``__consumer_offsets`` with
    (``GroupCoordinator.groupMetadataTopicConfigs``; its ``compression.type=producer``
    is replog's only behaviour and not a setting)."""
    return {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)}
