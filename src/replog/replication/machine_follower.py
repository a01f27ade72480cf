"""``PartitionMachine``'s events as a follower: the truncation round (KIP-101/279:
ask the leader where our latest epoch ends, or truncate to the high watermark), the
fetch responses (the high watermark and log start the leader sends), and the leader's
OFFSET_OUT_OF_RANGE answers. The rules are ``FollowerState``'s (``follower.py``); these
methods hand them the log's facts and return what the driver must do.

A base class of ``PartitionMachine``, as ``KafkaZkClient`` is made of one class per kind
of znode: the same object, the same owner.

Concurrency: as ``PartitionMachine`` (one owner; not safe across awaits).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog.replication.actions import Action, AdvanceLogStart, LogView, TruncationRule
from replog.replication.core import ReplicationInvariantError
from replog.replication.follower import EpochRequest, FollowerPhase, FollowerState, RestartAt
from replog.replication.truncation import (
    EpochEndOffset,
    TruncationDecision,
    high_watermark_truncation,
)


class FollowerEvents:
    """Concurrency: as ``PartitionMachine``, which sets these attributes."""

    broker_id: int
    log: LogView
    truncation_rule: TruncationRule
    follower_state: FollowerState | None

    # -- truncation ----------------------------------------------------------------------------------

    def _follower(self) -> FollowerState:
        fs = self.follower_state
        if fs is None:
            raise ReplicationInvariantError(f"broker {self.broker_id} is not following")
        return fs

    @property
    def fetch_offset(self) -> int:
        return self._follower().fetch_offset

    def next_truncation_step(self) -> EpochRequest | TruncationDecision:
        """Ask the leader where our latest epoch ends, or truncate now (no epochs known)."""
        fs = self._follower()
        if self.truncation_rule is TruncationRule.HIGH_WATERMARK:
            return high_watermark_truncation(self.log.log_end_offset, fs.high_watermark)
        return fs.next_truncation_step(self.log.epoch_entries())

    def on_epoch_response(
        self, error: ErrorCode, answer: EpochEndOffset
    ) -> TruncationDecision | None:
        """The leader's OffsetsForLeaderEpoch answer; None: ask again after a back-off."""
        fs = self._follower()
        if error is not ErrorCode.none or fs.phase is not FollowerPhase.TRUNCATING:
            return None
        return fs.on_epoch_response(self.log.epoch_entries(), answer)

    def on_truncated(self, decision: TruncationDecision) -> None:
        """The driver truncated the log as ``decision`` said; fetch next, or ask again."""
        self._follower().on_truncated(decision, self.log.log_end_offset)

    def on_append_mismatch(self) -> None:
        """Fetched records did not start at our log end: find the divergence point again."""
        fs = self._follower()
        self.follower_state = FollowerState(
            broker_id=self.broker_id,
            leader_id=fs.leader_id,
            leader_epoch=fs.leader_epoch,
            log_end_offset=self.log.log_end_offset,
            high_watermark=fs.high_watermark,
        )

    def on_fetch_response(
        self, *, leader_high_watermark: int, leader_log_start_offset: int
    ) -> list[Action]:
        """Fetched records were appended by the driver (the log grew to the view's end)."""
        fs = self._follower()
        actions: list[Action] = []
        change = fs.on_fetch_response(self.log.log_end_offset, leader_high_watermark)
        if change is not None:
            actions.append(change)
        start = min(leader_log_start_offset, fs.high_watermark)
        if start > self.log.log_start_offset:
            actions.append(AdvanceLogStart(start))
        return actions

    def on_fetch_offset_out_of_range(
        self, leader_log_start_offset: int, leader_log_end_offset: int
    ) -> TruncationDecision | RestartAt | None:
        """The leader answered OFFSET_OUT_OF_RANGE (Kafka ``fetchOffsetAndTruncate``)."""
        return self._follower().on_offset_out_of_range(
            leader_log_start_offset, leader_log_end_offset
        )
