"""A transactional id's state and its state machine (Kafka ``TransactionState``,
``TransactionMetadata``, ``TxnTransitMetadata``).

States, with the states each may be entered from (Kafka 4's ``validPreviousStates``):

=================  =====  ===================================================  ==========
state              id     valid previous states                                expirable
=================  =====  ===================================================  ==========
Empty              0      Empty, CompleteCommit, CompleteAbort                 yes
Ongoing            1      Ongoing, Empty, CompleteCommit, CompleteAbort        no
PrepareCommit      2      Ongoing                                              no
PrepareAbort       3      Ongoing, PrepareEpochFence, Empty, CompleteCommit,   no
                          CompleteAbort (the last three for transaction v2)
CompleteCommit     4      PrepareCommit                                        yes
CompleteAbort      5      PrepareAbort                                         yes
Dead               6      Empty, CompleteAbort, CompleteCommit                 no
PrepareEpochFence  7      Ongoing                                              no
=================  =====  ===================================================  ==========

A transition is two steps, as in Kafka: ``prepare_*`` checks it against the table,
records the target in ``pending_state`` and returns the new state as an immutable
``TxnTransitMetadata``; the caller appends that to ``__transaction_state``; then
``complete_transition_to`` applies it (after the append is acknowledged by every in-sync
replica), or ``abort_pending_transition`` drops it (the append failed). While a
transition is pending, no other may be prepared: the coordinator answers
CONCURRENT_TRANSACTIONS. An illegal transition raises ``IllegalStateTransition``.

PrepareEpochFence and Dead are never completed: a fence becomes the abort it leads to,
and a Dead id is removed from the cache once its tombstone is written.

Transaction version 2 (KIP-890 part 2: an epoch bump with every EndTxn, a next producer
id when that exhausts the epoch) is not implemented; ``previous_producer_id`` and
``next_producer_id`` are kept so that records written by a Kafka that does survive a
load and a rewrite.

Concurrency: a ``TransactionMetadata`` is owned by the event loop that runs its
coordinator; no method awaits.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field, replace

from replog.coordinator.transaction import transaction_log as txlog

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_PRODUCER_EPOCH = 32767  # Short.MaxValue


class IllegalStateTransition(RuntimeError):
    """A transition the state table or the metadata's invariants forbid (Kafka throws
    IllegalStateException); a bug, never a client's error."""


class TransactionState(enum.Enum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def id(self) -> int:
        return self.value

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions show."""
        return _NAMES[self]

    @property
    def expiration_allowed(self) -> bool:
        return self in _EXPIRABLE

    @property
    def valid_previous_states(self) -> frozenset[TransactionState]:
        return VALID_PREVIOUS_STATES[self]

    @classmethod
    def from_id(cls, state_id: int) -> TransactionState:
        try:
            return cls(state_id)
        except ValueError:
            raise IllegalStateTransition(f"unknown transaction state id {state_id}") from None

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        return _BY_NAME.get(name)


S = TransactionState
_NAMES = {
    S.EMPTY: "Empty",
    S.ONGOING: "Ongoing",
    S.PREPARE_COMMIT: "PrepareCommit",
    S.PREPARE_ABORT: "PrepareAbort",
    S.COMPLETE_COMMIT: "CompleteCommit",
    S.COMPLETE_ABORT: "CompleteAbort",
    S.DEAD: "Dead",
    S.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}
_EXPIRABLE = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset(
        {S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
    ),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


def is_epoch_exhausted(producer_epoch: int) -> bool:
    """No client may use Short.MaxValue, so that the coordinator can always fence it."""
    return producer_epoch >= MAX_PRODUCER_EPOCH - 1


@dataclass(frozen=True)
class TxnTransitMetadata:
    """The state a transition leads to: what is appended to the log, and then applied."""

    producer_id: int
    prev_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    txn_state: TransactionState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int
    client_transaction_version: int = 0

    def to_log_value(self) -> txlog.TransactionLogValue:
        """Kafka ``TransactionLog.valueToBytes``'s fields."""
        empty = self.txn_state is S.EMPTY
        if empty and self.topic_partitions:
            raise IllegalStateTransition(f"an Empty transaction with partitions: {self}")
        return txlog.TransactionLogValue(
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            transaction_timeout_ms=self.txn_timeout_ms,
            transaction_status=self.txn_state.id,
            transaction_partitions=None if empty else txlog.group_partitions(self.topic_partitions),
            transaction_last_update_timestamp_ms=self.txn_last_update_timestamp,
            transaction_start_timestamp_ms=self.txn_start_timestamp,
            previous_producer_id=self.prev_producer_id,
            next_producer_id=self.next_producer_id,
            client_transaction_version=self.client_transaction_version,
        )


@dataclass(eq=False)
class TransactionMetadata:
    """One transactional id's state on its coordinator (Kafka ``TransactionMetadata``).

    Invariants, checked by ``complete_transition_to``: the epoch stays, goes up by one,
    or restarts at 0 with a new producer id (InitProducerId); partitions are only added
    while Ongoing and only removed (as markers are written) while PrepareCommit or
    PrepareAbort; the timeout changes only on InitProducerId.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    txn_last_update_timestamp: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    topic_partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = -1
    client_transaction_version: int = 0
    pending_state: TransactionState | None = None
    # A fence whose append failed bumped the epoch in memory; the next fence keeps it
    # (the bumped epoch was never returned to a client).
    has_failed_epoch_fence: bool = False

    @classmethod
    def from_log_value(
        cls, transactional_id: str, value: txlog.TransactionLogValue
    ) -> TransactionMetadata:
        """As Kafka's loader builds it: the last epoch is not in the log."""
        return cls(
            transactional_id=transactional_id,
            producer_id=value.producer_id,
            previous_producer_id=value.previous_producer_id,
            next_producer_id=value.next_producer_id,
            producer_epoch=value.producer_epoch,
            last_producer_epoch=NO_PRODUCER_EPOCH,
            txn_timeout_ms=value.transaction_timeout_ms,
            state=TransactionState.from_id(value.transaction_status),
            topic_partitions=set(value.topic_partitions()),
            txn_start_timestamp=value.transaction_start_timestamp_ms,
            txn_last_update_timestamp=value.transaction_last_update_timestamp_ms,
            client_transaction_version=value.client_transaction_version,
        )

    # -- queries --------------------------------------------------------------------------

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def has_pending_transaction(self) -> bool:
        return self.state in (S.ONGOING, S.PREPARE_ABORT, S.PREPARE_COMMIT)

    def snapshot(self) -> TxnTransitMetadata:
        """The current state as a transit (Kafka ``prepareNoTransit``): no pending state."""
        return TxnTransitMetadata(
            self.producer_id,
            self.previous_producer_id,
            self.next_producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            self.state,
            frozenset(self.topic_partitions),
            self.txn_start_timestamp,
            self.txn_last_update_timestamp,
            self.client_transaction_version,
        )

    # -- in-memory changes (no log append of their own) -------------------------------------

    def remove_partition(self, partition: TopicPartition) -> None:
        """A marker was written to ``partition``."""
        if self.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            raise IllegalStateTransition(
                f"{self.transactional_id}: removing {partition} (its marker written) in state "
                f"{self.state.kafka_name}, pending {self.pending_state}"
            )
        self.topic_partitions.discard(partition)

    def abort_pending_transition(self) -> None:
        """The append of the prepared transition failed: nothing changed but the pending
        state, which is dropped (Kafka resets ``pendingState`` to None)."""
        self.pending_state = None

    # -- prepared transitions ---------------------------------------------------------------

    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        """Fence the current producer of an Ongoing transaction: bump the epoch (unless a
        previous fence's append failed) on the way to aborting it."""
        if self.producer_epoch == MAX_PRODUCER_EPOCH:
            raise IllegalStateTransition("cannot fence a producer at epoch Short.MaxValue")
        bumped = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(
            S.PREPARE_EPOCH_FENCE,
            producer_epoch=bumped,
            last_producer_epoch=NO_PRODUCER_EPOCH,
        )

    def prepare_increment_producer_epoch(
        self, new_txn_timeout_ms: int, expected_producer_epoch: int | None, now_ms: int
    ) -> TxnTransitMetadata | None:
        """InitProducerId on an idle id: the next epoch. None means PRODUCER_FENCED (the
        expected epoch, KIP-360, is neither the current nor the last one)."""
        if self.is_producer_epoch_exhausted:
            raise IllegalStateTransition(f"no epoch left for producer id {self.producer_id}")
        bumped = self.producer_epoch + 1
        if expected_producer_epoch is None:
            # A new producer: bump; a new metadata's -1 becomes 0.
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_producer_epoch == (
            self.producer_epoch
        ):
            # The producer recovers after an error, and nobody initialised meanwhile.
            epoch, last = bumped, self.producer_epoch
        elif expected_producer_epoch == self.last_producer_epoch:
            # A retry of a bump whose answer was lost: the current epoch again.
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            log.info(
                "%s: expected producer epoch %d is neither the current %d nor the last %d",
                self.transactional_id,
                expected_producer_epoch,
                self.producer_epoch,
                self.last_producer_epoch,
            )
            return None
        return self._prepare(
            S.EMPTY,
            producer_epoch=epoch,
            last_producer_epoch=last,
            txn_timeout_ms=new_txn_timeout_ms,
            topic_partitions=frozenset(),
            txn_start_timestamp=-1,
            txn_last_update_timestamp=now_ms,
        )

    def prepare_producer_id_rotation(
        self, new_producer_id: int, new_txn_timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TxnTransitMetadata:
        """InitProducerId when the epoch is exhausted: a new producer id at epoch 0."""
        if self.has_pending_transaction:
            raise IllegalStateTransition("cannot rotate producer ids with a transaction pending")
        return self._prepare(
            S.EMPTY,
            producer_id=new_producer_id,
            producer_epoch=0,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            txn_timeout_ms=new_txn_timeout_ms,
            topic_partitions=frozenset(),
            txn_start_timestamp=-1,
            txn_last_update_timestamp=now_ms,
        )

    def prepare_add_partitions(
        self, added: frozenset[TopicPartition], now_ms: int
    ) -> TxnTransitMetadata:
        starts = self.state in (S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT)
        return self._prepare(
            S.ONGOING,
            topic_partitions=frozenset(self.topic_partitions) | added,
            txn_start_timestamp=now_ms if starts else self.txn_start_timestamp,
            txn_last_update_timestamp=now_ms,
        )

    def prepare_abort_or_commit(
        self, new_state: TransactionState, now_ms: int
    ) -> TxnTransitMetadata:
        if new_state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            raise IllegalStateTransition(f"EndTxn cannot lead to {new_state.kafka_name}")
        return self._prepare(new_state, txn_last_update_timestamp=now_ms)

    def prepare_complete(self, now_ms: int) -> TxnTransitMetadata:
        """Every marker is written: CompleteCommit or CompleteAbort, no partitions left."""
        new_state = S.COMPLETE_COMMIT if self.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        self.has_failed_epoch_fence = False  # the abort's record was written
        return self._prepare(
            new_state,
            last_producer_epoch=self.producer_epoch,
            topic_partitions=frozenset(),
            txn_last_update_timestamp=now_ms,
        )

    def prepare_dead(self) -> TxnTransitMetadata:
        return self._prepare(S.DEAD, topic_partitions=frozenset())

    def _prepare(self, new_state: TransactionState, **changes: object) -> TxnTransitMetadata:
        if self.pending_state is not None:
            raise IllegalStateTransition(
                f"{self.transactional_id}: preparing {new_state.kafka_name} while "
                f"{self.pending_state.kafka_name} is pending"
            )
        transit = replace(
            self.snapshot(),
            prev_producer_id=self.producer_id,
            next_producer_id=NO_PRODUCER_ID,
            txn_state=new_state,
            client_transaction_version=0,
            **changes,  # type: ignore[arg-type]
        )
        if transit.producer_id < 0:
            raise IllegalStateTransition(f"illegal new producer id {transit.producer_id}")
        # A new metadata stays at epoch -1 until its first InitProducerId; only Dead may keep it.
        if new_state is not S.DEAD and transit.producer_epoch < 0:
            raise IllegalStateTransition(f"illegal new producer epoch {transit.producer_epoch}")
        if self.state not in new_state.valid_previous_states:
            raise IllegalStateTransition(
                f"{self.transactional_id}: {self.state.kafka_name} -> {new_state.kafka_name} "
                "is not a valid transition"
            )
        self.pending_state = new_state
        return transit

    # -- completion -------------------------------------------------------------------------

    def complete_transition_to(self, transit: TxnTransitMetadata) -> None:
        """Apply ``transit`` once its record is in the log (Kafka ``completeTransitionTo``):
        checked against the metadata, then copied whole, so the state in memory is the
        state the log holds (as Kafka 4's Java ``TransactionMetadata`` does)."""
        to_state = self.pending_state
        if to_state is None or to_state is not transit.txn_state:
            self._fail(transit, f"pending state is {to_state}")
        if to_state is S.EMPTY:  # InitProducerId
            same_epoch = transit.producer_epoch == self.producer_epoch
            if (
                (not same_epoch and not self._valid_epoch_bump(transit))
                or transit.topic_partitions
                or transit.txn_start_timestamp != -1
            ):
                self._fail(transit, "not a valid InitProducerId transition")
        elif to_state is S.ONGOING:  # AddPartitionsToTxn / AddOffsetsToTxn
            if (
                not self._same_producer(transit)
                or not self.topic_partitions <= transit.topic_partitions
                or self.txn_timeout_ms != transit.txn_timeout_ms
            ):
                self._fail(transit, "not a valid AddPartitions transition")
        elif to_state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):  # EndTxn
            if (
                not self._same_producer(transit)
                or frozenset(self.topic_partitions) != transit.topic_partitions
                or self.txn_timeout_ms != transit.txn_timeout_ms
                or self.txn_start_timestamp != transit.txn_start_timestamp
            ):
                self._fail(transit, "not a valid EndTxn transition")
        elif to_state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):  # markers written
            if (
                not self._same_producer(transit)
                or self.txn_timeout_ms != transit.txn_timeout_ms
                or transit.txn_start_timestamp == -1
            ):
                self._fail(transit, "not a valid completion")
        else:  # PrepareEpochFence becomes an abort; a Dead id is removed, never completed
            self._fail(transit, f"{to_state.kafka_name} is never completed")
        self.producer_id = transit.producer_id
        self.previous_producer_id = transit.prev_producer_id
        self.next_producer_id = transit.next_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.txn_timeout_ms = transit.txn_timeout_ms
        self.topic_partitions = set(transit.topic_partitions)
        self.txn_start_timestamp = transit.txn_start_timestamp
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.client_transaction_version = transit.client_transaction_version
        self.pending_state = None
        self.state = to_state

    def _same_producer(self, transit: TxnTransitMetadata) -> bool:
        return (
            transit.producer_epoch == self.producer_epoch
            and transit.producer_id == self.producer_id
        )

    def _valid_epoch_bump(self, transit: TxnTransitMetadata) -> bool:
        return transit.producer_epoch == self.producer_epoch + 1 or (
            transit.producer_epoch == 0 and transit.producer_id != self.producer_id
        )

    def _fail(self, transit: TxnTransitMetadata, why: str) -> None:
        log.error("%s: transition to %s failed: %s", self, transit, why)
        raise IllegalStateTransition(
            f"transactional id {self.transactional_id} failed transition to {transit}: {why}"
        )
