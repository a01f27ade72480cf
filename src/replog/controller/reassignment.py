"""Replica reassignment (KIP-455), as Kafka's ZooKeeper-mode ``KafkaController`` does it.

Terms (Kafka's): ORS the original replicas, TRS the target replicas, RS = TRS + ORS the
full set while moving, AR = TRS - ORS the adding replicas, RR = ORS - TRS the removing
ones. ``replog.zk.data.ReplicaAssignment`` carries all of them; the topic znode keeps RS
with ``adding_replicas``/``removing_replicas``, so a new controller resumes a move from
ZooKeeper alone.

``on_partition_reassignment`` (Kafka ``maybeTriggerPartitionReassignment`` and
``onPartitionReassignment``): validate each request, record RS/AR/RR (the topic znode is
written *before* the partition state, so no broker hears of a replica ZooKeeper does not
name), then

* not yet complete (TRS not all in the ISR): bump the leader epoch and send LeaderAndIsr
  to all of RS; adding replicas go NewReplica (they create the partition and fetch);
* complete: adding replicas go OnlineReplica, RS := TRS, a leader from TRS is elected if
  the current one is not in it (or not live), the removing replicas go OfflineReplica
  (out of the ISR) and are deleted (StopReplica with delete), the topic znode is
  written with TRS *after* the partition state, and every broker gets UpdateMetadata.

``on_isr_change`` runs the completion for reassigning partitions whose ISR now holds
every target replica (Kafka's ``PartitionReassignmentIsrChangeHandler``). A cancel
(KIP-455, null replicas) reassigns back to ORS: the adding replicas are removed at once.

No IO, no clock, no randomness.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from replog.controller import topic_deletion
from replog.controller.context import (
    ControllerContext,
    PartitionReplica,
    ReplicaAssignment,
    TopicPartition,
)
from replog.controller.effects import ControllerDecision
from replog.controller.election import reassign_partition_leader
from replog.controller.state_machines import replica_state_change
from replog.controller.states import REPLICA_VALID_PREVIOUS_STATES, PartitionState, ReplicaState

log = logging.getLogger("replog.controller.reassignment")

_R = ReplicaState


@dataclass(frozen=True, slots=True)
class ReassignmentOutcome:
    """One partition's answer (Kafka ``ApiError``)."""

    error_code: int
    message: str | None = None


def full_assignment(context: ControllerContext, tp: TopicPartition) -> ReplicaAssignment:
    """Kafka ``partitionFullReplicaAssignment``."""
    ongoing = context.partition_reassignments.get(tp)
    return ongoing if ongoing is not None else ReplicaAssignment(context.replicas_for(tp))


def validate(
    context: ControllerContext, tp: TopicPartition, target: Sequence[int] | None
) -> ReassignmentOutcome | None:
    """Kafka ``validateReplicas`` plus the existence checks; None when acceptable.
    ``target`` None is a cancellation."""
    ctx = context
    if not ctx.replicas_for(tp) or ctx.is_topic_queued_for_deletion(tp[0]):
        return ReassignmentOutcome(
            ErrorCode.unknown_topic_or_partition, "The partition does not exist."
        )
    if target is None:
        if tp not in ctx.partition_reassignments:
            return ReassignmentOutcome(
                ErrorCode.no_reassignment_in_progress,
                f"No reassignment is in progress for partition {tp[0]}-{tp[1]}",
            )
        return None
    if not target:
        return ReassignmentOutcome(
            ErrorCode.invalid_replica_assignment,
            "Empty replica list specified in partition reassignment.",
        )
    if len(set(target)) != len(target):
        return ReassignmentOutcome(
            ErrorCode.invalid_replica_assignment,
            f"Duplicate replica ids in partition reassignment replica list: {list(target)}",
        )
    if any(r < 0 for r in target):
        return ReassignmentOutcome(
            ErrorCode.invalid_replica_assignment,
            f"Invalid broker id in replica list: {list(target)}",
        )
    adding = full_assignment(ctx, tp).reassign_to(target).adding_replicas
    live = ctx.live_broker_ids
    if not set(adding) <= live:
        return ReassignmentOutcome(
            ErrorCode.invalid_replica_assignment,
            f"Replica assignment has brokers that are not alive. Replica list: "
            f"{list(adding)}, live broker list: {sorted(live)}",
        )
    return None


def on_partition_reassignment(
    context: ControllerContext, requests: Mapping[TopicPartition, Sequence[int] | None]
) -> tuple[ControllerDecision, dict[TopicPartition, ReassignmentOutcome]]:
    """Start (or change, or cancel with None) the reassignment of each partition of
    ``requests``; each gets an outcome, and invalid ones change nothing. Also the
    resumption after a controller failover (the same targets again: the leader epoch is
    bumped and RS told once more, or the move completes)."""
    d = ControllerDecision(context)
    ctx = d.context
    outcomes: dict[TopicPartition, ReassignmentOutcome] = {}
    for raw_tp, target in sorted(requests.items()):
        tp = TopicPartition(raw_tp[0], raw_tp[1])
        problem = validate(ctx, tp, target)
        if problem is not None:
            outcomes[tp] = problem
            continue
        current = full_assignment(ctx, tp)
        if target is None:  # Kafka ``revertReassignment``
            wanted = ReplicaAssignment(current.origin_replicas)
        else:
            wanted = current.reassign_to(target)
        _update_current_reassignment(d, tp, current, wanted)
        if _is_complete(ctx, tp, wanted):
            _complete(d, tp, wanted)
        else:
            _start(d, tp, wanted)
        outcomes[tp] = ReassignmentOutcome(ErrorCode.none)
    return d, outcomes


def completable(
    context: ControllerContext, partitions: Iterable[TopicPartition]
) -> list[TopicPartition]:
    """The reassigning partitions of ``partitions`` whose ISR holds every target
    replica and that can keep or elect a leader among them."""
    return sorted(
        TopicPartition(tp[0], tp[1])
        for tp in set(partitions)
        if (ra := context.partition_reassignments.get(TopicPartition(tp[0], tp[1]))) is not None
        and _is_complete(context, TopicPartition(tp[0], tp[1]), ra)
    )


def on_isr_change(
    context: ControllerContext, partitions: Iterable[TopicPartition]
) -> ControllerDecision:
    """Kafka ``processPartitionReassignmentIsrChange``: ISRs of ``partitions`` changed
    (the context holds the new states); complete the reassignments now complete."""
    d = ControllerDecision(context)
    for tp in completable(d.context, partitions):
        _complete(d, tp, d.context.partition_reassignments[tp])
    return d


def ongoing_targets(context: ControllerContext) -> dict[TopicPartition, tuple[int, ...]]:
    """Every reassignment under way, by its target replicas (ListPartitionReassignments,
    and the resumption after failover)."""
    return {tp: ra.target_replicas for tp, ra in sorted(context.partition_reassignments.items())}


def zk_entries_remaining(
    context: ControllerContext, requested: Mapping[TopicPartition, Sequence[int]]
) -> dict[TopicPartition, tuple[int, ...]]:
    """The entries of ``/admin/reassign_partitions`` to keep: those still under way with
    the target asked for. Completed, failed and overridden ones leave it (Kafka
    ``maybeRemoveFromZkReassignment``); the znode goes when nothing remains."""
    kept: dict[TopicPartition, tuple[int, ...]] = {}
    for raw_tp, target in requested.items():
        tp = TopicPartition(raw_tp[0], raw_tp[1])
        ra = context.partition_reassignments.get(tp)
        if ra is not None and ra.target_replicas == tuple(target):
            kept[tp] = tuple(target)
    return kept


# --- steps ---------------------------------------------------------------------------------


def _is_complete(ctx: ControllerContext, tp: TopicPartition, ra: ReplicaAssignment) -> bool:
    """Kafka ``isReassignmentComplete``: TRS within the ISR, and (replog) a target
    replica can lead: the current leader if live and in TRS, or a live ISR member."""
    if not ra.is_being_reassigned:
        return tp in ctx.partition_leadership
    state = ctx.partition_leadership.get(tp)
    if state is None:
        return False
    lai = state.leader_and_isr
    if not set(ra.target_replicas) <= set(lai.isr):
        return False
    live = ctx.live_broker_ids
    return (lai.leader in ra.target_replicas and lai.leader in live) or (
        reassign_partition_leader(ra.target_replicas, lai.isr, live) is not None
    )


def _set_assignment(ctx: ControllerContext, tp: TopicPartition, ra: ReplicaAssignment) -> None:
    ctx.partition_assignments[tp.topic] = {
        **ctx.partition_assignments.get(tp.topic, {}),
        tp.partition: ra.replicas,
    }
    if ra.is_being_reassigned:
        ctx.partition_reassignments[tp] = ra
    else:
        ctx.partition_reassignments.pop(tp, None)


def _update_current_reassignment(
    d: ControllerDecision, tp: TopicPartition, current: ReplicaAssignment, wanted: ReplicaAssignment
) -> None:
    """Kafka ``updateCurrentReassignment``: record RS/AR/RR (topic znode first) and stop
    replicas an earlier reassignment was adding that the new one does not want."""
    if current == wanted:
        return
    _set_assignment(d.context, tp, wanted)
    if not wanted.is_being_reassigned:
        topic_deletion.on_reassignment_done(d, tp.topic)
    d.write_topic_assignment(tp, after_partition_states=False)
    unneeded = [r for r in current.replicas if r not in wanted.replicas]
    if unneeded:
        _stop_removed_replicas(d, tp, unneeded)


def _start(d: ControllerDecision, tp: TopicPartition, ra: ReplicaAssignment) -> None:
    """Phase A: LeaderAndIsr with a new leader epoch to all of RS; AR -> NewReplica."""
    ctx = d.context
    state = ctx.partition_leadership.get(tp)
    if state is not None:
        lai = state.leader_and_isr
        d.set_leadership(tp, lai.leader, lai.isr)
        d.batch.add_leader_and_isr(ra.replicas, tp)
    fresh = [
        PartitionReplica(tp, r)
        for r in ra.adding_replicas
        if ctx.replica_state(PartitionReplica(tp, r)) is _R.NonExistentReplica
    ]
    replica_state_change(d, fresh, _R.NewReplica)
    log.info(
        "%s-%d: reassigning to %s (adding %s, removing %s)",
        tp.topic,
        tp.partition,
        list(ra.target_replicas),
        list(ra.adding_replicas),
        list(ra.removing_replicas),
    )


def _complete(d: ControllerDecision, tp: TopicPartition, ra: ReplicaAssignment) -> None:
    """Phase B (Kafka B1-B8), in one decision: one partition-state write with one new
    leader epoch, then the topic znode with RS = TRS."""
    ctx = d.context
    target = ra.target_replicas
    adding = [PartitionReplica(tp, r) for r in ra.adding_replicas]
    replica_state_change(  # B1
        d, [r for r in adding if ctx.replica_state(r) is _R.NewReplica], _R.OnlineReplica
    )
    _set_assignment(ctx, tp, ReplicaAssignment(target))  # B2
    topic_deletion.on_reassignment_done(d, tp.topic)
    lai = ctx.partition_leadership[tp].leader_and_isr  # B3
    live = ctx.live_broker_ids
    if lai.leader in target and lai.leader in live:
        leader, isr = lai.leader, lai.isr
    else:
        result = reassign_partition_leader(target, lai.isr, live)
        if result is None:
            # Only a reassignment that moves no replica gets here (``_is_complete``
            # checked the others), of a partition no live replica can lead: it stays as
            # it is (Kafka's election fails and is logged); RS's new order is written.
            log.error("%s-%d: no target replica can lead: left offline", tp.topic, tp.partition)
            d.write_topic_assignment(tp, after_partition_states=True)
            d.batch.add_update_metadata_to_all_live((tp,))
            return
        leader, isr = result.leader, result.isr
    d.set_leadership(tp, leader, isr)
    d.batch.add_leader_and_isr(target, tp)
    ctx.partition_states[tp] = PartitionState.OnlinePartition
    if ra.removing_replicas:  # B4, B5
        _stop_removed_replicas(d, tp, ra.removing_replicas)
    d.write_topic_assignment(tp, after_partition_states=True)  # B6
    d.batch.add_update_metadata_to_all_live((tp,))  # B8
    log.info("%s-%d: reassignment to %s completed", tp.topic, tp.partition, list(target))


def _stop_removed_replicas(
    d: ControllerDecision, tp: TopicPartition, removed: Iterable[int]
) -> None:
    """Kafka ``stopRemovedReplicasOfReassignedPartition``: OfflineReplica (out of the
    ISR, StopReplica), then deleted (StopReplica with delete), then forgotten."""
    ctx = d.context
    replicas = [PartitionReplica(tp, r) for r in removed]
    offline_from = REPLICA_VALID_PREVIOUS_STATES[_R.OfflineReplica]
    movable = [r for r in replicas if ctx.replica_state(r) in offline_from]
    for r in replicas:
        if r not in movable:  # never started here (NonExistent): nothing to stop
            ctx.replica_states.pop(r, None)
    replica_state_change(d, movable, _R.OfflineReplica)
    replica_state_change(d, movable, _R.ReplicaDeletionStarted)
    replica_state_change(d, movable, _R.ReplicaDeletionSuccessful)
    replica_state_change(d, movable, _R.NonExistentReplica)
