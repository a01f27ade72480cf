"""DescribeCluster and DescribeLogDirs: what the cluster is made of, and what this
broker keeps where.

DescribeCluster (Kafka ``handleDescribeCluster`` / ``AuthHelper.computeDescribeClusterResponse``):
the live brokers of the metadata cache, the cluster id and the controller (-1 unless
it is among those brokers). A broker answers for brokers only: asking it for
controllers (endpoint type 2, KIP-919) is MISMATCHED_ENDPOINT_TYPE, an unknown
type UNSUPPORTED_ENDPOINT_TYPE. It needs Describe on the cluster
(CLUSTER_AUTHORIZATION_FAILED otherwise). ``cluster_authorized_operations``, when asked,
holds the cluster operations the principal is allowed (every one without an authorizer;
INT32_MIN, "not computed", when not asked). No broker is fenced in ZooKeeper mode.

DescribeLogDirs (Kafka ``ReplicaManager.describeLogDirs``; Describe on the cluster, else
CLUSTER_AUTHORIZATION_FAILED and no directories): each ``log.dirs``
entry by absolute path with its volume's total and usable bytes (v4), and per
hosted partition asked for (every one when the request says null): its size, its
offset lag (max(HW - LEO, 0), 0 for a current replica; -1 for a log no replica is
hosted for) and ``is_future_key`` (always False: no AlterReplicaLogDirs here).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from kio.schema.errors import ErrorCode

from replog.protocol.apis import ApiKey, make, nested
from replog.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from replog.server.handlers.context import (
    NO_THROTTLE,
    UNKNOWN_AUTHORIZED_OPERATIONS,
    BrokerServices,
    response_class,
)
from replog.server.network import RequestContext

ENDPOINT_TYPE_BROKER = 1
ENDPOINT_TYPE_CONTROLLER = 2
INVALID_OFFSET_LAG = -1


def authorized_cluster_operations(services: BrokerServices, ctx: RequestContext) -> int:
    """What DescribeCluster and Metadata v8-v10 say of the cluster when a client asks
    (librdkafka's describe_cluster uses the latter): the operations the principal may do."""
    return services.authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)


async def handle_describe_cluster(services: BrokerServices, ctx: RequestContext, request) -> object:
    cls = response_class(ApiKey.DESCRIBE_CLUSTER, ctx.api_version)
    broker_cls = nested(cls, "DescribeClusterBroker")
    endpoint_type = int(getattr(request, "endpoint_type", ENDPOINT_TYPE_BROKER))
    error, message = ErrorCode.none, None
    if endpoint_type not in (ENDPOINT_TYPE_BROKER, ENDPOINT_TYPE_CONTROLLER):
        error = ErrorCode.unsupported_endpoint_type
        message = f"Unsupported endpoint type {endpoint_type}"
    elif endpoint_type != ENDPOINT_TYPE_BROKER:
        error = ErrorCode.mismatched_endpoint_type
        message = "The request was sent to an endpoint of type BROKER, but we wanted CONTROLLER"
    if error is ErrorCode.none and not services.allowed(
        ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME
    ):
        error = ErrorCode.cluster_authorization_failed
    if error is not ErrorCode.none:
        if ctx.api_version == 0 and error is not ErrorCode.cluster_authorization_failed:
            error = ErrorCode.invalid_request
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=error,
            error_message=message,
            endpoint_type=ENDPOINT_TYPE_BROKER,
            cluster_id="",
            controller_id=-1,
            brokers=(),
            cluster_authorized_operations=UNKNOWN_AUTHORIZED_OPERATIONS,
        )
    cache = services.metadata_cache
    brokers = tuple(
        make(
            broker_cls,
            broker_id=b.broker_id,
            host=b.host,
            port=b.port,
            rack=b.rack,
            is_fenced=False,
        )
        for b in sorted(cache.brokers_for(ctx.listener).values(), key=lambda b: b.broker_id)
    )
    controller_id = cache.controller_id if cache.controller_id in cache.brokers else -1
    operations = (
        authorized_cluster_operations(services, ctx)
        if request.include_cluster_authorized_operations
        else UNKNOWN_AUTHORIZED_OPERATIONS
    )
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=ENDPOINT_TYPE_BROKER,
        cluster_id=services.admin.cluster_id or "",
        controller_id=controller_id,
        brokers=brokers,
        cluster_authorized_operations=operations,
    )


def _disk_usage(log_dir: Path) -> tuple[int, int] | None:
    """(total, usable) bytes of the file system holding ``log_dir``; None if unreadable."""
    try:
        usage = shutil.disk_usage(log_dir)
    except OSError:
        return None
    return usage.total, usage.free


async def handle_describe_log_dirs(
    services: BrokerServices, ctx: RequestContext, request
) -> object:
    cls = response_class(ApiKey.DESCRIBE_LOG_DIRS, ctx.api_version)
    result_cls = nested(cls, "DescribeLogDirsResult")
    topic_cls = nested(cls, "DescribeLogDirsTopic")
    part_cls = nested(cls, "DescribeLogDirsPartition")
    if not services.allowed(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        # v3+ carry the error; older versions can only say it with no directories
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            results=(),
        )
    replica_manager = services.replica_manager
    log_manager = replica_manager.log_manager
    wanted = (
        None
        if request.topics is None
        else {(str(t.topic), int(p)) for t in request.topics for p in t.partitions}
    )
    results = []
    for log_dir in dict.fromkeys(log_manager.log_dirs):
        path = os.path.abspath(log_dir)
        # A failed log dir (KIP-112) serves no partitions: KAFKA_STORAGE_ERROR, as in Kafka.
        usage = None if log_manager.is_offline(log_dir) else _disk_usage(log_dir)
        if usage is None:
            results.append(
                make(result_cls, error_code=ErrorCode.kafka_storage_error, log_dir=path, topics=())
            )
            continue
        by_topic: dict[str, list[object]] = {}
        for log_ in sorted(log_manager.all_logs(), key=lambda lg: (lg.topic, lg.partition)):
            tp = (log_.topic, log_.partition)
            if log_manager.log_dir_of(*tp) != log_dir or (wanted is not None and tp not in wanted):
                continue
            hosted = replica_manager.get_partition(*tp)
            lag = (
                INVALID_OFFSET_LAG
                if hosted is None
                else max(hosted.high_watermark - log_.log_end_offset, 0)
            )
            by_topic.setdefault(log_.topic, []).append(
                make(
                    part_cls,
                    partition_index=log_.partition,
                    partition_size=log_.size_in_bytes(),
                    offset_lag=lag,
                    is_future_key=False,
                )
            )
        results.append(
            make(
                result_cls,
                error_code=ErrorCode.none,
                log_dir=path,
                topics=tuple(
                    make(topic_cls, name=topic, partitions=tuple(parts))
                    for topic, parts in by_topic.items()
                ),
                total_bytes=usage[0],
                usable_bytes=usage[1],
            )
        )
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results=tuple(results))
