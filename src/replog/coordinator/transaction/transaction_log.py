"""The records of ``__transaction_state``: Kafka's ``TransactionLogKey`` and
``TransactionLogValue``, byte for byte (Kafka ``TransactionLog``).

A record's key names a transactional id; its value is the whole state of that id
after one transition (it replaces the previous value, so the topic is compacted), and a
null value is a tombstone: the id expired (``transactional.id.expiration.ms``).

Key (never flexible): int16 version 0 (Kafka 4 calls it the coordinator record type,
``TRANSACTION_LOG`` = 0), then the transactional id as an int16-length string.

Value: int16 version, then

====  =========================================  ===================================
v0    ProducerId int64                           v1 writes the same fields, flexible:
      ProducerEpoch int16                        compact strings and arrays, an empty
      TransactionTimeoutMs int32                 tagged-field section after each
      TransactionStatus int8                     partitions entry, and at the end the
      TransactionPartitions nullable array of    tagged fields
        {Topic string, PartitionIds [int32]}       0 PreviousProducerId int64 (-1)
      TransactionLastUpdateTimestampMs int64       1 NextProducerId int64 (-1)
      TransactionStartTimestampMs int64            2 ClientTransactionVersion int16 (0)
====  =========================================  ===================================

A tagged field is written only when it differs from its default (in brackets), as
Kafka's generated code does; tags this module does not know (a later Kafka's) are
skipped when read. Kafka writes v1 once ``transaction.version`` is at least 1 (KIP-890)
and v0 before; v0 has no place for the tagged fields, so they are dropped when writing
it. Kafka 4.0 to 4.2 set only tag 2 (KAFKA-20310 added 0 and 1); both forms read alike.
An Empty transaction's partitions are written null and ignored when read.

kio ships the API messages but not these coordinator records, so they are written by
hand here, as ``coordinator.group``'s records are.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from replog.protocol import wire
from replog.protocol.wire import I16, I32, I64, CodecError

TopicPartition = tuple[str, int]

KEY_VERSION = 0  # Kafka 4: CoordinatorRecordType.TRANSACTION_LOG
VALUE_V0 = 0
VALUE_V1 = 1  # the first flexible version
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
EMPTY_STATUS = 0  # TransactionState.EMPTY's id: its partitions are written null

TAG_PREVIOUS_PRODUCER_ID = 0
TAG_NEXT_PRODUCER_ID = 1
TAG_CLIENT_TRANSACTION_VERSION = 2

_I8 = struct.Struct(">b")
MAX_STRING_BYTES = 32767


def value_version_for(transaction_version: int) -> int:
    """Kafka ``TransactionVersion.transactionLogValueVersion``: v1 from TV_1 on."""
    return VALUE_V1 if transaction_version >= 1 else VALUE_V0


@dataclass(frozen=True)
class TransactionLogValue:
    """One transactional id's state, as ``TransactionLogValue`` holds it."""

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: int  # TransactionState's id (metadata.TransactionState)
    # (topic, partition ids); None when written null (an Empty transaction's).
    transaction_partitions: tuple[tuple[str, tuple[int, ...]], ...] | None
    transaction_last_update_timestamp_ms: int
    transaction_start_timestamp_ms: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0

    def topic_partitions(self) -> frozenset[TopicPartition]:
        """The partitions of the transaction; none for an Empty one (Kafka ignores them)."""
        if self.transaction_status == EMPTY_STATUS or not self.transaction_partitions:
            return frozenset()
        return frozenset(
            (topic, p) for topic, partitions in self.transaction_partitions for p in partitions
        )


def group_partitions(
    partitions: Iterable[TopicPartition],
) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Partitions as the value's per-topic array, topics and partitions sorted."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return tuple((topic, tuple(sorted(by_topic[topic]))) for topic in sorted(by_topic))


# -- keys ---------------------------------------------------------------------------------


def encode_key(transactional_id: str) -> bytes:
    return I16.pack(KEY_VERSION) + wire.string(transactional_id)


def decode_key(data: bytes | None) -> str | None:
    """The transactional id of a key, or None for a key version this reader does not
    know (Kafka warns and skips such a record while loading). A record without a key
    has no place in the topic (Kafka: "Transaction state log's key should not be null")."""
    if data is None:
        raise CodecError("a __transaction_state record without a key")
    if len(data) < 2:
        raise CodecError("a __transaction_state key shorter than its version")
    (version,) = I16.unpack_from(data, 0)
    if version != KEY_VERSION:
        return None
    transactional_id, pos = wire.read_string(data, 2)
    if pos != len(data):
        raise CodecError(f"{len(data) - pos} bytes after a __transaction_state key")
    return transactional_id


# -- values -------------------------------------------------------------------------------


def encode_value(value: TransactionLogValue, version: int = VALUE_V1) -> bytes:
    if version not in (VALUE_V0, VALUE_V1):
        raise ValueError(f"TransactionLogValue has no version {version}")
    flexible = version >= VALUE_V1
    partitions = None if value.transaction_status == EMPTY_STATUS else value.transaction_partitions
    if value.transaction_status == EMPTY_STATUS and value.transaction_partitions:
        raise ValueError("an Empty transaction has no partitions")  # Kafka: IllegalStateException
    out = bytearray(I16.pack(version))
    out += I64.pack(value.producer_id)
    out += I16.pack(value.producer_epoch)
    out += I32.pack(value.transaction_timeout_ms)
    out += _I8.pack(value.transaction_status)
    if partitions is None:
        out += b"\x00" if flexible else I32.pack(-1)
    else:
        out += wire.uvarint(len(partitions) + 1) if flexible else I32.pack(len(partitions))
        for topic, ids in partitions:
            out += wire.compact_string(topic) if flexible else wire.string(topic)
            out += wire.uvarint(len(ids) + 1) if flexible else I32.pack(len(ids))
            for partition in ids:
                out += I32.pack(partition)
            if flexible:
                out += wire.EMPTY_TAGS
    out += I64.pack(value.transaction_last_update_timestamp_ms)
    out += I64.pack(value.transaction_start_timestamp_ms)
    if flexible:
        tags: list[tuple[int, bytes]] = []
        if value.previous_producer_id != NO_PRODUCER_ID:
            tags.append((TAG_PREVIOUS_PRODUCER_ID, I64.pack(value.previous_producer_id)))
        if value.next_producer_id != NO_PRODUCER_ID:
            tags.append((TAG_NEXT_PRODUCER_ID, I64.pack(value.next_producer_id)))
        if value.client_transaction_version != 0:
            tags.append(
                (TAG_CLIENT_TRANSACTION_VERSION, I16.pack(value.client_transaction_version))
            )
        out += wire.tagged_fields(tags)
    return bytes(out)


def decode_value(data: bytes | None) -> TransactionLogValue | None:
    """A value of version 0 or 1; None for a tombstone. Anything else is a CodecError."""
    if data is None:
        return None
    version, pos = _int(I16, data, 0)
    if version not in (VALUE_V0, VALUE_V1):
        raise CodecError(f"unknown TransactionLogValue version {version}")
    flexible = version >= VALUE_V1
    producer_id, pos = _int(I64, data, pos)
    producer_epoch, pos = _int(I16, data, pos)
    timeout_ms, pos = _int(I32, data, pos)
    status, pos = _int(_I8, data, pos)
    count, pos = _array_length(data, pos, flexible)
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    if count >= 0:
        entries = []
        for _ in range(count):
            if flexible:
                topic, pos = wire.read_compact_string(data, pos)
            else:
                topic, pos = wire.read_string(data, pos)
            n, pos = _array_length(data, pos, flexible)
            if n < 0:
                raise CodecError("null PartitionIds in a TransactionLogValue")
            ids = []
            for _ in range(n):
                partition, pos = _int(I32, data, pos)
                ids.append(partition)
            if flexible:
                pos = wire.skip_tagged_fields(data, pos)
            entries.append((topic, tuple(ids)))
        partitions = tuple(entries)
    last_update, pos = _int(I64, data, pos)
    start, pos = _int(I64, data, pos)
    previous_producer_id = next_producer_id = NO_PRODUCER_ID
    client_transaction_version = 0
    if flexible:
        fields, pos = wire.read_tagged_fields(data, pos)
        for tag, start_at, end in fields:
            if tag == TAG_PREVIOUS_PRODUCER_ID:
                previous_producer_id, used = _int(I64, data, start_at)
            elif tag == TAG_NEXT_PRODUCER_ID:
                next_producer_id, used = _int(I64, data, start_at)
            elif tag == TAG_CLIENT_TRANSACTION_VERSION:
                client_transaction_version, used = _int(I16, data, start_at)
            else:
                continue  # a later Kafka's field: skipped, as the protocol's rule says
            wire.check_field_end(tag, used, end)
    if pos != len(data):
        raise CodecError(f"{len(data) - pos} bytes after a TransactionLogValue")
    return TransactionLogValue(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transaction_timeout_ms=timeout_ms,
        transaction_status=status,
        transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=last_update,
        transaction_start_timestamp_ms=start,
        previous_producer_id=previous_producer_id,
        next_producer_id=next_producer_id,
        client_transaction_version=client_transaction_version,
    )


def _int(codec: struct.Struct, data: bytes, pos: int) -> tuple[int, int]:
    if pos + codec.size > len(data):
        raise CodecError("a TransactionLogValue ends early")
    return codec.unpack_from(data, pos)[0], pos + codec.size


def _array_length(data: bytes, pos: int, flexible: bool) -> tuple[int, int]:
    """An array's length, -1 for null; checked against the bytes left."""
    if flexible:
        return wire.read_compact_length(data, pos)
    n, pos = _int(I32, data, pos)
    if n < -1 or n > len(data) - pos:
        raise CodecError(f"bad array length {n} in a TransactionLogValue")
    return n, pos
