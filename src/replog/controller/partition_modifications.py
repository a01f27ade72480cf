"""Partitions added to an existing topic (Kafka ``processPartitionModifications``).

CreatePartitions (or a tool) rewrites ``/brokers/topics/<t>`` with more partitions; the
controller's data watch on that znode enqueues ``PartitionModifications(topic)`` and the
IO layer reads the topic's assignment. ``on_partition_modifications`` is the pure
decision: partitions the context does not know yet go through Kafka's
``onNewPartitionCreation`` (NewPartition -> OnlinePartition with the first live
replica as leader, replicas NewReplica -> OnlineReplica), so they get leaders,
LeaderAndIsr and UpdateMetadata at once. Partitions already known are left alone (a
change of their replicas is a reassignment, which has its own path); a topic queued for
deletion gets no new partitions (Kafka skips them the same way).

No IO, no clock, no randomness.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from replog.controller.context import ControllerContext, PartitionReplica, TopicPartition
from replog.controller.effects import ControllerDecision
from replog.controller.state_machines import partition_state_change, replica_state_change
from replog.controller.states import PartitionState, ReplicaState

log = logging.getLogger("replog.controller")


def new_partitions(
    context: ControllerContext, topic: str, assignment: Mapping[int, Sequence[int]]
) -> dict[int, tuple[int, ...]]:
    """The partitions of ``assignment`` (the topic znode as read) the context lacks."""
    known = context.partition_assignments.get(topic, {})
    return {p: tuple(r) for p, r in sorted(assignment.items()) if p not in known}


def on_partition_modifications(
    context: ControllerContext, topic: str, assignment: Mapping[int, Sequence[int]]
) -> ControllerDecision:
    """Kafka ``processPartitionModifications`` + ``onNewPartitionCreation`` for the new
    partitions of ``topic``; ``assignment`` is every partition of its znode."""
    d = ControllerDecision(context)
    ctx = d.context
    if topic not in ctx.all_topics:
        return d
    added = new_partitions(ctx, topic, assignment)
    if not added:
        return d
    if ctx.is_topic_queued_for_deletion(topic):
        log.warning(
            "controller: skipping new partitions %s of topic %s: it is being deleted",
            sorted(added),
            topic,
        )
        return d
    log.info("controller: new partitions of topic %s: %s", topic, added)
    ctx.partition_assignments[topic] = {**ctx.partition_assignments[topic], **added}
    partitions = [TopicPartition(topic, p) for p in added]
    replicas = [PartitionReplica(tp, r) for tp in partitions for r in added[tp.partition]]
    partition_state_change(d, partitions, PartitionState.NewPartition)
    replica_state_change(d, replicas, ReplicaState.NewReplica)
    partition_state_change(d, partitions, PartitionState.OnlinePartition)
    replica_state_change(d, replicas, ReplicaState.OnlineReplica)
    return d
