"""JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups and ListGroups: the
classic group protocol (the rules live in ``coordinator.group.classic_group_service``).

Bad input is answered with Kafka's error codes and touches no other group: an empty group
id (INVALID_GROUP_ID), a session timeout outside ``group.min/max.session.timeout.ms``
(INVALID_SESSION_TIMEOUT), an unknown member (UNKNOWN_MEMBER_ID), a wrong generation
(ILLEGAL_GENERATION), mismatched protocols (INCONSISTENT_GROUP_PROTOCOL), a full group
(GROUP_MAX_SIZE_REACHED).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from replog.coordinator.group.classic_group import ClassicGroup, GroupState
from replog.coordinator.group.classic_group_service import (
    ClassicGroupService,
    JoinRequest,
)
from replog.coordinator.group.shard import GroupShard
from replog.protocol.apis import ApiKey, make, nested
from replog.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from replog.server.handlers.context import (
    NO_THROTTLE,
    UNKNOWN_AUTHORIZED_OPERATIONS,
    BrokerServices,
    response_class,
)
from replog.server.network import RequestContext

FIRST_REQUIRED_MEMBER_ID = 4  # KIP-394
FIRST_BATCHED_LEAVE = 3  # KIP-345


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000)


class GroupMembershipRequests:
    def __init__(self, services: BrokerServices, service: ClassicGroupService) -> None:
        self.services = services
        self.service = service

    def _may_read(self, ctx: RequestContext, group: str) -> bool:
        """Kafka: the group membership APIs need Read on the group."""
        return self.services.allowed(ctx, AclOperation.READ, ResourceType.GROUP, group)

    async def handle_join_group(self, ctx: RequestContext, request) -> object:
        version = ctx.api_version
        cls = response_class(ApiKey.JOIN_GROUP, version)
        member_cls = nested(cls, "JoinGroupResponseMember")
        if not self._may_read(ctx, str(request.group_id)):
            return make(
                cls,
                throttle_time=NO_THROTTLE,
                error_code=ErrorCode.group_authorization_failed,
                generation_id=-1,
                protocol_type=None,
                protocol_name=None if version >= 7 else "",
                leader="",
                skip_assignment=False,
                member_id="",
                members=(),
            )
        session_ms = _ms(request.session_timeout)
        rebalance = getattr(request, "rebalance_timeout", None)
        result = await self.service.join_group(
            JoinRequest(
                group_id=str(request.group_id),
                member_id=str(request.member_id or ""),
                group_instance_id=getattr(request, "group_instance_id", None),
                client_id=ctx.client_id or "",
                client_host="/" + ctx.peer.rsplit(":", 1)[0],
                session_timeout_ms=session_ms,
                rebalance_timeout_ms=session_ms if rebalance is None else _ms(rebalance),
                protocol_type=str(request.protocol_type),
                protocols=[(str(p.name), bytes(p.metadata)) for p in request.protocols],
                require_known_member_id=version >= FIRST_REQUIRED_MEMBER_ID,
                reason=getattr(request, "reason", None),
                api_version=version,
            )
        )
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=result.error,
            generation_id=result.generation_id,
            protocol_type=result.protocol_type,
            protocol_name=result.protocol_name
            if result.protocol_name is not None or version >= 7
            else "",
            leader=result.leader_id,
            skip_assignment=result.skip_assignment,
            member_id=result.member_id,
            members=tuple(
                make(member_cls, member_id=m, group_instance_id=i, metadata=data)
                for m, i, data in result.members
            ),
        )

    async def handle_sync_group(self, ctx: RequestContext, request) -> object:
        cls = response_class(ApiKey.SYNC_GROUP, ctx.api_version)
        if not self._may_read(ctx, str(request.group_id)):
            return make(
                cls,
                throttle_time=NO_THROTTLE,
                error_code=ErrorCode.group_authorization_failed,
                protocol_type=None,
                protocol_name=None,
                assignment=b"",
            )
        result = await self.service.sync_group(
            str(request.group_id),
            int(request.generation_id),
            str(request.member_id),
            getattr(request, "group_instance_id", None),
            getattr(request, "protocol_type", None),
            getattr(request, "protocol_name", None),
            {str(a.member_id): bytes(a.assignment) for a in request.assignments},
        )
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=result.error,
            protocol_type=result.protocol_type,
            protocol_name=result.protocol_name,
            assignment=result.assignment,
        )

    async def handle_heartbeat(self, ctx: RequestContext, request) -> object:
        cls = response_class(ApiKey.HEARTBEAT, ctx.api_version)
        if not self._may_read(ctx, str(request.group_id)):
            return make(
                cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.group_authorization_failed
            )
        error = self.service.heartbeat(
            str(request.group_id),
            int(request.generation_id),
            str(request.member_id),
            getattr(request, "group_instance_id", None),
        )
        return make(cls, throttle_time=NO_THROTTLE, error_code=error)

    async def handle_leave_group(self, ctx: RequestContext, request) -> object:
        version = ctx.api_version
        cls = response_class(ApiKey.LEAVE_GROUP, version)
        if not self._may_read(ctx, str(request.group_id)):
            return make(
                cls,
                throttle_time=NO_THROTTLE,
                error_code=ErrorCode.group_authorization_failed,
                members=(),
            )
        if version < FIRST_BATCHED_LEAVE:
            error, results = await self.service.leave(
                str(request.group_id), [(str(request.member_id), None)]
            )
            if error == ErrorCode.none and results:
                error = results[0][2]
            return make(cls, throttle_time=NO_THROTTLE, error_code=error)
        member_cls = nested(cls, "MemberResponse")
        error, results = await self.service.leave(
            str(request.group_id),
            [(str(m.member_id), m.group_instance_id) for m in request.members],
        )
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=error,
            members=tuple(
                make(member_cls, member_id=m, group_instance_id=i, error_code=e)
                for m, i, e in results
            ),
        )

    # -- DescribeGroups / ListGroups ------------------------------------------------------

    async def handle_describe_groups(self, ctx: RequestContext, request) -> object:
        cls = response_class(ApiKey.DESCRIBE_GROUPS, ctx.api_version)
        group_cls = nested(cls, "DescribedGroup")
        member_cls = nested(cls, "DescribedGroupMember")
        answers = []
        for group_id in request.groups:
            gid = str(group_id)

            def described(
                error: ErrorCode,
                state: str = "",
                protocol_type: str = "",
                protocol: str = "",
                members: tuple = (),
                *,
                group_id: str = gid,
            ) -> Any:
                return make(
                    group_cls,
                    error_code=error,
                    group_id=group_id,
                    group_state=state,
                    protocol_type=protocol_type,
                    protocol_data=protocol,
                    members=members,
                    authorized_operations=(
                        self.services.authorized_operations(ctx, ResourceType.GROUP, group_id)
                        if getattr(request, "include_authorized_operations", False)
                        else UNKNOWN_AUTHORIZED_OPERATIONS
                    ),
                )

            if not self.services.allowed(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, gid):
                answers.append(described(ErrorCode.group_authorization_failed))
                continue
            error, shard = self.services.group_coordinator.shard_for(gid)
            if shard is None:
                answers.append(described(error))
                continue
            group = shard.groups.get(gid)
            if group is None:
                # A group that only has offsets is Kafka's empty "simple" group.
                state = "Empty" if shard.offsets.has_offsets(gid) else "Dead"
                answers.append(described(ErrorCode.none, state))
                continue
            if not isinstance(group, ClassicGroup):
                answers.append(described(ErrorCode.group_id_not_found, "Dead"))
                continue
            stable = group.state is GroupState.STABLE and group.protocol_name is not None
            members = tuple(
                make(
                    member_cls,
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    member_metadata=m.metadata(group.protocol_name) if stable else b"",
                    member_assignment=m.assignment if stable else b"",
                )
                for m in group.members.values()
            )
            answers.append(
                described(
                    ErrorCode.none,
                    group.state_name(),
                    group.protocol_type,
                    group.protocol_name if stable else "",
                    members,
                )
            )
        return make(cls, throttle_time=NO_THROTTLE, groups=tuple(answers))

    async def handle_list_groups(self, ctx: RequestContext, request) -> object:
        cls = response_class(ApiKey.LIST_GROUPS, ctx.api_version)
        listed_cls = nested(cls, "ListedGroup")
        states = {s.lower() for s in getattr(request, "states_filter", ()) or ()}
        types = {t.lower() for t in getattr(request, "types_filter", ()) or ()}
        coordinator = self.services.group_coordinator
        error = ErrorCode.coordinator_load_in_progress if coordinator.loading() else ErrorCode.none
        listed = []
        # Kafka: Describe on the cluster lists every group, else those described allowed
        everything = self.services.allowed(
            ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME
        )
        for shard in coordinator.loaded_shards():
            for group_id, state, protocol_type, group_type in _groups_of(shard):
                if states and state.lower() not in states:
                    continue
                if not everything and not self.services.allowed(
                    ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id
                ):
                    continue
                if types and group_type.lower() not in types:
                    continue
                listed.append(
                    make(
                        listed_cls,
                        group_id=group_id,
                        protocol_type=protocol_type,
                        group_state=state,
                        group_type=group_type,
                    )
                )
        return make(cls, throttle_time=NO_THROTTLE, error_code=error, groups=tuple(listed))


def _groups_of(shard: GroupShard) -> list[tuple[str, str, str, str]]:
    """(group id, state, protocol type, group type) of every group of a shard, with the
    groups that only have committed offsets as empty classic groups."""
    out = [
        (group_id, group.state_name(), group.protocol_type, group.group_type)
        for group_id, group in shard.groups.items()
    ]
    known = set(shard.groups)
    out += [(g, "Empty", "", "classic") for g in shard.offsets.groups() if g not in known]
    return out
