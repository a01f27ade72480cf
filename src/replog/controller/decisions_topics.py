"""The controller's decisions on topics: creation (Kafka ``onNewPartitionCreation``),
deletion (``processTopicDeletion``) and the StopReplica answers that complete it.

Pure: see ``replog.controller.decisions``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence

from kio.schema.errors import ErrorCode

from replog.controller import topic_deletion
from replog.controller.context import (
    ControllerContext,
    PartitionReplica,
    TopicPartition,
)
from replog.controller.effects import ControllerDecision
from replog.controller.state_machines import (
    partition_state_change,
    replica_state_change,
)
from replog.controller.states import PartitionState, ReplicaState

_P = PartitionState
_R = ReplicaState


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
