"""What the log cleaner keeps of one record batch (Kafka ``MemoryRecords.filterTo`` with
the cleaner's ``RecordFilter``).

A record is kept when it is past the offset map's latest offset, or it is the latest
record of its key (its offset is at least the map's) and is not a tombstone whose
batch's delete horizon has passed. Records without a key are dropped (a compacted log
cannot hold them). The batch keeps its base offset, lastOffsetDelta, producer id,
epoch, base sequence, partition leader epoch, compression and timestamp type: only its
record count, records, maxTimestamp and CRC change, so kept records keep their bytes
(their deltas stay valid). A batch that keeps every record is written as it was.

A batch that loses every record is dropped, except the last batch of an active
producer (its sequence number must survive a reload of the producer state) and the
batch ending the cleaned range (its last offset must survive): those stay as a
header with no records (Kafka ``BatchRetention.RETAIN_EMPTY``).

Tombstones (KIP-534): the first time a batch keeps a tombstone, the cleaner stamps the
batch's delete horizon (now + ``delete.retention.ms``) into its baseTimestamp and sets
the ``ATTR_DELETE_HORIZON`` attribute; record timestamp deltas are re-encoded so every
record's timestamp is unchanged. A later cleaning after the horizon drops the
tombstones. Transactions (``cleaner_txn``): an aborted transaction's batches go whole
(``empty_or_none``); a transaction marker stays as it is until ``cleaner_txn`` says it
may go, then gets its delete horizon stamped the same way, and goes in a cleaning past
it (``filter_control_batch``).

Pure: bytes and the offset map in, bytes out.
"""

from __future__ import annotations

import gzip
import struct
from dataclasses import dataclass

from replog.protocol.records import (
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    HEADER_SIZE,
    BatchHeader,
    InvalidRecordBatch,
    RecordSpan,
    build_batch,
    iter_record_spans,
    with_timestamp_delta,
)
from replog.storage.offset_map import OffsetMap
from replog.storage.record_reader import decompress

_XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # the Java client's SnappyOutputStream block size
_INT32 = struct.Struct(">i")


def compress(codec: int, data: bytes) -> bytes:
    """``data`` compressed as the Java client would: gzip, snappy in xerial framing, an LZ4
    frame with independent blocks and no checksums (Kafka ``KafkaLZ4BlockOutputStream``),
    or zstd."""
    if codec == COMPRESSION_NONE:
        return data
    if codec == COMPRESSION_GZIP:
        return gzip.compress(data)
    if codec == COMPRESSION_SNAPPY:
        import snappy

        out = bytearray(_XERIAL_HEADER)
        for start in range(0, len(data), _XERIAL_BLOCK):
            block = snappy.compress(data[start : start + _XERIAL_BLOCK])
            out += _INT32.pack(len(block)) + block
        return bytes(out)
    if codec == COMPRESSION_LZ4:
        import lz4.frame

        return lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    if codec == COMPRESSION_ZSTD:
        import zstandard

        return zstandard.ZstdCompressor().compress(data)
    raise InvalidRecordBatch(f"unknown compression codec {codec}")


def records_section(batch: bytes | memoryview, header: BatchHeader) -> bytes:
    """The uncompressed records of a whole batch."""
    return decompress(header.compression, bytes(batch[HEADER_SIZE : header.size]))


@dataclass(frozen=True, slots=True)
class FilterResult:
    """What is left of a batch: ``data`` to write (None: the batch goes), how many
    records it keeps, and the delete horizon of its kept tombstones (None if none)."""

    data: bytes | memoryview | None
    retained: int
    tombstone_horizon: int | None


def empty_batch(header: BatchHeader) -> bytes:
    """A header with no records keeping the batch's offsets and producer fields (Kafka
    ``DefaultRecordBatch.writeEmptyHeader``)."""
    attributes = header.attributes & (ATTR_TIMESTAMP_TYPE | ATTR_TRANSACTIONAL | ATTR_CONTROL)
    return build_batch(
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=header.last_offset_delta,
        base_timestamp=header.max_timestamp,
        max_timestamp=header.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        record_count=0,
        records=b"",
    )


def empty_or_none(header: BatchHeader, *, retain_empty: bool) -> FilterResult:
    """A batch whose records all go (an aborted transaction's): an empty header if it
    must stay (see the module docstring), else nothing."""
    return FilterResult(empty_batch(header) if retain_empty else None, 0, None)


def filter_control_batch(
    batch: bytes | memoryview,
    header: BatchHeader,
    *,
    can_discard: bool,
    retain_empty: bool,
    now_ms: int,
    delete_retention_ms: int,
) -> FilterResult:
    """A transaction marker: kept as it is while it is needed (``can_discard`` False);
    then stamped with its delete horizon, kept until it, and removed after (Kafka's
    ``checkBatchRetention`` for control batches). ``tombstone_horizon`` carries the
    horizon of a marker kept for it, so the log is cleaned again then."""
    horizon = header.delete_horizon_ms
    if not can_discard or header.record_count == 0:
        if can_discard:  # an emptied control batch
            return empty_or_none(header, retain_empty=retain_empty)
        return FilterResult(batch, header.record_count, None)
    if horizon is not None and horizon <= now_ms:
        return empty_or_none(header, retain_empty=retain_empty)
    if horizon is not None:
        return FilterResult(batch, header.record_count, horizon)
    records = records_section(batch, header)
    spans = list(iter_record_spans(records, header.record_count))
    horizon = now_ms + delete_retention_ms
    return FilterResult(_rebuild(records, header, spans, horizon), len(spans), horizon)


def filter_batch(
    batch: bytes | memoryview,
    header: BatchHeader,
    offset_map: OffsetMap,
    *,
    retain_empty: bool,
    now_ms: int,
    delete_retention_ms: int,
) -> FilterResult:
    """Keep the records of ``batch`` the cleaner keeps (see the module docstring)."""
    if header.is_control:
        return FilterResult(batch, header.record_count, None)
    records = records_section(batch, header)
    horizon = header.delete_horizon_ms
    latest = offset_map.latest_offset
    base = header.base_offset
    kept: list[RecordSpan] = []
    tombstones = False
    for span in iter_record_spans(records, header.record_count):
        offset = base + span[3]
        key = span[4]
        if offset > latest:
            keep = True
        elif key is None:
            keep = False
        else:
            keep = offset >= offset_map.get(key) and (
                span[5] or horizon is None or now_ms < horizon
            )
        if keep:
            kept.append(span)
            tombstones = tombstones or not span[5]
    stamp_horizon = tombstones and horizon is None
    if len(kept) == header.record_count and not stamp_horizon:
        return FilterResult(batch, len(kept), horizon if tombstones else None)
    if not kept:
        return FilterResult(empty_batch(header) if retain_empty else None, 0, None)
    new_horizon = now_ms + delete_retention_ms if stamp_horizon else horizon
    return FilterResult(
        _rebuild(records, header, kept, new_horizon), len(kept), new_horizon if tombstones else None
    )


def _rebuild(
    records: bytes, header: BatchHeader, kept: list[RecordSpan], horizon: int | None
) -> bytes:
    """A batch of the ``kept`` records, the header's other fields as they were."""
    base_timestamp = header.base_timestamp
    if horizon is not None and horizon != base_timestamp:  # stamp it, re-encoding deltas
        section = b"".join(
            with_timestamp_delta(records, span, base_timestamp + span[2] - horizon) for span in kept
        )
        base_timestamp = horizon
    else:
        section = b"".join(records[span[0] : span[1]] for span in kept)
    if header.attributes & ATTR_TIMESTAMP_TYPE:  # LogAppendTime: the batch's time stands
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = max(header.base_timestamp + span[2] for span in kept)
    attributes = header.attributes | (ATTR_DELETE_HORIZON if horizon is not None else 0)
    return build_batch(
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=header.last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        record_count=len(kept),
        records=compress(header.compression, section),
    )
