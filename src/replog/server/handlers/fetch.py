"""Fetch: consumers read below the high watermark; followers read to the log end."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog.protocol import fetch_codec, frames
from replog.protocol.apis import ApiKey, make, nested
from replog.replication.fetch_rules import FetchPartitionRequest
from replog.server.handlers.context import NO_THROTTLE, BrokerServices, response_class
from replog.server.network import RequestContext


async def handle_fetch(services: BrokerServices, ctx: RequestContext, request) -> object:
    partitions = [
        FetchPartitionRequest(
            topic=str(topic.topic),
            partition=int(part.partition),
            fetch_offset=int(part.fetch_offset),
            max_bytes=int(part.partition_max_bytes),
            current_leader_epoch=int(getattr(part, "current_leader_epoch", -1)),
            log_start_offset=int(getattr(part, "log_start_offset", -1)),
        )
        for topic in request.topics
        for part in topic.partitions
    ]
    max_bytes = int(getattr(request, "max_bytes", 0x7FFFFFFF))
    results = await services.replica_manager.fetch(
        int(request.replica_id),
        int(request.max_wait.total_seconds() * 1000),
        int(request.min_bytes),
        max_bytes,
        partitions,
        isolation_level=int(getattr(request, "isolation_level", 0)),
    )
    if fetch_codec.MIN_VERSION <= ctx.api_version <= fetch_codec.MAX_VERSION:
        return frames.EncodedBody(
            fetch_codec.encode_fetch_response(
                ctx.api_version,
                [
                    fetch_codec.FetchResponsePartitionData(
                        topic=req.topic,
                        partition=req.partition,
                        error_code=result.error,
                        high_watermark=result.high_watermark,
                        last_stable_offset=result.last_stable_offset,
                        log_start_offset=result.log_start_offset,
                        records=result.records,
                    )
                    for req, result in zip(partitions, results, strict=True)
                ],
            )
        )
    cls = response_class(ApiKey.FETCH, ctx.api_version)
    topic_cls = nested(cls, "FetchableTopicResponse")
    part_cls = nested(cls, "PartitionData")
    by_topic: dict[str, list[object]] = {}
    for req, result in zip(partitions, results, strict=True):
        by_topic.setdefault(req.topic, []).append(
            make(
                part_cls,
                partition_index=req.partition,
                error_code=result.error,
                high_watermark=result.high_watermark,
                last_stable_offset=result.last_stable_offset,
                log_start_offset=result.log_start_offset,
                aborted_transactions=None,
                preferred_read_replica=-1,
                records=result.records,
            )
        )
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        session_id=0,
        responses=tuple(
            make(topic_cls, topic=name, partitions=tuple(parts)) for name, parts in by_topic.items()
        ),
    )
