"""What the transaction coordinator's decisions ask the broker to do.

The core (``coordinator``, ``state_manager``) never appends, sends or sleeps: each call
returns an ``Outcome`` holding the answer to the request (or None while the answer waits
for an append), the records to append to ``__transaction_state`` and the transaction
markers to send. The broker carries them out and reports back:

- ``AppendTxnState``: append one record to ``__transaction_state-<partition>`` with
  acks=-1 and no compression (``TransactionLog.EnforcedRequiredAcks``), bounded by
  ``timeout_ms``; then call ``TransactionCoordinator.append_completed(effect, error,
  now_ms)``. Immediately before appending, with no await in between, check
  ``TransactionCoordinator.can_append(effect)`` (Kafka holds its state lock across the
  append for the same reason: a record of an old coordinator epoch must not land after a
  new leader loaded the partition); when it is False, report NOT_COORDINATOR.
- ``AppendTombstones``: append null-valued records (expired transactional ids), then
  call ``tombstones_appended(effect, error)``.
- ``SendTxnMarkers``: a WriteTxnMarkers entry (Kafka ``TxnMarkerEntry``) for each
  partition leader; report each partition's result with ``markers_written``, a lost
  connection with ``markers_undelivered``, partitions without a leader (deleted) with
  ``markers_partitions_deleted``; every request once (as Kafka's completion handler
  runs once per request), since the core matches answers by transactional id. A
  marker with ``attempt`` above 0 is the core asking again after a retriable error
  or a lost request: send it only after ``marker_retry_backoff_ms(attempt)``.
- ``needs_producer_id``: InitProducerId needs a new producer id; allocate one (the
  broker's ``ProducerIdManager``, blocks from ``/latest_producer_id_block``) and call
  again with ``new_producer_id``. The state is checked again then, so an await between
  the two calls is safe; an id the second call does not use is skipped, as in Kafka.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from replog.coordinator.transaction.metadata import TxnTransitMetadata

TopicPartition = tuple[str, int]
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


class TransactionResult(enum.Enum):
    """Kafka ``TransactionResult``: what EndTxn asks for and a marker writes."""

    ABORT = 0
    COMMIT = 1

    @property
    def committed(self) -> bool:
        return self is TransactionResult.COMMIT


class AppendPurpose(enum.Enum):
    """Why a record is appended, which says what follows its append."""

    INIT_PRODUCER_ID = "init_producer_id"  # answer InitProducerId with the new id/epoch
    ADD_PARTITIONS = "add_partitions"  # answer AddPartitionsToTxn / AddOffsetsToTxn
    END_TXN = "end_txn"  # answer EndTxn, then send the markers
    FENCE_ABORT = "fence_abort"  # InitProducerId fenced an Ongoing one: CONCURRENT_TRANSACTIONS
    TIMEOUT_ABORT = "timeout_abort"  # a timed-out transaction: nobody waits
    COMPLETE_TXN = "complete_txn"  # every marker written: CompleteCommit / CompleteAbort


@dataclass(frozen=True)
class AppendTxnState:
    transactional_id: str
    partition: int  # of __transaction_state
    coordinator_epoch: int
    transit: TxnTransitMetadata
    purpose: AppendPurpose
    key: bytes
    value: bytes
    timeout_ms: int  # Kafka bounds the append by the transaction's timeout
    result: TransactionResult | None = None  # for the EndTxn kinds and COMPLETE_TXN
    is_epoch_fence: bool = False


@dataclass(frozen=True)
class AppendTombstones:
    partition: int
    coordinator_epoch: int
    # (transactional id, producer epoch when its Dead transition was prepared)
    expired: tuple[tuple[str, int], ...]
    keys: tuple[bytes, ...]
    timeout_ms: int  # request.timeout.ms


@dataclass(frozen=True)
class SendTxnMarkers:
    transactional_id: str
    coordinator_epoch: int
    producer_id: int
    producer_epoch: int
    result: TransactionResult
    partitions: frozenset[TopicPartition]
    attempt: int = 0  # 0: first send; n: the n-th time these partitions are asked again


# Kafka's client defaults for ``retry.backoff.ms`` and ``retry.backoff.max.ms`` (KIP-580)
MARKER_RETRY_BACKOFF_MS = 100
MARKER_RETRY_BACKOFF_MAX_MS = 1000


def marker_retry_backoff_ms(
    attempt: int,
    backoff_ms: int = MARKER_RETRY_BACKOFF_MS,
    max_backoff_ms: int = MARKER_RETRY_BACKOFF_MAX_MS,
) -> int:
    """How long to wait before the ``attempt``-th resend of a marker: none for the first
    send, then ``backoff_ms`` doubling with each attempt up to ``max_backoff_ms``
    (KIP-580's exponential backoff, without its jitter: the core stays deterministic)."""
    if attempt <= 0:
        return 0
    return min(max_backoff_ms, backoff_ms << min(attempt - 1, 30))


@dataclass(frozen=True)
class Answer:
    """The answer to a request: an error code, the producer id and epoch (InitProducerId,
    EndTxn) and, for AddPartitionsToTxn, an error per partition when they differ."""

    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    partition_errors: Mapping[TopicPartition, ErrorCode] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    answer: Answer | None = None
    appends: tuple[AppendTxnState | AppendTombstones, ...] = ()
    markers: tuple[SendTxnMarkers, ...] = ()
    needs_producer_id: bool = False

    def __add__(self, other: Outcome) -> Outcome:
        """Both outcomes' effects; the answer is the first one given."""
        return Outcome(
            self.answer if self.answer is not None else other.answer,
            self.appends + other.appends,
            self.markers + other.markers,
            self.needs_producer_id or other.needs_producer_id,
        )


def answer(error: ErrorCode, producer_id: int = NO_PRODUCER_ID, epoch: int = -1) -> Outcome:
    return Outcome(Answer(error, producer_id, epoch))
