"""The controller's decisions for replica leader elections (KIP-460: preferred and
unclean), the auto leader rebalance, and what a controlled shutdown means for them."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog.controller import decisions
from replog.controller.context import (
    ControllerContext,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    ReplicaAssignment,
    TopicPartition,
)
from replog.controller.effects import UpdatePartitionState
from replog.protocol.controller_schemas import LeaderAndIsrRequest
from test_controller_decisions import (
    apply,
    broker,
    cluster,
    lai_partitions,
    requests_by_type,
)

PREFERRED = decisions.PREFERRED_ELECTION
UNCLEAN = decisions.UNCLEAN_ELECTION


def with_isr(ctx: ControllerContext, tp: TopicPartition, isr: tuple[int, ...]) -> ControllerContext:
    """The leader changed the ISR and announced it (an ISR change notification)."""
    lai = ctx.partition_leadership[tp].leader_and_isr
    state = LeaderAndIsr(lai.leader, lai.leader_epoch, isr, lai.zk_version + 1)
    return apply(decisions.on_isr_change(ctx, {tp: LeaderIsrAndControllerEpoch(state, 1)}))


def bounced(ctx: ControllerContext, broker_id: int) -> ControllerContext:
    """``broker_id`` failed, came back and caught up with every partition it follows."""
    ctx = apply(decisions.on_broker_failure(ctx, [broker_id]))
    ctx = apply(decisions.on_broker_startup(ctx, [broker(broker_id, 200)]))
    for tp in sorted(ctx.partition_leadership):
        isr = ctx.partition_leadership[tp].leader_and_isr.isr
        if broker_id in ctx.replicas_for(tp) and broker_id not in isr:
            ctx = with_isr(ctx, tp, (*isr, broker_id))
    return ctx


def leader(ctx: ControllerContext, tp: TopicPartition) -> int:
    return ctx.partition_leadership[tp].leader_and_isr.leader


def test_preferred_election_moves_leadership_back_with_a_new_leader_epoch() -> None:
    tp = TopicPartition("t", 0)
    ctx = bounced(cluster([1, 2, 3], {"t": {0: [1, 2, 3]}}), 1)
    assert leader(ctx, tp) == 2
    epoch = ctx.partition_leadership[tp].leader_and_isr.leader_epoch
    d, outcomes = decisions.on_replica_election(ctx, [tp], PREFERRED)
    new = apply(d)
    assert outcomes == {tp: decisions.ElectionOutcome(ErrorCode.none, 1)}
    assert leader(new, tp) == 1
    assert new.partition_leadership[tp].leader_and_isr.leader_epoch == epoch + 1
    assert new.partition_leadership[tp].leader_and_isr.isr == (2, 3, 1)
    # Every replica hears of it.
    for b in (1, 2, 3):
        request = requests_by_type(d)[b][LeaderAndIsrRequest]
        assert isinstance(request, LeaderAndIsrRequest)
        assert int(lai_partitions(request)[tp].leader) == 1


def test_preferred_election_errors_per_partition() -> None:
    ctx = cluster([1, 2, 3], {"t": {0: [1, 2, 3], 1: [2, 3, 1]}})
    led, lagging = TopicPartition("t", 0), TopicPartition("t", 1)
    ctx = apply(decisions.on_broker_failure(ctx, [2]))
    ctx = apply(decisions.on_broker_startup(ctx, [broker(2, 200)]))  # not caught up yet
    assert leader(ctx, lagging) == 3
    unknown, gone = TopicPartition("t", 7), TopicPartition("nope", 0)
    d, outcomes = decisions.on_replica_election(ctx, [led, lagging, unknown, gone], PREFERRED)
    assert outcomes[led].error_code == ErrorCode.election_not_needed
    assert outcomes[lagging].error_code == ErrorCode.preferred_leader_not_available
    assert outcomes[unknown].error_code == ErrorCode.unknown_topic_or_partition
    assert outcomes[gone].error_code == ErrorCode.unknown_topic_or_partition
    assert not d.zk_writes and not d.requests()


def test_unclean_election_only_for_partitions_without_a_live_leader() -> None:
    ctx = cluster([1, 2], {"t": {0: [1, 2], 1: [2, 1]}})
    offline, fine = TopicPartition("t", 0), TopicPartition("t", 1)
    ctx = with_isr(ctx, offline, (1,))  # 2 fell behind
    ctx = apply(decisions.on_broker_failure(ctx, [1]))
    assert leader(ctx, offline) == -1  # unclean elections are off for the topic
    d, outcomes = decisions.on_replica_election(ctx, [offline, fine], UNCLEAN)
    new = apply(d)
    assert outcomes[fine].error_code == ErrorCode.election_not_needed
    assert outcomes[offline] == decisions.ElectionOutcome(ErrorCode.none, 2)
    assert new.partition_leadership[offline].leader_and_isr.isr == (2,)
    # And with no live replica at all, nobody is eligible.
    ctx = apply(decisions.on_broker_failure(ctx, [2]))
    _, outcomes = decisions.on_replica_election(ctx, [offline], UNCLEAN)
    assert outcomes[offline].error_code == ErrorCode.eligible_leaders_not_available


def test_auto_rebalance_over_the_imbalance_threshold_only() -> None:
    # Broker 1 is the preferred replica of 10 partitions; it leads none after a bounce.
    topics = {"t": {p: [1, 2, 3] for p in range(10)}}
    ctx = bounced(cluster([1, 2, 3], topics), 1)
    assert all(leader(ctx, TopicPartition("t", p)) != 1 for p in range(10))
    assert decisions.auto_rebalance_candidates(ctx, 10) == [
        TopicPartition("t", p) for p in range(10)
    ]
    new = apply(decisions.on_auto_leader_rebalance(ctx, 10))
    assert all(leader(new, TopicPartition("t", p)) == 1 for p in range(10))
    assert decisions.auto_rebalance_candidates(new, 10) == []
    # 1 of 10 not led by its preferred replica: 10 % is not over 10 %.
    d, _ = decisions.on_replica_election(ctx, [TopicPartition("t", p) for p in range(9)], PREFERRED)
    partly = apply(d)
    assert decisions.auto_rebalance_candidates(partly, 10) == []
    assert decisions.auto_rebalance_candidates(partly, 9) == [TopicPartition("t", 9)]


def test_auto_rebalance_skips_preferred_replicas_out_of_the_isr() -> None:
    ctx = cluster([1, 2, 3], {"t": {0: [1, 2, 3]}})
    ctx = apply(decisions.on_broker_failure(ctx, [1]))
    ctx = apply(decisions.on_broker_startup(ctx, [broker(1, 200)]))  # back, not in sync
    assert decisions.auto_rebalance_candidates(ctx, 10) == []
    assert not decisions.on_auto_leader_rebalance(ctx, 10).zk_writes


def test_auto_rebalance_leaves_partitions_being_reassigned_alone() -> None:
    topics = {"t": {p: [1, 2, 3] for p in range(4)}}
    ctx = bounced(cluster([1, 2, 3], topics), 1)
    assert len(decisions.auto_rebalance_candidates(ctx, 10)) == 4
    moving = TopicPartition("t", 0)
    ctx.partition_reassignments[moving] = ReplicaAssignment((1, 2, 3, 4), adding_replicas=(4,))
    assert decisions.auto_rebalance_candidates(ctx, 10) == [
        TopicPartition("t", p) for p in range(1, 4)
    ]


def test_controlled_shutdown_then_elections_avoid_the_shutting_down_broker() -> None:
    tp = TopicPartition("t", 0)
    ctx = cluster([1, 2, 3], {"t": {0: [1, 2, 3]}})
    d, result = decisions.on_controlled_shutdown(ctx, 1, 100)
    ctx = apply(d)
    assert result.remaining == ()
    assert leader(ctx, tp) == 2
    assert 1 not in ctx.partition_leadership[tp].leader_and_isr.isr
    assert [w for w in d.zk_writes if isinstance(w, UpdatePartitionState)]
    # The leader lets 1 back into the ISR (it still fetches until it stops): neither a
    # preferred election nor the auto rebalance gives leadership back to it.
    ctx = with_isr(ctx, tp, (2, 3, 1))
    _, outcomes = decisions.on_replica_election(ctx, [tp], PREFERRED)
    assert outcomes[tp].error_code == ErrorCode.preferred_leader_not_available
    assert decisions.auto_rebalance_candidates(ctx, 0) == []
    # A second request (a retry) is answered the same, and moves nothing.
    d, again = decisions.on_controlled_shutdown(ctx, 1, 100)
    assert again.error_code == ErrorCode.none and again.remaining == ()
    assert all(w.state.leader_and_isr.leader != 1 for w in d.zk_writes)
    # Once it has stopped and registered again, it is a candidate like any other.
    ctx = bounced(apply(d), 1)
    assert decisions.auto_rebalance_candidates(ctx, 10) == [tp]
