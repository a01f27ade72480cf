"""The vocabulary of ``PartitionMachine``: the leadership it is told, the log facts it
reads, and the actions and decisions it hands its driver.

Concurrency: immutable values (``LogView`` is read on the driver's task); safe anywhere.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from kio.schema.errors import ErrorCode

from replog.replication.core import HwChange, StopLeading
from replog.replication.fetch_rules import FetchBounds
from replog.replication.isr import IsrChangeProposal
from replog.storage.epoch_entries import EpochEndOffset

NO_LEADER = -1


class Role(enum.Enum):
    NONE = "none"  # no leader, not yet told, stopped, or fenced after a rejected ISR write
    LEADER = "leader"
    FOLLOWER = "follower"


class TruncationRule(enum.Enum):
    """How a new follower finds where to truncate."""

    LEADER_EPOCH = "leader_epoch"  # KIP-101 / KIP-279: what replog does
    HIGH_WATERMARK = "high_watermark"  # the pre-KIP-101 rule; only to show it loses data


@dataclass(frozen=True, slots=True)
class PartitionLeadership:
    """What the controller says about one partition (one partition of a LeaderAndIsr)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    zk_version: int
    controller_epoch: int

    def assigns(self, broker_id: int) -> bool:
        """Whether ``broker_id`` holds a replica of the partition."""
        return broker_id in self.replicas


class LogView(Protocol):
    """The in-memory facts of the replica's log the rules need; the driver owns the log."""

    @property
    def log_end_offset(self) -> int: ...

    @property
    def log_start_offset(self) -> int: ...

    def epoch_entries(self) -> Sequence[tuple[int, int]]: ...


# -- actions ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AssignLeaderEpoch:
    """Record in the log's epoch cache that ``leader_epoch`` starts at ``start_offset``."""

    leader_epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class RoleChange:
    """The role changed (or went on at a newer epoch): delayed operations re-check."""

    role: Role
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class StartFetching:
    """Follow ``leader_id`` at ``leader_epoch``: truncate first, then fetch."""

    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class StopFetching:
    pass


@dataclass(frozen=True, slots=True)
class IsrCommitted:
    """ZooKeeper took the ISR change: announce it to the controller (isr_change_notification)."""

    in_sync_replicas: tuple[int, ...]
    zk_version: int


@dataclass(frozen=True, slots=True)
class AdvanceLogStart:
    """Follower: move the log start offset up to ``offset`` (the leader deleted below it)."""

    offset: int


Action = (
    AssignLeaderEpoch
    | RoleChange
    | StartFetching
    | StopFetching
    | HwChange
    | IsrChangeProposal
    | IsrCommitted
    | StopLeading
    | AdvanceLogStart
)


# A value, never changed once built, but not frozen: built on every request, and a frozen
# dataclass costs ~0.3 µs a field to build here (bench/README.md, issue 27).
@dataclass(slots=True, unsafe_hash=True)
class FetchDecision:
    """The answer to a fetch arriving at this replica.

    On ``ErrorCode.none`` the driver reads ``[bounds.start_offset,
    bounds.end_offset)`` (within its byte budget; nothing when the bounds are
    empty), carries out ``actions`` (a new high watermark, an ISR change to
    write) and answers with ``high_watermark`` and ``log_start_offset``. A
    ``diverging_epoch`` (KIP-595) is answered at once, with no records and
    without waiting for the other partitions of the fetch; so is an error.
    """

    error: ErrorCode
    bounds: FetchBounds | None = None
    high_watermark: int = -1
    actions: tuple[Action, ...] = ()
    follower_lost_records: bool = False
    # The follower reported a higher log start offset: the low watermark may have
    # moved, so DeleteRecords waiting on it should look again.
    follower_log_start_advanced: bool = False
    log_start_offset: int = -1
    last_stable_offset: int = -1  # the high watermark, but in a plain error answer
    diverging_epoch: EpochEndOffset | None = None
    # A follower out of the ISR fetching a throttled replica while the leader is over
    # its replication quota: answered empty (Kafka ``shouldLeaderThrottle``).
    throttled: bool = False

    @property
    def answer_now(self) -> bool:
        """Nothing to wait for: the fetch is answered at once (an error, a divergence)."""
        return self.error is not ErrorCode.none or self.diverging_epoch is not None
