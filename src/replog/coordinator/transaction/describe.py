"""DescribeTransactions and ListTransactions (KIP-664) over the coordinator's state, without
IO (Kafka ``TransactionCoordinator.handleDescribeTransactions``,
``TransactionStateManager.listTransactionStates``).

Errors: DescribeTransactions answers INVALID_REQUEST for an empty id, NOT_COORDINATOR or
COORDINATOR_LOAD_IN_PROGRESS as every request does, TRANSACTIONAL_ID_NOT_FOUND for an id
it does not know or that is Dead. ListTransactions answers COORDINATOR_LOAD_IN_PROGRESS
while any partition led here is loading, and lists the states it does not know as
``unknown_state_filters``. (Both answer COORDINATOR_NOT_AVAILABLE before the coordinator
has started: the handler's part.)

Concurrency: pure reads of state owned by the coordinator's event loop.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from replog.coordinator.transaction import transaction_log as txlog
from replog.coordinator.transaction.metadata import TransactionState
from replog.coordinator.transaction.state_manager import TransactionStateManager


@dataclass(frozen=True)
class TransactionDescription:
    """One entry of a DescribeTransactions response."""

    transactional_id: str
    error: ErrorCode
    transaction_state: str = ""
    transaction_timeout_ms: int = 0
    transaction_start_time_ms: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    topics: tuple[tuple[str, tuple[int, ...]], ...] = ()


@dataclass(frozen=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    transaction_state: str


@dataclass(frozen=True)
class TransactionList:
    """A ListTransactions response."""

    error: ErrorCode
    unknown_state_filters: tuple[str, ...] = ()
    transaction_states: tuple[ListedTransaction, ...] = ()


def describe_transaction(
    state: TransactionStateManager, transactional_id: str
) -> TransactionDescription:
    if not transactional_id:
        return TransactionDescription(transactional_id, ErrorCode.invalid_request)
    found = state.lookup(transactional_id)
    if found.error is not ErrorCode.none:
        return TransactionDescription(transactional_id, found.error)
    md = found.metadata
    if md is None or md.state is TransactionState.DEAD:
        return TransactionDescription(transactional_id, ErrorCode.transactional_id_not_found)
    return TransactionDescription(
        transactional_id,
        ErrorCode.none,
        transaction_state=md.state.kafka_name,
        transaction_timeout_ms=md.txn_timeout_ms,
        transaction_start_time_ms=md.txn_start_timestamp,
        producer_id=md.producer_id,
        producer_epoch=md.producer_epoch,
        topics=txlog.group_partitions(md.topic_partitions),
    )


def list_transactions(
    state: TransactionStateManager,
    producer_id_filters: Collection[int],
    state_filters: Collection[str],
    duration_filter_ms: int,
    now_ms: int,
) -> TransactionList:
    """Filters as Kafka applies them: empty filters match all; with a duration filter
    (ListTransactions v1, KIP-994) only transactions running longer than it, measured
    from their start time."""
    if any(entry.loading for entry in state.partitions.values()):
        return TransactionList(ErrorCode.coordinator_load_in_progress)
    wanted = {TransactionState.from_name(name) for name in state_filters}
    unknown = tuple(name for name in state_filters if TransactionState.from_name(name) is None)
    listed = []
    for entry in state.loaded():
        for md in entry.metadata.values():
            if md.state is TransactionState.DEAD:
                continue  # being expired
            if producer_id_filters and md.producer_id not in producer_id_filters:
                continue
            if state_filters and md.state not in wanted:
                continue
            if duration_filter_ms >= 0 and now_ms - md.txn_start_timestamp <= duration_filter_ms:
                continue
            listed.append(
                ListedTransaction(md.transactional_id, md.producer_id, md.state.kafka_name)
            )
    return TransactionList(ErrorCode.none, unknown, tuple(listed))
