"""Fetch on the replication path, encoded and decoded by hand (versions 4 to 17).

Every acks=all record costs a follower two Fetch round trips, so these frames
are the broker's hottest: building and encoding them through kio's generic
entity writer cost ~45 µs a frame, about a quarter of a broker's CPU at 10 MB/s
(py-spy, bench/latency.py). These functions write the follower's requests and
the leader's responses, and read the responses on the follower, with
``struct`` and ``wire``'s helpers, keeping record sets as bytes slices.
``tests/test_fetch_codec.py`` checks every version against kio's schemas in
both directions. The broker reads requests with kio's native reader (~2 µs for
a follower's request, less than Python needs to build the objects), which
``frames`` backs with a reader that skips unknown tags.

Layouts (Kafka's FetchRequest.json / FetchResponse.json):

* request: [v<=14 replica_id i32], max_wait_ms i32, min_bytes i32, max_bytes
  i32, isolation_level i8, [v7+ session_id i32, session_epoch i32], topics
  [name str (v13+: topic_id uuid), partitions [partition i32, [v9+
  current_leader_epoch i32], fetch_offset i64, [v12+ last_fetched_epoch i32],
  [v5+ log_start_offset i64], partition_max_bytes i32, (v17+ tag 0
  replica_directory_id uuid)]], [v7+ forgotten topics [name str (v13+:
  topic_id uuid), partitions [i32]]], [v11+ rack_id str], (tag 0 cluster_id
  nullable str, v15+ tag 1 replica_state [replica_id i32, replica_epoch i64]);
* response: throttle_time_ms i32, [v7+ error_code i16, session_id i32],
  responses [topic str (v13+: topic_id uuid), partitions [partition i32,
  error_code i16, high_watermark i64, last_stable_offset i64, [v5+
  log_start_offset i64], aborted_transactions nullable [producer_id i64,
  first_offset i64], [v11+ preferred_read_replica i32], records nullable bytes,
  (tag 0 diverging_epoch [epoch i32, end_offset i64], tag 1 current_leader
  [leader_id i32, leader_epoch i32], tag 2 snapshot_id [end_offset i64, epoch
  i32])]], (v16+ tag 0 node_endpoints).

Versions 12 and up are flexible (KIP-482): compact strings, arrays and bytes,
and a tagged-field section ``(...)`` closing every structure; the response
decoder reads the tags listed above at the versions that have them and steps
over any other.
Version 13 names topics by id (KIP-516), 15 moves the follower's id into
``replica_state`` (KIP-903), 16 adds ``node_endpoints`` (KIP-951), 17 the
follower's directory id (KIP-853).

Concurrency: pure functions; safe anywhere.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from replog.protocol import wire
from replog.protocol.epochs import EpochEndOffset
from replog.protocol.wire import CodecError, LeaderIdAndEpoch, NodeEndpoint

MIN_VERSION = 4
MAX_VERSION = 17
FIRST_FLEXIBLE = 12
FIRST_TOPIC_ID = 13
FIRST_REPLICA_STATE = 15
FIRST_NODE_ENDPOINTS = 16
FIRST_DIRECTORY_ID = 17

_I16 = wire.I16
_I32 = wire.I32
_I64 = wire.I64
_REQUEST_HEAD = struct.Struct(">iiiib")  # replica_id, max_wait, min_bytes, max_bytes, isolation
_REQUEST_HEAD_V15 = struct.Struct(">iiib")  # max_wait, min_bytes, max_bytes, isolation
_SESSION = struct.Struct(">ii")  # request: session_id, session_epoch
_REQUEST_PARTITION_V12 = struct.Struct(">iiqiqi")  # partition, .., partition_max_bytes
_REPLICA_STATE = struct.Struct(">iq")  # replica_id, replica_epoch
_RESPONSE_HEAD = struct.Struct(">ihi")  # throttle, error, session_id
_RESPONSE_PARTITION_HEAD = struct.Struct(">ihqq")  # partition, error, hw, last stable offset
# partition, error, hw, last stable offset, log start offset, aborted_transactions (null:
# compact length 0, no transactions), preferred read replica
_RESPONSE_PARTITION_HEAD_V12 = struct.Struct(">ihqqqBi")
_RESPONSE_PARTITION_FIXED_V12 = struct.Struct(">ihqqq")  # what a decoder reads before aborted
_EPOCH_END_OFFSET = struct.Struct(">iq")  # diverging_epoch: epoch, end_offset
_SNAPSHOT_ID = struct.Struct(">qi")  # snapshot_id: end_offset, epoch
_ABORTED = struct.Struct(">qq")
_EMPTY_TAGS = wire.EMPTY_TAGS


class FetchCodecError(CodecError):
    """A Fetch frame that does not parse (truncated, negative lengths, bad varints or tags)."""


@dataclass(frozen=True, slots=True)
class SnapshotId:
    end_offset: int
    epoch: int


@dataclass(frozen=True, slots=True)
class FetchRequestPartitionData:
    """One partition of a Fetch request; from v13 on the topic is named by ``topic_id``."""

    topic: str
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    log_start_offset: int
    partition_max_bytes: int
    last_fetched_epoch: int = -1
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class ForgottenTopic:
    """Partitions an incremental fetch drops from its session (KIP-227); from v13 on the
    topic is named by ``topic_id``."""

    topic: str
    partitions: tuple[int, ...]
    topic_id: uuid.UUID | None = None


def forgotten_topics(
    partitions: Iterable[tuple[str, int]], topic_ids: dict[str, uuid.UUID] | None = None
) -> list[ForgottenTopic]:
    """``(topic, partition)`` pairs grouped by topic, first appearance first; with
    ``topic_ids``, each topic also named by its id (for v13+)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return [
        ForgottenTopic(topic, tuple(parts), None if topic_ids is None else topic_ids[topic])
        for topic, parts in by_topic.items()
    ]


# A value, never changed once built, but not frozen: built on every request, and a frozen
# dataclass costs ~0.3 µs a field to build here (bench/README.md, issue 27).
@dataclass(slots=True, unsafe_hash=True)
class FetchResponsePartitionData:
    """One partition of a Fetch response; from v13 on the topic is named by ``topic_id``."""

    topic: str
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: bytes | None
    preferred_read_replica: int = -1
    topic_id: uuid.UUID | None = None
    diverging_epoch: EpochEndOffset | None = None  # the leader's answer for last_fetched_epoch
    current_leader: LeaderIdAndEpoch | None = None
    snapshot_id: SnapshotId | None = None
    # read_committed answers: (producer id, first offset) of each aborted transaction in
    # the records' range; None (null) for others. The decoders skip them.
    aborted_transactions: Sequence[tuple[int, int]] | None = None


@dataclass(frozen=True, slots=True)
class FetchResponseData:
    error_code: int
    partitions: list[FetchResponsePartitionData]
    throttle_time_ms: int = 0
    session_id: int = 0
    node_endpoints: list[NodeEndpoint] | None = None


def _check_version(version: int) -> None:
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(
            f"Fetch v{version} is outside the hand codec's v{MIN_VERSION}-v{MAX_VERSION}"
        )


def _grouped(items: Iterable[FetchRequestPartitionData | FetchResponsePartitionData]) -> dict:
    by_topic: dict = {}
    for item in items:
        by_topic.setdefault(item.topic, []).append(item)
    return by_topic


def _grouped_by_id(
    items: Iterable[FetchRequestPartitionData | FetchResponsePartitionData],
) -> dict:
    by_topic: dict = {}
    for item in items:
        if item.topic_id is None:
            raise ValueError(f"partition {item.topic}-{item.partition} has no topic id")
        by_topic.setdefault(item.topic_id, []).append(item)
    return by_topic


def _string(out: list[bytes], value: str) -> None:
    data = value.encode()
    out.append(_I16.pack(len(data)))
    out.append(data)


# -- requests ------------------------------------------------------------------------------


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
    forgotten: Sequence[ForgottenTopic] = (),
    rack_id: str = "",
    replica_epoch: int = -1,
    cluster_id: str | None = None,
) -> bytes:
    """The request body (no header) of a Fetch: sessionless by default; v7+ carries a
    session's id and epoch and the partitions it ``forgot`` (see ``fetch_metadata``)."""
    _check_version(version)
    if version < 7 and (forgotten or (session_id, session_epoch) != (0, -1)):
        raise ValueError(f"Fetch v{version} has no sessions (v7+)")
    if version >= FIRST_FLEXIBLE:
        return _encode_request_flexible(
            version,
            replica_id=replica_id,
            head=(max_wait_ms, min_bytes, max_bytes, isolation_level),
            session=(session_id, session_epoch),
            partitions=partitions,
            forgotten=forgotten,
            rack_id=rack_id,
            replica_epoch=replica_epoch,
            cluster_id=cluster_id,
        )
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
        out.append(_I32.pack(len(forgotten)))
        for f in forgotten:
            _string(out, f.topic)
            out.append(_I32.pack(len(f.partitions)))
            out.append(struct.pack(f">{len(f.partitions)}i", *f.partitions))
    if version >= 11:
        _string(out, rack_id)
    return b"".join(out)


def _encode_request_flexible(
    version: int,
    *,
    replica_id: int,
    head: tuple[int, int, int, int],
    session: tuple[int, int],
    partitions: Sequence[FetchRequestPartitionData],
    forgotten: Sequence[ForgottenTopic],
    rack_id: str,
    replica_epoch: int,
    cluster_id: str | None,
) -> bytes:
    if version >= FIRST_REPLICA_STATE:
        out = [_REQUEST_HEAD_V15.pack(*head)]
    else:
        out = [_REQUEST_HEAD.pack(replica_id, *head)]
    out.append(_SESSION.pack(*session))
    by_id = version >= FIRST_TOPIC_ID
    by_topic = _grouped_by_id(partitions) if by_id else _grouped(partitions)
    out.append(wire.uvarint(len(by_topic) + 1))
    for topic, parts in by_topic.items():
        out.append(topic.bytes if by_id else wire.compact_string(topic))
        out.append(wire.uvarint(len(parts) + 1))
        for p in parts:
            out.append(
                _REQUEST_PARTITION_V12.pack(
                    p.partition,
                    p.current_leader_epoch,
                    p.fetch_offset,
                    p.last_fetched_epoch,
                    p.log_start_offset,
                    p.partition_max_bytes,
                )
            )
            out.append(_EMPTY_TAGS)
        out.append(_EMPTY_TAGS)
    out.append(wire.uvarint(len(forgotten) + 1))
    for f in forgotten:
        if by_id:
            if f.topic_id is None:
                raise ValueError(f"forgotten topic {f.topic} has no topic id")
            out.append(f.topic_id.bytes)
        else:
            out.append(wire.compact_string(f.topic))
        out.append(wire.uvarint(len(f.partitions) + 1))
        out.append(struct.pack(f">{len(f.partitions)}i", *f.partitions))
        out.append(_EMPTY_TAGS)
    out.append(wire.compact_string(rack_id))
    tags = []
    if cluster_id is not None:
        tags.append((0, wire.compact_string(cluster_id)))
    if version >= FIRST_REPLICA_STATE and (replica_id != -1 or replica_epoch != -1):
        tags.append((1, _REPLICA_STATE.pack(replica_id, replica_epoch) + _EMPTY_TAGS))
    out.append(wire.tagged_fields(tags))
    return b"".join(out)


def _read_topic_key(
    data: bytes | memoryview, pos: int, by_id: bool
) -> tuple[str, uuid.UUID | None, int]:
    if by_id:
        topic_id, pos = wire.read_uuid(data, pos)
        return "", topic_id, pos
    topic, pos = wire.read_compact_string(data, pos)
    return topic, None, pos


# -- responses -----------------------------------------------------------------------------


def encode_fetch_response(
    version: int,
    partitions: Sequence[FetchResponsePartitionData],
    *,
    throttle_time_ms: int = 0,
    error_code: int = 0,
    session_id: int = 0,
    node_endpoints: Sequence[NodeEndpoint] = (),
) -> bytes:
    """The response body (no header); record sets are copied once, into the frame.

    ``node_endpoints`` (v16+) are the leaders named by partitions' ``current_leader``.
    """
    _check_version(version)
    if version >= FIRST_FLEXIBLE:
        return _encode_response_flexible(
            version, partitions, throttle_time_ms, error_code, session_id, node_endpoints
        )
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
            if p.aborted_transactions is None:
                out.append(_I32.pack(-1))  # aborted_transactions: null
            else:
                out.append(_I32.pack(len(p.aborted_transactions)))
                out.extend(_ABORTED.pack(*t) for t in p.aborted_transactions)
            if version >= 11:
                out.append(_I32.pack(p.preferred_read_replica))
            if p.records is None:
                out.append(_I32.pack(-1))
            else:
                out.append(_I32.pack(len(p.records)))
                out.append(p.records)
    return b"".join(out)


def _encode_response_flexible(
    version: int,
    partitions: Sequence[FetchResponsePartitionData],
    throttle_time_ms: int,
    error_code: int,
    session_id: int,
    node_endpoints: Sequence[NodeEndpoint],
) -> bytes:
    out = [_RESPONSE_HEAD.pack(throttle_time_ms, error_code, session_id)]
    by_id = version >= FIRST_TOPIC_ID
    by_topic = _grouped_by_id(partitions) if by_id else _grouped(partitions)
    uvarint = wire.uvarint
    out.append(uvarint(len(by_topic) + 1))
    for topic, parts in by_topic.items():
        out.append(topic.bytes if by_id else wire.compact_string(topic))
        out.append(uvarint(len(parts) + 1))
        for p in parts:
            if p.aborted_transactions is None:
                out.append(
                    _RESPONSE_PARTITION_HEAD_V12.pack(
                        p.partition,
                        p.error_code,
                        p.high_watermark,
                        p.last_stable_offset,
                        p.log_start_offset,
                        0,
                        p.preferred_read_replica,
                    )
                )
            else:
                out.append(
                    _RESPONSE_PARTITION_FIXED_V12.pack(
                        p.partition,
                        p.error_code,
                        p.high_watermark,
                        p.last_stable_offset,
                        p.log_start_offset,
                    )
                )
                out.append(uvarint(len(p.aborted_transactions) + 1))
                out.extend(_ABORTED.pack(*t) + _EMPTY_TAGS for t in p.aborted_transactions)
                out.append(_I32.pack(p.preferred_read_replica))
            if p.records is None:
                out.append(b"\x00")
            else:
                out.append(uvarint(len(p.records) + 1))
                out.append(p.records)
            if p.diverging_epoch is None and p.current_leader is None and p.snapshot_id is None:
                out.append(_EMPTY_TAGS)
            else:
                out.append(_partition_tags(p))
        out.append(_EMPTY_TAGS)
    if version >= FIRST_NODE_ENDPOINTS and node_endpoints:
        out.append(wire.tagged_fields([(0, wire.node_endpoints(node_endpoints))]))
    else:
        out.append(_EMPTY_TAGS)
    return b"".join(out)


def _partition_tags(p: FetchResponsePartitionData) -> bytes:
    """A partition's tagged fields, each written only when it is not its default (-1s)."""
    tags = []
    d = p.diverging_epoch
    if d is not None and (d.leader_epoch, d.end_offset) != (-1, -1):
        tags.append((0, _EPOCH_END_OFFSET.pack(d.leader_epoch, d.end_offset) + _EMPTY_TAGS))
    c = p.current_leader
    if c is not None and (c.leader_id, c.leader_epoch) != (-1, -1):
        tags.append((1, wire.leader_id_and_epoch(c)))
    s = p.snapshot_id
    if s is not None and (s.end_offset, s.epoch) != (-1, -1):
        tags.append((2, _SNAPSHOT_ID.pack(s.end_offset, s.epoch) + _EMPTY_TAGS))
    return wire.tagged_fields(tags)


def decode_fetch_response(
    version: int, data: bytes | memoryview, offset: int = 0
) -> FetchResponseData:
    """A response body starting at ``offset`` that must end where ``data`` ends."""
    _check_version(version)
    try:
        if version >= FIRST_FLEXIBLE:
            response, pos = _decode_response_flexible(version, data, offset)
        else:
            response, pos = _decode_response(version, data, offset)
    except (struct.error, IndexError) as exc:
        raise FetchCodecError(f"truncated Fetch v{version} response: {exc}") from None
    except FetchCodecError:
        raise
    except CodecError as exc:
        raise FetchCodecError(str(exc)) from None
    if pos != len(data):
        raise FetchCodecError(f"{len(data) - pos} trailing bytes after a Fetch v{version} body")
    return response


def decode_fetch_response_frame(version: int, frame: bytes | memoryview) -> FetchResponseData:
    """A whole response frame after its size prefix: the header (correlation id, then from
    v12 on the tagged fields of response header v1) and the body."""
    pos = 4
    if version >= FIRST_FLEXIBLE:
        try:
            pos = wire.skip_tagged_fields(frame, pos)
        except (struct.error, IndexError, CodecError) as exc:
            raise FetchCodecError(f"bad Fetch v{version} response header: {exc}") from None
    return decode_fetch_response(version, frame, pos)


def _decode_response(version: int, data: bytes | memoryview, pos: int):
    (throttle,) = _I32.unpack_from(data, pos)
    pos += 4
    error_code = session_id = 0
    if version >= 7:
        (error_code,) = _I16.unpack_from(data, pos)
        (session_id,) = _I32.unpack_from(data, pos + 2)
        pos += 6
    out: list[FetchResponsePartitionData] = []
    n_topics, pos = wire.read_array_count(data, pos)
    for _ in range(n_topics):
        topic, pos = wire.read_string(data, pos)
        n_parts, pos = wire.read_array_count(data, pos)
        for _ in range(n_parts):
            partition, error, hw, lso = _RESPONSE_PARTITION_HEAD.unpack_from(data, pos)
            pos += _RESPONSE_PARTITION_HEAD.size
            log_start = -1
            if version >= 5:
                (log_start,) = _I64.unpack_from(data, pos)
                pos += 8
            (n_aborted,) = _I32.unpack_from(data, pos)
            pos += 4
            if n_aborted < -1 or n_aborted * 16 > len(data) - pos:
                raise FetchCodecError(f"bad aborted transactions count {n_aborted}")
            if n_aborted > 0:
                pos += 16 * n_aborted
            preferred = -1
            if version >= 11:
                (preferred,) = _I32.unpack_from(data, pos)
                pos += 4
            records, pos = wire.read_nullable_bytes(data, pos)
            out.append(
                FetchResponsePartitionData(
                    topic, partition, error, hw, lso, log_start, records, preferred
                )
            )
    return FetchResponseData(error_code, out, throttle, session_id), pos


def _decode_response_flexible(version: int, data: bytes | memoryview, pos: int):
    throttle, error_code, session_id = _RESPONSE_HEAD.unpack_from(data, pos)
    pos += _RESPONSE_HEAD.size
    by_id = version >= FIRST_TOPIC_ID
    out: list[FetchResponsePartitionData] = []
    n_topics, pos = wire.read_compact_array_count(data, pos)
    for _ in range(n_topics):
        topic, topic_id, pos = _read_topic_key(data, pos, by_id)
        n_parts, pos = wire.read_compact_array_count(data, pos)
        for _ in range(n_parts):
            partition, error, hw, lso, log_start = _RESPONSE_PARTITION_FIXED_V12.unpack_from(
                data, pos
            )
            pos += _RESPONSE_PARTITION_FIXED_V12.size
            n_aborted, pos = wire.read_compact_length(data, pos)
            for _ in range(max(n_aborted, 0)):
                _ABORTED.unpack_from(data, pos)
                pos = wire.skip_tagged_fields(data, pos + _ABORTED.size)
            (preferred,) = _I32.unpack_from(data, pos)
            records, pos = wire.read_compact_nullable_bytes(data, pos + 4)
            diverging = leader = snapshot = None
            if data[pos] == 0:
                pos += 1
            else:
                fields, pos = wire.read_tagged_fields(data, pos)
                diverging, leader, snapshot = _read_partition_tags(data, fields)
            out.append(
                FetchResponsePartitionData(
                    topic,
                    partition,
                    error,
                    hw,
                    lso,
                    log_start,
                    records,
                    preferred,
                    topic_id,
                    diverging,
                    leader,
                    snapshot,
                )
            )
        pos = wire.skip_tagged_fields(data, pos)
    endpoints = None
    fields, pos = wire.read_tagged_fields(data, pos)
    for tag, start, end in fields:
        if tag == 0 and version >= FIRST_NODE_ENDPOINTS:
            endpoints, used_to = wire.read_node_endpoints(memoryview(data)[:end], start)
            wire.check_field_end(tag, used_to, end)
    return FetchResponseData(error_code, out, throttle, session_id, endpoints), pos


def _read_partition_tags(
    data: bytes | memoryview, fields: list[tuple[int, int, int]]
) -> tuple[EpochEndOffset | None, LeaderIdAndEpoch | None, SnapshotId | None]:
    diverging = leader = snapshot = None
    for tag, start, end in fields:
        # A known field's content may not run past its declared size.
        field = memoryview(data)[:end]
        if tag == 0:
            epoch, end_offset = _EPOCH_END_OFFSET.unpack_from(field, start)
            diverging = EpochEndOffset(epoch, end_offset)
            used_to = wire.skip_tagged_fields(field, start + _EPOCH_END_OFFSET.size)
        elif tag == 1:
            leader, used_to = wire.read_leader_id_and_epoch(field, start)
        elif tag == 2:
            end_offset, epoch = _SNAPSHOT_ID.unpack_from(field, start)
            snapshot = SnapshotId(end_offset, epoch)
            used_to = wire.skip_tagged_fields(field, start + _SNAPSHOT_ID.size)
        else:
            continue
        wire.check_field_end(tag, used_to, end)
    return diverging, leader, snapshot
