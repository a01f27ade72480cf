"""The controller's decisions on partition states read back from ZooKeeper and on
replicas going offline while their broker lives: ``refreshed`` (states re-read before a
decision or its retry), ISR change notifications (Kafka ``processIsrChangeNotification``)
and failed log dirs (``onBrokerLogDirFailure``, ``onReplicasBecomeOffline``).

Pure: see ``replog.controller.decisions``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

from replog.controller import topic_deletion
from replog.controller.context import (
    ControllerContext,
    LeaderIsrAndControllerEpoch,
    PartitionReplica,
    TopicPartition,
)
from replog.controller.effects import ControllerDecision
from replog.controller.state_machines import (
    partition_state_change,
    replica_state_change,
    trigger_online_partition_state_change,
)
from replog.controller.states import REPLICA_VALID_PREVIOUS_STATES, PartitionState, ReplicaState
from replog.zk.fencing import check_controller_epoch

log = logging.getLogger("replog.controller")

_P = PartitionState
_R = ReplicaState


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
