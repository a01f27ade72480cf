"""The controller's decisions, one pure function per event (Kafka ``KafkaController``'s
``onControllerFailover``, ``onBrokerStartup``, ``onBrokerFailure``,
``onNewPartitionCreation``, topic deletion, ISR change and controlled shutdown).

Each function takes the current ``ControllerContext`` (not mutated) and the event's data
already read from ZooKeeper, and returns a ``ControllerDecision``: the new context, the
ZooKeeper writes to make in one batch, and the requests to send per broker. See
``replog.controller.effects`` for how the IO layer applies a decision.

No IO, no clock, no randomness: the same context and inputs give the same decision.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from kio.schema.errors import ErrorCode

from replog.controller import topic_deletion
from replog.controller.context import (
    NO_LEADER,
    BrokerInfo,
    ControllerContext,
    LeaderIsrAndControllerEpoch,
    PartitionReplica,
    TopicPartition,
)
from replog.controller.effects import ControllerDecision
from replog.controller.state_machines import (
    ControlledShutdownElection,
    OfflineElection,
    PreferredReplicaElection,
    partition_state_change,
    replica_state_change,
    trigger_online_partition_state_change,
)
from replog.controller.states import REPLICA_VALID_PREVIOUS_STATES, PartitionState, ReplicaState
from replog.zk.fencing import UNKNOWN_BROKER_EPOCH, check_controller_epoch, is_stale_broker_epoch

log = logging.getLogger("replog.controller")

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


def refreshed(
    context: ControllerContext, states: Mapping[tuple[str, int], LeaderIsrAndControllerEpoch]
) -> ControllerContext:
    """``context`` with partition states just read from ZooKeeper.

    A state written by a newer controller proves this one was deposed (its session
    ended, another broker won ``/controller``): ``ControllerMovedError``, and the IO
    layer resigns before deciding anything on stale ground (Kafka's elections refuse
    such a state the same way).
    """
    for tp, state in states.items():
        check_controller_epoch(context.controller_epoch, state.controller_epoch, tp)
    ctx = context.copy()
    ctx.partition_leadership.update((TopicPartition(*tp), s) for tp, s in states.items())
    return ctx


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


def on_new_topics(
    context: ControllerContext,
    assignments: Mapping[str, Mapping[int, Sequence[int]]],
    topic_ids: Mapping[str, uuid.UUID] | None = None,
) -> ControllerDecision:
    """Kafka ``onNewPartitionCreation`` for topics that appeared under ``/brokers/topics``.

    Each partition goes NewPartition -> OnlinePartition with the first live assigned
    replica as leader, the live assigned replicas as ISR and leader epoch 0 (znode
    created); replicas go NewReplica -> OnlineReplica. A partition with no live replica
    stays NewPartition (reported in ``failed_elections``) until a replica's broker
    starts. ``topic_ids`` are the topics' ids (KIP-516) as the IO layer read or assigned
    them; LeaderAndIsr and UpdateMetadata carry them to the brokers.
    """
    d = ControllerDecision(context)
    ctx = d.context
    ids = topic_ids or {}
    new_partitions: list[TopicPartition] = []
    for topic in sorted(assignments):
        if topic in ctx.all_topics:
            continue
        assignment = {p: tuple(r) for p, r in assignments[topic].items()}
        ctx.add_topic(topic, assignment, ids.get(topic))
        new_partitions.extend(sorted(ctx.partitions_for_topic(topic)))
    new_replicas = [PartitionReplica(tp, r) for tp in new_partitions for r in ctx.replicas_for(tp)]
    partition_state_change(d, new_partitions, _P.NewPartition)
    replica_state_change(d, new_replicas, _R.NewReplica)
    partition_state_change(d, new_partitions, _P.OnlinePartition)
    replica_state_change(d, new_replicas, _R.OnlineReplica)
    return d


def on_topic_deletion(context: ControllerContext, topics: Iterable[str]) -> ControllerDecision:
    """Kafka ``processTopicDeletion``: ``topics`` appeared under ``/admin/delete_topics``.

    Live replicas get StopReplica(delete_partition=true); deletion of a topic with a
    replica on a dead broker waits until that broker returns. The topic's znodes are
    deleted (``DeleteTopic`` write) once every replica reported success.
    """
    d = ControllerDecision(context)
    topic_deletion.enqueue_topics_for_deletion(d, topics)
    return d


def on_stop_replica_response(
    context: ControllerContext,
    broker_id: int,
    error_code: int,
    partition_errors: Mapping[TopicPartition, int],
) -> ControllerDecision:
    """Kafka ``TopicDeletionStopReplicaResponseReceived``: a broker answered StopReplica.

    Only partitions of topics queued for deletion matter; a top-level error fails every
    partition listed.
    """
    d = ControllerDecision(context)
    ok: list[PartitionReplica] = []
    failed: list[PartitionReplica] = []
    for tp, code in partition_errors.items():
        replica = PartitionReplica(TopicPartition(tp[0], tp[1]), broker_id)
        (failed if error_code != ErrorCode.none or code != ErrorCode.none else ok).append(replica)
    if failed:
        topic_deletion.fail_replica_deletion(d, failed)
    if ok:
        topic_deletion.complete_replica_deletion(d, ok)
    return d


def on_isr_change(
    context: ControllerContext,
    fresh_states: Mapping[TopicPartition, LeaderIsrAndControllerEpoch],
) -> ControllerDecision:
    """Kafka ``processIsrChangeNotification``: leaders changed ISRs in ZooKeeper;
    ``fresh_states`` are the states just read back. The context takes the newer ones
    and every live broker gets UpdateMetadata for them. No ZooKeeper writes.
    """
    d = ControllerDecision(context)
    ctx = d.context
    changed: list[TopicPartition] = []
    for raw_tp, state in fresh_states.items():
        tp = TopicPartition(raw_tp[0], raw_tp[1])
        if tp[0] not in ctx.all_topics or tp[0] in ctx.topics_to_be_deleted:
            continue
        current = ctx.partition_leadership.get(tp)
        if (
            current is not None
            and state.leader_and_isr.zk_version < current.leader_and_isr.zk_version
        ):
            continue  # older than what we know
        ctx.partition_leadership[tp] = state
        changed.append(tp)
    if changed:
        d.batch.add_update_metadata_to_all_live(changed)
    return d


def on_broker_log_dir_failure(
    context: ControllerContext, broker_ids: Iterable[int]
) -> ControllerDecision:
    """Kafka ``onBrokerLogDirFailure``: a log dir of each of ``broker_ids`` failed (their
    log dir event notifications). Their replicas go OnlineReplica again, which sends each
    broker LeaderAndIsr for every replica it hosts: it answers KAFKA_STORAGE_ERROR for
    those in the failed dir, and ``on_leader_and_isr_response`` takes them offline.
    Replicas already known to be in a failed dir are left as they are."""
    d = ControllerDecision(context)
    ctx = d.context
    live = sorted(b for b in set(broker_ids) if b in ctx.live_brokers)
    to_online = REPLICA_VALID_PREVIOUS_STATES[_R.OnlineReplica]
    replicas = [
        r
        for r in ctx.replicas_on_brokers(live)
        if ctx.replica_state(r) in to_online and ctx.is_replica_online(r[1], r[0], True)
    ]
    replica_state_change(d, replicas, _R.OnlineReplica)
    return d


def on_leader_and_isr_response(
    context: ControllerContext,
    broker_id: int,
    broker_epoch: int,
    offline: Iterable[TopicPartition],
    online: Iterable[TopicPartition],
) -> tuple[ControllerDecision, list[PartitionReplica]]:
    """Kafka ``processLeaderAndIsrResponseReceived``: ``broker_id`` answered a
    LeaderAndIsr, KAFKA_STORAGE_ERROR for the ``offline`` partitions (in a failed log dir)
    and no error for the ``online`` ones. Replicas newly known to be offline are handled
    as Kafka's ``onReplicasBecomeOffline``: partitions they led get a leader elected from
    the rest of the ISR, and they leave their ISRs. Returns the decision and those
    replicas (a retry after lost version races handles them again). An answer from an
    earlier incarnation of the broker (``broker_epoch``, KIP-380) says nothing about the
    current one and is ignored."""
    d = ControllerDecision(context)
    ctx = d.context
    if broker_id not in ctx.live_brokers or ctx.broker_epoch(broker_id) != broker_epoch:
        return d, []
    known = ctx.partition_assignments
    previous = ctx.replicas_on_offline_dirs.get(broker_id, frozenset())
    current = (previous - set(online)) | {
        TopicPartition(*tp) for tp in offline if tp[1] in known.get(tp[0], {})
    }
    if current:
        ctx.replicas_on_offline_dirs[broker_id] = frozenset(current)
    else:
        ctx.replicas_on_offline_dirs.pop(broker_id, None)
    new = [PartitionReplica(tp, broker_id) for tp in sorted(current - previous)]
    if new:
        log.warning(
            "broker %d: %d replicas are in a failed log dir: %s",
            broker_id,
            len(new),
            [f"{r[0][0]}-{r[0][1]}" for r in new[:20]],
        )
        replicas_become_offline(d, new)
    return d, new


def redo_replicas_offline(
    context: ControllerContext, stale: set[TopicPartition], replicas: Sequence[PartitionReplica]
) -> ControllerDecision:
    """The retry of ``on_leader_and_isr_response`` for partitions whose writes lost a
    version race (their states re-read into ``context``)."""
    d = ControllerDecision(context)
    replicas_become_offline(d, [r for r in replicas if r[0] in stale])
    return d


def replicas_become_offline(d: ControllerDecision, replicas: Sequence[PartitionReplica]) -> None:
    """Kafka ``onReplicasBecomeOffline`` for replicas of live brokers (in failed log
    dirs): partitions without an online leader go OfflinePartition and get one elected,
    then the replicas go OfflineReplica (they leave their ISRs, StopReplica without
    delete to them); replica deletions waiting on them fail."""
    ctx = d.context
    deleting = ctx.topics_to_be_deleted
    to_offline = REPLICA_VALID_PREVIOUS_STATES[_R.OfflineReplica]
    for_deletion = [r for r in replicas if r[0][0] in deleting]
    not_for_deletion = [
        r
        for r in replicas
        if r[0][0] not in deleting
        and r[0][0] in ctx.all_topics
        and ctx.replica_state(r) in to_offline
    ]
    partition_state_change(d, ctx.partitions_with_offline_leader(), _P.OfflinePartition)
    trigger_online_partition_state_change(d)
    replica_state_change(d, not_for_deletion, _R.OfflineReplica)
    topic_deletion.fail_replica_deletion(d, for_deletion)
    d.batch.add_update_metadata_to_all_live()


@dataclass(frozen=True, slots=True)
class ControlledShutdownResult:
    """Answer to ControlledShutdown: ``remaining`` partitions still led by the broker."""

    error_code: int
    remaining: tuple[TopicPartition, ...]


def on_controlled_shutdown(
    context: ControllerContext, broker_id: int, broker_epoch: int
) -> tuple[ControllerDecision, ControlledShutdownResult]:
    """Kafka ``doControlledShutdown``: move leadership and ISR membership off a broker
    that asked to shut down. Partitions with a single replica are left alone.
    """
    d = ControllerDecision(context)
    ctx = d.context
    if broker_id not in ctx.live_brokers:
        return d, ControlledShutdownResult(ErrorCode.broker_not_available, ())
    if is_stale_broker_epoch(broker_epoch, ctx.broker_epoch(broker_id)):
        return d, ControlledShutdownResult(ErrorCode.stale_broker_epoch, ())
    ctx.shutting_down_broker_ids.add(broker_id)
    led: list[TopicPartition] = []
    followed: list[PartitionReplica] = []
    for replica in ctx.replicas_on_brokers((broker_id,)):
        tp = replica.topic_partition
        state = ctx.partition_leadership.get(tp)
        if tp[0] in ctx.topics_to_be_deleted or state is None or len(ctx.replicas_for(tp)) <= 1:
            continue
        if state.leader_and_isr.leader == broker_id:
            led.append(tp)
        else:
            followed.append(replica)
    partition_state_change(d, led, _P.OnlinePartition, ControlledShutdownElection())
    # Followers stop fetching (StopReplica without delete) and leave the ISR.
    replica_state_change(d, followed, _R.OfflineReplica)
    remaining = tuple(
        tp
        for tp in led
        if (state := ctx.partition_leadership.get(tp)) is not None
        and state.leader_and_isr.leader == broker_id
    )
    return d, ControlledShutdownResult(ErrorCode.none, remaining)


def on_preferred_replica_election(
    context: ControllerContext, partitions: Iterable[TopicPartition]
) -> ControllerDecision:
    """Kafka ``onReplicaElection`` with the preferred strategy: lead from the first
    assigned replica where it is live and in sync and not already leading (the
    decision of ``on_replica_election``, without the per-partition answers)."""
    return on_replica_election(context, partitions, PREFERRED_ELECTION)[0]


def on_unclean_leader_election_enable(
    context: ControllerContext, topics: Iterable[str] | None = None
) -> ControllerDecision:
    """Kafka ``processTopicUncleanLeaderElectionEnable`` (``topics``) and
    ``processUncleanLeaderElectionEnable`` (None: every topic): unclean election was just
    allowed, so the New and Offline partitions of those topics are elected again, each
    unclean where its topic now allows it (``context`` already holds the new setting)."""
    d = ControllerDecision(context)
    ctx = d.context
    wanted = None if topics is None else set(topics)
    candidates = [
        tp
        for tp, state in sorted(ctx.partition_states.items())
        if state in (_P.NewPartition, _P.OfflinePartition)
        and tp[0] not in ctx.topics_to_be_deleted
        and (wanted is None or tp[0] in wanted)
    ]
    partition_state_change(d, candidates, _P.OnlinePartition, OfflineElection())
    return d


# --- replica leader election (KIP-460) ------------------------------------------------

# ElectLeaders election_type (Kafka ``ElectionType``).
PREFERRED_ELECTION = 0
UNCLEAN_ELECTION = 1


@dataclass(frozen=True, slots=True)
class ElectionOutcome:
    """One partition's answer to a replica leader election: ``error_code`` NONE and the
    ``leader`` elected, or an error (Kafka's ``Either[ApiError, Int]``)."""

    error_code: int
    leader: int = -1
    message: str | None = None


def on_replica_election(
    context: ControllerContext, partitions: Iterable[TopicPartition], election_type: int
) -> tuple[ControllerDecision, dict[TopicPartition, ElectionOutcome]]:
    """Kafka ``processReplicaLeaderElection`` + ``onReplicaElection``.

    Preferred (0): partitions whose first assigned replica is not leading get it as
    leader when it is live and in the ISR (else PREFERRED_LEADER_NOT_AVAILABLE).
    Unclean (1): partitions without a live leader get the first live ISR member, or
    else the first live assigned replica (else ELIGIBLE_LEADERS_NOT_AVAILABLE).
    A partition that already has the leader the election would give is
    ELECTION_NOT_NEEDED; unknown partitions UNKNOWN_TOPIC_OR_PARTITION; partitions of
    topics being deleted INVALID_TOPIC_EXCEPTION. Nothing else changes.
    """
    if election_type not in (PREFERRED_ELECTION, UNCLEAN_ELECTION):
        raise ValueError(f"unknown election type {election_type}")
    d = ControllerDecision(context)
    ctx = d.context
    outcomes: dict[TopicPartition, ElectionOutcome] = {}
    electable: list[TopicPartition] = []
    live = ctx.live_broker_ids
    for raw_tp in sorted(set(partitions)):
        tp = TopicPartition(raw_tp[0], raw_tp[1])
        state = ctx.partition_leadership.get(tp)
        replicas = ctx.replicas_for(tp) if tp[0] in ctx.partition_assignments else ()
        if not replicas:
            outcomes[tp] = ElectionOutcome(
                ErrorCode.unknown_topic_or_partition, message="The partition does not exist."
            )
        elif tp[0] in ctx.topics_to_be_deleted:
            outcomes[tp] = ElectionOutcome(
                ErrorCode.invalid_topic_exception, message="The topic is being deleted"
            )
        elif election_type == PREFERRED_ELECTION:
            if state is not None and state.leader_and_isr.leader == replicas[0]:
                outcomes[tp] = ElectionOutcome(ErrorCode.election_not_needed)
            else:
                electable.append(tp)
        else:
            leader = state.leader_and_isr.leader if state is not None else NO_LEADER
            if leader != NO_LEADER and leader in live:
                outcomes[tp] = ElectionOutcome(ErrorCode.election_not_needed)
            else:
                electable.append(tp)
    if election_type == PREFERRED_ELECTION:
        # A partition not yet initialized (New) has no ISR to elect from.
        online = [tp for tp in electable if ctx.partition_state(tp) is not _P.NewPartition]
        failed = set(electable) - set(online)
        failed |= set(
            partition_state_change(d, online, _P.OnlinePartition, PreferredReplicaElection())
        )
        error = ErrorCode.preferred_leader_not_available
    else:
        failed = set(
            partition_state_change(
                d, electable, _P.OnlinePartition, OfflineElection(allow_unclean=True)
            )
        )
        error = ErrorCode.eligible_leaders_not_available
    for tp in electable:
        if tp in failed:
            outcomes[tp] = ElectionOutcome(
                error, message=f"Failed to elect leader for partition {tp[0]}-{tp[1]}"
            )
        else:
            outcomes[tp] = ElectionOutcome(
                ErrorCode.none, ctx.partition_leadership[tp].leader_and_isr.leader
            )
    return d, outcomes


def not_led_by_preferred_replica(context: ControllerContext) -> list[TopicPartition]:
    """Partitions (of topics not being deleted) whose first assigned replica is not the
    leader: what the IO layer re-reads from ZooKeeper before the auto rebalance, since
    the ISRs it knows may lag the leaders' (Kafka reads them before electing too)."""
    ctx = context
    return sorted(
        tp
        for tp, state in ctx.partition_leadership.items()
        if tp[0] not in ctx.topics_to_be_deleted
        and (replicas := ctx.replicas_for(tp))
        and state.leader_and_isr.leader != replicas[0]
    )


def auto_rebalance_candidates(
    context: ControllerContext, imbalance_percentage: int
) -> list[TopicPartition]:
    """Kafka ``checkAndTriggerAutoLeaderRebalance``: for every broker that is the
    preferred replica of some partitions, the share of those it does not lead; where
    that share is over ``leader.imbalance.per.broker.percentage``, its partitions whose
    preferred replica could lead now (live and in the ISR). Topics being deleted and
    partitions being reassigned are left alone (the reassignment itself moves their
    leadership to a target replica)."""
    ctx = context
    by_preferred: dict[int, list[TopicPartition]] = {}
    for tp in ctx.all_partitions():
        replicas = ctx.replicas_for(tp)
        if (
            replicas
            and tp[0] not in ctx.topics_to_be_deleted
            and tp not in ctx.partition_reassignments
        ):
            by_preferred.setdefault(replicas[0], []).append(tp)
    live = ctx.live_broker_ids
    candidates: list[TopicPartition] = []
    for preferred, tps in sorted(by_preferred.items()):
        not_led = [
            tp
            for tp in tps
            if (state := ctx.partition_leadership.get(tp)) is not None
            and state.leader_and_isr.leader != preferred
        ]
        if len(not_led) / len(tps) <= imbalance_percentage / 100:
            continue
        for tp in not_led:
            lai = ctx.partition_leadership[tp].leader_and_isr
            if preferred in live and preferred in lai.isr:
                candidates.append(tp)
    return sorted(candidates)


def on_auto_leader_rebalance(
    context: ControllerContext, imbalance_percentage: int
) -> ControllerDecision:
    """Kafka ``processAutoPreferredReplicaLeaderElection``: a preferred replica
    election for ``auto_rebalance_candidates``."""
    candidates = auto_rebalance_candidates(context, imbalance_percentage)
    return on_replica_election(context, candidates, PREFERRED_ELECTION)[0]
