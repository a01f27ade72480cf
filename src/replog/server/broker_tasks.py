"""The broker's periodic tasks (Kafka's scheduler jobs): ISR expiration
(``isr-expiration``), ISR change propagation (``isr-change-propagation``), the high
watermark checkpoint, committed offset expiration, log retention (``kafka-log-retention``)
and the log flush and recovery point checkpoint (``kafka-recovery-point-checkpoint``).

Each is a loop that sleeps its interval, then does its job; ``Broker.start`` runs each as
a task and ``Broker.stop`` cancels them. Concurrency: they run on the broker's event loop
and touch the log manager, replica manager and group coordinator only between awaits.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from replog.common.clock import now_ms
from replog.config import KafkaConfig
from replog.coordinator.group.coordinator import GroupCoordinator
from replog.replication.replica_manager import ReplicaManager
from replog.storage.log_manager import LogManager

# The broker's logger: these lines were the broker's own before they moved here.
log = logging.getLogger("replog.server.broker")

ISR_PROPAGATION_CHECK_S = 2.5  # Kafka's isr-change-propagation check interval


def periodic_tasks(
    config: KafkaConfig,
    log_manager: LogManager,
    replica_manager: ReplicaManager,
    group_coordinator: GroupCoordinator,
    flush_dirty_logs: Callable[[], Awaitable[None]],
) -> list[Coroutine[Any, Any, None]]:
    """The broker's periodic loops, in the order it starts them; ``flush_dirty_logs`` is
    the broker's sliced flush, run before each recovery point checkpoint."""
    return [
        retention_loop(config, log_manager),
        checkpoint_loop(config, log_manager, flush_dirty_logs),
        isr_expiration_loop(config, replica_manager),
        isr_propagation_loop(replica_manager),
        high_watermark_checkpoint_loop(config, replica_manager),
        offsets_expiration_loop(config, group_coordinator),
    ]


async def isr_expiration_loop(config: KafkaConfig, replica_manager: ReplicaManager) -> None:
    interval = max(config.replica_lag_time_max_ms / 2, 10) / 1000
    while True:
        await asyncio.sleep(interval)
        replica_manager.maybe_shrink_isr(now_ms())


async def isr_propagation_loop(replica_manager: ReplicaManager) -> None:
    while True:
        await asyncio.sleep(ISR_PROPAGATION_CHECK_S)
        try:
            await replica_manager.maybe_propagate_isr_changes(now_ms())
        except Exception as exc:
            log.warning("could not announce ISR changes: %s", exc)


async def high_watermark_checkpoint_loop(
    config: KafkaConfig, replica_manager: ReplicaManager
) -> None:
    interval = config.replica_high_watermark_checkpoint_interval_ms / 1000
    while True:
        await asyncio.sleep(interval)
        await replica_manager.checkpoint_high_watermarks_off_loop()


async def offsets_expiration_loop(config: KafkaConfig, group_coordinator: GroupCoordinator) -> None:
    interval = config.offsets_retention_check_interval_ms / 1000
    while True:
        await asyncio.sleep(interval)
        try:
            await group_coordinator.expire_offsets()
        except Exception:
            log.exception("expiring committed offsets failed")


async def retention_loop(config: KafkaConfig, log_manager: LogManager) -> None:
    interval = config.log_retention_check_interval_ms / 1000
    while True:
        await asyncio.sleep(interval)
        deleted = log_manager.cleanup_logs(now_ms())
        if deleted:
            log.info("retention deleted %d segments", deleted)


async def checkpoint_loop(
    config: KafkaConfig,
    log_manager: LogManager,
    flush_dirty_logs: Callable[[], Awaitable[None]],
) -> None:
    interval = config.log_flush_offset_checkpoint_interval_ms / 1000
    while True:
        await asyncio.sleep(interval)
        await flush_dirty_logs()
        log_manager.checkpoint()
