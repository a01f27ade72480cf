"""Fetch: consumers read below the high watermark; followers read to the log end.

Besides the read itself (the replica manager's), the handler answers what a
version adds around it: topics named by id from v13 (an id this broker does
not know is UNKNOWN_TOPIC_ID, echoing the id), the KIP-595 check of a
``last_fetched_epoch`` (v12+; a diverging fetcher gets ``diverging_epoch`` and
no records, and the response goes out at once, as Kafka's
``Partition.readRecords``), and KIP-951 leader discovery (v16+).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace

from kio.schema.errors import ErrorCode

from replog.protocol import fetch_codec, frames
from replog.protocol.fetch_codec import FetchResponsePartitionData
from replog.protocol.wire import NodeEndpoint
from replog.replication.fetch_rules import FetchPartitionRequest, check_last_fetched_epoch
from replog.replication.quota import is_throttled, leader_should_throttle
from replog.replication.replica_manager import FetchWait, ReplicaManager
from replog.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from replog.server.handlers.context import BrokerServices
from replog.server.handlers.leader_discovery import (
    NOT_LEADER_OR_FENCED_ERRORS,
    LeaderDiscovery,
    not_hosted_error,
)
from replog.server.network import RequestContext

ZERO_UUID = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID: no topic has it


async def handle_fetch(services: BrokerServices, ctx: RequestContext, request) -> object:
    version = ctx.api_version
    by_id = version >= fetch_codec.FIRST_TOPIC_ID
    # One answer per requested partition, in request order: made here or by the read.
    answers: list[FetchResponsePartitionData | None] = []
    reads: list[FetchPartitionRequest] = []
    read_slots: list[tuple[int, uuid.UUID | None]] = []
    answer_now = False
    replica_id = int(
        request.replica_state.replica_id
        if version >= fetch_codec.FIRST_REPLICA_STATE
        else request.replica_id
    )
    ctx.request_name = "FetchFollower" if replica_id >= 0 else "FetchConsumer"  # Kafka's
    # Kafka: a follower fetch needs ClusterAction, a consumer's Read on each topic.
    follower_refused = replica_id >= 0 and not services.allowed(
        ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME
    )
    readable: dict[str, bool] = {}
    # Follower partitions answered empty: the leader is over its replication quota.
    leader_throttled = 0
    for topic_request in request.topics:
        topic_id = None
        if by_id:
            # kio reads the all-zero id, which no topic has, as None.
            topic_id = topic_request.topic_id or ZERO_UUID
            topic = services.metadata_cache.topic_name(topic_id)
        else:
            topic = str(topic_request.topic)
        if topic is not None and topic not in readable:
            readable[topic] = not follower_refused and (
                replica_id >= 0
                or services.allowed(ctx, AclOperation.READ, ResourceType.TOPIC, topic)
            )
        for part in topic_request.partitions:
            if topic is None:
                answers.append(
                    _error_answer("", int(part.partition), topic_id, ErrorCode.unknown_topic_id)
                )
                continue
            if not readable[topic]:
                answers.append(
                    _error_answer(
                        topic, int(part.partition), topic_id, ErrorCode.topic_authorization_failed
                    )
                )
                continue
            fetch = FetchPartitionRequest(
                topic=topic,
                partition=int(part.partition),
                fetch_offset=int(part.fetch_offset),
                max_bytes=int(part.partition_max_bytes),
                current_leader_epoch=int(getattr(part, "current_leader_epoch", -1)),
                log_start_offset=int(getattr(part, "log_start_offset", -1)),
            )
            last_fetched_epoch = int(getattr(part, "last_fetched_epoch", -1))
            if last_fetched_epoch >= 0:
                early = _check_last_fetched_epoch(
                    services.replica_manager, fetch, last_fetched_epoch, topic_id
                )
                if early is not None:
                    answers.append(early)
                    answer_now = True
                    continue
            if replica_id >= 0:
                throttled = _leader_throttled(services, fetch, replica_id, topic_id)
                if throttled is not None:
                    answers.append(throttled)
                    leader_throttled += 1
                    continue
            read_slots.append((len(answers), topic_id))
            answers.append(None)
            reads.append(fetch)
    if not reads and leader_throttled and not answer_now:
        # Kafka's DelayedFetch counts no throttled bytes: the follower waits max_wait.
        await asyncio.sleep(request.max_wait.total_seconds())
        ctx.remote_s += request.max_wait.total_seconds()
    if reads:
        wait = FetchWait()
        results = await services.replica_manager.fetch(
            int(replica_id),
            0 if answer_now else int(request.max_wait.total_seconds() * 1000),
            int(request.min_bytes),
            int(getattr(request, "max_bytes", 0x7FFFFFFF)),
            reads,
            isolation_level=int(getattr(request, "isolation_level", 0)),
            wait=wait,
        )
        ctx.remote_s += wait.waited_s
        stats = services.topic_stats
        for (slot, topic_id), req, result in zip(read_slots, reads, results, strict=True):
            if result.records:
                stats.record_fetch(req.topic, len(result.records), follower=replica_id >= 0)
            if replica_id >= 0 and result.records:
                _record_leader_bytes(services, req, replica_id, len(result.records))
            error = result.error
            if error == ErrorCode.unknown_topic_or_partition:
                error = not_hosted_error(services, req.topic, req.partition)
            answers[slot] = FetchResponsePartitionData(
                topic=req.topic,
                partition=req.partition,
                error_code=error,
                high_watermark=result.high_watermark,
                last_stable_offset=result.last_stable_offset,
                log_start_offset=result.log_start_offset,
                records=result.records,
                topic_id=topic_id,
            )
    node_endpoints: list[NodeEndpoint] = []
    if version >= fetch_codec.FIRST_NODE_ENDPOINTS:
        answers, node_endpoints = _with_current_leaders(services, ctx.listener, answers)
    # The hand codec covers every version served (apis: Fetch 4-17).
    return frames.EncodedBody(
        fetch_codec.encode_fetch_response(version, answers, node_endpoints=node_endpoints),
        flexible=version >= fetch_codec.FIRST_FLEXIBLE,
    )


def _leader_throttled(
    services: BrokerServices,
    fetch: FetchPartitionRequest,
    replica_id: int,
    topic_id: uuid.UUID | None,
) -> FetchResponsePartitionData | None:
    """An empty answer for a follower out of the ISR fetching a throttled replica while
    the leader is over its quota (Kafka ``shouldLeaderThrottle``); None: read as usual."""
    part = services.replica_manager.get_partition(fetch.topic, fetch.partition)
    if part is None or not part.is_leader:
        return None
    if not is_throttled(
        part.log.config.leader_replication_throttled_replicas,
        fetch.partition,
        services.config.broker_id,
    ):
        return None  # the usual case: nothing more on the replication path
    if not leader_should_throttle(
        services.configs.leader_quota,
        True,
        replica_id in part.in_sync_replicas,
        time.monotonic(),
    ):
        return None
    return FetchResponsePartitionData(
        topic=fetch.topic,
        partition=fetch.partition,
        error_code=ErrorCode.none,
        high_watermark=part.high_watermark,
        last_stable_offset=part.high_watermark,
        log_start_offset=part.log.log_start_offset,
        records=b"",
        topic_id=topic_id,
    )


def _record_leader_bytes(
    services: BrokerServices, fetch: FetchPartitionRequest, replica_id: int, nbytes: int
) -> None:
    """Bytes sent to a follower for a throttled replica count against the leader's quota."""
    part = services.replica_manager.get_partition(fetch.topic, fetch.partition)
    if part is not None and is_throttled(
        part.log.config.leader_replication_throttled_replicas,
        fetch.partition,
        services.config.broker_id,
    ):
        services.configs.leader_quota.record(nbytes, time.monotonic())


def _error_answer(
    topic: str, partition: int, topic_id: uuid.UUID | None, error: ErrorCode
) -> FetchResponsePartitionData:
    """A partition answered with ``error`` alone: nothing read, -1 offsets (Kafka's
    answer for an unknown topic id, echoed, and for TOPIC_AUTHORIZATION_FAILED)."""
    return FetchResponsePartitionData(
        topic=topic,
        partition=partition,
        error_code=error,
        high_watermark=-1,
        last_stable_offset=-1,
        log_start_offset=-1,
        records=b"",
        topic_id=topic_id,
    )


def _check_last_fetched_epoch(
    rm: ReplicaManager,
    fetch: FetchPartitionRequest,
    last_fetched_epoch: int,
    topic_id: uuid.UUID | None,
) -> FetchResponsePartitionData | None:
    """The answer to a fetch whose log diverges from the leader's; None: read as usual.

    A partition this broker does not lead, or a fenced epoch, is left to the read,
    which answers the same error from the same check.
    """
    part = rm.get_partition(fetch.topic, fetch.partition)
    if part is None:
        return None
    error, epoch_end = part.machine.answer_offsets_for_leader_epoch(
        fetch.current_leader_epoch, last_fetched_epoch
    )
    if error is not ErrorCode.none:
        return None
    check = check_last_fetched_epoch(
        last_fetched_epoch=last_fetched_epoch,
        fetch_offset=fetch.fetch_offset,
        log_start_offset=part.log.log_start_offset,
        epoch_end=epoch_end,
    )
    if check is None:
        return None
    return FetchResponsePartitionData(
        topic=fetch.topic,
        partition=fetch.partition,
        error_code=check.error,
        high_watermark=part.high_watermark,
        last_stable_offset=part.high_watermark,
        log_start_offset=part.log.log_start_offset,
        records=b"",
        topic_id=topic_id,
        diverging_epoch=check.diverging_epoch,
    )


def _with_current_leaders(
    services: BrokerServices, listener: str, answers: list[FetchResponsePartitionData]
) -> tuple[list[FetchResponsePartitionData], list[NodeEndpoint]]:
    """KIP-951: NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH answers name the leader."""
    if all(a.error_code not in NOT_LEADER_OR_FENCED_ERRORS for a in answers):
        return answers, []
    discovery = LeaderDiscovery(services, listener)
    out = []
    for a in answers:
        if a.error_code in NOT_LEADER_OR_FENCED_ERRORS:
            a = replace(a, current_leader=discovery.current_leader(a.topic, a.partition))
        out.append(a)
    return out, discovery.node_endpoints
