"""The controller's IO for operator-driven changes: added partitions and replica
reassignment (KIP-455). ``KafkaController`` dispatches these events here; the decisions
are the pure functions of ``replog.controller.partition_modifications`` and
``replog.controller.reassignment``, carried out by the controller's one executor
(``KafkaController._apply``).

Watches (registered at failover, dropped at resignation): a data watch per topic znode
(Kafka ``PartitionModificationsHandler``) enqueues ``PartitionModifications``; a watch
of ``/admin/reassign_partitions`` enqueues ``ZkPartitionReassignment`` when the znode is
created (Kafka's ``PartitionReassignmentHandler.handleCreation``). kazoo calls them on
its thread; they only enqueue.

Concurrency: every coroutine here runs on the controller's event task, one event at a
time, like the rest of ``KafkaController``; blocking ZooKeeper calls go to threads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from replog.controller import events as ev
from replog.controller import partition_modifications, reassignment
from replog.controller.context import ControllerContext, ReplicaAssignment, TopicPartition
from replog.controller.effects import ControllerDecision
from replog.zk import data as zd
from replog.zk.ops import WatchHandle

if TYPE_CHECKING:
    from replog.controller.controller import KafkaController
    from replog.controller.event_manager import QueuedEvent

log = logging.getLogger("replog.controller")


class ClusterOperations:
    """Added partitions and reassignments for one ``KafkaController``."""

    def __init__(self, controller: KafkaController) -> None:
        self.ctl = controller
        self._topic_watches: dict[str, WatchHandle] = {}
        self._reassign_watch: WatchHandle | None = None
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

    # --- requests (from the broker's handlers) ----------------------------------------

    async def alter_partition_reassignments(
        self, reassignments: Mapping[TopicPartition, tuple[int, ...] | None]
    ) -> dict[TopicPartition, reassignment.ReassignmentOutcome] | None:
        """AlterPartitionReassignments: the outcome per partition once the reassignment
        is recorded and started; None if this broker is not the controller."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.ctl.events.put(ev.ApiPartitionReassignment(dict(reassignments), _resolver(future)))
        return await future

    async def list_partition_reassignments(
        self, partitions: frozenset[TopicPartition] | None
    ) -> dict[TopicPartition, ReplicaAssignment] | None:
        """ListPartitionReassignments; None if this broker is not the controller."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.ctl.events.put(ev.ListPartitionReassignments(partitions, _resolver(future)))
        return await future

    # --- watches ----------------------------------------------------------------------

    def register_watches(self, topics: Iterable[str]) -> None:
        """Blocking (worker thread): the reassignment znode and every topic znode."""
        seen: list[bool | None] = [None]

        def on_reassign(data: bytes | None, _version: int | None) -> None:
            existed, seen[0] = seen[0], data is not None
            if existed is False and data is not None:
                self.ctl.events.put_threadsafe(ev.ZkPartitionReassignment())

        self._reassign_watch = self.ctl.zk.watch_data(zd.REASSIGN_PARTITIONS_PATH, on_reassign)
        self.watch_topics(topics)

    def watch_topics(self, topics: Iterable[str]) -> None:
        """Blocking: a data watch on each topic znode not yet watched."""
        for topic in sorted(set(topics) - self._topic_watches.keys()):
            self._topic_watches[topic] = self.ctl.zk.watch_data(
                zd.topic_path(topic), self._on_topic_znode(topic)
            )

    def _on_topic_znode(self, topic: str) -> Any:
        first = [True]

        def callback(data: bytes | None, _version: int | None) -> None:
            if first[0]:
                first[0] = False
                return
            self.ctl.events.put_threadsafe(ev.PartitionModifications(topic))

        return callback

    def unwatch_topics(self, topics: Iterable[str]) -> None:
        for topic in topics:
            handle = self._topic_watches.pop(topic, None)
            if handle is not None:
                handle.cancel()

    def on_resignation(self) -> None:
        self.unwatch_topics(list(self._topic_watches))
        if self._reassign_watch is not None:
            self._reassign_watch.cancel()
            self._reassign_watch = None
        self._zk_handled = {}

    # --- hooks from KafkaController ---------------------------------------------------

    async def after_failover(self, started: float) -> None:
        """Kafka ``initializePartitionReassignments`` + ``maybeResumeReassignments``: the
        ZooKeeper-requested reassignments first, then those the topic znodes show."""
        ctx = self.ctl.context
        assert ctx is not None
        await asyncio.to_thread(self.register_watches, ctx.all_topics)
        read = await asyncio.to_thread(self.ctl.zk.get_reassign_partitions)
        requests: dict[TopicPartition, Sequence[int] | None] = dict(
            reassignment.ongoing_targets(ctx)
        )
        if read is not None:
            requests.update((TopicPartition(*tp), t) for tp, t in read[0].items())
            self._zk_handled = dict(read[0])
        if requests:
            log.info("controller: resuming %d partition reassignments", len(requests))
            await self._reassign(requests, started, "resumed reassignment")
            await self._prune_zk_reassignment()

    async def after_topic_change(self, new: Iterable[str], vanished: Iterable[str]) -> None:
        await asyncio.to_thread(self.watch_topics, new)
        self.unwatch_topics(vanished)

    async def after_isr_change(self, partitions: Iterable[TopicPartition], started: float) -> None:
        """Kafka's ``PartitionReassignmentIsrChangeHandler``: complete the moves whose
        target replicas are all in sync now."""
        ctx = self.ctl.context
        if ctx is None or not ctx.partition_reassignments:
            return
        ready = reassignment.completable(ctx, partitions)
        if not ready:
            return
        applied = await self.ctl._apply(
            partial(reassignment.on_isr_change, partitions=ready),
            lambda c, stale: reassignment.on_isr_change(c, stale),
            started,
        )
        self.ctl._report(f"reassignment of {len(ready)} partitions completed", applied)
        await self._prune_zk_reassignment()

    # --- events -----------------------------------------------------------------------

    async def process_partition_modifications(
        self, e: ev.PartitionModifications, q: QueuedEvent
    ) -> None:
        ctx = self.ctl.context
        if ctx is None:
            return
        if e.topic not in ctx.all_topics:
            return  # not created yet (TopicChange follows) or deleted
        found = await asyncio.to_thread(self.ctl.zk.get_replica_assignments, [e.topic])
        if e.topic not in found:
            return
        assignment = {p: a.replicas for p, a in found[e.topic][0].items()}
        if not partition_modifications.new_partitions(self.ctl.context or ctx, e.topic, assignment):
            return
        applied = await self.ctl._apply(
            partial(
                partition_modifications.on_partition_modifications,
                topic=e.topic,
                assignment=assignment,
            ),
            None,
            q.enqueue_time_s,
        )
        self.ctl._report(f"new partitions of topic {e.topic}", applied)

    async def process_zk_partition_reassignment(
        self, _e: ev.ZkPartitionReassignment, q: QueuedEvent
    ) -> None:
        if self.ctl.context is None:
            return
        read = await asyncio.to_thread(self.ctl.zk.get_reassign_partitions)
        if read is None:
            return
        requested = {TopicPartition(*tp): t for tp, t in read[0].items()}
        self._zk_handled = dict(requested)
        outcomes = await self._reassign(requested, q.enqueue_time_s, "reassignment by ZooKeeper")
        failed = {tp: o for tp, o in outcomes.items() if o.error_code != ErrorCode.none}
        if failed:
            log.warning(
                "controller: /admin/reassign_partitions entries refused: %s",
                {f"{t}-{p}": o.message for (t, p), o in sorted(failed.items())},
            )
        await self._prune_zk_reassignment()

    async def process_api_partition_reassignment(
        self, e: ev.ApiPartitionReassignment, q: QueuedEvent
    ) -> None:
        outcomes: dict[TopicPartition, reassignment.ReassignmentOutcome] | None = None
        try:
            if self.ctl.context is None:
                return
            outcomes = await self._reassign(
                e.reassignments, q.enqueue_time_s, "reassignment by AlterPartitionReassignments"
            )
            await self._prune_zk_reassignment()
        finally:
            if e.callback is not None:
                e.callback(outcomes)

    async def process_list_partition_reassignments(
        self, e: ev.ListPartitionReassignments, _q: QueuedEvent
    ) -> None:
        ctx = self.ctl.context
        answer: dict[TopicPartition, ReplicaAssignment] | None = None
        if ctx is not None:
            answer = {
                tp: ra
                for tp, ra in sorted(ctx.partition_reassignments.items())
                if e.partitions is None or tp in e.partitions
            }
        if e.callback is not None:
            e.callback(answer)

    # --- helpers ----------------------------------------------------------------------

    async def _reassign(
        self,
        requests: Mapping[TopicPartition, Sequence[int] | None],
        started: float,
        what: str,
    ) -> dict[TopicPartition, reassignment.ReassignmentOutcome]:
        outcomes: dict[TopicPartition, reassignment.ReassignmentOutcome] = {}

        def decide(ctx: ControllerContext) -> ControllerDecision:
            d, result = reassignment.on_partition_reassignment(ctx, requests)
            outcomes.update(result)
            return d

        def retry(ctx: ControllerContext, stale: set[TopicPartition]) -> ControllerDecision:
            again = {tp: requests[tp] for tp in stale if tp in requests}
            d, _ = reassignment.on_partition_reassignment(ctx, again)
            return d

        applied = await self.ctl._apply(decide, retry, started)
        self.ctl._report(what, applied)
        return outcomes

    async def _prune_zk_reassignment(self) -> None:
        """Drop the entries of ``/admin/reassign_partitions`` that are done (or failed,
        or overridden by the API); delete the znode when none remains."""
        ctx = self.ctl.context
        if ctx is None or not self._zk_handled:
            return
        read = await asyncio.to_thread(self.ctl.zk.get_reassign_partitions)
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
        done = await asyncio.to_thread(
            self.ctl.zk.update_reassign_partitions,
            remaining,
            version,
            ctx.controller_epoch_zk_version,
        )
        if not done:
            log.info("controller: /admin/reassign_partitions changed meanwhile; reading it again")
            self.ctl.events.put(ev.ZkPartitionReassignment())
        elif not remaining:
            log.info("controller: every reassignment of /admin/reassign_partitions is done")
            self._zk_handled = {}


def _resolver(future: asyncio.Future[Any]) -> Any:
    def resolve(value: Any) -> None:
        if not future.done():
            future.set_result(value)

    return resolve
