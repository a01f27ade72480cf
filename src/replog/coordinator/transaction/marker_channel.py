"""The transaction markers on the wire (Kafka ``TransactionMarkerChannelManager``'s sending
half): the core's ``SendTxnMarkers`` grouped by partition leader, one WriteTxnMarkers
request per broker at a time, each partition's answer reported back.

For each marker the partitions are split by their current leader (``leader_of``):

- a partition the cluster does not know any more (its topic deleted) is reported with
  ``partitions_deleted``: no marker is needed there;
- a partition without a live leader waits and is looked up again after
  ``RETRY_BACKOFF_S`` (Kafka waits for the next metadata update);
- the others join the queue of their leader's broker, whose sender task takes the whole
  queue into one WriteTxnMarkers request (v1, with the coordinator epoch: a partition
  leader refuses a stale coordinator's markers with TRANSACTION_COORDINATOR_FENCED) and
  reports each marker's partition errors with ``written``. A request that gets no answer
  (connection refused or lost, timed out) reports each of its markers ``undelivered``;
  the core asks for them again and they go to whoever leads then, after a backoff.

A marker the core asks for again (``attempt`` above 0: a retriable error such as
NOT_ENOUGH_REPLICAS, or a lost request) waits ``marker_retry_backoff_ms(attempt)``
before it is routed (``retrying_count`` counts those waiting), so a leader that cannot
take it yet is not asked again at once, round after round.

The leader is this broker too at times; the marker then goes through the network to
itself, as in Kafka.

Concurrency: owned by the event loop; ``send`` never awaits. One sender task per broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1 import request as wtm_req

from replog.coordinator.transaction.effects import SendTxnMarkers, marker_retry_backoff_ms
from replog.coordinator.transaction.transaction_log import group_partitions
from replog.protocol.client import KafkaConnection
from replog.security.client_security import PLAINTEXT, ClientSecurity

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
RETRY_BACKOFF_S = 0.1  # Kafka retry.backoff.ms, between looks for a partition's leader
RECONNECT_BACKOFF_S = 0.5  # after a request to a broker got no answer
CONNECT_TIMEOUT_S = 5.0
NO_LEADER = -1


class MarkerListener(Protocol):
    """Where the answers go (the runtime, which hands them to the core)."""

    def markers_written(
        self, marker: SendTxnMarkers, errors: Mapping[TopicPartition, ErrorCode]
    ) -> None: ...

    def markers_undelivered(self, marker: SendTxnMarkers) -> None: ...

    def markers_partitions_deleted(
        self, marker: SendTxnMarkers, partitions: Iterable[TopicPartition]
    ) -> None: ...


class TransactionMarkerChannel:
    """Concurrency: see the module docstring."""

    def __init__(
        self,
        broker_id: int,
        leader_of: Callable[[str, int], int | None],
        endpoint_of: Callable[[int], tuple[str, int] | None],
        listener: MarkerListener,
        *,
        request_timeout_ms: int,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        """``leader_of(topic, partition)``: the leader's broker id, -1 without a live
        leader, None for a partition the cluster does not know; ``endpoint_of(broker)``:
        its inter-broker host and port."""
        self.broker_id = broker_id
        self.leader_of = leader_of
        self.endpoint_of = endpoint_of
        self.listener = listener
        self.timeout_s = request_timeout_ms / 1000
        self.security = security
        self._queues: dict[int, list[SendTxnMarkers]] = defaultdict(list)
        self._senders: dict[int, asyncio.Task[None]] = {}
        self._connections: dict[int, KafkaConnection] = {}
        self._timers: set[asyncio.TimerHandle] = set()
        self._retry_timers: set[asyncio.TimerHandle] = set()
        self._closed = False

    def unknown_destination_count(self) -> int:
        """Markers waiting for their partitions' leaders (Kafka's
        ``UnknownDestinationQueueSize``)."""
        return len(self._timers)

    def queued_count(self) -> int:
        """Markers queued for a broker's next request."""
        return sum(len(q) for q in self._queues.values())

    def retrying_count(self) -> int:
        """Markers asked again, waiting out their backoff before they are routed."""
        return len(self._retry_timers)

    def send(self, marker: SendTxnMarkers) -> None:
        """Route ``marker`` to its partitions' leaders: at once the first time, after
        ``marker_retry_backoff_ms(marker.attempt)`` when the core asks again."""
        if self._closed:
            return
        delay_ms = marker_retry_backoff_ms(marker.attempt)
        if delay_ms <= 0:
            self._route(marker)
            return
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._retry_timers.discard(handle)
            if not self._closed:
                self._route(marker)

        handle = loop.call_later(delay_ms / 1000, fire)
        self._retry_timers.add(handle)

    def _route(self, marker: SendTxnMarkers) -> None:
        by_leader: dict[int, set[TopicPartition]] = defaultdict(set)
        deleted, leaderless = [], set()
        for tp in marker.partitions:
            leader = self.leader_of(*tp)
            if leader is None:
                deleted.append(tp)
            elif leader == NO_LEADER or self.endpoint_of(leader) is None:
                leaderless.add(tp)
            else:
                by_leader[leader].add(tp)
        for leader, partitions in by_leader.items():
            self._queues[leader].append(
                dataclasses.replace(marker, partitions=frozenset(partitions))
            )
            sender = self._senders.get(leader)
            if sender is None or sender.done():
                self._senders[leader] = asyncio.get_running_loop().create_task(
                    self._send_loop(leader)
                )
        if leaderless:
            self._later(dataclasses.replace(marker, partitions=frozenset(leaderless)))
        if deleted:
            _report(
                self.listener.markers_partitions_deleted,
                dataclasses.replace(marker, partitions=frozenset(deleted)),
                deleted,
            )

    def _later(self, marker: SendTxnMarkers, delay_s: float = RETRY_BACKOFF_S) -> None:
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._timers.discard(handle)
            if not self._closed:
                self._route(marker)

        handle = loop.call_later(delay_s, fire)
        self._timers.add(handle)

    async def _send_loop(self, broker: int) -> None:
        queue = self._queues[broker]
        while queue and not self._closed:
            batch = list(queue)
            queue.clear()
            try:
                response = await self._request(broker, batch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # refused, lost, timed out, unreadable: sent again
                log.info(
                    "WriteTxnMarkers to broker %d got no answer (%s); %d markers to resend",
                    broker,
                    exc,
                    len(batch),
                )
                await self._drop_connection(broker)
                await asyncio.sleep(RECONNECT_BACKOFF_S)
                for marker in batch:
                    _report(self.listener.markers_undelivered, marker)
                continue
            self._dispatch(broker, batch, response)

    def _dispatch(self, broker: int, batch: list[SendTxnMarkers], response) -> None:
        by_producer: dict[int, dict[TopicPartition, ErrorCode]] = defaultdict(dict)
        for result in response.markers:
            for topic in result.topics:
                for p in topic.partitions:
                    tp = (str(topic.name), int(p.partition_index))
                    by_producer[int(result.producer_id)][tp] = ErrorCode(p.error_code)
        for marker in batch:
            answered = by_producer.get(marker.producer_id, {})
            errors = {tp: answered[tp] for tp in marker.partitions if tp in answered}
            missing = marker.partitions - errors.keys()
            if missing:  # not in the answer: as if the request had been lost
                log.warning(
                    "WriteTxnMarkers answer of broker %d lacks %s for %s",
                    broker,
                    sorted(missing),
                    marker.transactional_id,
                )
                errors.update({tp: ErrorCode.request_timed_out for tp in missing})
            _report(self.listener.markers_written, marker, errors)

    async def _request(self, broker: int, batch: list[SendTxnMarkers]):
        conn = self._connections.get(broker)
        if conn is None or not conn.connected:
            if conn is not None:
                await conn.close()
            endpoint = self.endpoint_of(broker)
            if endpoint is None:
                raise ConnectionError(f"broker {broker} is not live")
            conn = KafkaConnection(
                endpoint[0],
                endpoint[1],
                client_id=f"broker-{self.broker_id}-txn-marker-sender",
                security=self.security,
            )
            self._connections[broker] = conn
            await conn.connect(min(self.timeout_s, CONNECT_TIMEOUT_S))
        request = wtm_req.WriteTxnMarkersRequest(
            markers=tuple(
                wtm_req.WritableTxnMarker(
                    producer_id=m.producer_id,
                    producer_epoch=m.producer_epoch,
                    transaction_result=m.result.committed,
                    topics=tuple(
                        wtm_req.WritableTxnMarkerTopic(name=topic, partition_indexes=parts)
                        for topic, parts in group_partitions(m.partitions)
                    ),
                    coordinator_epoch=m.coordinator_epoch,
                )
                for m in batch
            )
        )
        return await conn.request(request, self.timeout_s)

    async def _drop_connection(self, broker: int) -> None:
        conn = self._connections.pop(broker, None)
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def close(self) -> None:
        self._closed = True
        for handle in (*self._timers, *self._retry_timers):
            handle.cancel()
        self._timers.clear()
        self._retry_timers.clear()
        for task in self._senders.values():
            task.cancel()
        for task in self._senders.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for broker in list(self._connections):
            await self._drop_connection(broker)


def _report(answer: Callable[..., None], marker: SendTxnMarkers, *args: object) -> None:
    """Hand an answer to the core; one it cannot take (Kafka's fatal case: an error a
    marker should never get) is logged, and the other markers go on."""
    try:
        answer(marker, *args)
    except Exception:
        log.exception("%s: the markers' answer %s was refused", marker.transactional_id, args)
