"""The leader's replication rules for one partition, as a sans-IO state machine.

``LeaderState`` decides, from events the IO layer feeds it (local appends,
follower fetches, ISR-update answers from ZooKeeper, the passing of time), when
the high watermark moves, when the ISR should grow or shrink, and when an
``acks=all`` produce is done. It reads no clock, socket or disk: ``now_ms`` is
an argument and decisions come back as values (``HwChange``,
``IsrChangeProposal``, ``StopLeading``) for the IO layer to carry out.

Rules (Kafka ``Partition`` / ``Replica``; seeds 000, 001, 003):

* high watermark = min log end offset over the *maximal* ISR, leader included;
  it never moves backwards while this leadership lasts, and a follower whose
  offset is still unknown in this leadership holds it where it is;
* a follower joins the ISR once its fetch offset reaches both the high
  watermark and the offset where this leader epoch started, and the IO layer
  says it is eligible (alive, not shutting down, fetching with the broker
  epoch it is registered with: KIP-841 / KIP-903);
* a follower leaves the ISR when it has not been caught up for
  ``replica.lag.time.max.ms`` (time only, seed 001);
* an ISR change is a conditional ZooKeeper update; while it is pending the HW
  uses the larger ISR, and if the update is rejected the znode moved on under
  us: a controller elected someone else, so we stop acting as leader (seed 000,
  "Dealing with multiple leaders in transition");
* ``acks=all`` needs ``len(ISR) >= min.insync.replicas`` both before the append
  (NOT_ENOUGH_REPLICAS) and when the HW passes it (NOT_ENOUGH_REPLICAS_AFTER_APPEND).

One deliberate difference from Kafka: a follower in the ISR that fetches
*below* the high watermark has lost records it acknowledged (it restarted with
an unflushed tail). Kafka waits out the lag time; here it is proposed for
removal at once, since keeping it electable could lose committed records.

Concurrency: a ``LeaderState`` is owned by the partition's task; not safe
across awaits. Every mutating method re-checks the invariants and raises
``ReplicationInvariantError`` if one is broken.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from replog.replication.isr import (
    FollowerReplicaState,
    IsrChangeProposal,
    IsrState,
    PartitionIsrState,
    check_isr_transition,
)


class ReplicationInvariantError(RuntimeError):
    """A replication invariant does not hold: stop this replica loudly."""


class NotLeadingError(RuntimeError):
    """The ``LeaderState`` was used after it stopped leading."""


# A value, never changed once built, but not frozen: built on every request, and a frozen
# dataclass costs ~0.3 µs a field to build here (bench/README.md, issue 27).
@dataclass(slots=True, unsafe_hash=True)
class HwChange:
    old: int
    new: int


@dataclass(frozen=True, slots=True)
class StopLeading:
    """Effect: stop acting as leader at ``leader_epoch``; wait for the controller's LeaderAndIsr."""

    leader_epoch: int
    partition_zk_version: int
    reason: str


# A value, never changed once built, but not frozen: built on every request, and a frozen
# dataclass costs ~0.3 µs a field to build here (bench/README.md, issue 27).
@dataclass(slots=True, unsafe_hash=True)
class FetchOutcome:
    """What a follower fetch changed. ``isr_change`` must be written to ZooKeeper."""

    high_watermark_change: HwChange | None = None
    isr_change: IsrChangeProposal | None = None
    follower_lost_records: bool = False


NOTHING_CHANGED = FetchOutcome()


@dataclass(frozen=True, slots=True)
class IsrUpdateOutcome:
    """Result of applying ZooKeeper's answer to an ``IsrChangeProposal``."""

    committed: bool
    in_sync_replicas: tuple[int, ...]
    high_watermark_change: HwChange | None = None
    stop_leading: StopLeading | None = None


class AcksAllStatus(enum.Enum):
    PENDING = "pending"
    SATISFIED = "satisfied"
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = "not_enough_replicas_after_append"
    NOT_LEADER_OR_FOLLOWER = "not_leader_or_follower"  # the leadership it was appended in ended

    @property
    def error(self) -> ErrorCode | None:
        if self is AcksAllStatus.NOT_ENOUGH_REPLICAS_AFTER_APPEND:
            return ErrorCode.not_enough_replicas_after_append
        if self is AcksAllStatus.NOT_LEADER_OR_FOLLOWER:
            return ErrorCode.not_leader_or_follower
        return None


def _replica_sets(
    broker_id: int, assigned_replicas: Iterable[int], in_sync_replicas: Iterable[int]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A leadership's replicas and ISR, duplicates dropped; ValueError unless the leader
    is in both and the ISR within the replicas."""
    assigned = tuple(dict.fromkeys(assigned_replicas))
    isr = tuple(dict.fromkeys(in_sync_replicas))
    if broker_id not in assigned:
        raise ValueError(f"leader {broker_id} is not an assigned replica {assigned}")
    if broker_id not in isr:
        raise ValueError(f"leader {broker_id} is not in the ISR {isr}")
    if not set(isr) <= set(assigned):
        raise ValueError(f"ISR {isr} is not within the assigned replicas {assigned}")
    return assigned, isr


class LeaderPhase(enum.Enum):
    LEADING = "leading"
    RESIGNED = "resigned"


class LeaderState:
    """Leader-side replication state of one partition for one leader epoch.

    Create one at ``makeLeader`` (a new leader epoch, or a restart) and drop it
    when the broker stops leading. Owned by the partition's task; not safe
    across awaits.
    """

    def __init__(
        self,
        *,
        broker_id: int,
        leader_epoch: int,
        assigned_replicas: Iterable[int],
        in_sync_replicas: Iterable[int],
        log_end_offset: int,
        high_watermark: int,
        now_ms: int,
        replica_lag_time_max_ms: int,
        min_insync_replicas: int,
        partition_zk_version: int,
        leader_epoch_start_offset: int | None = None,
    ) -> None:
        assigned, isr = _replica_sets(broker_id, assigned_replicas, in_sync_replicas)
        if not 0 <= high_watermark <= log_end_offset:
            raise ValueError(f"high watermark {high_watermark} outside [0, {log_end_offset}]")
        if leader_epoch < 0 or replica_lag_time_max_ms <= 0 or min_insync_replicas < 1:
            raise ValueError("leader_epoch, replica.lag.time.max.ms, min.insync.replicas invalid")
        self.broker_id = broker_id
        self.leader_epoch = leader_epoch
        self.assigned_replicas = assigned
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.min_insync_replicas = min_insync_replicas
        self.partition_zk_version = partition_zk_version
        self.leader_epoch_start_offset = (
            log_end_offset if leader_epoch_start_offset is None else leader_epoch_start_offset
        )
        self.phase = LeaderPhase.LEADING
        self._log_end_offset = log_end_offset
        self._high_watermark = high_watermark
        self._isr = PartitionIsrState(isr=isr)
        self._followers = {
            r: FollowerReplicaState.for_new_leader(
                r,
                in_sync=r in isr,
                leader_epoch_start_offset=self.leader_epoch_start_offset,
                now_ms=now_ms,
            )
            for r in assigned
            if r != broker_id
        }
        self._lost_records: set[int] = set()
        # Kafka's makeLeader: the ISR may be down to the leader alone.
        self._maybe_increment_high_watermark()
        self.check_invariants()

    # -- queries ----------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def in_sync_replicas(self) -> tuple[int, ...]:
        """The committed ISR (what ZooKeeper holds)."""
        return self._isr.isr

    @property
    def maximal_in_sync_replicas(self) -> tuple[int, ...]:
        """The ISR the high watermark waits for: committed ISR plus any pending addition."""
        return self._isr.maximal_isr

    @property
    def isr_state(self) -> IsrState:
        return self._isr.state

    @property
    def pending_isr_change(self) -> IsrChangeProposal | None:
        return self._isr.pending

    @property
    def is_leading(self) -> bool:
        return self.phase is LeaderPhase.LEADING

    def follower_log_end_offset(self, replica_id: int) -> int | None:
        return self._followers[replica_id].log_end_offset

    def follower_last_caught_up_time_ms(self, replica_id: int) -> int:
        return self._followers[replica_id].last_caught_up_time_ms

    def follower_log_start_offset(self, replica_id: int) -> int:
        """The follower's log start offset from its last fetch; -1 before one."""
        return self._followers[replica_id].log_start_offset

    # -- events -----------------------------------------------------------------

    def on_local_append(self, log_end_offset: int) -> HwChange | None:
        """The leader's log grew to ``log_end_offset``."""
        self._require_leading()
        if log_end_offset < self._log_end_offset:
            raise ReplicationInvariantError(
                f"leader log end offset moved back {self._log_end_offset} -> {log_end_offset}"
            )
        self._log_end_offset = log_end_offset
        change = self._maybe_increment_high_watermark()
        self.check_invariants()
        return change

    def on_follower_fetch(
        self,
        replica_id: int,
        fetch_offset: int,
        now_ms: int,
        leader_log_end_offset: int | None = None,
        *,
        broker_epoch: int = -1,
        isr_eligible: bool = True,
        log_start_offset: int = -1,
    ) -> FetchOutcome:
        """A follower fetched from ``fetch_offset``: everything below it is in its log.

        ``leader_log_end_offset`` is the leader's LEO when the fetch was served
        (defaults to the current one). Call after the read succeeded, i.e. with
        ``0 <= fetch_offset <= log_end_offset`` (see ``fetch_rules``).
        ``broker_epoch`` is the one in the fetch request; ``isr_eligible`` is
        False when the metadata says the follower is offline, shutting down, or
        registered with another broker epoch: it then cannot join the ISR.
        ``log_start_offset`` is the follower's, from the request (the low
        watermark DeleteRecords waits for).
        """
        self._require_leading()
        if replica_id not in self._followers:
            raise ValueError(f"replica {replica_id} is not a follower of this partition")
        leader_leo = (
            self._log_end_offset if leader_log_end_offset is None else leader_log_end_offset
        )
        if not 0 <= fetch_offset <= leader_leo <= self._log_end_offset:
            raise ValueError(
                f"fetch offset {fetch_offset} / leader LEO {leader_leo} outside "
                f"[0, {self._log_end_offset}]"
            )
        follower = self._followers[replica_id]
        follower.update_fetch_state(fetch_offset, now_ms, leader_leo)
        follower.broker_epoch = broker_epoch
        follower.log_start_offset = log_start_offset

        lost = replica_id in self._isr.maximal_isr and fetch_offset < self._high_watermark
        if lost:
            self._lost_records.add(replica_id)
        isr_change: IsrChangeProposal | None = None
        if lost and replica_id in self._isr.isr and not self._isr.is_inflight:
            isr_change = self._propose(
                IsrState.PENDING_SHRINK_ISR,
                tuple(r for r in self._isr.isr if r != replica_id),
            )
        elif isr_eligible and self._can_expand(replica_id, fetch_offset):
            isr_change = self._propose(IsrState.PENDING_EXPAND_ISR, self._isr.isr + (replica_id,))
        hw_change = self._maybe_increment_high_watermark()
        self.check_invariants()
        if hw_change is None and isr_change is None and not lost:
            return NOTHING_CHANGED  # the usual answer: spares an object per partition fetched
        return FetchOutcome(hw_change, isr_change, follower_lost_records=lost)

    def on_new_leader_epoch(
        self,
        *,
        leader_epoch: int,
        assigned_replicas: Iterable[int],
        in_sync_replicas: Iterable[int],
        partition_zk_version: int,
        log_end_offset: int,
        now_ms: int,
    ) -> HwChange | None:
        """This broker stays leader at a newer ``leader_epoch`` (the controller shrank the
        ISR, or a reassignment changed the replicas): Kafka ``makeLeader`` for a leader
        that was leading. The epoch starts at the log end; the ISR and replicas are the
        controller's; a pending ISR change is dropped (its conditional write fails on the
        new znode version and the answer is ignored). Followers keep what their fetches
        told (the high watermark keeps moving without waiting for each to fetch again);
        an ISR member is caught up as of now. One the new ISR holds below the high
        watermark (never one this leader put there) counts as unknown until it fetches.
        """
        self._require_leading()
        assigned, isr = _replica_sets(self.broker_id, assigned_replicas, in_sync_replicas)
        if leader_epoch <= self.leader_epoch:
            raise ValueError(f"leader epoch {leader_epoch} is not after {self.leader_epoch}")
        if log_end_offset < self._log_end_offset:
            raise ReplicationInvariantError(
                f"leader log end offset moved back {self._log_end_offset} -> {log_end_offset}"
            )
        self._log_end_offset = log_end_offset
        self.leader_epoch = leader_epoch
        self.assigned_replicas = assigned
        self.partition_zk_version = partition_zk_version
        self.leader_epoch_start_offset = self._log_end_offset
        self._isr = PartitionIsrState(isr=isr)
        followers: dict[int, FollowerReplicaState] = {}
        for r in assigned:
            if r == self.broker_id:
                continue
            follower = self._followers.get(r)
            if follower is None:
                follower = FollowerReplicaState.for_new_leader(
                    r,
                    in_sync=r in isr,
                    leader_epoch_start_offset=self.leader_epoch_start_offset,
                    now_ms=now_ms,
                )
            else:
                follower.reset_for_new_epoch(
                    in_sync=r in isr, leader_log_end_offset=self._log_end_offset, now_ms=now_ms
                )
                leo = follower.log_end_offset
                if r in isr and leo is not None and leo < self._high_watermark:
                    follower.log_end_offset = None
            followers[r] = follower
        self._followers = followers
        self._lost_records &= set(followers)
        change = self._maybe_increment_high_watermark()
        self.check_invariants()
        return change

    def maybe_shrink_isr(self, now_ms: int) -> IsrChangeProposal | None:
        """Propose dropping followers not caught up for ``replica.lag.time.max.ms``."""
        self._require_leading()
        if self._isr.is_inflight:
            return None
        out_of_sync = {
            r
            for r in self._isr.isr
            if r != self.broker_id
            and (
                r in self._lost_records
                or self._followers[r].is_out_of_sync(
                    self._log_end_offset, now_ms, self.replica_lag_time_max_ms
                )
            )
        }
        if not out_of_sync:
            return None
        proposal = self._propose(
            IsrState.PENDING_SHRINK_ISR, tuple(r for r in self._isr.isr if r not in out_of_sync)
        )
        self.check_invariants()
        return proposal

    def on_isr_update_result(
        self, proposal: IsrChangeProposal, new_zk_version: int | None
    ) -> IsrUpdateOutcome:
        """ZooKeeper's answer to ``proposal``: the znode's new version, or None if rejected.

        A rejection means the partition state changed under us (a controller
        moved leadership or bumped the epoch): this object stops leading and the
        outcome carries ``StopLeading``; the IO layer fences produces and
        follower fetches until the next LeaderAndIsr.
        """
        self._require_leading()
        if self._isr.pending != proposal:
            raise ValueError(f"{proposal} is not the pending ISR change {self._isr.pending}")
        if new_zk_version is None:
            self._isr = PartitionIsrState(isr=self._isr.isr)
            self.phase = LeaderPhase.RESIGNED
            stop = StopLeading(
                self.leader_epoch,
                self.partition_zk_version,
                f"conditional ISR update at zk version {proposal.partition_zk_version} rejected",
            )
            return IsrUpdateOutcome(False, self._isr.isr, stop_leading=stop)
        if new_zk_version <= self.partition_zk_version:
            raise ValueError(
                f"zk version went from {self.partition_zk_version} to {new_zk_version}"
            )
        check_isr_transition(self._isr.state, IsrState.COMMITTED)
        self._isr = PartitionIsrState(isr=proposal.new_isr)
        self.partition_zk_version = new_zk_version
        self._lost_records -= proposal.removed
        hw_change = self._maybe_increment_high_watermark()
        self.check_invariants()
        return IsrUpdateOutcome(True, self._isr.isr, high_watermark_change=hw_change)

    def on_isr_update_ineligible(self, proposal: IsrChangeProposal) -> None:
        """The expansion was refused because an added replica is not eligible (KIP-841/903).

        Leadership is unaffected: go back to the committed ISR; the follower
        can be proposed again once it fetches as its current incarnation.
        """
        self._require_leading()
        if self._isr.pending != proposal or proposal.kind is not IsrState.PENDING_EXPAND_ISR:
            raise ValueError(f"{proposal} is not the pending ISR expansion {self._isr.pending}")
        check_isr_transition(self._isr.state, IsrState.COMMITTED)
        self._isr = PartitionIsrState(isr=self._isr.isr)
        self.check_invariants()

    def resign(self, reason: str) -> StopLeading:
        """Stop leading (e.g. a LeaderAndIsr made this broker a follower)."""
        self.phase = LeaderPhase.RESIGNED
        self._isr = PartitionIsrState(isr=self._isr.isr)
        return StopLeading(self.leader_epoch, self.partition_zk_version, reason)

    # -- acks=all -----------------------------------------------------------------

    def can_accept_acks_all(self) -> ErrorCode | None:
        """NOT_ENOUGH_REPLICAS when the ISR is smaller than ``min.insync.replicas``."""
        self._require_leading()
        if len(self._isr.isr) < self.min_insync_replicas:
            return ErrorCode.not_enough_replicas
        return None

    def acks_all_status(self, required_offset: int) -> AcksAllStatus:
        """Whether records below ``required_offset`` (last offset + 1) are committed.

        Kafka ``checkEnoughReplicasReachOffset``: done once the HW reaches it;
        an error if the ISR shrank below ``min.insync.replicas`` meanwhile.
        """
        if self._high_watermark < required_offset:
            return AcksAllStatus.PENDING
        if len(self._isr.isr) < self.min_insync_replicas:
            return AcksAllStatus.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return AcksAllStatus.SATISFIED

    def acks_all_satisfied(self, required_offset: int) -> bool:
        return self.acks_all_status(required_offset) is AcksAllStatus.SATISFIED

    # -- invariants ------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Always-on checks; raise ``ReplicationInvariantError`` on the first broken one.

        Run after every event, a follower's fetch of each partition included: the usual
        case (no ISR change pending) is checked without building sets or closures, and
        anything it doubts goes through ``_check_invariants_fully``, which names what
        broke."""
        hw = self._high_watermark
        isr_state = self._isr
        isr = isr_state.isr
        if (
            isr_state.pending is None
            and isr_state.state is IsrState.COMMITTED
            and 0 <= hw <= self._log_end_offset
            and self._log_end_offset >= self.leader_epoch_start_offset
            and self.broker_id in isr
        ):
            assigned = self.assigned_replicas
            followers = self._followers
            lost = self._lost_records
            broker_id = self.broker_id
            for r in isr:
                if r not in assigned:
                    break
                if r == broker_id or r in lost:
                    continue
                follower_leo = followers[r].log_end_offset
                if follower_leo is not None and hw > follower_leo:
                    break
            else:
                return
        self._check_invariants_fully()

    def _check_invariants_fully(self) -> None:
        hw, leo = self._high_watermark, self._log_end_offset
        isr, maximal = self._isr.isr, self._isr.maximal_isr

        def fail(msg: str) -> None:
            raise ReplicationInvariantError(
                f"partition leader {self.broker_id} epoch {self.leader_epoch}: {msg}"
            )

        if not 0 <= hw <= leo:
            fail(f"high watermark {hw} outside [0, log end offset {leo}]")
        if leo < self.leader_epoch_start_offset:
            fail(f"log end offset {leo} below epoch start {self.leader_epoch_start_offset}")
        if self.broker_id not in isr:
            fail(f"leader not in ISR {isr}")
        if not set(isr) <= set(maximal) <= set(self.assigned_replicas):
            fail(f"ISR {isr} / maximal ISR {maximal} / assigned {self.assigned_replicas}")
        if (self._isr.pending is None) != (self._isr.state is IsrState.COMMITTED):
            fail(f"ISR state {self._isr.state} with pending change {self._isr.pending}")
        for r in maximal:
            if r == self.broker_id or r in self._lost_records:
                continue
            follower_leo = self._followers[r].log_end_offset
            if follower_leo is not None and hw > follower_leo:
                fail(f"high watermark {hw} above ISR member {r}'s log end offset {follower_leo}")

    # -- internals -----------------------------------------------------------------

    def _require_leading(self) -> None:
        if self.phase is not LeaderPhase.LEADING:
            raise NotLeadingError(
                f"broker {self.broker_id} no longer leads epoch {self.leader_epoch}"
            )

    def _can_expand(self, replica_id: int, fetch_offset: int) -> bool:
        return (
            not self._isr.is_inflight
            and replica_id not in self._isr.isr
            and fetch_offset >= self._high_watermark
            and fetch_offset >= self.leader_epoch_start_offset
        )

    def _propose(self, kind: IsrState, new_isr: tuple[int, ...]) -> IsrChangeProposal:
        check_isr_transition(self._isr.state, kind)
        added = [r for r in new_isr if r not in self._isr.isr]
        proposal = IsrChangeProposal(
            leader_id=self.broker_id,
            leader_epoch=self.leader_epoch,
            kind=kind,
            current_isr=self._isr.isr,
            new_isr=new_isr,
            partition_zk_version=self.partition_zk_version,
            added_broker_epochs=tuple((r, self._followers[r].broker_epoch) for r in added),
        )
        self._isr = PartitionIsrState(isr=self._isr.isr, state=kind, pending=proposal)
        if kind is IsrState.PENDING_EXPAND_ISR:
            self._lost_records -= proposal.added
        return proposal

    def _maybe_increment_high_watermark(self) -> HwChange | None:
        candidate = self._log_end_offset
        for r in self._isr.maximal_isr:
            if r == self.broker_id:
                continue
            follower_leo = self._followers[r].log_end_offset
            if follower_leo is None:
                return None
            candidate = min(candidate, follower_leo)
        if candidate <= self._high_watermark:
            return None
        change = HwChange(self._high_watermark, candidate)
        self._high_watermark = candidate
        return change
