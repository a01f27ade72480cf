"""The transactions whose markers are being written, and what their answers lead to
(the bookkeeping of Kafka ``TransactionMarkerChannelManager`` and
``TransactionMarkerRequestCompletionHandler``), without IO.

After a PrepareCommit/PrepareAbort record is written (or found on load), the completion
is prepared (the id's pending state is CompleteCommit/CompleteAbort: its requests get
CONCURRENT_TRANSACTIONS) and ``send`` asks for one marker per partition. Each
partition's answer:

================================================================  =========================
NONE                                                              written: removed from
                                                                  those waiting
UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,               sent again (to the
NOT_ENOUGH_REPLICAS(_AFTER_APPEND), REQUEST_TIMED_OUT,             partition's leader then)
KAFKA_STORAGE_ERROR
INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED            given up here: a newer
                                                                  producer or coordinator
UNSUPPORTED_FOR_MESSAGE_FORMAT, UNSUPPORTED_VERSION               removed (the producer
                                                                  could not write there)
anything else (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, ...)           raises: Kafka's fatal
================================================================  =========================

A marker asked again (a retriable error, or a request without an answer) carries one
``attempt`` more than the one it answers, and the channel waits
``marker_retry_backoff_ms(attempt)`` before sending it: 100 ms doubling up to 1 s, as
``retry.backoff.ms`` / ``retry.backoff.max.ms`` (KIP-580), instead of asking a leader
under ``min.insync.replicas`` again at once, round after round, until its ISR grows
back. A marker that succeeds on some partitions of a broker and fails on others is
retried only for the failed ones.

When no partition is left, CompleteCommit/CompleteAbort is appended; on
COORDINATOR_NOT_AVAILABLE it is appended again (Kafka's retry queue), on NOT_COORDINATOR
or COORDINATOR_LOAD_IN_PROGRESS dropped (the next coordinator completes the transaction
when it loads), on any other error raises. Answers for a coordinator epoch that is not
the current one are ignored and their transaction forgotten here.

Concurrency: owned by the coordinator's event loop; no method awaits.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from replog.coordinator.transaction.effects import (
    AppendPurpose,
    AppendTxnState,
    Outcome,
    SendTxnMarkers,
    TransactionResult,
)
from replog.coordinator.transaction.metadata import (
    IllegalStateTransition,
    TransactionMetadata,
    TxnTransitMetadata,
)
from replog.coordinator.transaction.state_manager import TransactionStateManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

_MARKER_RETRY = frozenset(
    {
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_leader_or_follower,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
        ErrorCode.kafka_storage_error,
    }
)
_MARKER_GIVE_UP = frozenset(
    {ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced}
)
_MARKER_SKIP = frozenset({ErrorCode.unsupported_for_message_format, ErrorCode.unsupported_version})


@dataclass
class PendingCompleteTxn:
    """A transaction whose markers are being written (Kafka ``PendingCompleteTxn``)."""

    transactional_id: str
    coordinator_epoch: int
    metadata: TransactionMetadata
    complete: TxnTransitMetadata
    result: TransactionResult


class PendingMarkers:
    """The transactions with markers to write, by transactional id (Kafka
    ``transactionsWithPendingMarkers``)."""

    def __init__(self, state: TransactionStateManager) -> None:
        self.state = state
        self.pending: dict[str, PendingCompleteTxn] = {}

    def drop_partition(self, partition: int) -> None:
        """Forget the transactions of a ``__transaction_state`` partition no longer led
        here (Kafka ``removeMarkersForTxnTopicPartition``)."""
        for tid in [t for t in self.pending if self.state.partition_for(t) == partition]:
            del self.pending[tid]

    def completion_appended(self, append: AppendTxnState, append_error: ErrorCode) -> Outcome:
        error = self.state.finish_append(
            append, append_error, retry_on=ErrorCode.coordinator_not_available
        )
        if error is ErrorCode.coordinator_not_available:
            return Outcome(appends=(append,))  # Kafka's txnLogAppendRetryQueue
        if error in (
            ErrorCode.none,
            ErrorCode.not_coordinator,
            ErrorCode.coordinator_load_in_progress,
        ):
            return Outcome()
        raise IllegalStateTransition(
            f"{append.transactional_id}: completing the transaction failed with {error.name}"
        )

    def send(
        self,
        coordinator_epoch: int,
        md: TransactionMetadata,
        complete: TxnTransitMetadata,
        result: TransactionResult,
    ) -> Outcome:
        """Kafka ``addTxnMarkersToSend``."""
        tid = md.transactional_id
        self.pending[tid] = PendingCompleteTxn(tid, coordinator_epoch, md, complete, result)
        if not md.topic_partitions:
            return self._maybe_write_completion(tid)
        marker = SendTxnMarkers(
            tid,
            coordinator_epoch,
            md.producer_id,
            md.producer_epoch,
            result,
            frozenset(md.topic_partitions),
        )
        return Outcome(markers=(marker,))

    def written(
        self,
        marker: SendTxnMarkers,
        errors: Mapping[TopicPartition, ErrorCode],
    ) -> Outcome:
        """A WriteTxnMarkers response's errors for ``marker``'s partitions on one broker."""
        pending = self._pending_for(marker)
        if pending is None:
            return Outcome()
        md = pending.metadata
        retry = set()
        for tp, error in errors.items():
            if error is ErrorCode.none or error in _MARKER_SKIP:
                md.remove_partition(tp)
            elif error in _MARKER_RETRY:
                log.info(
                    "%s: marker for %s failed (%s), retrying",
                    marker.transactional_id,
                    tp,
                    error.name,
                )
                retry.add(tp)
            elif error in _MARKER_GIVE_UP:
                log.info("%s: marker for %s refused (%s)", marker.transactional_id, tp, error.name)
                self.pending.pop(marker.transactional_id, None)
                return Outcome()
            else:
                raise IllegalStateTransition(
                    f"{marker.transactional_id}: unexpected {error.name} writing a marker to {tp}"
                )
        if retry:
            return Outcome(markers=(_resend(marker, retry),))
        return self._maybe_write_completion(marker.transactional_id)

    def undelivered(self, marker: SendTxnMarkers) -> Outcome:
        """The request carrying ``marker`` got no answer (its broker disconnected): send it
        again, to the partitions' current leaders, unless the coordinator moved on."""
        if self._pending_for(marker) is None:
            return Outcome()
        return Outcome(markers=(_resend(marker, marker.partitions),))

    def partitions_deleted(
        self, marker: SendTxnMarkers, partitions: Iterable[TopicPartition]
    ) -> Outcome:
        """Partitions with no leader at all are taken as deleted: no marker is needed."""
        pending = self._pending_for(marker)
        if pending is None:
            return Outcome()
        for tp in partitions:
            pending.metadata.remove_partition(tp)
        return self._maybe_write_completion(marker.transactional_id)

    def _pending_for(self, marker: SendTxnMarkers) -> PendingCompleteTxn | None:
        """The pending completion ``marker`` is for, if this coordinator still owns it at
        the marker's epoch; otherwise it is forgotten."""
        found = self.state.lookup(marker.transactional_id)
        pending = self.pending.get(marker.transactional_id)
        if found.error is not ErrorCode.none or found.coordinator_epoch != marker.coordinator_epoch:
            if pending is not None and pending.coordinator_epoch == marker.coordinator_epoch:
                del self.pending[marker.transactional_id]
            return None
        if found.metadata is None:
            raise IllegalStateTransition(f"{marker.transactional_id} owned here but not cached")
        if pending is None or pending.metadata is not found.metadata:
            return None
        return pending

    def _maybe_write_completion(self, transactional_id: str) -> Outcome:
        pending = self.pending.get(transactional_id)
        if pending is None or pending.metadata.topic_partitions:
            return Outcome()
        del self.pending[transactional_id]
        found = self.state.lookup(transactional_id)
        if (
            found.error is not ErrorCode.none
            or found.coordinator_epoch != pending.coordinator_epoch
        ):
            return Outcome()  # the next coordinator completes it when it loads
        effect = self.state.append_effect(
            pending.metadata,
            pending.coordinator_epoch,
            pending.complete,
            AppendPurpose.COMPLETE_TXN,
            pending.result,
        )
        return Outcome(appends=(effect,))


def _resend(marker: SendTxnMarkers, partitions: Iterable[TopicPartition]) -> SendTxnMarkers:
    """``marker`` asked again for ``partitions``: one attempt more, so that the channel
    backs off before sending it (``marker_retry_backoff_ms``)."""
    return SendTxnMarkers(
        marker.transactional_id,
        marker.coordinator_epoch,
        marker.producer_id,
        marker.producer_epoch,
        marker.result,
        frozenset(partitions),
        attempt=marker.attempt + 1,
    )
