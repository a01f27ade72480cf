"""What every group type (classic, KIP-848 consumer) offers the coordinator runtime.

The runtime keeps one ``dict[str, Group]`` per ``__consumer_offsets`` partition and
asks a group these questions when a request touches offsets or the group as a whole
(Kafka ``Group`` in the new group coordinator).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from kio.schema.errors import ErrorCode


@dataclass(frozen=True)
class Record:
    """One record for ``__consumer_offsets``: encoded key, and value (None: tombstone)."""

    key: bytes
    value: bytes | None


class Group(Protocol):
    group_id: str

    @property
    def group_type(self) -> str:
        """``classic`` or ``consumer`` (ListGroups v5 ``GroupType``)."""
        ...

    @property
    def protocol_type(self) -> str:
        """Classic: the members' protocol type (``consumer``, ``connect``, or "" for a
        group that only commits offsets); KIP-848 groups: ``consumer``."""
        ...

    def state_name(self) -> str:
        """Kafka's state name: Empty, PreparingRebalance, CompletingRebalance, Stable,
        Dead (classic); Empty, Assigning, Reconciling, Stable, Dead (consumer)."""
        ...

    def is_empty(self) -> bool: ...

    def validate_offset_commit(
        self,
        member_id: str,
        generation_id_or_member_epoch: int,
        group_instance_id: str | None,
        api_version: int,
    ) -> ErrorCode:
        """ErrorCode.none if this member may commit now (Kafka ``validateOffsetCommit``):
        classic groups check generation and member id (ILLEGAL_GENERATION,
        UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID); consumer groups the
        member epoch (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID). A commit with generation -1
        and no member id (a consumer outside group management) is allowed while the
        group is empty."""
        ...

    def validate_txn_offset_commit(
        self, member_id: str, generation_id: int, group_instance_id: str | None
    ) -> ErrorCode:
        """ErrorCode.none if a transactional producer may commit offsets for this member
        (TxnOffsetCommit, KIP-447): as ``validate_offset_commit``, but the member fields
        are checked only when given, and a consumer group's stale member epoch is
        ILLEGAL_GENERATION (Kafka ``validateTransactionalOffsetCommit``)."""
        ...

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode:
        """ErrorCode.none if this fetch may read offsets (OffsetFetch v9+ names the member
        of a consumer group; classic groups accept every fetch)."""
        ...

    def is_subscribed_to_topic(self, topic: str) -> bool:
        """OffsetDelete refuses topics a member is subscribed to
        (GROUP_SUBSCRIBED_TO_TOPIC)."""
        ...

    def validate_delete_group(self) -> ErrorCode:
        """ErrorCode.none, or NON_EMPTY_GROUP while members remain."""
        ...

    def metadata_tombstones(self) -> list[Record]:
        """The tombstones that delete this group's own records (offsets are the runtime's)."""
        ...

    def empty_since_ms(self) -> int | None:
        """When the group last became empty (Kafka ``currentStateTimestamp`` of an Empty
        group): offsets retention counts from it. None for a group that never had
        members (offsets then expire ``offsets.retention.minutes`` after each commit).
        Only asked while ``is_empty()``."""
        ...

    def on_deleted(self, error: ErrorCode) -> None:
        """The group is gone from this coordinator: deleted (DeleteGroups, expiry of an
        empty group: ``error`` is COORDINATOR_NOT_AVAILABLE... as Kafka answers) or
        unloaded because this broker stopped leading its partition (``error`` is
        NOT_COORDINATOR). Go to Dead, stop using the shard's timers and answer anything
        pending (parked JoinGroup/SyncGroup responses) with ``error``."""
        ...
