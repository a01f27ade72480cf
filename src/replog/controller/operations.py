"""The controller's operator-driven changes: added partitions and replica reassignment
(KIP-455), as handlers of the controller core (sans-IO, like ``replog.controller.core``).
The decisions are the pure functions of ``replog.controller.partition_modifications``
and ``replog.controller.reassignment``, carried out by the core's one executor
(``DecisionExecutor.apply``).

Watches (asked for at failover, dropped at resignation): a data watch per topic znode
(Kafka ``PartitionModificationsHandler``) enqueues ``PartitionModifications``; a watch
of ``/admin/reassign_partitions`` enqueues ``ZkPartitionReassignment`` when the znode is
created (Kafka's ``PartitionReassignmentHandler.handleCreation``). The driver registers
them (``WatchReassignments``, ``WatchTopics``) and they only enqueue.

Concurrency: every handler here runs on the controller's event task, one event at a
time, like the rest of the core.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Any

from kio.schema.errors import ErrorCode

from replog.controller import events as ev
from replog.controller import partition_modifications, reassignment
from replog.controller.context import ControllerContext, ReplicaAssignment, TopicPartition
from replog.controller.core_apply import DecisionExecutor
from replog.controller.core_requests import (
    Enqueue,
    Step,
    UnwatchTopics,
    WatchReassignments,
    WatchTopics,
    zk_call,
)
from replog.controller.effects import ControllerDecision

log = logging.getLogger("replog.controller")


class ClusterOperations:
    """Added partitions and reassignments for one controller core."""

    def __init__(self, core: DecisionExecutor) -> None:
        self.core = core
        self._zk_handled: dict[TopicPartition, tuple[int, ...]] = {}
        """``/admin/reassign_partitions`` entries this controller acted on."""

    def handlers(self) -> dict[type, Any]:
        return {
            ev.PartitionModifications: self.process_partition_modifications,
            ev.ZkPartitionReassignment: self.process_zk_partition_reassignment,
            ev.ApiPartitionReassignment: self.process_api_partition_reassignment,
            ev.ListPartitionReassignments: self.process_list_partition_reassignments,
        }

    @staticmethod
    def preempt(event: ev.ControllerEvent) -> bool:
        """Answer a request-driven event dropped from the queue (not the controller)."""
        if (
            isinstance(event, (ev.ApiPartitionReassignment, ev.ListPartitionReassignments))
            and event.callback is not None
        ):
            event.callback(None)
            return True
        return False

    def on_resignation(self) -> None:
        self._zk_handled = {}

    # --- hooks from the core ----------------------------------------------------------

    def after_failover(self, started: float) -> Step[None]:
        """Kafka ``initializePartitionReassignments`` + ``maybeResumeReassignments``: the
        ZooKeeper-requested reassignments first, then those the topic znodes show."""
        ctx = self.core.context
        assert ctx is not None
        yield WatchReassignments()
        yield WatchTopics(frozenset(ctx.all_topics))
        read = yield zk_call("get_reassign_partitions")
        requests: dict[TopicPartition, Sequence[int] | None] = dict(
            reassignment.ongoing_targets(ctx)
        )
        if read is not None:
            requests.update((TopicPartition(*tp), t) for tp, t in read[0].items())
            self._zk_handled = dict(read[0])
        if requests:
            log.info("controller: resuming %d partition reassignments", len(requests))
            yield from self._reassign(requests, started, "resumed reassignment")
            yield from self._prune_zk_reassignment()

    def after_topic_change(self, new: Iterable[str], vanished: Iterable[str]) -> Step[None]:
        yield WatchTopics(frozenset(new))
        yield UnwatchTopics(frozenset(vanished))

    def after_isr_change(self, partitions: Iterable[TopicPartition], started: float) -> Step[None]:
        """Kafka's ``PartitionReassignmentIsrChangeHandler``: complete the moves whose
        target replicas are all in sync now."""
        ctx = self.core.context
        if ctx is None or not ctx.partition_reassignments:
            return
        ready = reassignment.completable(ctx, partitions)
        if not ready:
            return
        applied = yield from self.core.apply(
            partial(reassignment.on_isr_change, partitions=ready),
            lambda c, stale: reassignment.on_isr_change(c, stale),
            started,
        )
        yield from self.core.report(f"reassignment of {len(ready)} partitions completed", applied)
        yield from self._prune_zk_reassignment()

    # --- events -----------------------------------------------------------------------

    def process_partition_modifications(
        self, e: ev.PartitionModifications, started: float
    ) -> Step[None]:
        ctx = self.core.context
        if ctx is None:
            return
        if e.topic not in ctx.all_topics:
            return  # not created yet (TopicChange follows) or deleted
        found = yield zk_call("get_replica_assignments", [e.topic])
        if e.topic not in found:
            return
        assignment = {p: a.replicas for p, a in found[e.topic][0].items()}
        if not partition_modifications.new_partitions(
            self.core.context or ctx, e.topic, assignment
        ):
            return
        applied = yield from self.core.apply(
            partial(
                partition_modifications.on_partition_modifications,
                topic=e.topic,
                assignment=assignment,
            ),
            None,
            started,
        )
        yield from self.core.report(f"new partitions of topic {e.topic}", applied)

    def process_zk_partition_reassignment(
        self, _e: ev.ZkPartitionReassignment, started: float
    ) -> Step[None]:
        if self.core.context is None:
            return
        read = yield zk_call("get_reassign_partitions")
        if read is None:
            return
        requested = {TopicPartition(*tp): t for tp, t in read[0].items()}
        self._zk_handled = dict(requested)
        outcomes = yield from self._reassign(requested, started, "reassignment by ZooKeeper")
        failed = {tp: o for tp, o in outcomes.items() if o.error_code != ErrorCode.none}
        if failed:
            log.warning(
                "controller: /admin/reassign_partitions entries refused: %s",
                {f"{t}-{p}": o.message for (t, p), o in sorted(failed.items())},
            )
        yield from self._prune_zk_reassignment()

    def process_api_partition_reassignment(
        self, e: ev.ApiPartitionReassignment, started: float
    ) -> Step[None]:
        outcomes: dict[TopicPartition, reassignment.ReassignmentOutcome] | None = None
        try:
            if self.core.context is None:
                return
            outcomes = yield from self._reassign(
                e.reassignments, started, "reassignment by AlterPartitionReassignments"
            )
            yield from self._prune_zk_reassignment()
        finally:
            if e.callback is not None:
                e.callback(outcomes)

    def process_list_partition_reassignments(
        self, e: ev.ListPartitionReassignments, _started: float
    ) -> Step[None]:
        ctx = self.core.context
        answer: dict[TopicPartition, ReplicaAssignment] | None = None
        if ctx is not None:
            answer = {
                tp: ra
                for tp, ra in sorted(ctx.partition_reassignments.items())
                if e.partitions is None or tp in e.partitions
            }
        if e.callback is not None:
            e.callback(answer)
        return
        yield  # a handler is a generator

    # --- helpers ----------------------------------------------------------------------

    def _reassign(
        self,
        requests: Mapping[TopicPartition, Sequence[int] | None],
        started: float,
        what: str,
    ) -> Step[dict[TopicPartition, reassignment.ReassignmentOutcome]]:
        outcomes: dict[TopicPartition, reassignment.ReassignmentOutcome] = {}

        def decide(ctx: ControllerContext) -> ControllerDecision:
            d, result = reassignment.on_partition_reassignment(ctx, requests)
            outcomes.update(result)
            return d

        def retry(ctx: ControllerContext, stale: set[TopicPartition]) -> ControllerDecision:
            again = {tp: requests[tp] for tp in stale if tp in requests}
            d, _ = reassignment.on_partition_reassignment(ctx, again)
            return d

        applied = yield from self.core.apply(decide, retry, started)
        yield from self.core.report(what, applied)
        return outcomes

    def _prune_zk_reassignment(self) -> Step[None]:
        """Drop the entries of ``/admin/reassign_partitions`` that are done (or failed,
        or overridden by the API); delete the znode when none remains."""
        ctx = self.core.context
        if ctx is None or not self._zk_handled:
            return
        read = yield zk_call("get_reassign_partitions")
        if read is None:
            self._zk_handled = {}
            return
        requested, version = read
        ongoing = reassignment.zk_entries_remaining(ctx, requested)
        remaining = {
            tp: t
            for tp, t in requested.items()
            if tp in ongoing or self._zk_handled.get(TopicPartition(*tp)) != tuple(t)
        }
        if remaining == requested:
            return
        done = yield zk_call(
            "update_reassign_partitions", remaining, version, ctx.controller_epoch_zk_version
        )
        if not done:
            log.info("controller: /admin/reassign_partitions changed meanwhile; reading it again")
            yield Enqueue(ev.ZkPartitionReassignment())
        elif not remaining:
            log.info("controller: every reassignment of /admin/reassign_partitions is done")
            self._zk_handled = {}
