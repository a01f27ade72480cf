"""CreateTopics, DeleteTopics, DescribeConfigs, InitProducerId."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog.protocol.apis import ApiKey, make, nested
from replog.server.admin import TopicSpec
from replog.server.handlers.context import NO_THROTTLE, BrokerServices, response_class
from replog.server.network import RequestContext

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
SOURCE_TOPIC_CONFIG = 1
SOURCE_STATIC_BROKER_CONFIG = 4
SOURCE_DEFAULT_CONFIG = 5


async def handle_create_topics(services: BrokerServices, ctx: RequestContext, request) -> object:
    cls = response_class(ApiKey.CREATE_TOPICS, ctx.api_version)
    result_cls = nested(cls, "CreatableTopicResult")
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
    outcomes = await services.admin.create_topics(specs, timeout_ms, bool(request.validate_only))
    results = []
    for spec, (error, message, partitions, replication) in zip(specs, outcomes, strict=True):
        results.append(
            make(
                result_cls,
                name=spec.name,
                error_code=error,
                error_message=message,
                topic_config_error_code=0,
                num_partitions=partitions,
                replication_factor=replication,
                configs=None,
            )
        )
    return make(cls, throttle_time=NO_THROTTLE, topics=tuple(results))


async def handle_delete_topics(services: BrokerServices, ctx: RequestContext, request) -> object:
    cls = response_class(ApiKey.DELETE_TOPICS, ctx.api_version)
    result_cls = nested(cls, "DeletableTopicResult")
    names = [str(n) for n in request.topic_names]
    timeout_ms = int(request.timeout.total_seconds() * 1000)
    outcomes = await services.admin.delete_topics(names, timeout_ms)
    results = tuple(
        make(result_cls, name=name, error_code=error, error_message=message)
        for name, (error, message) in zip(names, outcomes, strict=True)
    )
    return make(cls, throttle_time=NO_THROTTLE, responses=results)


async def handle_describe_configs(services: BrokerServices, ctx: RequestContext, request) -> object:
    cls = response_class(ApiKey.DESCRIBE_CONFIGS, ctx.api_version)
    result_cls = nested(cls, "DescribeConfigsResult")
    entry_cls = nested(cls, "DescribeConfigsResourceResult")
    results = []
    for resource in request.resources:
        rtype = int(resource.resource_type)
        name = str(resource.resource_name)
        wanted = None if resource.configuration_keys is None else set(resource.configuration_keys)
        error, message, entries = ErrorCode.none, None, []
        if rtype == RESOURCE_TOPIC:
            found = await services.admin.describe_topic_config(name)
            if found is None:
                error, message = (
                    ErrorCode.unknown_topic_or_partition,
                    f"topic {name!r} does not exist",
                )
            else:
                entries = [
                    (key, value, SOURCE_TOPIC_CONFIG if overridden else SOURCE_DEFAULT_CONFIG)
                    for key, (value, overridden) in sorted(found.items())
                ]
        elif rtype == RESOURCE_BROKER:
            if name not in ("", str(services.config.broker_id)):
                error, message = ErrorCode.invalid_request, f"broker {name!r} is not this broker"
            else:
                entries = [
                    (key, value, SOURCE_STATIC_BROKER_CONFIG)
                    for key, value in sorted(services.config.as_properties().items())
                ]
        else:
            error, message = ErrorCode.invalid_request, f"unsupported resource type {rtype}"
        configs = tuple(
            make(
                entry_cls,
                name=key,
                value=value,
                read_only=rtype == RESOURCE_BROKER,
                config_source=source,
                is_default=source == SOURCE_DEFAULT_CONFIG,
                is_sensitive=False,
                synonyms=(),
                config_type=0,
                documentation=None,
            )
            for key, value, source in entries
            if wanted is None or key in wanted
        )
        results.append(
            make(
                result_cls,
                error_code=error,
                error_message=message,
                resource_type=rtype,
                resource_name=name,
                configs=configs,
            )
        )
    return make(cls, throttle_time=NO_THROTTLE, results=tuple(results))


async def handle_init_producer_id(services: BrokerServices, ctx: RequestContext, request) -> object:
    cls = response_class(ApiKey.INIT_PRODUCER_ID, ctx.api_version)
    if request.transactional_id is not None:
        # Transactions are not implemented; idempotent producers are.
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.transactional_id_authorization_failed,
            producer_id=-1,
            producer_epoch=-1,
        )
    producer_id = await services.producer_ids.generate_producer_id()
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        producer_id=producer_id,
        producer_epoch=0,
    )
