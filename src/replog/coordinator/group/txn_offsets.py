"""Transactional offset commits (TxnOffsetCommit, KIP-98; KIP-447's group fencing) on
the group coordinator (Kafka ``OffsetMetadataManager.commitTransactionalOffset`` and
``GroupMetadataManager.storeOffsets`` with a producer id).

A transactional producer that consumed from a group sends the group's offsets in its
transaction (``send_offsets_to_transaction``): after AddOffsetsToTxn added the group's
``__consumer_offsets`` partition to the transaction, TxnOffsetCommit reaches the group
coordinator, which

0. with ``transaction.partition.verification.enable`` (KIP-890 part 1), asks the
   transaction coordinator whether the offsets partition is in the producer's ongoing
   transaction (``verify``, the broker's ``TransactionVerifier``), unless the producer's
   transaction is already open on that partition; a refusal is the answer (Kafka's
   ``handleTxnCommitOffsets`` verifies before it looks at the member). Without it, a
   TxnOffsetCommit held back by a fault and delivered after the client's EndTxn (its
   marker already written) opened the transaction again on the offsets partition: its
   offsets stayed pending, OffsetFetch ``require_stable`` answered UNSTABLE_OFFSET_COMMIT,
   until a later marker of the same producer decided them with its own transaction;
1. checks the group (``validate_txn_offset_commit``): a producer outside a group
   (generation -1, no member) commits freely; a member's generation (classic) or member
   epoch (KIP-848), member id and group instance id must be current, so a zombie
   consumer-producer left behind by a rebalance is fenced (ILLEGAL_GENERATION,
   UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID);
2. appends the offset commit records as one transactional batch of the producer's id
   and epoch with acks=all (the partition refuses a fenced epoch);
3. holds them as the producer's pending commits (``OffsetStore.put_pending``), not
   visible to OffsetFetch, until the transaction's marker on that partition commits or
   aborts them (``GroupCoordinator.on_transaction_marker``).

Concurrency: owned by the event loop. The verification is the one await before the
group is checked (the shard is looked up again after it); a marker written meanwhile
makes its guard stale, and the append is INVALID_TXN_STATE. The pending entries are
recorded as soon as the leader appended the batch (no await between the append and
them), so a marker, which follows the batch in the log, always finds them; a write that
then fails takes its own entries back.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from replog.coordinator.group.coordinator import (
    TransactionalProducer,
    Verification,
    offset_commit_record,
)
from replog.coordinator.group.offsets import CommittedOffset, TopicPartition
from replog.coordinator.group.records import OffsetCommitValue

if TYPE_CHECKING:
    from replog.coordinator.group.coordinator import GroupCoordinator
    from replog.coordinator.group.group import Group
    from replog.coordinator.group.shard import GroupShard

NO_GENERATION = -1

Verify = Callable[[int, TransactionalProducer], Awaitable[tuple[ErrorCode, Verification | None]]]
"""``(offsets partition, producer)`` -> (NONE and the verification to append with, or the
error to answer: the transaction coordinator's refusal, as TxnOffsetCommit carries it)."""


@dataclass(frozen=True)
class GroupFence:
    """What TxnOffsetCommit v3+ says of the consumer whose offsets these are (KIP-447);
    older versions send none of it (generation -1, no member)."""

    generation_id: int = NO_GENERATION
    member_id: str = ""
    group_instance_id: str | None = None


def validate_txn_offset_commit(group: Group | None, fence: GroupFence) -> ErrorCode:
    """Whether the commit may be written (Kafka ``validateTransactionalOffsetCommit``): a
    group that does not exist accepts a commit from outside group management (a
    "simple" group, generation < 0) and is ILLEGAL_GENERATION otherwise."""
    if group is None:
        if fence.generation_id < 0:
            return ErrorCode.none
        return ErrorCode.illegal_generation
    return group.validate_txn_offset_commit(
        fence.member_id, fence.generation_id, fence.group_instance_id
    )


async def commit_transactional_offsets(
    coordinator: GroupCoordinator,
    group_id: str,
    producer: TransactionalProducer,
    fence: GroupFence,
    offsets: list[tuple[TopicPartition, OffsetCommitValue]],
    verify: Verify | None = None,
) -> ErrorCode:
    """Write ``offsets`` for ``group_id`` in ``producer``'s transaction; the error for
    every partition of the request (the caller answers per-partition refusals, such as
    topic authorization, itself). ``verify``: KIP-890's check, None when it is off."""
    if producer.producer_id < 0:
        return ErrorCode.invalid_producer_id_mapping
    error, shard = coordinator.shard_for(group_id)
    if shard is None:
        return error
    verification = None
    if verify is not None and offsets:
        error, verification = await verify(shard.partition, producer)
        if error != ErrorCode.none:
            return error
        error, shard = coordinator.shard_for(group_id)  # it may have moved meanwhile
        if shard is None:
            return error
    error = validate_txn_offset_commit(shard.groups.get(group_id), fence)
    if error != ErrorCode.none or not offsets:
        return error
    records = [offset_commit_record(group_id, tp, value) for tp, value in offsets]
    appended: list[int] = []

    def hold(first: int) -> None:
        appended.append(first)
        _hold_pending(shard, group_id, producer.producer_id, offsets, first)

    error, _ = await coordinator.append_transactional(shard, records, producer, hold, verification)
    if error != ErrorCode.none and appended and shard.active:
        # Kafka ``failPendingTxnOffsetCommit``: the write did not complete.
        for i, (tp, _value) in enumerate(offsets):
            shard.offsets.drop_pending(producer.producer_id, group_id, tp, appended[0] + i)
    return error


def _hold_pending(
    shard: GroupShard,
    group_id: str,
    producer_id: int,
    offsets: list[tuple[TopicPartition, OffsetCommitValue]],
    first: int,
) -> None:
    for i, (tp, value) in enumerate(offsets):
        shard.offsets.put_pending(producer_id, group_id, tp, CommittedOffset.of(value, first + i))
