"""How a follower talks to its leader: a small seam (Kafka ``LeaderEndPoint``).

``RemoteLeaderEndpoint`` speaks Fetch and OffsetForLeaderEpoch over the Kafka
protocol, its fetches in an incremental fetch session (KIP-227, as Kafka's
``RemoteLeaderEndPoint``: ``fetch_session_handler`` decides what each request
carries); tests may put an in-memory endpoint in its place.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kio.schema.errors import ErrorCode
from kio.schema.offset_for_leader_epoch.v3 import request as epoch_req

from replog.protocol import fetch_codec, wire
from replog.protocol.apis import ApiKey
from replog.protocol.client import KafkaConnection
from replog.replication.fetch_rules import FetchPartitionRequest
from replog.replication.fetch_session_handler import FetchSessionHandler
from replog.security.client_security import PLAINTEXT, ClientSecurity
from replog.zk.fencing import UNKNOWN_BROKER_EPOCH

TopicPartition = tuple[str, int]
# Fetch v15: topics by id (v13, KIP-516) and the follower's broker epoch in replica_state
# (KIP-903), which the leader's ISR write checks against the one registered in ZooKeeper
# before it adds the follower back. A fetch naming a topic without an id (made before
# ids existed) falls back to FETCH_VERSION_BY_NAME, the last version naming topics, as
# Kafka's fetcher falls back to 12; it carries no broker epoch. replog's followers find
# where to truncate with OffsetForLeaderEpoch, not with v12's diverging_epoch
# (last_fetched_epoch stays -1).
FETCH_VERSION = 15
FETCH_VERSION_BY_NAME = 12
# Both are flexible: request header v2 ends its client id with a tagged-field section
# (``request_encoded`` writes the rest of the header), response header v1 likewise.
_HEADER_TAGS = wire.EMPTY_TAGS


@dataclass(frozen=True, slots=True)
class FetchPartitionResult:
    error: ErrorCode
    high_watermark: int
    log_start_offset: int
    records: bytes


@dataclass(frozen=True, slots=True)
class EpochAnswer:
    error: ErrorCode
    leader_epoch: int
    end_offset: int


class LeaderEndpoint(Protocol):
    async def fetch(
        self,
        partitions: list[FetchPartitionRequest],
        *,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
    ) -> dict[TopicPartition, FetchPartitionResult]:
        """Fetch ``partitions`` (all those to fetch now): the answers the leader sends.
        A partition it leaves out has nothing new (an incremental fetch session's
        answer), or the answer was of no use (a session error): no error either way."""
        ...

    async def offsets_for_leader_epoch(
        self, requests: dict[TopicPartition, tuple[int, int]]
    ) -> dict[TopicPartition, EpochAnswer]: ...

    async def close(self) -> None: ...


# A follower's connection to its leader ends when the leader is silent this long (keepalive,
# TCP_USER_TIMEOUT), and a connection attempt is given up after CONNECT_TIMEOUT_S: after a
# network partition heals, fetching resumes within seconds instead of after TCP's
# retransmission backoff or the 30 s request timeout.
DEAD_PEER_S = 5.0
CONNECT_TIMEOUT_S = 2.0
# How long a follower that stops fetching waits for the leader to take its session's close.
CLOSE_SESSION_TIMEOUT_S = 2.0


def unknown_broker_epoch() -> int:
    return UNKNOWN_BROKER_EPOCH


class RemoteLeaderEndpoint:
    """``broker_epoch``: this broker's epoch now (the czxid of its registration in
    ZooKeeper, which changes when it registers again), sent in every Fetch v15+.

    Concurrency: used by one fetcher task at a time."""

    def __init__(
        self,
        replica_id: int,
        host: str,
        port: int,
        timeout_ms: int,
        security: ClientSecurity = PLAINTEXT,
        leader_id: int = -1,
        broker_epoch: Callable[[], int] = unknown_broker_epoch,
    ) -> None:
        self.replica_id = replica_id
        self.broker_epoch = broker_epoch
        self._version = FETCH_VERSION  # of the last request, for the session's close
        self.host = host
        self.port = port
        self.security = security
        self.timeout_s = timeout_ms / 1000
        self._conn: KafkaConnection | None = None
        self.session = FetchSessionHandler(leader_id)

    async def _connection(self) -> KafkaConnection:
        if self._conn is None or not self._conn.connected:
            if self._conn is not None:
                await self._conn.close()
            self._conn = KafkaConnection(
                self.host,
                self.port,
                client_id=f"replica-{self.replica_id}",
                security=self.security,
                dead_peer_s=DEAD_PEER_S,
            )
            # A new connection starts with a full fetch (closing the session, if any).
            self.session.handle_error()
            # A connection attempt into a partition waits for no reply: retry soon instead,
            # so that the first attempt after a heal comes within seconds.
            await self._conn.connect(min(self.timeout_s, CONNECT_TIMEOUT_S))
        return self._conn

    async def fetch(
        self,
        partitions: list[FetchPartitionRequest],
        *,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
    ) -> dict[TopicPartition, FetchPartitionResult]:
        conn = await self._connection()
        session = self.session
        data = session.build(partitions)
        by_id = data.can_use_topic_ids
        version = self._version = FETCH_VERSION if by_id else FETCH_VERSION_BY_NAME
        body = fetch_codec.encode_fetch_request(
            version,
            replica_id=self.replica_id,
            replica_epoch=self.broker_epoch(),
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            isolation_level=0,
            partitions=[
                fetch_codec.FetchRequestPartitionData(
                    topic=p.topic,
                    partition=p.partition,
                    current_leader_epoch=p.current_leader_epoch,
                    fetch_offset=p.fetch_offset,
                    log_start_offset=p.log_start_offset,
                    partition_max_bytes=p.max_bytes,
                    topic_id=p.topic_id,
                )
                for p in data.to_send
            ],
            session_id=data.metadata.session_id,
            session_epoch=data.metadata.epoch,
            forgotten=(
                _forgotten_by_id(data.to_forget_by_id)
                if by_id
                else fetch_codec.forgotten_topics(data.to_forget)
            ),
        )
        try:
            frame = await conn.request_encoded(
                ApiKey.FETCH,
                version,
                _HEADER_TAGS + body,
                timeout_s=self.timeout_s + max_wait_ms / 1000,
            )
            response = fetch_codec.decode_fetch_response_frame(version, frame)
        except fetch_codec.FetchCodecError as exc:
            # A leader that answers garbage: drop this connection, the fetcher backs off.
            session.handle_error()
            await self.close()
            raise ConnectionError(
                f"malformed Fetch response from {self.host}:{self.port}: {exc}"
            ) from exc
        except BaseException:  # failed, timed out or cancelled: the next fetch is full
            session.handle_error()
            raise
        answers = response.partitions
        if by_id:
            # An id outside the session reads as "": an extra partition, which the session
            # handler refuses.
            names = session.topic_names()
            keys = [(names.get(a.topic_id, ""), a.partition) for a in answers]
        else:
            keys = [(a.topic, a.partition) for a in answers]
        if not session.handle_response(response.error_code, response.session_id, keys):
            return {}
        return {
            key: FetchPartitionResult(
                error=ErrorCode(a.error_code),
                high_watermark=a.high_watermark,
                log_start_offset=a.log_start_offset,
                records=a.records or b"",
            )
            for key, a in zip(keys, answers, strict=True)
        }

    async def offsets_for_leader_epoch(
        self, requests: dict[TopicPartition, tuple[int, int]]
    ) -> dict[TopicPartition, EpochAnswer]:
        """``requests``: partition -> (current leader epoch, requested epoch)."""
        by_topic: dict[str, list[epoch_req.OffsetForLeaderPartition]] = {}
        for (topic, partition), (current, requested) in requests.items():
            by_topic.setdefault(topic, []).append(
                epoch_req.OffsetForLeaderPartition(
                    partition=partition, current_leader_epoch=current, leader_epoch=requested
                )
            )
        body = epoch_req.OffsetForLeaderEpochRequest(
            replica_id=self.replica_id,
            topics=tuple(
                epoch_req.OffsetForLeaderTopic(topic=t, partitions=tuple(ps))
                for t, ps in by_topic.items()
            ),
        )
        conn = await self._connection()
        response = await conn.request(body, timeout_s=self.timeout_s)
        out = {}
        for topic in response.topics:
            for p in topic.partitions:
                out[(str(topic.topic), int(p.partition))] = EpochAnswer(
                    p.error_code, int(p.leader_epoch), int(p.end_offset)
                )
        return out

    async def close(self) -> None:
        """Close the fetch session (a last Fetch at epoch FINAL, answered at once), then
        the connection. A leader that does not answer in time keeps the session until
        its cache evicts it."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            final = self.session.close()
            if final is not None and conn.connected:
                body = fetch_codec.encode_fetch_request(
                    self._version,
                    replica_id=self.replica_id,
                    replica_epoch=self.broker_epoch(),
                    max_wait_ms=0,
                    min_bytes=0,
                    max_bytes=0,
                    isolation_level=0,
                    partitions=[],
                    session_id=final.session_id,
                    session_epoch=final.epoch,
                    forgotten=[],
                )
                with contextlib.suppress(Exception):
                    await conn.request_encoded(
                        ApiKey.FETCH,
                        self._version,
                        _HEADER_TAGS + body,
                        timeout_s=min(self.timeout_s, CLOSE_SESSION_TIMEOUT_S),
                    )
        finally:
            await conn.close()


def _forgotten_by_id(
    partitions: list[tuple[uuid.UUID, TopicPartition]],
) -> list[fetch_codec.ForgottenTopic]:
    """Forgotten partitions grouped by topic id, first appearance first (Fetch v13+)."""
    by_id: dict[uuid.UUID, tuple[str, list[int]]] = {}
    for topic_id, (topic, partition) in partitions:
        by_id.setdefault(topic_id, (topic, []))[1].append(partition)
    return [
        fetch_codec.ForgottenTopic(topic, tuple(parts), topic_id)
        for topic_id, (topic, parts) in by_id.items()
    ]
