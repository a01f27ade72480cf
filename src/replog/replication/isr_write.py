"""A leader's ISR changes, written to ZooKeeper (Kafka ``AlterPartition`` in ZooKeeper
mode: ``zkClient.conditionalUpdatePath`` of the partition state znode).

The machine proposes a change (an expansion after a follower's fetch, a shrink on
the ``replica.lag.time.max.ms`` timer); this writes it conditionally on the znode
version the leadership knows, retries while ZooKeeper is unreachable (as long as the
partition keeps the role it proposed in), and hands ZooKeeper's answer back to the
partition: a refused write means a controller moved the partition on (seed 000,
question 3). Committed changes are announced to the controller through
``isr_change_notification`` in batches (``IsrChangePropagation``).

Concurrency: event-loop only; each write is its own task, which re-checks that the
partition is still the hosted one after its await.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from replog.replication.isr import IsrChangePropagation, IsrChangeProposal, IsrState
from replog.replication.machine import Action
from replog.replication.partition import Partition
from replog.zk.client import KafkaZkClient
from replog.zk.data import LeaderAndIsr, LeaderIsrAndControllerEpoch

log = logging.getLogger(__name__)


class IsrWriter:
    """Concurrency: event-loop only; ``submit`` never awaits (the write is a task)."""

    def __init__(
        self,
        broker_id: int,
        zk: KafkaZkClient,
        retry_backoff_ms: int,
        *,
        is_hosted: Callable[[Partition], bool],
        carry_out: Callable[[Partition, list[Action]], None],
        now_ms: Callable[[], int],
    ) -> None:
        self.broker_id = broker_id
        self.zk = zk
        self.retry_backoff_ms = retry_backoff_ms
        self._is_hosted = is_hosted
        self._carry_out = carry_out
        self._now_ms = now_ms  # the broker's wall clock, in ms
        self.propagation = IsrChangePropagation.starting_at(now_ms())
        self._tasks: set[asyncio.Task[None]] = set()
        # ISR changes this broker wrote as leader (Kafka IsrShrinksPerSec / IsrExpandsPerSec)
        self.shrinks = 0
        self.expands = 0

    def submit(self, part: Partition, proposal: IsrChangeProposal) -> None:
        task = asyncio.create_task(self._write(part, proposal))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write(self, part: Partition, proposal: IsrChangeProposal) -> None:
        assert part.state is not None
        state = LeaderIsrAndControllerEpoch(
            LeaderAndIsr(
                leader=self.broker_id,
                leader_epoch=proposal.leader_epoch,
                isr=proposal.new_isr,
                zk_version=proposal.partition_zk_version,
            ),
            part.state.controller_epoch,
        )
        role_leader_epoch = part.role_leader_epoch
        while True:
            try:
                version = await asyncio.to_thread(
                    self.zk.update_leader_and_isr_conditional,
                    part.topic,
                    part.partition,
                    state,
                    proposal.partition_zk_version,
                )
                break
            except Exception as exc:  # ZooKeeper unreachable: keep the change pending, retry
                log.warning(
                    "%s-%d: ISR update failed (%s); retrying", part.topic, part.partition, exc
                )
                await asyncio.sleep(self.retry_backoff_ms / 1000)
                if part.role_leader_epoch != role_leader_epoch or not part.is_leader:
                    return
        if not self._is_hosted(part):
            return
        if version is not None:
            if proposal.kind is IsrState.PENDING_SHRINK_ISR:
                self.shrinks += 1
            elif proposal.kind is IsrState.PENDING_EXPAND_ISR:
                self.expands += 1
        self._carry_out(part, part.on_isr_update_result(proposal, version))

    def committed(self, part: Partition) -> None:
        """ZooKeeper took a change of ``part``'s ISR: announce it with the next batch."""
        self.propagation.record_isr_change((part.topic, part.partition), self._now_ms())

    async def maybe_propagate(self, now: int) -> None:
        changed = self.propagation.maybe_propagate(now)
        if changed:
            await asyncio.to_thread(self.zk.propagate_isr_changes, set(changed))

    def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()
