"""KIP-890 part 1: a partition leader asks the transaction coordinator whether the
partitions a transactional batch would open a transaction on are in the producer's
ongoing transaction, before it appends (Kafka ``AddPartitionsToTxnManager``).

``TransactionVerifier.verify`` finds the coordinator (the leader of the
``__transaction_state`` partition of the transactional id, by the metadata cache) and
sends it AddPartitionsToTxn v4 with ``verify_only``, over the inter-broker listener. The
verifications waiting for one coordinator go together in its next request (one
transaction per transactional id in a request; another for the same id waits for the
next one), one request in flight per coordinator.

Answers, per partition, as Kafka converts them: PRODUCER_FENCED is INVALID_PRODUCER_EPOCH
and TRANSACTION_ABORTABLE is INVALID_TXN_STATE (what clients of the produce path know); no
coordinator (no topic, no leader, no endpoint) is COORDINATOR_NOT_AVAILABLE; a lost
connection or a request timeout NETWORK_EXCEPTION. ``produce_error`` turns the
coordinator-side retriable ones into NOT_ENOUGH_REPLICAS for the producer, as Kafka's
``ReplicaManager`` does.

Concurrency: event loop only; one sender task per coordinator broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from replog.common.topics import TRANSACTION_STATE_TOPIC_NAME
from replog.coordinator.transaction.transaction_topic import partition_for
from replog.protocol.apis import ApiKey, make, nested, request_schema
from replog.protocol.client import KafkaConnection
from replog.security.client_security import ClientSecurity
from replog.server.metadata_cache import MetadataCache

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
VERIFY_VERSION = 4
_CONVERTED = {
    ErrorCode.producer_fenced: ErrorCode.invalid_producer_epoch,
    ErrorCode.transaction_abortable: ErrorCode.invalid_txn_state,
}
_RETRIABLE_FOR_PRODUCERS = frozenset(
    {
        ErrorCode.concurrent_transactions,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
    }
)


def produce_error(error: ErrorCode) -> ErrorCode:
    """A verification's error as the produce answer carries it (Kafka maps the
    coordinator's retriable errors to NOT_ENOUGH_REPLICAS, which producers retry)."""
    return ErrorCode.not_enough_replicas if error in _RETRIABLE_FOR_PRODUCERS else error


@dataclass
class _Verification:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]
    answer: asyncio.Future[dict[TopicPartition, ErrorCode]]


class TransactionVerifier:
    def __init__(
        self,
        metadata_cache: MetadataCache,
        *,
        listener: str,
        security: ClientSecurity,
        request_timeout_ms: int,
        client_id: str,
    ) -> None:
        self.metadata_cache = metadata_cache
        self.listener = listener
        self.security = security
        self.request_timeout_s = request_timeout_ms / 1000
        self.client_id = client_id
        self._pending: dict[int, list[_Verification]] = {}
        self._senders: dict[int, asyncio.Task[None]] = {}
        self._connections: dict[int, KafkaConnection] = {}
        self.requests_sent = 0

    def coordinator(self, transactional_id: str) -> tuple[int, str, int] | None:
        """``(broker id, host, port)`` of the transactional id's coordinator, if known."""
        cache = self.metadata_cache
        count = len(cache.partitions.get(TRANSACTION_STATE_TOPIC_NAME, {}))
        if count == 0:
            return None
        info = cache.partition(TRANSACTION_STATE_TOPIC_NAME, partition_for(transactional_id, count))
        if info is None or info.leader < 0:
            return None
        endpoint = cache.brokers_for(self.listener).get(info.leader)
        if endpoint is None:
            return None
        return info.leader, endpoint.host, endpoint.port

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """Each partition's answer (NONE: in the producer's ongoing transaction)."""
        wanted = tuple(partitions)
        found = self.coordinator(transactional_id)
        if found is None:
            return dict.fromkeys(wanted, ErrorCode.coordinator_not_available)
        node = found[0]
        answer: asyncio.Future[dict[TopicPartition, ErrorCode]] = (
            asyncio.get_running_loop().create_future()
        )
        self._pending.setdefault(node, []).append(
            _Verification(transactional_id, producer_id, producer_epoch, wanted, answer)
        )
        sender = self._senders.get(node)
        if sender is None or sender.done():
            self._senders[node] = asyncio.create_task(self._send_all(node))
        return await answer

    async def _send_all(self, node: int) -> None:
        while self._pending.get(node):
            batch, rest, ids = [], [], set()
            for v in self._pending.pop(node):
                if v.answer.done():
                    continue  # its producer's request went away
                (rest if v.transactional_id in ids else batch).append(v)
                ids.add(v.transactional_id)
            if rest:
                self._pending[node] = rest + self._pending.get(node, [])
            if batch:
                await self._send(node, batch)

    async def _send(self, node: int, batch: list[_Verification]) -> None:
        answers: dict[str, dict[TopicPartition, ErrorCode]]
        try:
            answers = await self._request(node, batch)
        except (OSError, TimeoutError) as exc:
            log.info("verifying %d transaction(s) with broker %d failed: %s", len(batch), node, exc)
            await self._drop_connection(node)
            answers = {
                v.transactional_id: dict.fromkeys(v.partitions, ErrorCode.network_exception)
                for v in batch
            }
        for v in batch:
            got = answers.get(v.transactional_id, {})
            result = {}
            for tp in v.partitions:
                code = got.get(tp, ErrorCode.unknown_server_error)  # left out of the answer
                result[tp] = _CONVERTED.get(code, code)
            if not v.answer.done():
                v.answer.set_result(result)

    async def _request(
        self, node: int, batch: list[_Verification]
    ) -> dict[str, dict[TopicPartition, ErrorCode]]:
        found = self.coordinator(batch[0].transactional_id)
        if found is None or found[0] != node:
            # the coordinator moved while these waited: let the producers retry
            return {
                v.transactional_id: dict.fromkeys(v.partitions, ErrorCode.not_coordinator)
                for v in batch
            }
        _, host, port = found
        conn = self._connections.get(node)
        if conn is not None and (not conn.connected or (conn.host, conn.port) != (host, port)):
            await self._drop_connection(node)
            conn = None
        if conn is None:
            conn = KafkaConnection(host, port, client_id=self.client_id, security=self.security)
            await conn.connect(timeout_s=self.request_timeout_s)
            self._connections[node] = conn
        self.requests_sent += 1
        response = await conn.request(_verify_request(batch), timeout_s=self.request_timeout_s)
        out: dict[str, dict[TopicPartition, ErrorCode]] = {}
        for v in batch:
            if response.error_code != ErrorCode.none:
                out[v.transactional_id] = dict.fromkeys(v.partitions, response.error_code)
        for result in response.results_by_transaction:
            tid = str(result.transactional_id)
            if tid in out:
                continue
            out[tid] = {
                (str(topic.name), int(p.partition_index)): p.partition_error_code
                for topic in result.topic_results
                for p in topic.results_by_partition
            }
        return out

    async def _drop_connection(self, node: int) -> None:
        conn = self._connections.pop(node, None)
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def close(self) -> None:
        for task in self._senders.values():
            task.cancel()
        for task in self._senders.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._senders.clear()
        for node in list(self._connections):
            await self._drop_connection(node)


def _verify_request(batch: list[_Verification]) -> object:
    cls = request_schema(ApiKey.ADD_PARTITIONS_TO_TXN, VERIFY_VERSION)
    txn_cls = nested(cls, "AddPartitionsToTxnTransaction")
    topic_cls = nested(cls, "AddPartitionsToTxnTopic")
    transactions = []
    for v in batch:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in v.partitions:
            by_topic.setdefault(topic, []).append(partition)
        transactions.append(
            make(
                txn_cls,
                transactional_id=v.transactional_id,
                producer_id=v.producer_id,
                producer_epoch=v.producer_epoch,
                verify_only=True,
                topics=tuple(
                    make(topic_cls, name=name, partitions=tuple(parts))
                    for name, parts in by_topic.items()
                ),
            )
        )
    return make(cls, transactions=tuple(transactions))


class TransactionalAppendOrder:
    """Per transactional id, produce requests verify and append one at a time, in the
    order they reached the lock (their arrival order: a handler takes its turn before its
    first await). The lock is held over the verification and the appends, not over an
    acks=all wait.

    Concurrency: owned by the event loop; the entry of an id lives while requests use it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def turn(self, transactional_id: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(transactional_id, (asyncio.Lock(), 0))
        self._locks[transactional_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[transactional_id]
            if users == 1:
                del self._locks[transactional_id]
            else:
                self._locks[transactional_id] = (lock, users - 1)
