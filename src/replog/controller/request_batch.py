"""Per-broker controller requests collected during one decision.

Kafka ``AbstractControllerBrokerRequestBatch``: while the state machines work, they
note which broker must hear about which partition (``add_leader_and_isr``,
``add_stop_replica``, ``add_update_metadata_to_all_live``,
``add_update_metadata_all_partitions``); ``build`` then turns the notes into the
LeaderAndIsr / UpdateMetadata / StopReplica schema objects of
``replog.protocol.controller_schemas``, one of each kind at most per broker, in that
order (Kafka sends LeaderAndIsr before UpdateMetadata before StopReplica).

Partition states are read from the context given to ``build`` (the decision's final
context), so a partition touched twice in one decision is sent once, in its final
state. Every LeaderAndIsr also queues UpdateMetadata of that partition to every live
broker, as in Kafka. Requests go only to brokers live in that context; the
``broker_epoch`` of each request is the receiving broker's epoch.

Concurrency: owned by one decision; not shared.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from replog.controller.context import (
    EPOCH_DURING_DELETE,
    LEADER_DURING_DELETE,
    NO_EPOCH,
    ControllerContext,
    TopicPartition,
)
from replog.protocol.controller_schemas import (
    LeaderAndIsrLiveLeader,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrTopicState,
    StopReplicaPartitionState,
    StopReplicaRequest,
    StopReplicaTopicState,
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataTopicState,
)
from replog.protocol.controller_schemas.leader_and_isr import TYPE_INCREMENTAL

ControllerRequest = LeaderAndIsrRequest | UpdateMetadataRequest | StopReplicaRequest

# Kafka SecurityProtocol ids, for UpdateMetadataEndpoint.security_protocol.
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


@dataclass
class ControllerBrokerRequestBatch:
    """Notes of what each broker must be told; see the module docstring."""

    leader_and_isr: dict[int, dict[TopicPartition, bool]] = field(default_factory=dict)
    """broker -> partition -> is_new."""
    stop_replica: dict[int, dict[TopicPartition, tuple[bool, int]]] = field(default_factory=dict)
    """broker -> partition -> (delete_partition, leader_epoch)."""
    update_metadata_to_all_live: bool = False
    """UpdateMetadata goes to every broker live at ``build`` time (set by LeaderAndIsr)."""
    update_metadata_partitions: dict[TopicPartition, None] = field(default_factory=dict)
    """Sent to every UpdateMetadata recipient (Kafka's shared map); a dict keeps order."""
    update_metadata_all_partitions: set[int] = field(default_factory=set)
    """Brokers that get every partition with a leader (new brokers, controller failover)."""

    def is_empty(self) -> bool:
        return not (
            self.leader_and_isr
            or self.stop_replica
            or self.update_metadata_to_all_live
            or self.update_metadata_all_partitions
        )

    def add_leader_and_isr(
        self, broker_ids: Iterable[int], tp: TopicPartition, is_new: bool = False
    ) -> None:
        for broker in broker_ids:
            if broker < 0:
                continue
            per_broker = self.leader_and_isr.get(broker)
            if per_broker is None:
                per_broker = self.leader_and_isr[broker] = {}
            per_broker[tp] = is_new or per_broker.get(tp, False)
            self._supersede_stop_replica(broker, tp)
        self.update_metadata_to_all_live = True
        self.update_metadata_partitions[tp] = None

    def add_stop_replica(
        self,
        context: ControllerContext,
        broker_ids: Iterable[int],
        tp: TopicPartition,
        delete_partition: bool,
    ) -> None:
        if context.is_topic_queued_for_deletion(tp.topic):
            leader_epoch = EPOCH_DURING_DELETE
        else:
            state = context.leadership(tp)
            leader_epoch = state.leader_and_isr.leader_epoch if state else NO_EPOCH
        for broker in broker_ids:
            if broker < 0:
                continue
            per_broker = self.stop_replica.setdefault(broker, {})
            already_delete = per_broker.get(tp, (False, 0))[0]
            per_broker[tp] = (already_delete or delete_partition, leader_epoch)
            if not delete_partition and not already_delete:
                # the later instruction wins: this replica went offline after being told
                # its role in this same decision
                told = self.leader_and_isr.get(broker)
                if told is not None and told.pop(tp, None) is not None and not told:
                    del self.leader_and_isr[broker]

    def _supersede_stop_replica(self, broker: int, tp: TopicPartition) -> None:
        """A LeaderAndIsr after a StopReplica without delete for the same replica in one
        decision (a restarted broker: its failure, then its startup) replaces it. Kafka
        sends the two in separate batches, in order; one batch is built in a fixed order
        (LeaderAndIsr before StopReplica), so the stale stop must go."""
        stops = self.stop_replica.get(broker)
        if stops is not None and tp in stops and not stops[tp][0]:
            del stops[tp]
            if not stops:
                del self.stop_replica[broker]

    def add_update_metadata_to_all_live(self, partitions: Iterable[TopicPartition] = ()) -> None:
        """UpdateMetadata to every broker live when the requests are built."""
        self.update_metadata_to_all_live = True
        for tp in partitions:
            self.update_metadata_partitions[tp] = None

    def add_update_metadata_all_partitions(self, broker_ids: Iterable[int]) -> None:
        self.update_metadata_all_partitions.update(b for b in broker_ids if b >= 0)

    # --- building ----------------------------------------------------------------------

    def build(self, context: ControllerContext) -> dict[int, list[ControllerRequest]]:
        """The requests per live broker, in sending order."""
        live = context.live_brokers
        out: dict[int, list[ControllerRequest]] = {}
        states: dict[tuple[TopicPartition, bool], LeaderAndIsrPartitionState] = {}
        for broker, partitions in self.leader_and_isr.items():
            if broker in live:
                request = self._leader_and_isr_request(context, broker, partitions, states)
                if request is not None:
                    out.setdefault(broker, []).append(request)
        metadata_brokers = set(self.update_metadata_all_partitions)
        if self.update_metadata_to_all_live:
            metadata_brokers |= live.keys()
        if metadata_brokers:
            live_brokers = _live_brokers(context)
            shared = self._metadata_topic_states(context, self.update_metadata_partitions)
            everything: tuple[UpdateMetadataTopicState, ...] | None = None
            if self.update_metadata_all_partitions:
                everything = self._metadata_topic_states(
                    context, {**self.update_metadata_partitions, **context.partition_leadership}
                )
            for broker in sorted(metadata_brokers):
                if broker not in live:
                    continue
                full = broker in self.update_metadata_all_partitions
                out.setdefault(broker, []).append(
                    UpdateMetadataRequest(
                        controller_id=context.controller_id,
                        controller_epoch=context.controller_epoch,
                        broker_epoch=context.broker_epoch(broker),
                        topic_states=everything if full and everything is not None else shared,
                        live_brokers=live_brokers,
                    )
                )
        for broker, stops in self.stop_replica.items():
            if broker in live and stops:
                out.setdefault(broker, []).append(
                    self._stop_replica_request(context, broker, stops)
                )
        return out

    def _leader_and_isr_request(
        self,
        context: ControllerContext,
        broker: int,
        partitions: dict[TopicPartition, bool],
        cache: dict[tuple[TopicPartition, bool], LeaderAndIsrPartitionState],
    ) -> LeaderAndIsrRequest | None:
        by_topic: dict[str, list[LeaderAndIsrPartitionState]] = {}
        leader_ids: set[int] = set()
        leadership = context.partition_leadership
        assignments = context.partition_assignments
        for tp, is_new in partitions.items():
            partition_state = cache.get((tp, is_new))
            if partition_state is None:
                state = leadership.get(tp)
                if state is None:
                    continue
                lai = state.leader_and_isr
                moving = context.partition_reassignments.get(tp)  # KIP-455
                partition_state = cache[(tp, is_new)] = LeaderAndIsrPartitionState(
                    partition_index=tp[1],
                    controller_epoch=state.controller_epoch,
                    leader=lai.leader,
                    leader_epoch=lai.leader_epoch,
                    isr=lai.isr,
                    zk_version=lai.zk_version,
                    replicas=assignments[tp[0]][tp[1]],
                    adding_replicas=moving.adding_replicas if moving else (),
                    removing_replicas=moving.removing_replicas if moving else (),
                    is_new=is_new,
                )
            leader_ids.add(partition_state.leader)
            topic_states = by_topic.get(tp[0])
            if topic_states is None:
                topic_states = by_topic[tp[0]] = []
            topic_states.append(partition_state)
        if not by_topic:
            return None
        live_leaders = tuple(
            LeaderAndIsrLiveLeader(broker_id=b, host_name=host, port=port)
            for b, info in sorted(context.live_brokers.items())
            for host, port in (info.address(context.inter_broker_listener),)
            if b in leader_ids
        )
        return LeaderAndIsrRequest(
            controller_id=context.controller_id,
            controller_epoch=context.controller_epoch,
            broker_epoch=context.broker_epoch(broker),
            type=TYPE_INCREMENTAL,
            topic_states=tuple(
                LeaderAndIsrTopicState(
                    topic_name=topic,
                    topic_id=context.topic_ids.get(topic),
                    partition_states=tuple(states),
                )
                for topic, states in by_topic.items()
            ),
            live_leaders=live_leaders,
        )

    def _metadata_topic_states(
        self, context: ControllerContext, partitions: Iterable[TopicPartition]
    ) -> tuple[UpdateMetadataTopicState, ...]:
        by_topic: dict[str, list[UpdateMetadataPartitionState]] = {}
        live = context.live_broker_ids
        offline_dirs = context.replicas_on_offline_dirs
        leadership = context.partition_leadership
        assignments = context.partition_assignments
        deleting = context.topics_to_be_deleted
        for tp in partitions:
            state = leadership.get(tp)
            if state is None:
                continue  # Kafka: leader not yet assigned, nothing to tell
            topic = tp[0]
            lai = state.leader_and_isr
            replicas = assignments[topic][tp[1]]
            offline = (
                () if live.issuperset(replicas) else tuple(r for r in replicas if r not in live)
            )
            if offline_dirs:  # replicas of live brokers in failed log dirs (KIP-112)
                offline = tuple(
                    r for r in replicas if r not in live or tp in offline_dirs.get(r, ())
                )
            topic_states = by_topic.get(topic)
            if topic_states is None:
                topic_states = by_topic[topic] = []
            topic_states.append(
                UpdateMetadataPartitionState(
                    partition_index=tp[1],
                    controller_epoch=state.controller_epoch,
                    leader=LEADER_DURING_DELETE if topic in deleting else lai.leader,
                    leader_epoch=lai.leader_epoch,
                    isr=lai.isr,
                    zk_version=lai.zk_version,
                    replicas=replicas,
                    offline_replicas=offline,
                )
            )
        return tuple(
            UpdateMetadataTopicState(
                topic_name=topic,
                topic_id=context.topic_ids.get(topic),
                partition_states=tuple(states),
            )
            for topic, states in by_topic.items()
        )

    def _stop_replica_request(
        self,
        context: ControllerContext,
        broker: int,
        stops: dict[TopicPartition, tuple[bool, int]],
    ) -> StopReplicaRequest:
        by_topic: dict[str, list[StopReplicaPartitionState]] = {}
        for tp, (delete, leader_epoch) in stops.items():
            by_topic.setdefault(tp[0], []).append(
                StopReplicaPartitionState(
                    partition_index=tp[1], leader_epoch=leader_epoch, delete_partition=delete
                )
            )
        return StopReplicaRequest(
            controller_id=context.controller_id,
            controller_epoch=context.controller_epoch,
            broker_epoch=context.broker_epoch(broker),
            topic_states=tuple(
                StopReplicaTopicState(topic_name=topic, partition_states=tuple(states))
                for topic, states in by_topic.items()
            ),
        )


def _live_brokers(context: ControllerContext) -> tuple[UpdateMetadataBroker, ...]:
    return tuple(
        UpdateMetadataBroker(
            id=broker_id,
            endpoints=tuple(
                UpdateMetadataEndpoint(
                    port=e.port,
                    host=e.host,
                    listener=e.listener_name,
                    security_protocol=SECURITY_PROTOCOL_IDS.get(e.security_protocol, 0),
                )
                for e in info.endpoints
            ),
            rack=info.rack,
        )
        for broker_id, info in sorted(context.live_brokers.items())
    )
