"""The controller's decisions on whole clusters: new topics, broker failure and startup,
controller failover, ISR changes, controlled shutdown and topic deletion."""

from __future__ import annotations

import dataclasses
import random
import uuid
from collections.abc import Iterable, Mapping, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from replog.controller import decisions
from replog.controller.context import (
    NO_LEADER,
    ControllerContext,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    PartitionReplica,
    TopicPartition,
)
from replog.controller.effects import (
    ControllerDecision,
    CreatePartitionState,
    DeleteTopic,
    UpdatePartitionState,
    UpdateTopicAssignment,
)
from replog.controller.placement import BrokerMetadata, assign_replicas_to_brokers
from replog.controller.states import PartitionState, ReplicaState
from replog.protocol.controller_schemas import (
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from replog.zk.data import BrokerInfo
from replog.zk.fencing import ControllerMovedError

P = PartitionState
R = ReplicaState


def broker(broker_id: int, epoch: int = 100, rack: str | None = None) -> BrokerInfo:
    return BrokerInfo.plaintext(broker_id, "127.0.0.1", 9000 + broker_id, rack).with_epoch(epoch)


def cluster(
    brokers: Iterable[int],
    topics: Mapping[str, Mapping[int, Sequence[int]]],
    unclean: Mapping[str, bool] | None = None,
) -> ControllerContext:
    """A context after creating ``topics`` with every broker in ``brokers`` live."""
    ctx = ControllerContext(controller_id=0, controller_epoch=1, controller_epoch_zk_version=1)
    for b in brokers:
        ctx.live_brokers[b] = broker(b)
    ctx.unclean_leader_election_enable.update(unclean or {})
    return apply(decisions.on_new_topics(ctx, topics))


def apply(d: ControllerDecision) -> ControllerContext:
    """What the IO layer does after the writes succeed; checks the writes on the way."""
    check_writes(d)
    return d.context


def check_writes(d: ControllerDecision) -> None:
    seen = set()
    for write in d.zk_writes:
        if isinstance(write, (DeleteTopic, UpdateTopicAssignment)):
            continue
        assert write.partition not in seen, "one write per partition per decision"
        seen.add(write.partition)
        lai = write.state.leader_and_isr
        assert d.context.partition_leadership[write.partition] == write.state
        assert lai.leader == NO_LEADER or lai.leader in lai.isr
        assert lai.isr, "ISR never empty"
        if isinstance(write, CreatePartitionState):
            assert write.partition not in d.base.partition_leadership
            assert lai.leader_epoch == 0 and lai.zk_version == 0
        else:
            assert isinstance(write, UpdatePartitionState)
            old = d.base.partition_leadership[write.partition].leader_and_isr
            assert write.expected_zk_version == old.zk_version
            assert lai.zk_version == old.zk_version + 1
            assert lai.leader_epoch == old.leader_epoch + 1, "epoch bumped exactly once"
    # Partitions whose leadership changed without a write would be a lost update.
    for tp, state in d.context.partition_leadership.items():
        before = d.base.partition_leadership.get(tp)
        if before is not None and before != state:
            assert tp in seen or state.leader_and_isr.zk_version >= before.leader_and_isr.zk_version


def requests_by_type(d: ControllerDecision) -> dict[int, dict[type, object]]:
    out: dict[int, dict[type, object]] = {}
    for b, requests in d.requests().items():
        kinds = [type(r) for r in requests]
        assert len(kinds) == len(set(kinds)), "one request of each kind per broker"
        order = [LeaderAndIsrRequest, UpdateMetadataRequest, StopReplicaRequest]
        assert kinds == [k for k in order if k in kinds]
        out[b] = {type(r): r for r in requests}
    return out


def lai_partitions(request: LeaderAndIsrRequest) -> dict[TopicPartition, object]:
    return {
        TopicPartition(t.topic_name, p.partition_index): p
        for t in request.topic_states
        for p in t.partition_states
    }


def um_partitions(request: UpdateMetadataRequest) -> dict[TopicPartition, object]:
    return {
        TopicPartition(t.topic_name, p.partition_index): p
        for t in request.topic_states
        for p in t.partition_states
    }


def stop_partitions(request: StopReplicaRequest) -> dict[TopicPartition, object]:
    return {
        TopicPartition(t.topic_name, p.partition_index): p
        for t in request.topic_states
        for p in t.partition_states
    }


def check_cluster_invariants(ctx: ControllerContext) -> None:
    """After any decision: a partition has a live leader inside its ISR, or is offline
    with no leader; no dead broker stays in an ISR except as the last member of an
    offline partition."""
    live = ctx.live_broker_ids
    for tp, state in ctx.partition_leadership.items():
        if tp.topic in ctx.topics_to_be_deleted:
            continue
        lai = state.leader_and_isr
        if lai.leader != NO_LEADER and lai.leader in live:
            assert lai.leader in lai.isr, (tp, lai)
            assert ctx.partition_state(tp) is P.OnlinePartition, (tp, ctx.partition_state(tp))
            dead_in_isr = [r for r in lai.isr if r not in ctx.live_brokers]
            assert not dead_in_isr, (tp, lai)
        else:
            assert lai.leader == NO_LEADER, (tp, lai)
            assert ctx.partition_state(tp) is P.OfflinePartition, (tp, ctx.partition_state(tp))
            assert len(lai.isr) == 1 or not [r for r in lai.isr if r not in ctx.live_brokers]
            # Offline only because nobody eligible is live (clean election).
            if not ctx.unclean_election_enabled(tp.topic):
                assert not [r for r in lai.isr if r in live], (tp, lai)


# --- new topics -----------------------------------------------------------------------


def test_new_topic_initial_leader_and_isr() -> None:
    ctx = cluster([1, 2, 3], {})
    ctx.live_brokers.pop(2)
    d = decisions.on_new_topics(ctx, {"t": {0: [2, 3, 1], 1: [1, 2, 3], 2: [2]}})
    new = apply(d)
    t0 = new.partition_leadership[TopicPartition("t", 0)].leader_and_isr
    assert (t0.leader, t0.leader_epoch, t0.isr, t0.zk_version) == (3, 0, (3, 1), 0)
    assert new.partition_state(TopicPartition("t", 0)) is P.OnlinePartition
    # No live replica: stays NewPartition, no znode.
    assert TopicPartition("t", 2) not in new.partition_leadership
    assert new.partition_state(TopicPartition("t", 2)) is P.NewPartition
    assert d.failed_elections == [TopicPartition("t", 2)]
    assert {type(w) for w in d.zk_writes} == {CreatePartitionState}
    assert len(d.zk_writes) == 2
    assert new.replica_state(PartitionReplica(TopicPartition("t", 0), 2)) is R.OnlineReplica
    reqs = requests_by_type(d)
    assert set(reqs) == {1, 3}  # broker 2 is down
    for b in (1, 3):
        states = lai_partitions(reqs[b][LeaderAndIsrRequest])
        assert set(states) == {TopicPartition("t", 0), TopicPartition("t", 1)}
        assert all(s.is_new for s in states.values())
        assert reqs[b][LeaderAndIsrRequest].broker_epoch == 100
        assert set(um_partitions(reqs[b][UpdateMetadataRequest])) == set(states)
    assert not d.base.partition_leadership, "the input context is never mutated"


def test_new_topic_ids_reach_brokers_and_leave_with_the_topic() -> None:
    """KIP-516: the ids the IO layer read or assigned ride in LeaderAndIsr and
    UpdateMetadata (a later failover's full UpdateMetadata too) and go with deletion."""
    ids = {"a": uuid.UUID(int=1 << 100), "b": uuid.UUID(int=2 << 100)}
    ctx = cluster([1, 2], {})
    d = decisions.on_new_topics(ctx, {"a": {0: [1, 2]}, "b": {0: [2, 1]}}, topic_ids=ids)
    new = apply(d)
    assert new.topic_ids == ids
    assert not d.base.topic_ids
    for requests in requests_by_type(d).values():
        assert {t.topic_name: t.topic_id for t in requests[LeaderAndIsrRequest].topic_states} == ids
        assert {t.topic_name: t.topic_id for t in requests[UpdateMetadataRequest].topic_states} == (
            ids
        )
    failover = decisions.on_controller_failover(new)
    for requests in requests_by_type(failover).values():
        assert {t.topic_name: t.topic_id for t in requests[UpdateMetadataRequest].topic_states} == (
            ids
        )
    gone = new.copy()
    gone.remove_topic("a")
    assert gone.topic_ids == {"b": ids["b"]}


def test_broker_startup_initializes_partition_that_had_no_live_replica() -> None:
    ctx = cluster([1], {})
    ctx = apply(decisions.on_new_topics(ctx, {"t": {0: [2]}}))
    d = decisions.on_broker_startup(ctx, [broker(2)])
    new = apply(d)
    lai = new.partition_leadership[TopicPartition("t", 0)].leader_and_isr
    assert (lai.leader, lai.isr, lai.leader_epoch) == (2, (2,), 0)
    assert lai_partitions(requests_by_type(d)[2][LeaderAndIsrRequest])[
        TopicPartition("t", 0)
    ].is_new


# --- broker failure ---------------------------------------------------------------------


def test_broker_failure_moves_leadership_and_shrinks_isr() -> None:
    ctx = cluster([1, 2, 3], {"t": {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1]}})
    d = decisions.on_broker_failure(ctx, [1])
    new = apply(d)
    states = {p: new.partition_leadership[TopicPartition("t", p)].leader_and_isr for p in range(3)}
    assert (states[0].leader, states[0].isr, states[0].leader_epoch) == (2, (2, 3), 1)
    assert (states[1].leader, states[1].isr, states[1].leader_epoch) == (2, (2, 3), 1)
    assert (states[2].leader, states[2].isr, states[2].leader_epoch) == (3, (3,), 1)
    assert len(d.zk_writes) == 3
    assert 1 not in new.live_brokers
    assert new.replica_state(PartitionReplica(TopicPartition("t", 0), 1)) is R.OfflineReplica
    reqs = requests_by_type(d)
    assert set(reqs) == {2, 3}, "nothing is sent to the dead broker"
    assert set(lai_partitions(reqs[3][LeaderAndIsrRequest])) == {
        TopicPartition("t", p) for p in range(3)
    }
    metadata = reqs[2][UpdateMetadataRequest]
    assert {b.id for b in metadata.live_brokers} == {2, 3}
    assert um_partitions(metadata)[TopicPartition("t", 0)].offline_replicas == (1,)
    check_cluster_invariants(new)


def test_a_partition_not_yet_in_the_state_machine_is_skipped_not_fatal() -> None:
    """Campaign seed 14: a failover rerun met a partition of a topic being created,
    leadership known but no state yet (NonExistentPartition); raising made the whole
    failover fail and the controller resign. Kafka logs the transition and goes on."""
    ctx = cluster([1, 2, 3], {"t": {0: [1, 2, 3], 1: [1, 2, 3]}})
    ctx.partition_states.pop(TopicPartition("t", 1))
    d = decisions.on_broker_failure(ctx, [1])
    new = apply(d)
    assert new.illegal_transitions == 1
    assert new.partition_leadership[TopicPartition("t", 0)].leader_and_isr.leader == 2
    assert TopicPartition("t", 1) not in new.partition_states


def test_broker_change_in_two_decisions_new_leaders_first() -> None:
    """The controller applies a broker failure as two decisions (Kafka's
    onReplicasBecomeOffline order): the new leaders are written and told first, then
    the dead broker leaves the other ISRs; together they decide what one decision does."""
    ctx = cluster([1, 2, 3], {"t": {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1]}, "u": {0: [2, 3]}})
    registered = {2: broker(2), 3: broker(3)}
    changes = decisions.broker_changes(ctx, registered)
    t = [TopicPartition("t", p) for p in range(3)]

    first = decisions.on_broker_change_leaders(ctx, changes)
    mid = apply(first)
    assert [w.partition for w in first.zk_writes] == [t[0]], "only the partition 1 led"
    lai = mid.partition_leadership[t[0]].leader_and_isr
    assert (lai.leader, lai.isr, lai.leader_epoch) == (2, (2, 3), 1)
    assert 1 not in mid.live_brokers
    reqs = requests_by_type(first)
    assert set(reqs) == {2, 3}
    assert set(lai_partitions(reqs[2][LeaderAndIsrRequest])) == {t[0]}
    assert {b.id for b in reqs[3][UpdateMetadataRequest].live_brokers} == {2, 3}
    # In between, the dead broker is still in the ISR of the partitions it followed.
    assert mid.partition_leadership[t[1]].leader_and_isr.isr == (2, 3, 1)

    second = decisions.on_broker_change_replicas(mid, changes, registered, told=[t[0]])
    end = apply(second)
    assert {w.partition for w in second.zk_writes} == {t[1], t[2]}, "broker 1 leaves ISRs"
    reqs = requests_by_type(second)
    assert set(lai_partitions(reqs[3][LeaderAndIsrRequest])) == {t[1], t[2]}
    # t-0 was told with broker 1 offline by the first decision: not sent again.
    assert set(um_partitions(reqs[2][UpdateMetadataRequest])) == {t[1], t[2]}
    untold = decisions.on_broker_change_replicas(mid, changes, registered)
    assert t[0] in um_partitions(requests_by_type(untold)[2][UpdateMetadataRequest])
    assert end.replica_state(PartitionReplica(t[1], 1)) is R.OfflineReplica
    check_cluster_invariants(end)

    whole = apply(decisions.on_broker_change(ctx, registered))
    assert end.partition_leadership == whole.partition_leadership
    assert end.partition_states == whole.partition_states
    assert end.replica_states == whole.replica_states
    assert end.live_brokers == whole.live_brokers


def test_bounced_broker_in_two_decisions_starts_in_the_second() -> None:
    ctx = cluster([1, 2, 3], {"t": {0: [1, 2, 3], 1: [2, 3, 1]}})
    registered = {1: broker(1, epoch=500), 2: broker(2), 3: broker(3)}
    changes = decisions.broker_changes(ctx, registered)
    assert changes.bounced == (1,)
    mid = apply(decisions.on_broker_change_leaders(ctx, changes))
    assert 1 not in mid.live_brokers, "failed first: a new leader epoch where it led"
    assert mid.partition_leadership[TopicPartition("t", 0)].leader_and_isr.leader == 2
    second = decisions.on_broker_change_replicas(mid, changes, registered)
    end = apply(second)
    assert end.live_brokers[1].epoch == 500
    assert TopicPartition("t", 0) in lai_partitions(
        requests_by_type(second)[1][LeaderAndIsrRequest]
    )
    whole = apply(decisions.on_broker_change(ctx, registered))
    assert end.partition_leadership == whole.partition_leadership
    assert end.replica_states == whole.replica_states
    check_cluster_invariants(end)


def test_partition_goes_offline_keeping_last_isr_member() -> None:
    ctx = cluster([1, 2, 3], {"t": {0: [1, 2]}})
    new = apply(decisions.on_broker_failure(ctx, [2]))
    new = apply(decisions.on_broker_failure(new, [1]))
    lai = new.partition_leadership[TopicPartition("t", 0)].leader_and_isr
    assert lai.leader == NO_LEADER
    assert lai.isr == (1,), "the last ISR member stays, so only it can lead cleanly"
    assert new.partition_state(TopicPartition("t", 0)) is P.OfflinePartition
    # Broker 2 (not in ISR) returning does not bring the partition back cleanly.
    d = decisions.on_broker_startup(new, [broker(2, epoch=200)])
    back = apply(d)
    assert back.partition_leadership[TopicPartition("t", 0)].leader_and_isr.leader == NO_LEADER
    assert d.failed_elections == [TopicPartition("t", 0)]
    # Broker 1 returning does.
    back = apply(decisions.on_broker_startup(back, [broker(1, epoch=201)]))
    lai = back.partition_leadership[TopicPartition("t", 0)].leader_and_isr
    assert (lai.leader, lai.isr) == (1, (1,))
    check_cluster_invariants(back)


def test_unclean_election_when_topic_allows_it() -> None:
    ctx = cluster([1, 2], {"dirty": {0: [1, 2]}, "clean": {0: [1, 2]}}, unclean={"dirty": True})
    new = apply(decisions.on_broker_failure(ctx, [2]))
    new = apply(decisions.on_broker_failure(new, [1]))
    d = decisions.on_broker_startup(new, [broker(2, epoch=300)])
    back = apply(d)
    assert d.unclean_elections == [TopicPartition("dirty", 0)]
    assert back.partition_leadership[TopicPartition("dirty", 0)].leader_and_isr.leader == 2
    assert back.partition_leadership[TopicPartition("clean", 0)].leader_and_isr.leader == NO_LEADER


def test_bounced_broker_is_failure_then_startup() -> None:
    ctx = cluster([1, 2], {"t": {0: [1, 2]}})
    registered = {1: broker(1, epoch=500), 2: broker(2)}
    d = decisions.on_broker_change(ctx, registered)
    new = apply(d)
    lai = new.partition_leadership[TopicPartition("t", 0)].leader_and_isr
    assert (lai.leader, lai.isr, lai.leader_epoch) == (2, (2,), 1)
    assert new.live_brokers[1].epoch == 500
    reqs = requests_by_type(d)
    assert reqs[1][LeaderAndIsrRequest].broker_epoch == 500
    assert lai_partitions(reqs[1][LeaderAndIsrRequest])[TopicPartition("t", 0)].leader == 2
    # its failure's StopReplica is superseded by its startup's LeaderAndIsr (one batch is
    # sent LeaderAndIsr first: a stop after it would take the replica away again)
    assert StopReplicaRequest not in reqs[1]


def test_bounced_leader_is_decided_again_after_its_write_lost_a_version_race() -> None:
    """The retry of a broker change re-decides the failure of a restarted broker even
    though it is live again in the installed context (found by the simulator: the
    restarted leader otherwise kept its leader epoch and wrote a second record at an
    offset of that epoch)."""
    ctx = cluster([1, 2, 3], {"t": {0: [1, 2, 3]}})
    tp = TopicPartition("t", 0)
    registered = {1: broker(1, epoch=500), 2: broker(2), 3: broker(3)}
    changes = decisions.broker_changes(ctx, registered)
    first = decisions.on_broker_change(ctx, registered)
    first.drop_failed_writes([tp])  # the leader changed the ISR meanwhile: version race
    installed = first.context
    assert installed.live_brokers[1].epoch == 500  # b1 is live again in the context
    lai = installed.partition_leadership[tp].leader_and_isr
    assert lai.leader == 1  # still the old leader at the old epoch
    # the IO layer re-reads the state (ISR changed by the leader) and decides again
    reread = dataclasses.replace(lai, isr=(1, 2), zk_version=lai.zk_version + 1)
    fresh = {("t", 0): LeaderIsrAndControllerEpoch(reread, 1)}
    again = decisions.redo_broker_change(
        decisions.refreshed(installed, fresh), {tp}, changes, registered
    )
    after = apply(again).partition_leadership[tp].leader_and_isr
    assert after.leader == 2 and after.leader_epoch == lai.leader_epoch + 1


def test_partitions_on_failed_brokers_are_refreshed_and_a_newer_controller_fences() -> None:
    ctx = cluster([1, 2, 3], {"a": {0: [1, 2], 1: [2, 3]}, "b": {0: [3, 1]}})
    changes = decisions.broker_changes(ctx, {2: broker(2), 3: broker(3)})
    # Where the context's ISR holds broker 1, the decision's conditional write catches
    # a state changed meanwhile: nothing to read first.
    assert decisions.partitions_to_refresh(ctx, changes) == []
    # b-0's ISR as the context knows it lacks 1 (the leader may have added it since).
    b0 = TopicPartition("b", 0)
    known = ctx.partition_leadership[b0]
    ctx.partition_leadership[b0] = dataclasses.replace(
        known, leader_and_isr=dataclasses.replace(known.leader_and_isr, isr=(3,))
    )
    assert decisions.partitions_to_refresh(ctx, changes) == [b0]
    state = ctx.partition_leadership[TopicPartition("a", 0)]
    newer = LeaderIsrAndControllerEpoch(state.leader_and_isr, ctx.controller_epoch + 1)
    with pytest.raises(ControllerMovedError):
        decisions.refreshed(ctx, {("a", 0): newer})


def test_broker_change_without_changes_is_empty() -> None:
    ctx = cluster([1, 2], {"t": {0: [1, 2]}})
    d = decisions.on_broker_change(ctx, dict(ctx.live_brokers))
    assert not d.zk_writes and not d.requests()


def test_broker_changes_classify_by_broker_epoch() -> None:
    ctx = cluster([1, 2, 3], {"t": {0: [1, 2, 3]}})  # every broker at epoch 100
    assert not decisions.broker_changes(ctx, dict(ctx.live_brokers))
    registered = {1: broker(1, epoch=500), 2: broker(2, epoch=99), 4: broker(4)}
    changes = decisions.broker_changes(ctx, registered)
    # 2's registration is not newer than the known one: unchanged, not bounced.
    assert (changes.dead, changes.new, changes.bounced) == ((3,), (4,), (1,))
    assert changes.describe() == "broker change: failed [3], started [4], restarted [1]"
    only_dead = decisions.broker_changes(ctx, {1: broker(1), 2: broker(2)})
    assert only_dead.describe() == "broker failure of [3]"


@st.composite
def clusters(draw: st.DrawFn) -> tuple[ControllerContext, list[int]]:
    n = draw(st.integers(2, 6))
    ids = list(range(1, n + 1))
    seed = draw(st.integers(0, 2**16))
    rng = random.Random(seed)
    topics = {}
    for t in range(draw(st.integers(1, 4))):
        rf = draw(st.integers(1, n))
        topics[f"t{t}"] = assign_replicas_to_brokers(
            [BrokerMetadata(b) for b in ids], draw(st.integers(1, 8)), rf, rng
        )
    unclean = {t: draw(st.booleans()) for t in topics}
    ctx = cluster(ids, topics, unclean)
    # Leaders shrink ISRs on their own (ISR change notifications): random shrinks.
    fresh = {}
    for tp, state in ctx.partition_leadership.items():
        lai = state.leader_and_isr
        keep = [r for r in lai.isr if r == lai.leader or draw(st.booleans())]
        fresh[tp] = LeaderIsrAndControllerEpoch(
            LeaderAndIsr(lai.leader, lai.leader_epoch, tuple(keep), lai.zk_version + 1), 1
        )
    ctx = apply(decisions.on_isr_change(ctx, fresh))
    steps = draw(st.lists(st.lists(st.sampled_from(ids), min_size=1, unique=True), max_size=4))
    return ctx, steps


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.data())
def test_random_failures_and_restarts_keep_invariants(case, data) -> None:
    ctx, steps = case
    epoch = 1000
    for brokers in steps:
        down = [b for b in brokers if b in ctx.live_brokers]
        up = [b for b in brokers if b not in ctx.live_brokers]
        before = ctx
        if down:
            d = decisions.on_broker_failure(ctx, down)
        else:
            epoch += 1
            d = decisions.on_broker_startup(ctx, [broker(b, epoch) for b in up])
        ctx = apply(d)
        check_cluster_invariants(ctx)
        for tp, state in ctx.partition_leadership.items():
            old = before.partition_leadership.get(tp)
            new_lai = state.leader_and_isr
            if old is None:
                continue
            old_lai = old.leader_and_isr
            assert new_lai.leader_epoch >= old_lai.leader_epoch, "epochs never go back"
            if new_lai.leader != old_lai.leader and new_lai.leader != NO_LEADER:
                assert new_lai.leader_epoch > old_lai.leader_epoch
                # A clean election picks from the old ISR.
                if tp not in d.unclean_elections:
                    assert new_lai.leader in old_lai.isr
        reqs = d.requests()
        assert set(reqs) <= set(ctx.live_brokers)
        for b, requests in reqs.items():
            for request in requests:
                if isinstance(request, LeaderAndIsrRequest):
                    for tp, ps in lai_partitions(request).items():
                        lai = ctx.partition_leadership[tp].leader_and_isr
                        assert (ps.leader, ps.leader_epoch, ps.isr) == (
                            lai.leader,
                            lai.leader_epoch,
                            lai.isr,
                        )
                        assert b in ctx.replicas_for(tp)
                    assert request.broker_epoch == ctx.live_brokers[b].epoch
        # Controller failover on the result agrees with it and tells everyone everything.
        if data.draw(st.booleans()):
            failover = decisions.on_controller_failover(ctx)
            after = apply(failover)
            check_cluster_invariants(after)
            sent = requests_by_type(failover)
            for b in after.live_brokers:
                assert set(um_partitions(sent[b][UpdateMetadataRequest])) == set(
                    after.partition_leadership
                )


def test_ten_thousand_partitions_broker_failure() -> None:
    """Scale check of correctness (timing is measured in the report, never asserted)."""
    rng = random.Random(3)
    ids = [1, 2, 3, 4, 5]
    topics = {
        f"topic-{i}": assign_replicas_to_brokers([BrokerMetadata(b) for b in ids], 100, 3, rng)
        for i in range(100)
    }
    ctx = cluster(ids, topics)
    d = decisions.on_broker_failure(ctx, [2])
    new = apply(d)
    check_cluster_invariants(new)
    hosted = {r.topic_partition for r in ctx.replicas_on_brokers([2])}
    assert {w.partition for w in d.zk_writes} == hosted
    reqs = d.requests()
    assert set(reqs) == {1, 3, 4, 5}


# --- controller failover, ISR change, controlled shutdown -------------------------------


def test_controller_failover_sends_full_state_and_cleans_offline_replicas() -> None:
    old = cluster([1, 2, 3], {"t": {0: [1, 2, 3], 1: [3, 2]}})
    # The new controller reads ZooKeeper: broker 3 is gone, states are as left.
    ctx = ControllerContext(controller_id=2, controller_epoch=2, controller_epoch_zk_version=2)
    ctx.live_brokers = {1: broker(1), 2: broker(2)}
    for topic, assignment in old.partition_assignments.items():
        ctx.add_topic(topic, assignment)
    ctx.partition_leadership = dict(old.partition_leadership)
    d = decisions.on_controller_failover(ctx)
    new = apply(d)
    t0 = new.partition_leadership[TopicPartition("t", 0)]
    t1 = new.partition_leadership[TopicPartition("t", 1)]
    assert t0.leader_and_isr.isr == (1, 2) and t0.leader_and_isr.leader == 1
    assert t1.leader_and_isr.leader == 2 and t1.leader_and_isr.isr == (2,)
    assert t1.controller_epoch == 2
    reqs = requests_by_type(d)
    assert set(reqs) == {1, 2}
    assert set(lai_partitions(reqs[2][LeaderAndIsrRequest])) == {
        TopicPartition("t", 0),
        TopicPartition("t", 1),
    }
    assert set(lai_partitions(reqs[1][LeaderAndIsrRequest])) == {TopicPartition("t", 0)}
    for b in (1, 2):
        assert set(um_partitions(reqs[b][UpdateMetadataRequest])) == set(new.partition_leadership)
        assert reqs[b][UpdateMetadataRequest].controller_epoch == 2
    check_cluster_invariants(new)


def test_controller_failover_gives_a_restarted_leader_a_new_epoch() -> None:
    """A leader that re-registered after its partition's state was last written restarted
    without any controller handling it (the old one died first): it may have lost an
    unflushed tail, so it must not lead its old epoch again (found by the simulator)."""
    old = cluster([1, 2, 3], {"t": {0: [1, 2, 3], 1: [2, 3, 1]}})
    ctx = ControllerContext(controller_id=2, controller_epoch=2, controller_epoch_zk_version=2)
    # states last written at zxid 300; broker 1 registered again at 400, the others long ago
    ctx.live_brokers = {1: broker(1, epoch=400), 2: broker(2, epoch=100), 3: broker(3, epoch=100)}
    for topic, assignment in old.partition_assignments.items():
        ctx.add_topic(topic, assignment)
    ctx.partition_leadership = dict(old.partition_leadership)
    ctx.partition_state_mzxid = dict.fromkeys(old.partition_leadership, 300)
    assert decisions.restarted_in_sync_replicas(ctx) == [1]
    new = apply(decisions.on_controller_failover(ctx))
    before = old.partition_leadership[TopicPartition("t", 0)].leader_and_isr
    after = new.partition_leadership[TopicPartition("t", 0)].leader_and_isr
    assert after.leader != 1 and after.leader_epoch > before.leader_epoch
    assert 1 not in after.isr
    t1 = new.partition_leadership[TopicPartition("t", 1)].leader_and_isr
    assert t1.leader == 2 and 1 not in t1.isr  # a follower that restarted leaves the ISR too
    # nothing restarted: failover changes no leader epoch
    ctx.live_brokers[1] = broker(1, epoch=100)
    same = apply(decisions.on_controller_failover(ctx))
    assert same.partition_leadership[TopicPartition("t", 0)].leader_and_isr.leader_epoch == (
        before.leader_epoch
    )


def test_controller_failover_resigns_when_a_newer_controller_wrote() -> None:
    old = cluster([1, 2], {"t": {0: [1, 2]}})
    ctx = ControllerContext(controller_id=2, controller_epoch=1)
    ctx.live_brokers = {2: broker(2)}
    ctx.add_topic("t", old.partition_assignments["t"])
    lai = old.partition_leadership[TopicPartition("t", 0)].leader_and_isr
    ctx.partition_leadership = {TopicPartition("t", 0): LeaderIsrAndControllerEpoch(lai, 5)}
    with pytest.raises(ControllerMovedError):
        decisions.on_controller_failover(ctx)


def test_isr_change_updates_cache_and_metadata_only() -> None:
    ctx = cluster([1, 2, 3], {"t": {0: [1, 2, 3]}})
    tp = TopicPartition("t", 0)
    lai = ctx.partition_leadership[tp].leader_and_isr
    fresh = LeaderIsrAndControllerEpoch(
        LeaderAndIsr(1, lai.leader_epoch, (1, 3), lai.zk_version + 1), 1
    )
    d = decisions.on_isr_change(ctx, {("t", 0): fresh})
    assert not d.zk_writes
    new = apply(d)
    assert new.partition_leadership[tp] == fresh
    reqs = requests_by_type(d)
    assert set(reqs) == {1, 2, 3}
    assert all(set(r) == {UpdateMetadataRequest} for r in reqs.values())
    assert um_partitions(reqs[2][UpdateMetadataRequest])[tp].isr == (1, 3)
    # A stale notification (older znode version) is ignored.
    stale = decisions.on_isr_change(new, {tp: ctx.partition_leadership[tp]})
    assert stale.context.partition_leadership[tp] == fresh


def test_controlled_shutdown_moves_leaders_and_isr() -> None:
    ctx = cluster([1, 2, 3], {"t": {0: [1, 2, 3], 1: [2, 1, 3], 2: [1]}})
    d, result = decisions.on_controlled_shutdown(ctx, 1, broker_epoch=100)
    new = apply(d)
    assert result.error_code == 0 and result.remaining == ()
    t0 = new.partition_leadership[TopicPartition("t", 0)].leader_and_isr
    t1 = new.partition_leadership[TopicPartition("t", 1)].leader_and_isr
    assert (t0.leader, t0.isr) == (2, (2, 3))
    assert (t1.leader, t1.isr) == (2, (2, 3))
    # The single-replica partition cannot move.
    assert new.partition_leadership[TopicPartition("t", 2)].leader_and_isr.leader == 1
    assert 1 in new.shutting_down_broker_ids
    reqs = requests_by_type(d)
    assert TopicPartition("t", 1) in stop_partitions(reqs[1][StopReplicaRequest])
    assert not stop_partitions(reqs[1][StopReplicaRequest])[TopicPartition("t", 1)].delete_partition
    # Then the broker actually goes away: nothing left to do for its partitions but t-2.
    gone = apply(decisions.on_broker_failure(new, [1]))
    assert gone.partition_leadership[TopicPartition("t", 0)].leader_and_isr.leader == 2
    check_cluster_invariants(gone)


def test_controlled_shutdown_errors() -> None:
    ctx = cluster([1, 2], {"t": {0: [1, 2]}})
    assert (
        decisions.on_controlled_shutdown(ctx, 9, 1)[1].error_code == ErrorCode.broker_not_available
    )
    assert (
        decisions.on_controlled_shutdown(ctx, 1, 99)[1].error_code == ErrorCode.stale_broker_epoch
    )


def test_controlled_shutdown_with_no_other_isr_member_reports_remaining() -> None:
    ctx = cluster([1, 2], {"t": {0: [1, 2]}})
    tp = TopicPartition("t", 0)
    lai = ctx.partition_leadership[tp].leader_and_isr
    shrunk = LeaderIsrAndControllerEpoch(
        LeaderAndIsr(1, lai.leader_epoch, (1,), lai.zk_version + 1), 1
    )
    ctx = apply(decisions.on_isr_change(ctx, {tp: shrunk}))
    d, result = decisions.on_controlled_shutdown(ctx, 1, 100)
    assert result.remaining == (tp,)
    assert not d.zk_writes


def test_preferred_replica_election() -> None:
    ctx = cluster([1, 2], {"t": {0: [1, 2]}})
    ctx = apply(decisions.on_broker_failure(ctx, [1]))
    ctx = apply(decisions.on_broker_startup(ctx, [broker(1, 200)]))
    tp = TopicPartition("t", 0)
    assert ctx.partition_leadership[tp].leader_and_isr.leader == 2
    # Broker 1 caught up (the leader added it back to the ISR).
    lai = ctx.partition_leadership[tp].leader_and_isr
    ctx = apply(
        decisions.on_isr_change(
            ctx,
            {
                tp: LeaderIsrAndControllerEpoch(
                    LeaderAndIsr(2, lai.leader_epoch, (2, 1), lai.zk_version + 1), 1
                )
            },
        )
    )
    new = apply(decisions.on_preferred_replica_election(ctx, [tp]))
    assert new.partition_leadership[tp].leader_and_isr.leader == 1


# --- topic deletion ---------------------------------------------------------------------


def stop_replica_ok(d: ControllerDecision, broker_id: int) -> dict[TopicPartition, int]:
    request = requests_by_type(d)[broker_id][StopReplicaRequest]
    return {tp: 0 for tp, s in stop_partitions(request).items() if s.delete_partition}


def test_topic_deletion_waits_for_down_broker() -> None:
    ctx = cluster([1, 2, 3], {"doomed": {0: [1, 2], 1: [2, 3]}, "kept": {0: [1, 2, 3]}})
    ctx = apply(decisions.on_broker_failure(ctx, [3]))
    d = decisions.on_topic_deletion(ctx, ["doomed", "unknown"])
    ctx = apply(d)
    assert ctx.topics_to_be_deleted == {"doomed"}
    assert ctx.topics_ineligible_for_deletion == {"doomed"}
    reqs = requests_by_type(d)
    assert set(reqs) == {1, 2}
    stops = stop_partitions(reqs[2][StopReplicaRequest])
    assert {tp: (s.delete_partition, s.leader_epoch) for tp, s in stops.items()} == {
        TopicPartition("doomed", 0): (True, -2),
        TopicPartition("doomed", 1): (True, -2),
    }
    # Brokers learn the topic is going away: leader -2 in UpdateMetadata.
    assert um_partitions(reqs[1][UpdateMetadataRequest])[TopicPartition("doomed", 0)].leader == -2
    assert (
        ctx.replica_state(PartitionReplica(TopicPartition("doomed", 1), 3))
        is R.ReplicaDeletionIneligible
    )
    # Live brokers answer; the topic is not gone: broker 3 still holds a replica.
    for b in (1, 2):
        d = decisions.on_stop_replica_response(
            ctx, b, 0, stop_replica_ok(d, b) if b in requests_by_type(d) else {}
        )
        ctx = apply(d)
    ctx = apply(decisions.on_stop_replica_response(ctx, 1, 0, {TopicPartition("doomed", 0): 0}))
    ctx = apply(
        decisions.on_stop_replica_response(
            ctx, 2, 0, {TopicPartition("doomed", 0): 0, TopicPartition("doomed", 1): 0}
        )
    )
    assert "doomed" in ctx.all_topics
    assert (
        ctx.replica_state(PartitionReplica(TopicPartition("doomed", 0), 1))
        is R.ReplicaDeletionSuccessful
    )
    # Broker 3 returns: it is told to delete, and the deletion finishes on its answer.
    d = decisions.on_broker_startup(ctx, [broker(3, 200)])
    ctx = apply(d)
    check_cluster_invariants(ctx)
    assert not [w for w in d.zk_writes if isinstance(w, DeleteTopic)]
    stops = stop_partitions(requests_by_type(d)[3][StopReplicaRequest])
    assert stops[TopicPartition("doomed", 1)].delete_partition
    d = decisions.on_stop_replica_response(ctx, 3, 0, {TopicPartition("doomed", 1): 0})
    ctx = apply(d)
    assert [w for w in d.zk_writes if isinstance(w, DeleteTopic)] == [DeleteTopic("doomed")]
    assert d.completed_topic_deletions == ["doomed"]
    assert "doomed" not in ctx.all_topics and not ctx.topics_to_be_deleted
    assert all(r.topic_partition.topic != "doomed" for r in ctx.replica_states)
    assert all(tp.topic != "doomed" for tp in ctx.partition_leadership)
    assert ctx.partition_leadership[TopicPartition("kept", 0)].leader_and_isr.leader == 1


def test_topic_deletion_with_all_brokers_up_and_a_failed_replica() -> None:
    ctx = cluster([1, 2], {"x": {0: [1, 2]}})
    ctx = apply(decisions.on_topic_deletion(ctx, ["x"]))
    tp = TopicPartition("x", 0)
    assert ctx.replica_state(PartitionReplica(tp, 1)) is R.ReplicaDeletionStarted
    ctx = apply(decisions.on_stop_replica_response(ctx, 1, 0, {tp: 0}))
    # Broker 2 fails to delete (e.g. KAFKA_STORAGE_ERROR): halted, not retried in a loop.
    d = decisions.on_stop_replica_response(ctx, 2, 0, {tp: 56})
    ctx = apply(d)
    assert "x" in ctx.topics_ineligible_for_deletion
    sent = requests_by_type(d).get(2, {})
    if StopReplicaRequest in sent:
        assert not stop_partitions(sent[StopReplicaRequest])[tp].delete_partition
    # A duplicate (stale) success answer from broker 1 changes nothing.
    again = decisions.on_stop_replica_response(ctx, 1, 0, {tp: 0})
    assert again.context.replica_states == ctx.replica_states
    # Broker 2 restarts: deletion resumes and completes.
    d = decisions.on_broker_change(ctx, {1: broker(1), 2: broker(2, 999)})
    ctx = apply(d)
    assert stop_partitions(requests_by_type(d)[2][StopReplicaRequest])[tp].delete_partition
    ctx = apply(decisions.on_stop_replica_response(ctx, 2, 0, {tp: 0}))
    assert "x" not in ctx.all_topics


def test_broker_dying_during_deletion_halts_it() -> None:
    ctx = cluster([1, 2], {"x": {0: [1, 2]}})
    ctx = apply(decisions.on_topic_deletion(ctx, ["x"]))
    ctx = apply(decisions.on_broker_failure(ctx, [2]))
    tp = TopicPartition("x", 0)
    assert ctx.replica_state(PartitionReplica(tp, 2)) is R.ReplicaDeletionIneligible
    assert "x" in ctx.topics_ineligible_for_deletion
    ctx = apply(decisions.on_stop_replica_response(ctx, 1, 0, {tp: 0}))
    assert "x" in ctx.all_topics
    ctx = apply(decisions.on_broker_startup(ctx, [broker(2, 7)]))
    ctx = apply(decisions.on_stop_replica_response(ctx, 2, 0, {tp: 0}))
    assert "x" not in ctx.all_topics


def test_drop_failed_writes_keeps_the_rest_and_a_rerun_finishes() -> None:
    ctx = cluster([1, 2, 3], {"t": {0: [1, 2, 3], 1: [1, 3, 2]}})
    d = decisions.on_broker_failure(ctx, [1])
    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
    # The write of t-1 fails on its version: its leader changed the ISR after our read.
    d.drop_failed_writes([t1])
    assert [w.partition for w in d.zk_writes] == [t0]
    assert d.context.partition_leadership[t1] == ctx.partition_leadership[t1]
    assert d.context.partition_state(t1) is ctx.partition_state(t1)
    for requests in d.requests().values():
        for request in requests:
            if isinstance(request, LeaderAndIsrRequest):
                assert t1 not in lai_partitions(request)
            if isinstance(request, UpdateMetadataRequest):
                assert t1 not in um_partitions(request)
    partial = apply(d)
    # The IO layer re-reads t-1 (now at a newer version) and runs the decision again.
    lai = ctx.partition_leadership[t1].leader_and_isr
    fresh = LeaderIsrAndControllerEpoch(
        LeaderAndIsr(1, lai.leader_epoch, (1, 3), lai.zk_version + 1), 1
    )
    partial.partition_leadership[t1] = fresh
    again = decisions.on_broker_failure(partial, [1])
    done = apply(again)
    assert [w.partition for w in again.zk_writes] == [t1]
    assert done.partition_leadership[t1].leader_and_isr.leader == 3
    assert done.partition_leadership[t1].leader_and_isr.isr == (3,)
    check_cluster_invariants(done)
