"""What a fetch may read, and whether its leader epoch is current: pure functions.

* Followers read up to the log end offset; consumers up to the high watermark
  (``read_uncommitted``) or the last stable offset (``read_committed``).
* An offset below the log start or above the log end offset is
  OFFSET_OUT_OF_RANGE for everyone. A consumer asking for an offset in
  ``[HW, LEO]`` gets an empty answer, not an error: after a leadership change
  the new leader's HW can lag the one the consumer saw (seed 000, question 7).
* KIP-320: a request carrying an older leader epoch is FENCED_LEADER_EPOCH, a
  newer one UNKNOWN_LEADER_EPOCH (this broker has not heard of it yet); ``-1``
  skips the check.
* KIP-595 (Fetch v12+): a fetcher that says which epoch its last record had
  (``last_fetched_epoch``, consumers and followers alike) is told where its log
  diverges from the leader's instead of being sent records (``diverging_epoch``).

Concurrency: pure functions; safe anywhere.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from replog.protocol.epochs import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, EpochEndOffset

NO_LEADER_EPOCH = -1
CONSUMER_REPLICA_ID = -1
READ_UNCOMMITTED = 0
READ_COMMITTED = 1


# A value, never changed once built, but not frozen: built on every request, and a frozen
# dataclass costs ~0.3 µs a field to build here (bench/README.md, issue 27).
@dataclass(slots=True, unsafe_hash=True)
class FetchPartitionRequest:
    """One partition of a Fetch request, as a follower sends it and a leader reads it."""

    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = NO_LEADER_EPOCH
    log_start_offset: int = -1
    last_fetched_epoch: int = -1  # KIP-595 (Fetch v12+); -1: not given
    topic_id: uuid.UUID | None = None  # KIP-516 (Fetch v13+ names topics by id); None: none


class FetchIsolation(enum.Enum):
    LOG_END = "log_end"  # follower fetch
    HIGH_WATERMARK = "high_watermark"  # consumer, read_uncommitted
    TXN_COMMITTED = "txn_committed"  # consumer, read_committed


def fetch_isolation(replica_id: int, isolation_level: int) -> FetchIsolation:
    """Kafka ``FetchIsolation.apply``: replicas (id >= 0) read to the LEO."""
    if replica_id >= 0:
        return FetchIsolation.LOG_END
    if isolation_level == READ_COMMITTED:
        return FetchIsolation.TXN_COMMITTED
    return FetchIsolation.HIGH_WATERMARK


# A value, never changed once built, but not frozen: built on every request, and a frozen
# dataclass costs ~0.3 µs a field to build here (bench/README.md, issue 27).
@dataclass(slots=True, unsafe_hash=True)
class FetchBounds:
    """Read ``[start_offset, end_offset)``; empty when they are equal; nothing on error."""

    error: ErrorCode
    start_offset: int
    end_offset: int

    @property
    def is_empty(self) -> bool:
        return self.error is ErrorCode.none and self.start_offset >= self.end_offset


def fetch_bounds(
    *,
    fetch_offset: int,
    log_start_offset: int,
    high_watermark: int,
    log_end_offset: int,
    isolation: FetchIsolation,
    last_stable_offset: int | None = None,
) -> FetchBounds:
    """The range a fetch at ``fetch_offset`` may read (Kafka ``UnifiedLog.read``)."""
    if not 0 <= log_start_offset <= high_watermark <= log_end_offset:
        raise ValueError(
            f"inconsistent offsets: start {log_start_offset}, HW {high_watermark}, "
            f"LEO {log_end_offset}"
        )
    if fetch_offset < log_start_offset or fetch_offset > log_end_offset:
        return FetchBounds(ErrorCode.offset_out_of_range, fetch_offset, fetch_offset)
    if isolation is FetchIsolation.LOG_END:
        limit = log_end_offset
    elif isolation is FetchIsolation.HIGH_WATERMARK:
        limit = high_watermark
    else:
        lso = high_watermark if last_stable_offset is None else last_stable_offset
        limit = min(lso, high_watermark)
    return FetchBounds(ErrorCode.none, fetch_offset, max(fetch_offset, limit))


def validate_current_leader_epoch(current_leader_epoch: int, leader_epoch: int) -> ErrorCode:
    """KIP-320 fencing of a request's ``current_leader_epoch`` against ours."""
    if current_leader_epoch == NO_LEADER_EPOCH:
        return ErrorCode.none
    if current_leader_epoch < leader_epoch:
        return ErrorCode.fenced_leader_epoch
    if current_leader_epoch > leader_epoch:
        return ErrorCode.unknown_leader_epoch
    return ErrorCode.none


@dataclass(frozen=True, slots=True)
class LastFetchedEpochCheck:
    """What a fetch with a ``last_fetched_epoch`` gets instead of records, if not records.

    ``error`` OFFSET_OUT_OF_RANGE, or NONE with the ``diverging_epoch`` to answer.
    """

    error: ErrorCode
    diverging_epoch: EpochEndOffset | None = None


def check_last_fetched_epoch(
    *,
    last_fetched_epoch: int,
    fetch_offset: int,
    log_start_offset: int,
    epoch_end: EpochEndOffset,
) -> LastFetchedEpochCheck | None:
    """Kafka ``Partition.readRecords`` before the read (KIP-595); None: read as usual.

    ``epoch_end`` is the leader's OffsetsForLeaderEpoch answer for
    ``last_fetched_epoch`` (its errors, fencing first, were answered already). The
    fetcher's log diverges when the leader's largest epoch up to that one is
    smaller, or ends before ``fetch_offset``.
    """
    if epoch_end.leader_epoch == UNDEFINED_EPOCH or epoch_end.end_offset == UNDEFINED_EPOCH_OFFSET:
        return LastFetchedEpochCheck(ErrorCode.offset_out_of_range)
    if fetch_offset < log_start_offset:
        return LastFetchedEpochCheck(ErrorCode.offset_out_of_range)
    if epoch_end.leader_epoch < last_fetched_epoch or epoch_end.end_offset < fetch_offset:
        return LastFetchedEpochCheck(ErrorCode.none, epoch_end)
    return None
