"""Produce: append to partition leaders; acks 0, 1 and -1 (all).

Transactional batches need the request's ``transactional_id`` and Write on it
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition otherwise, as Kafka); the
partition's producer state checks them (``storage.producer_state``)."""

from __future__ import annotations

import time

from kio.schema.errors import ErrorCode

from replog.common.clock import now_ms
from replog.common.topics import INTERNAL_TOPICS
from replog.protocol import frames, produce_codec
from replog.protocol.records import first_batch_is_transactional
from replog.replication.replica_manager import ProduceResult
from replog.security.acl import AclOperation, ResourceType
from replog.server.handlers.context import BrokerServices
from replog.server.handlers.leader_discovery import (
    NOT_LEADER_ERRORS,
    LeaderDiscovery,
    not_hosted_error,
)
from replog.server.network import RequestContext


def _has_transactional_records(request) -> bool:  # type: ignore[no-untyped-def]
    """Kafka ``ProduceRequest.hasTransactionalRecords``: a partition's first batch is."""
    return any(
        part.records and first_batch_is_transactional(part.records)
        for topic in request.topic_data
        for part in topic.partition_data
    )


async def handle_produce(services: BrokerServices, ctx: RequestContext, request) -> object | None:
    rm = services.replica_manager
    now = now_ms()
    results: dict[tuple[str, int], ProduceResult] = {}
    acks = int(request.acks)
    if _has_transactional_records(request) and (
        request.transactional_id is None
        or not services.allowed(
            ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, str(request.transactional_id)
        )
    ):
        # Kafka: transactional batches need Write on the request's TransactionalId.
        error: ErrorCode | None = ErrorCode.transactional_id_authorization_failed
    elif acks not in (0, 1, -1):
        error = ErrorCode.invalid_required_acks
    else:
        error = None
    writable: dict[str, bool] = {}
    for topic in request.topic_data:
        name = str(topic.name)
        if name not in writable:
            writable[name] = services.allowed(ctx, AclOperation.WRITE, ResourceType.TOPIC, name)
        for part in topic.partition_data:
            key = (name, int(part.index))
            if error is not None:
                results[key] = ProduceResult(error)
            elif not writable[name]:
                results[key] = ProduceResult(ErrorCode.topic_authorization_failed)
            elif key[0] in INTERNAL_TOPICS:
                # Kafka: only the brokers write their internal topics.
                results[key] = ProduceResult(
                    ErrorCode.invalid_topic_exception,
                    error_message=f"cannot append to internal topic {key[0]}",
                )
            elif not part.records:
                results[key] = ProduceResult(ErrorCode.corrupt_message, error_message="no records")
            else:
                result = results[key] = rm.append_to_leader(key[0], key[1], part.records, acks, now)
                if result.error == ErrorCode.none:
                    services.topic_stats.record_append(
                        key[0], result.required_offset - result.base_offset, len(part.records)
                    )
                else:
                    services.topic_stats.of(key[0]).failed_produce_requests += 1
    if acks == 0:
        return None
    if acks == -1:
        waiting_from = time.monotonic()
        await rm.wait_for_acks_all(results, int(request.timeout.total_seconds() * 1000))
        ctx.remote_s += time.monotonic() - waiting_from
    version = ctx.api_version
    discovery = (
        LeaderDiscovery(services, ctx.listener)
        if version >= produce_codec.FIRST_LEADER_DISCOVERY
        else None
    )
    answers = []
    for (topic, partition), result in results.items():
        if result.error == ErrorCode.unknown_topic_or_partition:
            result.error = not_hosted_error(services, topic, partition)
        leader = None
        if discovery is not None and result.error in NOT_LEADER_ERRORS:
            leader = discovery.current_leader(topic, partition)
        answers.append(
            produce_codec.ProducePartitionResult(
                topic=topic,
                partition=partition,
                error_code=result.error,
                base_offset=result.base_offset,
                log_append_time_ms=result.log_append_time,
                log_start_offset=result.log_start_offset,
                error_message=result.error_message,
                current_leader=leader,
            )
        )
    # The hand codec covers every version served (apis: Produce 3-12).
    return frames.EncodedBody(
        produce_codec.encode_produce_response(
            version,
            answers,
            node_endpoints=() if discovery is None else discovery.node_endpoints,
        ),
        flexible=version >= produce_codec.FIRST_FLEXIBLE,
    )
