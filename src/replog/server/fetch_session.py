"""Incremental fetch sessions on the leader (KIP-227; Kafka ``FetchSession.scala``).

A fetcher that asks for a session (a full fetch at epoch 0) gets one when the cache
has room: the leader then remembers every partition of the fetch with what it last
asked and what it was last answered. Each later request of the session (epoch 1, 2, ...)
names only the partitions added or changed since, and the ones it drops
(``forgotten_topics_data``); the answer names only the partitions with something new.

``FetchManager.new_context`` applies Kafka's request rules and returns the context the
handler reads and answers through:

* Fetch below v7, or session id 0 at epoch -1 (FINAL): ``SessionlessFetchContext``, a
  full fetch answered in full with session id 0, as before sessions;
* a session id at FINAL: that session is closed, then as above;
* epoch 0 (INITIAL): ``FullFetchContext``. A session the request names is closed first;
  once answered, a new session holding every partition is created if the cache has room
  (``FetchSessionCache.maybe_create_session``), and the answer names it, or 0;
* any other epoch, ``IncrementalFetchContext``: an unknown session id is
  FETCH_SESSION_ID_NOT_FOUND, a known one at another epoch INVALID_FETCH_SESSION_EPOCH,
  a session made by names asked by ids (v13+) or the reverse FETCH_SESSION_TOPIC_ID_ERROR
  (``SessionErrorContext``: the top-level error, no partitions). Otherwise the request's
  partitions are added or updated, the forgotten ones removed, and the expected epoch
  moves on. A session left empty is closed and the request answered sessionless.

Every partition of the session is read on every request, as Kafka does, so that the
follower's fetch state on the leader (ISR lag, HW) moves exactly as with full fetches.
Only the answer is filtered (``CachedPartition.maybe_update_response_data``): records, a
changed high watermark, last stable offset or log start offset, an error, a diverging
epoch or a preferred read replica put a partition in it. A partition answered with
records moves to the end of the session's order (Kafka's rotation): a fetch whose
``max_bytes`` runs out reads the others first next time.

Partitions are keyed by ``(topic name, partition)`` in a session made by names (v7-12),
by ``(topic id, partition)`` in one made by ids (v13+); a topic id the broker does not
know keeps its place with no name (answered UNKNOWN_TOPIC_ID) until it is known.

Concurrency: event loop only, no awaits. A context is made before the read and answers
after it; another request of the same session may come in while the first one waits,
which ``IncrementalFetchContext.response_error`` catches at answer time (Kafka's
"possible duplicate request").
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from replog.protocol.fetch_codec import FIRST_TOPIC_ID
from replog.protocol.fetch_metadata import (
    FINAL_EPOCH,
    FIRST_SESSION_VERSION,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    MAX_EPOCH,
    FetchMetadata,
    next_epoch,
)
from replog.replication.fetch_rules import FetchPartitionRequest

log = logging.getLogger(__name__)

PartitionKey = tuple[str | uuid.UUID, int]
"""``(topic name, partition)``, or ``(topic id, partition)`` in a session made by ids."""

DEFAULT_CACHE_SLOTS = 1000  # max.incremental.fetch.session.cache.slots
DEFAULT_EVICTION_MS = 120_000  # min.incremental.fetch.session.eviction.ms


@dataclass(slots=True, eq=False)
class CachedPartition:
    """One partition of a fetch: what the fetcher last asked of it and, in a session, what
    it was last answered (Kafka ``CachedPartition``).

    ``log_start_offset`` is the fetcher's, ``local_log_start_offset`` this broker's. The
    cached answer starts at -1, so that the first answer after a partition joins always
    goes out."""

    topic: str | None  # None: a topic id this broker did not know when last asked
    partition: int
    topic_id: uuid.UUID | None
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1
    last_fetched_epoch: int = -1
    high_watermark: int = -1
    last_stable_offset: int = -1
    local_log_start_offset: int = -1
    _read: FetchPartitionRequest | None = field(default=None, repr=False)

    @property
    def key(self) -> PartitionKey:
        """The partition's key in a session: by id when it has one (v13+), else by name."""
        if self.topic_id is not None:
            return (self.topic_id, self.partition)
        assert self.topic is not None, "a partition named by neither name nor id"
        return (self.topic, self.partition)

    def update_request_params(self, asked: CachedPartition) -> None:
        """An incremental fetch named this partition again: take what it asks now."""
        self.fetch_offset = asked.fetch_offset
        self.max_bytes = asked.max_bytes
        self.current_leader_epoch = asked.current_leader_epoch
        self.log_start_offset = asked.log_start_offset
        self.last_fetched_epoch = asked.last_fetched_epoch
        if asked.topic is not None:
            self.topic = asked.topic
        self._read = None

    def resolve_topic(self, topic: str | None) -> None:
        """The topic's name now (by-id partitions are resolved on each request)."""
        if topic != self.topic:
            self.topic = topic
            self._read = None

    def read_request(self) -> FetchPartitionRequest:
        """What the replica manager reads for this partition, made once per change."""
        read = self._read
        if read is None:
            assert self.topic is not None, "read of a partition whose topic is unknown"
            read = self._read = FetchPartitionRequest(
                topic=self.topic,
                partition=self.partition,
                fetch_offset=self.fetch_offset,
                max_bytes=self.max_bytes,
                current_leader_epoch=self.current_leader_epoch,
                log_start_offset=self.log_start_offset,
                last_fetched_epoch=self.last_fetched_epoch,
            )
        return read

    def maybe_update_response_data(
        self,
        error: int,
        high_watermark: int,
        last_stable_offset: int,
        log_start_offset: int,
        has_records: bool,
        has_news: bool,
    ) -> bool:
        """Whether this answer goes out in an incremental response, remembering what it
        says. ``has_news``: a diverging epoch or a preferred read replica, which always
        go out. An error goes out, and forgets the high watermark so that the first
        answer after the error goes out too."""
        must_respond = has_records or has_news
        if high_watermark != self.high_watermark:
            must_respond = True
            self.high_watermark = high_watermark
        if last_stable_offset != self.last_stable_offset:
            must_respond = True
            self.last_stable_offset = last_stable_offset
        if log_start_offset != self.local_log_start_offset:
            must_respond = True
            self.local_log_start_offset = log_start_offset
        if error:
            self.high_watermark = -1
            must_respond = True
        return must_respond


@dataclass(slots=True, eq=False)
class FetchSession:
    """One fetcher's session (Kafka ``FetchSession``); ``epoch`` is the one its next
    request must carry. ``privileged``: a follower's, which may evict consumers'."""

    id: int
    privileged: bool
    uses_topic_ids: bool
    creation_ms: int
    last_used_ms: int
    epoch: int
    partitions: dict[PartitionKey, CachedPartition]

    def update(
        self, fetch_data: Iterable[CachedPartition], to_forget: Iterable[PartitionKey]
    ) -> tuple[int, int, int]:
        """Apply an incremental request: ``(added, updated, removed)`` partition counts."""
        added = updated = removed = 0
        partitions = self.partitions
        for asked in fetch_data:
            key = asked.key
            cached = partitions.get(key)
            if cached is None:
                partitions[key] = asked
                added += 1
            else:
                cached.update_request_params(asked)
                updated += 1
        for key in to_forget:
            if partitions.pop(key, None) is not None:
                removed += 1
        return added, updated, removed

    def moved_to_end(self, cached: CachedPartition) -> None:
        """Kafka's rotation: a partition answered with records is read last next time."""
        key = cached.key
        if self.partitions.get(key) is cached:
            del self.partitions[key]
            self.partitions[key] = cached


class FetchSessionCache:
    """The broker's sessions, at most ``max_entries`` of them (Kafka ``FetchSessionCache``).

    A new session needs a free slot or an eviction (``_try_evict``): first a session
    unused for longer than ``eviction_ms``; else the least valuable evictable one, by
    (privileged, partitions, id), if the new one is worth more. A follower's new session
    may evict any consumer's and any follower's older than ``eviction_ms``; a consumer's,
    only sessions older than that. (Kafka decides a session's evictability when it is
    last used; here at the eviction, with the time passed in.)

    Concurrency: event loop only; time is passed in, ids come from ``rng``.
    """

    def __init__(self, max_entries: int, eviction_ms: int, rng: random.Random) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.rng = rng
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0
        """Sessions evicted to make room (Kafka IncrementalFetchSessionEvictionsPerSec)."""

    def __len__(self) -> int:
        return len(self.sessions)

    @property
    def total_partitions(self) -> int:
        """Partitions held by all sessions (Kafka NumIncrementalFetchPartitionsCached)."""
        return sum(len(s.partitions) for s in self.sessions.values())

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        return self.sessions.pop(session_id, None)

    def touch(self, session: FetchSession, now_ms: int) -> None:
        session.last_used_ms = now_ms

    def _new_session_id(self) -> int:
        while True:
            session_id = self.rng.randint(1, MAX_EPOCH - 1)
            if session_id not in self.sessions:
                return session_id

    def maybe_create_session(
        self,
        now_ms: int,
        privileged: bool,
        uses_topic_ids: bool,
        partitions: dict[PartitionKey, CachedPartition],
    ) -> int:
        """The new session's id, or INVALID_SESSION_ID (0) when there is no room for it."""
        if len(self.sessions) >= self.max_entries and not self._try_evict(
            privileged, len(partitions), now_ms
        ):
            log.debug(
                "no fetch session for privileged=%s, %d partitions", privileged, len(partitions)
            )
            return INVALID_SESSION_ID
        session = FetchSession(
            id=self._new_session_id(),
            privileged=privileged,
            uses_topic_ids=uses_topic_ids,
            creation_ms=now_ms,
            last_used_ms=now_ms,
            epoch=next_epoch(INITIAL_EPOCH),
            partitions=partitions,
        )
        self.sessions[session.id] = session
        log.debug(
            "created fetch session %d (privileged=%s, %d partitions)",
            session.id,
            privileged,
            len(partitions),
        )
        return session.id

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        if not self.sessions:
            return False
        stale = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - stale.last_used_ms > self.eviction_ms:
            self._evict(stale, "stale")
            return True

        def evictable(s: FetchSession) -> bool:
            old = now_ms - s.creation_ms > self.eviction_ms
            return old or (privileged and not s.privileged)

        candidates = [s for s in self.sessions.values() if evictable(s)]
        if not candidates:
            return False
        victim = min(candidates, key=lambda s: (s.privileged, len(s.partitions), s.id))
        # The new session's key has id 0: it must be worth strictly more to evict.
        if (privileged, size) <= (victim.privileged, len(victim.partitions)):
            return False
        self._evict(victim, f"by a {'privileged ' if privileged else ''}session of {size}")
        return True

    def _evict(self, session: FetchSession, why: str) -> None:
        del self.sessions[session.id]
        self.evictions += 1
        log.debug("evicted fetch session %d (%s)", session.id, why)


# -- contexts ------------------------------------------------------------------------------


class FetchContext:
    """How one Fetch request reads and answers (Kafka ``FetchContext``)."""

    error: ErrorCode = ErrorCode.none
    """A session error: answered at the top level, with no partitions."""

    def partitions(self) -> Sequence[CachedPartition]:
        """Every partition to read, in order."""
        raise NotImplementedError

    def response_error(self) -> ErrorCode:
        """Checked after the read: a non-zero code is answered with no partitions."""
        return ErrorCode.none

    def must_respond(
        self,
        cached: CachedPartition,
        error: int,
        high_watermark: int,
        last_stable_offset: int,
        log_start_offset: int,
        has_records: bool,
        has_news: bool,
    ) -> bool:
        """Whether this partition's answer goes out."""
        return True

    def response_session_id(self, now_ms: int) -> int:
        """The session id the answer carries, once every partition went through
        ``must_respond``."""
        return INVALID_SESSION_ID


class SessionErrorContext(FetchContext):
    def __init__(self, error: ErrorCode) -> None:
        self.error = error

    def partitions(self) -> Sequence[CachedPartition]:
        return ()


class SessionlessFetchContext(FetchContext):
    def __init__(self, fetch_data: list[CachedPartition]) -> None:
        self.fetch_data = fetch_data

    def partitions(self) -> Sequence[CachedPartition]:
        return self.fetch_data


class FullFetchContext(FetchContext):
    """A full fetch that may start a session: every partition is answered, and what it
    was answered becomes the new session's cache."""

    def __init__(
        self,
        cache: FetchSessionCache,
        fetch_data: list[CachedPartition],
        uses_topic_ids: bool,
        privileged: bool,
    ) -> None:
        self.cache = cache
        self.fetch_data = fetch_data
        self.uses_topic_ids = uses_topic_ids
        self.privileged = privileged

    def partitions(self) -> Sequence[CachedPartition]:
        return self.fetch_data

    def must_respond(
        self,
        cached: CachedPartition,
        error: int,
        high_watermark: int,
        last_stable_offset: int,
        log_start_offset: int,
        has_records: bool,
        has_news: bool,
    ) -> bool:
        cached.maybe_update_response_data(
            error, high_watermark, last_stable_offset, log_start_offset, has_records, has_news
        )
        return True

    def response_session_id(self, now_ms: int) -> int:
        partitions = {p.key: p for p in self.fetch_data}
        return self.cache.maybe_create_session(
            now_ms, self.privileged, self.uses_topic_ids, partitions
        )


class IncrementalFetchContext(FetchContext):
    """A request in a session: reads all of the session's partitions, answers the ones
    with news."""

    def __init__(self, session: FetchSession, request_epoch: int) -> None:
        self.session = session
        self.request_epoch = request_epoch
        # A snapshot: the rotation of answered partitions must not disturb the read order.
        self._partitions = list(session.partitions.values())

    def partitions(self) -> Sequence[CachedPartition]:
        return self._partitions

    def response_error(self) -> ErrorCode:
        if self.session.epoch != next_epoch(self.request_epoch):
            log.info(
                "fetch session %d expected epoch %d, got %d: possible duplicate request",
                self.session.id,
                next_epoch(self.request_epoch),
                self.session.epoch,
            )
            return ErrorCode.invalid_fetch_session_epoch
        return ErrorCode.none

    def must_respond(
        self,
        cached: CachedPartition,
        error: int,
        high_watermark: int,
        last_stable_offset: int,
        log_start_offset: int,
        has_records: bool,
        has_news: bool,
    ) -> bool:
        respond = cached.maybe_update_response_data(
            error, high_watermark, last_stable_offset, log_start_offset, has_records, has_news
        )
        if has_records:
            self.session.moved_to_end(cached)
        return respond

    def response_session_id(self, now_ms: int) -> int:
        return self.session.id


class FetchManager:
    """Makes each Fetch request's context (Kafka ``FetchManager``).

    Concurrency: event loop only; time is passed in."""

    def __init__(self, cache: FetchSessionCache) -> None:
        self.cache = cache
        self.incremental_fetches = 0
        """Requests answered within a session (replog's own count, for its metrics)."""

    def new_context(
        self,
        version: int,
        metadata: FetchMetadata,
        is_follower: bool,
        fetch_data: list[CachedPartition],
        to_forget: list[PartitionKey],
        now_ms: int,
    ) -> FetchContext:
        """The context of one request. ``fetch_data``: its partitions, in order;
        ``to_forget``: the keys of its ``forgotten_topics_data``."""
        if version < FIRST_SESSION_VERSION:
            return SessionlessFetchContext(fetch_data)
        if metadata.is_full:
            if metadata.session_id != INVALID_SESSION_ID:
                # Any session a full fetch names is closed.
                if self.cache.remove(metadata.session_id) is not None:
                    log.debug("closed fetch session %d by a full fetch", metadata.session_id)
            if metadata.epoch == FINAL_EPOCH:
                return SessionlessFetchContext(fetch_data)
            return FullFetchContext(self.cache, fetch_data, version >= FIRST_TOPIC_ID, is_follower)
        session = self.cache.get(metadata.session_id)
        if session is None:
            log.debug("fetch session %d not found", metadata.session_id)
            return SessionErrorContext(ErrorCode.fetch_session_id_not_found)
        if session.epoch != metadata.epoch:
            log.debug(
                "fetch session %d: expected epoch %d, got %d",
                session.id,
                session.epoch,
                metadata.epoch,
            )
            return SessionErrorContext(ErrorCode.invalid_fetch_session_epoch)
        if session.uses_topic_ids != (version >= FIRST_TOPIC_ID):
            return SessionErrorContext(ErrorCode.fetch_session_topic_id_error)
        session.update(fetch_data, to_forget)
        if not session.partitions:
            self.cache.remove(session.id)
            log.debug("closed fetch session %d: no partitions left", session.id)
            return SessionlessFetchContext(fetch_data)
        self.cache.touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        self.incremental_fetches += 1
        return IncrementalFetchContext(session, metadata.epoch)
