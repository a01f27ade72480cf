"""WriteTxnMarkers: a transaction coordinator's COMMIT or ABORT markers written to the
partitions of a transaction led here (Kafka ``handleWriteTxnMarkersRequest``).

An inter-broker request: without ClusterAction every partition is
CLUSTER_AUTHORIZATION_FAILED. For each marker, each partition gets one control batch
(``Log.append_marker_as_leader``), written with acks=all within ``request.timeout.ms``:

- a partition not hosted here is UNKNOWN_TOPIC_OR_PARTITION (KAFKA_STORAGE_ERROR in an
  offline log dir), one hosted as follower NOT_LEADER_OR_FOLLOWER, one under
  ``min.insync.replicas`` NOT_ENOUGH_REPLICAS (NOT_ENOUGH_REPLICAS_AFTER_APPEND or
  REQUEST_TIMED_OUT while waiting for the ISR);
- an older producer epoch than the partition's is INVALID_PRODUCER_EPOCH, an older
  coordinator epoch TRANSACTION_COORDINATOR_FENCED: nothing is written.

Once a marker is on every in-sync replica of a ``__consumer_offsets`` partition, the
group coordinator applies the transaction's pending offsets there
(``on_transaction_marker``), before the answer goes back.

Markers of one request are written in order; several markers for one partition (two
producers' transactions) each get their own answer.
"""

from __future__ import annotations

import asyncio
import logging

from kio.schema.errors import ErrorCode

from replog.common.clock import now_ms
from replog.common.topics import GROUP_METADATA_TOPIC_NAME
from replog.protocol.apis import ApiKey, make, nested
from replog.protocol.records import EndTxnMarker
from replog.replication.replica_manager import ProduceResult
from replog.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from replog.server.handlers.context import BrokerServices, response_class
from replog.server.network import RequestContext

log = logging.getLogger(__name__)


async def handle_write_txn_markers(
    services: BrokerServices, ctx: RequestContext, request
) -> object:
    cls = response_class(ApiKey.WRITE_TXN_MARKERS, ctx.api_version)
    marker_cls = nested(cls, "WritableTxnMarkerResult")
    topic_cls = nested(cls, "WritableTxnMarkerTopicResult")
    part_cls = nested(cls, "WritableTxnMarkerPartitionResult")
    authorized = services.allowed(
        ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME
    )
    rm = services.replica_manager
    per_marker: list[dict[tuple[str, int], ProduceResult]] = []
    for marker in request.markers:
        results: dict[tuple[str, int], ProduceResult] = {}
        end = EndTxnMarker(bool(marker.transaction_result), int(marker.coordinator_epoch))
        for topic in marker.topics:
            for index in topic.partition_indexes:
                key = (str(topic.name), int(index))
                if not authorized:
                    results[key] = ProduceResult(ErrorCode.cluster_authorization_failed)
                else:
                    results[key] = rm.append_txn_marker(
                        key[0],
                        key[1],
                        int(marker.producer_id),
                        int(marker.producer_epoch),
                        end,
                        now_ms(),
                    )
        per_marker.append(results)
    timeout_ms = services.config.request_timeout_ms
    await asyncio.gather(*(rm.wait_for_acks_all(r, timeout_ms) for r in per_marker))
    answers = []
    for marker, results in zip(request.markers, per_marker, strict=True):
        offsets_partitions = [
            partition
            for (topic, partition), result in results.items()
            if topic == GROUP_METADATA_TOPIC_NAME and result.error == ErrorCode.none
        ]
        for partition in offsets_partitions:
            services.group_coordinator.on_transaction_marker(
                partition, int(marker.producer_id), bool(marker.transaction_result)
            )
        by_topic: dict[str, list[object]] = {}
        for (topic, partition), result in results.items():
            if result.error != ErrorCode.none:
                log.info(
                    "WriteTxnMarkers for producer %d on %s-%d: %s",
                    marker.producer_id,
                    topic,
                    partition,
                    result.error.name,
                )
            by_topic.setdefault(topic, []).append(
                make(part_cls, partition_index=partition, error_code=result.error)
            )
        answers.append(
            make(
                marker_cls,
                producer_id=marker.producer_id,
                topics=tuple(
                    make(topic_cls, name=name, partitions=tuple(parts))
                    for name, parts in by_topic.items()
                ),
            )
        )
    return make(cls, markers=tuple(answers))
