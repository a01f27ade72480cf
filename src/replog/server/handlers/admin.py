"""CreateTopics and DeleteTopics (DescribeConfigs is in ``configs``, InitProducerId in
``producers``)."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from replog.protocol.apis import ApiKey, make, nested
from replog.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from replog.server.admin import Outcome, TopicSpec
from replog.server.dynamic_config import describe_topic, sanitize_topic_config
from replog.server.handlers.context import NO_THROTTLE, BrokerServices, response_class
from replog.server.network import RequestContext

# CreateTopics v5+ answers each created topic's partitions, replication factor and
# configuration (KIP-525); v7 its id (KIP-516). DeleteTopics v6 names topics by id.
FIRST_CREATE_CONFIGS_VERSION = 5
FIRST_DELETE_BY_ID_VERSION = 6


async def handle_create_topics(services: BrokerServices, ctx: RequestContext, request) -> object:
    cls = response_class(ApiKey.CREATE_TOPICS, ctx.api_version)
    result_cls = nested(cls, "CreatableTopicResult")
    config_cls = nested(cls, "CreatableTopicConfigs") if ctx.api_version >= 5 else None
    specs = [
        TopicSpec(
            name=str(t.name),
            num_partitions=int(t.num_partitions),
            replication_factor=int(t.replication_factor),
            assignments={
                int(a.partition_index): [int(b) for b in a.broker_ids] for a in t.assignments
            },
            configs={str(c.name): c.value for c in t.configs},
        )
        for t in request.topics
    ]
    timeout_ms = int(request.timeout.total_seconds() * 1000)
    # Kafka: Create on the cluster, or else on each topic.
    cluster_create = services.allowed(ctx, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)
    permitted = [
        cluster_create or services.allowed(ctx, AclOperation.CREATE, ResourceType.TOPIC, s.name)
        for s in specs
    ]
    created = iter(
        await services.admin.create_topics(
            [s for s, ok in zip(specs, permitted, strict=True) if ok],
            timeout_ms,
            bool(request.validate_only),
        )
    )
    refused = Outcome(ErrorCode.topic_authorization_failed, "Authorization failed.", -1, -1)
    outcomes = [next(created) if ok else refused for ok in permitted]
    results = []
    for spec, outcome in zip(specs, outcomes, strict=True):
        configs = None
        if config_cls is not None and outcome.error == ErrorCode.none:
            overrides, _ = sanitize_topic_config(
                {k: v for k, v in spec.configs.items() if v is not None}
            )
            # The topic's effective configuration, with sources as DescribeConfigs gives
            # them (Kafka ``ConfigHelper.createTopicConfigEntry``).
            configs = tuple(
                config_cls(
                    name=entry.name,
                    value=entry.value,
                    read_only=entry.read_only,
                    config_source=int(entry.source),
                    is_sensitive=entry.is_sensitive,
                )
                for entry in describe_topic(services.configs.layers, overrides)
            )
        results.append(
            make(
                result_cls,
                name=spec.name,
                topic_id=outcome.topic_id,
                error_code=outcome.error,
                error_message=outcome.message,
                topic_config_error_code=0,
                num_partitions=outcome.num_partitions,
                replication_factor=outcome.replication_factor,
                configs=configs,
            )
        )
    return make(cls, throttle_time=NO_THROTTLE, topics=tuple(results))


async def handle_delete_topics(services: BrokerServices, ctx: RequestContext, request) -> object:
    cls = response_class(ApiKey.DELETE_TOPICS, ctx.api_version)
    result_cls = nested(cls, "DeletableTopicResult")
    cache = services.metadata_cache
    # (name, id, error) per entry: v6 names a topic by name or by id, never both.
    entries: list[tuple[str | None, uuid.UUID | None, ErrorCode | None, str | None]] = []
    if ctx.api_version >= FIRST_DELETE_BY_ID_VERSION:
        for t in request.topics:
            if (t.name is None) == (t.topic_id is None):
                entries.append(
                    (
                        t.name,
                        t.topic_id,
                        ErrorCode.invalid_request,
                        "give either a topic name or a topic id",
                    )
                )
            elif t.topic_id is not None:
                name = await services.admin.topic_name_for_id(t.topic_id)
                if name is None:
                    entries.append(
                        (None, t.topic_id, ErrorCode.unknown_topic_id, "no topic has this id")
                    )
                else:
                    entries.append((name, t.topic_id, None, None))
            else:
                entries.append((str(t.name), cache.topic_id(str(t.name)), None, None))
    else:
        entries = [(str(n), cache.topic_id(str(n)), None, None) for n in request.topic_names]
    entries = [
        (name, topic_id, ErrorCode.topic_authorization_failed, "Authorization failed.")
        if error is None
        and name is not None
        and not services.allowed(ctx, AclOperation.DELETE, ResourceType.TOPIC, name)
        else (name, topic_id, error, message)
        for name, topic_id, error, message in entries
    ]
    to_delete = [name for name, _, error, _ in entries if error is None and name is not None]
    timeout_ms = int(request.timeout.total_seconds() * 1000)
    outcomes = dict(
        zip(to_delete, await services.admin.delete_topics(to_delete, timeout_ms), strict=True)
    )
    results = []
    for name, topic_id, error, message in entries:
        if error is None and name is not None:
            error, message = outcomes[name]
        results.append(
            make(result_cls, name=name, topic_id=topic_id, error_code=error, error_message=message)
        )
    return make(cls, throttle_time=NO_THROTTLE, responses=tuple(results))
