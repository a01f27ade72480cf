"""A leader's ISR changes, written to ZooKeeper (Kafka ``AlterPartition`` in ZooKeeper
mode: ``zkClient.conditionalUpdatePath`` of the partition state znode).

The machine proposes a change (an expansion after a follower's fetch, a shrink on
the ``replica.lag.time.max.ms`` timer); this writes it conditionally on the znode
version the leadership knows, retries while ZooKeeper is unreachable (as long as the
partition keeps the role it proposed in), and hands ZooKeeper's answer back to the
partition: a refused write means a controller moved the partition on (seed 000,
question 3).

KIP-903: an expansion carries the broker epoch each added follower fetched with
(``IsrChangeProposal.added_broker_epochs``), and the write refuses it, without
touching the partition's znode, if that follower is not registered at that epoch now
(a fetch sent by an earlier incarnation, which may have lost records its fetch
offset claims) or not registered at all: Kafka's ``INELIGIBLE_REPLICA``. Leadership
stays; the follower is proposed again once it fetches as its current incarnation.
The simulator carries out ISR writes with ``write_isr_change`` on its own ZooKeeper,
so it tests this rule as it ships. Committed changes are announced to the controller through
``isr_change_notification`` in batches (``IsrChangePropagation``).

Concurrency: event-loop only; each write is its own task, which re-checks that the
partition is still the hosted one after its await.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from replog.replication.isr import IsrChangePropagation, IsrChangeProposal, IsrState
from replog.replication.machine import Action
from replog.replication.partition import Partition
from replog.zk.client import KafkaZkClient
from replog.zk.data import LeaderAndIsr, LeaderIsrAndControllerEpoch
from replog.zk.fencing import UNKNOWN_BROKER_EPOCH

log = logging.getLogger(__name__)


class IsrZooKeeper(Protocol):
    """What an ISR write needs of ZooKeeper (``KafkaZkClient``, or the simulator's)."""

    def get_broker_epoch(self, broker_id: int) -> int | None: ...

    def update_leader_and_isr_conditional(
        self, topic: str, partition: int, state: LeaderIsrAndControllerEpoch, expected_version: int
    ) -> int | None: ...


@dataclass(frozen=True, slots=True)
class IsrWriteResult:
    """ZooKeeper's answer to an ISR write: the partition znode's new version, or None
    if the write was refused; ``ineligible`` names the added replicas it was refused
    for (KIP-903), empty for a version conflict."""

    new_zk_version: int | None
    ineligible: tuple[int, ...] = ()


def ineligible_replicas(
    proposal: IsrChangeProposal, registered_epoch: Callable[[int], int | None]
) -> tuple[int, ...]:
    """The replicas ``proposal`` adds that may not join the ISR (KIP-903): not
    registered, or registered at another broker epoch than the one they fetched with.
    A fetch that carried no epoch (Fetch < v15: ``UNKNOWN_BROKER_EPOCH``) is checked
    for registration only, as Kafka checks a -1 epoch."""
    out = []
    for replica, broker_epoch in proposal.added_broker_epochs:
        registered = registered_epoch(replica)
        if registered is None or (
            broker_epoch != UNKNOWN_BROKER_EPOCH and broker_epoch != registered
        ):
            out.append(replica)
    return tuple(out)


def write_isr_change(
    zk: IsrZooKeeper,
    topic: str,
    partition: int,
    proposal: IsrChangeProposal,
    controller_epoch: int,
) -> IsrWriteResult:
    """Write ``proposal`` to the partition's state znode, conditionally on the version
    the leadership knows; an expansion only if every added replica is eligible.
    Blocking (ZooKeeper calls): the broker runs it in a thread."""
    ineligible = ineligible_replicas(proposal, zk.get_broker_epoch)
    if ineligible:
        return IsrWriteResult(None, ineligible)
    state = LeaderIsrAndControllerEpoch(
        LeaderAndIsr(
            leader=proposal.leader_id,
            leader_epoch=proposal.leader_epoch,
            isr=tuple(proposal.new_isr),
            zk_version=proposal.partition_zk_version,
        ),
        controller_epoch,
    )
    return IsrWriteResult(
        zk.update_leader_and_isr_conditional(topic, partition, state, proposal.partition_zk_version)
    )


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
        assert proposal.leader_id == self.broker_id, proposal
        controller_epoch = part.state.controller_epoch
        role_leader_epoch = part.role_leader_epoch
        while True:
            try:
                result = await asyncio.to_thread(
                    write_isr_change,
                    self.zk,
                    part.topic,
                    part.partition,
                    proposal,
                    controller_epoch,
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
        version = result.new_zk_version
        if version is not None:
            if proposal.kind is IsrState.PENDING_SHRINK_ISR:
                self.shrinks += 1
            elif proposal.kind is IsrState.PENDING_EXPAND_ISR:
                self.expands += 1
        if result.ineligible:
            log.info(
                "%s-%d: ISR expansion to %s refused: replicas %s not registered at the broker "
                "epoch they fetched with (INELIGIBLE_REPLICA)",
                part.topic,
                part.partition,
                list(proposal.new_isr),
                list(result.ineligible),
            )
        self._carry_out(
            part,
            part.on_isr_update_result(proposal, version, ineligible=bool(result.ineligible)),
        )

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
