"""Committed offsets of the groups of one ``__consumer_offsets`` partition.

Replayed from the log in order, and updated after each commit's write is acknowledged.
Each entry remembers the offset of the record that wrote it, so two commits of the
same partition whose writes complete out of order leave the later record's value (as
the log does).

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
        """A tombstone at ``record_offset`` removes what was written before it."""
        offsets = self._groups.get(group)
        if offsets is None:
            return
        current = offsets.get(tp)
        if current is not None and current.record_offset <= record_offset:
            del offsets[tp]
        if not offsets:
            del self._groups[group]

    def remove_group(self, group: str) -> list[TopicPartition]:
        return list(self._groups.pop(group, {}))

    def expired(
        self, group: str, now_ms: int, retention_ms: int, empty_since_ms: int | None
    ) -> list[TopicPartition]:
        """Offsets of a group without members that are due for expiry (Kafka
        ``GroupMetadata.removeExpiredOffsets``): an explicit expire timestamp (v1
        records) once it passed; otherwise ``retention_ms`` after the group became
        empty (``empty_since_ms``), or after each commit for a group that never had
        members (None). The caller never asks for a group with members."""
        due = []
        for tp, committed in self._groups.get(group, {}).items():
            if committed.expire_timestamp != NO_EXPIRE_TIMESTAMP:
                if now_ms >= committed.expire_timestamp:
                    due.append(tp)
                continue
            base = committed.commit_timestamp if empty_since_ms is None else empty_since_ms
            if now_ms >= base + retention_ms:
                due.append(tp)
        return due
