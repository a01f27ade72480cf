"""ListOffsets and OffsetForLeaderEpoch: where a partition's log starts and ends, and
where a leader epoch ends (KIP-320), as Kafka answers them.

ListOffsets (Kafka ``ReplicaManager.fetchOffset``, ``Partition.fetchOffsetForTimestamp``
and ``UnifiedLog.fetchOffsetByTimestamp``):

* consumers (replica id -1) see up to the high watermark (the last stable offset
  under read_committed, which is the high watermark here: no transactions);
  followers (replica id >= 0) up to the log end; both ask the leader. A debugging
  client (replica id -2) may ask any replica and sees up to the log end;
* -1 latest: the end a consumer may read to, with the current leader epoch;
  -2 earliest and -4 earliest-local (KIP-405; all of a log is local here): the log
  start offset, with the epoch of its first record; -3 max timestamp (KIP-734): the
  first record carrying the largest timestamp; -5 latest-tiered (KIP-1005) and -6
  earliest pending upload (KIP-1023, v11): -1, as Kafka answers without tiered
  storage; a timestamp >= 0: the first record at or
  after it. Each special value needs the request version that introduced it
  (UNSUPPORTED_VERSION otherwise), other negative values are unsupported;
* a record found at or beyond the end the asker may read is not returned (-1, -1);
* a new leader whose high watermark has not reached the start of its epoch
  answers a consumer's -1 (and a lookup past the HW) with OFFSET_NOT_AVAILABLE
  (LEADER_NOT_AVAILABLE before v5).

OffsetForLeaderEpoch (Kafka ``ReplicaManager.lastOffsetForLeaderEpoch``): the
leader answers where the requested epoch ends in its log, for followers
truncating (KIP-101) and consumers detecting truncation after a leader change
(KIP-320); the rule is the partition machine's.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog.protocol.apis import ApiKey, make, nested
from replog.replication.partition import Partition
from replog.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from replog.server.handlers.context import NO_THROTTLE, BrokerServices, response_class
from replog.server.handlers.leader_discovery import not_hosted_error
from replog.server.network import RequestContext

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6
# The first ListOffsets version that may ask for each special timestamp
# (Kafka ``ReplicaManager.timestampMinSupportedVersion``).
SPECIAL_TIMESTAMP_MIN_VERSION = {
    EARLIEST_TIMESTAMP: 1,
    LATEST_TIMESTAMP: 1,
    MAX_TIMESTAMP: 7,
    EARLIEST_LOCAL_TIMESTAMP: 8,
    LATEST_TIERED_TIMESTAMP: 9,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP: 11,
}
CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2
FIRST_OFFSET_NOT_AVAILABLE_VERSION = 5
UNKNOWN = -1  # timestamp, offset and leader epoch of an answer without a record


def _timestamp_unsupported(timestamp: int, version: int) -> bool:
    """Kafka ``isListOffsetsTimestampUnsupported``."""
    return timestamp < 0 and SPECIAL_TIMESTAMP_MIN_VERSION.get(timestamp, 1 << 15) > version


def _list_offset(
    services: BrokerServices,
    topic: str,
    partition_index: int,
    timestamp: int,
    current_leader_epoch: int,
    replica_id: int,
    version: int,
    isolation_level: int = 0,
) -> dict:
    """One partition's ListOffsets answer, as the fields of ``ListOffsetsPartitionResponse``."""
    answer = {
        "partition_index": partition_index,
        "error_code": ErrorCode.none,
        "timestamp": UNKNOWN,
        "offset": UNKNOWN,
        "leader_epoch": UNKNOWN,
    }
    if _timestamp_unsupported(timestamp, version):
        return {**answer, "error_code": ErrorCode.unsupported_version}
    partition = services.replica_manager.get_partition(topic, partition_index)
    if partition is None:
        return {**answer, "error_code": not_hosted_error(services, topic, partition_index)}
    if replica_id == DEBUGGING_REPLICA_ID:
        error = partition.validate_replica_request(current_leader_epoch)
    else:
        error = partition.validate_leader_request(current_leader_epoch)
    if error is not ErrorCode.none:
        return {**answer, "error_code": error}
    found = _lookup(partition, timestamp, replica_id == CONSUMER_REPLICA_ID, isolation_level)
    if found is None:
        not_available = (
            ErrorCode.offset_not_available
            if version >= FIRST_OFFSET_NOT_AVAILABLE_VERSION
            else ErrorCode.leader_not_available
        )
        return {**answer, "error_code": not_available}
    return {**answer, **found}


def _lookup(
    partition: Partition, timestamp: int, is_client: bool, isolation_level: int = 0
) -> dict | None:
    """The offset, timestamp and epoch for ``timestamp``; None: OFFSET_NOT_AVAILABLE."""
    # Consumers read to the high watermark (read_committed ones to the last stable
    # offset); followers and debugging clients to the log end.
    if not is_client:
        last_fetchable = partition.log_end_offset
    elif isolation_level == 1:
        last_fetchable = partition.last_stable_offset
    else:
        last_fetchable = partition.high_watermark
    # A new leader's HW may still be below its epoch's start: its "latest" is not known yet.
    lagging = is_client and partition.high_watermark_behind_epoch_start
    if timestamp == LATEST_TIMESTAMP:
        if lagging:
            return None
        return {"offset": last_fetchable, "leader_epoch": partition.leader_epoch}
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        epoch = partition.earliest_epoch()
        return {
            "offset": partition.log_start_offset,
            "leader_epoch": UNKNOWN if epoch is None else epoch,
        }
    if timestamp in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
        # no tiered storage: nothing is tiered, nothing waits for upload (Kafka answers
        # -1 for both, ``UnifiedLog.fetchOffsetByTimestamp`` without remote storage)
        return {}
    found = (
        partition.max_timestamp_and_offset()
        if timestamp == MAX_TIMESTAMP
        else partition.offset_for_timestamp(timestamp)
    )
    if found is None or found.offset >= last_fetchable:
        return None if lagging else {}
    return {
        "timestamp": found.timestamp,
        "offset": found.offset,
        "leader_epoch": found.leader_epoch if found.leader_epoch >= 0 else UNKNOWN,
    }


async def handle_list_offsets(services: BrokerServices, ctx: RequestContext, request) -> object:
    cls = response_class(ApiKey.LIST_OFFSETS, ctx.api_version)
    topic_cls = nested(cls, "ListOffsetsTopicResponse")
    part_cls = nested(cls, "ListOffsetsPartitionResponse")
    replica_id = int(request.replica_id)
    # A partition named twice is INVALID_REQUEST, answered once (Kafka's duplicatePartitions).
    seen: dict[tuple[str, int], int] = {}
    for topic in request.topics:
        for p in topic.partitions:
            key = (str(topic.name), int(p.partition_index))
            seen[key] = seen.get(key, 0) + 1
    topics: dict[str, list[object]] = {}
    for topic in request.topics:
        name = str(topic.name)
        for p in topic.partitions:
            index = int(p.partition_index)
            count = seen.pop((name, index), None)
            if count is None:
                continue  # a duplicate already answered
            if count > 1 or not services.allowed(
                ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name
            ):
                fields = {
                    "partition_index": index,
                    "error_code": ErrorCode.invalid_request
                    if count > 1
                    else ErrorCode.topic_authorization_failed,
                    "timestamp": UNKNOWN,
                    "offset": UNKNOWN,
                    "leader_epoch": UNKNOWN,
                }
            else:
                fields = _list_offset(
                    services,
                    name,
                    index,
                    int(p.timestamp),
                    int(getattr(p, "current_leader_epoch", -1)),
                    replica_id,
                    ctx.api_version,
                    int(getattr(request, "isolation_level", 0)),
                )
            topics.setdefault(name, []).append(make(part_cls, **fields))
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            make(topic_cls, name=name, partitions=tuple(parts)) for name, parts in topics.items()
        ),
    )


async def handle_offset_for_leader_epoch(
    services: BrokerServices, ctx: RequestContext, request
) -> object:
    cls = response_class(ApiKey.OFFSET_FOR_LEADER_EPOCH, ctx.api_version)
    topic_cls = nested(cls, "OffsetForLeaderTopicResult")
    part_cls = nested(cls, "EpochEndOffset")
    # Kafka: a follower's request (replica_id >= 0, v3+) needs ClusterAction on the
    # cluster, a consumer's Describe on each topic.
    replica_id = int(getattr(request, "replica_id", CONSUMER_REPLICA_ID))
    cluster_refused = replica_id != CONSUMER_REPLICA_ID and not services.allowed(
        ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME
    )
    topics = []
    for topic in request.topics:
        name = str(topic.topic)
        topic_refused = not cluster_refused and not services.allowed(
            ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name
        )
        parts = []
        for p in topic.partitions:
            index = int(p.partition)
            partition = services.replica_manager.get_partition(name, index)
            answer = {"partition": index, "leader_epoch": -1, "end_offset": -1}
            if cluster_refused:
                answer["error_code"] = ErrorCode.cluster_authorization_failed
            elif topic_refused:
                answer["error_code"] = ErrorCode.topic_authorization_failed
            elif partition is None:
                answer["error_code"] = not_hosted_error(services, name, index)
            else:
                error, end = partition.answer_offsets_for_leader_epoch(
                    int(p.current_leader_epoch), int(p.leader_epoch)
                )
                answer["error_code"] = error
                if error is ErrorCode.none:
                    answer.update(leader_epoch=end.leader_epoch, end_offset=end.end_offset)
            parts.append(make(part_cls, **answer))
        topics.append(make(topic_cls, topic=topic.topic, partitions=tuple(parts)))
    return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))
