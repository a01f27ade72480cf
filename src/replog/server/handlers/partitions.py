"""CreatePartitions (any broker) and the KIP-455 reassignment APIs
(AlterPartitionReassignments, ListPartitionReassignments: the controller only, others
answer NOT_CONTROLLER as Kafka's ZooKeeper-mode brokers do; clients send them to the
controller Metadata names)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from replog.controller.context import TopicPartition
from replog.protocol.apis import ApiKey, make, nested
from replog.security.acl import AclOperation, ResourceType
from replog.server.handlers.context import NO_THROTTLE, BrokerServices, response_class
from replog.server.network import RequestContext


async def handle_create_partitions(
    services: BrokerServices, ctx: RequestContext, request
) -> object:
    cls = response_class(ApiKey.CREATE_PARTITIONS, ctx.api_version)
    result_cls = nested(cls, "CreatePartitionsTopicResult")
    names = [str(t.name) for t in request.topics]
    timeout_ms = int(request.timeout.total_seconds() * 1000)

    async def one(topic: Any) -> tuple[ErrorCode, str | None]:
        name = str(topic.name)
        if names.count(name) > 1:
            return ErrorCode.invalid_request, "Duplicate topic in request."
        if not services.allowed(ctx, AclOperation.ALTER, ResourceType.TOPIC, name):
            return ErrorCode.topic_authorization_failed, "Authorization failed."
        assignments = (
            None
            if topic.assignments is None
            else [[int(b) for b in a.broker_ids] for a in topic.assignments]
        )
        return await services.admin.create_partitions(
            name, int(topic.count), assignments, timeout_ms, bool(request.validate_only)
        )

    outcomes = await asyncio.gather(*(one(t) for t in request.topics))
    results = tuple(
        make(result_cls, name=name, error_code=error, error_message=message)
        for name, (error, message) in zip(names, outcomes, strict=True)
    )
    return make(cls, throttle_time=NO_THROTTLE, results=results)


class ReassignmentRequests:
    """AlterPartitionReassignments and ListPartitionReassignments, answered by the
    active controller (``controller.operations``)."""

    def __init__(
        self,
        controller: Callable[[], Any],
        cluster_allowed: Callable[[RequestContext, AclOperation], bool] = lambda _c, _o: True,
    ) -> None:
        self._controller = controller
        self._cluster_allowed = cluster_allowed  # ACLs: Alter / Describe on the cluster

    def _operations(self) -> Any:
        controller = self._controller()
        if controller is None or not controller.is_active:
            return None
        return controller.operations

    async def handle_alter_partition_reassignments(
        self, ctx: RequestContext, request: Any
    ) -> object:
        cls = response_class(ApiKey.ALTER_PARTITION_REASSIGNMENTS, ctx.api_version)
        topic_cls = nested(cls, "ReassignableTopicResponse")
        partition_cls = nested(cls, "ReassignablePartitionResponse")
        asked: dict[TopicPartition, tuple[int, ...] | None] = {}
        for t in request.topics:
            for p in t.partitions:
                replicas = None if p.replicas is None else tuple(int(r) for r in p.replicas)
                asked[TopicPartition(str(t.name), int(p.partition_index))] = replicas
        if not self._cluster_allowed(ctx, AclOperation.ALTER):
            return make(
                cls,
                throttle_time=NO_THROTTLE,
                error_code=ErrorCode.cluster_authorization_failed,
                error_message=None,
                responses=(),
            )
        operations = self._operations()
        outcomes = None
        if operations is not None:
            outcomes = await operations.alter_partition_reassignments(asked)
        if outcomes is None:
            return make(
                cls,
                throttle_time=NO_THROTTLE,
                error_code=ErrorCode.not_controller,
                error_message="This is not the correct controller for this cluster.",
                responses=(),
            )
        responses = tuple(
            topic_cls(
                name=t.name,
                partitions=tuple(
                    partition_cls(
                        partition_index=p.partition_index,
                        error_code=ErrorCode(o.error_code),
                        error_message=o.message,
                    )
                    for p in t.partitions
                    for o in [outcomes[TopicPartition(str(t.name), int(p.partition_index))]]
                ),
            )
            for t in request.topics
        )
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            error_message=None,
            responses=responses,
        )

    async def handle_list_partition_reassignments(
        self, ctx: RequestContext, request: Any
    ) -> object:
        cls = response_class(ApiKey.LIST_PARTITION_REASSIGNMENTS, ctx.api_version)
        topic_cls = nested(cls, "OngoingTopicReassignment")
        partition_cls = nested(cls, "OngoingPartitionReassignment")
        wanted = None
        if request.topics is not None:
            wanted = frozenset(
                TopicPartition(str(t.name), int(p))
                for t in request.topics
                for p in t.partition_indexes
            )
        if not self._cluster_allowed(ctx, AclOperation.DESCRIBE):
            return make(
                cls,
                throttle_time=NO_THROTTLE,
                error_code=ErrorCode.cluster_authorization_failed,
                error_message=None,
                topics=(),
            )
        operations = self._operations()
        ongoing = None
        if operations is not None:
            ongoing = await operations.list_partition_reassignments(wanted)
        if ongoing is None:
            return make(
                cls,
                throttle_time=NO_THROTTLE,
                error_code=ErrorCode.not_controller,
                error_message="This is not the correct controller for this cluster.",
                topics=(),
            )
        by_topic: dict[str, list[Any]] = {}
        for tp, ra in sorted(ongoing.items()):
            by_topic.setdefault(tp.topic, []).append(
                partition_cls(
                    partition_index=tp.partition,
                    replicas=ra.replicas,
                    adding_replicas=ra.adding_replicas,
                    removing_replicas=ra.removing_replicas,
                )
            )
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            error_message=None,
            topics=tuple(topic_cls(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        )
