"""The broker's side of a controlled shutdown (Kafka ``KafkaServer.controlledShutdown``).

Before a broker with ``controlled.shutdown.enable`` closes its listeners, it asks the
controller to move every leadership it holds to another in-sync replica and to take
it out of the ISRs it follows in (ControlledShutdown, api key 7, v3 with its broker
epoch, KIP-380). The controller answers once the new leaders have their LeaderAndIsr,
listing the partitions the broker still leads (those with no other in-sync replica).
The broker tries ``controlled.shutdown.max.retries`` times, ``controlled.shutdown.
retry.backoff.ms`` apart, until the answer is clean; then, or after the last attempt,
it shuts down anyway (Kafka: "Proceeding to do an unclean shutdown").

Unlike Kafka, there is no sleep after the last failed attempt: nothing follows it.

Concurrency: runs on the broker's event loop during ``Broker.stop``; the listeners keep
serving meanwhile, so clients and followers see the leadership move.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from replog.protocol.client import KafkaConnection
from replog.protocol.controller_schemas import ControlledShutdownRequest
from replog.security.client_security import PLAINTEXT, ClientSecurity
from replog.server.metadata_cache import MetadataCache
from replog.zk.client import KafkaZkClient

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ControllerEndpoint:
    broker_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class Attempt:
    """One ControlledShutdown round trip: the error code (-1: no controller or no
    answer) and the partitions the broker still leads."""

    error_code: int
    remaining: tuple[tuple[str, int], ...] = ()
    detail: str = ""

    @property
    def succeeded(self) -> bool:
        return self.error_code == ErrorCode.none and not self.remaining


async def find_controller(
    zk: KafkaZkClient, metadata_cache: MetadataCache, listener: str
) -> ControllerEndpoint | None:
    """The controller as ZooKeeper names it (the metadata cache may lag a move), at its
    ``listener`` (the inter-broker one); the cache's word if ZooKeeper is out of reach."""
    try:
        controller_id = await asyncio.to_thread(zk.get_controller_id)
        info = (
            None if controller_id is None else await asyncio.to_thread(zk.get_broker, controller_id)
        )
    except Exception as exc:  # ZooKeeper unreachable: fall back to the cache
        log.warning("controlled shutdown: ZooKeeper lookup failed: %s", exc)
        controller_id = metadata_cache.controller_id
        endpoint = metadata_cache.brokers_for(listener).get(controller_id or -1)
        if controller_id is None or endpoint is None:
            return None
        return ControllerEndpoint(controller_id, endpoint.host, endpoint.port)
    if controller_id is None or info is None:
        return None
    return ControllerEndpoint(controller_id, *info.address(listener))


async def send_controlled_shutdown(
    controller: ControllerEndpoint,
    broker_id: int,
    broker_epoch: int,
    timeout_s: float,
    client_id: str = "replog-controlled-shutdown",
    security: ClientSecurity = PLAINTEXT,
) -> Attempt:
    """One ControlledShutdown v3 to ``controller`` (on the inter-broker listener)."""
    conn = KafkaConnection(controller.host, controller.port, client_id=client_id, security=security)
    try:
        await conn.connect(timeout_s)
        response = await conn.request(
            ControlledShutdownRequest(broker_id=broker_id, broker_epoch=broker_epoch),
            timeout_s=timeout_s,
        )
    except (OSError, TimeoutError) as exc:  # a refused login is an OSError too
        return Attempt(-1, detail=f"controller {controller.broker_id}: {exc}")
    finally:
        await conn.close()
    remaining = tuple(
        (str(p.topic_name), int(p.partition_index)) for p in response.remaining_partitions
    )
    return Attempt(int(response.error_code), remaining)


async def controlled_shutdown(
    broker_id: int,
    broker_epoch: Callable[[], int],
    find_controller: Callable[[], Awaitable[ControllerEndpoint | None]],
    max_retries: int,
    backoff_s: float,
    timeout_s: float,
    send: Callable[..., Awaitable[Attempt]] = send_controlled_shutdown,
) -> bool:
    """Ask the controller, up to ``max_retries`` times, to move this broker's
    leaderships away; True once it answered with no error and nothing remaining."""
    for attempt in range(1, max(max_retries, 1) + 1):
        controller = await find_controller()
        if controller is None:
            result = Attempt(-1, detail="no controller")
        else:
            result = await send(controller, broker_id, broker_epoch(), timeout_s)
        if result.succeeded:
            log.info(
                "broker %d: controlled shutdown succeeded (attempt %d, controller %d)",
                broker_id,
                attempt,
                controller.broker_id if controller else -1,
            )
            return True
        if result.error_code > 0:
            log.warning(
                "broker %d: controlled shutdown attempt %d: error %d from the controller",
                broker_id,
                attempt,
                result.error_code,
            )
        elif result.remaining:
            log.warning(
                "broker %d: controlled shutdown attempt %d: remaining partitions to move: %s",
                broker_id,
                attempt,
                ", ".join(f"{t}-{p}" for t, p in result.remaining[:20]),
            )
        else:
            log.warning(
                "broker %d: controlled shutdown attempt %d failed: %s",
                broker_id,
                attempt,
                result.detail,
            )
        if attempt < max_retries:
            await asyncio.sleep(backoff_s)
            log.info("broker %d: retrying controlled shutdown", broker_id)
    log.warning(
        "broker %d: proceeding to an unclean shutdown: every controlled shutdown attempt failed",
        broker_id,
    )
    return False
