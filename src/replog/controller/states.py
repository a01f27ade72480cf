"""Partition and replica states with Kafka's tables of valid previous states.

Kafka ``PartitionStateMachine`` / ``ReplicaStateMachine`` keep, per target state, the
set of states a partition or replica may come from (``validPreviousStates``). Here the
tables are plain dicts and ``check_partition_transition`` / ``check_replica_transition``
raise ``IllegalStateTransition`` (after logging it) for any other move. The state
machines in ``replog.controller.state_machines`` filter the replicas they move
deliberately, so an illegal transition reaching these checks is a bug and stops the
decision loudly instead of corrupting the controller's view.

Pure data and functions; safe to share.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Hashable

log = logging.getLogger("replog.controller.state_change")


class PartitionState(enum.Enum):
    """Kafka ``PartitionState``."""

    # Members are singletons: identity hashing is correct and, unlike Enum's default
    # (a Python-level hash of the name), costs no Python call in the hot loops.
    __hash__ = object.__hash__

    NewPartition = 0
    """Assigned replicas exist, no leader/ISR yet."""
    OnlinePartition = 1
    """A leader has been elected."""
    OfflinePartition = 2
    """The leader died (or no leader could be elected)."""
    NonExistentPartition = 3
    """Never created, or deleted."""


class ReplicaState(enum.Enum):
    """Kafka ``ReplicaState``."""

    __hash__ = object.__hash__

    NewReplica = 1
    OnlineReplica = 2
    OfflineReplica = 3
    ReplicaDeletionStarted = 4
    ReplicaDeletionSuccessful = 5
    ReplicaDeletionIneligible = 6
    NonExistentReplica = 7


_P = PartitionState
_R = ReplicaState

PARTITION_VALID_PREVIOUS_STATES: dict[PartitionState, frozenset[PartitionState]] = {
    _P.NewPartition: frozenset({_P.NonExistentPartition}),
    _P.OnlinePartition: frozenset({_P.NewPartition, _P.OnlinePartition, _P.OfflinePartition}),
    _P.OfflinePartition: frozenset({_P.NewPartition, _P.OnlinePartition, _P.OfflinePartition}),
    _P.NonExistentPartition: frozenset({_P.OfflinePartition}),
}

REPLICA_VALID_PREVIOUS_STATES: dict[ReplicaState, frozenset[ReplicaState]] = {
    _R.NewReplica: frozenset({_R.NonExistentReplica}),
    _R.OnlineReplica: frozenset(
        {_R.NewReplica, _R.OnlineReplica, _R.OfflineReplica, _R.ReplicaDeletionIneligible}
    ),
    _R.OfflineReplica: frozenset(
        {_R.NewReplica, _R.OnlineReplica, _R.OfflineReplica, _R.ReplicaDeletionIneligible}
    ),
    _R.ReplicaDeletionStarted: frozenset({_R.OfflineReplica}),
    _R.ReplicaDeletionSuccessful: frozenset({_R.ReplicaDeletionStarted}),
    _R.ReplicaDeletionIneligible: frozenset({_R.OfflineReplica, _R.ReplicaDeletionStarted}),
    _R.NonExistentReplica: frozenset({_R.ReplicaDeletionSuccessful}),
}


class IllegalStateTransition(RuntimeError):
    """A partition or replica was asked to move to a state it may not reach from its own."""

    def __init__(self, what: Hashable, current: enum.Enum, target: enum.Enum) -> None:
        super().__init__(f"{what}: illegal state transition {current.name} -> {target.name}")
        self.what = what
        self.current = current
        self.target = target


def check_partition_transition(
    partition: Hashable, current: PartitionState, target: PartitionState
) -> None:
    if current not in PARTITION_VALID_PREVIOUS_STATES[target]:
        error = IllegalStateTransition(partition, current, target)
        log.error("partition %s", error)
        raise error


def check_replica_transition(
    replica: Hashable, current: ReplicaState, target: ReplicaState
) -> None:
    if current not in REPLICA_VALID_PREVIOUS_STATES[target]:
        error = IllegalStateTransition(replica, current, target)
        log.error("replica %s", error)
        raise error
