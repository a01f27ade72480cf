"""InitProducerId and DescribeProducers: idempotent producers' ids, and what each
partition remembers of them.

InitProducerId (Kafka ``handleInitProducerIdRequest`` and the transaction
coordinator's ``handleInitProducerId``): a producer id without the other half
(v3+ ``producer_id`` / ``producer_epoch``, KIP-360) is INVALID_REQUEST; a
non-transactional producer always gets a new producer id at epoch 0, also when
it names the id and epoch it had (Kafka "blindly accepts" those: an idempotent
producer that wants a new epoch gets a new id). It needs IdempotentWrite on the cluster
or, since Kafka 3.0 (KIP-679), Write on some topic. A transactional id goes to the
transaction coordinator (``handlers.transactions``), Write on the TransactionalId
checked first.

DescribeProducers (KIP-664; Kafka ``handleDescribeProducersRequest``,
``Partition.activeProducerState``): the producers the replica's log has state
for, from whichever replica is asked (clients ask the leader), with the first offset of
each producer's open transaction there (-1 without one); an unknown topic
is UNKNOWN_TOPIC_OR_PARTITION, a partition without a local replica
NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog.protocol.apis import ApiKey, make, nested
from replog.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from replog.server.handlers.context import NO_THROTTLE, BrokerServices, response_class
from replog.server.handlers.transactions import init_transactional_producer_id
from replog.server.network import RequestContext

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_COORDINATOR_EPOCH = -1


async def handle_init_producer_id(services: BrokerServices, ctx: RequestContext, request) -> object:
    cls = response_class(ApiKey.INIT_PRODUCER_ID, ctx.api_version)

    def answer(error: ErrorCode, producer_id: int = NO_PRODUCER_ID, epoch: int = NO_PRODUCER_EPOCH):
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=error,
            producer_id=producer_id,
            producer_epoch=epoch,
        )

    transactional_id = request.transactional_id
    producer_id = int(getattr(request, "producer_id", NO_PRODUCER_ID))
    producer_epoch = int(getattr(request, "producer_epoch", NO_PRODUCER_EPOCH))
    # Kafka's order: the ACL first (Write on the TransactionalId; for an idempotent
    # producer IdempotentWrite on the cluster or, since Kafka 3.0 (KIP-679), Write on any
    # topic), then the producer id and epoch
    if transactional_id is not None:
        if not services.allowed(
            ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, str(transactional_id)
        ):
            return answer(ErrorCode.transactional_id_authorization_failed)
    elif not services.allowed(
        ctx, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME
    ) and not services.allowed_on_some(ctx, AclOperation.WRITE, ResourceType.TOPIC):
        return answer(ErrorCode.cluster_authorization_failed)
    if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
        return answer(ErrorCode.invalid_request)
    if transactional_id is not None:
        return answer(
            *await init_transactional_producer_id(services, ctx, str(transactional_id), request)
        )
    return answer(ErrorCode.none, await services.producer_ids.generate_producer_id(), 0)


async def handle_describe_producers(
    services: BrokerServices, ctx: RequestContext, request
) -> object:
    cls = response_class(ApiKey.DESCRIBE_PRODUCERS, ctx.api_version)
    topic_cls = nested(cls, "TopicResponse")
    part_cls = nested(cls, "PartitionResponse")
    state_cls = nested(cls, "ProducerState")
    cache = services.metadata_cache
    topics = []
    for topic in request.topics:
        name = str(topic.name)
        known_topic = cache.has_topic(name)
        parts = []
        for index in topic.partition_indexes:
            index = int(index)
            error, producers = ErrorCode.none, ()
            partition = services.replica_manager.get_partition(name, index) if known_topic else None
            if not services.allowed(ctx, AclOperation.READ, ResourceType.TOPIC, name):
                error = ErrorCode.topic_authorization_failed  # Kafka: Read on the topic
            elif not known_topic:
                error = ErrorCode.unknown_topic_or_partition
            elif partition is None:
                error = (
                    ErrorCode.not_leader_or_follower
                    if cache.partition(name, index) is not None
                    else ErrorCode.unknown_topic_or_partition
                )
            else:
                producers = tuple(
                    make(
                        state_cls,
                        producer_id=entry.producer_id,
                        producer_epoch=entry.producer_epoch,
                        last_sequence=entry.last_seq,
                        last_timestamp=entry.last_timestamp,
                        coordinator_epoch=entry.coordinator_epoch,
                        current_txn_start_offset=entry.current_txn_first_offset,
                    )
                    for entry in sorted(
                        partition.producer_states(),
                        key=lambda e: e.producer_id,
                    )
                )
            parts.append(
                make(
                    part_cls,
                    partition_index=index,
                    error_code=error,
                    error_message=None,
                    active_producers=producers,
                )
            )
        topics.append(make(topic_cls, name=name, partitions=tuple(parts)))
    return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))
