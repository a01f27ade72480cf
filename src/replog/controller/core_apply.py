"""The controller core's state and its one executor of decisions (sans-IO).

``DecisionExecutor`` holds what one broker's controller knows (the ``ControllerContext``
while it is active, the controller ZooKeeper names, the counters) and carries a decision
of ``replog.controller.decisions`` out per ``replog.controller.effects``' contract:
write to ZooKeeper, install the new context, send the requests; partition writes that
lost a version race are re-read and decided again. It never does IO itself: it yields
the requests of ``replog.controller.core_requests`` to its driver (``KafkaController``
or the simulator's world) and gets their results back.

The event handlers (``replog.controller.core``) and ``ClusterOperations`` use its public
methods only: ``apply``, ``install``, ``refresh``, ``report``, ``reply``.

Concurrency: owned by the driver's controller task, one event at a time; ``context``
is replaced, never mutated in place, once a decision's writes succeeded.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from replog.config import KafkaConfig
from replog.controller import controller_zk, decisions
from replog.controller.context import ControllerContext, TopicPartition
from replog.controller.core_requests import (
    ApplyRecord,
    ReadClock,
    Reply,
    Report,
    Send,
    Step,
    zk_call,
)
from replog.controller.effects import ControllerDecision, DeleteTopic, UpdateTopicAssignment

log = logging.getLogger("replog.controller")

MAX_WRITE_ATTEMPTS = 5  # decision re-runs after partition version conflicts

Decide = decisions.Decide
Retry = decisions.Retry


@dataclass
class ControllerStats:
    """Kafka's ``ControllerStats`` as plain counters (the server's metrics read them)."""

    leader_elections: int = 0
    """Partitions given a new leader (Kafka counts each election)."""
    unclean_leader_elections: int = 0
    election_events: int = 0
    """Decisions that moved some leadership, with their time until every broker acked."""
    election_time_s: float = 0.0


class DecisionExecutor:
    """One broker's controller state and the write / install / send / retry loop.

    ``config`` is the broker's; ``unclean_leader_election_default()`` its
    ``unclean.leader.election.enable``, dynamic configs included.
    """

    def __init__(
        self,
        broker_id: int,
        config: KafkaConfig,
        unclean_leader_election_default: Callable[[], bool] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.config = config
        self.unclean_leader_election_default: Callable[[], bool] = (
            unclean_leader_election_default or (lambda: config.unclean_leader_election_enable)
        )
        self.zk_timeout_s = config.zookeeper_connection_timeout_ms / 1000
        self.context: ControllerContext | None = None
        """The cluster as this controller knows it; None unless active."""
        self.active_controller_id = -1
        """The controller as last read from ZooKeeper (-1: none known)."""
        self.stats = ControllerStats()

    @property
    def is_active(self) -> bool:
        return self.context is not None

    @property
    def controller_epoch(self) -> int:
        return self.context.controller_epoch if self.context is not None else -1

    def install(self, context: ControllerContext) -> None:
        """The context a decision (or a re-read) produced becomes the one known."""
        self.context = context

    def apply(
        self,
        decide: Decide,
        retry: Retry | None,
        started: float,
        record: ApplyRecord | None = None,
    ) -> Step[ApplyRecord]:
        """Carry out a decision: write, install, send.

        Partition writes that lose a version race are dropped from the decision (the
        rest stands), re-read and decided again with ``retry``. With ``record``, the
        writes and requests are added to it (an event applying several decisions).
        """
        assert self.context is not None
        if record is None:
            record = ApplyRecord(started)
        d = decide(self.context)
        record.decision = d
        for attempt in range(1, MAX_WRITE_ATTEMPTS + 1):
            base = self.context
            stale: set[TopicPartition] = yield zk_call(controller_zk.write_decision, d)
            record.zk_writes_s = (yield ReadClock()) - started
            if stale:
                d.drop_failed_writes(stale)
            for write in d.zk_writes:
                if isinstance(write, (DeleteTopic, UpdateTopicAssignment)):
                    continue
                record.zk_writes += 1
                before = base.partition_leadership.get(write.partition)
                leader = write.state.leader_and_isr.leader
                if leader < 0:
                    record.partitions_offline += 1
                elif before is not None and before.leader_and_isr.leader != leader:
                    record.partitions_reelected += 1
            self.stats.unclean_leader_elections += len(d.unclean_elections)
            self.install(d.context)
            record.leader_and_isr += yield Send(d)
            if d.batch.update_metadata_to_all_live:
                record.update_metadata_sent.update(d.batch.update_metadata_partitions)
            if not stale:
                break
            fresh = yield zk_call("get_partition_states", sorted(stale))
            assert self.context is not None
            ctx = decisions.refreshed(self.context, fresh)
            self.install(ctx)
            if retry is None or attempt == MAX_WRITE_ATTEMPTS:
                log.error("controller: partitions %s keep changing: left as read", sorted(stale))
                break
            log.info("controller: %d partitions changed under us: deciding again", len(stale))
            d = retry(ctx, stale)
        return record

    def refresh(self, partitions: Iterable[TopicPartition]) -> Step[None]:
        """Re-read the states of the known partitions among ``partitions`` into the
        context (``ControllerMovedError`` if a newer controller wrote one)."""
        assert self.context is not None
        known = sorted(tp for tp in partitions if tp in self.context.partition_leadership)
        if known:
            fresh = yield zk_call("get_partition_states", known)
            assert self.context is not None
            self.install(decisions.refreshed(self.context, fresh))

    @staticmethod
    def report(what: str, record: ApplyRecord) -> Step[None]:
        yield Report(what, record)

    @staticmethod
    def reply(
        callback: Callable[[Any], None] | None, answer: Any, record: ApplyRecord | None = None
    ) -> Step[None]:
        """Answer a request-driven event once the LeaderAndIsr requests of ``record``
        are acknowledged (the new leaders are serving), at once without any."""
        if callback is not None:
            acks = tuple(record.leader_and_isr) if record is not None else ()
            yield Reply(callback, answer, acks)


def rerun_failure(ctx: ControllerContext, stale: set[TopicPartition]) -> ControllerDecision:
    """Decide again for partitions whose write lost a version race (re-read into ``ctx``):
    a failure of the offline brokers among their replicas re-elects leaders that are not
    live and takes offline replicas out of ISRs; it is idempotent for the rest."""
    offline = {r for tp in stale for r in ctx.replicas_for(tp) if r not in ctx.live_brokers}
    return decisions.on_broker_failure(ctx, offline)
