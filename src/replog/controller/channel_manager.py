"""The controller's connections to the brokers (Kafka ``ControllerChannelManager`` and
its ``RequestSendThread``).

One queue and one sender task per live broker. The sender sends the queued requests
one at a time, in order, each waiting for its response before the next goes out (as
Kafka's ``RequestSendThread`` does), so a broker sees the controller's commands in
the order they were decided. A request whose connection breaks or times out is sent
again on a new connection, with exponential backoff, for as long as the broker stays
in the manager; the controller commands are idempotent on the broker (epoch checks).

When a broker dies the controller removes it: its queue is dropped and the futures of
its unsent or unanswered requests are cancelled. Nothing is lost by that: when the
broker registers again the controller sends it its whole state (``on_broker_startup``).

Concurrency: event loop only. ``add_broker``/``remove_broker``/``send`` never await, so
the controller task can install a context, sync the channels and queue the requests
without interleaving with anything else. Response callbacks run on the loop, in the
sender task, and must not block; the controller's callbacks only enqueue events.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from replog.controller.request_batch import ControllerRequest
from replog.protocol.client import KafkaConnection, raise_if_cancelling
from replog.replication.leader_endpoint import DEAD_PEER_S
from replog.security.client_security import PLAINTEXT, ClientSecurity
from replog.zk.data import BrokerInfo

log = logging.getLogger("replog.controller.channel")

ResponseCallback = Callable[[Any], None]


@dataclass(slots=True)
class _QueueItem:
    request: ControllerRequest
    future: asyncio.Future[Any]
    callback: ResponseCallback | None


class _BrokerChannel:
    """Queue, connection and sender task of one broker. Owned by the manager."""

    def __init__(self, manager: ControllerChannelManager, info: BrokerInfo) -> None:
        self.info = info
        self.manager = manager
        self.queue: asyncio.Queue[_QueueItem] = asyncio.Queue()
        self.connection: KafkaConnection | None = None
        self.address = info.address(manager.listener)
        self.in_flight: _QueueItem | None = None
        self.task = asyncio.get_running_loop().create_task(
            self._run(), name=f"controller-request-send-{info.id}"
        )

    async def _connect(self) -> KafkaConnection:
        connection = KafkaConnection(
            *self.address,
            client_id=f"controller-{self.manager.controller_id}",
            security=self.manager.security,
            dead_peer_s=DEAD_PEER_S,  # a partitioned broker's connection ends in seconds
        )
        await connection.connect(timeout_s=self.manager.request_timeout_s)
        return connection

    async def _drop_connection(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None:
            await connection.close()

    async def _send(self, item: _QueueItem) -> Any:
        """Send until a response arrives; backoff between failed attempts."""
        backoff = self.manager.backoff_initial_s
        while True:
            try:
                if self.connection is None or not self.connection.connected:
                    await self._drop_connection()
                    self.connection = await self._connect()
                return await self.connection.request(
                    item.request, timeout_s=self.manager.request_timeout_s
                )
            except (OSError, TimeoutError) as exc:  # ConnectionClosed is an OSError
                raise_if_cancelling()
                log.warning(
                    "controller %d: %s to broker %d at %s:%d failed (%s); retrying in %.2f s",
                    self.manager.controller_id,
                    type(item.request).__name__,
                    self.info.id,
                    *self.address,
                    str(exc) or type(exc).__name__,
                    backoff,
                )
                await self._drop_connection()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.manager.backoff_max_s)

    async def _run(self) -> None:
        try:
            while True:
                item = await self.queue.get()
                if item.future.done():  # cancelled by the caller
                    continue
                self.in_flight = item
                try:
                    response = await self._send(item)
                except Exception as exc:  # not a network error: e.g. an unencodable request
                    log.exception(
                        "controller %d: cannot send %s to broker %d",
                        self.manager.controller_id,
                        type(item.request).__name__,
                        self.info.id,
                    )
                    if not item.future.done():
                        item.future.set_exception(exc)
                    continue
                finally:
                    self.in_flight = None
                if not item.future.done():
                    item.future.set_result(response)
                if item.callback is not None:
                    try:
                        item.callback(response)
                    except Exception:
                        log.exception("controller response callback failed")
        finally:
            await self._drop_connection()

    def cancel(self) -> None:
        """Stop sending; cancel every queued or in-flight request's future."""
        self.task.cancel()
        if self.in_flight is not None:
            self.in_flight.future.cancel()
        while not self.queue.empty():
            self.queue.get_nowait().future.cancel()


class ControllerChannelManager:
    """Per-broker request queues of the active controller; see the module docstring.

    ``request_timeout_s`` is ``controller.socket.timeout.ms``: how long to wait for a
    connection or a response before trying again.
    """

    def __init__(
        self,
        controller_id: int,
        request_timeout_s: float = 30.0,
        backoff_initial_s: float = 0.05,
        backoff_max_s: float = 1.0,
        listener: str = "PLAINTEXT",
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.controller_id = controller_id
        self.listener = listener  # inter.broker.listener.name
        self.security = security
        self.request_timeout_s = request_timeout_s
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self._channels: dict[int, _BrokerChannel] = {}
        self._closing: set[asyncio.Task[None]] = set()

    @property
    def broker_ids(self) -> set[int]:
        return set(self._channels)

    def add_broker(self, info: BrokerInfo) -> None:
        """Open a queue for ``info``; a registration with another epoch or endpoint
        (a restarted broker) replaces the old queue and connection."""
        existing = self._channels.get(info.id)
        if existing is not None:
            if existing.info == info and existing.info.epoch == info.epoch:
                return
            self.remove_broker(info.id)
        self._channels[info.id] = _BrokerChannel(self, info)

    def remove_broker(self, broker_id: int) -> None:
        """Drop the broker's queue; its pending requests' futures are cancelled."""
        channel = self._channels.pop(broker_id, None)
        if channel is None:
            return
        channel.cancel()
        self._closing.add(channel.task)
        channel.task.add_done_callback(self._closing.discard)

    def send(
        self,
        broker_id: int,
        request: ControllerRequest,
        callback: ResponseCallback | None = None,
    ) -> asyncio.Future[Any]:
        """Queue ``request`` for ``broker_id``. The future gets the response (cancelled if
        the broker is removed first); ``callback(response)`` also runs on success."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        channel = self._channels.get(broker_id)
        if channel is None:
            log.warning(
                "controller %d: no channel to broker %d: dropping %s",
                self.controller_id,
                broker_id,
                type(request).__name__,
            )
            future.cancel()
            return future
        channel.queue.put_nowait(_QueueItem(request, future, callback))
        return future

    def queued(self, broker_id: int) -> int:
        """Requests waiting or in flight for ``broker_id``."""
        channel = self._channels.get(broker_id)
        if channel is None:
            return 0
        return channel.queue.qsize() + (channel.in_flight is not None)

    async def close(self) -> None:
        """Remove every broker and wait for the sender tasks to end."""
        for broker_id in list(self._channels):
            self.remove_broker(broker_id)
        tasks = list(self._closing)
        for task in tasks:
            try:
                await task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # close() itself was cancelled, not only the sender
            except Exception:
                pass
