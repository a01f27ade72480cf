"""The transactional ids this broker coordinates, per ``__transaction_state`` partition
(Kafka ``TransactionStateManager``), without IO.

A partition is here while this broker leads it: first LOADING (requests for its ids get
COORDINATOR_LOAD_IN_PROGRESS) from ``begin_loading`` until ``complete_loading`` is given
its records, then loaded at the leader epoch it was loaded with, the coordinator epoch.
An id in a partition not here gets NOT_COORDINATOR. ``unload`` forgets a partition when
this broker stops leading it.

Loading replays the partition's records from its log start offset up to its high
watermark, in offset order (the broker reads them; Kafka ``loadTransactionMetadata``): a
value replaces the id's state, a tombstone removes it, a key of an unknown version is
skipped with a warning; a value that does not decode stops the load (``CodecError``).

Appends: ``append_effect`` builds the record of a prepared transition;
``finish_append`` completes the transition when the record is in the log, or drops the
pending state when it is not, with Kafka's mapping of append errors to coordinator
errors (``appendTransactionToLog``):

===================================================  =========================
append error                                         coordinator error
===================================================  =========================
UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS,     COORDINATOR_NOT_AVAILABLE
NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT
NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR          NOT_COORDINATOR
MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE             UNKNOWN_SERVER_ERROR
any other                                            itself
===================================================  =========================

Concurrency: owned by the event loop of the coordinator; no method awaits.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from replog.coordinator.transaction import transaction_log as txlog
from replog.coordinator.transaction.effects import (
    AppendPurpose,
    AppendTombstones,
    AppendTxnState,
    TransactionResult,
)
from replog.coordinator.transaction.metadata import (
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)
from replog.coordinator.transaction.transaction_topic import TransactionConfig, partition_for

log = logging.getLogger(__name__)

APPEND_ERRORS = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.message_too_large: ErrorCode.unknown_server_error,
    ErrorCode.record_list_too_large: ErrorCode.unknown_server_error,
}


@dataclass
class TxnPartition:
    """One ``__transaction_state`` partition led here (Kafka ``TxnMetadataCacheEntry``)."""

    partition: int
    coordinator_epoch: int
    loading: bool = True
    metadata: dict[str, TransactionMetadata] = field(default_factory=dict)


@dataclass(frozen=True)
class Lookup:
    """A transactional id's metadata, or why there is none: ``error`` is NONE with
    ``metadata`` None when this coordinator owns the id but does not know it."""

    error: ErrorCode
    coordinator_epoch: int = -1
    metadata: TransactionMetadata | None = None


@dataclass(frozen=True)
class LoadedPrepare:
    """A transaction found in PrepareCommit/PrepareAbort on load: its completion is
    prepared and its markers must be sent again."""

    metadata: TransactionMetadata
    result: TransactionResult
    complete: TxnTransitMetadata


class TransactionStateManager:
    def __init__(self, config: TransactionConfig) -> None:
        self.config = config
        self.partitions: dict[int, TxnPartition] = {}

    # -- ownership --------------------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.transaction_log_num_partitions)

    def lookup(self, transactional_id: str) -> Lookup:
        """Kafka ``getTransactionState``."""
        entry = self.partitions.get(self.partition_for(transactional_id))
        if entry is None:
            return Lookup(ErrorCode.not_coordinator)
        if entry.loading:
            return Lookup(ErrorCode.coordinator_load_in_progress)
        return Lookup(ErrorCode.none, entry.coordinator_epoch, entry.metadata.get(transactional_id))

    def put_if_absent(self, metadata: TransactionMetadata) -> Lookup:
        """Kafka ``putTransactionStateIfNotExists``: the metadata now cached for the id."""
        found = self.lookup(metadata.transactional_id)
        if found.error is not ErrorCode.none or found.metadata is not None:
            return found
        entry = self.partitions[self.partition_for(metadata.transactional_id)]
        entry.metadata[metadata.transactional_id] = metadata
        return Lookup(ErrorCode.none, entry.coordinator_epoch, metadata)

    def owns(self, partition: int, coordinator_epoch: int) -> bool:
        entry = self.partitions.get(partition)
        return entry is not None and entry.coordinator_epoch == coordinator_epoch

    def loaded(self) -> Iterator[TxnPartition]:
        return (entry for entry in self.partitions.values() if not entry.loading)

    # -- loading --------------------------------------------------------------------------

    def begin_loading(self, partition: int, coordinator_epoch: int) -> None:
        """This broker became the partition's leader at ``coordinator_epoch``; whatever
        an earlier term left here is dropped (Kafka ``onElection``)."""
        self.partitions[partition] = TxnPartition(partition, coordinator_epoch)

    def complete_loading(
        self,
        partition: int,
        coordinator_epoch: int,
        records: Iterable[tuple[bytes, bytes | None]],
        now_ms: int,
    ) -> list[LoadedPrepare]:
        """Install the state replayed from ``records`` (key, value) if the partition is
        still loading at that epoch; return the transactions whose markers must be sent
        again, their completion already prepared. Empty if the load is stale."""
        loaded: dict[str, TransactionMetadata] = {}
        for key, value in records:
            transactional_id = txlog.decode_key(key)
            if transactional_id is None:
                log.warning("__transaction_state-%d: a key of unknown version, skipped", partition)
                continue
            decoded = txlog.decode_value(value)
            if decoded is None:
                loaded.pop(transactional_id, None)
            else:
                loaded[transactional_id] = TransactionMetadata.from_log_value(
                    transactional_id, decoded
                )
        entry = self.partitions.get(partition)
        if entry is None or not entry.loading or entry.coordinator_epoch != coordinator_epoch:
            log.info(
                "__transaction_state-%d: load at epoch %d is stale", partition, coordinator_epoch
            )
            return []
        entry.metadata = loaded
        entry.loading = False
        pending = []
        for metadata in loaded.values():
            if metadata.state is TransactionState.PREPARE_COMMIT:
                result = TransactionResult.COMMIT
            elif metadata.state is TransactionState.PREPARE_ABORT:
                result = TransactionResult.ABORT
            else:
                continue
            pending.append(LoadedPrepare(metadata, result, metadata.prepare_complete(now_ms)))
        log.info(
            "__transaction_state-%d loaded at epoch %d: %d transactional ids, %d to complete",
            partition,
            coordinator_epoch,
            len(loaded),
            len(pending),
        )
        return pending

    def unload(self, partition: int, coordinator_epoch: int | None = None) -> bool:
        """Forget the partition (this broker no longer leads it). With an epoch, only that
        term's state is dropped (Kafka ``removeTransactionsForTxnTopicPartition``)."""
        entry = self.partitions.get(partition)
        if entry is None:
            return False
        if coordinator_epoch is not None and entry.coordinator_epoch != coordinator_epoch:
            return False
        del self.partitions[partition]
        return True

    # -- appends --------------------------------------------------------------------------

    def append_effect(
        self,
        metadata: TransactionMetadata,
        coordinator_epoch: int,
        transit: TxnTransitMetadata,
        purpose: AppendPurpose,
        result: TransactionResult | None = None,
        is_epoch_fence: bool = False,
    ) -> AppendTxnState:
        version = txlog.value_version_for(self.config.transaction_version)
        value = transit.to_log_value()
        return AppendTxnState(
            transactional_id=metadata.transactional_id,
            partition=self.partition_for(metadata.transactional_id),
            coordinator_epoch=coordinator_epoch,
            transit=transit,
            purpose=purpose,
            key=txlog.encode_key(metadata.transactional_id),
            value=txlog.encode_value(value, version),
            timeout_ms=transit.txn_timeout_ms,
            result=result,
            is_epoch_fence=is_epoch_fence,
        )

    def finish_append(
        self, append: AppendTxnState, append_error: ErrorCode, retry_on: ErrorCode | None = None
    ) -> ErrorCode:
        """Complete or roll back ``append``'s transition; the coordinator's error. With
        ``retry_on``, that error keeps the pending state for the caller to append again."""
        error = APPEND_ERRORS.get(append_error, append_error)
        found = self.lookup(append.transactional_id)
        if error is ErrorCode.none:
            if found.error is not ErrorCode.none:
                return found.error
            if found.metadata is None or found.coordinator_epoch != append.coordinator_epoch:
                return ErrorCode.not_coordinator  # unloaded, or loaded again meanwhile
            found.metadata.complete_transition_to(append.transit)
            return ErrorCode.none
        log.info(
            "%s: appending %s failed (%s): %s",
            append.transactional_id,
            append.transit.txn_state.kafka_name,
            append_error.name,
            error.name,
        )
        if (
            found.error is ErrorCode.none
            and found.metadata is not None
            and found.coordinator_epoch == append.coordinator_epoch
            and error is not retry_on
        ):
            found.metadata.abort_pending_transition()
        return error

    # -- timers ---------------------------------------------------------------------------

    def timed_out_transactions(self, now_ms: int) -> list[tuple[int, TransactionMetadata]]:
        """Ongoing transactions older than their timeout with no transition pending, with
        their coordinator epoch (Kafka ``timedOutTransactions``)."""
        return [
            (entry.coordinator_epoch, metadata)
            for entry in self.loaded()
            for metadata in entry.metadata.values()
            if not metadata.pending_transition_in_progress
            and metadata.state is TransactionState.ONGOING
            and metadata.txn_start_timestamp + metadata.txn_timeout_ms < now_ms
        ]

    def expire_transactional_ids(self, now_ms: int) -> list[AppendTombstones]:
        """Ids idle for ``transactional.id.expiration.ms`` in a state that allows it, each
        prepared Dead; one tombstone batch per partition (Kafka
        ``removeExpiredTransactionalIds``; it splits a batch at the maximum message size,
        which a tombstone per id of at most 32 KiB does not reach in practice)."""
        horizon = now_ms - self.config.transactional_id_expiration_ms
        batches = []
        for entry in self.loaded():
            expired = []
            for metadata in entry.metadata.values():
                if (
                    metadata.pending_state is None
                    and metadata.state.expiration_allowed
                    and metadata.txn_last_update_timestamp <= horizon
                ):
                    dead = metadata.prepare_dead()
                    expired.append((metadata.transactional_id, dead.producer_epoch))
            if expired:
                batches.append(
                    AppendTombstones(
                        partition=entry.partition,
                        coordinator_epoch=entry.coordinator_epoch,
                        expired=tuple(expired),
                        keys=tuple(txlog.encode_key(tid) for tid, _ in expired),
                        timeout_ms=self.config.request_timeout_ms,
                    )
                )
        return batches

    def tombstones_appended(self, append: AppendTombstones, append_error: ErrorCode) -> list[str]:
        """Remove the ids whose tombstones are written and who are still Dead-pending at
        the same epoch; the others go back to their state. The ids removed."""
        entry = self.partitions.get(append.partition)
        if entry is None:
            return []
        removed = []
        for transactional_id, producer_epoch in append.expired:
            metadata = entry.metadata.get(transactional_id)
            if metadata is None:
                continue
            if (
                entry.coordinator_epoch == append.coordinator_epoch
                and metadata.pending_state is TransactionState.DEAD
                and metadata.producer_epoch == producer_epoch
                and append_error is ErrorCode.none
            ):
                del entry.metadata[transactional_id]
                removed.append(transactional_id)
            else:
                log.warning(
                    "%s: not removed after its tombstone (%s)", transactional_id, append_error.name
                )
                if metadata.pending_state is TransactionState.DEAD:
                    metadata.pending_state = None
        return removed
