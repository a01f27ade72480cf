"""Kafka error codes for replog's exceptions.

Errors that several layers raise live at the bottom, beside the error codes: the
record-batch errors of ``protocol.records`` and the log's errors of ``storage``. Any
layer that answers a client (the replica manager, the request handlers) turns one into
its code with :func:`error_code_for`.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog.protocol.records import CorruptRecordBatch, InvalidRecord, InvalidRecordBatch
from replog.storage.log import OffsetOutOfRange, RecordTooLarge
from replog.storage.partition_metadata import InconsistentTopicId
from replog.storage.producer_state import InvalidProducerEpoch, OutOfOrderSequence

__all__ = ["error_code_for"]

_CODES: list[tuple[type[BaseException], ErrorCode]] = [
    (CorruptRecordBatch, ErrorCode.corrupt_message),
    (InvalidRecordBatch, ErrorCode.corrupt_message),
    (InvalidRecord, ErrorCode.invalid_record),
    (RecordTooLarge, ErrorCode.message_too_large),
    (OutOfOrderSequence, ErrorCode.out_of_order_sequence_number),
    (InvalidProducerEpoch, ErrorCode.invalid_producer_epoch),
    (OffsetOutOfRange, ErrorCode.offset_out_of_range),
    (InconsistentTopicId, ErrorCode.inconsistent_topic_id),
    # A log directory that cannot be written (full, read-only, failing): Kafka's answer
    # for an IOException in its log layer (network OSErrors are not storage's).
    (TimeoutError, ErrorCode.request_timed_out),
    (ConnectionError, ErrorCode.network_exception),
    (OSError, ErrorCode.kafka_storage_error),
]


def error_code_for(exc: BaseException) -> ErrorCode:
    """The Kafka error code for ``exc``; UNKNOWN_SERVER_ERROR for anything unexpected."""
    for cls, code in _CODES:
        if isinstance(exc, cls):
            return code
    return ErrorCode.unknown_server_error
