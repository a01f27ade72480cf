"""Consumers in the simulated world: Fetch v12+ with ``last_fetched_epoch`` (KIP-595) in
KIP-227 sessions, answered by the shipped leader side.

The shipped followers find where to truncate with OffsetsForLeaderEpoch and send no
``last_fetched_epoch`` (``leader_endpoint.py``); the leader's KIP-595 check
(``fetch_rules.check_last_fetched_epoch``, ``decide_fetch``'s divergence branch) is reached
by clients that send one. A ``SimConsumer`` is such a client: it reads the committed
records (up to the high watermark) from the broker that leads at ZooKeeper's epoch, says
which epoch its last record had, and keeps a fetch session with each broker through the
shipped ``FetchSessionHandler``; the broker answers through its own ``FetchManager`` and
``PartitionMachine.on_fetch``, as the Fetch handler does. Consumers' sessions share the
broker's session cache with the followers' (privileged) sessions, so a small
``max.incremental.fetch.session.cache.slots`` makes the cache evict.

Invariants (``World.violation``):

* ``consumer_read_uncommitted``: what a consumer read is a prefix of the committed log.
* ``consumer_false_divergence``: while no committed record was knowingly lost, a
  consumer's log is a prefix of the leader's, so the leader never answers it a diverging
  epoch, nor OFFSET_OUT_OF_RANGE from the divergence check.
* ``consumer_log_diverged``: after a read, the consumer's log is a prefix of the
  leader's that answered (records lost and rewritten at another epoch were told apart).
* ``consumer_divergence_too_late``: a diverging epoch, once records were lost, never
  leaves the consumer above the first offset where its log and the leader's differ.
* ``fetch_session_partitions``: the partitions the broker reads for a fetch are those the
  client's session handler holds (a full fetch's, or the session's after the incremental
  fetch's additions, updates and forgotten partitions); ``fetch_session_stale_offset``:
  the offset it reads at is the one the client last sent.
* ``consumer_answer_lso``: an answer without error carries the HW as its last stable
  offset (no transaction is ever open in the simulated world).
* ``fetch_session_epoch_reused``: an incremental request sent again (a retry) is answered
  INVALID_FETCH_SESSION_EPOCH, and the session stays.
* ``fetch_session_answer``: an answer names only partitions the fetch's session holds (the
  handler refuses others), and a full answer names every partition asked.

Concurrency: owned by the single-threaded world; each fetch runs to completion.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from replog.protocol.fetch_metadata import FetchMetadata
from replog.replication.fetch_rules import READ_COMMITTED, READ_UNCOMMITTED, FetchPartitionRequest
from replog.replication.fetch_session_handler import FetchSessionHandler
from replog.server.fetch_session import CachedPartition
from replog.storage.producer_state import last_stable_offset
from sim.broker import FETCH_MAX_BYTES, MAX_RECORDS_PER_FETCH, NO_LEADER
from sim.network import Record
from sim.sessions import check_fetch_ready, check_incremental_request, check_session_cache

if TYPE_CHECKING:
    from sim.broker import SimBroker
    from sim.world import World

# Fetch v12: last_fetched_epoch and diverging_epoch, sessions by topic name
CONSUMER_FETCH_VERSION = 12
CONSUMER_REPLICA_ID = -1
GONE = "gone"


@dataclass
class SimConsumer:
    """One consumer: its position is the length of what it read."""

    id: int
    records: list[Record] = field(default_factory=list)
    sessions: dict[int, FetchSessionHandler] = field(default_factory=dict)
    # partitions of a topic no broker here hosts ("gone"), fetched beside t-0: answered
    # UNKNOWN_TOPIC_OR_PARTITION, they make sessions of several sizes that change
    gone: set[int] = field(default_factory=set)

    @property
    def position(self) -> int:
        return len(self.records)

    @property
    def last_fetched_epoch(self) -> int:
        return self.records[-1].epoch if self.records else -1

    def session(self, broker: int) -> FetchSessionHandler:
        handler = self.sessions.get(broker)
        if handler is None:
            handler = self.sessions[broker] = FetchSessionHandler(broker)
        return handler


class Consumers:
    """The world's consumers and their fetches; their own random stream, so that a
    profile without consumers draws exactly what it drew before."""

    def __init__(self, world: World, count: int) -> None:
        self.world = world
        self.rng = random.Random(world.seed * 7_919 + 17)
        self.consumers = [SimConsumer(-(i + 1), gone=set(range(i))) for i in range(count)]

    def maybe_fetch(self) -> None:
        cfg = self.world.config
        if not self.consumers or self.rng.random() >= cfg.consumer_fetch_probability:
            return
        consumer = self.rng.choice(self.consumers)
        if self.rng.random() < 0.05:  # it stops or starts fetching one of those
            consumer.gone ^= {self.rng.randrange(3)}
        st = self.world.controller.state
        if st.leader == NO_LEADER:
            return
        # mostly the leader ZooKeeper names (fresh metadata); now and then another broker
        target = st.leader if self.rng.random() < 0.9 else self.rng.choice(list(self.world.brokers))
        broker = self.world.brokers[target]
        if not broker.alive or broker.paused or broker.log_dir_failed:
            return
        if self.rng.random() < 0.03:  # it leaves this broker for now: closes its session
            self.close_session(consumer, broker)
            return
        self.fetch(consumer, broker, st.leader_epoch)

    def close_session(self, consumer: SimConsumer, broker: SimBroker) -> None:
        """The last request of a session (its id at the final epoch, no partitions), as
        the shipped ``FetchSessionHandler.close`` makes it. ``fetch_session_not_closed``:
        the broker no longer holds the session afterwards."""
        metadata = consumer.session(broker.id).close()
        if metadata is None:
            return
        context = broker.fetch_manager.new_context(
            CONSUMER_FETCH_VERSION, metadata, False, [], [], self.world.local_now(broker.id)
        )
        self.world.count("consumer_session_closed")
        if context.error is not ErrorCode.none or context.partitions():
            self.world.violation(
                "fetch_session_not_closed",
                f"consumer {consumer.id} at b{broker.id}: closing {metadata} answered "
                f"{context.error.name} with {len(context.partitions())} partitions",
            )
        if broker.fetch_manager.cache.get(metadata.session_id) is not None:
            self.world.violation(
                "fetch_session_not_closed",
                f"consumer {consumer.id} at b{broker.id}: session {metadata.session_id} "
                "still held after its close",
            )

    def fetch(self, consumer: SimConsumer, broker: SimBroker, leader_epoch: int) -> None:
        world = self.world
        now = world.local_now(broker.id)
        handler = consumer.session(broker.id)
        lfe = consumer.last_fetched_epoch
        sent_before = dict(handler.session_partitions)
        data = handler.build(
            [
                FetchPartitionRequest(
                    "t",
                    0,
                    consumer.position,
                    FETCH_MAX_BYTES,
                    current_leader_epoch=leader_epoch,
                    last_fetched_epoch=lfe,
                )
            ]
            + [FetchPartitionRequest(GONE, p, 0, FETCH_MAX_BYTES) for p in sorted(consumer.gone)]
        )
        check_incremental_request(world, f"consumer {consumer.id}", sent_before, data)
        asked = [
            CachedPartition(
                topic=p.topic,
                partition=p.partition,
                topic_id=None,
                fetch_offset=p.fetch_offset,
                max_bytes=p.max_bytes,
                current_leader_epoch=p.current_leader_epoch,
                last_fetched_epoch=p.last_fetched_epoch,
            )
            for p in data.to_send
        ]
        cache = broker.fetch_manager.cache
        before = dict(cache.sessions)
        context = broker.fetch_manager.new_context(
            CONSUMER_FETCH_VERSION,
            FetchMetadata(data.metadata.session_id, data.metadata.epoch),
            False,
            asked,
            list(data.to_forget),
            now,
        )
        if context.error is not ErrorCode.none:
            world.count(f"consumer_session_{context.error.name}")
            handler.handle_response(context.error, 0, [])
            return
        answers = []
        held = {(c.topic, c.partition) for c in context.partitions()}
        if held != set(handler.session_partitions):
            # the leader's session (or a full fetch's partitions) is what the client sent
            world.violation(
                "fetch_session_partitions",
                f"consumer {consumer.id} at b{broker.id}: the broker reads {sorted(held)}, "
                f"the session holds {sorted(handler.session_partitions)}",
            )
            return
        for cached in context.partitions():
            read = cached.read_request()
            if read.topic == GONE:
                error = ErrorCode.unknown_topic_or_partition
                if context.must_respond(cached, error, -1, -1, -1, False, False):
                    answers.append(((read.topic, read.partition), read, None, ()))
                continue
            if read.fetch_offset != consumer.position:
                world.violation(
                    "fetch_session_stale_offset",
                    f"consumer {consumer.id} at b{broker.id}: read at {read.fetch_offset}, "
                    f"its position is {consumer.position}",
                )
                return
            # the first consumer reads committed: its bound is the LSO, the HW here (no
            # transaction is ever open), as the broker reads it (first unstable: none)
            committed_only = consumer.id == -1
            ls = broker.machine.leader_state
            lso = (
                last_stable_offset(ls.high_watermark, broker.log.log_start_offset, None)
                if committed_only and ls is not None
                else None
            )
            ready = broker.machine.fetch_ready(CONSUMER_REPLICA_ID, read.fetch_offset, lso)
            decision = broker.machine.on_fetch(
                CONSUMER_REPLICA_ID,
                read.fetch_offset,
                read.current_leader_epoch,
                now,
                isolation_level=READ_COMMITTED if committed_only else READ_UNCOMMITTED,
                last_fetched_epoch=read.last_fetched_epoch,
            )
            check_fetch_ready(world, broker, f"consumer {consumer.id}", ready, decision)
            records: tuple[Record, ...] = ()
            if decision.error is ErrorCode.none and decision.bounds is not None:
                start = decision.bounds.start_offset
                end = min(decision.bounds.end_offset, start + MAX_RECORDS_PER_FETCH)
                records = tuple(broker.log.records[start:end])
            if context.must_respond(
                cached,
                decision.error,
                decision.high_watermark,
                decision.last_stable_offset,
                broker.log.log_start_offset,
                bool(records),
                decision.diverging_epoch is not None,
            ):
                answers.append(((cached.topic, cached.partition), read, decision, records))
        named = [tp for tp, *_ in answers]
        if not set(named) <= held or (data.metadata.is_full and set(named) != held):
            world.violation(
                "fetch_session_answer",
                f"consumer {consumer.id} at b{broker.id}: answered {named}, session {held}",
            )
            return
        session_id = context.response_session_id(now)
        check_session_cache(
            world,
            cache,
            before,
            requester=f"consumer {consumer.id} at b{broker.id}",
            privileged=False,
            session_id=session_id,
            own_session=data.metadata.session_id,
            now_ms=now,
        )
        if not handler.handle_response(context.response_error(), session_id, named):
            world.count("consumer_session_refused")
            return
        if session_id:
            world.count("consumer_fetch_in_session")
            if not data.metadata.is_full and self.rng.random() < 0.05:
                self._repeat(consumer, broker, data.metadata, session_id)
        for _, read, decision, records in answers:
            if decision is not None:
                self._on_answer(consumer, broker, read, decision, records)

    def _repeat(self, consumer, broker, metadata, session_id: int) -> None:
        """The same incremental request again (a client retrying one whose answer it
        thinks lost): ``fetch_session_epoch_reused``: the broker answers
        INVALID_FETCH_SESSION_EPOCH and keeps the session."""
        context = broker.fetch_manager.new_context(
            CONSUMER_FETCH_VERSION, metadata, False, [], [], self.world.local_now(broker.id)
        )
        self.world.count("consumer_fetch_repeated")
        if context.error is not ErrorCode.invalid_fetch_session_epoch or (
            broker.fetch_manager.cache.get(session_id) is None
        ):
            self.world.violation(
                "fetch_session_epoch_reused",
                f"consumer {consumer.id} at b{broker.id}: {metadata} again answered "
                f"{context.error.name}, session kept: "
                f"{broker.fetch_manager.cache.get(session_id) is not None}",
            )

    def _on_answer(self, consumer, broker, read, decision, records) -> None:
        world = self.world
        diverging = decision.diverging_epoch
        if (
            decision.error is ErrorCode.none
            and decision.last_stable_offset != decision.high_watermark
        ):
            # no transaction is ever open here: the last stable offset is the HW
            world.violation(
                "consumer_answer_lso",
                f"consumer {consumer.id} at b{broker.id}: answered LSO "
                f"{decision.last_stable_offset}, HW {decision.high_watermark}",
            )
        checked = read.last_fetched_epoch >= 0 and decision.bounds is None
        if diverging is not None or (checked and decision.error is ErrorCode.offset_out_of_range):
            world.count("consumer_divergence")
            first_difference = _first_difference(consumer.records, broker.log.records)
            if not world.loss_accepted:
                world.violation(
                    "consumer_false_divergence",
                    f"consumer {consumer.id} at {consumer.position} (epoch "
                    f"{read.last_fetched_epoch}) told {decision.error.name} {diverging} by "
                    f"b{broker.id}, whose log agrees up to {first_difference}",
                )
                return
            if diverging is None:
                del consumer.records[:]
                return
            # Kafka's consumer: the first offset known to diverge
            position = min(diverging.end_offset, consumer.position)
            if position > first_difference:
                world.violation(
                    "consumer_divergence_too_late",
                    f"consumer {consumer.id}: diverging {diverging} leaves it at {position}, "
                    f"its log differs from b{broker.id}'s from {first_difference}",
                )
            del consumer.records[position:]
            return
        if decision.error is not ErrorCode.none:
            world.count(f"consumer_fetch_{decision.error.name}")
            return
        if not records:
            return
        world.count("consumer_read")
        consumer.records.extend(records)
        leader_log = broker.log.records
        if consumer.records != leader_log[: consumer.position]:
            world.violation(
                "consumer_log_diverged",
                f"consumer {consumer.id} read up to {consumer.position} from b{broker.id}, "
                "whose log differs from "
                f"{_first_difference(consumer.records, leader_log)}: a divergence unseen",
            )
        committed = world.committed
        n = min(len(consumer.records), len(committed))
        if not world.loss_accepted and (
            len(consumer.records) > len(committed) or consumer.records[:n] != committed[:n]
        ):
            world.violation(
                "consumer_read_uncommitted",
                f"consumer {consumer.id} read up to {consumer.position} from b{broker.id}; "
                f"committed {len(committed)}, first difference at "
                f"{_first_difference(consumer.records, committed)}",
            )


def _first_difference(mine: list[Record], theirs: list[Record]) -> int:
    for i, (a, b) in enumerate(zip(mine, theirs, strict=False)):
        if a != b:
            return i
    return min(len(mine), len(theirs))
