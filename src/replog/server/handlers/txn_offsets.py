"""TxnOffsetCommit (API 28): a transactional producer commits a group's offsets in its
transaction (Kafka ``KafkaApis.handleTxnOffsetCommitRequest``).

Versions 0 to 4: v2 adds each partition's committed leader epoch, v3 (flexible) the
consumer's generation, member id and group instance id (KIP-447 fencing), v4 only says
the client knows TRANSACTION_ABORTABLE (KIP-890). librdkafka 2.x asks for up to v3,
Kafka's Java producer for v4 without transaction version 2. v5 (KIP-890 part 2, the
coordinator adding the offsets partition implicitly) is not offered.

Checks in Kafka's order: Write on the TransactionalId
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and Read on the group
(GROUP_AUTHORIZATION_FAILED), each for every partition of the request; then per topic
Read (TOPIC_AUTHORIZATION_FAILED) and existence of each partition
(UNKNOWN_TOPIC_OR_PARTITION); the rest goes to the group coordinator
(``coordinator.group.txn_offsets``), whose error (NOT_COORDINATOR, ILLEGAL_GENERATION,
FENCED_INSTANCE_ID, INVALID_PRODUCER_EPOCH from the partition, ...) every one of those
partitions carries. With ``transaction.partition.verification.enable`` it first verifies
the offsets partition with the transaction coordinator (KIP-890, ``_verify``): a
partition not in the producer's ongoing transaction is INVALID_TXN_STATE, a fenced epoch
INVALID_PRODUCER_EPOCH, the coordinator's retriable errors COORDINATOR_NOT_AVAILABLE and
a lost verification COORDINATOR_LOAD_IN_PROGRESS (Kafka's
``maybeConvertOffsetCommitError``, which clients retry); a metadata string over ``offset.metadata.max.bytes`` is
OFFSET_METADATA_TOO_LARGE for its partition alone when the group accepts the commit.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from replog.common.topics import GROUP_METADATA_TOPIC_NAME
from replog.coordinator.group.coordinator import TransactionalProducer, Verification
from replog.coordinator.group.records import NO_EXPIRE_TIMESTAMP, OffsetCommitValue, storable
from replog.coordinator.group.txn_offsets import GroupFence, commit_transactional_offsets
from replog.protocol.apis import ApiKey, make, nested
from replog.security.acl import AclOperation, ResourceType
from replog.server.handlers.context import NO_THROTTLE, BrokerServices, response_class
from replog.server.network import RequestContext
from replog.server.txn_verification import produce_error

NO_LEADER_EPOCH = -1
# Kafka ``GroupMetadataManager.maybeConvertOffsetCommitError`` for a verification's error
_VERIFICATION_ERRORS = {
    ErrorCode.network_exception: ErrorCode.coordinator_load_in_progress,
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
}


def _verifier(services: BrokerServices, transactional_id: str):
    """KIP-890: the check ``commit_transactional_offsets`` makes before it opens the
    producer's transaction on the group's offsets partition (Kafka
    ``maybeStartTransactionVerificationForPartition``)."""

    async def verify(
        partition: int, producer: TransactionalProducer
    ) -> tuple[ErrorCode, Verification | None]:
        key = (GROUP_METADATA_TOPIC_NAME, partition)
        rm = services.replica_manager
        error, guard = rm.maybe_start_transaction_verification(*key, producer.producer_id)
        if error is not ErrorCode.none:
            return _VERIFICATION_ERRORS.get(error, error), None
        if guard is None:  # its transaction is open on the partition already
            return ErrorCode.none, Verification(None)
        verifier = services.transaction_verifier
        if verifier is None:
            code = ErrorCode.coordinator_not_available
        else:
            answers = await verifier.verify(
                transactional_id, producer.producer_id, producer.producer_epoch, [key]
            )
            code = answers[key]
        if code is ErrorCode.none:
            return ErrorCode.none, Verification(guard)
        code = produce_error(code)
        return _VERIFICATION_ERRORS.get(code, code), None

    return verify


async def handle_txn_offset_commit(
    services: BrokerServices, ctx: RequestContext, request
) -> object:
    cls = response_class(ApiKey.TXN_OFFSET_COMMIT, ctx.api_version)
    topic_cls = nested(cls, "TxnOffsetCommitResponseTopic")
    part_cls = nested(cls, "TxnOffsetCommitResponsePartition")
    s = services
    group_id = str(request.group_id)
    order: list[tuple[str, int]] = []
    errors: dict[tuple[str, int], ErrorCode] = {}
    if not s.allowed(
        ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, str(request.transactional_id)
    ):
        request_error = ErrorCode.transactional_id_authorization_failed
    elif not s.allowed(ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        request_error = ErrorCode.group_authorization_failed
    elif not group_id or not storable(group_id):
        request_error = ErrorCode.invalid_group_id
    else:
        request_error = ErrorCode.none
    now = s.group_coordinator.clock()
    writes: list[tuple[tuple[str, int], OffsetCommitValue]] = []
    too_large: list[tuple[str, int]] = []
    for topic in request.topics:
        name = str(topic.name)
        readable = request_error == ErrorCode.none and s.allowed(
            ctx, AclOperation.READ, ResourceType.TOPIC, name
        )
        for p in topic.partitions:
            tp = (name, int(p.partition_index))
            order.append(tp)
            metadata = p.committed_metadata or ""
            if request_error != ErrorCode.none:
                errors[tp] = request_error
            elif not readable:
                errors[tp] = ErrorCode.topic_authorization_failed
            elif s.metadata_cache.partition(name, tp[1]) is None or not storable(name):
                errors[tp] = ErrorCode.unknown_topic_or_partition
            elif len(metadata.encode()) > s.config.offset_metadata_max_bytes:
                too_large.append(tp)
            else:
                writes.append(
                    (
                        tp,
                        OffsetCommitValue(
                            offset=int(p.committed_offset),
                            leader_epoch=int(getattr(p, "committed_leader_epoch", NO_LEADER_EPOCH)),
                            metadata=metadata,
                            commit_timestamp=now,
                            expire_timestamp=NO_EXPIRE_TIMESTAMP,
                        ),
                    )
                )
    if writes or too_large:
        fence = GroupFence(
            int(getattr(request, "generation_id", -1)),
            str(getattr(request, "member_id", "") or ""),
            getattr(request, "group_instance_id", None),
        )
        producer = TransactionalProducer(
            int(request.producer_id), int(request.producer_epoch), str(request.transactional_id)
        )
        verify = (
            _verifier(s, str(request.transactional_id))
            if s.config.transaction_partition_verification_enable
            else None
        )
        error = await commit_transactional_offsets(
            s.group_coordinator, group_id, producer, fence, writes, verify
        )
        for tp, _ in writes:
            errors[tp] = error
        # Kafka checks the group first: its error wins over the metadata's size.
        for tp in too_large:
            errors[tp] = error if error != ErrorCode.none else ErrorCode.offset_metadata_too_large
    by_topic: dict[str, list[Any]] = {}
    for tp in order:
        by_topic.setdefault(tp[0], []).append(
            make(part_cls, partition_index=tp[1], error_code=errors[tp])
        )
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            make(topic_cls, name=name, partitions=tuple(parts)) for name, parts in by_topic.items()
        ),
    )
