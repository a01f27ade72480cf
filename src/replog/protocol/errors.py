"""The errors several layers raise, and their Kafka error codes.

Errors that several layers raise live at the bottom, beside the error codes: the
log's errors (raised by ``storage``, answered by ``replication`` and the request
handlers) are defined here, and the record-batch errors of ``protocol.records`` are
mapped here. Any layer that answers a client (the replica manager, the request
handlers) turns one into its code with :func:`error_code_for`.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog.protocol.records import CorruptRecordBatch, InvalidRecord, InvalidRecordBatch

__all__ = [
    "InconsistentTopicId",
    "InvalidProducerEpoch",
    "InvalidTxnState",
    "OffsetOutOfRange",
    "OutOfOrderSequence",
    "RecordTooLarge",
    "TransactionCoordinatorFenced",
    "error_code_for",
]


class OffsetOutOfRange(Exception):
    """A read outside ``[log_start_offset, log_end_offset]`` (Kafka OFFSET_OUT_OF_RANGE)."""


class RecordTooLarge(Exception):
    """A batch larger than ``max.message.bytes`` (Kafka MESSAGE_TOO_LARGE)."""


class OutOfOrderSequence(Exception):
    """A batch whose sequence does not follow the producer's last one (Kafka OUT_OF_ORDER_SEQUENCE_NUMBER)."""


class InvalidProducerEpoch(Exception):
    """A batch from a fenced (older) producer epoch (Kafka INVALID_PRODUCER_EPOCH)."""


class InvalidTxnState(Exception):
    """A plain batch from a producer whose transaction on the partition is open (Kafka
    INVALID_TXN_STATE)."""


class TransactionCoordinatorFenced(Exception):
    """A transaction marker from an older coordinator epoch than the producer's last one
    (Kafka TRANSACTION_COORDINATOR_FENCED)."""


class InconsistentTopicId(Exception):
    """A partition's log belongs to another topic id than the one it is asked to serve
    (Kafka ``InconsistentTopicIdException``, error INCONSISTENT_TOPIC_ID)."""


_CODES: list[tuple[type[BaseException], ErrorCode]] = [
    (CorruptRecordBatch, ErrorCode.corrupt_message),
    (InvalidRecordBatch, ErrorCode.corrupt_message),
    (InvalidRecord, ErrorCode.invalid_record),
    (RecordTooLarge, ErrorCode.message_too_large),
    (OutOfOrderSequence, ErrorCode.out_of_order_sequence_number),
    (InvalidProducerEpoch, ErrorCode.invalid_producer_epoch),
    (InvalidTxnState, ErrorCode.invalid_txn_state),
    (TransactionCoordinatorFenced, ErrorCode.transaction_coordinator_fenced),
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
