"""The follower's replication rules for one partition, as a sans-IO state machine.

A follower first truncates (``TRUNCATING``: OffsetsForLeaderEpoch round trips,
see ``truncation``), then fetches (``FETCHING``). Its high watermark is
``min(leader's HW from the last fetch response, own log end offset)``; like
Kafka it simply takes that value, so it can drop when a new leader's HW lags.

The IO layer owns the log: it sends the requests this object asks for, applies
the truncations it decides, appends fetched records, and reports the new log
end offset back.

Concurrency: owned by the partition's fetcher task; not safe across awaits.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from replog.replication.core import HwChange, ReplicationInvariantError
from replog.replication.truncation import (
    EpochEndOffset,
    EpochEntries,
    TruncationDecision,
    latest_epoch,
    truncation_offset,
)


class FollowerPhase(enum.Enum):
    TRUNCATING = "truncating"
    FETCHING = "fetching"


_VALID_PREVIOUS: dict[FollowerPhase, frozenset[FollowerPhase]] = {
    # A fetch answered OFFSET_OUT_OF_RANGE sends the follower back to truncating.
    FollowerPhase.TRUNCATING: frozenset({FollowerPhase.FETCHING}),
    FollowerPhase.FETCHING: frozenset({FollowerPhase.TRUNCATING}),
}


class IllegalFollowerTransition(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class EpochRequest:
    """Send ``OffsetsForLeaderEpoch`` for ``requested_epoch`` (with ``current_leader_epoch``)."""

    current_leader_epoch: int
    requested_epoch: int


@dataclass(frozen=True, slots=True)
class RestartAt:
    """Effect: empty the log and continue at ``offset`` (the leader's log start)."""

    offset: int


class FollowerState:
    """Follower-side state for one partition while following ``leader_id`` at ``leader_epoch``.

    Owned by the partition's fetcher task; not safe across awaits.
    """

    def __init__(
        self,
        *,
        broker_id: int,
        leader_id: int,
        leader_epoch: int,
        log_end_offset: int,
        high_watermark: int,
    ) -> None:
        if leader_id == broker_id:
            raise ValueError("a broker does not follow itself")
        if log_end_offset < 0 or high_watermark < 0:
            raise ValueError("negative offsets")
        self.broker_id = broker_id
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.phase = FollowerPhase.TRUNCATING
        self._log_end_offset = log_end_offset
        self._high_watermark = min(high_watermark, log_end_offset)

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def fetch_offset(self) -> int:
        if self.phase is not FollowerPhase.FETCHING:
            raise IllegalFollowerTransition("no fetching before truncation is complete")
        return self._log_end_offset

    # -- truncation ------------------------------------------------------------------

    def next_truncation_step(
        self, epoch_entries: EpochEntries
    ) -> EpochRequest | TruncationDecision:
        """Ask the leader about our latest epoch, or, with no epochs at all, truncate to the HW."""
        self._require(FollowerPhase.TRUNCATING)
        epoch = latest_epoch(epoch_entries)
        if epoch is None:
            return TruncationDecision(min(self._high_watermark, self._log_end_offset), True)
        return EpochRequest(current_leader_epoch=self.leader_epoch, requested_epoch=epoch)

    def on_epoch_response(
        self, epoch_entries: EpochEntries, answer: EpochEndOffset
    ) -> TruncationDecision:
        """Where to truncate, given the leader's answer for our latest epoch."""
        self._require(FollowerPhase.TRUNCATING)
        return truncation_offset(epoch_entries, self._log_end_offset, self._high_watermark, answer)

    def on_truncated(self, decision: TruncationDecision, log_end_offset: int) -> None:
        """The IO layer applied ``decision``; the log now ends at ``log_end_offset``."""
        self._require(FollowerPhase.TRUNCATING)
        if log_end_offset > self._log_end_offset or log_end_offset > max(decision.offset, 0):
            raise ReplicationInvariantError(
                f"follower {self.broker_id}: log end offset {log_end_offset} after truncating "
                f"{self._log_end_offset} to {decision.offset}"
            )
        self._log_end_offset = log_end_offset
        self._high_watermark = min(self._high_watermark, log_end_offset)
        if decision.completed:
            self._transition(FollowerPhase.FETCHING)

    # -- fetching ----------------------------------------------------------------------

    def on_fetch_response(self, log_end_offset: int, leader_high_watermark: int) -> HwChange | None:
        """Fetched records were appended (the log now ends at ``log_end_offset``)."""
        self._require(FollowerPhase.FETCHING)
        if log_end_offset < self._log_end_offset:
            raise ReplicationInvariantError(
                f"follower {self.broker_id}: log end offset went back "
                f"{self._log_end_offset} -> {log_end_offset} while fetching"
            )
        self._log_end_offset = log_end_offset
        new_hw = min(leader_high_watermark, log_end_offset)
        if new_hw == self._high_watermark:
            return None
        change = HwChange(self._high_watermark, new_hw)
        self._high_watermark = new_hw
        return change

    def on_offset_out_of_range(
        self, leader_log_start_offset: int, leader_log_end_offset: int
    ) -> TruncationDecision | RestartAt | None:
        """The leader said our fetch offset is out of range (Kafka ``fetchOffsetAndTruncate``).

        Our log is longer than the leader's: truncate to its end. Our log ends
        before the leader's log start: start over at the leader's log start.
        Otherwise there is nothing to do but fetch again.
        """
        self._require(FollowerPhase.FETCHING)
        if leader_log_end_offset < self._log_end_offset:
            self._transition(FollowerPhase.TRUNCATING)
            return TruncationDecision(leader_log_end_offset, completed=True)
        if leader_log_start_offset > self._log_end_offset:
            self._log_end_offset = leader_log_start_offset
            self._high_watermark = leader_log_start_offset
            return RestartAt(leader_log_start_offset)
        return None

    def _transition(self, target: FollowerPhase) -> None:
        if self.phase not in _VALID_PREVIOUS[target]:
            raise IllegalFollowerTransition(f"{self.phase.name} -> {target.name} is not allowed")
        self.phase = target

    def _require(self, phase: FollowerPhase) -> None:
        if self.phase is not phase:
            raise IllegalFollowerTransition(f"expected {phase.name}, in {self.phase.name}")
