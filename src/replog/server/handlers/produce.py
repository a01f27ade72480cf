"""Produce: append to partition leaders; acks 0, 1 and -1 (all)."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode

from replog.protocol import frames, produce_codec
from replog.protocol.apis import ApiKey, make, nested
from replog.replication.replica_manager import ProduceResult, now_ms
from replog.server.handlers.context import NO_THROTTLE, BrokerServices, response_class
from replog.server.network import RequestContext


def _append_time(ms: int) -> datetime.datetime | None:
    if ms < 0:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


async def handle_produce(services: BrokerServices, ctx: RequestContext, request) -> object | None:
    rm = services.replica_manager
    now = now_ms()
    results: dict[tuple[str, int], ProduceResult] = {}
    acks = int(request.acks)
    if request.transactional_id is not None:
        error: ErrorCode | None = ErrorCode.transactional_id_authorization_failed
    elif acks not in (0, 1, -1):
        error = ErrorCode.invalid_required_acks
    else:
        error = None
    for topic in request.topic_data:
        for part in topic.partition_data:
            key = (str(topic.name), int(part.index))
            if error is not None:
                results[key] = ProduceResult(error)
            elif not part.records:
                results[key] = ProduceResult(ErrorCode.corrupt_message, error_message="no records")
            else:
                results[key] = rm.append_to_leader(key[0], key[1], part.records, acks, now)
    if acks == 0:
        return None
    if acks == -1:
        await rm.wait_for_acks_all(results, int(request.timeout.total_seconds() * 1000))
    if produce_codec.MIN_VERSION <= ctx.api_version <= produce_codec.MAX_VERSION:
        return frames.EncodedBody(
            produce_codec.encode_produce_response(
                ctx.api_version,
                [
                    produce_codec.ProducePartitionResult(
                        topic=topic_name,
                        partition=index,
                        error_code=result.error,
                        base_offset=result.base_offset,
                        log_append_time_ms=result.log_append_time,
                        log_start_offset=result.log_start_offset,
                        error_message=result.error_message,
                    )
                    for (topic_name, index), result in results.items()
                ],
            )
        )
    cls = response_class(ApiKey.PRODUCE, ctx.api_version)
    topic_cls = nested(cls, "TopicProduceResponse")
    part_cls = nested(cls, "PartitionProduceResponse")
    by_topic: dict[str, list[object]] = {}
    for (topic_name, index), result in results.items():
        by_topic.setdefault(topic_name, []).append(
            make(
                part_cls,
                index=index,
                error_code=result.error,
                base_offset=result.base_offset,
                log_append_time=_append_time(result.log_append_time),
                log_start_offset=result.log_start_offset,
                record_errors=(),
                error_message=result.error_message,
            )
        )
    return make(
        cls,
        responses=tuple(
            make(topic_cls, name=name, partition_responses=tuple(parts))
            for name, parts in by_topic.items()
        ),
        throttle_time=NO_THROTTLE,
    )
