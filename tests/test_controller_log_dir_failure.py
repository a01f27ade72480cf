"""The controller's decisions for a failed log dir (KIP-112): a broker's log dir event
makes the controller ask that broker about every replica it hosts (LeaderAndIsr); the
replicas it answers KAFKA_STORAGE_ERROR for are offline although the broker is live:
partitions they led get a new leader from the rest of the ISR, they leave their ISRs,
UpdateMetadata names them offline, and they cannot be elected until the broker restarts.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog.controller import decisions
from replog.controller.context import ControllerContext, PartitionReplica, TopicPartition
from replog.controller.states import ReplicaState
from replog.protocol.controller_schemas import (
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from test_controller_decisions import (
    apply,
    broker,
    check_cluster_invariants,
    cluster,
    lai_partitions,
    requests_by_type,
    stop_partitions,
    um_partitions,
)

T0, T1, T2, T3 = (TopicPartition("t", p) for p in range(4))


def three_brokers() -> ControllerContext:
    # broker 1 leads t-0 and t-1, follows t-2 and t-3
    return cluster([1, 2, 3], {"t": {0: [1, 2, 3], 1: [1, 3, 2], 2: [2, 1, 3], 3: [3, 2, 1]}})


def test_log_dir_event_asks_the_broker_about_every_replica_it_hosts() -> None:
    ctx = three_brokers()
    d = decisions.on_broker_log_dir_failure(ctx, [1, 7])  # 7 is not live: ignored
    assert not d.zk_writes, "nothing changes until the broker answers"
    reqs = requests_by_type(d)
    assert [b for b in reqs if LeaderAndIsrRequest in reqs[b]] == [1]
    assert set(lai_partitions(reqs[1][LeaderAndIsrRequest])) == {T0, T1, T2, T3}


def test_storage_errors_take_the_replicas_offline_and_move_their_leaderships() -> None:
    ctx = three_brokers()
    # broker 1's failed dir held t-0 (it led) and t-2 (it followed); t-1 and t-3 are fine
    d, offline = decisions.on_leader_and_isr_response(ctx, 1, 100, {T0, T2}, {T1, T3})
    new = apply(d)
    assert offline == [PartitionReplica(T0, 1), PartitionReplica(T2, 1)]
    assert new.replicas_on_offline_dirs == {1: frozenset({T0, T2})}
    lai = {tp: new.partition_leadership[tp].leader_and_isr for tp in (T0, T1, T2, T3)}
    assert (lai[T0].leader, lai[T0].isr, lai[T0].leader_epoch) == (2, (2, 3), 1)
    assert (lai[T2].leader, lai[T2].isr) == (2, (2, 3))
    assert (lai[T1].leader, lai[T1].isr, lai[T1].leader_epoch) == (1, (1, 3, 2), 0)
    assert (lai[T3].leader, lai[T3].isr) == (3, (3, 2, 1))
    assert new.replica_state(PartitionReplica(T0, 1)) is ReplicaState.OfflineReplica
    assert new.replica_state(PartitionReplica(T1, 1)) is ReplicaState.OnlineReplica
    reqs = requests_by_type(d)
    # the broker is told to stop the offline replicas, not to delete them
    stopped = stop_partitions(reqs[1][StopReplicaRequest])
    assert set(stopped) == {T0, T2}
    assert not any(p.delete_partition for p in stopped.values())
    assert set(lai_partitions(reqs[2][LeaderAndIsrRequest])) == {T0, T2}
    metadata = um_partitions(reqs[3][UpdateMetadataRequest])
    assert metadata[T0].offline_replicas == (1,)
    assert metadata[T0].leader == 2
    check_cluster_invariants(new)

    # A second answer naming the same replicas changes nothing.
    again, more = decisions.on_leader_and_isr_response(new, 1, 100, {T0, T2}, {T1, T3})
    assert more == [] and not again.zk_writes and not again.requests()


def test_a_replica_in_a_failed_dir_cannot_be_elected() -> None:
    ctx = three_brokers()
    ctx = apply(decisions.on_leader_and_isr_response(ctx, 1, 100, {T2}, set())[0])
    # t-2's ISR is now (2, 3); broker 3 dies, then broker 2: t-2 must go offline rather
    # than be led by broker 1, whose replica is in the failed dir (clean election only).
    ctx = apply(decisions.on_broker_failure(ctx, [3]))
    ctx = apply(decisions.on_broker_failure(ctx, [2]))
    lai = ctx.partition_leadership[T2].leader_and_isr
    assert lai.leader == -1 and lai.isr == (2,)
    # t-0 (broker 1's dir is fine for it) is led by broker 1
    assert ctx.partition_leadership[T0].leader_and_isr.leader == 1
    # Preferred election does not pick the failed replica either.
    ctx2 = three_brokers()
    ctx2 = apply(decisions.on_leader_and_isr_response(ctx2, 1, 100, {T0}, set())[0])
    assert ctx2.partition_leadership[T0].leader_and_isr.leader == 2
    d, outcomes = decisions.on_replica_election(ctx2, [T0], decisions.PREFERRED_ELECTION)
    assert outcomes[T0].error_code == ErrorCode.preferred_leader_not_available
    assert not d.zk_writes and d.context.partition_leadership[T0].leader_and_isr.leader == 2


def test_the_broker_restarting_forgets_its_failed_dirs() -> None:
    ctx = three_brokers()
    ctx = apply(decisions.on_leader_and_isr_response(ctx, 1, 100, {T0}, set())[0])
    restarted = {b: ctx.live_brokers[b] for b in (2, 3)} | {1: broker(1, epoch=200)}
    ctx = apply(decisions.on_broker_change(ctx, restarted))
    assert ctx.replicas_on_offline_dirs == {}
    assert ctx.replica_state(PartitionReplica(T0, 1)) is ReplicaState.OnlineReplica
    # and a broker that dies takes its entry with it
    ctx = apply(decisions.on_leader_and_isr_response(ctx, 2, 100, {T3}, set())[0])
    ctx = apply(decisions.on_broker_failure(ctx, [2]))
    assert 2 not in ctx.replicas_on_offline_dirs


def test_an_answer_from_an_earlier_incarnation_is_ignored() -> None:
    ctx = three_brokers()
    restarted = {b: ctx.live_brokers[b] for b in (2, 3)} | {1: broker(1, epoch=200)}
    ctx = apply(decisions.on_broker_change(ctx, restarted))
    d, offline = decisions.on_leader_and_isr_response(ctx, 1, 100, {T0}, set())
    assert offline == [] and not d.zk_writes and d.context.replicas_on_offline_dirs == {}
    d, offline = decisions.on_leader_and_isr_response(ctx, 1, 200, {T0}, set())
    assert offline == [PartitionReplica(T0, 1)]
