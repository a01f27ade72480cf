"""Replica fetchers: followers pull from leaders (Kafka ``ReplicaFetcherThread``).

One fetcher task per (source broker, fetcher id); ``num.replica.fetchers``
spreads a leader's partitions over that many fetchers. Each fetcher first
truncates its partitions where their logs diverge from the leader's
(OffsetsForLeaderEpoch, KIP-101/279), then fetches all of them in each round.
The endpoint keeps an incremental fetch session with the leader (KIP-227): a
request names only the partitions whose fetch changed, and an answer only those
with news; a partition left out of an answer has nothing new. Each partition's request
names its topic's id (``topic_id``: its log's), and the endpoint sends this broker's
epoch with them (Fetch v15, KIP-903; see ``leader_endpoint``). A fetcher left
with no partition stops, closing its session (Kafka ``shutdownIdleFetcherThreads``). The rules live in
``FollowerState``; this module does the IO.

Concurrency: a fetcher's partition map is changed by the manager on the event
loop; the fetcher re-reads it at the top of every round and never holds a
reference across an await without checking it is still current.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from replog.common.clock import now_ms
from replog.replication.fetch_rules import FetchPartitionRequest
from replog.replication.follower import EpochRequest
from replog.replication.leader_endpoint import (
    LeaderEndpoint,
    RemoteLeaderEndpoint,
    unknown_broker_epoch,
)
from replog.replication.partition import Partition
from replog.replication.quota import ReplicationQuota, follower_should_throttle
from replog.replication.truncation import EpochEndOffset, TruncationDecision
from replog.security.client_security import PLAINTEXT, ClientSecurity
from replog.storage.log import UnexpectedAppendOffset

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
FIRST_BACKOFF_S = 0.05

TopicIdLookup = Callable[[str, int], "uuid.UUID | None"]
"""A followed partition's topic id (its log's, KIP-516), or None for a topic without one."""
BrokerEpoch = Callable[[], int]
"""This broker's epoch now (KIP-380: its registration's czxid), for Fetch v15+ (KIP-903)."""


def _no_topic_id(topic: str, partition: int) -> uuid.UUID | None:
    return None


StorageErrorHandler = Callable[[Partition, str, OSError], None]
"""Told of a follower's failed disk write: the partition, what failed, the error."""


MAX_INT32 = 2**31 - 1


def fetch_response_max_bytes(partition_max_bytes: int, partitions: int) -> int:
    """The whole fetch's byte limit: every partition's, within the int32 the field is
    (1 MiB x 2,048 partitions already overflows it: the request could not be encoded,
    and a follower of that many partitions of one leader never fetched)."""
    return min(partition_max_bytes * max(1, partitions), MAX_INT32)


@dataclass
class FetcherConfig:
    broker_id: int
    fetch_max_bytes: int
    fetch_wait_max_ms: int
    fetch_min_bytes: int
    fetch_backoff_ms: int
    request_timeout_ms: int
    num_fetchers: int
    security: ClientSecurity = PLAINTEXT  # the inter-broker listener's, as a client


@dataclass
class FollowedPartition:
    """A partition this fetcher carries, for as long as it goes on following in the role
    it began at ``role_leader_epoch`` (a follower of the same leader at a newer epoch
    goes on; any other role change ends it)."""

    partition: Partition
    role_leader_epoch: int
    retry_at: float = 0.0  # monotonic time before which an answer with an error is not retried
    backoff_s: float = 0.0
    caught_up: bool = False  # fetched up to the leader's HW last time (Kafka isReplicaInSync)
    _request: FetchPartitionRequest | None = field(default=None, repr=False)

    @property
    def current(self) -> bool:
        return self.partition.role_leader_epoch == self.role_leader_epoch

    def due(self, now: float) -> bool:
        return self.retry_at <= now

    def failed(self, now: float, max_backoff_s: float) -> None:
        """An error answer: retry after 50 ms, doubling up to ``replica.fetch.backoff.ms``.

        The usual error right after a leader change is the new leader not having
        applied its LeaderAndIsr yet (UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER),
        a matter of milliseconds: a full back-off would idle the follower for a second.
        """
        self.backoff_s = min(max(FIRST_BACKOFF_S, 2 * self.backoff_s), max_backoff_s)
        self.retry_at = now + self.backoff_s

    def succeeded(self) -> None:
        self.backoff_s = 0.0
        self.retry_at = 0.0

    def fetch_request(self, max_bytes: int, topic_id: uuid.UUID | None) -> FetchPartitionRequest:
        """What to fetch now; the same object as last time while nothing changed, which
        the fetch session compares first (most partitions of an idle leader).
        ``topic_id``: the topic's id, None for a topic made before ids."""
        part = self.partition
        offset = part.fetch_offset
        epoch = part.leader_epoch
        log_start = part.log_start_offset
        last = self._request
        if (
            last is None
            or last.fetch_offset != offset
            or last.current_leader_epoch != epoch
            or last.log_start_offset != log_start
            or last.max_bytes != max_bytes
            or last.topic_id != topic_id
        ):
            last = self._request = FetchPartitionRequest(
                topic=part.topic,
                partition=part.partition,
                fetch_offset=offset,
                current_leader_epoch=epoch,
                log_start_offset=log_start,
                max_bytes=max_bytes,
                topic_id=topic_id,
            )
        return last


class ReplicaFetcher:
    """Fetches every partition this broker follows from one leader broker."""

    def __init__(
        self,
        source_broker: int,
        endpoint: LeaderEndpoint,
        config: FetcherConfig,
        quota: ReplicationQuota | None = None,
        on_storage_error: StorageErrorHandler | None = None,
        topic_id: TopicIdLookup = _no_topic_id,
    ) -> None:
        self.source_broker = source_broker
        self.endpoint = endpoint
        self.config = config
        self.topic_id = topic_id
        self.quota = quota if quota is not None else ReplicationQuota()
        self.on_storage_error = on_storage_error
        self.partitions: dict[TopicPartition, FollowedPartition] = {}
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"replica-fetcher-{self.source_broker}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.endpoint.close()

    def add(self, followed: FollowedPartition) -> None:
        self.partitions[(followed.partition.topic, followed.partition.partition)] = followed
        self._wakeup.set()

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)

    async def _run(self) -> None:
        while True:
            if not self.partitions:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            try:
                await self._truncate_round()
                fetched = await self._fetch_round()
            except (ConnectionError, OSError, TimeoutError) as exc:
                log.info("fetcher from broker %d: %r; backing off", self.source_broker, exc)
                await self._pause(self.config.fetch_backoff_ms / 1000)
                continue
            except Exception:  # a fetcher that died would stop replication for good
                log.exception("fetcher from broker %d failed; backing off", self.source_broker)
                await self._pause(self.config.fetch_backoff_ms / 1000)
                continue
            if not fetched:
                # Every partition is backing off or waiting: sleep until the first is due,
                # or until a LeaderAndIsr hands this fetcher a partition.
                now = time.monotonic()
                due = min((f.retry_at for f in self.partitions.values()), default=now)
                await self._pause(min(max(due - now, 0.001), self.config.fetch_backoff_ms / 1000))

    async def _pause(self, seconds: float) -> None:
        self._wakeup.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wakeup.wait(), seconds)

    def _throttled(self, followed: FollowedPartition) -> bool:
        """The topic's follower.replication.throttled.replicas lists this replica."""
        return followed.partition.throttled_as_follower()

    def _still_followed(self, tp: TopicPartition, followed: FollowedPartition) -> bool:
        return self.partitions.get(tp) is followed and followed.current

    async def _truncate_round(self) -> None:
        pending: dict[TopicPartition, FollowedPartition] = {}
        requests: dict[TopicPartition, tuple[int, int]] = {}
        now = time.monotonic()
        for tp, followed in list(self.partitions.items()):
            part = followed.partition
            if not followed.current or not part.is_truncating or not followed.due(now):
                continue
            step = part.next_truncation_step()
            if isinstance(step, TruncationDecision):
                self._truncate(followed.partition, step)
                continue
            assert isinstance(step, EpochRequest)
            pending[tp] = followed
            requests[tp] = (step.current_leader_epoch, step.requested_epoch)
        if not requests:
            return
        answers = await self.endpoint.offsets_for_leader_epoch(requests)
        for tp, followed in pending.items():
            if not self._still_followed(tp, followed):
                continue  # removed or replaced while we waited
            answer = answers.get(tp)
            if answer is None:
                followed.failed(time.monotonic(), self.config.fetch_backoff_ms / 1000)
                continue
            decision = followed.partition.on_epoch_response(
                answer.error, EpochEndOffset(answer.leader_epoch, answer.end_offset)
            )
            if decision is None:
                followed.failed(time.monotonic(), self.config.fetch_backoff_ms / 1000)
                log.info(
                    "%s-%d: OffsetsForLeaderEpoch from broker %d answered %s",
                    tp[0],
                    tp[1],
                    self.source_broker,
                    answer.error.name,
                )
                continue
            followed.succeeded()
            self._truncate(followed.partition, decision)

    def _storage_failed(self, part: Partition, what: str, exc: OSError) -> None:
        """A follower's write failed for its disk: the replica manager takes the log dir
        offline (which removes the partition from this fetcher)."""
        self.partitions.pop((part.topic, part.partition), None)
        if self.on_storage_error is None:
            raise exc
        self.on_storage_error(part, what, exc)

    def _truncate(self, part: Partition, decision: TruncationDecision) -> None:
        try:
            before, after = part.truncate(decision)
        except OSError as exc:
            self._storage_failed(part, f"truncation of {part.topic}-{part.partition}", exc)
            return
        self._log_truncation(part, before, after)

    @staticmethod
    def _log_truncation(part: Partition, before: int, after: int) -> None:
        if after < before:
            log.info(
                "%s-%d: truncated from %d to %d (leader epoch %d)",
                part.topic,
                part.partition,
                before,
                after,
                part.leader_epoch,
            )

    async def _fetch_round(self) -> bool:
        now = time.monotonic()
        # No partition can be over the follower quota while it is unlimited (the usual
        # case): then its per-partition check is skipped.
        throttling = not self.quota.unthrottled
        max_bytes = self.config.fetch_max_bytes
        ready: dict[TopicPartition, FollowedPartition] = {}
        requests: list[FetchPartitionRequest] = []
        for tp, f in self.partitions.items():
            if not (f.current and f.partition.is_fetching and f.due(now)):
                continue
            if throttling and follower_should_throttle(
                self.quota, self._throttled(f), f.caught_up, now
            ):
                continue
            ready[tp] = f
            requests.append(f.fetch_request(max_bytes, self.topic_id(*tp)))
        if not ready:
            return False
        results = await self.endpoint.fetch(
            requests,
            max_wait_ms=self.config.fetch_wait_max_ms,
            min_bytes=self.config.fetch_min_bytes,
            max_bytes=fetch_response_max_bytes(max_bytes, len(requests)),
        )
        progressed = False
        # A partition left out of an (incremental) answer has nothing new.
        for tp, result in results.items():
            followed = ready.get(tp)
            if followed is None:
                continue  # not asked for: the session handler refuses such answers
            if not self._still_followed(tp, followed) or not followed.partition.is_fetching:
                continue
            part = followed.partition
            if result.error == ErrorCode.none:
                followed.succeeded()
                try:
                    part.append_as_follower(
                        result.records,
                        leader_high_watermark=result.high_watermark,
                        leader_log_start_offset=result.log_start_offset,
                        now_ms=now_ms(),
                    )
                except UnexpectedAppendOffset as exc:
                    log.warning("%s-%d: %s; truncating again", tp[0], tp[1], exc)
                    continue
                except OSError as exc:
                    self._storage_failed(part, f"follower append to {tp[0]}-{tp[1]}", exc)
                    continue
                if result.records and self._throttled(followed):
                    self.quota.record(len(result.records), time.monotonic())
                followed.caught_up = part.log_end_offset >= result.high_watermark
                progressed = True
            elif result.error == ErrorCode.offset_out_of_range:
                # The leader's HW stands in for its log end (Fetch carries no LEO).
                try:
                    moved = part.on_fetch_offset_out_of_range(
                        result.log_start_offset, result.high_watermark
                    )
                except OSError as exc:
                    self._storage_failed(part, f"truncation of {tp[0]}-{tp[1]}", exc)
                    continue
                if moved is not None:
                    self._log_truncation(part, *moved)
                progressed = True
            else:
                followed.failed(time.monotonic(), self.config.fetch_backoff_ms / 1000)
                log.debug(
                    "%s-%d: fetch from broker %d answered %s",
                    tp[0],
                    tp[1],
                    self.source_broker,
                    result.error.name,
                )
        return progressed


class ReplicaFetcherManager:
    """Which fetcher carries which followed partition (Kafka ``ReplicaFetcherManager``)."""

    def __init__(
        self,
        config: FetcherConfig,
        endpoint_factory: Callable[[int, str, int], LeaderEndpoint] | None = None,
        quota: ReplicationQuota | None = None,
        *,
        topic_id: TopicIdLookup = _no_topic_id,
        broker_epoch: BrokerEpoch = unknown_broker_epoch,
    ) -> None:
        """``topic_id`` names each partition's topic by id in the fetches (Fetch v13+),
        ``broker_epoch`` is sent in them (v15+, KIP-903)."""
        self.config = config
        self.quota = quota if quota is not None else ReplicationQuota()
        self.topic_id = topic_id
        self._endpoint_factory = endpoint_factory or (
            lambda broker_id, host, port: RemoteLeaderEndpoint(
                config.broker_id,
                host,
                port,
                config.request_timeout_ms,
                config.security,
                leader_id=broker_id,
                broker_epoch=broker_epoch,
            )
        )
        self.fetchers: dict[tuple[int, int, str, int], ReplicaFetcher] = {}
        self._where: dict[TopicPartition, tuple[int, int, str, int]] = {}
        self.on_storage_error: StorageErrorHandler | None = None
        """The replica manager's ``storage_failed``: a follower's disk failed."""
        self._idle_check: asyncio.Handle | None = None
        self._stopping: set[asyncio.Task[None]] = set()

    def _fetcher_id(self, tp: TopicPartition) -> int:
        return zlib.crc32(f"{tp[0]}-{tp[1]}".encode()) % self.config.num_fetchers

    def add_partition(
        self, part: Partition, leader_id: int, leader_address: tuple[str, int] | None
    ) -> None:
        tp = (part.topic, part.partition)
        self.remove_partition(*tp)
        if leader_address is None or not part.is_truncating:
            log.warning(
                "%s-%d: leader %d has no known address; not fetching", tp[0], tp[1], leader_id
            )
            return
        key = (leader_id, self._fetcher_id(tp), leader_address[0], leader_address[1])
        fetcher = self.fetchers.get(key)
        if fetcher is None:
            fetcher = ReplicaFetcher(
                leader_id,
                self._endpoint_factory(leader_id, *leader_address),
                self.config,
                self.quota,
                self._storage_error,
                self.topic_id,
            )
            self.fetchers[key] = fetcher
            fetcher.start()
        fetcher.add(FollowedPartition(part, part.role_leader_epoch))
        self._where[tp] = key

    def _storage_error(self, part: Partition, what: str, exc: OSError) -> None:
        self._where.pop((part.topic, part.partition), None)
        if self.on_storage_error is None:
            raise exc
        self.on_storage_error(part, what, exc)

    def remove_partition(self, topic: str, partition: int) -> None:
        key = self._where.pop((topic, partition), None)
        fetcher = self.fetchers.get(key) if key is not None else None
        if fetcher is not None:
            fetcher.remove((topic, partition))
            if not fetcher.partitions:
                self._schedule_idle_check()

    def _schedule_idle_check(self) -> None:
        """After the request being handled (a whole LeaderAndIsr or StopReplica, which
        runs without awaiting), stop the fetchers it left idle."""
        if self._idle_check is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._idle_check = loop.call_soon(self.shutdown_idle_fetchers)

    def shutdown_idle_fetchers(self) -> None:
        """Kafka ``shutdownIdleFetcherThreads``: a fetcher left with no partition stops,
        and closes its fetch session with the leader (``RemoteLeaderEndpoint.close``)."""
        self._idle_check = None
        for key, fetcher in list(self.fetchers.items()):
            if not fetcher.partitions:
                del self.fetchers[key]
                log.info("no partition left to fetch from broker %d", fetcher.source_broker)
                task = asyncio.create_task(fetcher.stop())
                self._stopping.add(task)
                task.add_done_callback(self._stopping.discard)

    async def shutdown(self) -> None:
        if self._idle_check is not None:
            self._idle_check.cancel()
            self._idle_check = None
        for fetcher in self.fetchers.values():
            await fetcher.stop()
        self.fetchers.clear()
        self._where.clear()
        if self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)
