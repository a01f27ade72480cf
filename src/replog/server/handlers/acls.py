"""CreateAcls, DescribeAcls and DeleteAcls (v1-3), ZooKeeper mode, as Kafka's ``AclApis``.

Without an authorizer every one answers SECURITY_DISABLED. Describing needs Describe on
the cluster, creating and deleting Alter on the cluster (CLUSTER_AUTHORIZATION_FAILED).
A binding Kafka would not store (a filter's ANY or MATCH values, an unknown operation,
a cluster resource not named ``kafka-cluster``, a principal without ``TYPE:``) gets
INVALID_REQUEST with the reason; nothing of it is written.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from replog.protocol.apis import ApiKey, make, nested
from replog.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from replog.server.handlers.context import NO_THROTTLE, BrokerServices, response_class
from replog.server.network import RequestContext
from replog.zk import acls as zk_acls


def _binding(c: Any) -> AclBinding | str:
    try:
        b = AclBinding(
            ResourceType(int(c.resource_type)),
            str(c.resource_name),
            PatternType(int(getattr(c, "resource_pattern_type", PatternType.LITERAL))),
            str(c.principal),
            str(c.host),
            AclOperation(int(c.operation)),
            AclPermissionType(int(c.permission_type)),
        )
    except ValueError as exc:
        return str(exc)
    return zk_acls.valid_binding(b) or b


def _filter(f: Any) -> AclBindingFilter | str:
    try:
        return AclBindingFilter(
            ResourceType(int(f.resource_type_filter)),
            f.resource_name_filter,
            PatternType(int(getattr(f, "pattern_type_filter", PatternType.LITERAL))),
            f.principal_filter,
            f.host_filter,
            AclOperation(int(f.operation)),
            AclPermissionType(int(f.permission_type)),
        )
    except ValueError as exc:
        return str(exc)


class AclRequests:
    def __init__(self, services: BrokerServices) -> None:
        self.services = services

    def _refused(
        self, ctx: RequestContext, operation: AclOperation
    ) -> tuple[ErrorCode, str] | None:
        if self.services.authorizer is None:
            return ErrorCode.security_disabled, "No Authorizer is configured on the broker"
        if not self.services.allowed(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME):
            return ErrorCode.cluster_authorization_failed, None
        return None

    async def handle_create_acls(self, ctx: RequestContext, request: Any) -> Any:
        cls = response_class(ApiKey.CREATE_ACLS, ctx.api_version)
        result_cls = nested(cls, "AclCreationResult")
        refused = self._refused(ctx, AclOperation.ALTER)
        if refused is not None:
            results = tuple(
                make(result_cls, error_code=refused[0], error_message=refused[1])
                for _ in request.creations
            )
            return make(cls, throttle_time=NO_THROTTLE, results=results)
        bindings = [_binding(c) for c in request.creations]
        valid = [b for b in bindings if isinstance(b, AclBinding)]
        authorizer = self.services.authorizer
        assert authorizer is not None
        if valid:
            await asyncio.to_thread(zk_acls.add, authorizer.zk.client, valid)
            await authorizer.reload()
        results = tuple(
            make(result_cls, error_code=ErrorCode.none, error_message=None)
            if isinstance(b, AclBinding)
            else make(result_cls, error_code=ErrorCode.invalid_request, error_message=b)
            for b in bindings
        )
        return make(cls, throttle_time=NO_THROTTLE, results=results)

    async def handle_describe_acls(self, ctx: RequestContext, request: Any) -> Any:
        cls = response_class(ApiKey.DESCRIBE_ACLS, ctx.api_version)
        refused = self._refused(ctx, AclOperation.DESCRIBE)
        f = _filter(request)
        if refused is None and isinstance(f, str):
            refused = (ErrorCode.invalid_request, f)
        if refused is not None:
            return make(
                cls,
                throttle_time=NO_THROTTLE,
                error_code=refused[0],
                error_message=refused[1],
                resources=(),
            )
        authorizer = self.services.authorizer
        assert authorizer is not None and isinstance(f, AclBindingFilter)
        by_resource: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
        for b in authorizer.acls:
            if f.matches(b):
                by_resource.setdefault(
                    (b.resource_type, b.resource_name, b.pattern_type), []
                ).append(b)
        resource_cls = nested(cls, "DescribeAclsResource")
        description_cls = nested(cls, "AclDescription")
        resources = tuple(
            make(
                resource_cls,
                resource_type=int(rtype),
                resource_name=name,
                pattern_type=int(pattern),
                acls=tuple(
                    make(
                        description_cls,
                        principal=b.principal,
                        host=b.host,
                        operation=int(b.operation),
                        permission_type=int(b.permission),
                    )
                    for b in found
                ),
            )
            for (rtype, name, pattern), found in sorted(by_resource.items())
        )
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            error_message=None,
            resources=resources,
        )

    async def handle_delete_acls(self, ctx: RequestContext, request: Any) -> Any:
        cls = response_class(ApiKey.DELETE_ACLS, ctx.api_version)
        result_cls = nested(cls, "DeleteAclsFilterResult")
        matching_cls = nested(cls, "DeleteAclsMatchingAcl")
        refused = self._refused(ctx, AclOperation.ALTER)
        if refused is not None:
            results = tuple(
                make(result_cls, error_code=refused[0], error_message=refused[1], matching_acls=())
                for _ in request.filters
            )
            return make(cls, throttle_time=NO_THROTTLE, filter_results=results)
        filters = [_filter(f) for f in request.filters]
        valid = [f for f in filters if isinstance(f, AclBindingFilter)]
        authorizer = self.services.authorizer
        assert authorizer is not None
        deleted = await asyncio.to_thread(zk_acls.remove, authorizer.zk.client, valid)
        await authorizer.reload()
        found = iter(deleted)
        results = []
        for f in filters:
            if isinstance(f, str):
                results.append(
                    make(
                        result_cls,
                        error_code=ErrorCode.invalid_request,
                        error_message=f,
                        matching_acls=(),
                    )
                )
                continue
            results.append(
                make(
                    result_cls,
                    error_code=ErrorCode.none,
                    error_message=None,
                    matching_acls=tuple(
                        make(
                            matching_cls,
                            error_code=ErrorCode.none,
                            error_message=None,
                            resource_type=int(b.resource_type),
                            resource_name=b.resource_name,
                            pattern_type=int(b.pattern_type),
                            principal=b.principal,
                            host=b.host,
                            operation=int(b.operation),
                            permission_type=int(b.permission),
                        )
                        for b in next(found)
                    ),
                )
            )
        return make(cls, throttle_time=NO_THROTTLE, filter_results=tuple(results))
