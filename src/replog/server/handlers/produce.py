"""Produce: append to partition leaders; acks 0, 1 and -1 (all).

Transactional batches need the request's ``transactional_id`` and Write on it
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition otherwise, as Kafka); the
partition's producer state checks them (``storage.producer_state``). With
``transaction.partition.verification.enable`` (KIP-890 part 1, on by default as in
Kafka) a batch that would open a transaction on a partition is first verified with the
transaction coordinator (``server.txn_verification``): the coordinator's refusal is the
partition's answer, its retriable errors NOT_ENOUGH_REPLICAS.

A transactional producer's requests verify and append in the order they arrived
(``server.txn_verification.TransactionalAppendOrder``): a request still waiting for its verification is
never overtaken by a later one that needs none because the first opened the transaction
meanwhile (which the partition would refuse, OUT_OF_ORDER_SEQUENCE_NUMBER). Kafka gets
this order from handling one request of a connection at a time."""

from __future__ import annotations

import time

from kio.schema.errors import ErrorCode

from replog.common.clock import now_ms
from replog.common.topics import INTERNAL_TOPICS
from replog.protocol import frames, produce_codec
from replog.protocol.records import InvalidRecordBatch, first_batch_is_transactional, read_header
from replog.replication.replica_manager import ProduceResult
from replog.security.acl import AclOperation, ResourceType
from replog.server.handlers.context import BrokerServices
from replog.server.handlers.leader_discovery import (
    NOT_LEADER_ERRORS,
    LeaderDiscovery,
    not_hosted_error,
)
from replog.server.network import RequestContext
from replog.server.txn_verification import produce_error
from replog.storage.producer_state import VerificationGuard


def _has_transactional_records(request) -> bool:  # type: ignore[no-untyped-def]
    """Kafka ``ProduceRequest.hasTransactionalRecords``: a partition's first batch is.
    (Plain loops: a generator under ``any`` cost more than the check, on every produce.)"""
    for topic in request.topic_data:
        for part in topic.partition_data:
            records = part.records
            if records and first_batch_is_transactional(records):
                return True
    return False


async def _verify_transactions(
    services: BrokerServices,
    transactional_id: str,
    to_append: list[tuple[tuple[str, int], bytes]],
    results: dict[tuple[str, int], ProduceResult],
) -> dict[tuple[str, int], VerificationGuard]:
    """KIP-890 part 1: the partitions whose transactional batch would open a transaction
    are verified with the transaction coordinator first (Kafka
    ``ReplicaManager.appendRecords`` with a transactional id); those it refuses get their
    error in ``results``. Returns the guards the appends carry."""
    rm = services.replica_manager
    guards: dict[tuple[str, int], VerificationGuard] = {}
    wanted: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for key, records in to_append:
        if not first_batch_is_transactional(records):
            continue
        try:
            header = read_header(records)
        except InvalidRecordBatch:
            continue  # the append answers CORRUPT_MESSAGE
        error, guard = rm.maybe_start_transaction_verification(key[0], key[1], header.producer_id)
        if error is ErrorCode.none and guard is not None:
            guards[key] = guard
            wanted.setdefault((header.producer_id, header.producer_epoch), []).append(key)
    verifier = services.transaction_verifier
    for (producer_id, producer_epoch), keys in wanted.items():
        if verifier is None:
            answers = dict.fromkeys(keys, ErrorCode.coordinator_not_available)
        else:
            answers = await verifier.verify(transactional_id, producer_id, producer_epoch, keys)
        for key, code in answers.items():
            if code is not ErrorCode.none:
                results[key] = ProduceResult(
                    produce_error(code),
                    error_message="the transaction coordinator did not verify the partition "
                    f"in the transaction ({code.name})",
                )
    return guards


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
    to_append: list[tuple[tuple[str, int], bytes]] = []
    order: list[tuple[str, int]] = []  # the answer keeps the request's order
    for topic in request.topic_data:
        name = str(topic.name)
        if name not in writable:
            writable[name] = services.allowed(ctx, AclOperation.WRITE, ResourceType.TOPIC, name)
        for part in topic.partition_data:
            key = (name, int(part.index))
            order.append(key)
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
                to_append.append((key, part.records))
    verifying = services.config.transaction_partition_verification_enable

    def append(guards: dict[tuple[str, int], VerificationGuard], now: int) -> None:
        for key, records in to_append:
            if key in results:
                continue  # its verification failed
            result = results[key] = rm.append_to_leader(
                key[0],
                key[1],
                records,
                acks,
                now,
                verification_required=verifying,
                verification_guard=guards.get(key),
            )
            if result.error == ErrorCode.none:
                services.topic_stats.record_append(
                    key[0], result.required_offset - result.base_offset, len(records)
                )
            else:
                services.topic_stats.of(key[0]).failed_produce_requests += 1

    if verifying and to_append and request.transactional_id is not None:
        transactional_id = str(request.transactional_id)
        waited_from = time.monotonic()
        async with services.transactional_append_order.turn(transactional_id):
            guards = await _verify_transactions(services, transactional_id, to_append, results)
            ctx.remote_s += time.monotonic() - waited_from
            # The appends (LogAppendTime, time-based rolls) come after the wait.
            append(guards, now_ms())
    else:
        append({}, now)
    results = {key: results[key] for key in order}
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
