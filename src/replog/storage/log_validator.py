"""The checks of an append, before anything is written (Kafka ``LogValidator``).

A leader append is all or nothing: every batch's header, CRC32C and size are checked,
and a compacted log's records must carry keys, before the log patches offsets and
writes. A follower append takes offsets as the leader assigned them, so only their
order is checked.

Pure: functions over the request's bytes and the log's figures; no IO.
"""

from __future__ import annotations

from replog.protocol.errors import RecordTooLarge
from replog.protocol.records import (
    HEADER_SIZE,
    BatchHeader,
    InvalidRecord,
    InvalidRecordBatch,
    iter_batches,
    iter_record_spans,
)
from replog.storage.record_reader import decompress

__all__ = [
    "UnexpectedAppendOffset",
    "check_follower_offsets",
    "check_keys",
    "validate_batches",
]

Batches = list[tuple[int, BatchHeader]]
"""``(position in the request, header)`` of each batch."""


class UnexpectedAppendOffset(Exception):
    """A follower append that does not start at the log end offset."""


def validate_batches(
    records: bytes | bytearray | memoryview, *, name: str, max_message_bytes: int | None
) -> Batches:
    """Every batch's header and CRC; for a leader append (``max_message_bytes`` given)
    also its size and record count. Raises before the caller writes anything."""
    batches = []
    for pos, h in iter_batches(records, verify=True):
        if max_message_bytes is not None:
            if h.size > max_message_bytes:
                raise RecordTooLarge(
                    f"{name}: batch of {h.size} bytes exceeds max.message.bytes {max_message_bytes}"
                )
            if h.record_count < 1 or h.record_count != h.last_offset_delta + 1:
                raise InvalidRecordBatch(
                    f"batch has {h.record_count} records but lastOffsetDelta {h.last_offset_delta}"
                )
        batches.append((pos, h))
    return batches


def check_keys(records: bytes | bytearray, batches: Batches, *, name: str) -> None:
    """A compacted log refuses records without a key (Kafka ``LogValidator``)."""
    for pos, h in batches:
        if h.is_control:
            continue
        section = decompress(h.compression, bytes(records[pos + HEADER_SIZE : pos + h.size]))
        for span in iter_record_spans(section, h.record_count):
            if span[4] is None:
                raise InvalidRecord(
                    f"Compacted topic cannot accept message without key in topic partition {name}."
                )


def check_follower_offsets(batches: Batches, log_end_offset: int, *, name: str) -> None:
    """A follower's batches start at or past the log end offset (past it after a gap the
    leader's cleaner left) and their offsets increase."""
    if batches[0][1].base_offset < log_end_offset:
        raise UnexpectedAppendOffset(
            f"{name}: follower append starts at {batches[0][1].base_offset}, "
            f"log end offset is {log_end_offset}"
        )
    expected = log_end_offset
    for _, h in batches:
        if h.base_offset < expected:
            raise InvalidRecordBatch(f"{name}: out of order offsets at {h.base_offset}")
        expected = h.next_offset
