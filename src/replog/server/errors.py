"""Mapping from replog's exceptions to Kafka error codes."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog.protocol.records import CorruptRecordBatch, InvalidRecordBatch
from replog.storage.log import (
    InvalidProducerEpoch,
    OffsetOutOfRange,
    OutOfOrderSequence,
    RecordTooLarge,
)

_CODES: list[tuple[type[BaseException], ErrorCode]] = [
    (CorruptRecordBatch, ErrorCode.corrupt_message),
    (InvalidRecordBatch, ErrorCode.corrupt_message),
    (RecordTooLarge, ErrorCode.message_too_large),
    (OutOfOrderSequence, ErrorCode.out_of_order_sequence_number),
    (InvalidProducerEpoch, ErrorCode.invalid_producer_epoch),
    (OffsetOutOfRange, ErrorCode.offset_out_of_range),
]


def error_code_for(exc: BaseException) -> ErrorCode:
    for cls, code in _CODES:
        if isinstance(exc, cls):
            return code
    return ErrorCode.unknown_server_error
