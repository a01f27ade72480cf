"""Fetch: consumers read below the high watermark; followers read to the log end."""

from __future__ import annotations

from replog.protocol import fetch_codec, frames
from replog.replication.fetch_rules import FetchPartitionRequest
from replog.server.handlers.context import BrokerServices
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
    # The hand codec covers every version served (apis: Fetch 4-11).
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
