"""Committed offsets of the groups of one ``__consumer_offsets`` partition.

Replayed from the log in order, and updated after each commit's write is acknowledged.
Each entry remembers the offset of the record that wrote it, so two commits of the
same partition whose writes complete out of order leave the later record's value (as
the log does).

Transactional offset commits (TxnOffsetCommit, KIP-98/KIP-447) are held apart, per
producer id, until the transaction's marker decides them (Kafka
``OffsetMetadataManager.pendingTransactionalOffsets`` / ``openTransactionsByGroup``):
a COMMIT moves them into the committed offsets unless a later record of the same
partition was written meanwhile (the record offsets decide, so compaction of
``__consumer_offsets`` cannot resurrect an older commit), an ABORT drops them. Until
then OffsetFetch does not see them; with ``require_stable`` it answers
UNSTABLE_OFFSET_COMMIT for their partitions. A tombstone (OffsetDelete, DeleteGroups,
expiry) removes the pending offsets of its partition written before it, as Kafka's
replay does; expiry itself leaves partitions with pending offsets alone.

Concurrency: owned by the event loop (one ``GroupShard``); no method awaits.
"""

from __future__ import annotations

from dataclasses import dataclass

from replog.coordinator.group.records import NO_EXPIRE_TIMESTAMP, OffsetCommitValue

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int
    record_offset: int  # where in __consumer_offsets this commit was written

    @classmethod
    def of(cls, value: OffsetCommitValue, record_offset: int) -> CommittedOffset:
        return cls(
            value.offset,
            value.leader_epoch,
            value.metadata,
            value.commit_timestamp,
            value.expire_timestamp,
            record_offset,
        )


class OffsetStore:
    def __init__(self) -> None:
        self._groups: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        # producer id -> group -> partition -> the transactional commit waiting for its
        # marker; and group -> producer ids with pending commits of that group.
        self._pending: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]] = {}
        self._open_transactions: dict[str, set[int]] = {}

    def groups(self) -> list[str]:
        return list(self._groups)

    def has_offsets(self, group: str) -> bool:
        return bool(self._groups.get(group))

    def of_group(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        return dict(self._groups.get(group, {}))

    def get(self, group: str, tp: TopicPartition) -> CommittedOffset | None:
        return self._groups.get(group, {}).get(tp)

    def put(self, group: str, tp: TopicPartition, committed: CommittedOffset) -> None:
        offsets = self._groups.setdefault(group, {})
        current = offsets.get(tp)
        if current is None or current.record_offset <= committed.record_offset:
            offsets[tp] = committed

    def remove(self, group: str, tp: TopicPartition, record_offset: int) -> None:
        """A tombstone at ``record_offset`` removes what was written before it, pending
        transactional commits of the partition included."""
        for producer_id in list(self._open_transactions.get(group, ())):
            entry = self._pending[producer_id][group].get(tp)
            if entry is not None and entry.record_offset <= record_offset:
                self._forget(producer_id, group, tp)
        offsets = self._groups.get(group)
        if offsets is None:
            return
        current = offsets.get(tp)
        if current is not None and current.record_offset <= record_offset:
            del offsets[tp]
        if not offsets:
            del self._groups[group]

    # -- transactional commits -----------------------------------------------------------

    def put_pending(
        self, producer_id: int, group: str, tp: TopicPartition, committed: CommittedOffset
    ) -> None:
        """A transactional commit of ``producer_id``, held until its marker."""
        assert producer_id >= 0, "a transactional commit needs a producer id"
        offsets = self._pending.setdefault(producer_id, {}).setdefault(group, {})
        current = offsets.get(tp)
        if current is None or current.record_offset <= committed.record_offset:
            offsets[tp] = committed
        self._open_transactions.setdefault(group, set()).add(producer_id)

    def drop_pending(
        self, producer_id: int, group: str, tp: TopicPartition, record_offset: int
    ) -> None:
        """Forget the pending commit written at ``record_offset`` (its write failed);
        a later one of the same partition stays (Kafka ``failPendingTxnOffsetCommit``)."""
        entry = self._pending.get(producer_id, {}).get(group, {}).get(tp)
        if entry is not None and entry.record_offset == record_offset:
            self._forget(producer_id, group, tp)

    def _forget(self, producer_id: int, group: str, tp: TopicPartition) -> None:
        """Remove one pending commit; a producer left without pending commits of the
        group no longer holds a transaction open on it (Kafka's ``openTransactions``
        are per partition: a tombstone clears them)."""
        by_group = self._pending[producer_id]
        offsets = by_group[group]
        del offsets[tp]
        if offsets:
            return
        del by_group[group]
        producers = self._open_transactions[group]
        producers.discard(producer_id)
        if not producers:
            del self._open_transactions[group]
        if not by_group:
            del self._pending[producer_id]

    def complete_transaction(self, producer_id: int, commit: bool) -> list[str]:
        """The marker of ``producer_id``'s transaction: a COMMIT moves its pending
        offsets into the committed ones (each unless a later record of its partition is
        already there, Kafka ``replayEndTransactionMarker``), an ABORT drops them. The
        groups whose pending offsets were decided."""
        pending = self._pending.pop(producer_id, None)
        if pending is None:
            return []
        for group in pending:
            producers = self._open_transactions.get(group)
            if producers is not None:
                producers.discard(producer_id)
                if not producers:
                    del self._open_transactions[group]
        if commit:
            for group, offsets in pending.items():
                for tp, committed in offsets.items():
                    self.put(group, tp, committed)
        return list(pending)

    def has_pending(self, group: str, tp: TopicPartition) -> bool:
        """Whether a transaction holds an undecided commit of ``tp`` for ``group``
        (OffsetFetch ``require_stable``: UNSTABLE_OFFSET_COMMIT)."""
        return any(
            tp in self._pending[producer_id][group]
            for producer_id in self._open_transactions.get(group, ())
        )

    def pending_partitions(self, group: str) -> set[TopicPartition]:
        """The partitions with undecided transactional commits for ``group``."""
        return {
            tp
            for producer_id in self._open_transactions.get(group, ())
            for tp in self._pending[producer_id][group]
        }

    def pending_of(self, producer_id: int) -> dict[str, dict[TopicPartition, CommittedOffset]]:
        """A copy of ``producer_id``'s undecided commits, by group."""
        return {g: dict(o) for g, o in self._pending.get(producer_id, {}).items()}

    def has_open_transactions(self, group: str) -> bool:
        """Whether an undecided transaction holds pending commits for ``group``: the
        group is not removed by expiry meanwhile (Kafka ``cleanupExpiredOffsets``)."""
        return group in self._open_transactions

    def open_producer_ids(self) -> set[int]:
        return set(self._pending)

    def remove_group(self, group: str) -> list[TopicPartition]:
        return list(self._groups.pop(group, {}))

    def expired(
        self, group: str, now_ms: int, retention_ms: int, empty_since_ms: int | None
    ) -> list[TopicPartition]:
        """Offsets of a group without members that are due for expiry (Kafka
        ``GroupMetadata.removeExpiredOffsets``): an explicit expire timestamp (v1
        records) once it passed; otherwise ``retention_ms`` after the group became
        empty (``empty_since_ms``), or after each commit for a group that never had
        members (None). The caller never asks for a group with members. A partition
        with a pending transactional commit is not due (Kafka keeps it until the
        transaction is decided)."""
        due = []
        pending = self.pending_partitions(group)
        for tp, committed in self._groups.get(group, {}).items():
            if tp in pending:
                continue
            if committed.expire_timestamp != NO_EXPIRE_TIMESTAMP:
                if now_ms >= committed.expire_timestamp:
                    due.append(tp)
                continue
            base = committed.commit_timestamp if empty_since_ms is None else empty_since_ms
            if now_ms >= base + retention_ms:
                due.append(tp)
        return due
