"""The controller's decisions on brokers: failover (Kafka ``onControllerFailover``),
broker changes (``processBrokerChange``), broker startup and failure
(``onBrokerStartup``, ``onBrokerFailure``).

Pure: see ``replog.controller.decisions``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from replog.controller import topic_deletion
from replog.controller.context import (
    BrokerInfo,
    ControllerContext,
    PartitionReplica,
    TopicPartition,
)
from replog.controller.effects import ControllerDecision
from replog.controller.state_machines import (
    partition_state_change,
    replica_state_change,
    trigger_online_partition_state_change,
)
from replog.controller.states import PartitionState, ReplicaState
from replog.zk.fencing import UNKNOWN_BROKER_EPOCH

_P = PartitionState
_R = ReplicaState


def on_controller_failover(context: ControllerContext) -> ControllerDecision:
    """This broker just became controller; ``context`` was read from ZooKeeper with the
    incremented controller epoch, ``live_brokers``, topics, assignments, leadership,
    ``topics_to_be_deleted`` and unclean-election settings filled in and no states yet.

    Every live broker gets UpdateMetadata with every partition and LeaderAndIsr for
    every partition it hosts; offline replicas leave their ISRs; partitions without a
    live leader get one elected; pending topic deletions resume.
    """
    d = ControllerDecision(context)
    ctx = d.context
    # Kafka initializeTopicDeletion: topics with replicas on dead brokers are halted.
    ctx.topics_to_be_deleted &= ctx.all_topics
    offline_replicas: list[PartitionReplica] = []
    online_replicas: list[PartitionReplica] = []
    for topic in sorted(ctx.partition_assignments):
        for replica in ctx.replicas_for_topic(topic):
            if ctx.is_replica_online(replica.replica, replica[0], include_shutting_down=True):
                online_replicas.append(replica)
                ctx.replica_states[replica] = _R.OnlineReplica
            else:
                offline_replicas.append(replica)
                ctx.replica_states[replica] = _R.ReplicaDeletionIneligible
                if topic in ctx.topics_to_be_deleted:
                    ctx.topics_ineligible_for_deletion.add(topic)
    # ... and so are topics with a partition reassignment in progress.
    ctx.topics_ineligible_for_deletion |= {
        tp[0] for tp in ctx.partition_reassignments
    } & ctx.topics_to_be_deleted
    for tp in ctx.all_partitions():
        state = ctx.partition_leadership.get(tp)
        if state is None:
            ctx.partition_states[tp] = _P.NewPartition
        elif ctx.is_replica_online(state.leader_and_isr.leader, tp):
            ctx.partition_states[tp] = _P.OnlinePartition
        else:
            ctx.partition_states[tp] = _P.OfflinePartition
    d.batch.add_update_metadata_all_partitions(ctx.live_or_shutting_down_broker_ids)
    # Kafka replicaStateMachine.startup()
    replica_state_change(d, online_replicas, _R.OnlineReplica)
    replica_state_change(
        d,
        [r for r in offline_replicas if r.topic_partition.topic not in ctx.topics_to_be_deleted],
        _R.OfflineReplica,
    )
    # Kafka partitionStateMachine.startup()
    trigger_online_partition_state_change(d)
    restarted = restarted_in_sync_replicas(ctx)
    if restarted:
        # They restarted after their partitions' states were last written, maybe losing an
        # unflushed tail: a failure and a startup, as if the last controller had seen it,
        # so each gets a new leader epoch (found by the simulator: a bounced leader re-sent
        # its old epoch appended a second record at an (epoch, offset) a follower held).
        infos = [ctx.live_brokers[b] for b in restarted]
        _broker_failure(d, restarted)
        _broker_startup(d, infos)
    topic_deletion.resume_deletions(d)
    return d


def restarted_in_sync_replicas(context: ControllerContext) -> list[int]:
    """Live brokers in some ISR whose registration (broker epoch, the czxid of
    ``/brokers/ids/<id>``) is newer than that partition state's last write (its mzxid):
    they restarted since they were last put in that ISR or made leader, and no
    controller has handled it (the previous one died first)."""
    ctx = context
    found: set[int] = set()
    for tp, mzxid in ctx.partition_state_mzxid.items():
        state = ctx.partition_leadership.get(tp)
        if state is None:
            continue
        for b in state.leader_and_isr.isr:
            if b in ctx.live_brokers and ctx.broker_epoch(b) > mzxid:
                found.add(b)
    return sorted(found)


@dataclass(frozen=True, slots=True)
class BrokerChanges:
    """How ``/brokers/ids`` differs from the live brokers the controller knows."""

    dead: tuple[int, ...]
    """Known brokers no longer registered."""
    new: tuple[int, ...]
    """Registered brokers the controller does not know."""
    bounced: tuple[int, ...]
    """Known brokers registered again with a newer broker epoch (restarted meanwhile)."""

    def __bool__(self) -> bool:
        return bool(self.dead or self.new or self.bounced)

    def describe(self) -> str:
        if self.dead and not (self.new or self.bounced):
            return f"broker failure of {list(self.dead)}"
        if self.new and not (self.dead or self.bounced):
            return f"broker startup of {list(self.new)}"
        return (
            f"broker change: failed {list(self.dead)}, started {list(self.new)}, "
            f"restarted {list(self.bounced)}"
        )


def broker_changes(
    context: ControllerContext, registered: Mapping[int, BrokerInfo]
) -> BrokerChanges:
    """Kafka ``processBrokerChange``'s classification of ``registered`` (every broker now
    under ``/brokers/ids``, with its epoch) against ``context.live_brokers``. A broker
    whose registration is not newer than the known one is unchanged."""
    known = context.live_brokers
    return BrokerChanges(
        dead=tuple(sorted(b for b in known if b not in registered)),
        new=tuple(sorted(b for b in registered if b not in known)),
        bounced=tuple(
            sorted(
                b
                for b in registered
                if b in known and _epoch(registered[b]) > context.broker_epoch(b)
            )
        ),
    )


def on_broker_change(
    context: ControllerContext, registered: Mapping[int, BrokerInfo]
) -> ControllerDecision:
    """Kafka ``processBrokerChange``: ``registered`` is every broker now under
    ``/brokers/ids`` (with its epoch), classified by ``broker_changes``. Dead brokers
    are handled first, then bounced brokers (a failure and a startup), then new ones.
    """
    return redo_broker_change(context, set(), broker_changes(context, registered), registered)


def partitions_to_refresh(
    context: ControllerContext, changes: BrokerChanges
) -> list[TopicPartition]:
    """Partitions whose state the IO layer must re-read from ZooKeeper before deciding
    ``changes``: those with a replica on a failed or restarted broker that is not in
    the ISR as the context knows it.

    A leader changes its ISR in ZooKeeper without telling the controller (the ISR
    change notification comes seconds later), so the context can miss a broker that
    just joined an ISR; removing the failed broker from the ISR *as the context knows
    it* would then write nothing and leave it in ZooKeeper's ISR, electable without
    the records it lost (found by the simulator). Where the context's ISR holds the
    failed broker, the decision writes the partition (a new leader, or a smaller ISR)
    conditionally on the znode version it knows, so a state that changed meanwhile
    fails that write and is re-read and decided again (``effects``' contract); reading
    those first would only cost time. (Kafka's ``doRemoveReplicasFromIsr`` reads every
    one; so did this controller, 10,000 reads at 10,000 partitions.)
    """
    failed = {*changes.dead, *changes.bounced}
    if not failed:
        return []
    leadership = context.partition_leadership
    wanted: set[TopicPartition] = set()
    for tp, broker in context.replicas_on_brokers(failed):
        state = leadership.get(tp)
        if state is None or broker not in state.leader_and_isr.isr:
            wanted.add(tp)
    return sorted(wanted)


def redo_broker_change(
    context: ControllerContext,
    _stale: set[TopicPartition],
    changes: BrokerChanges,
    registered: Mapping[int, BrokerInfo],
) -> ControllerDecision:
    """Decide ``changes`` over ``context``: failures (dead and restarted brokers) first,
    then startups (new and restarted). Also the retry after some writes lost a version
    race (their states re-read into ``context``): deciding the whole change again is
    idempotent for partitions already handled, and a restarted broker, though live
    again, still gets its failure decided (a new leader epoch where it led) for the
    partitions whose writes failed (found by the simulator: a restarted leader kept
    its old epoch and appended a second record at an offset of that epoch).
    """
    d = ControllerDecision(context)
    if changes.dead or changes.bounced:
        _offline_leaders(d, sorted({*changes.dead, *changes.bounced}))
    _rest_of_broker_change(d, changes, registered)
    return d


def on_broker_change_leaders(
    context: ControllerContext, changes: BrokerChanges
) -> ControllerDecision:
    """The first of the two decisions the controller applies for ``changes``, so that
    new leaders serve before the other partitions' ISRs are written (Kafka's
    ``onReplicasBecomeOffline`` writes and sends the partition state machine's batch,
    then the replica state machine's): failed (dead and restarted) brokers leave the
    live set and every partition whose leader is not live gets one elected. Also its
    own retry after lost version races: idempotent for partitions already handled.

    ``on_broker_change_leaders`` then ``on_broker_change_replicas`` decide what
    ``redo_broker_change`` decides in one go.
    """
    d = ControllerDecision(context)
    if changes.dead or changes.bounced:
        _offline_leaders(d, sorted({*changes.dead, *changes.bounced}))
    return d


Decide = Callable[[ControllerContext], ControllerDecision]
Retry = Callable[[ControllerContext, set[TopicPartition]], ControllerDecision]


@dataclass(frozen=True)
class BrokerChangeStep:
    """One decision of a broker change, applied in order; ``told`` is whether it takes
    the partitions earlier steps sent in UpdateMetadata (``on_broker_change_replicas``)."""

    decide: Callable[..., ControllerDecision]
    retry: Retry
    told: bool = False


def broker_change_steps(
    changes: BrokerChanges, registered: Mapping[int, BrokerInfo]
) -> list[BrokerChangeStep]:
    """The decisions a broker change is applied as, for every driver (the controller and
    the simulator): with failed brokers, ``on_broker_change_leaders`` first (its own
    retry), then ``on_broker_change_replicas`` (retried with ``redo_broker_change``)."""
    steps = []
    if changes.dead or changes.bounced:
        leaders = partial(on_broker_change_leaders, changes=changes)
        steps.append(BrokerChangeStep(leaders, lambda ctx, _stale: leaders(ctx)))
    steps.append(
        BrokerChangeStep(
            partial(on_broker_change_replicas, changes=changes, registered=registered),
            partial(redo_broker_change, changes=changes, registered=registered),
            told=True,
        )
    )
    return steps


def on_broker_change_replicas(
    context: ControllerContext,
    changes: BrokerChanges,
    registered: Mapping[int, BrokerInfo],
    told: Iterable[TopicPartition] = (),
) -> ControllerDecision:
    """The second decision for ``changes``, over the context the first one installed:
    the failed brokers' replicas go OfflineReplica (they leave every ISR), their
    pending deletions fail, then new and restarted brokers start (Kafka
    ``onBrokerStartup``). Its retry after lost version races is ``redo_broker_change``,
    which elects again too: a state re-read after a failed ISR write may show a live
    in-sync replica the context did not know of, for a partition left without a leader."""
    d = ControllerDecision(context)
    _rest_of_broker_change(d, changes, registered)
    # ``told``: partitions the first decision sent in UpdateMetadata to every live
    # broker, the failed ones already offline; unchanged here, not sent again.
    for tp in told:
        if not d.has_pending_write(tp):
            d.batch.update_metadata_partitions.pop(tp, None)
    return d


def _rest_of_broker_change(
    d: ControllerDecision, changes: BrokerChanges, registered: Mapping[int, BrokerInfo]
) -> None:
    failed = sorted({*changes.dead, *changes.bounced})
    if failed:
        _offline_replicas(d, failed)
    if changes.new or changes.bounced:
        started = sorted([*changes.new, *changes.bounced])
        _broker_startup(d, [registered[b] for b in started])


def on_broker_startup(
    context: ControllerContext, new_brokers: Sequence[BrokerInfo]
) -> ControllerDecision:
    """Kafka ``onBrokerStartup``: ``new_brokers`` just registered."""
    d = ControllerDecision(context)
    _broker_startup(d, new_brokers)
    return d


def on_broker_failure(
    context: ControllerContext, dead_brokers: Iterable[int]
) -> ControllerDecision:
    """Kafka ``onBrokerFailure``: ``dead_brokers`` lost their registration.

    For every partition led by a dead broker a new leader is elected from the live ISR
    (unclean only if the topic allows it); dead brokers leave every ISR, except that an
    ISR is never emptied (the partition goes offline with leader -1 and keeps its last
    member). One ZooKeeper write per changed partition; LeaderAndIsr to the affected
    live replicas and UpdateMetadata to every live broker.
    """
    d = ControllerDecision(context)
    _broker_failure(d, sorted(set(dead_brokers)))
    return d


def _epoch(info: BrokerInfo) -> int:
    return UNKNOWN_BROKER_EPOCH if info.epoch is None else info.epoch


def _broker_startup(d: ControllerDecision, new_brokers: Sequence[BrokerInfo]) -> None:
    ctx = d.context
    new_ids = {b.id for b in new_brokers}
    for info in new_brokers:
        ctx.live_brokers[info.id] = info
        ctx.shutting_down_broker_ids.discard(info.id)
        # Kafka: a restarted broker's failed dirs are learnt again from its answers.
        ctx.replicas_on_offline_dirs.pop(info.id, None)
    # Kafka sends everything to everyone here: new brokers need all partitions, the
    # others need the new live broker list.
    d.batch.add_update_metadata_all_partitions(ctx.live_or_shutting_down_broker_ids)
    replicas = ctx.replicas_on_brokers(new_ids)
    deleting = ctx.topics_to_be_deleted
    to_online = [
        r
        for r in replicas
        if ctx.replica_state(r)
        not in (_R.ReplicaDeletionSuccessful, _R.ReplicaDeletionStarted, _R.NonExistentReplica)
    ]
    replica_state_change(d, to_online, _R.OnlineReplica)
    trigger_online_partition_state_change(d)
    deleting_topics = {
        r.topic_partition.topic for r in replicas if r.topic_partition.topic in deleting
    }
    if deleting_topics:
        topic_deletion.resume_deletion_for_topics(d, deleting_topics)


def _broker_failure(d: ControllerDecision, dead: Sequence[int]) -> None:
    """Kafka ``onReplicasBecomeOffline``: the partition state machine's part (new
    leaders), then the replica state machine's (ISRs shrink)."""
    _offline_leaders(d, dead)
    _offline_replicas(d, dead)


def _remove_live(d: ControllerDecision, dead: Iterable[int]) -> None:
    ctx = d.context
    for broker in dead:
        ctx.live_brokers.pop(broker, None)
        ctx.shutting_down_broker_ids.discard(broker)
        ctx.replicas_on_offline_dirs.pop(broker, None)


def _offline_leaders(d: ControllerDecision, dead: Sequence[int]) -> None:
    """``dead`` leave the live set; partitions without a live leader go
    OfflinePartition, then every New or Offline partition gets a leader elected."""
    _remove_live(d, dead)
    partition_state_change(d, d.context.partitions_with_offline_leader(), _P.OfflinePartition)
    trigger_online_partition_state_change(d)
    # Every live broker must learn of the dead ones even if no partition changed.
    d.batch.add_update_metadata_to_all_live()


def _offline_replicas(d: ControllerDecision, dead: Sequence[int]) -> None:
    """``dead``'s replicas go OfflineReplica (they leave the ISRs, LeaderAndIsr to the
    other replicas); replica deletions waiting on them fail."""
    _remove_live(d, dead)
    ctx = d.context
    replicas = ctx.replicas_on_brokers(dead)
    deleting = ctx.topics_to_be_deleted
    for_deletion = [r for r in replicas if r.topic_partition.topic in deleting]
    not_for_deletion = [r for r in replicas if r.topic_partition.topic not in deleting]
    replica_state_change(d, not_for_deletion, _R.OfflineReplica)
    topic_deletion.fail_replica_deletion(d, for_deletion)
    d.batch.add_update_metadata_to_all_live()
