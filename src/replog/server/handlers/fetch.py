"""Fetch: consumers read below the high watermark; followers read to the log end.

The read itself is the replica manager's, and every rule of it (KIP-320 fencing,
the KIP-595 check of a ``last_fetched_epoch``, the leader's replication throttle,
the bounds) is the partition's machine's. The handler answers what a version adds
around it: topics named by id from v13 (an id this broker does not know is
UNKNOWN_TOPIC_ID, echoing the id), authorization, and KIP-951 leader discovery
(v16+).

From v7 a fetcher may keep an incremental fetch session (KIP-227): the session
rules are ``replog.server.fetch_session``'s, whose context says which partitions
to read (all of the session's, every time, so the long poll waits on all of
them and a follower's fetch state moves as with full fetches) and which answers
go out (in an incremental answer, only the partitions with news).
"""

from __future__ import annotations

import uuid
from dataclasses import replace

from kio.schema.errors import ErrorCode

from replog.common.clock import monotonic_ms
from replog.protocol import fetch_codec, frames
from replog.protocol.fetch_codec import FetchResponsePartitionData
from replog.protocol.fetch_metadata import FIRST_SESSION_VERSION, LEGACY, FetchMetadata
from replog.protocol.kafka_uuid import ZERO_UUID
from replog.protocol.wire import NodeEndpoint
from replog.replication.fetch_rules import FetchPartitionRequest
from replog.replication.replica_manager import FetchWait
from replog.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from replog.server.fetch_session import CachedPartition, FetchContext, PartitionKey
from replog.server.handlers.context import BrokerServices
from replog.server.handlers.leader_discovery import (
    NOT_LEADER_OR_FENCED_ERRORS,
    LeaderDiscovery,
    not_hosted_error,
)
from replog.server.network import RequestContext
from replog.zk.fencing import UNKNOWN_BROKER_EPOCH


async def handle_fetch(services: BrokerServices, ctx: RequestContext, request) -> object:
    version = ctx.api_version
    by_id = version >= fetch_codec.FIRST_TOPIC_ID
    replica_id = int(
        request.replica_state.replica_id
        if version >= fetch_codec.FIRST_REPLICA_STATE
        else request.replica_id
    )
    # KIP-903: a follower's broker epoch, checked when the fetch would add it to the ISR.
    broker_epoch = (
        int(request.replica_state.replica_epoch)
        if version >= fetch_codec.FIRST_REPLICA_STATE
        else UNKNOWN_BROKER_EPOCH
    )
    ctx.request_name = "FetchFollower" if replica_id >= 0 else "FetchConsumer"  # Kafka's
    if version >= FIRST_SESSION_VERSION:
        metadata = FetchMetadata(int(request.session_id), int(request.session_epoch))
        to_forget = _forgotten(request.forgotten_topics_data, by_id)
    else:
        metadata, to_forget = LEGACY, []
    context = services.fetch_manager.new_context(
        version,
        metadata,
        replica_id >= 0,
        _requested(services, request.topics, by_id),
        to_forget,
        monotonic_ms(),
    )
    if context.error is not ErrorCode.none:
        return _encoded(version, [], error_code=context.error)
    # Kafka: a follower fetch needs ClusterAction, a consumer's Read on each topic.
    follower_refused = replica_id >= 0 and not services.allowed(
        ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME
    )
    readable: dict[str, bool] = {}
    names: dict[uuid.UUID, str | None] = {}
    # One answer per partition of the context, in its order: made here, or None for a read.
    answers: list[tuple[CachedPartition, FetchResponsePartitionData | None]] = []
    reads: list[FetchPartitionRequest] = []
    for cached in context.partitions():
        topic_id = cached.topic_id
        if by_id:
            # A name is resolved on each request: an id learnt since, or one deleted since.
            if topic_id not in names:
                names[topic_id] = services.metadata_cache.topic_name(topic_id)
            cached.resolve_topic(names[topic_id])
        topic = cached.topic
        if topic is None:
            answers.append(
                (cached, _error_answer("", cached.partition, topic_id, ErrorCode.unknown_topic_id))
            )
            continue
        allowed = readable.get(topic)
        if allowed is None:
            allowed = readable[topic] = not follower_refused and (
                replica_id >= 0
                or services.allowed(ctx, AclOperation.READ, ResourceType.TOPIC, topic)
            )
        if not allowed:
            answers.append(
                (
                    cached,
                    _error_answer(
                        topic, cached.partition, topic_id, ErrorCode.topic_authorization_failed
                    ),
                )
            )
            continue
        answers.append((cached, None))
        reads.append(cached.read_request())
    results = ()
    if reads:
        wait = FetchWait()
        results = await services.replica_manager.fetch_reader.fetch(
            int(replica_id),
            int(request.max_wait.total_seconds() * 1000),
            int(request.min_bytes),
            int(getattr(request, "max_bytes", 0x7FFFFFFF)),
            reads,
            isolation_level=int(getattr(request, "isolation_level", 0)),
            wait=wait,
            leader_quota=services.configs.leader_quota if replica_id >= 0 else None,
            broker_epoch=broker_epoch,
        )
        ctx.remote_s += wait.waited_s
    error = context.response_error()
    if error is not ErrorCode.none:
        return _encoded(version, [], error_code=error, session_id=metadata.session_id)
    out = _answers(services, context, replica_id, answers, reads, results)
    node_endpoints: list[NodeEndpoint] = []
    if version >= fetch_codec.FIRST_NODE_ENDPOINTS:
        out, node_endpoints = _with_current_leaders(services, ctx.listener, out)
    return _encoded(
        version,
        out,
        session_id=context.response_session_id(monotonic_ms()),
        node_endpoints=node_endpoints,
    )


def _encoded(
    version: int,
    answers: list[FetchResponsePartitionData],
    *,
    error_code: int = 0,
    session_id: int = 0,
    node_endpoints: list[NodeEndpoint] | None = None,
) -> frames.EncodedBody:
    # The hand codec covers every version served (apis: Fetch 4-17).
    return frames.EncodedBody(
        fetch_codec.encode_fetch_response(
            version,
            answers,
            error_code=error_code,
            session_id=session_id,
            node_endpoints=node_endpoints or (),
        ),
        flexible=version >= fetch_codec.FIRST_FLEXIBLE,
    )


def _requested(services: BrokerServices, topics, by_id: bool) -> list[CachedPartition]:
    """The request's partitions, in order; from v13 named by id (a name resolved here,
    None for an id this broker does not know)."""
    out: list[CachedPartition] = []
    for topic_request in topics:
        if by_id:
            # kio reads the all-zero id, which no topic has, as None.
            topic_id = topic_request.topic_id or ZERO_UUID
            topic = services.metadata_cache.topic_name(topic_id)
        else:
            topic_id = None
            topic = str(topic_request.topic)
        for part in topic_request.partitions:
            out.append(
                CachedPartition(
                    topic=topic,
                    partition=int(part.partition),
                    topic_id=topic_id,
                    fetch_offset=int(part.fetch_offset),
                    max_bytes=int(part.partition_max_bytes),
                    current_leader_epoch=int(getattr(part, "current_leader_epoch", -1)),
                    log_start_offset=int(getattr(part, "log_start_offset", -1)),
                    last_fetched_epoch=int(getattr(part, "last_fetched_epoch", -1)),
                )
            )
    return out


def _forgotten(forgotten_topics, by_id: bool) -> list[PartitionKey]:
    """The keys of ``forgotten_topics_data``: by name, or by id from v13."""
    keys: list[PartitionKey] = []
    for f in forgotten_topics:
        topic = (f.topic_id or ZERO_UUID) if by_id else str(f.topic)
        keys.extend((topic, int(p)) for p in f.partitions)
    return keys


def _answers(
    services: BrokerServices,
    context: FetchContext,
    replica_id: int,
    answers: list[tuple[CachedPartition, FetchResponsePartitionData | None]],
    reads: list[FetchPartitionRequest],
    results,
) -> list[FetchResponsePartitionData]:
    """The partitions that go out (all of them, but in a session's incremental answer):
    the answers made before the read, and the read's results, in the context's order."""
    out: list[FetchResponsePartitionData] = []
    must_respond = context.must_respond
    stats = services.topic_stats
    read = iter(zip(reads, results, strict=True))
    for cached, answer in answers:
        if answer is not None:
            if must_respond(
                cached,
                answer.error_code,
                answer.high_watermark,
                answer.last_stable_offset,
                answer.log_start_offset,
                bool(answer.records),
                answer.diverging_epoch is not None,
            ):
                out.append(answer)
            continue
        req, result = next(read)
        records = result.records
        if records:
            stats.record_fetch(req.topic, len(records), follower=replica_id >= 0)
        error = result.error
        if error == ErrorCode.unknown_topic_or_partition:
            error = not_hosted_error(services, req.topic, req.partition)
        if must_respond(
            cached,
            error,
            result.high_watermark,
            result.last_stable_offset,
            result.log_start_offset,
            bool(records),
            result.diverging_epoch is not None,
        ):
            out.append(
                FetchResponsePartitionData(
                    topic=req.topic,
                    partition=req.partition,
                    error_code=error,
                    high_watermark=result.high_watermark,
                    last_stable_offset=result.last_stable_offset,
                    log_start_offset=result.log_start_offset,
                    records=records,
                    topic_id=cached.topic_id,
                    diverging_epoch=result.diverging_epoch,
                    aborted_transactions=None
                    if result.aborted_transactions is None
                    else [(t.producer_id, t.first_offset) for t in result.aborted_transactions],
                )
            )
    return out


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
