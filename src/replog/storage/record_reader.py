"""Decode the records of ONE batch: for timestamp lookups (ListOffsets), and for
the readers of a whole record (the group coordinator loading ``__consumer_offsets``,
the log cleaner).

The produce and fetch paths never come here: they move whole batches as bytes.
``offset_for_timestamp`` and ``max_timestamp_and_offset`` need the exact record,
so they decompress one batch (gzip, snappy in Kafka/xerial framing or raw,
lz4 frame, zstd) and read each record's timestamp and offset deltas;
``iter_records`` reads keys, values and headers too.
"""

from __future__ import annotations

import gzip
import io
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from replog.protocol.records import (
    ATTR_TIMESTAMP_TYPE,
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    HEADER_SIZE,
    BatchHeader,
    InvalidRecordBatch,
    read_varint,
)

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16  # magic + version int32 + compatible version int32
_INT32 = struct.Struct(">i")


def _snappy(data: bytes) -> bytes:
    import snappy

    if not data.startswith(_XERIAL_MAGIC):
        return snappy.uncompress(data)
    out = bytearray()
    pos = _XERIAL_HEADER_SIZE
    while pos < len(data):
        if pos + 4 > len(data):
            raise InvalidRecordBatch("truncated xerial snappy block length")
        (length,) = _INT32.unpack_from(data, pos)
        pos += 4
        if length < 0 or pos + length > len(data):
            raise InvalidRecordBatch("truncated xerial snappy block")
        out += snappy.uncompress(data[pos : pos + length])
        pos += length
    return bytes(out)


def decompress(codec: int, data: bytes) -> bytes:
    """The uncompressed records section of a batch compressed with ``codec``."""
    try:
        if codec == COMPRESSION_NONE:
            return data
        if codec == COMPRESSION_GZIP:
            return gzip.decompress(data)
        if codec == COMPRESSION_SNAPPY:
            return _snappy(data)
        if codec == COMPRESSION_LZ4:
            import lz4.frame

            return lz4.frame.decompress(data)
        if codec == COMPRESSION_ZSTD:
            import zstandard

            reader = zstandard.ZstdDecompressor().stream_reader(
                io.BytesIO(data), read_across_frames=True
            )
            return reader.read()
    except InvalidRecordBatch:
        raise
    except Exception as exc:  # each codec raises its own error type
        raise InvalidRecordBatch(f"cannot decompress codec {codec}: {exc}") from exc
    raise InvalidRecordBatch(f"unknown compression codec {codec}")


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Zigzag varint at ``pos`` -> (value, next position); InvalidRecordBatch if cut short."""
    try:
        return read_varint(buf, pos)
    except IndexError:
        raise InvalidRecordBatch("truncated varint in record") from None


@dataclass(frozen=True)
class DecodedRecord:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def _read_bytes(buf: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    length, pos = _read_varint(buf, pos)
    if length < 0:
        return None, pos
    if pos + length > end:
        raise InvalidRecordBatch("record field runs past the record")
    return buf[pos : pos + length], pos + length


def iter_records(batch: bytes | memoryview, header: BatchHeader) -> Iterator[DecodedRecord]:
    """Every record of ``batch`` (whole batch bytes, magic v2) with key, value and headers.

    A control batch's records are returned as they are (their key names the marker).
    """
    records = decompress(header.compression, bytes(batch[HEADER_SIZE : header.size]))
    log_append_time = bool(header.attributes & ATTR_TIMESTAMP_TYPE)
    pos = 0
    for _ in range(header.record_count):
        length, pos = _read_varint(records, pos)
        end = pos + length
        if length < 0 or end > len(records):
            raise InvalidRecordBatch("record length runs past the batch")
        body = pos + 1  # the record attributes byte is unused
        timestamp_delta, body = _read_varint(records, body)
        offset_delta, body = _read_varint(records, body)
        key, body = _read_bytes(records, body, end)
        value, body = _read_bytes(records, body, end)
        count, body = _read_varint(records, body)
        headers = []
        for _h in range(max(count, 0)):
            name, body = _read_bytes(records, body, end)
            hvalue, body = _read_bytes(records, body, end)
            headers.append(((name or b"").decode("utf-8", "replace"), hvalue))
        if body != end:
            raise InvalidRecordBatch("record length does not match its fields")
        timestamp = (
            header.max_timestamp if log_append_time else header.base_timestamp + timestamp_delta
        )
        yield DecodedRecord(
            header.base_offset + offset_delta, timestamp, key, value, tuple(headers)
        )
        pos = end


def iter_record_timestamps(batch: bytes, header: BatchHeader) -> Iterator[tuple[int, int]]:
    """Yield ``(offset, timestamp)`` of every record in ``batch`` (whole batch bytes).

    LogAppendTime batches report the batch's maxTimestamp for every record, as Kafka does.
    """
    for record in iter_records(batch, header):
        yield record.offset, record.timestamp
