"""The controller's blocking ZooKeeper work: loading the context on failover and carrying
out a decision's ZooKeeper writes (Kafka ``initializeControllerContext`` and the
``zkClient`` calls of the state machines).

Concurrency: every function here blocks on ZooKeeper; the controller task runs them
with ``asyncio.to_thread`` and awaits them, so nothing else touches the decision or the
context meanwhile. Never call them on the event loop or from a kazoo callback.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import replace

from kazoo.exceptions import NoNodeError

from replog.controller.context import ControllerContext, LeaderIsrAndControllerEpoch, TopicPartition
from replog.controller.effects import (
    ControllerDecision,
    CreatePartitionState,
    DeleteTopic,
    UpdateTopicAssignment,
)
from replog.protocol.kafka_uuid import random_uuid
from replog.storage.log_config import parse_bool
from replog.zk import data as zd
from replog.zk.client import KafkaZkClient
from replog.zk.fencing import ControllerEpoch, ControllerMovedError
from replog.zk.ops import ZkWriteError, ZkWriteResult

UNCLEAN_KEY = "unclean.leader.election.enable"
TOPIC_ID_WRITE_ATTEMPTS = 5

log = logging.getLogger("replog.controller")


def load_context(
    zk: KafkaZkClient,
    controller_id: int,
    epoch: ControllerEpoch,
    default_unclean: bool,
    timeout_s: float,
) -> ControllerContext:
    """The whole cluster as ZooKeeper has it: live brokers (with epochs), topics and
    assignments, partition states (batched reads), topics marked for deletion, and
    per-topic ``unclean.leader.election.enable`` overrides. No replica or partition
    states: ``decisions.on_controller_failover`` derives them."""
    ctx = ControllerContext(
        controller_id=controller_id,
        controller_epoch=epoch.epoch,
        controller_epoch_zk_version=epoch.zk_version,
        live_brokers=zk.get_all_brokers(),
        default_unclean_leader_election_enable=default_unclean,
    )
    topics = zk.get_all_topics()
    for topic, (assignment, _) in zk.get_replica_assignments(topics).items():
        ctx.add_topic(topic, {p: a.replicas for p, a in assignment.items()})
        ctx.partition_reassignments.update(
            (TopicPartition(topic, p), a) for p, a in assignment.items() if a.is_being_reassigned
        )
    states = zk.read_partition_states(list(ctx.all_partitions()))
    ctx.partition_leadership = {TopicPartition(t, p): s for (t, p), (s, _) in states.items()}
    ctx.partition_state_mzxid = {TopicPartition(t, p): z for (t, p), (_, z) in states.items()}
    ctx.topics_to_be_deleted = zk.get_topics_marked_for_deletion() & ctx.all_topics
    ctx.unclean_leader_election_enable = read_unclean_overrides(zk, ctx.all_topics, timeout_s)
    return ctx


def assign_topic_ids(
    zk: KafkaZkClient,
    topics: Iterable[str],
    expected_controller_epoch_zk_version: int,
    new_id: Callable[[], uuid.UUID] = random_uuid,
) -> dict[str, uuid.UUID]:
    """The id (KIP-516) of every topic of ``topics`` that exists, giving those whose znode
    has none a new one (Kafka's controller ``setTopicIds``, for topics created by tools
    older than 2.8).

    An id is written into ``/brokers/topics/<t>`` with the rest of the znode kept, each
    write conditional on the version read and guarded by the controller epoch check
    (``ControllerMovedError`` if it fails). An id once written is never replaced: a
    write that lost a race re-reads the znode and takes the id found there. A znode whose
    ``topic_id`` cannot be read is left alone and its topic gets no id.
    """
    ids: dict[str, uuid.UUID] = {}
    pending = sorted(set(topics))
    for _ in range(TOPIC_ID_WRITE_ATTEMPTS):
        if not pending:
            break
        proposed: dict[str, uuid.UUID] = {}
        updates: dict[str, tuple[bytes, int]] = {}
        for topic, (data, version) in zk.read_topic_znodes(pending).items():
            try:
                found = zd.decode_topic_id(data)
            except zd.ZkDataError as exc:
                log.error("controller: topic %s keeps no id: %s", topic, exc)
                continue
            if found is not None:
                ids[topic] = found
            else:
                proposed[topic] = new_id()
                updates[topic] = (zd.with_topic_id(data, proposed[topic]), version)
        if not updates:
            break
        pending = []
        for topic, result in zk.update_topic_znodes(
            updates, expected_controller_epoch_zk_version
        ).items():
            if result.error is ZkWriteError.CONTROLLER_MOVED:
                raise ControllerMovedError(f"controller epoch check failed writing {topic}'s id")
            if result.error is None:
                ids[topic] = proposed[topic]
                log.info("controller: topic %s had no id: gave it %s", topic, proposed[topic])
            elif result.error is ZkWriteError.BAD_VERSION:
                pending.append(topic)  # written meanwhile (by us, re-sent?): read it again
            # NO_NODE: deleted meanwhile, no id to keep
    else:
        if pending:
            log.warning("controller: topics %s keep changing: left without an id", pending)
    return ids


def read_unclean_overrides(
    zk: KafkaZkClient, topics: Iterable[str], timeout_s: float
) -> dict[str, bool]:
    """Per-topic ``unclean.leader.election.enable`` from ``/config/topics/<t>``, read with
    pipelined requests (one round trip's latency for all topics, not one per topic)."""
    client = zk.client
    pending = [(t, client.get_async(zd.topic_config_path(t))) for t in sorted(topics)]
    overrides: dict[str, bool] = {}
    for topic, result in pending:
        try:
            data, _ = result.get(timeout=timeout_s)
        except NoNodeError:
            continue
        value = zd.decode_config(data).get(UNCLEAN_KEY)
        if value is not None:
            overrides[topic] = parse_bool(value)
    return overrides


def write_decision(zk: KafkaZkClient, d: ControllerDecision) -> set[TopicPartition]:
    """Perform ``d.zk_writes``, every batch guarded by the controller epoch's version.

    Returns the partitions whose write lost a version race (someone else wrote the
    state first); raises ``ControllerMovedError`` if the epoch check failed. A write
    that landed at another version than ``d`` expected (our own write, re-sent after a
    connection loss) is patched into ``d.context``.
    """
    ctx = d.context
    epoch, epoch_version = ctx.controller_epoch, d.controller_epoch_zk_version
    creates: dict[TopicPartition, LeaderIsrAndControllerEpoch] = {}
    updates = {}
    deletes: list[str] = []
    assignments_after: list[UpdateTopicAssignment] = []
    for write in d.zk_writes:
        if isinstance(write, DeleteTopic):
            deletes.append(write.topic)
        elif isinstance(write, UpdateTopicAssignment):
            if write.after_partition_states:
                assignments_after.append(write)
            else:
                write_topic_assignment(zk, write, epoch_version)
        elif isinstance(write, CreatePartitionState):
            creates[write.partition] = write.state
        else:
            expected = write.expected_zk_version
            updates[write.partition] = write.state.leader_and_isr.with_zk_version(expected)
    results: dict[TopicPartition, ZkWriteResult] = {}
    if creates:
        states = {tp: s.leader_and_isr for tp, s in creates.items()}
        results.update(zk.create_partition_states(states, epoch, epoch_version))
    if updates:
        results.update(zk.update_partition_states(updates, epoch, epoch_version))
    existing = [tp for tp, r in results.items() if r.error is ZkWriteError.NODE_EXISTS]
    found = zk.get_partition_states(existing) if existing else {}
    stale: set[TopicPartition] = set()
    for tp, result in results.items():
        if result.error is ZkWriteError.CONTROLLER_MOVED:
            raise ControllerMovedError(f"controller epoch check failed writing {tp}")
        if result.error is ZkWriteError.NODE_EXISTS:
            now = found.get(tp)
            if now is None or not _same_state(now, creates[tp]):
                stale.add(tp)
            # else: our own create, re-sent after a connection loss
        elif result.error is not None:
            stale.add(tp)
        elif result.zk_version is not None:
            state = ctx.partition_leadership.get(tp)
            if state is not None and state.leader_and_isr.zk_version != result.zk_version:
                ctx.partition_leadership[tp] = LeaderIsrAndControllerEpoch(
                    state.leader_and_isr.with_zk_version(result.zk_version),
                    state.controller_epoch,
                )
    for write in assignments_after:
        kept = {p: a for p, a in write.assignments.items() if (write.topic, p) not in stale}
        if kept:
            write_topic_assignment(zk, replace(write, assignments=kept), epoch_version)
    for topic in deletes:
        zk.delete_topic_znodes(topic, epoch_version)
        zk.remove_deletion_marker(topic, epoch_version)
    return stale


def write_topic_assignment(
    zk: KafkaZkClient, write: UpdateTopicAssignment, expected_controller_epoch_zk_version: int
) -> None:
    """Set some partitions' assignments in a topic znode (read, change, conditional
    write); a topic deleted meanwhile is skipped."""

    def change(
        current: dict[int, zd.ReplicaAssignment],
    ) -> dict[int, zd.ReplicaAssignment]:
        return {**current, **write.assignments}

    try:
        zk.set_replica_assignments(write.topic, change, expected_controller_epoch_zk_version)
    except NoNodeError:
        log.warning("controller: topic %s vanished before its assignment was written", write.topic)


def _same_state(a: LeaderIsrAndControllerEpoch, b: LeaderIsrAndControllerEpoch) -> bool:
    x, y = a.leader_and_isr, b.leader_and_isr
    return (x.leader, x.leader_epoch, tuple(x.isr), a.controller_epoch) == (
        y.leader,
        y.leader_epoch,
        tuple(y.isr),
        b.controller_epoch,
    )
