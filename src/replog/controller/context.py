"""The controller's in-memory view of the cluster (Kafka ``ControllerContext``).

Filled from ZooKeeper on controller failover by the IO layer and kept current by the
decisions in ``replog.controller.decisions``. ZooKeeper stays the source of truth: the
context is a cache that every decision reads and that a successful batch of ZooKeeper
writes updates.

Concurrency: owned by the single controller task. Decisions never mutate the context
they are given; they work on ``copy()`` and hand the new context back, which the
controller installs only after the decision's ZooKeeper writes succeeded. Values stored
in the maps are immutable (tuples, frozen dataclasses, Enums), so a shallow copy of
each map is a full snapshot.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from replog.controller.states import PartitionState, ReplicaState
from replog.zk.data import (
    LEADER_DURING_DELETE,
    NO_LEADER,
    BrokerInfo,
    EndPoint,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    ReplicaAssignment,
)
from replog.zk.fencing import UNKNOWN_BROKER_EPOCH

__all__ = [
    "EPOCH_DURING_DELETE",
    "LEADER_DURING_DELETE",
    "NO_EPOCH",
    "NO_LEADER",
    "BrokerInfo",
    "ControllerContext",
    "EndPoint",
    "LeaderAndIsr",
    "LeaderIsrAndControllerEpoch",
    "PartitionReplica",
    "ReplicaAssignment",
    "TopicPartition",
]

NO_EPOCH = -1
EPOCH_DURING_DELETE = -2  # Kafka LeaderAndIsr.EpochDuringDelete: StopReplica of a deleted topic


class TopicPartition(NamedTuple):
    """A partition; equal to and interchangeable with a plain ``(topic, partition)`` tuple."""

    topic: str
    partition: int


class PartitionReplica(NamedTuple):
    """One replica of one partition (Kafka ``PartitionAndReplica``)."""

    topic_partition: TopicPartition
    replica: int


# Build the named tuples without the Python-level ``__new__`` frame (hot loops).
_new_tp = functools.partial(tuple.__new__, TopicPartition)
_new_replica = functools.partial(tuple.__new__, PartitionReplica)


@dataclass(slots=True)
class ControllerContext:
    """Everything the controller knows; see the module docstring for ownership rules.

    ``partition_assignments`` maps topic -> partition -> replicas (first = preferred). The
    inner dicts are never mutated in place: replace a topic's whole dict, so ``copy()``
    can stay shallow.
    """

    controller_id: int
    controller_epoch: int = 0
    controller_epoch_zk_version: int = 0
    live_brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    shutting_down_broker_ids: set[int] = field(default_factory=set)
    all_topics: set[str] = field(default_factory=set)
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    partition_assignments: dict[str, dict[int, tuple[int, ...]]] = field(default_factory=dict)
    partition_leadership: dict[TopicPartition, LeaderIsrAndControllerEpoch] = field(
        default_factory=dict
    )
    partition_states: dict[TopicPartition, PartitionState] = field(default_factory=dict)
    replica_states: dict[PartitionReplica, ReplicaState] = field(default_factory=dict)
    topics_to_be_deleted: set[str] = field(default_factory=set)
    topics_with_deletion_started: set[str] = field(default_factory=set)
    topics_ineligible_for_deletion: set[str] = field(default_factory=set)
    unclean_leader_election_enable: dict[str, bool] = field(default_factory=dict)
    """Per-topic ``unclean.leader.election.enable`` overrides."""
    default_unclean_leader_election_enable: bool = False
    """The broker-level ``unclean.leader.election.enable``."""
    partition_state_mzxid: dict[TopicPartition, int] = field(default_factory=dict)
    """The zxid of each state znode's last write, as read at controller failover: a
    broker registered after it (a newer broker epoch) restarted since."""
    inter_broker_listener: str = "PLAINTEXT"
    """``inter.broker.listener.name``: where LeaderAndIsr tells followers to fetch."""
    partition_reassignments: dict[TopicPartition, ReplicaAssignment] = field(default_factory=dict)
    """Partitions being reassigned (KIP-455, Kafka ``partitionsBeingReassigned``): the
    full assignment with adding and removing replicas; ``partition_assignments`` holds
    its ``replicas`` (RS = TRS + ORS). Filled from the topic znodes."""
    illegal_transitions: int = 0
    """State changes asked from a state that may not lead to the target, logged and
    skipped as Kafka's state machines do (``logInvalidTransition``); the simulator checks
    that none happen."""
    replicas_on_offline_dirs: dict[int, frozenset[TopicPartition]] = field(default_factory=dict)
    """Per live broker, its replicas in a failed log dir (KIP-112, Kafka
    ``replicasOnOfflineDirs``), as its LeaderAndIsr answers (KAFKA_STORAGE_ERROR) said;
    they are offline although the broker is live. Forgotten when the broker restarts."""

    def copy(self) -> ControllerContext:
        return ControllerContext(
            controller_id=self.controller_id,
            controller_epoch=self.controller_epoch,
            controller_epoch_zk_version=self.controller_epoch_zk_version,
            live_brokers=dict(self.live_brokers),
            shutting_down_broker_ids=set(self.shutting_down_broker_ids),
            all_topics=set(self.all_topics),
            topic_ids=dict(self.topic_ids),
            partition_assignments=dict(self.partition_assignments),
            partition_leadership=dict(self.partition_leadership),
            partition_states=dict(self.partition_states),
            replica_states=dict(self.replica_states),
            topics_to_be_deleted=set(self.topics_to_be_deleted),
            topics_with_deletion_started=set(self.topics_with_deletion_started),
            topics_ineligible_for_deletion=set(self.topics_ineligible_for_deletion),
            unclean_leader_election_enable=dict(self.unclean_leader_election_enable),
            default_unclean_leader_election_enable=self.default_unclean_leader_election_enable,
            partition_state_mzxid=dict(self.partition_state_mzxid),
            partition_reassignments=dict(self.partition_reassignments),
            inter_broker_listener=self.inter_broker_listener,
            replicas_on_offline_dirs=dict(self.replicas_on_offline_dirs),
            illegal_transitions=self.illegal_transitions,
        )

    # --- brokers ---------------------------------------------------------------------

    @property
    def live_broker_ids(self) -> set[int]:
        """Live brokers that are not shutting down (Kafka ``liveBrokerIds``)."""
        return {b for b in self.live_brokers if b not in self.shutting_down_broker_ids}

    @property
    def live_or_shutting_down_broker_ids(self) -> set[int]:
        return set(self.live_brokers)

    def broker_epoch(self, broker_id: int) -> int:
        info = self.live_brokers.get(broker_id)
        if info is None or info.epoch is None:
            return UNKNOWN_BROKER_EPOCH
        return info.epoch

    def is_replica_online(
        self,
        broker_id: int,
        tp: TopicPartition | None = None,
        include_shutting_down: bool = False,
    ) -> bool:
        """Kafka ``isReplicaOnline``: the broker is live (and not shutting down unless
        ``include_shutting_down``) and, for ``tp``, its replica is not in a failed log dir."""
        if broker_id not in self.live_brokers:
            return False
        if tp is not None and self.replicas_on_offline_dirs:
            offline = self.replicas_on_offline_dirs.get(broker_id)
            if offline is not None and tp in offline:
                return False
        return include_shutting_down or broker_id not in self.shutting_down_broker_ids

    def online_brokers_for(self, tp: TopicPartition, brokers: set[int]) -> set[int]:
        """``brokers`` without those whose replica of ``tp`` is in a failed log dir."""
        if not self.replicas_on_offline_dirs:
            return brokers
        return {b for b in brokers if tp not in self.replicas_on_offline_dirs.get(b, frozenset())}

    # --- topics and partitions --------------------------------------------------------

    def add_topic(
        self,
        topic: str,
        assignment: dict[int, tuple[int, ...]],
        topic_id: uuid.UUID | None = None,
    ) -> None:
        self.all_topics.add(topic)
        self.partition_assignments[topic] = {p: tuple(r) for p, r in assignment.items()}
        if topic_id is not None:
            self.topic_ids[topic] = topic_id

    def remove_topic(self, topic: str) -> None:
        """Forget a topic entirely (Kafka ``ControllerContext.removeTopic``)."""
        for partition in self.partition_assignments.pop(topic, {}):
            tp = TopicPartition(topic, partition)
            self.partition_leadership.pop(tp, None)
            self.partition_states.pop(tp, None)
            self.partition_reassignments.pop(tp, None)
        self.replica_states = {
            r: s for r, s in self.replica_states.items() if r.topic_partition.topic != topic
        }
        self.all_topics.discard(topic)
        self.topic_ids.pop(topic, None)
        self.topics_to_be_deleted.discard(topic)
        self.topics_with_deletion_started.discard(topic)
        self.topics_ineligible_for_deletion.discard(topic)
        self.unclean_leader_election_enable.pop(topic, None)

    def partitions_for_topic(self, topic: str) -> list[TopicPartition]:
        return [_new_tp((topic, p)) for p in self.partition_assignments.get(topic, {})]

    def all_partitions(self) -> Iterator[TopicPartition]:
        for topic, partitions in self.partition_assignments.items():
            for partition in partitions:
                yield _new_tp((topic, partition))

    def replicas_for(self, tp: TopicPartition) -> tuple[int, ...]:
        """The assigned replicas (AR) of a partition, preferred first; () if unknown."""
        return self.partition_assignments.get(tp[0], {}).get(tp[1], ())

    def replicas_for_topic(self, topic: str) -> list[PartitionReplica]:
        return [
            _new_replica((_new_tp((topic, p)), r))
            for p, replicas in self.partition_assignments.get(topic, {}).items()
            for r in replicas
        ]

    def replicas_on_brokers(self, broker_ids: Iterable[int]) -> list[PartitionReplica]:
        """Every replica hosted by one of ``broker_ids`` (Kafka ``replicasOnBrokers``)."""
        wanted = set(broker_ids)
        found: list[PartitionReplica] = []
        for topic, partitions in self.partition_assignments.items():
            for partition, replicas in partitions.items():
                for r in replicas:
                    if r in wanted:
                        found.append(_new_replica((_new_tp((topic, partition)), r)))
        return found

    def leadership(self, tp: TopicPartition) -> LeaderIsrAndControllerEpoch | None:
        return self.partition_leadership.get(tp)

    def is_topic_queued_for_deletion(self, topic: str) -> bool:
        return topic in self.topics_to_be_deleted

    def unclean_election_enabled(self, topic: str) -> bool:
        return self.unclean_leader_election_enable.get(
            topic, self.default_unclean_leader_election_enable
        )

    def partition_state(self, tp: TopicPartition) -> PartitionState:
        return self.partition_states.get(tp, PartitionState.NonExistentPartition)

    def replica_state(self, replica: PartitionReplica) -> ReplicaState:
        return self.replica_states.get(replica, ReplicaState.NonExistentReplica)

    def replicas_in_state(self, topic: str, state: ReplicaState) -> list[PartitionReplica]:
        return [r for r in self.replicas_for_topic(topic) if self.replica_state(r) is state]

    def partitions_with_offline_leader(self) -> list[TopicPartition]:
        """Partitions, of topics not being deleted, whose leader is not online."""
        online = self.live_broker_ids
        deleting = self.topics_to_be_deleted
        offline_dirs = self.replicas_on_offline_dirs
        return [
            tp
            for tp, state in self.partition_leadership.items()
            if (
                state.leader_and_isr.leader not in online
                or (offline_dirs and tp in offline_dirs.get(state.leader_and_isr.leader, ()))
            )
            and tp[0] not in deleting
        ]
