"""FindCoordinator, OffsetCommit, OffsetFetch, OffsetDelete and DeleteGroups.

FindCoordinator (Kafka ``KafkaApis.getCoordinator``): a group's coordinator is the
leader of its ``__consumer_offsets`` partition. The first request creates the topic
(``offsets.topic.num.partitions``, replication factor
``min(offsets.topic.replication.factor, live brokers)``, compacted) and answers
COORDINATOR_NOT_AVAILABLE until it has leaders. A transactional id's coordinator (key
type 1) is found by ``handlers.transactions``.

Offsets are committed with acks=all on that partition and acknowledged only then;
the groups' rules for who may commit live with each group type
(``Group.validate_offset_commit``). A group that only commits offsets (no members,
generation -1) needs no group object: its offsets are its only state, as Kafka's
"simple" consumer groups.
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from replog.common.topics import GROUP_METADATA_TOPIC_NAME
from replog.coordinator.group.coordinator import offset_commit_record, offset_tombstone
from replog.coordinator.group.group import Record
from replog.coordinator.group.offsets import CommittedOffset
from replog.coordinator.group.offsets_topic import offsets_topic_configs
from replog.coordinator.group.records import NO_EXPIRE_TIMESTAMP, OffsetCommitValue, storable
from replog.coordinator.group.shard import GroupShard
from replog.protocol.apis import ApiKey, make, nested
from replog.security.acl import AclOperation, ResourceType
from replog.server.handlers.context import NO_THROTTLE, BrokerServices, response_class
from replog.server.handlers.internal_topics import InternalTopic
from replog.server.handlers.transactions import TransactionRequests
from replog.server.network import RequestContext

log = logging.getLogger(__name__)

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
FIRST_BATCHED_FIND_COORDINATOR = 4
FIRST_BATCHED_OFFSET_FETCH = 8
FIRST_TOP_LEVEL_OFFSET_FETCH_ERROR = 2
FIRST_MEMBER_EPOCH_OFFSET_COMMIT = 9
NO_OFFSET = -1
NO_LEADER_EPOCH = -1


class GroupCoordinatorRequests:
    """The handlers that find a coordinator and read or write committed offsets."""

    def __init__(self, services: BrokerServices) -> None:
        self.services = services
        config = services.config
        self.offsets_topic = InternalTopic(
            services,
            GROUP_METADATA_TOPIC_NAME,
            lambda: (
                config.offsets_topic_num_partitions,
                config.offsets_topic_replication_factor,
                dict(offsets_topic_configs(config.offsets_topic_segment_bytes)),
            ),
        )
        self.transactions = TransactionRequests(services)  # FindCoordinator key type 1

    # -- FindCoordinator -----------------------------------------------------------------

    def _find(
        self, key_type: int, key: str, ctx: RequestContext
    ) -> tuple[ErrorCode, str | None, Any]:
        """(error, message, broker endpoint or None) for one coordinator key."""
        listener = ctx.listener
        if key_type == TRANSACTION_KEY_TYPE:
            return self.transactions.find_coordinator(key, ctx)
        if key_type != GROUP_KEY_TYPE:
            return ErrorCode.invalid_request, f"unknown coordinator key type {key_type}", None
        if not self.services.allowed(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, key):
            return ErrorCode.group_authorization_failed, None, None
        if not self.offsets_topic.exists():
            self.offsets_topic.ensure()
            return ErrorCode.coordinator_not_available, None, None
        cache = self.services.metadata_cache
        partition = self.services.group_coordinator.partition_for(key)
        info = cache.partition(GROUP_METADATA_TOPIC_NAME, partition)
        endpoint = None if info is None else cache.brokers_for(listener).get(info.leader)
        if endpoint is None:
            return ErrorCode.coordinator_not_available, None, None
        return ErrorCode.none, None, endpoint

    async def handle_find_coordinator(self, ctx: RequestContext, request) -> object:
        version = ctx.api_version
        cls = response_class(ApiKey.FIND_COORDINATOR, version)
        key_type = int(getattr(request, "key_type", GROUP_KEY_TYPE))
        if version < FIRST_BATCHED_FIND_COORDINATOR:
            error, message, node = self._find(key_type, str(request.key), ctx)
            return make(
                cls,
                throttle_time=NO_THROTTLE,
                error_code=error,
                error_message=message,
                node_id=-1 if node is None else node.broker_id,
                host="" if node is None else node.host,
                port=-1 if node is None else node.port,
            )
        coordinator_cls = nested(cls, "Coordinator")
        answers = []
        for key in request.coordinator_keys:
            error, message, node = self._find(key_type, str(key), ctx)
            answers.append(
                make(
                    coordinator_cls,
                    key=key,
                    node_id=-1 if node is None else node.broker_id,
                    host="" if node is None else node.host,
                    port=-1 if node is None else node.port,
                    error_code=error,
                    error_message=message,
                )
            )
        return make(cls, throttle_time=NO_THROTTLE, coordinators=tuple(answers))

    # -- OffsetCommit --------------------------------------------------------------------

    def _validate_commit(self, shard: GroupShard, request, version: int) -> ErrorCode:
        group_id = str(request.group_id)
        generation = int(request.generation_id_or_member_epoch)
        member_id = str(request.member_id or "")
        instance_id = getattr(request, "group_instance_id", None)
        group = shard.groups.get(group_id)
        if group is None:
            # A consumer outside group management (Kafka: an empty "simple" group).
            if generation < 0 and not member_id and instance_id is None:
                return ErrorCode.none
            if version >= FIRST_MEMBER_EPOCH_OFFSET_COMMIT:
                return ErrorCode.group_id_not_found
            return ErrorCode.illegal_generation
        return group.validate_offset_commit(member_id, generation, instance_id, version)

    async def handle_offset_commit(self, ctx: RequestContext, request) -> object:
        version = ctx.api_version
        cls = response_class(ApiKey.OFFSET_COMMIT, version)
        topic_cls = nested(cls, "OffsetCommitResponseTopic")
        part_cls = nested(cls, "OffsetCommitResponsePartition")
        s = self.services
        group_id = str(request.group_id)
        errors: dict[tuple[str, int], ErrorCode] = {}
        order: list[tuple[str, int]] = []
        group_error = ErrorCode.none
        shard = None
        if not group_id or not storable(group_id):
            group_error = ErrorCode.invalid_group_id
        else:
            group_error, shard = s.group_coordinator.shard_for(group_id)
        if group_error == ErrorCode.none and not s.allowed(
            ctx, AclOperation.READ, ResourceType.GROUP, group_id
        ):
            group_error, shard = ErrorCode.group_authorization_failed, None
        if shard is not None:
            group_error = self._validate_commit(shard, request, version)
        now = s.group_coordinator.clock()
        retention = getattr(request, "retention_time", None)
        retention_ms = -1 if retention is None else int(retention.total_seconds() * 1000)
        writes: list[tuple[tuple[str, int], OffsetCommitValue]] = []
        for topic in request.topics:
            name = str(topic.name)
            for p in topic.partitions:
                tp = (name, int(p.partition_index))
                order.append(tp)
                metadata = p.committed_metadata or ""
                if group_error != ErrorCode.none:
                    errors[tp] = group_error
                elif not s.allowed(ctx, AclOperation.READ, ResourceType.TOPIC, name):
                    errors[tp] = ErrorCode.topic_authorization_failed
                elif s.metadata_cache.partition(name, tp[1]) is None or not storable(name):
                    errors[tp] = ErrorCode.unknown_topic_or_partition
                elif len(metadata.encode()) > s.config.offset_metadata_max_bytes:
                    errors[tp] = ErrorCode.offset_metadata_too_large
                else:
                    writes.append(
                        (
                            tp,
                            OffsetCommitValue(
                                offset=int(p.committed_offset),
                                leader_epoch=int(getattr(p, "committed_leader_epoch", -1)),
                                metadata=metadata,
                                commit_timestamp=now,
                                expire_timestamp=now + retention_ms
                                if retention_ms >= 0
                                else NO_EXPIRE_TIMESTAMP,
                            ),
                        )
                    )
        if writes and shard is not None:
            records = [offset_commit_record(group_id, tp, value) for tp, value in writes]
            error, first = await shard.write_at(records)
            if error == ErrorCode.none and shard.active:
                for i, (tp, value) in enumerate(writes):
                    shard.offsets.put(group_id, tp, CommittedOffset.of(value, first + i))
            for tp, _ in writes:
                errors[tp] = error
        by_topic: dict[str, list[Any]] = {}
        for tp in order:
            by_topic.setdefault(tp[0], []).append(
                make(part_cls, partition_index=tp[1], error_code=errors[tp])
            )
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            topics=tuple(
                make(topic_cls, name=name, partitions=tuple(parts))
                for name, parts in by_topic.items()
            ),
        )

    # -- OffsetFetch ---------------------------------------------------------------------

    def _fetch_group(
        self,
        ctx: RequestContext,
        group_id: str,
        topics,
        member_id: str | None,
        member_epoch: int,
        require_stable: bool = False,
    ) -> tuple[ErrorCode, list[tuple[str, int, int, int, str | None, ErrorCode]]]:
        """(group error, [(topic, partition, offset, leader epoch, metadata, error)]).
        Kafka: Describe on the group; topics the principal may not describe are left out
        of an all-topics answer and TOPIC_AUTHORIZATION_FAILED when named."""
        s = self.services
        if not s.allowed(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            return ErrorCode.group_authorization_failed, []
        error, rows = self._committed_rows(group_id, topics, member_id, member_epoch)
        if require_stable and error == ErrorCode.none:
            rows = self._stable_rows(group_id, rows)
        if s.authorizer is None:
            return error, rows
        visible = {
            t
            for t in {row[0] for row in rows}
            if s.allowed(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, t)
        }
        if topics is None:
            return error, [row for row in rows if row[0] in visible]
        refused = ErrorCode.topic_authorization_failed
        return error, [
            row if row[0] in visible else (row[0], row[1], NO_OFFSET, NO_LEADER_EPOCH, "", refused)
            for row in rows
        ]

    def _committed_rows(
        self, group_id: str, topics, member_id: str | None, member_epoch: int
    ) -> tuple[ErrorCode, list[tuple[str, int, int, int, str | None, ErrorCode]]]:
        error, shard = self.services.group_coordinator.shard_for(group_id)
        if shard is None:
            return error, []
        group = shard.groups.get(group_id)
        if group is not None and (member_id is not None or member_epoch >= 0):
            error = group.validate_offset_fetch(member_id, member_epoch)
            if error != ErrorCode.none:
                return error, []
        committed = shard.offsets.of_group(group_id)
        rows = []
        if topics is None:
            for (topic, partition), c in sorted(committed.items()):
                rows.append(
                    (topic, partition, c.offset, c.leader_epoch, c.metadata, ErrorCode.none)
                )
            return ErrorCode.none, rows
        for topic in topics:
            name = str(topic.name)
            for partition in topic.partition_indexes:
                c = committed.get((name, int(partition)))
                if c is None:
                    rows.append(
                        (name, int(partition), NO_OFFSET, NO_LEADER_EPOCH, "", ErrorCode.none)
                    )
                else:
                    rows.append(
                        (name, int(partition), c.offset, c.leader_epoch, c.metadata, ErrorCode.none)
                    )
        return ErrorCode.none, rows

    def _stable_rows(self, group_id: str, rows):
        """OffsetFetch ``require_stable`` (v7+, KIP-447): a partition with a pending
        transactional commit of the group is UNSTABLE_OFFSET_COMMIT (the consumer retries
        until the transaction is decided), as Kafka's ``fetchOffsets`` answers."""
        _, shard = self.services.group_coordinator.shard_for(group_id)
        if shard is None:
            return rows
        unstable = ErrorCode.unstable_offset_commit
        return [
            (row[0], row[1], NO_OFFSET, NO_LEADER_EPOCH, "", unstable)
            if row[5] == ErrorCode.none and shard.offsets.has_pending(group_id, (row[0], row[1]))
            else row
            for row in rows
        ]

    async def handle_offset_fetch(self, ctx: RequestContext, request) -> object:
        version = ctx.api_version
        cls = response_class(ApiKey.OFFSET_FETCH, version)
        if version < FIRST_BATCHED_OFFSET_FETCH:
            topic_cls = nested(cls, "OffsetFetchResponseTopic")
            part_cls = nested(cls, "OffsetFetchResponsePartition")
            error, rows = self._fetch_group(
                ctx,
                str(request.group_id),
                request.topics,
                None,
                -1,
                bool(getattr(request, "require_stable", False)),
            )
            if error != ErrorCode.none and request.topics is not None:
                # Without a top-level error field (v0-1) every partition carries it.
                rows = [
                    (str(t.name), int(p), NO_OFFSET, NO_LEADER_EPOCH, "", error)
                    for t in request.topics
                    for p in t.partition_indexes
                ]
            return make(
                cls,
                throttle_time=NO_THROTTLE,
                error_code=error,
                topics=_fetched_topics(rows, topic_cls, part_cls),
            )
        group_cls = nested(cls, "OffsetFetchResponseGroup")
        topic_cls = nested(cls, "OffsetFetchResponseTopics")
        part_cls = nested(cls, "OffsetFetchResponsePartitions")
        groups = []
        for g in request.groups:
            error, rows = self._fetch_group(
                ctx,
                str(g.group_id),
                g.topics,
                getattr(g, "member_id", None),
                int(getattr(g, "member_epoch", -1)),
                bool(getattr(request, "require_stable", False)),
            )
            groups.append(
                make(
                    group_cls,
                    group_id=g.group_id,
                    error_code=error,
                    topics=_fetched_topics(rows, topic_cls, part_cls),
                )
            )
        return make(cls, throttle_time=NO_THROTTLE, groups=tuple(groups))

    # -- OffsetDelete --------------------------------------------------------------------

    async def handle_offset_delete(self, ctx: RequestContext, request) -> object:
        cls = response_class(ApiKey.OFFSET_DELETE, ctx.api_version)
        topic_cls = nested(cls, "OffsetDeleteResponseTopic")
        part_cls = nested(cls, "OffsetDeleteResponsePartition")
        group_id = str(request.group_id)

        def answer(error: ErrorCode, per: dict[tuple[str, int], ErrorCode]) -> object:
            by_topic: dict[str, list[Any]] = {}
            for (topic, partition), perr in per.items():
                by_topic.setdefault(topic, []).append(
                    make(part_cls, partition_index=partition, error_code=perr)
                )
            return make(
                cls,
                error_code=error,
                throttle_time=NO_THROTTLE,
                topics=tuple(
                    make(topic_cls, name=name, partitions=tuple(parts))
                    for name, parts in by_topic.items()
                ),
            )

        # Kafka: Delete on the group, then Read on each topic (KafkaApis.handleOffsetDelete)
        if not self.services.allowed(ctx, AclOperation.DELETE, ResourceType.GROUP, group_id):
            return answer(ErrorCode.group_authorization_failed, {})
        error, shard = self.services.group_coordinator.shard_for(group_id)
        if shard is None:
            return answer(error, {})
        group = shard.groups.get(group_id)
        if (
            group is None
            and not shard.offsets.has_offsets(group_id)
            and not shard.offsets.has_open_transactions(group_id)
        ):
            return answer(ErrorCode.group_id_not_found, {})
        if group is not None and not group.is_empty() and group.protocol_type != "consumer":
            return answer(ErrorCode.non_empty_group, {})
        per: dict[tuple[str, int], ErrorCode] = {}
        tombstones: list[tuple[tuple[str, int], Record]] = []
        for topic in request.topics:
            name = str(topic.name)
            subscribed = group is not None and group.is_subscribed_to_topic(name)
            for p in topic.partitions:
                tp = (name, int(p.partition_index))
                if not self.services.allowed(ctx, AclOperation.READ, ResourceType.TOPIC, name):
                    per[tp] = ErrorCode.topic_authorization_failed
                elif subscribed:
                    per[tp] = ErrorCode.group_subscribed_to_topic
                elif self.services.metadata_cache.partition(name, tp[1]) is None:
                    per[tp] = ErrorCode.unknown_topic_or_partition
                else:
                    per[tp] = ErrorCode.none
                    # Kafka: a tombstone also for a pending transactional commit
                    if shard.offsets.get(group_id, tp) is not None or shard.offsets.has_pending(
                        group_id, tp
                    ):
                        tombstones.append((tp, offset_tombstone(group_id, tp)))
        if tombstones:
            error, first = await shard.write_at([r for _, r in tombstones])
            if error != ErrorCode.none:
                return answer(error, {})
            for i, (tp, _) in enumerate(tombstones):
                shard.offsets.remove(group_id, tp, first + i)
        return answer(ErrorCode.none, per)

    # -- DeleteGroups --------------------------------------------------------------------

    async def _delete_group(self, group_id: str) -> ErrorCode:
        error, shard = self.services.group_coordinator.shard_for(group_id)
        if shard is None:
            return error
        group = shard.groups.get(group_id)
        if (
            group is None
            and not shard.offsets.has_offsets(group_id)
            and not shard.offsets.has_open_transactions(group_id)
        ):
            return ErrorCode.group_id_not_found
        if group is not None:
            error = group.validate_delete_group()
            if error != ErrorCode.none:
                return error
        # Kafka ``deleteAllOffsets``: pending transactional commits are deleted too
        offsets = list(shard.offsets.of_group(group_id))
        offsets += sorted(shard.offsets.pending_partitions(group_id) - set(offsets))
        records = [offset_tombstone(group_id, tp) for tp in offsets]
        if group is not None:
            records += group.metadata_tombstones()
            # Gone at once, so a member joining meanwhile starts a new group.
            del shard.groups[group_id]
        error, first = await shard.write_at(records)
        if error != ErrorCode.none:
            if group is not None and shard.active and group_id not in shard.groups:
                shard.groups[group_id] = group  # not deleted after all
            return error
        if group is not None:
            group.on_deleted(ErrorCode.group_id_not_found)
        if shard.active:
            for i, tp in enumerate(offsets):
                shard.offsets.remove(group_id, tp, first + i)
        return ErrorCode.none

    async def handle_delete_groups(self, ctx: RequestContext, request) -> object:
        cls = response_class(ApiKey.DELETE_GROUPS, ctx.api_version)
        result_cls = nested(cls, "DeletableGroupResult")
        results = []
        for group_id in request.groups_names:
            if self.services.allowed(ctx, AclOperation.DELETE, ResourceType.GROUP, str(group_id)):
                error = await self._delete_group(str(group_id))
            else:
                error = ErrorCode.group_authorization_failed
            results.append(make(result_cls, group_id=group_id, error_code=error))
        return make(cls, throttle_time=NO_THROTTLE, results=tuple(results))


def _fetched_topics(rows, topic_cls: type, part_cls: type) -> tuple[Any, ...]:
    """OffsetFetch's topics from ``(topic, partition, offset, epoch, metadata, error)`` rows."""
    by_topic: dict[str, list[Any]] = {}
    for topic, partition, offset, epoch, metadata, error in rows:
        by_topic.setdefault(topic, []).append(
            make(
                part_cls,
                partition_index=partition,
                committed_offset=offset,
                committed_leader_epoch=epoch,
                metadata=metadata,
                error_code=error,
            )
        )
    return tuple(
        make(topic_cls, name=name, partitions=tuple(parts)) for name, parts in by_topic.items()
    )
