"""LeaderAndIsr, StopReplica and UpdateMetadata: the controller's commands to a broker.

A broker accepts a command only from the controller ZooKeeper names at that
epoch: a request with an older controller epoch than one already seen gets
STALE_CONTROLLER_EPOCH, and a request claiming a newer epoch is checked
against ``/controller`` and ``/controller_epoch`` before it is believed. A
controller that was paused and resumes therefore cannot undo its successor's
decisions.

Topic ids (KIP-516) arrive in both LeaderAndIsr and UpdateMetadata and fill the
metadata cache. A partition's log records its id in ``partition.metadata`` the first
time a LeaderAndIsr with an id is applied to it (one small fsynced write); a later
LeaderAndIsr naming another id gets INCONSISTENT_TOPIC_ID for that partition and is
not applied, as in Kafka's ``ReplicaManager``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from replog.common.topics import GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME
from replog.protocol import controller_schemas as cs
from replog.replication.machine import PartitionLeadership
from replog.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from replog.server.metadata_cache import BrokerEndpoint, PartitionInfo
from replog.server.network import RequestContext
from replog.storage.partition_metadata import has_consistent_topic_id
from replog.zk.data import LEADER_DURING_DELETE
from replog.zk.fencing import is_stale_broker_epoch, is_stale_controller_epoch

if TYPE_CHECKING:
    from replog.server.handlers.context import BrokerServices

log = logging.getLogger(__name__)


class ControllerCommands:
    """Validates controller epochs and applies the controller's commands.

    Concurrency: event loop only; the ZooKeeper check happens before any state
    is touched, and state changes run without awaiting.
    """

    def __init__(self, services: BrokerServices, zk, broker_epoch_fn) -> None:
        self.services = services
        self.zk = zk
        self.broker_epoch = broker_epoch_fn
        self.controller_epoch = -1
        self.controller_id = -1
        self._check_lock = asyncio.Lock()

    async def _accept(
        self, ctx: RequestContext, controller_id: int, controller_epoch: int, broker_epoch: int
    ) -> ErrorCode:
        # Kafka: only a principal with ClusterAction (the brokers) may send these
        if not self.services.allowed(
            ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME
        ):
            return ErrorCode.cluster_authorization_failed
        if is_stale_controller_epoch(controller_epoch, self.controller_epoch):
            log.warning(
                "rejecting a command from controller %d at epoch %d: epoch %d is current",
                controller_id,
                controller_epoch,
                self.controller_epoch,
            )
            return ErrorCode.stale_controller_epoch
        if is_stale_broker_epoch(broker_epoch, self.broker_epoch()):
            log.warning(
                "rejecting a command for broker epoch %d (now %d)",
                broker_epoch,
                self.broker_epoch(),
            )
            return ErrorCode.stale_broker_epoch
        # Every command is checked against ZooKeeper, not only those at a new epoch: a
        # broker that has not yet heard from a new controller must still refuse a
        # resumed zombie at the epoch it last saw. Commands are rare (one per broker
        # per controller event), so the batched read of both znodes each is cheap.
        async with self._check_lock:
            current_id, epoch = await asyncio.to_thread(self.zk.get_controller_and_epoch)
        zk_epoch = epoch[0] if epoch else -1
        if current_id != controller_id or zk_epoch != controller_epoch:
            log.warning(
                "rejecting a command from broker %d claiming controller epoch %d: ZooKeeper "
                "names controller %s at epoch %d",
                controller_id,
                controller_epoch,
                current_id,
                zk_epoch,
            )
            return ErrorCode.stale_controller_epoch
        if is_stale_controller_epoch(self.controller_epoch, controller_epoch):
            log.info("controller %d at epoch %d is now in charge", controller_id, controller_epoch)
        self.controller_epoch = controller_epoch
        self.controller_id = controller_id
        return ErrorCode.none

    async def handle_leader_and_isr(self, ctx: RequestContext, request: cs.LeaderAndIsrRequest):
        error = await self._accept(
            ctx,
            int(request.controller_id),
            int(request.controller_epoch),
            int(request.broker_epoch),
        )
        rm = self.services.replica_manager
        live_leaders = {
            int(b.broker_id): (str(b.host_name), int(b.port)) for b in request.live_leaders
        }
        log_manager = rm.log_manager
        started = time.perf_counter()
        topics = []
        for topic_state in request.topic_states:
            topic = str(topic_state.topic_name)
            topic_id = topic_state.topic_id
            if error == ErrorCode.none and topic_id is not None:
                self.services.metadata_cache.set_topic_id(topic, topic_id)
            errors = []
            for p in topic_state.partition_states:
                code = error
                partition = int(p.partition_index)
                on_disk = log_manager.topic_id(topic, partition)
                if code == ErrorCode.none and not has_consistent_topic_id(topic_id, on_disk):
                    # Kafka ReplicaManager: the local log belongs to another topic of
                    # this name (deleted while this broker was away): do not apply.
                    log.error(
                        "%s-%d: LeaderAndIsr for topic id %s, but the local log belongs to "
                        "topic id %s: INCONSISTENT_TOPIC_ID",
                        topic,
                        partition,
                        topic_id,
                        on_disk,
                    )
                    code = ErrorCode.inconsistent_topic_id
                if code == ErrorCode.none:
                    code = rm.become_leader_or_follower(
                        topic,
                        int(p.partition_index),
                        PartitionLeadership(  # kio's reader gives plain ints and tuples
                            leader=p.leader,
                            leader_epoch=p.leader_epoch,
                            isr=p.isr,
                            replicas=p.replicas,
                            zk_version=p.zk_version,
                            controller_epoch=p.controller_epoch,
                        ),
                        live_leaders=live_leaders,
                        is_new=bool(p.is_new),
                    )
                    if (
                        topic_id is not None
                        and on_disk is None
                        and log_manager.get_log(topic, partition) is not None
                    ):
                        if not log_manager.assign_topic_id(topic, partition, topic_id):
                            code = ErrorCode.kafka_storage_error  # its log dir just failed
                errors.append(
                    cs.LeaderAndIsrPartitionError(
                        partition_index=p.partition_index, error_code=code
                    )
                )
                if topic == GROUP_METADATA_TOPIC_NAME and code == ErrorCode.none:
                    # Kafka onLeadershipChange: load or unload the partition's groups.
                    self.services.group_coordinator.on_partition_role(
                        partition, int(p.leader) == rm.broker_id, int(p.leader_epoch)
                    )
                txn = self.services.transaction_coordinator
                if topic == TRANSACTION_STATE_TOPIC_NAME and code == ErrorCode.none and txn:
                    # Kafka onLeadershipChange: load or unload the transactional ids.
                    txn.on_partition_role(
                        partition, int(p.leader) == rm.broker_id, int(p.leader_epoch)
                    )
            topics.append(
                cs.LeaderAndIsrTopicError(
                    topic_id=topic_state.topic_id, partition_errors=tuple(errors)
                )
            )
        if error == ErrorCode.none:
            count = sum(len(t.partition_states) for t in request.topic_states)
            log.info(
                "LeaderAndIsr from controller %d (epoch %d): %d partitions applied in %.3f s",
                request.controller_id,
                request.controller_epoch,
                count,
                time.perf_counter() - started,
            )
        return cs.LeaderAndIsrResponse(error_code=error, topics=tuple(topics))

    async def handle_stop_replica(self, ctx: RequestContext, request: cs.StopReplicaRequest):
        error = await self._accept(
            ctx,
            int(request.controller_id),
            int(request.controller_epoch),
            int(request.broker_epoch),
        )
        errors = []
        if error == ErrorCode.none:
            for topic_state in request.topic_states:
                for p in topic_state.partition_states:
                    self.services.replica_manager.stop_replica(
                        str(topic_state.topic_name),
                        int(p.partition_index),
                        bool(p.delete_partition),
                    )
                    if str(topic_state.topic_name) == GROUP_METADATA_TOPIC_NAME:
                        self.services.group_coordinator.on_partition_role(
                            int(p.partition_index), False, -1
                        )
                    txn = self.services.transaction_coordinator
                    if str(topic_state.topic_name) == TRANSACTION_STATE_TOPIC_NAME and txn:
                        txn.on_partition_role(int(p.partition_index), False, -1)
                    errors.append(
                        cs.StopReplicaPartitionError(
                            topic_name=topic_state.topic_name,
                            partition_index=p.partition_index,
                            error_code=ErrorCode.none,
                        )
                    )
        return cs.StopReplicaResponse(error_code=error, partition_errors=tuple(errors))

    async def handle_update_metadata(self, ctx: RequestContext, request: cs.UpdateMetadataRequest):
        error = await self._accept(
            ctx,
            int(request.controller_id),
            int(request.controller_epoch),
            int(request.broker_epoch),
        )
        if error != ErrorCode.none:
            return cs.UpdateMetadataResponse(error_code=error)
        brokers = []
        for b in request.live_brokers:
            if not b.endpoints:
                continue
            endpoint = b.endpoints[0]
            brokers.append(
                BrokerEndpoint(
                    int(b.id),
                    str(endpoint.host),
                    int(endpoint.port),
                    b.rack,
                    tuple((str(e.listener), str(e.host), int(e.port)) for e in b.endpoints),
                )
            )
        partitions = []
        deleted: set[str] = set()
        topic_ids = {}
        for topic_state in request.topic_states:
            topic = str(topic_state.topic_name)
            if topic_state.topic_id is not None:
                topic_ids[topic] = topic_state.topic_id
            # kio's reader gives plain ints and tuples: taken as they are (10,000
            # partitions after a broker failure; converting each field cost 5 µs each)
            for p in topic_state.partition_states:
                if p.leader == LEADER_DURING_DELETE:
                    deleted.add(topic)
                    continue
                partitions.append(
                    PartitionInfo(
                        topic,
                        p.partition_index,
                        p.leader,
                        p.leader_epoch,
                        p.replicas,
                        p.isr,
                        p.offline_replicas,
                    )
                )
        self.services.metadata_cache.update(
            controller_id=int(request.controller_id),
            controller_epoch=int(request.controller_epoch),
            brokers=brokers,
            partitions=partitions,
            deleted=deleted,
            topic_ids=topic_ids,
        )
        self.services.admin.on_metadata_update()
        return cs.UpdateMetadataResponse(error_code=ErrorCode.none)
