"""ApiVersions and Metadata."""

from __future__ import annotations

import functools
import logging
import time
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from replog.common.topics import INTERNAL_TOPICS
from replog.protocol import apis, metadata_codec
from replog.protocol.apis import ApiKey, make, nested
from replog.protocol.frames import EncodedBody, UnsupportedVersion, encode_response
from replog.security.acl import AclOperation, ResourceType
from replog.server.handlers.cluster import authorized_cluster_operations
from replog.server.handlers.context import (
    NO_THROTTLE,
    UNKNOWN_AUTHORIZED_OPERATIONS,
    BrokerServices,
    response_class,
)
from replog.server.metadata_cache import MetadataCache
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


@functools.cache
def _api_versions_encoded(version: int) -> EncodedBody:
    """The ApiVersions answer at ``version``, encoded once: it is the same for every
    connection (the versions served are constants). Header v0 whatever the version
    (KIP-511), hence not ``flexible``."""
    body = _api_versions_body(version, ErrorCode.none)
    frame = encode_response(ApiKey.API_VERSIONS, 0, body)
    return EncodedBody(frame[8:], flexible=False)  # less the size and correlation id


async def handle_api_versions(services: BrokerServices, ctx: RequestContext, request) -> object:
    return _api_versions_encoded(ctx.api_version)


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


# Metadata v10 adds topic ids to the response (and lets request topics carry one); v12
# is the first version where a request topic may be named by its id alone (KIP-516).
FIRST_TOPIC_ID_LOOKUP_VERSION = 12


def requested_topics(
    cache: MetadataCache, version: int, topics: tuple[object, ...]
) -> list[tuple[str | None, uuid.UUID | None, ErrorCode]]:
    """``(name, topic id, error)`` of each topic a Metadata request names (Kafka's
    ``handleTopicMetadataRequest``): by name, or from v12 on by id alone (an id the
    cache does not know is UNKNOWN_TOPIC_ID). Before v12 a topic must have a name and
    no id (INVALID_REQUEST)."""
    found: list[tuple[str | None, uuid.UUID | None, ErrorCode]] = []
    for topic in topics:
        name = getattr(topic, "name", None)
        topic_id = getattr(topic, "topic_id", None)
        if version < FIRST_TOPIC_ID_LOOKUP_VERSION and (name is None or topic_id is not None):
            found.append((name, topic_id, ErrorCode.invalid_request))
        elif name is not None:
            found.append((str(name), None, ErrorCode.none))
        elif topic_id is None:
            found.append((None, None, ErrorCode.invalid_request))
        else:
            known = cache.topic_name(topic_id)
            if known is None:
                found.append((None, topic_id, ErrorCode.unknown_topic_id))
            else:
                found.append((known, topic_id, ErrorCode.none))
    return found


async def handle_metadata(services: BrokerServices, ctx: RequestContext, request) -> object:
    cache = services.metadata_cache
    if cache.controller_id is None:
        await _await_first_update_metadata(services)
    version = ctx.api_version
    light = version >= metadata_codec.FIRST_FLEXIBLE  # the hand encoder's versions
    if light:  # plain objects for the hand encoder (kio's frozen ones cost more to build)
        cls: Any = metadata_codec.MetadataResponse
        broker_cls: Any = metadata_codec.MetadataBroker
        topic_cls: Any = metadata_codec.MetadataTopic
        part_cls: Any = metadata_codec.MetadataPartition
        make = _build
    else:
        cls = response_class(ApiKey.METADATA, version)
        broker_cls = nested(cls, "MetadataResponseBroker")
        topic_cls = nested(cls, "MetadataResponseTopic")
        part_cls = nested(cls, "MetadataResponsePartition")
        make = apis.make
    all_topics = request.topics is None or (version == 0 and not request.topics)

    def describable(name: str) -> bool:
        return services.allowed(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name)

    if all_topics:  # Kafka leaves out the topics the principal may not describe
        wanted = [(name, None, ErrorCode.none) for name in cache.topics() if describable(name)]
    else:
        wanted = [
            (name, asked_id, error)
            if error != ErrorCode.none or name is None or describable(name)
            else (name, asked_id, ErrorCode.topic_authorization_failed)
            for name, asked_id, error in requested_topics(cache, version, request.topics)
        ]
    allow_auto = bool(getattr(request, "allow_auto_topic_creation", True))
    # No UpdateMetadata yet (a broker just restarted while there is no controller): it
    # knows no topic, which does not make them unknown. UNKNOWN_TOPIC_OR_PARTITION made
    # librdkafka drop a topic's partitions ("partition count changed from 6 to 0") and
    # hold the messages for them until the end (campaign seed 16); LEADER_NOT_AVAILABLE
    # is retriable and leaves the client's metadata as it was.
    told = cache.controller_id is not None
    topics = []
    for name, asked_id, error in wanted:
        partitions = cache.partitions.get(name) if name is not None else None
        if error == ErrorCode.none and partitions is None and not told:
            error = ErrorCode.leader_not_available
        if error == ErrorCode.none and partitions is None:
            error = ErrorCode.unknown_topic_or_partition
            if (
                allow_auto
                and services.config.auto_create_topics_enable
                and not all_topics
                and name not in INTERNAL_TOPICS  # FindCoordinator creates it, compacted
            ):
                error = await services.admin.auto_create_topic(name)
        if error != ErrorCode.none:
            topics.append(
                make(
                    topic_cls,
                    error_code=error,
                    name=name
                    if name is not None or version >= FIRST_TOPIC_ID_LOOKUP_VERSION
                    else "",
                    topic_id=asked_id if error == ErrorCode.unknown_topic_id else None,
                    is_internal=name in INTERNAL_TOPICS,
                    partitions=(),
                    topic_authorized_operations=UNKNOWN_AUTHORIZED_OPERATIONS,
                )
            )
            continue
        parts = []
        live = cache.brokers
        for index in sorted(partitions):
            info = partitions[index]
            offline = tuple(r for r in info.replicas if r not in live or r in info.offline_replicas)
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
                topic_id=cache.topic_id(name),
                is_internal=name in INTERNAL_TOPICS,
                partitions=tuple(parts),
                topic_authorized_operations=(
                    services.authorized_operations(ctx, ResourceType.TOPIC, name)
                    if getattr(request, "include_topic_authorized_operations", False)
                    else UNKNOWN_AUTHORIZED_OPERATIONS
                ),
            )
        )
    brokers = tuple(
        make(broker_cls, node_id=b.broker_id, host=b.host, port=b.port, rack=b.rack)
        for b in cache.brokers_for(ctx.listener).values()
    )
    body = make(
        cls,
        throttle_time=NO_THROTTLE,
        brokers=brokers,
        cluster_id=services.admin.cluster_id,
        controller_id=cache.controller_id if cache.controller_id is not None else -1,
        topics=tuple(topics),
        cluster_authorized_operations=(
            authorized_cluster_operations(services, ctx)
            if getattr(request, "include_cluster_authorized_operations", False)
            else UNKNOWN_AUTHORIZED_OPERATIONS
        ),
        error_code=ErrorCode.none,  # v13: no request-wide error (REBOOTSTRAP_REQUIRED) here
    )
    if light:
        return EncodedBody(metadata_codec.encode(version, body), flexible=True)
    return body


def _build(cls: Any, **values: Any) -> Any:
    """``apis.make`` for the hand encoder's classes, which have every version's fields."""
    return cls(**values)
