"""The broker's start-up checks (seed 000, "Broker startup"): a live log dir, the
ZooKeeper connection within ``zookeeper.connection.timeout.ms``, and the registration in
``/brokers/ids``. The log dir locks and ``meta.properties`` checks themselves live in
``replog.storage`` (``LogManager.lock_log_dirs``, ``meta_properties``); ``Broker.start``
calls them in Kafka's order.

A failure the user can cause raises ``BrokerStartupError``, one line, which
``replog broker start`` prints before exiting 1.
"""

from __future__ import annotations

import asyncio
import logging
import time

from replog.config import KafkaConfig
from replog.storage.log_manager import LogManager
from replog.zk.client import BrokerAlreadyRegisteredError, KafkaZkClient
from replog.zk.data import BrokerInfo

# The broker's logger: these lines were the broker's own before they moved here.
log = logging.getLogger("replog.server.broker")


class BrokerStartupError(Exception):
    """The broker cannot start, for a reason the user can cure; the message is one line."""


def zookeeper_connection_timeout_ms(config: KafkaConfig) -> int:
    """``zookeeper.connection.timeout.ms``, or Kafka's default when unset:
    ``zookeeper.session.timeout.ms``."""
    if "zookeeper.connection.timeout.ms" in config.static_properties:
        return config.zookeeper_connection_timeout_ms
    return config.zookeeper_session_timeout_ms


def require_live_log_dirs(log_manager: LogManager) -> None:
    """``BrokerStartupError`` when every log dir has failed."""
    if not log_manager.live_log_dirs:
        raise BrokerStartupError(
            "every log dir has failed: "
            + "; ".join(f"{d}: {why}" for d, why in log_manager.offline_log_dirs.items())
        )


async def connect_zookeeper(zk: KafkaZkClient, config: KafkaConfig) -> None:
    """Connect within ``zookeeper.connection.timeout.ms`` or, unset, Kafka's default
    (Kafka's ``ZooKeeperClientTimeoutException`` past it). The ZooKeeper calls after
    it keep their own deadline (``zookeeper.connection.timeout.ms`` as configured)."""
    timeout_ms = zookeeper_connection_timeout_ms(config)
    try:
        await asyncio.to_thread(zk.start, timeout_ms)
    except zk.client.handler.timeout_exception:
        raise BrokerStartupError(
            f"Timed out waiting for connection to ZooKeeper {config.zookeeper_connect} "
            f"(zookeeper.connection.timeout.ms={timeout_ms})"
        ) from None


async def register_broker(zk: KafkaZkClient, config: KafkaConfig, info: BrokerInfo) -> int:
    """Register in ``/brokers/ids``; the broker epoch. After a kill -9 the previous
    process's znode lives until ZooKeeper expires its session; wait for that rather than
    fail."""
    deadline = time.monotonic() + 2 * config.zookeeper_session_timeout_ms / 1000
    waiting_logged = False
    while True:
        try:
            return await asyncio.to_thread(zk.register_broker, info)
        except BrokerAlreadyRegisteredError:
            if time.monotonic() > deadline:
                raise
            if not waiting_logged:
                log.info(
                    "broker %d is still registered by an earlier session; waiting for "
                    "ZooKeeper to expire it",
                    config.broker_id,
                )
                waiting_logged = True
            await asyncio.sleep(0.2)
