"""DeleteRecords: move partitions' log start offsets up (Kafka ``handleDeleteRecordsRequest``).

A partition the metadata does not know is UNKNOWN_TOPIC_OR_PARTITION; an
internal topic is INVALID_TOPIC_EXCEPTION; the rest go to the leader's replica
manager (NOT_LEADER_OR_FOLLOWER elsewhere, OFFSET_OUT_OF_RANGE beyond the high
watermark, POLICY_VIOLATION for a topic that does not delete). The answer for the
accepted ones waits, within the request's timeout, until every live replica's
log start offset has reached the requested offset: the low watermark each one
answers with (REQUEST_TIMED_OUT with the low watermark seen first, otherwise).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog.common.topics import INTERNAL_TOPICS
from replog.protocol.apis import ApiKey, make, nested
from replog.replication.replica_manager import DeleteRecordsResult
from replog.security.acl import AclOperation, ResourceType
from replog.server.handlers.context import NO_THROTTLE, BrokerServices, response_class
from replog.server.network import RequestContext


async def handle_delete_records(services: BrokerServices, ctx: RequestContext, request) -> object:
    cls = response_class(ApiKey.DELETE_RECORDS, ctx.api_version)
    topic_cls = nested(cls, "DeleteRecordsTopicResult")
    part_cls = nested(cls, "DeleteRecordsPartitionResult")
    replica_manager = services.replica_manager
    results: dict[tuple[str, int], DeleteRecordsResult] = {}
    for topic in request.topics:
        name = str(topic.name)
        for p in topic.partitions:
            index = int(p.partition_index)
            if not services.allowed(ctx, AclOperation.DELETE, ResourceType.TOPIC, name):
                result = DeleteRecordsResult(ErrorCode.topic_authorization_failed)
            elif services.metadata_cache.partition(name, index) is None:
                result = DeleteRecordsResult(ErrorCode.unknown_topic_or_partition)
            elif name in INTERNAL_TOPICS:
                result = DeleteRecordsResult(ErrorCode.invalid_topic_exception)
            else:
                result = replica_manager.delete_records(name, index, int(p.offset))
            results[(name, index)] = result  # a partition named twice: the last one counts
    timeout_ms = max(int(request.timeout.total_seconds() * 1000), 0)
    await replica_manager.wait_for_delete_records(results, timeout_ms)
    by_topic: dict[str, list[object]] = {}
    for (name, index), result in results.items():
        by_topic.setdefault(name, []).append(
            make(
                part_cls,
                partition_index=index,
                low_watermark=result.low_watermark,
                error_code=result.error,
            )
        )
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            make(topic_cls, name=name, partitions=tuple(parts)) for name, parts in by_topic.items()
        ),
    )
