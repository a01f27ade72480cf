"""DescribeTransactions v0 by hand, for the tools that ask it.

kio's reader refuses the ``transaction_start_time`` of -1 that Kafka (and replog) answer
for a transaction not started (Empty, completed, or an error entry), so the answer is
read here. The request goes with ``KafkaConnection.request_encoded``: its header v1 part
is written there, the flexible header's tagged fields (none) lead this body.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from replog.protocol.wire import (
    CodecError,
    compact_string,
    read_compact_array_count,
    read_compact_string,
    skip_tagged_fields,
    uvarint,
)

API_VERSION = 0
_STATE = struct.Struct(">iqqh")  # timeout ms, start time ms, producer id, producer epoch


@dataclass(frozen=True)
class DescribedTransaction:
    error_code: ErrorCode
    transactional_id: str
    transaction_state: str
    transaction_timeout_ms: int
    transaction_start_time_ms: int  # -1: no transaction started
    producer_id: int
    producer_epoch: int
    topics: tuple[tuple[str, tuple[int, ...]], ...]


def encode_request(transactional_ids: list[str]) -> bytes:
    """The request body after the header v1 prefix: header tags, the ids, body tags."""
    return (
        b"\x00"
        + uvarint(len(transactional_ids) + 1)
        + b"".join(compact_string(t) for t in transactional_ids)
        + b"\x00"
    )


def decode_response(frame: bytes) -> list[DescribedTransaction]:
    """The transaction states of a response frame (after its size prefix); a frame that
    does not parse is a ``CodecError``."""
    try:
        return _decode(frame)
    except (struct.error, ValueError) as exc:  # truncated, an error code unknown here
        raise CodecError(f"DescribeTransactions response: {exc}") from None


def _decode(frame: bytes) -> list[DescribedTransaction]:
    pos = skip_tagged_fields(frame, 4) + 4  # correlation id, header tags, throttle time
    count, pos = read_compact_array_count(frame, pos)
    out = []
    for _ in range(count):
        (error,) = struct.unpack_from(">h", frame, pos)
        tid, pos = read_compact_string(frame, pos + 2)
        state, pos = read_compact_string(frame, pos)
        timeout_ms, start_ms, producer_id, producer_epoch = _STATE.unpack_from(frame, pos)
        pos += _STATE.size
        topics = []
        n_topics, pos = read_compact_array_count(frame, pos)
        for _ in range(n_topics):
            topic, pos = read_compact_string(frame, pos)
            n, pos = read_compact_array_count(frame, pos)
            partitions = struct.unpack_from(f">{n}i", frame, pos)
            pos = skip_tagged_fields(frame, pos + 4 * n)
            topics.append((topic, tuple(partitions)))
        pos = skip_tagged_fields(frame, pos)
        out.append(
            DescribedTransaction(
                ErrorCode(error),
                tid,
                state,
                timeout_ms,
                start_ms,
                producer_id,
                producer_epoch,
                tuple(topics),
            )
        )
    return out
