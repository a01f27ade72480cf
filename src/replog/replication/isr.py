"""ISR bookkeeping: per-follower fetch state, in-flight ISR changes, change notification batching.

* ``FollowerReplicaState`` is what the leader knows about one follower (Kafka
  ``Replica``): its log end offset as of its last fetch and when it was last
  caught up. Lag is measured in time only (seed 001, KIP-16): a follower is out
  of sync when it has not been caught up for ``replica.lag.time.max.ms``, never
  because a burst of writes put it N messages behind.
* ``IsrState`` / ``PartitionIsrState``: an ISR change travels to ZooKeeper as a
  conditional update; until the answer comes back the partition is in
  ``PENDING_EXPAND_ISR`` or ``PENDING_SHRINK_ISR`` and the high watermark is
  computed over the *maximal* ISR (old ISR plus anyone being added), which is
  always the safe side.
* ``IsrChangePropagation``: ISR changes are announced to the controller in
  batches (seed 003): when some are pending and either none happened in the
  last 5 s or the last announcement was over 60 s ago.

Concurrency: plain objects owned by one partition's task (the propagation
object by the replica manager's task); not safe across awaits.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

ISR_CHANGE_PROPAGATION_BLACKOUT_MS = 5_000
ISR_CHANGE_PROPAGATION_INTERVAL_MS = 60_000
ISR_CHANGE_PROPAGATION_CHECK_INTERVAL_MS = 2_500


def isr_expiration_interval_ms(replica_lag_time_max_ms: int) -> int:
    """How often the leader should call ``maybe_shrink_isr`` (Kafka: half the lag time)."""
    return max(1, replica_lag_time_max_ms // 2)


@dataclass(slots=True)
class FollowerReplicaState:
    """What the leader knows about one follower (Kafka ``Replica`` / ``ReplicaState``).

    ``log_end_offset`` is None until the follower's first fetch in this
    leadership (Kafka's UnknownOffset): an unknown follower in the ISR holds the
    high watermark where it is.
    """

    replica_id: int
    log_end_offset: int | None
    last_caught_up_time_ms: int
    last_fetch_leader_log_end_offset: int
    last_fetch_time_ms: int
    broker_epoch: int = -1  # from the follower's last fetch (KIP-903); -1 unknown
    log_start_offset: int = -1  # from the follower's last fetch (DeleteRecords); -1 unknown

    @classmethod
    def for_new_leader(
        cls, replica_id: int, *, in_sync: bool, leader_epoch_start_offset: int, now_ms: int
    ) -> FollowerReplicaState:
        """State at ``makeLeader``: members of the ISR count as caught up now, others never."""
        return cls(
            replica_id=replica_id,
            log_end_offset=None,
            last_caught_up_time_ms=now_ms if in_sync else 0,
            last_fetch_leader_log_end_offset=leader_epoch_start_offset,
            last_fetch_time_ms=now_ms,
        )

    def reset_for_new_epoch(
        self, *, in_sync: bool, leader_log_end_offset: int, now_ms: int
    ) -> None:
        """The leader stays leader at a newer epoch (Kafka ``resetReplicaState`` of a
        leader that was leading): what the follower's fetches told is kept; an ISR member
        counts as caught up now, others never, and the last fetch as now at the leader's
        log end."""
        self.last_caught_up_time_ms = now_ms if in_sync else 0
        self.last_fetch_leader_log_end_offset = leader_log_end_offset
        self.last_fetch_time_ms = now_ms

    def update_fetch_state(
        self, fetch_offset: int, fetch_time_ms: int, leader_log_end_offset: int
    ) -> None:
        """Record a fetch (Kafka ``Replica.updateFetchState``).

        Caught up at ``fetch_time_ms`` if the fetch asked for everything the
        leader had then; caught up at the previous fetch's time if this fetch
        reached what the leader had at that previous fetch. The second clause is
        what keeps a follower in sync under a steady stream of writes: it is
        always one fetch behind the newest record, never behind in time.
        """
        if fetch_offset >= leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, fetch_time_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = leader_log_end_offset
        self.last_fetch_time_ms = fetch_time_ms

    def is_out_of_sync(
        self, leader_log_end_offset: int, now_ms: int, replica_lag_time_max_ms: int
    ) -> bool:
        """Kafka ``isFollowerOutOfSync``: not at the leader's LEO and not caught up for too long."""
        if self.log_end_offset == leader_log_end_offset:
            return False
        return now_ms - self.last_caught_up_time_ms > replica_lag_time_max_ms


class IsrState(enum.Enum):
    """Whether an ISR change is waiting for ZooKeeper's answer (Kafka ``PartitionState``)."""

    COMMITTED = "committed"
    PENDING_EXPAND_ISR = "pending_expand_isr"
    PENDING_SHRINK_ISR = "pending_shrink_isr"


_VALID_PREVIOUS: dict[IsrState, frozenset[IsrState]] = {
    IsrState.COMMITTED: frozenset(
        {IsrState.COMMITTED, IsrState.PENDING_EXPAND_ISR, IsrState.PENDING_SHRINK_ISR}
    ),
    IsrState.PENDING_EXPAND_ISR: frozenset({IsrState.COMMITTED}),
    IsrState.PENDING_SHRINK_ISR: frozenset({IsrState.COMMITTED}),
}


class IllegalIsrStateTransition(RuntimeError):
    pass


def check_isr_transition(current: IsrState, target: IsrState) -> None:
    """Raise unless ``target`` may follow ``current`` (one ISR change in flight at a time)."""
    if current not in _VALID_PREVIOUS[target]:
        raise IllegalIsrStateTransition(f"ISR state {current.name} -> {target.name} is not allowed")


@dataclass(frozen=True, slots=True)
class IsrChangeProposal:
    """A conditional update of ``/brokers/topics/<t>/partitions/<p>/state`` the leader wants.

    The IO layer writes ``{leader, leader_epoch, isr}`` only if the znode is
    still at ``partition_zk_version``, then reports the outcome back with
    ``LeaderState.on_isr_update_result``. For an expansion it must also check
    that each added replica is still registered at the broker epoch in
    ``added_broker_epochs`` (KIP-903: a fetch from a previous incarnation of a
    broker must not put the restarted broker in the ISR) and report a mismatch
    with ``LeaderState.on_isr_update_ineligible``: ``isr_write.write_isr_change``
    does both.
    """

    leader_id: int
    leader_epoch: int
    kind: IsrState  # PENDING_EXPAND_ISR or PENDING_SHRINK_ISR
    current_isr: tuple[int, ...]
    new_isr: tuple[int, ...]
    partition_zk_version: int
    added_broker_epochs: tuple[tuple[int, int], ...] = ()

    @property
    def added(self) -> frozenset[int]:
        return frozenset(self.new_isr) - frozenset(self.current_isr)

    @property
    def removed(self) -> frozenset[int]:
        return frozenset(self.current_isr) - frozenset(self.new_isr)


@dataclass(frozen=True, slots=True)
class PartitionIsrState:
    """The committed ISR, and the maximal ISR used for the high watermark while a change is pending."""

    isr: tuple[int, ...]
    state: IsrState = IsrState.COMMITTED
    pending: IsrChangeProposal | None = None

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        if self.pending is None:
            return self.isr
        extra = tuple(r for r in self.pending.new_isr if r not in self.isr)
        return self.isr + extra

    @property
    def is_inflight(self) -> bool:
        return self.state is not IsrState.COMMITTED


@dataclass(slots=True)
class IsrChangePropagation:
    """Batches ISR-change notifications to the controller (Kafka ``maybePropagateIsrChanges``).

    Call ``record_isr_change`` whenever a partition's ISR changed in ZooKeeper,
    and ``maybe_propagate`` every ``ISR_CHANGE_PROPAGATION_CHECK_INTERVAL_MS``;
    a non-empty result is the set to write as one
    ``/isr_change_notification/isr_change_`` sequential znode.
    """

    last_isr_change_ms: int
    last_propagation_ms: int
    blackout_ms: int = ISR_CHANGE_PROPAGATION_BLACKOUT_MS
    interval_ms: int = ISR_CHANGE_PROPAGATION_INTERVAL_MS
    _pending: set[Hashable] = field(default_factory=set)

    @classmethod
    def starting_at(cls, now_ms: int) -> IsrChangePropagation:
        return cls(last_isr_change_ms=now_ms, last_propagation_ms=now_ms)

    @property
    def pending(self) -> frozenset[Hashable]:
        return frozenset(self._pending)

    def record_isr_change(self, topic_partition: Hashable, now_ms: int) -> None:
        self._pending.add(topic_partition)
        self.last_isr_change_ms = now_ms

    def record_isr_changes(self, topic_partitions: Iterable[Hashable], now_ms: int) -> None:
        for tp in topic_partitions:
            self.record_isr_change(tp, now_ms)

    def maybe_propagate(self, now_ms: int) -> frozenset[Hashable] | None:
        """The partitions to announce now, or None to wait (and keep them pending)."""
        if not self._pending:
            return None
        quiet = self.last_isr_change_ms + self.blackout_ms < now_ms
        overdue = self.last_propagation_ms + self.interval_ms < now_ms
        if not (quiet or overdue):
            return None
        batch = frozenset(self._pending)
        self._pending.clear()
        self.last_propagation_ms = now_ms
        return batch
