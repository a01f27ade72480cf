"""What a controller decision asks the IO layer to do: ZooKeeper writes and broker requests.

A ``ControllerDecision`` is built by one call of a function in
``replog.controller.decisions``. It holds

* ``base``: the context the decision started from (never mutated);
* ``context``: the new context, valid once the writes succeed;
* ``zk_writes``: the partition-state creates/updates and topic deletions, meant to be
  applied atomically in one ZooKeeper ``multi()`` together with a version check of
  ``/controller_epoch`` at ``controller_epoch_zk_version`` (Kafka fences a zombie
  controller the same way). At most one write per partition: a partition touched
  twice in one decision is written once, in its final state, with its leader epoch
  bumped exactly once over the state in ZooKeeper;
* ``batch``/``requests()``: what to send to which live broker afterwards.

Contract with the IO layer: perform ``zk_writes``; if all succeed, install ``context``
and send ``requests()``. If the multi fails on a partition's version (a leader changed
the ISR meanwhile), keep the old context, re-read the stale partitions into it and
call the same decision function again; nothing from the failed decision is kept. An IO
layer that writes in several batches and gets per-partition results can instead call
``drop_failed_writes(failed)``, install the rest, re-read the failed partitions and
re-run the decision. If a write fails on the controller epoch check, resign.

Concurrency: a decision is built and consumed by the controller task; not shared.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from replog.controller.context import (
    NO_LEADER,
    ControllerContext,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    ReplicaAssignment,
    TopicPartition,
)
from replog.controller.request_batch import ControllerBrokerRequestBatch, ControllerRequest
from replog.zk.data import INITIAL_LEADER_EPOCH, INITIAL_PARTITION_ZK_VERSION
from replog.zk.fencing import check_controller_epoch

log = logging.getLogger("replog.controller.state_change")


class InvariantViolation(AssertionError):
    """A decision would break a replication invariant (leader outside ISR, epoch going back)."""


@dataclass(frozen=True, slots=True)
class CreatePartitionState:
    """Create ``/brokers/topics/<t>/partitions/<p>/state`` (and its parents) with ``state``.

    ``state.leader_and_isr.zk_version`` is 0, the version of the new znode.
    """

    partition: TopicPartition
    state: LeaderIsrAndControllerEpoch


@dataclass(frozen=True, slots=True)
class UpdatePartitionState:
    """Conditionally set ``/brokers/topics/<t>/partitions/<p>/state`` to ``state``.

    The write must fail unless the znode is at ``expected_zk_version``;
    ``state.leader_and_isr.zk_version`` is the version after the write
    (``expected_zk_version + 1``), which is what the new context records.
    """

    partition: TopicPartition
    state: LeaderIsrAndControllerEpoch
    expected_zk_version: int


@dataclass(frozen=True, slots=True)
class DeleteTopic:
    """Delete ``/brokers/topics/<t>`` recursively, ``/config/topics/<t>`` and
    ``/admin/delete_topics/<t>`` (Kafka ``KafkaZkClient.deleteTopicZNode`` and friends)."""

    topic: str


@dataclass(frozen=True, slots=True)
class UpdateTopicAssignment:
    """Set the replicas (with adding and removing replicas, KIP-455) of ``assignments``'
    partitions in ``/brokers/topics/<t>``, keeping its other partitions and fields.

    ``after_partition_states``: written after the decision's partition states (a
    reassignment's completion: the state must name a target replica as leader before
    the znode forgets the removed ones) rather than before (its start: the znode must
    name the adding replicas before any broker hears of them, so that a new controller
    resumes it). Partitions whose state write failed are left out of an after-write.
    """

    topic: str
    assignments: Mapping[int, ReplicaAssignment]
    after_partition_states: bool


ZkWrite = CreatePartitionState | UpdatePartitionState | DeleteTopic | UpdateTopicAssignment


class ControllerDecision:
    """Effects of one controller event; see the module docstring."""

    def __init__(self, base: ControllerContext) -> None:
        self.base = base
        self.context = base.copy()
        self.batch = ControllerBrokerRequestBatch()
        self._partition_writes: dict[
            TopicPartition, CreatePartitionState | UpdatePartitionState
        ] = {}
        self._topic_deletes: list[DeleteTopic] = []
        self.unclean_elections: list[TopicPartition] = []
        """Partitions whose new leader came from outside the ISR (possible data loss)."""
        self.failed_elections: list[TopicPartition] = []
        """Partitions left without a leader: no eligible replica."""
        self.completed_topic_deletions: list[str] = []
        self._assignment_writes: dict[TopicPartition, bool] = {}
        """Partitions whose topic znode entry to write -> after the partition states?"""

    # --- results -----------------------------------------------------------------------

    @property
    def zk_writes(self) -> list[ZkWrite]:
        writes: list[ZkWrite] = list(self._partition_writes.values())
        writes.extend(self._topic_deletes)
        writes.extend(self.topic_assignment_writes())
        return writes

    def topic_assignment_writes(self) -> list[UpdateTopicAssignment]:
        """``UpdateTopicAssignment`` per topic and ordering, from the final context."""
        grouped: dict[tuple[str, bool], dict[int, ReplicaAssignment]] = {}
        ctx = self.context
        for tp, after in self._assignment_writes.items():
            full = ctx.partition_reassignments.get(tp) or ReplicaAssignment(ctx.replicas_for(tp))
            grouped.setdefault((tp[0], after), {})[tp[1]] = full
        return [
            UpdateTopicAssignment(topic, assignments, after)
            for (topic, after), assignments in sorted(grouped.items())
        ]

    def write_topic_assignment(self, tp: TopicPartition, after_partition_states: bool) -> None:
        """Write ``tp``'s assignment as the final context has it into its topic znode."""
        self._assignment_writes[tp] = after_partition_states

    @property
    def controller_epoch_zk_version(self) -> int:
        return self.context.controller_epoch_zk_version

    def requests(self) -> dict[int, list[ControllerRequest]]:
        """Requests per live broker, built from the final context."""
        return self.batch.build(self.context)

    # --- partition state writes --------------------------------------------------------

    def create_leadership(
        self, tp: TopicPartition, leader: int, isr: Sequence[int]
    ) -> LeaderIsrAndControllerEpoch:
        """First leader and ISR of a new partition: leader epoch 0, znode version 0."""
        _check_leader_in_isr(tp, leader, isr)
        state = LeaderIsrAndControllerEpoch(
            LeaderAndIsr(leader, INITIAL_LEADER_EPOCH, tuple(isr), INITIAL_PARTITION_ZK_VERSION),
            self.context.controller_epoch,
        )
        self.context.partition_leadership[tp] = state
        self._partition_writes[tp] = CreatePartitionState(tp, state)
        return state

    def set_leadership(
        self, tp: TopicPartition, leader: int, isr: Sequence[int]
    ) -> LeaderIsrAndControllerEpoch:
        """New leader/ISR for an existing partition, one conditional write per decision.

        The leader epoch is the epoch in ZooKeeper (``base``) plus one, however many
        times the partition changes within this decision. Raises
        ``replog.zk.fencing.ControllerMovedError`` if a newer controller wrote the
        partition (Kafka checks the same before writing).
        """
        _check_leader_in_isr(tp, leader, isr)
        pending = self._partition_writes.get(tp)
        if isinstance(pending, CreatePartitionState):
            return self.create_leadership(tp, leader, isr)
        before = self.base.partition_leadership.get(tp)
        if before is None:
            raise InvariantViolation(f"{tp}: no leadership to update")
        check_controller_epoch(self.context.controller_epoch, before.controller_epoch, tp)
        old = before.leader_and_isr
        new = LeaderIsrAndControllerEpoch(
            LeaderAndIsr(leader, old.leader_epoch + 1, tuple(isr), old.zk_version + 1),
            self.context.controller_epoch,
        )
        self.context.partition_leadership[tp] = new
        self._partition_writes[tp] = UpdatePartitionState(tp, new, old.zk_version)
        return new

    def delete_topic_znodes(self, topic: str) -> None:
        for tp in [tp for tp in self._partition_writes if tp[0] == topic]:
            del self._partition_writes[tp]
        self._topic_deletes.append(DeleteTopic(topic))

    def drop_failed_writes(self, failed: Iterable[TopicPartition]) -> None:
        """Forget what this decision planned for partitions whose write failed.

        For an IO layer that writes in several multis and gets per-partition results
        (``KafkaZkClient.update_partition_states``): their leadership and partition
        state, and their replicas' states, go back to ``base`` and no request (LeaderAndIsr,
        StopReplica, UpdateMetadata) mentions them; everything else of the
        decision stands. The caller then re-reads those partitions into the installed
        context and re-runs the event's decision (decisions are idempotent: e.g.
        ``on_broker_failure`` again for the same dead brokers).
        """
        ctx = self.context
        for tp in set(failed):
            self._partition_writes.pop(tp, None)
            if self._assignment_writes.pop(tp, False):  # not written: back to base
                replicas = self.base.replicas_for(tp)
                if replicas:
                    ctx.partition_assignments[tp[0]] = {
                        **ctx.partition_assignments.get(tp[0], {}),
                        tp[1]: replicas,
                    }
                ongoing = self.base.partition_reassignments.get(tp)
                if ongoing is None:
                    ctx.partition_reassignments.pop(tp, None)
                else:
                    ctx.partition_reassignments[tp] = ongoing
            before = self.base.partition_leadership.get(tp)
            if before is None:
                ctx.partition_leadership.pop(tp, None)
            else:
                ctx.partition_leadership[tp] = before
            state = self.base.partition_states.get(tp)
            if state is None:
                ctx.partition_states.pop(tp, None)
            else:
                ctx.partition_states[tp] = state
            # its replicas' states too (a reassignment's completion forgets the removed
            # ones): the re-run decides from the states the failed write left standing
            for replica in [r for r in ctx.replica_states if r.topic_partition == tp]:
                del ctx.replica_states[replica]
            ctx.replica_states.update(
                (r, s) for r, s in self.base.replica_states.items() if r.topic_partition == tp
            )
            for per_broker in self.batch.leader_and_isr.values():
                per_broker.pop(tp, None)
            for stops in self.batch.stop_replica.values():
                stops.pop(tp, None)
            self.batch.update_metadata_partitions.pop(tp, None)
            for lists in (self.unclean_elections, self.failed_elections):
                while tp in lists:
                    lists.remove(tp)

    def has_pending_write(self, tp: TopicPartition) -> bool:
        return tp in self._partition_writes


def _check_leader_in_isr(tp: TopicPartition, leader: int, isr: Sequence[int]) -> None:
    if not isr:
        raise InvariantViolation(f"{tp}: empty ISR")
    if leader != NO_LEADER and leader not in isr:
        raise InvariantViolation(f"{tp}: leader {leader} not in ISR {list(isr)}")
    if len(set(isr)) != len(isr):
        raise InvariantViolation(f"{tp}: duplicate ISR members {list(isr)}")
