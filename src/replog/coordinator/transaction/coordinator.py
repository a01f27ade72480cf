"""The transaction coordinator's decisions (Kafka ``TransactionCoordinator``), without IO.

Every call takes the time and returns an ``Outcome`` (``effects``): the answer, the
records to append, the markers to send. A transition is prepared (the id's pending state
set), its record appended, then ``append_completed`` completes it and gives the answer;
while a transition is pending, the id's other requests get CONCURRENT_TRANSACTIONS.

Errors, as Kafka answers them (source: ``TransactionCoordinator.scala``, 3.9/4.0, for
clients below transaction version 2; ``KafkaApis`` where noted). The handler maps
PRODUCER_FENCED to INVALID_PRODUCER_EPOCH for old request versions
(``error_for_version``). Every path first answers NOT_COORDINATOR or
COORDINATOR_LOAD_IN_PROGRESS when the id's partition is not led here or still loading,
and an append's failure with the mapped error of ``state_manager``.

InitProducerId (``handleInitProducerId``, ``prepareInitProducerIdTransit``):

==================================================================  ==========================
empty transactional id; only one of producer id / epoch given        INVALID_REQUEST (KafkaApis)
timeout <= 0 or > transaction.max.timeout.ms                         INVALID_TRANSACTION_TIMEOUT
a transition pending (markers being written, an append in flight)    CONCURRENT_TRANSACTIONS
KIP-360 producer id neither current, nor previous with an exhausted  PRODUCER_FENCED
epoch (a new id's epoch -1 accepts any)
PrepareCommit / PrepareAbort                                         CONCURRENT_TRANSACTIONS
Empty / Complete*, epoch exhausted (and the given epoch current)     new producer id, epoch 0
Empty / Complete*, KIP-360 epoch neither current nor last            PRODUCER_FENCED
Empty / Complete*                                                    epoch + 1 (a retry: same)
Ongoing: fenced (epoch + 1), aborted                                 CONCURRENT_TRANSACTIONS
                                                                     (its append's error if
                                                                     that fails)
==================================================================  ==========================

AddPartitionsToTxn v0-v3 and AddOffsetsToTxn (``handleAddPartitionsToTransaction``;
AddOffsetsToTxn adds the group's ``__consumer_offsets`` partition):

==================================================================  ==========================
empty transactional id                                               INVALID_REQUEST
unknown transactional id; another producer id                        INVALID_PRODUCER_ID_MAPPING
another epoch                                                        PRODUCER_FENCED
a transition pending; PrepareCommit / PrepareAbort                   CONCURRENT_TRANSACTIONS
Ongoing and every partition already added                            NONE, no append
otherwise                                                            append Ongoing, NONE
==================================================================  ==========================

AddPartitionsToTxn v4+ with ``verify_only`` (``handleVerifyPartitionsInTransaction``,
KIP-890): the same first three rows, PrepareCommit / PrepareAbort give
CONCURRENT_TRANSACTIONS (a pending state is not checked), then per partition NONE if it
is in the transaction, else TRANSACTION_ABORTABLE. Without ``verify_only`` v4+ is the
client form per transaction.

EndTxn (``endTransaction``):

==================================================================  ==========================
empty transactional id                                               INVALID_REQUEST
unknown transactional id; another producer id                        INVALID_PRODUCER_ID_MAPPING
another epoch (from a client); a lower one (timeout, fencing)        PRODUCER_FENCED
a transition pending, other than an epoch fence                      CONCURRENT_TRANSACTIONS
Ongoing                                                              append Prepare*, NONE,
                                                                     then the markers
CompleteCommit + commit, CompleteAbort + abort (a retry)             NONE, no append
PrepareCommit + commit, PrepareAbort + abort                         CONCURRENT_TRANSACTIONS
Empty; Complete*/Prepare* of the other result                        INVALID_TXN_STATE
==================================================================  ==========================

(Transaction version 2 would also abort an Empty transaction; below it, an EndTxn with
no transaction open fails, and only one repeating the last completed result succeeds.)

After the Prepare* record is appended the state is checked again: another producer id
INVALID_PRODUCER_ID_MAPPING, another epoch PRODUCER_FENCED, a pending transition
CONCURRENT_TRANSACTIONS, not Prepare* of the request's result INVALID_TXN_STATE, a new
coordinator epoch NOT_COORDINATOR.

The markers that follow, their answers and the completion: ``markers``.

Concurrency: owned by the event loop that runs the coordinator; no method awaits.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping

from kio.schema.errors import ErrorCode

from replog.common.topics import GROUP_METADATA_TOPIC_NAME
from replog.coordinator.group.offsets_topic import partition_for as offsets_partition_for
from replog.coordinator.transaction.effects import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    Answer,
    AppendPurpose,
    AppendTombstones,
    AppendTxnState,
    Outcome,
    SendTxnMarkers,
    TransactionResult,
    answer,
)
from replog.coordinator.transaction.markers import PendingMarkers
from replog.coordinator.transaction.metadata import (
    IllegalStateTransition,
    TransactionMetadata,
    TransactionState,
    is_epoch_exhausted,
)
from replog.coordinator.transaction.state_manager import Lookup, TransactionStateManager
from replog.coordinator.transaction.transaction_topic import TransactionConfig

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
S = TransactionState

# The first request version that may carry PRODUCER_FENCED (KIP-588); older ones get
# INVALID_PRODUCER_EPOCH (KafkaApis).
PRODUCER_FENCED_SINCE = {
    "InitProducerId": 4,
    "AddPartitionsToTxn": 2,
    "AddOffsetsToTxn": 2,
    "EndTxn": 2,
}


def error_for_version(api: str, version: int, error: ErrorCode) -> ErrorCode:
    if error is ErrorCode.producer_fenced and version < PRODUCER_FENCED_SINCE[api]:
        return ErrorCode.invalid_producer_epoch
    return error


def rejected_partitions(
    unauthorized: Iterable[TopicPartition],
    unknown: Iterable[TopicPartition],
    accepted: Iterable[TopicPartition],
) -> dict[TopicPartition, ErrorCode]:
    """AddPartitionsToTxn when a partition fails its checks (KafkaApis): the whole
    transaction fails, the failed partitions with their error, the rest
    OPERATION_NOT_ATTEMPTED."""
    errors = {tp: ErrorCode.operation_not_attempted for tp in accepted}
    errors.update({tp: ErrorCode.unknown_topic_or_partition for tp in unknown})
    errors.update({tp: ErrorCode.topic_authorization_failed for tp in unauthorized})
    return errors


class TransactionCoordinator:
    """Concurrency: owned by one event loop; see the module docstring."""

    def __init__(self, config: TransactionConfig, offsets_topic_partitions: int) -> None:
        self.config = config
        self.offsets_topic_partitions = offsets_topic_partitions
        self.state = TransactionStateManager(config)
        self.markers = PendingMarkers(self.state)

    # -- partitions -----------------------------------------------------------------------

    def set_partition_count(self, count: int) -> None:
        """``__transaction_state``'s actual partition count, when it differs from
        ``transaction.state.log.num.partitions`` (a topic created by a broker configured
        otherwise keeps its count; Kafka reads it from ZooKeeper at start-up): ids map to
        partitions by it."""
        if count > 0 and count != self.config.transaction_log_num_partitions:
            log.warning(
                "__transaction_state has %d partitions, transaction.state.log.num.partitions"
                " says %d: using the topic's",
                count,
                self.config.transaction_log_num_partitions,
            )
            self.config = dataclasses.replace(self.config, transaction_log_num_partitions=count)
            self.state.config = self.config

    def on_election(self, partition: int, coordinator_epoch: int) -> None:
        """This broker leads ``partition`` now; load it next (``complete_loading``)."""
        self.markers.drop_partition(partition)
        self.state.begin_loading(partition, coordinator_epoch)

    def complete_loading(
        self,
        partition: int,
        coordinator_epoch: int,
        records: Iterable[tuple[bytes, bytes | None]],
        now_ms: int,
    ) -> Outcome:
        """The partition's records up to its high watermark; the markers of the
        transactions a former coordinator left in PrepareCommit/PrepareAbort."""
        out = Outcome()
        for prepared in self.state.complete_loading(partition, coordinator_epoch, records, now_ms):
            out += self.markers.send(
                coordinator_epoch, prepared.metadata, prepared.complete, prepared.result
            )
        return out

    def on_resignation(self, partition: int, coordinator_epoch: int | None = None) -> None:
        """This broker no longer leads ``partition``; with an epoch, only if that is the
        term loaded (a late resignation must not unload a newer term's state)."""
        if self.state.unload(partition, coordinator_epoch):
            self.markers.drop_partition(partition)

    def can_append(self, append: AppendTxnState | AppendTombstones) -> bool:
        return self.state.owns(append.partition, append.coordinator_epoch)

    # -- InitProducerId -------------------------------------------------------------------

    def handle_init_producer_id(
        self,
        transactional_id: str,
        transaction_timeout_ms: int,
        producer_id: int,
        producer_epoch: int,
        now_ms: int,
        new_producer_id: int | None = None,
    ) -> Outcome:
        """InitProducerId with a transactional id (one without is the idempotent
        producer's, answered by the broker's ProducerIdManager alone)."""
        given_id, given_epoch = producer_id != NO_PRODUCER_ID, producer_epoch != NO_PRODUCER_EPOCH
        if given_id != given_epoch or not transactional_id:
            return answer(ErrorCode.invalid_request)
        expected = (producer_id, producer_epoch) if given_id else None
        if not self.config.valid_transaction_timeout(transaction_timeout_ms):
            return answer(ErrorCode.invalid_transaction_timeout)
        found = self.state.lookup(transactional_id)
        if found.error is ErrorCode.none and found.metadata is None:
            if new_producer_id is None:
                return Outcome(needs_producer_id=True)
            created = TransactionMetadata(
                transactional_id=transactional_id,
                producer_id=new_producer_id,
                producer_epoch=NO_PRODUCER_EPOCH,
                txn_timeout_ms=transaction_timeout_ms,
                state=S.EMPTY,
                txn_last_update_timestamp=now_ms,
            )
            found = self.state.put_if_absent(created)
            new_producer_id = None  # used
        if found.error is not ErrorCode.none:
            return answer(found.error)
        assert found.metadata is not None
        md, epoch = found.metadata, found.coordinator_epoch

        if md.pending_transition_in_progress:
            return answer(ErrorCode.concurrent_transactions)
        if expected is not None and not (
            md.producer_epoch == NO_PRODUCER_EPOCH
            or expected[0] == md.producer_id
            or (expected[0] == md.previous_producer_id and is_epoch_exhausted(expected[1]))
        ):
            return answer(ErrorCode.producer_fenced)
        if md.state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
            return answer(ErrorCode.concurrent_transactions)
        if md.state is S.ONGOING:
            # Fence the producer and abort; the client retries and gets the epoch after it.
            fence = md.prepare_fence_producer_epoch()
            return self._end_transaction(
                transactional_id,
                fence.producer_id,
                fence.producer_epoch,
                TransactionResult.ABORT,
                now_ms,
                from_client=False,
                purpose=AppendPurpose.FENCE_ABORT,
            )
        if md.state in (S.DEAD, S.PREPARE_EPOCH_FENCE):
            raise IllegalStateTransition(f"{transactional_id} found in {md.state.kafka_name}")
        if md.is_producer_epoch_exhausted and (
            expected is None or expected[1] == md.producer_epoch
        ):
            if new_producer_id is None:
                return Outcome(needs_producer_id=True)
            transit = md.prepare_producer_id_rotation(
                new_producer_id,
                transaction_timeout_ms,
                now_ms,
                record_last_epoch=expected is not None,
            )
        else:
            bumped = md.prepare_increment_producer_epoch(
                transaction_timeout_ms, expected[1] if expected else None, now_ms
            )
            if bumped is None:
                return answer(ErrorCode.producer_fenced)
            transit = bumped
        return Outcome(
            appends=(self.state.append_effect(md, epoch, transit, AppendPurpose.INIT_PRODUCER_ID),)
        )

    # -- AddPartitionsToTxn / AddOffsetsToTxn -----------------------------------------------

    def handle_add_partitions_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
    ) -> Outcome:
        """AddPartitionsToTxn v0-v3, and one transaction of v4+ without ``verify_only``;
        the partitions have passed the handler's authorization and existence checks."""
        added = frozenset(partitions)
        if not transactional_id:
            return answer(ErrorCode.invalid_request)
        found = self.state.lookup(transactional_id)
        error = self._check_producer(found, producer_id, producer_epoch)
        if error is not None:
            return answer(error)
        assert found.metadata is not None
        md = found.metadata
        if md.pending_transition_in_progress or md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return answer(ErrorCode.concurrent_transactions)
        if md.state is S.ONGOING and added <= md.topic_partitions:
            return answer(ErrorCode.none)  # nothing new: no append
        transit = md.prepare_add_partitions(added, now_ms)
        return Outcome(
            appends=(
                self.state.append_effect(
                    md, found.coordinator_epoch, transit, AppendPurpose.ADD_PARTITIONS
                ),
            )
        )

    def handle_add_offsets_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        now_ms: int,
    ) -> Outcome:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the
        transaction (KafkaApis ``handleAddOffsetsToTxnRequest``)."""
        partition = offsets_partition_for(group_id, self.offsets_topic_partitions)
        return self.handle_add_partitions_to_txn(
            transactional_id,
            producer_id,
            producer_epoch,
            [(GROUP_METADATA_TOPIC_NAME, partition)],
            now_ms,
        )

    def handle_verify_partitions_in_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> Answer:
        """AddPartitionsToTxn v4+ with ``verify_only`` (KIP-890 part 1): are these
        partitions in the producer's ongoing transaction? Nothing is appended."""
        wanted = frozenset(partitions)
        if not transactional_id:
            error = ErrorCode.invalid_request
        else:
            found = self.state.lookup(transactional_id)
            error = self._check_producer(found, producer_id, producer_epoch)
            if error is None:
                assert found.metadata is not None
                md = found.metadata
                if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                    error = ErrorCode.concurrent_transactions
                else:
                    per_partition = {
                        tp: ErrorCode.none
                        if tp in md.topic_partitions
                        else ErrorCode.transaction_abortable
                        for tp in wanted
                    }
                    return Answer(ErrorCode.none, partition_errors=per_partition)
        return Answer(error, partition_errors={tp: error for tp in wanted})

    def _check_producer(
        self, found: Lookup, producer_id: int, producer_epoch: int
    ) -> ErrorCode | None:
        if found.error is not ErrorCode.none:
            return found.error
        if found.metadata is None or found.metadata.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if found.metadata.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced
        return None

    # -- EndTxn ---------------------------------------------------------------------------

    def handle_end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        now_ms: int,
    ) -> Outcome:
        result = TransactionResult.COMMIT if committed else TransactionResult.ABORT
        return self._end_transaction(
            transactional_id,
            producer_id,
            producer_epoch,
            result,
            now_ms,
            from_client=True,
            purpose=AppendPurpose.END_TXN,
        )

    def _end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        result: TransactionResult,
        now_ms: int,
        *,
        from_client: bool,
        purpose: AppendPurpose,
    ) -> Outcome:
        if not transactional_id:
            return answer(ErrorCode.invalid_request)
        found = self.state.lookup(transactional_id)
        if found.error is not ErrorCode.none:
            return answer(found.error)
        md = found.metadata
        if md is None or md.producer_id != producer_id:
            return answer(ErrorCode.invalid_producer_id_mapping)
        valid_epoch = (not from_client or producer_epoch == md.producer_epoch) and (
            producer_epoch >= md.producer_epoch
        )
        if not valid_epoch:
            return answer(ErrorCode.producer_fenced)
        fencing = md.pending_state is S.PREPARE_EPOCH_FENCE
        if md.pending_transition_in_progress and not fencing:
            return answer(ErrorCode.concurrent_transactions)
        state = md.state
        if state is S.ONGOING:
            next_state = S.PREPARE_COMMIT if result.committed else S.PREPARE_ABORT
            if fencing and next_state is S.PREPARE_ABORT:
                # The fence becomes this abort: its bumped epoch is the metadata's now.
                md.pending_state = None
                md.producer_epoch = producer_epoch
                md.last_producer_epoch = NO_PRODUCER_EPOCH
            transit = md.prepare_abort_or_commit(next_state, now_ms)
            effect = self.state.append_effect(
                md, found.coordinator_epoch, transit, purpose, result, is_epoch_fence=fencing
            )
            return Outcome(appends=(effect,))
        if state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            if (state is S.COMPLETE_COMMIT) == result.committed:
                return answer(ErrorCode.none, md.producer_id, md.producer_epoch)
            return self._invalid_txn_state(md, result)
        if state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            if (state is S.PREPARE_COMMIT) == result.committed:
                return answer(ErrorCode.concurrent_transactions)
            return self._invalid_txn_state(md, result)
        if state is S.EMPTY:
            return self._invalid_txn_state(md, result)
        raise IllegalStateTransition(f"{transactional_id} found in {state.kafka_name}")

    @staticmethod
    def _invalid_txn_state(md: TransactionMetadata, result: TransactionResult) -> Outcome:
        log.debug(
            "%s is %s; EndTxn asked %s", md.transactional_id, md.state.kafka_name, result.name
        )
        return answer(ErrorCode.invalid_txn_state)

    # -- appends done ---------------------------------------------------------------------

    def append_completed(
        self, append: AppendTxnState, append_error: ErrorCode, now_ms: int
    ) -> Outcome:
        """``append``'s record is in the log (``append_error`` NONE) or not: complete or
        roll back its transition; the answer to the waiting request and what follows."""
        purpose = append.purpose
        if purpose is AppendPurpose.COMPLETE_TXN:
            return self.markers.completion_appended(append, append_error)
        error = self.state.finish_append(append, append_error)
        if purpose is AppendPurpose.INIT_PRODUCER_ID:
            if error is ErrorCode.none:
                return answer(error, append.transit.producer_id, append.transit.producer_epoch)
            return answer(error)
        if purpose is AppendPurpose.ADD_PARTITIONS:
            return answer(error)
        # An EndTxn of some kind: on success, prepare the completion and send the markers.
        if error is ErrorCode.none:
            out = self._after_prepare_appended(append, now_ms)
        else:
            if append.is_epoch_fence:
                found = self.state.lookup(append.transactional_id)
                if (
                    found.metadata is not None
                    and found.coordinator_epoch == append.coordinator_epoch
                ):
                    found.metadata.has_failed_epoch_fence = True
            out = answer(error)
        if purpose is AppendPurpose.FENCE_ABORT:
            assert out.answer is not None
            fenced_error = out.answer.error
            if fenced_error is ErrorCode.none:
                fenced_error = ErrorCode.concurrent_transactions  # the client retries
            return Outcome(answer(fenced_error).answer, out.appends, out.markers)
        if purpose is AppendPurpose.TIMEOUT_ABORT:
            return Outcome(None, out.appends, out.markers)
        return out

    def _after_prepare_appended(self, append: AppendTxnState, now_ms: int) -> Outcome:
        assert append.result is not None
        found = self.state.lookup(append.transactional_id)
        if found.error is not ErrorCode.none:
            return answer(found.error)
        md = found.metadata
        if md is None:
            raise IllegalStateTransition(f"{append.transactional_id} owned here but not cached")
        if found.coordinator_epoch != append.coordinator_epoch:
            return answer(ErrorCode.not_coordinator)
        if md.producer_id != append.transit.producer_id:
            return answer(ErrorCode.invalid_producer_id_mapping)
        if md.producer_epoch != append.transit.producer_epoch:
            return answer(ErrorCode.producer_fenced)
        if md.pending_transition_in_progress:
            return answer(ErrorCode.concurrent_transactions)
        expected = S.PREPARE_COMMIT if append.result.committed else S.PREPARE_ABORT
        if md.state is not expected:
            return self._invalid_txn_state(md, append.result)
        complete = md.prepare_complete(now_ms)
        out = answer(ErrorCode.none, md.producer_id, md.producer_epoch)
        return out + self.markers.send(found.coordinator_epoch, md, complete, append.result)

    # -- markers --------------------------------------------------------------------------

    def markers_written(
        self, marker: SendTxnMarkers, errors: Mapping[TopicPartition, ErrorCode]
    ) -> Outcome:
        """A WriteTxnMarkers response's errors for ``marker``'s partitions on one broker."""
        return self.markers.written(marker, errors)

    def markers_undelivered(self, marker: SendTxnMarkers) -> Outcome:
        """The request carrying ``marker`` got no answer (its broker disconnected)."""
        return self.markers.undelivered(marker)

    def markers_partitions_deleted(
        self, marker: SendTxnMarkers, partitions: Iterable[TopicPartition]
    ) -> Outcome:
        """Partitions with no leader at all are taken as deleted: no marker is needed."""
        return self.markers.partitions_deleted(marker, partitions)

    # -- timers ---------------------------------------------------------------------------

    def abort_timed_out_transactions(self, now_ms: int) -> Outcome:
        """Every ``transaction.abort.timed.out.transaction.cleanup.interval.ms``: fence the
        producers of transactions open longer than their timeout and abort them."""
        out = Outcome()
        for _, md in self.state.timed_out_transactions(now_ms):
            fence = md.prepare_fence_producer_epoch()
            out += self._end_transaction(
                md.transactional_id,
                fence.producer_id,
                fence.producer_epoch,
                TransactionResult.ABORT,
                now_ms,
                from_client=False,
                purpose=AppendPurpose.TIMEOUT_ABORT,
            )
        return Outcome(None, out.appends, out.markers)

    def expire_transactional_ids(self, now_ms: int) -> Outcome:
        """Every ``transaction.remove.expired.transaction.cleanup.interval.ms``: tombstones
        for ids idle longer than ``transactional.id.expiration.ms``."""
        return Outcome(appends=tuple(self.state.expire_transactional_ids(now_ms)))

    def tombstones_appended(self, append: AppendTombstones, append_error: ErrorCode) -> list[str]:
        return self.state.tombstones_appended(append, append_error)
