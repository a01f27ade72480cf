"""Topic deletion (Kafka ``TopicDeletionManager``), on a ``ControllerDecision``.

A topic queued for deletion (``/admin/delete_topics/<t>``) is deleted replica by
replica: every live replica gets StopReplica(delete_partition=true) and moves to
``ReplicaDeletionStarted``; a StopReplica response moves it to
``ReplicaDeletionSuccessful`` (or ``ReplicaDeletionIneligible`` on error). A replica
on a dead broker cannot be deleted: it goes to ``ReplicaDeletionIneligible`` and the
topic is halted (``topics_ineligible_for_deletion``) until that broker comes back
(``resume_deletion_for_topics`` from broker startup). When every replica is
``ReplicaDeletionSuccessful`` the topic's znodes are deleted and it leaves the context.

Concurrency: runs inside one decision on the controller task.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from replog.controller.context import PartitionReplica
from replog.controller.effects import ControllerDecision
from replog.controller.state_machines import partition_state_change, replica_state_change
from replog.controller.states import (
    REPLICA_VALID_PREVIOUS_STATES,
    PartitionState,
    ReplicaState,
)

log = logging.getLogger("replog.controller.topic_deletion")

_R = ReplicaState


def enqueue_topics_for_deletion(d: ControllerDecision, topics: Iterable[str]) -> None:
    ctx = d.context
    queued = {t for t in topics if t in ctx.all_topics}
    unknown = set(topics) - queued
    if unknown:
        log.info("ignoring deletion of unknown topics %s", sorted(unknown))
    ctx.topics_to_be_deleted |= queued
    # Kafka processTopicDeletion: a topic with a partition being reassigned waits for it.
    reassigning = {tp[0] for tp in ctx.partition_reassignments} & queued
    mark_topic_ineligible_for_deletion(d, reassigning, "partition reassignment in progress")
    resume_deletions(d)


def on_reassignment_done(d: ControllerDecision, topic: str) -> None:
    """A partition of ``topic`` finished (or cancelled) its reassignment: a deletion that
    waited for the topic's reassignments may start (Kafka ``resumeDeletionForTopics``)."""
    ctx = d.context
    if topic in ctx.topics_to_be_deleted and not any(
        tp[0] == topic for tp in ctx.partition_reassignments
    ):
        resume_deletion_for_topics(d, [topic])


def mark_topic_ineligible_for_deletion(
    d: ControllerDecision, topics: Iterable[str], why: str
) -> None:
    ctx = d.context
    halted = set(topics) & ctx.topics_to_be_deleted
    if halted - ctx.topics_ineligible_for_deletion:
        log.info("halted deletion of topics %s: %s", sorted(halted), why)
    ctx.topics_ineligible_for_deletion |= halted


def resume_deletion_for_topics(d: ControllerDecision, topics: Iterable[str]) -> None:
    """Kafka ``resumeDeletionForTopics``: a reason to halt went away (broker is back)."""
    ctx = d.context
    ctx.topics_ineligible_for_deletion -= set(topics) & ctx.topics_to_be_deleted
    resume_deletions(d)


def fail_replica_deletion(d: ControllerDecision, replicas: Iterable[PartitionReplica]) -> None:
    """Replicas that cannot be deleted now (error response, or their broker died)."""
    ctx = d.context
    failing = [r for r in replicas if r.topic_partition.topic in ctx.topics_to_be_deleted]
    if not failing:
        return
    _move_to_ineligible(d, failing)
    mark_topic_ineligible_for_deletion(
        d, {r.topic_partition.topic for r in failing}, "replica deletion failure"
    )
    resume_deletions(d)


def complete_replica_deletion(d: ControllerDecision, replicas: Iterable[PartitionReplica]) -> None:
    """StopReplica(delete) succeeded for ``replicas``; stale answers are ignored."""
    ctx = d.context
    done = [
        r
        for r in replicas
        if r.topic_partition.topic in ctx.topics_to_be_deleted
        and ctx.replica_state(r) is _R.ReplicaDeletionStarted
    ]
    replica_state_change(d, done, _R.ReplicaDeletionSuccessful)
    resume_deletions(d)


def resume_deletions(d: ControllerDecision) -> None:
    """Kafka ``resumeDeletions``: finish, retry or (re)start each queued topic."""
    ctx = d.context
    retry: list[str] = []
    start: list[str] = []
    for topic in sorted(ctx.topics_to_be_deleted):
        replicas = ctx.replicas_for_topic(topic)
        states = [ctx.replica_state(r) for r in replicas]
        if all(s is _R.ReplicaDeletionSuccessful for s in states):
            _complete_delete_topic(d, topic)
            continue
        in_progress = any(s is _R.ReplicaDeletionStarted for s in states)
        if not in_progress and any(s is _R.ReplicaDeletionIneligible for s in states):
            retry.append(topic)
        if not in_progress and topic not in ctx.topics_ineligible_for_deletion:
            start.append(topic)
    for topic in retry:
        replica_state_change(
            d, ctx.replicas_in_state(topic, _R.ReplicaDeletionIneligible), _R.OfflineReplica
        )
    if start:
        _start_topic_deletion(d, start)


def _start_topic_deletion(d: ControllerDecision, topics: list[str]) -> None:
    """Kafka ``onTopicDeletion`` + ``onPartitionDeletion``."""
    ctx = d.context
    unseen = [t for t in topics if t not in ctx.topics_with_deletion_started]
    for topic in unseen:
        partitions = ctx.partitions_for_topic(topic)
        partition_state_change(d, partitions, PartitionState.OfflinePartition)
        partition_state_change(d, partitions, PartitionState.NonExistentPartition)
        ctx.topics_with_deletion_started.add(topic)
    # Brokers learn the topic is going away (leader LEADER_DURING_DELETE in UpdateMetadata).
    d.batch.add_update_metadata_to_all_live(
        [tp for t in topics for tp in ctx.partitions_for_topic(t)]
    )
    dead: list[PartitionReplica] = []
    retry: list[PartitionReplica] = []
    halted: set[str] = set()
    for topic in topics:
        for replica in ctx.replicas_for_topic(topic):
            state = ctx.replica_state(replica)
            if state is _R.ReplicaDeletionSuccessful:
                continue
            if ctx.is_replica_online(replica.replica):
                retry.append(replica)
            else:
                dead.append(replica)
                halted.add(topic)
    _move_to_ineligible(d, dead)
    replica_state_change(d, retry, _R.OfflineReplica)
    replica_state_change(d, retry, _R.ReplicaDeletionStarted)
    if halted:
        mark_topic_ineligible_for_deletion(d, halted, "offline replicas")


def _move_to_ineligible(d: ControllerDecision, replicas: list[PartitionReplica]) -> None:
    """To ``ReplicaDeletionIneligible`` by a legal path: New/Online replicas go through
    ``OfflineReplica`` first; already ineligible or deleted replicas stay where they are."""
    ctx = d.context
    allowed = REPLICA_VALID_PREVIOUS_STATES[_R.ReplicaDeletionIneligible]
    via_offline = [r for r in replicas if ctx.replica_state(r) in (_R.NewReplica, _R.OnlineReplica)]
    replica_state_change(d, via_offline, _R.OfflineReplica)
    replica_state_change(
        d, [r for r in replicas if ctx.replica_state(r) in allowed], _R.ReplicaDeletionIneligible
    )


def _complete_delete_topic(d: ControllerDecision, topic: str) -> None:
    ctx = d.context
    replica_state_change(
        d, ctx.replicas_in_state(topic, _R.ReplicaDeletionSuccessful), _R.NonExistentReplica
    )
    d.delete_topic_znodes(topic)
    ctx.remove_topic(topic)
    d.completed_topic_deletions.append(topic)
    log.info("deletion of topic %s completed", topic)
