"""Partition and replica state machines (Kafka ``ZkPartitionStateMachine`` /
``ZkReplicaStateMachine``), working on a ``ControllerDecision`` instead of ZooKeeper.

``partition_state_change(d, partitions, target, election)`` and
``replica_state_change(d, replicas, target)`` check each move against the tables in
``replog.controller.states`` (an illegal move raises ``IllegalStateTransition``), record
the new state in ``d.context``, the ZooKeeper writes in ``d`` and the requests in
``d.batch``. Elections use the pure functions of ``replog.controller.election``; a
partition with no eligible leader keeps its state and is reported in
``d.failed_elections``.

Differences from Kafka, on purpose:

* no ZooKeeper read before an election: the context is kept fresh by ISR-change
  notifications, and a stale entry makes the conditional write fail (see ``effects``);
* moving a replica of a topic queued for deletion to ``OfflineReplica`` does not write
  a shrunk ISR: the partition is about to disappear;
* replicas of topics queued for deletion get no LeaderAndIsr when they come online.

Concurrency: runs inside one decision on the controller task.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from replog.controller.context import (
    NO_LEADER,
    LeaderAndIsr,
    PartitionReplica,
    TopicPartition,
)
from replog.controller.effects import ControllerDecision
from replog.controller.election import (
    ElectionResult,
    controlled_shutdown_leader,
    offline_partition_leader,
    preferred_replica_leader,
)
from replog.controller.states import (
    IllegalStateTransition,
    PartitionState,
    ReplicaState,
    check_partition_transition,
    check_replica_transition,
)
from replog.zk.fencing import check_controller_epoch

__all__ = [
    "ControlledShutdownElection",
    "ElectionStrategy",
    "IllegalStateTransition",
    "OfflineElection",
    "PartitionState",
    "PreferredReplicaElection",
    "ReplicaState",
    "partition_state_change",
    "remove_replicas_from_isr",
    "replica_state_change",
    "trigger_online_partition_state_change",
]

log = logging.getLogger("replog.controller.state_change")


@dataclass(frozen=True, slots=True)
class OfflineElection:
    """Kafka ``OfflinePartitionLeaderElectionStrategy``.

    ``allow_unclean`` None means: the topic's ``unclean.leader.election.enable``.
    """

    allow_unclean: bool | None = None


@dataclass(frozen=True, slots=True)
class ControlledShutdownElection:
    """Kafka ``ControlledShutdownPartitionLeaderElectionStrategy``."""


@dataclass(frozen=True, slots=True)
class PreferredReplicaElection:
    """Kafka ``PreferredReplicaPartitionLeaderElectionStrategy``."""


ElectionStrategy = OfflineElection | ControlledShutdownElection | PreferredReplicaElection


# --- partitions ----------------------------------------------------------------------------


def partition_state_change(
    d: ControllerDecision,
    partitions: Iterable[TopicPartition],
    target: PartitionState,
    election: ElectionStrategy | None = None,
) -> list[TopicPartition]:
    """Move ``partitions`` to ``target``; returns those that could not get a leader."""
    ctx = d.context
    states = ctx.partition_states
    failed: list[TopicPartition] = []
    online = ctx.live_broker_ids  # brokers that may lead: live and not shutting down
    election = election or OfflineElection()
    for tp in partitions:
        current = states.get(tp, PartitionState.NonExistentPartition)
        try:
            check_partition_transition(tp, current, target)
        except IllegalStateTransition:
            # logged; the others go on, as in Kafka (raising made a failover rerun that
            # met a partition of a topic being created resign: campaign seed 14)
            ctx.illegal_transitions += 1
            continue
        if target is PartitionState.OnlinePartition:
            if current is PartitionState.NewPartition:
                ok = _initialize_leader_and_isr(d, tp, online)
            else:
                ok = _elect_leader(d, tp, election, online)
            if not ok:
                failed.append(tp)
                continue
        states[tp] = target
    return failed


def trigger_online_partition_state_change(d: ControllerDecision) -> list[TopicPartition]:
    """Kafka ``triggerOnlinePartitionStateChange``: elect leaders for every New or
    Offline partition whose topic is not being deleted."""
    ctx = d.context
    candidates = [
        tp
        for tp, state in ctx.partition_states.items()
        if state in (PartitionState.NewPartition, PartitionState.OfflinePartition)
        and tp[0] not in ctx.topics_to_be_deleted
    ]
    return partition_state_change(d, candidates, PartitionState.OnlinePartition, OfflineElection())


def _initialize_leader_and_isr(d: ControllerDecision, tp: TopicPartition, online: set[int]) -> bool:
    """Kafka ``initializeLeaderAndIsrForPartitions``: first live replica leads, live
    replicas form the ISR, leader epoch 0."""
    ctx = d.context
    replicas = ctx.replicas_for(tp)
    online = ctx.online_brokers_for(tp, online)
    live = [r for r in replicas if r in online]
    if not live:
        log.error("%s: no live replica among %s; cannot initialize its leader", tp, list(replicas))
        d.failed_elections.append(tp)
        return False
    if tp in ctx.partition_leadership and not d.has_pending_write(tp):
        log.error("%s: leader and ISR already initialized", tp)
        d.failed_elections.append(tp)
        return False
    d.create_leadership(tp, live[0], live)
    d.batch.add_leader_and_isr(live, tp, is_new=True)
    return True


def _elect_leader(
    d: ControllerDecision, tp: TopicPartition, election: ElectionStrategy, online: set[int]
) -> bool:
    ctx = d.context
    current = ctx.partition_leadership.get(tp)
    if current is None:
        log.error("%s: no leader and ISR to elect from", tp)
        d.failed_elections.append(tp)
        return False
    check_controller_epoch(ctx.controller_epoch, current.controller_epoch, tp)
    lai = current.leader_and_isr
    assignment = ctx.partition_assignments[tp[0]][tp[1]]
    online = ctx.online_brokers_for(tp, online)  # replicas in failed log dirs cannot lead
    result: ElectionResult | None
    if isinstance(election, OfflineElection):
        unclean = (
            election.allow_unclean
            if election.allow_unclean is not None
            else ctx.unclean_election_enabled(tp[0])
        )
        result = offline_partition_leader(assignment, lai.isr, online, unclean)
    elif isinstance(election, ControlledShutdownElection):
        result = controlled_shutdown_leader(
            assignment,
            lai.isr,
            ctx.online_brokers_for(tp, ctx.live_or_shutting_down_broker_ids),
            ctx.shutting_down_broker_ids,
        )
    else:
        result = preferred_replica_leader(assignment, lai.isr, online)
    if result is None:
        log.warning(
            "%s: no eligible leader (%s) among replicas %s, ISR %s",
            tp,
            type(election).__name__,
            list(assignment),
            list(lai.isr),
        )
        d.failed_elections.append(tp)
        return False
    if result.was_unclean:
        log.warning(
            "%s: unclean leader election: %d is not in ISR %s; committed data may be lost",
            tp,
            result.leader,
            list(lai.isr),
        )
        d.unclean_elections.append(tp)
    d.set_leadership(tp, result.leader, result.isr)
    d.batch.add_leader_and_isr(assignment, tp)
    return True


# --- replicas ------------------------------------------------------------------------------


def remove_replicas_from_isr(
    lai: LeaderAndIsr, removed: set[int]
) -> tuple[int, tuple[int, ...]] | None:
    """New (leader, ISR) once ``removed`` brokers leave the ISR; None if nothing changes.

    A removed leader becomes ``NO_LEADER``. As in Kafka, the ISR never becomes empty:
    if every member is removed, one stays (the old leader if it was in the ISR, else
    the first member), so that only it can be cleanly elected when it returns.
    """
    new_leader = NO_LEADER if lai.leader in removed else lai.leader
    new_isr = tuple(r for r in lai.isr if r not in removed)
    if not new_isr and lai.isr:
        new_isr = (lai.leader,) if lai.leader in lai.isr else (lai.isr[0],)
    if new_leader == lai.leader and new_isr == lai.isr:
        return None
    return new_leader, new_isr


def replica_state_change(
    d: ControllerDecision,
    replicas: Iterable[PartitionReplica],
    target: ReplicaState,
) -> None:
    """Move ``replicas`` to ``target`` (Kafka ``ZkReplicaStateMachine.doHandleStateChanges``)."""
    ctx = d.context
    valid = []
    for replica in replicas:
        try:
            check_replica_transition(replica, ctx.replica_state(replica), target)
        except IllegalStateTransition:  # logged and skipped, as in Kafka
            ctx.illegal_transitions += 1
            continue
        valid.append(replica)
    replicas = valid
    if target is ReplicaState.OfflineReplica:
        _replicas_offline(d, replicas)
        return
    for replica in replicas:
        tp, broker = replica
        current = ctx.replica_state(replica)
        if target is ReplicaState.NewReplica:
            state = ctx.partition_leadership.get(tp)
            if state is not None and state.leader_and_isr.leader != broker:
                d.batch.add_leader_and_isr((broker,), tp, is_new=True)
        elif target is ReplicaState.OnlineReplica:
            if current is not ReplicaState.NewReplica and tp in ctx.partition_leadership:
                if tp[0] not in ctx.topics_to_be_deleted:
                    d.batch.add_leader_and_isr((broker,), tp)
        elif target is ReplicaState.ReplicaDeletionStarted:
            d.batch.add_stop_replica(ctx, (broker,), tp, delete_partition=True)
        if target is ReplicaState.NonExistentReplica:
            ctx.replica_states.pop(replica, None)
        else:
            ctx.replica_states[replica] = target


def _replicas_offline(d: ControllerDecision, replicas: list[PartitionReplica]) -> None:
    """Kafka's OfflineReplica transition: StopReplica (no delete) to the replica, and the
    replica leaves the ISR; LeaderAndIsr to the remaining replicas."""
    ctx = d.context
    batch = d.batch
    replica_states = ctx.replica_states
    offline = ReplicaState.OfflineReplica
    removed_per_partition: dict[TopicPartition, set[int]] = {}
    for replica in replicas:
        replica_states[replica] = offline
        removed = removed_per_partition.get(replica[0])
        if removed is None:
            removed_per_partition[replica[0]] = {replica[1]}
        else:
            removed.add(replica[1])
    leadership = ctx.partition_leadership
    deleting = ctx.topics_to_be_deleted
    assignments = ctx.partition_assignments
    for tp, removed in removed_per_partition.items():
        batch.add_stop_replica(ctx, removed, tp, delete_partition=False)
        state = leadership.get(tp)
        changed = None
        if state is not None and tp[0] not in deleting:
            changed = remove_replicas_from_isr(state.leader_and_isr, removed)
        if changed is not None:
            d.set_leadership(tp, changed[0], changed[1])
            recipients = [r for r in assignments[tp[0]][tp[1]] if r not in removed]
            batch.add_leader_and_isr(recipients, tp)
        else:
            batch.add_update_metadata_to_all_live((tp,))
