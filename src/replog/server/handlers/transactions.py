"""The transaction coordinator's requests: FindCoordinator's transaction key, the
transactional InitProducerId, AddPartitionsToTxn (v0-v5), AddOffsetsToTxn, EndTxn,
DescribeTransactions and ListTransactions (Kafka ``KafkaApis``).

The decisions and their errors are the core's (``replog.coordinator.transaction``); here
are the checks Kafka makes before it asks its coordinator:

- ACLs: Write on the TransactionalId for InitProducerId, AddPartitionsToTxn v0-v3,
  AddOffsetsToTxn and EndTxn (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); Read on the group
  for AddOffsetsToTxn (GROUP_AUTHORIZATION_FAILED); Write on each topic for
  AddPartitionsToTxn v0-v3, never granted for an internal topic (TOPIC_AUTHORIZATION_FAILED,
  the others OPERATION_NOT_ATTEMPTED); ClusterAction for AddPartitionsToTxn v4+, which only
  brokers send (top-level CLUSTER_AUTHORIZATION_FAILED) and nothing else; Describe on the
  TransactionalId for FindCoordinator and DescribeTransactions, and ListTransactions lists
  only the ids it allows (and of each transaction only the topics the principal may
  describe).
- AddOffsetsToTxn before ``__consumer_offsets`` exists: UNKNOWN_TOPIC_OR_PARTITION.
- A partition the cluster does not know: UNKNOWN_TOPIC_OR_PARTITION (the rest of the
  transaction OPERATION_NOT_ATTEMPTED).
- PRODUCER_FENCED reads INVALID_PRODUCER_EPOCH to versions before KIP-588
  (``error_for_version``).

``__transaction_state`` is created on the first FindCoordinator for a transactional id,
as ``__consumer_offsets`` is for a group: ``transaction.state.log.num.partitions``
partitions, replication factor min(``transaction.state.log.replication.factor``, live
brokers) and ``transaction_topic_configs`` (compacted, ``min.insync.replicas`` =
``transaction.state.log.min.isr``); COORDINATOR_NOT_AVAILABLE until it has leaders.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from replog.common.topics import (
    GROUP_METADATA_TOPIC_NAME,
    INTERNAL_TOPICS,
    TRANSACTION_STATE_TOPIC_NAME,
)
from replog.coordinator.transaction.coordinator import error_for_version, rejected_partitions
from replog.coordinator.transaction.effects import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, Answer
from replog.coordinator.transaction.transaction_topic import transaction_topic_configs
from replog.protocol.apis import ApiKey, make, nested
from replog.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from replog.server.handlers.context import NO_THROTTLE, BrokerServices, response_class
from replog.server.handlers.internal_topics import InternalTopic
from replog.server.network import RequestContext

log = logging.getLogger(__name__)

FIRST_BATCHED_ADD_PARTITIONS = 4
NO_START_TIME = datetime.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=datetime.UTC)  # -1 ms


class TransactionRequests:
    """The handlers; ``find_coordinator`` is FindCoordinator's part for key type 1."""

    def __init__(self, services: BrokerServices) -> None:
        self.services = services
        self.state_topic = InternalTopic(services, TRANSACTION_STATE_TOPIC_NAME, self._state_shape)

    def _state_shape(self) -> tuple[int, int, dict[str, str]]:
        coordinator = self.services.transaction_coordinator
        assert coordinator is not None
        config = coordinator.config
        return (
            config.transaction_log_num_partitions,
            config.transaction_log_replication_factor,
            dict(transaction_topic_configs(config)),
        )

    def _write_allowed(self, ctx: RequestContext, transactional_id: str) -> bool:
        return self.services.allowed(
            ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id
        )

    # -- FindCoordinator ------------------------------------------------------------------

    def find_coordinator(
        self, transactional_id: str, ctx: RequestContext
    ) -> tuple[ErrorCode, str | None, Any]:
        """(error, message, broker endpoint or None) for one transactional id."""
        s = self.services
        if not s.allowed(
            ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id
        ):
            return ErrorCode.transactional_id_authorization_failed, None, None
        runtime = s.transaction_coordinator
        if runtime is None:
            return ErrorCode.coordinator_not_available, None, None
        if not self.state_topic.exists():
            self.state_topic.ensure()
            return ErrorCode.coordinator_not_available, None, None
        cache = s.metadata_cache
        info = cache.partition(
            TRANSACTION_STATE_TOPIC_NAME, runtime.partition_for(transactional_id)
        )
        endpoint = None if info is None else cache.brokers_for(ctx.listener).get(info.leader)
        if endpoint is None:
            return ErrorCode.coordinator_not_available, None, None
        return ErrorCode.none, None, endpoint

    # -- AddPartitionsToTxn -----------------------------------------------------------------

    async def handle_add_partitions_to_txn(self, ctx: RequestContext, request) -> object:
        version = ctx.api_version
        cls = response_class(ApiKey.ADD_PARTITIONS_TO_TXN, version)
        if version < FIRST_BATCHED_ADD_PARTITIONS:
            results = await self._add_partitions(
                ctx,
                str(request.v3_and_below_transactional_id),
                int(request.v3_and_below_producer_id),
                int(request.v3_and_below_producer_epoch),
                [(str(t.name), int(p)) for t in request.v3_and_below_topics for p in t.partitions],
                verify_only=False,
            )
            return make(
                cls,
                throttle_time=NO_THROTTLE,
                results_by_topic_v3_and_below=_topic_results(cls, results),
            )
        result_cls = nested(cls, "AddPartitionsToTxnResult")
        if not self.services.allowed(
            ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME
        ):
            return make(
                cls,
                throttle_time=NO_THROTTLE,
                error_code=ErrorCode.cluster_authorization_failed,
                results_by_transaction=(),
            )
        answers = []
        for txn in request.transactions:
            results = await self._add_partitions(
                ctx,
                str(txn.transactional_id),
                int(txn.producer_id),
                int(txn.producer_epoch),
                [(str(t.name), int(p)) for t in txn.topics for p in t.partitions],
                verify_only=bool(txn.verify_only),
            )
            answers.append(
                make(
                    result_cls,
                    transactional_id=txn.transactional_id,
                    topic_results=_topic_results(cls, results),
                )
            )
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            results_by_transaction=tuple(answers),
        )

    async def _add_partitions(
        self,
        ctx: RequestContext,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[tuple[str, int]],
        *,
        verify_only: bool,
    ) -> dict[tuple[str, int], ErrorCode]:
        """One transaction's partitions and the error of each."""
        s = self.services
        from_client = ctx.api_version < FIRST_BATCHED_ADD_PARTITIONS
        if from_client and not self._write_allowed(ctx, transactional_id):
            return {tp: ErrorCode.transactional_id_authorization_failed for tp in partitions}
        # Clients need Write on each topic and may not add an internal topic's partition
        # (AddOffsetsToTxn adds __consumer_offsets); v4+ comes from brokers (ClusterAction)
        writable = {
            topic: not from_client
            or (
                topic not in INTERNAL_TOPICS
                and s.allowed(ctx, AclOperation.WRITE, ResourceType.TOPIC, topic)
            )
            for topic in {t for t, _ in partitions}
        }
        unauthorized = [tp for tp in partitions if not writable[tp[0]]]
        unknown = [
            tp for tp in partitions if writable[tp[0]] and s.metadata_cache.partition(*tp) is None
        ]
        if unauthorized or unknown:
            accepted = [tp for tp in partitions if tp not in unauthorized and tp not in unknown]
            return rejected_partitions(unauthorized, unknown, accepted)
        runtime = s.transaction_coordinator
        if runtime is None:
            return {tp: ErrorCode.coordinator_not_available for tp in partitions}
        if verify_only:
            answer = runtime.verify_partitions(
                transactional_id, producer_id, producer_epoch, partitions
            )
        else:
            answer = await runtime.add_partitions(
                transactional_id, producer_id, producer_epoch, partitions
            )
        return _per_partition(answer, partitions, ctx.api_version)

    # -- AddOffsetsToTxn ----------------------------------------------------------------------

    async def handle_add_offsets_to_txn(self, ctx: RequestContext, request) -> object:
        cls = response_class(ApiKey.ADD_OFFSETS_TO_TXN, ctx.api_version)
        transactional_id = str(request.transactional_id)
        group_id = str(request.group_id)
        runtime = self.services.transaction_coordinator
        if not self._write_allowed(ctx, transactional_id):
            error = ErrorCode.transactional_id_authorization_failed
        elif not self.services.allowed(ctx, AclOperation.READ, ResourceType.GROUP, group_id):
            error = ErrorCode.group_authorization_failed
        elif runtime is None:
            error = ErrorCode.coordinator_not_available
        elif not self.services.metadata_cache.has_topic(GROUP_METADATA_TOPIC_NAME):
            error = ErrorCode.unknown_topic_or_partition  # Kafka: no offsets partition to add
        else:
            answer = await runtime.add_offsets(
                transactional_id, int(request.producer_id), int(request.producer_epoch), group_id
            )
            error = error_for_version("AddOffsetsToTxn", ctx.api_version, answer.error)
        return make(cls, throttle_time=NO_THROTTLE, error_code=error)

    # -- EndTxn -----------------------------------------------------------------------------

    async def handle_end_txn(self, ctx: RequestContext, request) -> object:
        cls = response_class(ApiKey.END_TXN, ctx.api_version)
        transactional_id = str(request.transactional_id)
        runtime = self.services.transaction_coordinator
        if not self._write_allowed(ctx, transactional_id):
            error = ErrorCode.transactional_id_authorization_failed
        elif runtime is None:
            error = ErrorCode.coordinator_not_available
        else:
            answer = await runtime.end_txn(
                transactional_id,
                int(request.producer_id),
                int(request.producer_epoch),
                bool(request.committed),
            )
            error = error_for_version("EndTxn", ctx.api_version, answer.error)
        return make(cls, throttle_time=NO_THROTTLE, error_code=error)

    # -- DescribeTransactions / ListTransactions ----------------------------------------------

    async def handle_describe_transactions(self, ctx: RequestContext, request) -> object:
        cls = response_class(ApiKey.DESCRIBE_TRANSACTIONS, ctx.api_version)
        state_cls = nested(cls, "TransactionState")
        topic_cls = nested(cls, "TopicData")
        s = self.services
        runtime = s.transaction_coordinator
        states = []
        for tid in request.transactional_ids:
            tid = str(tid)
            if not s.allowed(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
                error = ErrorCode.transactional_id_authorization_failed
                described = None
            elif runtime is None:
                error, described = ErrorCode.coordinator_not_available, None
            else:
                described = runtime.describe(tid)
                error = described.error
            if described is None or error is not ErrorCode.none:
                states.append(
                    make(
                        state_cls,
                        error_code=error,
                        transactional_id=tid,
                        transaction_state="",
                        transaction_timeout=_ms(0),
                        transaction_start_time=NO_START_TIME,
                        producer_id=NO_PRODUCER_ID,
                        producer_epoch=NO_PRODUCER_EPOCH,
                        topics=(),
                    )
                )
                continue
            topics = tuple(
                make(topic_cls, topic=topic, partitions=parts)
                for topic, parts in described.topics
                # Kafka lists only the topics the principal may describe
                if s.allowed(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topic)
            )
            start = described.transaction_start_time_ms
            states.append(
                make(
                    state_cls,
                    error_code=ErrorCode.none,
                    transactional_id=tid,
                    transaction_state=described.transaction_state,
                    transaction_timeout=_ms(described.transaction_timeout_ms),
                    transaction_start_time=NO_START_TIME
                    if start < 0
                    else datetime.datetime.fromtimestamp(start / 1000, datetime.UTC),
                    producer_id=described.producer_id,
                    producer_epoch=described.producer_epoch,
                    topics=topics,
                )
            )
        return make(cls, throttle_time=NO_THROTTLE, transaction_states=tuple(states))

    async def handle_list_transactions(self, ctx: RequestContext, request) -> object:
        cls = response_class(ApiKey.LIST_TRANSACTIONS, ctx.api_version)
        state_cls = nested(cls, "TransactionState")
        s = self.services
        runtime = s.transaction_coordinator
        if runtime is None:
            return make(
                cls,
                throttle_time=NO_THROTTLE,
                error_code=ErrorCode.coordinator_not_available,
                unknown_state_filters=(),
                transaction_states=(),
            )
        listed = runtime.list(
            [int(p) for p in request.producer_id_filters],
            [str(f) for f in request.state_filters],
            int(getattr(request, "duration_filter", -1)),
        )
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=listed.error,
            unknown_state_filters=listed.unknown_state_filters,
            transaction_states=tuple(
                make(
                    state_cls,
                    transactional_id=t.transactional_id,
                    producer_id=t.producer_id,
                    transaction_state=t.transaction_state,
                )
                for t in listed.transaction_states
                if s.allowed(
                    ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, t.transactional_id
                )
            ),
        )


async def init_transactional_producer_id(
    services: BrokerServices, ctx: RequestContext, transactional_id: str, request
) -> tuple[ErrorCode, int, int]:
    """InitProducerId with a transactional id (the ``producers`` handler's other half):
    (error, producer id, epoch); the handler checked Write on the TransactionalId."""
    runtime = services.transaction_coordinator
    if runtime is None:
        return ErrorCode.coordinator_not_available, NO_PRODUCER_ID, -1
    timeout_ms = int(request.transaction_timeout.total_seconds() * 1000)
    answer = await runtime.init_producer_id(
        transactional_id,
        timeout_ms,
        int(getattr(request, "producer_id", NO_PRODUCER_ID)),
        int(getattr(request, "producer_epoch", NO_PRODUCER_EPOCH)),
    )
    error = error_for_version("InitProducerId", ctx.api_version, answer.error)
    if error is not ErrorCode.none:
        return error, NO_PRODUCER_ID, -1
    return error, answer.producer_id, answer.producer_epoch


def _per_partition(
    answer: Answer, partitions: list[tuple[str, int]], version: int
) -> dict[tuple[str, int], ErrorCode]:
    errors = {}
    for tp in partitions:
        error = answer.partition_errors.get(tp, answer.error)
        errors[tp] = error_for_version("AddPartitionsToTxn", version, error)
    return errors


def _topic_results(cls: type, results: dict[tuple[str, int], ErrorCode]) -> tuple:
    topic_cls = nested(cls, "AddPartitionsToTxnTopicResult")
    part_cls = nested(cls, "AddPartitionsToTxnPartitionResult")
    by_topic: dict[str, list[tuple[int, ErrorCode]]] = {}
    for (topic, partition), error in results.items():
        by_topic.setdefault(topic, []).append((partition, error))
    return tuple(
        make(
            topic_cls,
            name=topic,
            results_by_partition=tuple(
                make(part_cls, partition_index=p, partition_error_code=e) for p, e in parts
            ),
        )
        for topic, parts in by_topic.items()
    )


def _ms(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))
