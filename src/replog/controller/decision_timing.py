"""How long each controller event took to carry out, from the moment its watch fired
to the last LeaderAndIsr answer (``KafkaController.timings``, the controller's log and
``bench/``). Kafka keeps the like in ``ControllerStats`` (``LeaderElectionRateAndTimeMs``).

Concurrency: event-loop only; ``complete`` runs as a background task of the controller.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from replog.controller.core_apply import ControllerStats
from replog.controller.core_requests import ApplyRecord

log = logging.getLogger("replog.controller")


@dataclass
class DecisionTiming:
    """How long one event took to carry out (for logs and ``bench/``).

    Times are seconds from the moment the event was enqueued (the watch fired).
    """

    what: str
    partitions_reelected: int = 0
    partitions_offline: int = 0
    zk_writes: int = 0
    zk_writes_s: float = 0.0
    leader_and_isr_requests: int = 0
    leader_and_isr_acked_s: float | None = None
    """Until the last LeaderAndIsr response; None while some are outstanding."""
    new_leaders_zk_writes_s: float = 0.0
    """Of a broker change applied in two decisions: until the first one's writes."""
    new_leaders_acked_s: float | None = None
    """Of a broker change applied in two decisions: until the last LeaderAndIsr response
    of the first (the new leaders'); None while some are outstanding or if not split."""
    leader_and_isr_failed: int = 0
    """LeaderAndIsr requests dropped (broker died) or answered with an error."""
    done: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @classmethod
    def of(cls, what: str, record: ApplyRecord) -> DecisionTiming:
        """The timing of a decision carried out as ``record`` says, its answers to come."""
        return cls(
            what=what,
            partitions_reelected=record.partitions_reelected,
            partitions_offline=record.partitions_offline,
            zk_writes=record.zk_writes,
            zk_writes_s=record.zk_writes_s,
            leader_and_isr_requests=len(record.leader_and_isr),
            new_leaders_zk_writes_s=record.new_leaders_zk_writes_s,
        )

    async def complete(self, record: ApplyRecord, stats: ControllerStats) -> None:
        """Wait for every LeaderAndIsr answer of ``record``, then fill in the times, count
        the election in ``stats`` and log the whole."""
        started = record.started
        if record.new_leaders is not None:
            await asyncio.gather(*record.new_leaders, return_exceptions=True)
            self.new_leaders_acked_s = time.monotonic() - started
        results = await asyncio.gather(*record.leader_and_isr, return_exceptions=True)
        self.leader_and_isr_acked_s = time.monotonic() - started
        if self.partitions_reelected:
            stats.leader_elections += self.partitions_reelected
            stats.election_events += 1
            stats.election_time_s += self.leader_and_isr_acked_s
        self.leader_and_isr_failed = sum(
            1 for r in results if isinstance(r, BaseException) or int(r.error_code) != 0
        )
        self.done.set()
        new_leaders = (
            ""
            if self.new_leaders_acked_s is None
            else f"; new leaders' writes {self.new_leaders_zk_writes_s:.2f} s, "
            f"acked {self.new_leaders_acked_s:.2f} s"
        )
        log.info(
            "controller: %s: %d partitions re-elected, %d offline, %d partition states "
            "written, zk writes %.2f s, LeaderAndIsr acked %.2f s (%d requests, %d failed)%s",
            self.what,
            self.partitions_reelected,
            self.partitions_offline,
            self.zk_writes,
            self.zk_writes_s,
            self.leader_and_isr_acked_s,
            self.leader_and_isr_requests,
            self.leader_and_isr_failed,
            new_leaders,
        )
