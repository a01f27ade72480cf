"""ListOffsets and OffsetForLeaderEpoch."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog.protocol.apis import ApiKey, make, nested
from replog.server.handlers.context import NO_THROTTLE, BrokerServices, response_class
from replog.server.network import RequestContext

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3


def _list_offset(services: BrokerServices, topic: str, part_req, replica_id: int) -> dict:
    partition = services.replica_manager.get_partition(topic, int(part_req.partition_index))
    base = {
        "partition_index": int(part_req.partition_index),
        "timestamp": -1,
        "offset": -1,
        "leader_epoch": -1,
    }
    if partition is None:
        known = services.metadata_cache.partition(topic, int(part_req.partition_index))
        code = ErrorCode.not_leader_or_follower if known else ErrorCode.unknown_topic_or_partition
        return {**base, "error_code": code}
    if not partition.is_leader:
        return {**base, "error_code": ErrorCode.not_leader_or_follower}
    fenced = partition.check_leader_epoch(int(getattr(part_req, "current_leader_epoch", -1)))
    if fenced != ErrorCode.none:
        return {**base, "error_code": fenced}
    ts = int(part_req.timestamp)
    log_ = partition.log
    # Consumers see only what is committed; a follower (replica_id >= 0) sees the log end.
    latest = log_.log_end_offset if replica_id >= 0 else partition.high_watermark
    if ts == EARLIEST_TIMESTAMP:
        return {**base, "error_code": ErrorCode.none, "offset": log_.log_start_offset}
    if ts == LATEST_TIMESTAMP:
        return {**base, "error_code": ErrorCode.none, "offset": latest}
    if ts == MAX_TIMESTAMP:
        found = log_.max_timestamp_and_offset()  # (timestamp, offset)
    elif ts < 0:
        return {**base, "error_code": ErrorCode.invalid_request}
    else:
        by_time = log_.offset_for_timestamp(ts)  # (offset, timestamp)
        found = None if by_time is None else (by_time[1], by_time[0])
    if found is None or found[1] < 0 or found[1] >= latest:
        return {**base, "error_code": ErrorCode.none}
    found_ts, found_offset = found
    return {
        **base,
        "error_code": ErrorCode.none,
        "timestamp": found_ts,
        "offset": found_offset,
        "leader_epoch": partition.leader_epoch,
    }


async def handle_list_offsets(services: BrokerServices, ctx: RequestContext, request) -> object:
    cls = response_class(ApiKey.LIST_OFFSETS, ctx.api_version)
    topic_cls = nested(cls, "ListOffsetsTopicResponse")
    part_cls = nested(cls, "ListOffsetsPartitionResponse")
    replica_id = int(request.replica_id)
    topics = []
    for topic in request.topics:
        parts = [
            make(part_cls, **_list_offset(services, str(topic.name), p, replica_id))
            for p in topic.partitions
        ]
        topics.append(make(topic_cls, name=topic.name, partitions=tuple(parts)))
    return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))


async def handle_offset_for_leader_epoch(
    services: BrokerServices, ctx: RequestContext, request
) -> object:
    cls = response_class(ApiKey.OFFSET_FOR_LEADER_EPOCH, ctx.api_version)
    topic_cls = nested(cls, "OffsetForLeaderTopicResult")
    part_cls = nested(cls, "EpochEndOffset")
    topics = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            partition = services.replica_manager.get_partition(str(topic.topic), int(p.partition))
            answer = {"partition": int(p.partition), "leader_epoch": -1, "end_offset": -1}
            if partition is None:
                answer["error_code"] = ErrorCode.unknown_topic_or_partition
            else:
                error, end = partition.machine.answer_offsets_for_leader_epoch(
                    int(p.current_leader_epoch), int(p.leader_epoch)
                )
                answer["error_code"] = error
                if error is ErrorCode.none:
                    answer.update(leader_epoch=end.leader_epoch, end_offset=end.end_offset)
            parts.append(make(part_cls, **answer))
        topics.append(make(topic_cls, topic=topic.topic, partitions=tuple(parts)))
    return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))
