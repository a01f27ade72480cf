"""A follower's incremental fetch session with one leader (KIP-227; Kafka
``FetchSessionHandler``).

The first request is a full fetch at epoch 0 (INITIAL) naming every partition; a leader
with room answers it with a session id. From then on each request names only the
partitions added since the last one or asked differently (fetch offset, log start
offset, max bytes, current leader epoch), lists those dropped as forgotten, and carries
the next epoch (``fetch_metadata.next_epoch``). A partition the leader leaves out of an
incremental answer has nothing new.

Topic ids (KIP-516): a request whose partitions all have a topic id names topics by id
(Fetch v13+, ``FetchRequestData.can_use_topic_ids``); one with a partition of a topic
without an id (made before ids existed) names them by name, as Kafka falls back to v12.
A session keeps the way it was made: when the request would switch between ids and
names, it is a full fetch that closes the session and asks for a new one (the leader
would refuse the switch with FETCH_SESSION_TOPIC_ID_ERROR, which is also handled). A
partition whose topic id changed (the topic was deleted and made again) is forgotten
under its old id and sent under its new one (Kafka's "replaced" partitions).

When the follower stops fetching from the leader (its fetcher is idle or shuts down),
``close`` gives a last request at epoch FINAL (-1) that frees the leader's session at
once, as a Kafka consumer does on close, instead of leaving it to eviction.

Back to a full fetch: after a top-level error (FETCH_SESSION_ID_NOT_FOUND: with no
session; any other, INVALID_FETCH_SESSION_EPOCH among them: closing the old session and
asking for a new one), after a request that failed or timed out, and after a
reconnection (``handle_error``); after an answer that does not fit the request (a full
answer missing a partition or naming an extra one, an incremental answer naming a
partition outside the session); and when the leader answers with no session.

Concurrency: sans-IO; owned by one fetcher's endpoint, used by one task.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from replog.protocol.fetch_metadata import FINAL_EPOCH, INITIAL, INVALID_SESSION_ID, FetchMetadata
from replog.replication.fetch_rules import FetchPartitionRequest

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class FetchRequestData:
    """What the next request carries: ``to_send`` (every partition in a full fetch, the
    added and changed ones in an incremental one), ``to_forget``, and its session id
    and epoch; ``session_size``: partitions in the session once it is sent."""

    to_send: list[FetchPartitionRequest]
    to_forget: list[TopicPartition]
    metadata: FetchMetadata
    session_size: int
    can_use_topic_ids: bool = False
    """Every partition of the session has a topic id: the request names topics by id."""
    to_forget_by_id: list[tuple[uuid.UUID, TopicPartition]] = field(default_factory=list)
    """What a request by id forgets: ``to_forget`` with their ids, and the partitions
    whose topic id changed, under their old id."""


class FetchSessionHandler:
    def __init__(self, node: int) -> None:
        self.node = node
        self.next_metadata: FetchMetadata = INITIAL
        self.session_partitions: dict[TopicPartition, FetchPartitionRequest] = {}
        """Every partition in the session, as it was last sent."""
        self.session_uses_topic_ids = False
        """The session names topics by id (made by a full fetch that could)."""

    @property
    def session_id(self) -> int:
        return self.next_metadata.session_id

    def build(self, partitions: Iterable[FetchPartitionRequest]) -> FetchRequestData:
        """The next request, for ``partitions`` (all those to fetch now, in order)."""
        wanted = {(p.topic, p.partition): p for p in partitions}
        by_id = all(p.topic_id is not None for p in wanted.values())
        metadata = self.next_metadata
        if not metadata.is_full and by_id != self.session_uses_topic_ids:
            log.info(
                "fetch session %d with broker %d: topics now named by %s; starting a new one",
                metadata.session_id,
                self.node,
                "id" if by_id else "name",
            )
            metadata = self.next_metadata = metadata.next_close_existing_attempt_new()
        if metadata.is_full:
            self.session_partitions = wanted
            self.session_uses_topic_ids = by_id
            return FetchRequestData(list(wanted.values()), [], metadata, len(wanted), by_id)
        session = self.session_partitions
        to_send: list[FetchPartitionRequest] = []
        to_forget: list[TopicPartition] = []
        to_forget_by_id: list[tuple[uuid.UUID, TopicPartition]] = []
        for tp, sent in list(session.items()):
            now = wanted.get(tp)
            if now is None:
                del session[tp]
                to_forget.append(tp)
                if sent.topic_id is not None:
                    to_forget_by_id.append((sent.topic_id, tp))
            elif now is not sent and now != sent:
                if sent.topic_id is not None and now.topic_id != sent.topic_id:
                    to_forget_by_id.append((sent.topic_id, tp))  # replaced
                session[tp] = now
                to_send.append(now)
        for tp, now in wanted.items():
            if tp not in session:
                session[tp] = now
                to_send.append(now)
        return FetchRequestData(to_send, to_forget, metadata, len(session), by_id, to_forget_by_id)

    def topic_names(self) -> dict[uuid.UUID, str]:
        """The names of the session's topic ids, to read an answer by id."""
        return {
            p.topic_id: p.topic for p in self.session_partitions.values() if p.topic_id is not None
        }

    def handle_response(
        self, error: int, session_id: int, partitions: Collection[TopicPartition]
    ) -> bool:
        """Whether the answer to the last ``build``'s request can be used; ``partitions``:
        the ones it names. Sets up the next request's session id and epoch."""
        metadata = self.next_metadata
        if error != ErrorCode.none:
            log.info(
                "broker %d could not answer fetch %s: %s",
                self.node,
                metadata,
                _error_name(error),
            )
            if error == ErrorCode.fetch_session_id_not_found:
                self.next_metadata = INITIAL
            else:
                self.next_metadata = metadata.next_close_existing_attempt_new()
            return False
        session = self.session_partitions
        extra = [tp for tp in partitions if tp not in session]
        if metadata.is_full:
            omitted = len(session) - (len(partitions) - len(extra))
            if extra or omitted:
                log.info(
                    "broker %d sent an invalid full fetch response: %d partitions omitted, "
                    "extra %s",
                    self.node,
                    omitted,
                    extra[:10],
                )
                self.next_metadata = INITIAL
                return False
            if session_id == INVALID_SESSION_ID:
                self.next_metadata = INITIAL
            else:
                if session_id != metadata.session_id:
                    log.info(
                        "broker %d created fetch session %d of %d partitions",
                        self.node,
                        session_id,
                        len(session),
                    )
                self.next_metadata = FetchMetadata.new_incremental(session_id)
            return True
        if extra:
            log.info(
                "broker %d sent an invalid incremental fetch response: extra %s",
                self.node,
                extra[:10],
            )
            self.next_metadata = metadata.next_close_existing_attempt_new()
            return False
        if session_id == INVALID_SESSION_ID:
            log.info("broker %d closed fetch session %d", self.node, metadata.session_id)
            self.next_metadata = INITIAL
        else:
            self.next_metadata = metadata.next_incremental()
        return True

    def close(self) -> FetchMetadata | None:
        """The follower stops fetching from this leader (the fetcher is idle or shutting
        down): the metadata of a last request that closes the session (its id at epoch
        FINAL, -1, naming no partition), or None when there is no session to close. The
        next request, if any, is a full fetch that asks for a new session."""
        session_id = self.next_metadata.session_id
        self.next_metadata = INITIAL
        self.session_partitions = {}
        self.session_uses_topic_ids = False
        if session_id == INVALID_SESSION_ID:
            return None
        return FetchMetadata(session_id, FINAL_EPOCH)

    def handle_error(self) -> None:
        """The request failed, timed out or its connection was replaced: the next one is
        a full fetch that closes this session and asks for a new one."""
        self.next_metadata = self.next_metadata.next_close_existing_attempt_new()


def _error_name(error: int) -> str:
    try:
        return ErrorCode(error).name
    except ValueError:
        return str(error)
