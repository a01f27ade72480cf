"""ApiVersions and Metadata."""

from __future__ import annotations

import logging
import time

from kio.schema.errors import ErrorCode

from replog.protocol import apis
from replog.protocol.apis import ApiKey, make, nested
from replog.protocol.frames import UnsupportedVersion, encode_response
from replog.server.handlers.context import NO_THROTTLE, BrokerServices, response_class
from replog.server.network import RequestContext

log = logging.getLogger(__name__)

# How long a Metadata request waits for the controller's first UpdateMetadata.
FIRST_UPDATE_METADATA_WAIT_MS = 3000


def _api_versions_body(version: int, error: ErrorCode) -> object:
    cls = response_class(ApiKey.API_VERSIONS, version)
    api_cls = nested(cls, "ApiVersion")
    keys = tuple(
        api_cls(api_key=key, min_version=lo, max_version=hi)
        for key, (lo, hi) in sorted(apis.supported_versions().items())
    )
    return make(
        cls,
        error_code=error,
        api_keys=keys,
        throttle_time=NO_THROTTLE,
        supported_features=(),
        finalized_features_epoch=-1,
        finalized_features=(),
        zk_migration_ready=False,
    )


async def handle_api_versions(services: BrokerServices, ctx: RequestContext, request) -> object:
    return _api_versions_body(ctx.api_version, ErrorCode.none)


def unsupported_version_response(exc: UnsupportedVersion) -> bytes | None:
    """An ApiVersions request at a version we do not know gets a v0 answer (KIP-511);
    any other unsupported request closes the connection, as Kafka does."""
    if exc.api_key != ApiKey.API_VERSIONS:
        return None
    log.info("ApiVersions v%d is not supported; answering with v0", exc.api_version)
    body = _api_versions_body(0, ErrorCode.unsupported_version)
    return encode_response(ApiKey.API_VERSIONS, exc.correlation_id, body)


async def _await_first_update_metadata(services: BrokerServices) -> None:
    """Hold Metadata until the controller's first UpdateMetadata, for a bounded time.

    Before it, this broker knows no brokers and no controller. A client answered
    that way may never ask again: librdkafka's admin client then fails with
    "Failed while waiting for controller". The window is the moment between the
    listener opening and the controller's first UpdateMetadata at start-up.
    """
    deadline = time.monotonic() + FIRST_UPDATE_METADATA_WAIT_MS / 1000
    while services.metadata_cache.controller_id is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        await services.admin.metadata_cache_changed(remaining)


async def handle_metadata(services: BrokerServices, ctx: RequestContext, request) -> object:
    cache = services.metadata_cache
    if cache.controller_id is None:
        await _await_first_update_metadata(services)
    cls = response_class(ApiKey.METADATA, ctx.api_version)
    broker_cls = nested(cls, "MetadataResponseBroker")
    topic_cls = nested(cls, "MetadataResponseTopic")
    part_cls = nested(cls, "MetadataResponsePartition")
    if request.topics is None or (ctx.api_version == 0 and not request.topics):
        names = cache.topics()
    else:
        names = [str(t.name) for t in request.topics]
    allow_auto = bool(getattr(request, "allow_auto_topic_creation", True))
    topics = []
    for name in names:
        partitions = cache.partitions.get(name)
        if partitions is None:
            error = ErrorCode.unknown_topic_or_partition
            if allow_auto and services.config.auto_create_topics_enable and request.topics:
                error = await services.admin.auto_create_topic(name)
            topics.append(
                make(
                    topic_cls,
                    error_code=error,
                    name=name,
                    is_internal=False,
                    partitions=(),
                    topic_authorized_operations=-2147483648,
                )
            )
            continue
        parts = []
        for index in sorted(partitions):
            info = partitions[index]
            live = cache.brokers
            offline = tuple(r for r in info.replicas if r not in live)
            leader_ok = info.leader >= 0 and info.leader in live
            parts.append(
                make(
                    part_cls,
                    error_code=ErrorCode.none if leader_ok else ErrorCode.leader_not_available,
                    partition_index=index,
                    leader_id=info.leader if leader_ok else -1,
                    leader_epoch=info.leader_epoch,
                    replica_nodes=info.replicas,
                    isr_nodes=info.isr,
                    offline_replicas=offline,
                )
            )
        topics.append(
            make(
                topic_cls,
                error_code=ErrorCode.none,
                name=name,
                is_internal=False,
                partitions=tuple(parts),
                topic_authorized_operations=-2147483648,
            )
        )
    brokers = tuple(
        make(broker_cls, node_id=b.broker_id, host=b.host, port=b.port, rack=b.rack)
        for b in cache.brokers.values()
    )
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        brokers=brokers,
        cluster_id=services.admin.cluster_id,
        controller_id=cache.controller_id if cache.controller_id is not None else -1,
        topics=tuple(topics),
        cluster_authorized_operations=-2147483648,
    )
