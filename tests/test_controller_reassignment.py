"""The pure decisions of replica reassignment (KIP-455) and added partitions, on whole
contexts: validation, phase A (RS recorded before the state, epoch bumped, LeaderAndIsr
to all of RS, new replicas started), phase B (leader moved into TRS, removed replicas
out of the ISR and deleted, RS = TRS written after the state), cancellation, the
failover's resumption, and ``/admin/reassign_partitions`` bookkeeping."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog.controller import decisions, partition_modifications, reassignment
from replog.controller.context import (
    ControllerContext,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    PartitionReplica,
    ReplicaAssignment,
    TopicPartition,
)
from replog.controller.effects import (
    ControllerDecision,
    UpdatePartitionState,
    UpdateTopicAssignment,
)
from replog.controller.states import ReplicaState
from replog.protocol.controller_schemas import LeaderAndIsrRequest, StopReplicaRequest
from test_controller_decisions import apply, cluster, lai_partitions, requests_by_type

T0 = TopicPartition("t", 0)


def with_isr(ctx: ControllerContext, tp: TopicPartition, isr: tuple[int, ...]) -> ControllerContext:
    """The context after the leader's ISR change was read back (an ISR notification)."""
    ctx = ctx.copy()
    old = ctx.partition_leadership[tp]
    lai = old.leader_and_isr
    ctx.partition_leadership[tp] = LeaderIsrAndControllerEpoch(
        LeaderAndIsr(lai.leader, lai.leader_epoch, isr, lai.zk_version + 1), old.controller_epoch
    )
    return ctx


def assignment_writes(d: ControllerDecision) -> list[UpdateTopicAssignment]:
    return [w for w in d.zk_writes if isinstance(w, UpdateTopicAssignment)]


def start(ctx: ControllerContext, target: list[int]) -> ControllerDecision:
    d, outcomes = reassignment.on_partition_reassignment(ctx, {T0: tuple(target)})
    assert outcomes[T0].error_code == ErrorCode.none, outcomes
    return d


def test_move_from_0_1_to_1_2_with_the_leader() -> None:
    ctx = cluster([0, 1, 2], {"t": {0: [0, 1]}})
    before = ctx.partition_leadership[T0].leader_and_isr
    assert before.leader == 0

    # Phase A: RS = TRS + ORS, adding [2], removing [0]; the znode is written first.
    d = start(ctx, [1, 2])
    ra = d.context.partition_reassignments[T0]
    assert ra == ReplicaAssignment((1, 2, 0), (2,), (0,))
    assert d.context.replicas_for(T0) == (1, 2, 0)
    [write] = assignment_writes(d)
    assert write.after_partition_states is False and write.assignments == {0: ra}
    lai = d.context.partition_leadership[T0].leader_and_isr
    assert (lai.leader, lai.isr, lai.leader_epoch) == (0, before.isr, before.leader_epoch + 1)
    sent = requests_by_type(d)
    for b in (0, 1, 2):
        state = lai_partitions(sent[b][LeaderAndIsrRequest])[T0]
        assert tuple(state.replicas) == (1, 2, 0)
        assert tuple(state.adding_replicas) == (2,) and tuple(state.removing_replicas) == (0,)
    assert lai_partitions(sent[2][LeaderAndIsrRequest])[T0].is_new
    assert d.context.replica_state(PartitionReplica(T0, 2)) is ReplicaState.NewReplica
    ctx = apply(d)

    # An ISR change that does not hold every target yet changes nothing.
    assert reassignment.completable(with_isr(ctx, T0, (0, 1)), [T0]) == []

    # Phase B once 2 is in sync: leader 1 (first target in the ISR), 0 out and deleted.
    ctx = with_isr(ctx, T0, (0, 1, 2))
    assert reassignment.completable(ctx, [T0]) == [T0]
    d = reassignment.on_isr_change(ctx, [T0])
    lai = d.context.partition_leadership[T0].leader_and_isr
    assert (lai.leader, set(lai.isr)) == (1, {1, 2})
    writes = [w for w in d.zk_writes if isinstance(w, UpdatePartitionState)]
    assert len(writes) == 1 and lai.leader_epoch == before.leader_epoch + 2
    [write] = assignment_writes(d)
    assert write.after_partition_states is True
    assert write.assignments == {0: ReplicaAssignment((1, 2))}
    assert T0 not in d.context.partition_reassignments
    assert d.context.replicas_for(T0) == (1, 2)
    sent = requests_by_type(d)
    stop = sent[0][StopReplicaRequest]
    assert [
        (p.partition_index, p.delete_partition)
        for t in stop.topic_states
        for p in t.partition_states
    ] == [(0, True)]
    assert LeaderAndIsrRequest not in sent[0]
    for b in (1, 2):
        assert tuple(lai_partitions(sent[b][LeaderAndIsrRequest])[T0].replicas) == (1, 2)
    assert PartitionReplica(T0, 0) not in d.context.replica_states
    apply(d)


def test_reorder_only_completes_at_once_and_keeps_the_leader() -> None:
    ctx = cluster([0, 1], {"t": {0: [0, 1]}})
    d = start(ctx, [1, 0])
    assert d.context.replicas_for(T0) == (1, 0)
    assert T0 not in d.context.partition_reassignments
    assert d.context.partition_leadership[T0].leader_and_isr.leader == 0
    assert [w.after_partition_states for w in assignment_writes(d)] == [True]


def test_reorder_of_a_partition_no_live_replica_can_lead_leaves_it_offline() -> None:
    """Found by the simulator: a reorder (no replica moved) completes at once, and the
    partition's leader and ISR are all dead; the decision no longer raises, it writes the
    new order and leaves the partition's state alone (Kafka's election fails, logged)."""
    ctx = cluster([0, 1, 2], {"t": {0: [0, 1]}}).copy()
    del ctx.live_brokers[0], ctx.live_brokers[1]
    before = ctx.partition_leadership[T0]
    d = start(ctx, [1, 0])
    assert d.context.replicas_for(T0) == (1, 0)
    assert T0 not in d.context.partition_reassignments
    assert d.context.partition_leadership[T0] == before
    assert not [w for w in d.zk_writes if isinstance(w, UpdatePartitionState)]
    assert [w.assignments for w in assignment_writes(d)] == [{0: ReplicaAssignment((1, 0))}]
    apply(d)


def test_a_completion_whose_write_failed_keeps_the_removed_replica() -> None:
    """Found by the simulator: the completion of a move off 0 lost its version race; the
    decision's other effects stand, but replica 0 must keep its state (not be forgotten)
    and get no StopReplica, or the re-run decides on a replica that no longer exists."""
    ctx = cluster([0, 1, 2], {"t": {0: [0, 1, 2]}})
    d = start(ctx, [1, 2])  # every target in the ISR: completes at once
    assert d.context.replicas_for(T0) == (1, 2)
    assert PartitionReplica(T0, 0) not in d.context.replica_states
    assert StopReplicaRequest in requests_by_type(d)[0]
    d.drop_failed_writes([T0])
    assert d.context.replica_state(PartitionReplica(T0, 0)) is ctx.replica_state(
        PartitionReplica(T0, 0)
    )
    assert d.context.replicas_for(T0) == (0, 1, 2)
    assert StopReplicaRequest not in requests_by_type(d).get(0, {})
    assert not any(isinstance(w, UpdatePartitionState) for w in d.zk_writes)


def test_bad_input_changes_nothing() -> None:
    ctx = cluster([0, 1], {"t": {0: [0, 1]}})
    cases = {
        TopicPartition("nope", 0): ((0,), ErrorCode.unknown_topic_or_partition),
        TopicPartition("t", 5): ((0,), ErrorCode.unknown_topic_or_partition),
        TopicPartition("t", 0): ((), ErrorCode.invalid_replica_assignment),
    }
    for tp, (target, code) in cases.items():
        d, outcomes = reassignment.on_partition_reassignment(ctx, {tp: target})
        assert outcomes[tp].error_code == code
        assert not d.zk_writes and not d.requests()
    for target in ((0, 0), (0, 7), (-1, 0)):
        d, outcomes = reassignment.on_partition_reassignment(ctx, {T0: target})
        assert outcomes[T0].error_code == ErrorCode.invalid_replica_assignment, target
        assert not d.zk_writes and not d.requests()
    d, outcomes = reassignment.on_partition_reassignment(ctx, {T0: None})
    assert outcomes[T0].error_code == ErrorCode.no_reassignment_in_progress
    assert not d.zk_writes


def test_cancel_reverts_and_deletes_the_adding_replica() -> None:
    ctx = apply(start(cluster([0, 1, 2], {"t": {0: [0, 1]}}), [1, 2]))
    d, outcomes = reassignment.on_partition_reassignment(ctx, {T0: None})
    assert outcomes[T0].error_code == ErrorCode.none
    # ORS is RS without the adding replicas, in RS order (TRS first), as Kafka's
    # ``originReplicas``: the replica set comes back, its order may not.
    assert d.context.replicas_for(T0) == (1, 0)
    assert T0 not in d.context.partition_reassignments
    assert d.context.partition_leadership[T0].leader_and_isr.leader == 0
    stop = requests_by_type(d)[2][StopReplicaRequest]
    assert all(p.delete_partition for t in stop.topic_states for p in t.partition_states)
    assert {0: ReplicaAssignment((1, 0))} in [w.assignments for w in assignment_writes(d)]


def test_failover_resumes_from_the_context_and_prunes_the_zk_entries() -> None:
    ctx = apply(start(cluster([0, 1, 2], {"t": {0: [0, 1], 1: [0, 1]}}), [1, 2]))
    targets = reassignment.ongoing_targets(ctx)
    assert targets == {T0: (1, 2)}
    # Resubmitting the same targets (a new controller): no znode write, a new epoch.
    epoch = ctx.partition_leadership[T0].leader_and_isr.leader_epoch
    d, _ = reassignment.on_partition_reassignment(ctx, targets)
    assert not assignment_writes(d)
    assert d.context.partition_leadership[T0].leader_and_isr.leader_epoch == epoch + 1
    requested = {("t", 0): (1, 2), ("t", 1): (0, 1)}
    assert reassignment.zk_entries_remaining(ctx, requested) == {T0: (1, 2)}
    done = apply(reassignment.on_isr_change(with_isr(ctx, T0, (0, 1, 2)), [T0]))
    assert reassignment.zk_entries_remaining(done, requested) == {}


def test_dead_target_broker_is_refused() -> None:
    ctx = cluster([0, 1, 2], {"t": {0: [0, 1]}})
    ctx = ctx.copy()
    del ctx.live_brokers[2]
    d, outcomes = reassignment.on_partition_reassignment(ctx, {T0: (1, 2)})
    assert outcomes[T0].error_code == ErrorCode.invalid_replica_assignment
    assert "not alive" in (outcomes[T0].message or "")
    assert not d.zk_writes


def test_added_partitions_come_online() -> None:
    ctx = cluster([0, 1, 2], {"t": {0: [0, 1]}})
    d = partition_modifications.on_partition_modifications(
        ctx, "t", {0: [0, 1], 1: [1, 2], 2: [2, 0]}
    )
    ctx2 = apply(d)
    for p, leader in ((1, 1), (2, 2)):
        lai = ctx2.partition_leadership[TopicPartition("t", p)].leader_and_isr
        assert lai.leader == leader and lai.leader_epoch == 0
    sent = requests_by_type(d)
    assert TopicPartition("t", 1) in lai_partitions(sent[2][LeaderAndIsrRequest])
    # Known partitions, unknown topics and topics being deleted: nothing.
    assert not partition_modifications.on_partition_modifications(ctx2, "t", {0: [0, 1]}).zk_writes
    assert not partition_modifications.on_partition_modifications(ctx2, "x", {0: [0]}).zk_writes
    deleting = ctx.copy()
    deleting.topics_to_be_deleted.add("t")
    assert not partition_modifications.on_partition_modifications(
        deleting, "t", {0: [0, 1], 1: [1, 2]}
    ).zk_writes


def test_deleting_a_topic_waits_for_its_reassignment() -> None:
    ctx = apply(start(cluster([0, 1, 2], {"t": {0: [0, 1]}}), [1, 2]))
    d = decisions.on_topic_deletion(ctx, ["t"])
    assert "t" in d.context.topics_ineligible_for_deletion
    assert not any(StopReplicaRequest in sent for sent in requests_by_type(d).values())
    ctx = apply(d)
    # The reassignment completes: the deletion starts (every replica told to delete).
    d = reassignment.on_isr_change(with_isr(ctx, T0, (0, 1, 2)), [T0])
    assert "t" not in d.context.topics_ineligible_for_deletion
    deleting = {
        broker
        for broker, sent in requests_by_type(d).items()
        for t in (sent[StopReplicaRequest].topic_states if StopReplicaRequest in sent else ())
        for p in t.partition_states
        if p.delete_partition
    }
    assert deleting == {0, 1, 2}
