"""Produce responses encoded by hand (versions 3 to 12): one per acknowledged batch.

A broker answers a Produce for every batch a producer sends, and kio's generic
entity writer spent ~45 µs building and encoding each answer (``bench``'s
microbenchmark, about 5% of a leader's CPU at 10 MB/s). This writes the same
bytes with ``struct`` and ``wire``'s helpers; ``tests/test_produce_codec.py``
checks every version against kio's schema. Requests stay with kio's native
reader (~2 µs for a one-batch request; Python takes longer just to build the
objects), which ``frames`` backs with a reader that skips unknown tags.

Layouts (Kafka's ProduceRequest.json / ProduceResponse.json):

* response: responses [name str, partitions [index i32, error_code i16,
  base_offset i64, log_append_time_ms i64, [v5+ log_start_offset i64], [v8+
  record_errors [batch_index i32, message nullable str], error_message
  nullable str], (v10+ tag 0 current_leader [leader_id i32, leader_epoch
  i32])]], throttle_time_ms i32, (v10+ tag 0 node_endpoints [node_id i32, host
  str, port i32, rack nullable str]).

Versions 9 and up are flexible (KIP-482): compact strings, arrays and bytes,
and a tagged-field section ``(...)`` closing every structure. Version 10 adds the
KIP-951 leader discovery fields, 11 the TRANSACTION_ABORTABLE error and 12
nothing to the bytes (KIP-890 part 2 changes what a transactional batch means,
and this broker refuses transactional producers).

Concurrency: pure functions; safe anywhere.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from replog.protocol import wire
from replog.protocol.wire import LeaderIdAndEpoch, NodeEndpoint

MIN_VERSION = 3
MAX_VERSION = 12
FIRST_FLEXIBLE = 9
FIRST_LEADER_DISCOVERY = 10

_I16 = wire.I16
_I32 = wire.I32
_I64 = wire.I64
_PARTITION_HEAD = struct.Struct(">ihqq")  # index, error, base offset, log append time
_PARTITION_HEAD_V9 = struct.Struct(">ihqqq")  # ... and log start offset
_EMPTY_TAGS = wire.EMPTY_TAGS


# A value, never changed once built, but not frozen: built on every request, and a frozen
# dataclass costs ~0.3 µs a field to build here (bench/README.md, issue 27).
@dataclass(slots=True, unsafe_hash=True)
class ProducePartitionResult:
    topic: str
    partition: int
    error_code: int
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int
    error_message: str | None = None
    current_leader: LeaderIdAndEpoch | None = None  # v10+, on NOT_LEADER_OR_FOLLOWER


def _check_version(version: int) -> None:
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(
            f"Produce v{version} is outside the hand codec's v{MIN_VERSION}-v{MAX_VERSION}"
        )


# -- responses -----------------------------------------------------------------------------


def encode_produce_response(
    version: int,
    partitions: Sequence[ProducePartitionResult],
    *,
    throttle_time_ms: int = 0,
    node_endpoints: Sequence[NodeEndpoint] = (),
) -> bytes:
    """The response body (no header), partitions grouped by topic in first-seen order.

    ``node_endpoints`` (v10+) are the leaders named by partitions' ``current_leader``.
    """
    _check_version(version)
    by_topic: dict[str, list[ProducePartitionResult]] = {}
    for p in partitions:
        by_topic.setdefault(p.topic, []).append(p)
    if version >= FIRST_FLEXIBLE:
        return _encode_response_flexible(version, by_topic, throttle_time_ms, node_endpoints)
    out = [_I32.pack(len(by_topic))]
    for topic, parts in by_topic.items():
        out.append(wire.string(topic))
        out.append(_I32.pack(len(parts)))
        for p in parts:
            out.append(
                _PARTITION_HEAD.pack(p.partition, p.error_code, p.base_offset, p.log_append_time_ms)
            )
            if version >= 5:
                out.append(_I64.pack(p.log_start_offset))
            if version >= 8:
                out.append(_I32.pack(0))  # record_errors: none
                out.append(wire.nullable_string(p.error_message))
    out.append(_I32.pack(throttle_time_ms))
    return b"".join(out)


def _encode_response_flexible(
    version: int,
    by_topic: dict[str, list[ProducePartitionResult]],
    throttle_time_ms: int,
    node_endpoints: Sequence[NodeEndpoint],
) -> bytes:
    leader_discovery = version >= FIRST_LEADER_DISCOVERY
    out = [wire.uvarint(len(by_topic) + 1)]
    for topic, parts in by_topic.items():
        out.append(wire.compact_string(topic))
        out.append(wire.uvarint(len(parts) + 1))
        for p in parts:
            out.append(
                _PARTITION_HEAD_V9.pack(
                    p.partition,
                    p.error_code,
                    p.base_offset,
                    p.log_append_time_ms,
                    p.log_start_offset,
                )
            )
            out.append(b"\x01")  # record_errors: none
            out.append(wire.compact_nullable_string(p.error_message))
            leader = p.current_leader
            if leader_discovery and leader is not None and leader != LeaderIdAndEpoch():
                out.append(wire.tagged_fields([(0, wire.leader_id_and_epoch(leader))]))
            else:
                out.append(_EMPTY_TAGS)
        out.append(_EMPTY_TAGS)
    out.append(_I32.pack(throttle_time_ms))
    if leader_discovery and node_endpoints:
        out.append(wire.tagged_fields([(0, wire.node_endpoints(node_endpoints))]))
    else:
        out.append(_EMPTY_TAGS)
    return b"".join(out)
