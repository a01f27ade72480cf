"""ConsumerGroupHeartbeat and ConsumerGroupDescribe: the KIP-848 consumer group protocol.

ConsumerGroupHeartbeat (v0-1; Kafka ``GroupCoordinatorService.consumerGroupHeartbeat``):
a malformed request is refused before the coordinator is looked up (an empty group id,
a v1 request without a member id, a join without its rebalance timeout or subscription:
INVALID_REQUEST; an unknown server assignor UNSUPPORTED_ASSIGNOR; a regular expression
Python cannot read INVALID_REGULAR_EXPRESSION); a group whose coordinator is elsewhere
or still loading gets NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS; the rest is the
group coordinator's (``coordinator.group.consumer_group_runtime``). The client's host
is its address as Kafka spells it (``/127.0.0.1``). With ``consumer`` left out of
``group.coordinator.rebalance.protocols`` the API answers UNSUPPORTED_VERSION.

ConsumerGroupDescribe (v0-1): per group id its state, epochs, assignor and members with
their current and target assignments (topic ids and names); an empty id is
INVALID_GROUP_ID, an unknown id or a classic group's GROUP_ID_NOT_FOUND.

ACLs, as Kafka checks them: a heartbeat needs Read on the group
(GROUP_AUTHORIZATION_FAILED) and Describe on every topic it names
(TOPIC_AUTHORIZATION_FAILED, naming them); a describe needs Describe on the group, and
``authorized_operations`` holds those of READ, DELETE and DESCRIBE the principal has.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterable

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from replog.common.topics import INTERNAL_TOPICS
from replog.coordinator.group import consumer_group_heartbeat as hb
from replog.coordinator.group import consumer_records_codec as cr
from replog.coordinator.group.consumer_group import ConsumerGroup, topic_partitions
from replog.coordinator.group.consumer_group_runtime import ConsumerGroupRuntime
from replog.protocol.apis import ApiKey, make, nested
from replog.security.acl import AclOperation, ResourceType
from replog.server.handlers.context import (
    NO_THROTTLE,
    UNKNOWN_AUTHORIZED_OPERATIONS,
    BrokerServices,
    response_class,
)
from replog.server.network import RequestContext

CONSUMER_PROTOCOL = "consumer"
CONSUMER_MEMBER_TYPE = 1


class MetadataTopicImage:
    """The broker's metadata cache as the group coordinator's view of topics."""

    def __init__(self, cache) -> None:
        self._cache = cache

    def topic(self, name: str) -> cr.TopicMetadata | None:
        topic_id = self._cache.topic_id(name)
        partitions = self._cache.partitions.get(name)
        if topic_id is None or not partitions or name in INTERNAL_TOPICS:
            return None
        return cr.TopicMetadata(topic_id, name, len(partitions))

    def topic_names(self) -> Iterable[str]:
        return self._cache.partitions.keys()


def _ms(value) -> int:
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)


def _timedelta(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


def _client_host(peer: str) -> str:
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return "/" + host.strip("[]")


def heartbeat_request(ctx: RequestContext, request) -> hb.HeartbeatRequest:
    names = request.subscribed_topic_names
    owned = request.topic_partitions
    return hb.HeartbeatRequest(
        group_id=str(request.group_id),
        member_id=str(request.member_id),
        member_epoch=int(request.member_epoch),
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=_ms(request.rebalance_timeout),
        subscribed_topic_names=None if names is None else tuple(str(n) for n in names),
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
        server_assignor=request.server_assignor,
        owned=None
        if owned is None
        else tuple(
            (tp.topic_id, tuple(int(p) for p in tp.partitions))
            for tp in owned
            if tp.topic_id is not None
        ),
        client_id=ctx.client_id or "",
        client_host=_client_host(ctx.peer),
        api_version=ctx.api_version,
    )


class ConsumerGroupRequests:
    """The KIP-848 handlers; one per broker."""

    def __init__(self, services: BrokerServices) -> None:
        self.services = services
        self.runtime = ConsumerGroupRuntime(
            services.group_coordinator, services.config, MetadataTopicImage(services.metadata_cache)
        )

    def _enabled(self) -> bool:
        protocols = self.services.config.group_coordinator_rebalance_protocols
        if isinstance(protocols, str):
            protocols = protocols.split(",")
        return CONSUMER_PROTOCOL in {p.strip() for p in protocols}

    async def handle_consumer_group_heartbeat(self, ctx: RequestContext, request) -> object:
        cls = response_class(ApiKey.CONSUMER_GROUP_HEARTBEAT, ctx.api_version)
        assignment_cls = nested(cls, "Assignment")
        tp_cls = nested(cls, "TopicPartitions")

        def answer(decision: hb.Decision) -> object:
            ok = decision.error == ErrorCode.none
            assignment = None
            if ok and decision.assignment is not None:
                assignment = make(
                    assignment_cls,
                    topic_partitions=tuple(
                        make(tp_cls, topic_id=t, partitions=tuple(ps))
                        for t, ps in topic_partitions(decision.assignment)
                    ),
                )
            return make(
                cls,
                throttle_time=NO_THROTTLE,
                error_code=decision.error,
                error_message=decision.message,
                member_id=decision.member_id if ok else None,
                member_epoch=decision.member_epoch if ok else 0,
                heartbeat_interval=_timedelta(
                    self.runtime.settings.heartbeat_interval_ms if ok else 0
                ),
                assignment=assignment,
            )

        if not self._enabled():
            return answer(hb.Decision(error=ErrorCode.unsupported_version))
        hb_request = heartbeat_request(ctx, request)
        invalid = hb.validate_request(hb_request, self.runtime.settings)
        if invalid is not None:
            return answer(invalid)
        allowed = self.services.allowed
        if not allowed(ctx, AclOperation.READ, ResourceType.GROUP, hb_request.group_id):
            return answer(hb.Decision(error=ErrorCode.group_authorization_failed))
        refused = sorted(
            t
            for t in hb_request.subscribed_topic_names or ()
            if not allowed(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, t)
        )
        if refused:
            return answer(
                hb.Decision(
                    error=ErrorCode.topic_authorization_failed,
                    message="Unauthorized topics: " + ", ".join(refused),
                )
            )
        error, shard = self.services.group_coordinator.shard_for(hb_request.group_id)
        if shard is None:
            return answer(hb.Decision(error=error))
        return answer(await self.runtime.heartbeat(shard, hb_request))

    async def handle_consumer_group_describe(self, ctx: RequestContext, request) -> object:
        cls = response_class(ApiKey.CONSUMER_GROUP_DESCRIBE, ctx.api_version)
        group_cls = nested(cls, "DescribedGroup")

        def operations(group_id: str) -> int:
            if not request.include_authorized_operations:
                return UNKNOWN_AUTHORIZED_OPERATIONS
            return self.services.authorized_operations(ctx, ResourceType.GROUP, group_id)

        def failed(group_id: str, error: ErrorCode, message: str | None = None) -> object:
            return make(
                group_cls,
                error_code=error,
                error_message=message,
                group_id=group_id,
                group_state="",
                group_epoch=0,
                assignment_epoch=0,
                assignor_name="",
                members=(),
                authorized_operations=operations(group_id),
            )

        described = []
        for group_id in request.group_ids:
            group_id = str(group_id)
            if not group_id:
                described.append(failed(group_id, ErrorCode.invalid_group_id))
                continue
            if not self.services.allowed(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
                described.append(failed(group_id, ErrorCode.group_authorization_failed))
                continue
            error, shard = self.services.group_coordinator.shard_for(group_id)
            if shard is None:
                described.append(failed(group_id, error))
                continue
            group = shard.groups.get(group_id)
            if not isinstance(group, ConsumerGroup):
                message = (
                    f"Group {group_id} not found."
                    if group is None
                    else f"Group {group_id} is not a consumer group."
                )
                described.append(failed(group_id, ErrorCode.group_id_not_found, message))
                continue
            described.append(self._describe(cls, group, operations(group_id)))
        return make(cls, throttle_time=NO_THROTTLE, groups=tuple(described))

    def _describe(self, cls, group: ConsumerGroup, operations: int) -> object:
        group_cls = nested(cls, "DescribedGroup")
        member_cls = nested(cls, "Member")
        assignment_cls = nested(cls, "Assignment")
        tp_cls = nested(cls, "TopicPartitions")
        cache = self.services.metadata_cache

        def name_of(topic_id: uuid.UUID) -> str:
            return group.topic_name(topic_id) or cache.topic_name(topic_id) or ""

        def assignment(partitions) -> object:
            return make(
                assignment_cls,
                topic_partitions=tuple(
                    make(tp_cls, topic_id=t, topic_name=name_of(t), partitions=tuple(ps))
                    for t, ps in topic_partitions(partitions)
                ),
            )

        members = tuple(
            make(
                member_cls,
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=tuple(m.subscribed_topic_names),
                subscribed_topic_regex=m.subscribed_topic_regex,
                assignment=assignment(m.assigned),
                target_assignment=assignment(group.target_assignment.get(m.member_id, {})),
                member_type=CONSUMER_MEMBER_TYPE,
            )
            for m in sorted(group.members.values(), key=lambda m: m.member_id)
        )
        return make(
            group_cls,
            error_code=ErrorCode.none,
            error_message=None,
            group_id=group.group_id,
            group_state=group.state_name(),
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=hb.preferred_assignor(group.members.values(), self.runtime.settings),
            members=members,
            authorized_operations=operations,
        )
