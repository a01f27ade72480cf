"""DescribeConfigs, AlterConfigs, IncrementalAlterConfigs (Kafka ``ConfigHelper``,
``ZkAdminManager``): topic and broker resources; the work is ``ConfigManager``'s."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog.protocol.apis import ApiKey, make, nested
from replog.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from replog.server.dynamic_config import AlterOp, OpType, duplicate_resources
from replog.server.handlers.context import NO_THROTTLE, BrokerServices, response_class
from replog.server.network import RequestContext

DUPLICATE_RESOURCE = "Each resource must appear at most once."


TOPIC_CONFIG_RESOURCE = 2  # (broker and broker-logger configs are cluster resources)


def _config_refusal(
    services: BrokerServices, ctx: RequestContext, rtype: int, name: str, operation: AclOperation
) -> ErrorCode | None:
    """Kafka: DescribeConfigs/AlterConfigs on the topic, or on the cluster for a broker."""
    if rtype == TOPIC_CONFIG_RESOURCE:
        if services.allowed(ctx, operation, ResourceType.TOPIC, name):
            return None
        return ErrorCode.topic_authorization_failed
    if services.allowed(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME):
        return None
    return ErrorCode.cluster_authorization_failed


async def handle_describe_configs(services: BrokerServices, ctx: RequestContext, request) -> object:
    cls = response_class(ApiKey.DESCRIBE_CONFIGS, ctx.api_version)
    result_cls = nested(cls, "DescribeConfigsResult")
    entry_cls = nested(cls, "DescribeConfigsResourceResult")
    synonym_cls = nested(cls, "DescribeConfigsSynonym")
    include_synonyms = bool(getattr(request, "include_synonyms", False))
    include_documentation = bool(getattr(request, "include_documentation", False))
    results = []
    for resource in request.resources:
        rtype, name = int(resource.resource_type), str(resource.resource_name)
        refused = _config_refusal(services, ctx, rtype, name, AclOperation.DESCRIBE_CONFIGS)
        if refused is not None:
            results.append(
                make(
                    result_cls,
                    error_code=refused,
                    error_message=None,
                    resource_type=rtype,
                    resource_name=name,
                    configs=(),
                )
            )
            continue
        found = await services.configs.describe(
            rtype, name, resource.configuration_keys, include_synonyms, include_documentation
        )
        configs = tuple(
            make(
                entry_cls,
                name=entry.name,
                value=entry.value,
                read_only=entry.read_only,
                config_source=int(entry.source),
                is_sensitive=entry.is_sensitive,
                synonyms=tuple(
                    make(synonym_cls, name=s.name, value=s.value, source=int(s.source))
                    for s in entry.synonyms
                ),
                config_type=int(entry.config_type),
                documentation=entry.documentation,
            )
            for entry in found.entries
        )
        results.append(
            make(
                result_cls,
                error_code=found.error,
                error_message=found.message,
                resource_type=rtype,
                resource_name=name,
                configs=configs,
            )
        )
    return make(cls, throttle_time=NO_THROTTLE, results=tuple(results))


async def _alter(
    services: BrokerServices, ctx: RequestContext, request, api_key: ApiKey, incremental: bool
) -> object:
    cls = response_class(api_key, ctx.api_version)
    result_cls = nested(cls, "AlterConfigsResourceResponse")
    keys = [(int(r.resource_type), str(r.resource_name)) for r in request.resources]
    twice = duplicate_resources(keys)
    responses = []
    for resource, key in zip(request.resources, keys, strict=True):
        refused = _config_refusal(services, ctx, key[0], key[1], AclOperation.ALTER_CONFIGS)
        if key in twice:
            error, message = ErrorCode.invalid_request, DUPLICATE_RESOURCE
        elif refused is not None:
            error, message = refused, None
        else:
            ops = [
                AlterOp(
                    str(c.name),
                    int(c.config_operation) if incremental else int(OpType.SET),
                    None if c.value is None else str(c.value),
                )
                for c in resource.configs
            ]
            outcome = await services.configs.alter(
                key[0],
                key[1],
                ops,
                incremental=incremental,
                validate_only=bool(request.validate_only),
            )
            error, message = outcome.error, outcome.message
        responses.append(
            make(
                result_cls,
                error_code=error,
                error_message=message,
                resource_type=key[0],
                resource_name=key[1],
            )
        )
    return make(cls, throttle_time=NO_THROTTLE, responses=tuple(responses))


async def handle_alter_configs(services: BrokerServices, ctx: RequestContext, request) -> object:
    """Legacy AlterConfigs: each resource's whole dynamic config is replaced."""
    return await _alter(services, ctx, request, ApiKey.ALTER_CONFIGS, incremental=False)


async def handle_incremental_alter_configs(
    services: BrokerServices, ctx: RequestContext, request
) -> object:
    """KIP-339: SET, DELETE, APPEND and SUBTRACT single keys of a resource."""
    return await _alter(services, ctx, request, ApiKey.INCREMENTAL_ALTER_CONFIGS, incremental=True)
