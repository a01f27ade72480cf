"""What a broker does when one of its log dirs fails (Kafka ``ReplicaManager``'s
``LogDirFailureHandler``, KIP-112).

``ReplicaManager`` has already stopped the dir's replicas. With other log dirs live,
the broker tells the controller through a log dir event notification (retried while
ZooKeeper is unreachable: the controller must hear of it), and the controller moves the
leaderships and ISRs of those replicas; with none left it halts as Kafka does, but
closes its ZooKeeper session first so that the controller sees the broker gone at once
rather than after the session timeout.

Concurrency: event-loop only; each announcement or halt is a task of its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from replog.storage.log_manager import LogManager
from replog.zk.client import KafkaZkClient

log = logging.getLogger("replog.server.broker")

HALT_ZK_CLOSE_S = 5.0  # how long a broker without log dirs waits to close its session
LOG_DIR_EVENT_RETRY_S = 1.0  # between attempts to write a log dir event notification


class LogDirFailureHandler:
    """Concurrency: event-loop only; ``on_log_dir_offline`` never awaits."""

    def __init__(
        self,
        broker_id: int,
        log_manager: LogManager,
        zk: KafkaZkClient,
        halt: Callable[[int], object],
    ) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.zk = zk
        self._halt = halt
        self._tasks: set[asyncio.Task[None]] = set()

    def on_log_dir_offline(self, log_dir: Path, partitions: list[tuple[str, int]]) -> None:
        """A log dir failed and its replicas stopped: announce it, or halt if it was the
        last one."""
        if self.log_manager.live_log_dirs:
            task = asyncio.get_running_loop().create_task(self._announce_log_dir_failure())
        else:
            log.critical(
                "broker %d: shutting down: every log dir has failed (last %s, %d replicas)",
                self.broker_id,
                log_dir,
                len(partitions),
            )
            task = asyncio.get_running_loop().create_task(self._halt_without_log_dirs())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _announce_log_dir_failure(self) -> None:
        while True:
            try:
                name = await asyncio.to_thread(self.zk.propagate_log_dir_event, self.broker_id)
                log.info("broker %d: log dir failure announced (%s)", self.broker_id, name)
                return
            except Exception as exc:  # ZooKeeper unreachable: the controller must hear of it
                log.warning("could not announce the log dir failure (%s); retrying", exc)
                await asyncio.sleep(LOG_DIR_EVENT_RETRY_S)

    async def _halt_without_log_dirs(self) -> None:
        try:
            await asyncio.wait_for(asyncio.to_thread(self.zk.close), HALT_ZK_CLOSE_S)
        except Exception as exc:  # the session then expires on its own
            log.warning("closing the ZooKeeper session before halting failed: %s", exc)
        self._halt(1)
