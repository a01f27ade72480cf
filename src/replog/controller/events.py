"""The controller's events (Kafka ``ControllerEvent`` subclasses in ``KafkaController``).

ZooKeeper watches and the request handlers only put one of these on the controller's
single queue (Kafka's ``BrokerChangeHandler`` just does ``eventManager.put(BrokerChange)``);
the one controller task takes them in order and calls ``process`` logic for each.
Events carry no ZooKeeper data: the task reads what it needs when it processes the
event, so a burst of watches costs one read. Events are immutable; the optional
``callback`` of a request-driven event is how the answer goes back to the handler
(the IO layer hands it a future's ``set_result``), and it is ignored by equality.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Startup:
    """Kafka ``Startup`` -> ``processStartup``: register watches, try to become controller."""


@dataclass(frozen=True, slots=True)
class ControllerChange:
    """Kafka ``ControllerChange`` -> ``processControllerChange``: ``/controller`` changed
    (created or data changed); resign if another broker now holds it."""


@dataclass(frozen=True, slots=True)
class Reelect:
    """Kafka ``Reelect`` -> ``processReelect``: ``/controller`` was deleted; resign if we
    held it, then try to become controller."""


@dataclass(frozen=True, slots=True)
class Expire:
    """Kafka ``Expire`` -> ``processExpire``: the ZooKeeper session expired; resign at
    once (``RegisterBrokerAndReelect`` follows on the new session)."""


@dataclass(frozen=True, slots=True)
class RegisterBrokerAndReelect:
    """Kafka ``RegisterBrokerAndReelect``: after a new session, register this broker
    again and run the controller election."""


@dataclass(frozen=True, slots=True)
class BrokerChange:
    """Kafka ``BrokerChange`` -> ``processBrokerChange``: children of ``/brokers/ids``
    changed. Decision: ``decisions.on_broker_change``."""


@dataclass(frozen=True, slots=True)
class TopicChange:
    """Kafka ``TopicChange`` -> ``processTopicChange``: children of ``/brokers/topics``
    changed. Decision: ``decisions.on_new_topics`` for topics not yet known."""


@dataclass(frozen=True, slots=True)
class TopicDeletion:
    """Kafka ``TopicDeletion`` -> ``processTopicDeletion``: children of
    ``/admin/delete_topics`` changed. Decision: ``decisions.on_topic_deletion``."""


@dataclass(frozen=True, slots=True)
class TopicDeletionStopReplicaResponseReceived:
    """Kafka ``TopicDeletionStopReplicaResponseReceived``: a broker answered a
    StopReplica that deleted partitions. Decision: ``decisions.on_stop_replica_response``."""

    replica_id: int
    error_code: int
    partition_errors: Mapping[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class IsrChangeNotification:
    """Kafka ``IsrChangeNotification`` -> ``processIsrChangeNotification``: a leader
    wrote ``/isr_change_notification/isr_change_N``. Decision: ``decisions.on_isr_change``."""


@dataclass(frozen=True, slots=True)
class LogDirEventNotification:
    """Kafka ``LogDirEventNotification`` -> ``processLogDirEventNotification``: a broker
    wrote ``/log_dir_event_notification/log_dir_event_N`` (a log dir of it failed).
    Decision: ``decisions.on_broker_log_dir_failure``."""


@dataclass(frozen=True, slots=True)
class LeaderAndIsrResponseReceived:
    """Kafka ``LeaderAndIsrResponseReceived``: ``broker_id`` answered a LeaderAndIsr;
    ``offline`` are the partitions it answered KAFKA_STORAGE_ERROR for (in a failed log
    dir), ``online`` those it applied; ``broker_epoch`` is the incarnation the request was
    sent to. Decision: ``decisions.on_leader_and_isr_response``."""

    broker_id: int
    broker_epoch: int
    offline: frozenset[TopicPartition]
    online: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class ControlledShutdown:
    """Kafka ``ControlledShutdown`` -> ``processControlledShutdown``: a broker asked to
    shut down. Decision: ``decisions.on_controlled_shutdown``; its result goes to
    ``callback``."""

    broker_id: int
    broker_epoch: int
    callback: Callable[[Any], None] | None = field(default=None, compare=False, repr=False)


class ElectionTrigger(enum.Enum):
    """Kafka ``ElectionTrigger``: who asked for a replica leader election."""

    ADMIN_CLIENT = "admin client"
    """An ElectLeaders request; the answer goes to the event's callback."""
    ZK = "zookeeper"
    """``/admin/preferred_replica_election`` was written; the znode is deleted after."""
    AUTO = "auto rebalance"


@dataclass(frozen=True, slots=True)
class ReplicaLeaderElection:
    """Kafka ``ReplicaLeaderElection`` -> ``processReplicaLeaderElection``: preferred (0)
    or unclean (1) election (KIP-460). Decision: ``decisions.on_replica_election``; the
    per-partition outcomes go to ``callback``."""

    partitions: frozenset[TopicPartition] | None = None
    """None: the partitions listed in ``/admin/preferred_replica_election`` (ZK trigger)."""
    election_type: int = 0
    trigger: ElectionTrigger = ElectionTrigger.ADMIN_CLIENT
    callback: Callable[[Any], None] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class AutoPreferredReplicaLeaderElection:
    """Kafka ``AutoPreferredReplicaLeaderElection``: the periodic leader-imbalance check
    (``auto.leader.rebalance.enable``). Decision: ``decisions.on_auto_leader_rebalance``."""


@dataclass(frozen=True, slots=True)
class TopicUncleanLeaderElectionEnable:
    """Kafka ``TopicUncleanLeaderElectionEnable``: a topic's dynamic config changed (the
    broker's config manager saw its change notification). The controller re-reads the
    topic's ``unclean.leader.election.enable``; when now allowed, its leaderless
    partitions get a leader. Decision: ``decisions.on_unclean_leader_election_enable``."""

    topic: str


@dataclass(frozen=True, slots=True)
class UncleanLeaderElectionEnable:
    """Kafka ``UncleanLeaderElectionEnable``: this broker's default
    ``unclean.leader.election.enable`` changed (a dynamic broker config). Decision:
    ``decisions.on_unclean_leader_election_enable`` for every topic, when now allowed."""


@dataclass(frozen=True, slots=True)
class PartitionModifications:
    """Kafka ``PartitionModifications``: ``/brokers/topics/<topic>`` changed (partitions
    added). Decision: ``partition_modifications.on_partition_modifications``."""

    topic: str


@dataclass(frozen=True, slots=True)
class ZkPartitionReassignment:
    """Kafka ``ZkPartitionReassignment``: ``/admin/reassign_partitions`` was created.
    Decision: ``reassignment.on_partition_reassignment``."""


@dataclass(frozen=True, slots=True)
class ApiPartitionReassignment:
    """Kafka ``ApiPartitionReassignment`` (AlterPartitionReassignments, KIP-455): target
    replicas per partition, None to cancel. Decision:
    ``reassignment.on_partition_reassignment``; the outcomes go to ``callback`` (None:
    not the controller)."""

    reassignments: Mapping[TopicPartition, tuple[int, ...] | None]
    callback: Callable[[Any], None] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class ListPartitionReassignments:
    """Kafka ``ListPartitionReassignments``: the ongoing reassignments (of
    ``partitions``, or all) go to ``callback`` (None: not the controller)."""

    partitions: frozenset[TopicPartition] | None = None
    callback: Callable[[Any], None] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class ShutdownEventThread:
    """Kafka ``ShutdownEventThread``: stop the controller task after this event."""


ControllerEvent = (
    Startup
    | ControllerChange
    | Reelect
    | Expire
    | RegisterBrokerAndReelect
    | BrokerChange
    | TopicChange
    | TopicDeletion
    | TopicDeletionStopReplicaResponseReceived
    | IsrChangeNotification
    | ControlledShutdown
    | ReplicaLeaderElection
    | AutoPreferredReplicaLeaderElection
    | TopicUncleanLeaderElectionEnable
    | UncleanLeaderElectionEnable
    | PartitionModifications
    | ZkPartitionReassignment
    | ApiPartitionReassignment
    | ListPartitionReassignments
    | ShutdownEventThread
)
