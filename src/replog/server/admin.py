"""Topic administration on any broker: validate, place, write to ZooKeeper.

The controller creates the partitions once the assignment is in ZooKeeper;
this module only writes the request down and waits (up to the request's
timeout) for the metadata to come back through UpdateMetadata: CreateTopics and
CreatePartitions answer once this broker's metadata cache gives every new partition a
leader, DeleteTopics once it no longer names the topics (Kafka's
``DelayedCreatePartitions`` and ``DelayedDeleteTopics``, here
``delayed_topic_operations.DelayedTopicOperation``, completed by the cache's update). A topic still waiting when the timeout expires is
answered REQUEST_TIMED_OUT, as Kafka does; the other topics of the request keep their
answers.

The other brokers get the same UpdateMetadata from the controller in the same round,
but each applies it on its own event loop (after checking the controller's epoch in
ZooKeeper): tens of milliseconds apart under load, and a client bootstrapped on
another broker right after the answer would not see the new partitions (librdkafka:
"Unknown partition", fatal for an explicit partition). So, beyond Kafka, once this
broker's cache is complete it asks every other live broker's Metadata for the topics
until each shows them (``peer_metadata.PeerMetadata.peers_know``), within what is left
of the request's timeout and at most ``PEER_WAIT_MAX_S`` (a hung broker still counted
live must not hold every creation for the whole timeout); a peer that cannot be asked,
or is still behind then, does not change the answer (Kafka's contract is this broker's
cache).
``bench/metadata_propagation.py`` measures the window.
ZooKeeper calls block, so they run in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from kazoo.exceptions import NoNodeError
from kio.schema.errors import ErrorCode

from replog.controller import placement
from replog.server.delayed_topic_operations import (
    delayed_create_partitions,
    delayed_delete_topics,
)
from replog.server.peer_metadata import PEER_WAIT_MAX_S, PeerMetadata
from replog.storage.log_config import TOPIC_CONFIG_KEYS, LogConfig
from replog.zk.data import ReplicaAssignment

if TYPE_CHECKING:
    from replog.config import KafkaConfig
    from replog.server.metadata_cache import MetadataCache
    from replog.zk.client import KafkaZkClient

log = logging.getLogger(__name__)

LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249


@dataclass
class TopicSpec:
    name: str
    num_partitions: int
    replication_factor: int
    assignments: dict[int, list[int]] = field(default_factory=dict)
    configs: dict[str, str | None] = field(default_factory=dict)


class Outcome(NamedTuple):
    """What became of one CreateTopics entry."""

    error: ErrorCode
    message: str | None
    num_partitions: int
    replication_factor: int
    topic_id: uuid.UUID | None = None
    """The id written with the topic (KIP-516); None unless it was created."""


class _Changed(Exception):
    """The topic's partitions changed between the read and the write."""


def validate_topic_name(name: str) -> str | None:
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name {name!r} is not allowed"
    if len(name) > MAX_TOPIC_NAME:
        return f"topic name is longer than {MAX_TOPIC_NAME} characters"
    if not LEGAL_TOPIC.match(name):
        return (
            f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_' and '-'"
        )
    return None


class AdminManager:
    def __init__(
        self, config: KafkaConfig, zk: KafkaZkClient, metadata_cache: MetadataCache
    ) -> None:
        self.config = config
        self.zk = zk
        self.metadata_cache = metadata_cache
        self.cluster_id: str | None = None
        self._metadata_updated = asyncio.Event()
        self._rng = random.Random()
        self._peers = PeerMetadata(config, metadata_cache)

    def _plan(self, spec: TopicSpec) -> tuple[Outcome, dict[int, list[int]] | None, dict[str, str]]:
        """Validate one CreateTopics entry and place its replicas (pure but for the cache)."""
        problem = validate_topic_name(spec.name)
        if problem:
            return (ErrorCode.invalid_topic_exception, problem, -1, -1), None, {}
        configs = {k: v for k, v in spec.configs.items() if v is not None}
        unknown = sorted(set(configs) - TOPIC_CONFIG_KEYS)
        if unknown:
            return (
                (ErrorCode.invalid_config, f"unknown topic config {unknown[0]!r}", -1, -1),
                None,
                {},
            )
        try:
            LogConfig.from_properties(configs)
        except ValueError as exc:
            return (ErrorCode.invalid_config, str(exc), -1, -1), None, {}
        brokers = sorted(self.metadata_cache.brokers.values(), key=lambda b: b.broker_id)
        if spec.assignments:
            if spec.num_partitions != -1 or spec.replication_factor != -1:
                return (
                    (
                        ErrorCode.invalid_request,
                        "give either assignments or partitions and replication factor",
                        -1,
                        -1,
                    ),
                    None,
                    {},
                )
            live = {b.broker_id for b in brokers}
            if sorted(spec.assignments) != list(range(len(spec.assignments))):
                return (
                    (
                        ErrorCode.invalid_replica_assignment,
                        "partitions must be numbered 0..n-1",
                        -1,
                        -1,
                    ),
                    None,
                    {},
                )
            for replicas in spec.assignments.values():
                if not replicas or len(set(replicas)) != len(replicas) or not set(replicas) <= live:
                    return (
                        (
                            ErrorCode.invalid_replica_assignment,
                            f"bad replica list {replicas}",
                            -1,
                            -1,
                        ),
                        None,
                        {},
                    )
            assignment = {p: list(r) for p, r in spec.assignments.items()}
        else:
            partitions = (
                spec.num_partitions if spec.num_partitions != -1 else self.config.num_partitions
            )
            replication = (
                spec.replication_factor
                if spec.replication_factor != -1
                else self.config.default_replication_factor
            )
            if partitions <= 0:
                return (
                    (
                        ErrorCode.invalid_partitions,
                        "number of partitions must be larger than 0",
                        -1,
                        -1,
                    ),
                    None,
                    {},
                )
            if replication <= 0:
                return (
                    (
                        ErrorCode.invalid_replication_factor,
                        "replication factor must be larger than 0",
                        -1,
                        -1,
                    ),
                    None,
                    {},
                )
            if replication > len(brokers):
                return (
                    (
                        ErrorCode.invalid_replication_factor,
                        f"replication factor: {replication} larger than available brokers: {len(brokers)}",
                        -1,
                        -1,
                    ),
                    None,
                    {},
                )
            try:
                placed = placement.assign_replicas_to_brokers(
                    [placement.BrokerMetadata(b.broker_id, b.rack or None) for b in brokers],
                    partitions,
                    replication,
                    self._rng,
                )
                assignment = {p: list(r) for p, r in placed.items()}
            except placement.PlacementError as exc:
                return (ErrorCode.invalid_replication_factor, str(exc), -1, -1), None, {}
        replication_factor = len(next(iter(assignment.values())))
        return (ErrorCode.none, None, len(assignment), replication_factor), assignment, configs

    async def create_topics(
        self, specs: list[TopicSpec], timeout_ms: int, validate_only: bool
    ) -> list[Outcome]:
        outcomes: list[Outcome] = []
        created: dict[str, set[int]] = {}  # topic -> its partitions
        for spec in specs:
            plan, assignment, configs = self._plan(spec)
            outcome = Outcome(*plan)
            if outcome.error == ErrorCode.none and assignment is not None:
                exists = await asyncio.to_thread(self.zk.topic_exists, spec.name)
                if exists:
                    outcome = Outcome(
                        ErrorCode.topic_already_exists,
                        f"topic {spec.name!r} already exists",
                        -1,
                        -1,
                    )
                elif not validate_only:
                    try:
                        topic_id = await asyncio.to_thread(
                            self.zk.create_topic, spec.name, assignment, configs
                        )
                    except Exception as exc:  # a race with another creator
                        if type(exc).__name__ in ("TopicExistsError", "NodeExistsError"):
                            outcome = Outcome(
                                ErrorCode.topic_already_exists,
                                f"topic {spec.name!r} already exists",
                                -1,
                                -1,
                            )
                        else:
                            raise
                    else:
                        outcome = outcome._replace(topic_id=topic_id)
                        created[spec.name] = set(assignment)
                        log.info(
                            "topic %s: assignment %s written to ZooKeeper", spec.name, assignment
                        )
            outcomes.append(outcome)
        if created and timeout_ms > 0:
            late = await self._until_leaders(created, timeout_ms)
            outcomes = [
                Outcome(ErrorCode.request_timed_out, None, -1, -1)
                if spec.name in late and outcome.error == ErrorCode.none
                else outcome
                for spec, outcome in zip(specs, outcomes, strict=True)
            ]
        return outcomes

    async def metadata_cache_changed(self, timeout_s: float) -> None:
        """Wait for the next UpdateMetadata, or ``timeout_s``, whichever is first."""
        try:
            await asyncio.wait_for(self._metadata_updated.wait(), timeout_s)
        except TimeoutError:
            pass

    def on_metadata_update(self) -> None:
        """Wake everyone waiting on the metadata cache; later waiters wait for the next one."""
        self._metadata_updated.set()
        self._metadata_updated = asyncio.Event()

    async def _until_leaders(self, wanted: dict[str, set[int]], timeout_ms: int) -> set[str]:
        """Wait (Kafka's delayed create) until this broker's cache leads every partition
        of ``wanted``, then until the other brokers show them too (``peers_know``), all
        within ``timeout_ms``. Returns the topics this broker's cache still lacked."""
        deadline = time.monotonic() + timeout_ms / 1000
        late = await delayed_create_partitions(wanted).wait(self.metadata_cache, timeout_ms)
        known = {t: p for t, p in wanted.items() if t not in late}
        if known:
            await self._peers.peers_know(known, min(deadline, time.monotonic() + PEER_WAIT_MAX_S))
        return late

    async def auto_create_topic(self, name: str) -> ErrorCode:
        spec = TopicSpec(
            name,
            -1,
            min(self.config.default_replication_factor, len(self.metadata_cache.brokers) or 1),
        )
        [(error, message, *_)] = await self.create_topics([spec], 0, False)
        if error in (ErrorCode.none, ErrorCode.topic_already_exists):
            return ErrorCode.leader_not_available
        log.info("auto-creating topic %s failed: %s", name, message)
        return error

    async def topic_name_for_id(self, topic_id: uuid.UUID) -> str | None:
        """The topic with this id (KIP-516), or None (UNKNOWN_TOPIC_ID): the metadata cache
        names it and its znode still holds that id (a topic deleted and created again
        under the same name has a new one)."""
        name = self.metadata_cache.topic_name(topic_id)
        if name is None:
            return None
        found = await asyncio.to_thread(self.zk.get_topic_ids, [name])
        return name if found.get(name) == topic_id else None

    # --- CreatePartitions (Kafka ``ZkAdminManager.createPartitions``) -----------------

    def _plan_partitions(
        self,
        topic: str,
        existing: dict[int, tuple[int, ...]],
        count: int,
        assignments: list[list[int]] | None,
    ) -> tuple[ErrorCode, str | None, dict[int, list[int]]]:
        """Validate one CreatePartitions entry against the topic's current partitions and
        place the new ones (the given ``assignments``, or Kafka's placement continuing
        the topic's layout: the same replication factor, the start index of partition
        0's first replica, numbering from the current count)."""
        old = len(existing)
        if count < old:
            return (
                ErrorCode.invalid_partitions,
                f"Topic currently has {old} partitions, which is higher than the requested "
                f"{count}. Kafka does not remove partitions.",
                {},
            )
        if count == old:
            return ErrorCode.invalid_partitions, f"Topic already has {old} partitions.", {}
        adding = count - old
        rf = len(existing[min(existing)])
        brokers = sorted(self.metadata_cache.brokers.values(), key=lambda b: b.broker_id)
        ids = [b.broker_id for b in brokers]
        if assignments is not None:
            if len(assignments) != adding:
                return (
                    ErrorCode.invalid_replica_assignment,
                    f"Increasing the number of partitions by {adding} but "
                    f"{len(assignments)} assignments provided.",
                    {},
                )
            for replicas in assignments:
                unknown = sorted(set(replicas) - set(ids))
                if not replicas:
                    return ErrorCode.invalid_replica_assignment, "Empty replica assignment.", {}
                if unknown:
                    return (
                        ErrorCode.invalid_replica_assignment,
                        f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}.",
                        {},
                    )
                if len(set(replicas)) != len(replicas):
                    return (
                        ErrorCode.invalid_replica_assignment,
                        f"Duplicate brokers not allowed in replica assignment: "
                        f"{', '.join(map(str, replicas))} for partition id {old}.",
                        {},
                    )
                if len(replicas) != rf:
                    return (
                        ErrorCode.invalid_replica_assignment,
                        f"Inconsistent replication factor between partitions, partition 0 has "
                        f"{rf} while the new partitions have {len(replicas)}.",
                        {},
                    )
            return ErrorCode.none, None, {old + i: list(r) for i, r in enumerate(assignments)}
        if rf > len(brokers):
            return (
                ErrorCode.invalid_replication_factor,
                f"Replication factor: {rf} larger than available brokers: {len(brokers)}.",
                {},
            )
        first = existing[min(existing)][0]
        start = next((i for i, b in enumerate(ids) if b >= first), 0)
        try:
            placed = placement.assign_replicas_to_brokers(
                [placement.BrokerMetadata(b.broker_id, b.rack or None) for b in brokers],
                adding,
                rf,
                self._rng,
                fixed_start_index=start,
                start_partition_id=old,
            )
        except placement.PlacementError as exc:
            return ErrorCode.invalid_replica_assignment, str(exc), {}
        return ErrorCode.none, None, {p: list(r) for p, r in placed.items()}

    async def create_partitions(
        self,
        topic: str,
        count: int,
        assignments: list[list[int]] | None,
        timeout_ms: int,
        validate_only: bool,
    ) -> tuple[ErrorCode, str | None]:
        """Add partitions to ``topic``: the topic znode gets them (a conditional write on
        the version read, so a concurrent change is not lost) and the controller brings
        them online; waits up to ``timeout_ms`` for their leaders."""
        found = await asyncio.to_thread(self.zk.get_replica_assignments, [topic])
        if topic not in found:
            return ErrorCode.unknown_topic_or_partition, f"The topic '{topic}' does not exist."
        marked = await asyncio.to_thread(self.zk.get_topics_marked_for_deletion)
        if topic in marked:
            return ErrorCode.invalid_topic_exception, f"The topic '{topic}' is queued for deletion."
        if any(a.is_being_reassigned for a in found[topic][0].values()):
            return (
                ErrorCode.reassignment_in_progress,
                f"A partition reassignment is in progress for the topic '{topic}'.",
            )
        existing = {p: a.replicas for p, a in found[topic][0].items()}
        error, message, added = self._plan_partitions(topic, existing, count, assignments)
        if error != ErrorCode.none or validate_only:
            return error, message

        def change(current: dict[int, ReplicaAssignment]) -> dict[int, ReplicaAssignment]:
            if len(current) != len(existing):
                raise _Changed
            return {**current, **{p: ReplicaAssignment(tuple(r)) for p, r in added.items()}}

        try:
            await asyncio.to_thread(self.zk.set_replica_assignments, topic, change, None)
        except NoNodeError:
            return ErrorCode.unknown_topic_or_partition, f"The topic '{topic}' does not exist."
        except _Changed:
            # Another CreatePartitions wrote first, often this client's own earlier attempt
            # that timed out on its side: answer as if this one came after it, so a retry
            # whose count is reached already gets INVALID_PARTITIONS (Kafka's answer then).
            now = await asyncio.to_thread(self.zk.get_replica_assignments, [topic])
            current = {p: a.replicas for p, a in now.get(topic, ({},))[0].items()}
            if current and len(current) >= count:
                return self._plan_partitions(topic, current, count, assignments)[:2]
            return (
                ErrorCode.reassignment_in_progress,
                f"The partitions of topic '{topic}' changed meanwhile; try again.",
            )
        log.info("topic %s: partitions %s added to ZooKeeper", topic, added)
        if timeout_ms > 0:
            if await self._until_leaders({topic: set(added)}, timeout_ms):
                return ErrorCode.request_timed_out, None  # Kafka answers no message
        return ErrorCode.none, None

    async def delete_topics(
        self, names: list[str], timeout_ms: int
    ) -> list[tuple[ErrorCode, str | None]]:
        outcomes: list[tuple[ErrorCode, str | None]] = []
        marked = []
        for name in names:
            if not self.config.delete_topic_enable:
                outcomes.append((ErrorCode.topic_deletion_disabled, "delete.topic.enable is false"))
                continue
            exists = await asyncio.to_thread(self.zk.topic_exists, name)
            if not exists:
                outcomes.append(
                    (ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
                )
                continue
            await asyncio.to_thread(self.zk.mark_topic_for_deletion, name)
            marked.append(name)
            outcomes.append((ErrorCode.none, None))
        if marked and timeout_ms > 0:
            late = await delayed_delete_topics(marked).wait(self.metadata_cache, timeout_ms)
            outcomes = [
                (ErrorCode.request_timed_out, "deletion is under way") if name in late else outcome
                for name, outcome in zip(names, outcomes, strict=True)
            ]
        return outcomes
