"""Fetch on the replication path, encoded and decoded by hand (versions 4 to 11).

Every acks=all record costs a follower two Fetch round trips, so these frames
are the broker's hottest: building and encoding them through kio's generic
entity writer cost ~45 µs a frame, about a quarter of a broker's CPU at 10 MB/s
(py-spy, bench/latency.py). These functions write and read the same bytes with
``struct`` and keep record sets as bytes slices. They cover the non-flexible
versions 4 to 11 only; ``tests/test_fetch_codec.py`` checks every version
against kio's schemas in both directions.

Layouts (Kafka's FetchRequest.json / FetchResponse.json):

* request: replica_id i32, max_wait_ms i32, min_bytes i32, max_bytes i32,
  isolation_level i8, [v7+ session_id i32, session_epoch i32], topics
  [name str, partitions [partition i32, [v9+ current_leader_epoch i32],
  fetch_offset i64, [v5+ log_start_offset i64], partition_max_bytes i32]],
  [v7+ forgotten topics [name str, partitions [i32]]], [v11+ rack_id str];
* response: throttle_time_ms i32, [v7+ error_code i16, session_id i32],
  responses [topic str, partitions [partition i32, error_code i16,
  high_watermark i64, last_stable_offset i64, [v5+ log_start_offset i64],
  aborted_transactions nullable [producer_id i64, first_offset i64],
  [v11+ preferred_read_replica i32], records nullable bytes (i32 length)]].

Concurrency: pure functions; safe anywhere.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MIN_VERSION = 4
MAX_VERSION = 11

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_REQUEST_HEAD = struct.Struct(">iiiib")  # replica_id, max_wait, min_bytes, max_bytes, isolation
_SESSION = struct.Struct(">ii")  # request: session_id, session_epoch
_RESPONSE_PARTITION_HEAD = struct.Struct(">ihqq")  # partition, error, hw, last stable offset


class FetchCodecError(ValueError):
    """A Fetch frame that does not parse (truncated, negative lengths)."""


@dataclass(frozen=True, slots=True)
class FetchRequestPartitionData:
    topic: str
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    log_start_offset: int
    partition_max_bytes: int


@dataclass(frozen=True, slots=True)
class FetchResponsePartitionData:
    topic: str
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: bytes | None
    preferred_read_replica: int = -1


def _check_version(version: int) -> None:
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Fetch v{version} is outside the hand codec's v4-v11")


def _string(out: list[bytes], value: str) -> None:
    data = value.encode()
    out.append(_I16.pack(len(data)))
    out.append(data)


def _grouped(items: Iterable[FetchRequestPartitionData | FetchResponsePartitionData]):
    by_topic: dict[str, list] = {}
    for item in items:
        by_topic.setdefault(item.topic, []).append(item)
    return by_topic


def encode_fetch_request(
    version: int,
    *,
    replica_id: int,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    isolation_level: int,
    partitions: Sequence[FetchRequestPartitionData],
    session_id: int = 0,
    session_epoch: int = -1,
    rack_id: str = "",
) -> bytes:
    """The request body (no header) of a sessionless Fetch."""
    _check_version(version)
    out = [_REQUEST_HEAD.pack(replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level)]
    if version >= 7:
        out.append(_SESSION.pack(session_id, session_epoch))
    by_topic = _grouped(partitions)
    out.append(_I32.pack(len(by_topic)))
    for topic, parts in by_topic.items():
        _string(out, topic)
        out.append(_I32.pack(len(parts)))
        for p in parts:
            out.append(_I32.pack(p.partition))
            if version >= 9:
                out.append(_I32.pack(p.current_leader_epoch))
            out.append(_I64.pack(p.fetch_offset))
            if version >= 5:
                out.append(_I64.pack(p.log_start_offset))
            out.append(_I32.pack(p.partition_max_bytes))
    if version >= 7:
        out.append(_I32.pack(0))  # no forgotten topics: sessionless
    if version >= 11:
        _string(out, rack_id)
    return b"".join(out)


def encode_fetch_response(
    version: int,
    partitions: Sequence[FetchResponsePartitionData],
    *,
    throttle_time_ms: int = 0,
    error_code: int = 0,
    session_id: int = 0,
) -> bytes:
    """The response body (no header); record sets are copied once, into the frame."""
    _check_version(version)
    out = [_I32.pack(throttle_time_ms)]
    if version >= 7:
        out.append(_I16.pack(error_code))
        out.append(_I32.pack(session_id))
    by_topic = _grouped(partitions)
    out.append(_I32.pack(len(by_topic)))
    for topic, parts in by_topic.items():
        _string(out, topic)
        out.append(_I32.pack(len(parts)))
        for p in parts:
            out.append(
                _RESPONSE_PARTITION_HEAD.pack(
                    p.partition, p.error_code, p.high_watermark, p.last_stable_offset
                )
            )
            if version >= 5:
                out.append(_I64.pack(p.log_start_offset))
            out.append(_I32.pack(-1))  # aborted_transactions: null (no transactions)
            if version >= 11:
                out.append(_I32.pack(p.preferred_read_replica))
            if p.records is None:
                out.append(_I32.pack(-1))
            else:
                out.append(_I32.pack(len(p.records)))
                out.append(p.records)
    return b"".join(out)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes | memoryview, pos: int) -> None:
        self.data = data
        self.pos = pos

    def take(self, s: struct.Struct) -> tuple:
        try:
            values = s.unpack_from(self.data, self.pos)
        except struct.error as exc:
            raise FetchCodecError(f"truncated Fetch frame at byte {self.pos}") from exc
        self.pos += s.size
        return values

    def count(self) -> int:
        (n,) = self.take(_I32)
        if n < -1:
            raise FetchCodecError(f"negative array length {n} at byte {self.pos - 4}")
        return n

    def string(self) -> str:
        (n,) = self.take(_I16)
        if n < 0 or self.pos + n > len(self.data):
            raise FetchCodecError(f"bad string length {n} at byte {self.pos - 2}")
        value = bytes(self.data[self.pos : self.pos + n]).decode()
        self.pos += n
        return value

    def nullable_bytes(self) -> bytes | None:
        (n,) = self.take(_I32)
        if n == -1:
            return None
        if n < 0 or self.pos + n > len(self.data):
            raise FetchCodecError(f"bad bytes length {n} at byte {self.pos - 4}")
        value = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return value


def decode_fetch_response(
    version: int, data: bytes | memoryview, offset: int = 0
) -> tuple[int, list[FetchResponsePartitionData]]:
    """``(top-level error code, partitions)`` of a response body starting at ``offset``."""
    _check_version(version)
    r = _Reader(data, offset)
    r.take(_I32)  # throttle_time_ms
    error_code = 0
    if version >= 7:
        (error_code,) = r.take(_I16)
        r.take(_I32)  # session_id
    out: list[FetchResponsePartitionData] = []
    for _ in range(max(r.count(), 0)):
        topic = r.string()
        for _ in range(max(r.count(), 0)):
            partition, error, hw, lso = r.take(_RESPONSE_PARTITION_HEAD)
            log_start = r.take(_I64)[0] if version >= 5 else -1
            for _ in range(max(r.count(), 0)):
                r.take(_I64)
                r.take(_I64)
            preferred = r.take(_I32)[0] if version >= 11 else -1
            records = r.nullable_bytes()
            out.append(
                FetchResponsePartitionData(
                    topic, partition, error, hw, lso, log_start, records, preferred
                )
            )
    if r.pos != len(data):
        raise FetchCodecError(f"{len(data) - r.pos} trailing bytes after a Fetch v{version} body")
    return error_code, out
