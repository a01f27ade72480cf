"""Replica fetchers: followers pull from leaders (Kafka ``ReplicaFetcherThread``).

One fetcher task per (source broker, fetcher id); ``num.replica.fetchers``
spreads a leader's partitions over that many fetchers. Each fetcher first
truncates its partitions where their logs diverge from the leader's
(OffsetsForLeaderEpoch, KIP-101/279), then carries all of them in each Fetch
request. The rules live in ``FollowerState``; this module does the IO.

Concurrency: a fetcher's partition map is changed by the manager on the event
loop; the fetcher re-reads it at the top of every round and never holds a
reference across an await without checking it is still current.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from replog.replication.follower import FollowerPhase, FollowerState, RestartAt
from replog.replication.leader_endpoint import (
    FetchPartitionRequest,
    LeaderEndpoint,
    RemoteLeaderEndpoint,
)
from replog.replication.partition import Partition
from replog.replication.truncation import EpochEndOffset, TruncationDecision
from replog.storage.log import UnexpectedAppendOffset

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class FetcherConfig:
    broker_id: int
    fetch_max_bytes: int
    fetch_wait_max_ms: int
    fetch_min_bytes: int
    fetch_backoff_ms: int
    request_timeout_ms: int
    num_fetchers: int


@dataclass
class FollowedPartition:
    partition: Partition
    state: FollowerState
    leader_epoch: int


class ReplicaFetcher:
    """Fetches every partition this broker follows from one leader broker."""

    def __init__(self, source_broker: int, endpoint: LeaderEndpoint, config: FetcherConfig) -> None:
        self.source_broker = source_broker
        self.endpoint = endpoint
        self.config = config
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
                await asyncio.sleep(self.config.fetch_backoff_ms / 1000)
                continue
            if not fetched:
                # Every partition is fenced or waiting: back off instead of spinning.
                await asyncio.sleep(self.config.fetch_backoff_ms / 1000)

    async def _truncate_round(self) -> None:
        pending: dict[TopicPartition, FollowedPartition] = {}
        requests: dict[TopicPartition, tuple[int, int]] = {}
        for tp, followed in list(self.partitions.items()):
            if followed.state.phase is not FollowerPhase.TRUNCATING:
                continue
            log_ = followed.partition.log
            step = followed.state.next_truncation_step(log_.leader_epoch_cache.entries())
            if isinstance(step, TruncationDecision):
                self._truncate(followed, step)
                continue
            pending[tp] = followed
            requests[tp] = (step.current_leader_epoch, step.requested_epoch)
        if not requests:
            return
        answers = await self.endpoint.offsets_for_leader_epoch(requests)
        for tp, followed in pending.items():
            if self.partitions.get(tp) is not followed:
                continue  # removed or replaced while we waited
            answer = answers.get(tp)
            if answer is None or answer.error != ErrorCode.none:
                log.info(
                    "%s-%d: OffsetsForLeaderEpoch from broker %d answered %s",
                    tp[0],
                    tp[1],
                    self.source_broker,
                    answer.error.name if answer else "nothing",
                )
                continue
            entries = followed.partition.log.leader_epoch_cache.entries()
            decision = followed.state.on_epoch_response(
                entries, EpochEndOffset(answer.leader_epoch, answer.end_offset)
            )
            self._truncate(followed, decision)

    def _truncate(self, followed: FollowedPartition, decision: TruncationDecision) -> None:
        part = followed.partition
        before = part.log.log_end_offset
        part.log.truncate_to(decision.offset)
        after = part.log.log_end_offset
        if after < before:
            log.info(
                "%s-%d: truncated from %d to %d (leader epoch %d)",
                part.topic,
                part.partition,
                before,
                after,
                followed.leader_epoch,
            )
        followed.state.on_truncated(decision, after)
        part.truncate_high_watermark(after)

    async def _fetch_round(self) -> bool:
        ready = {
            tp: f for tp, f in self.partitions.items() if f.state.phase is FollowerPhase.FETCHING
        }
        if not ready:
            return False
        requests = [
            FetchPartitionRequest(
                topic=tp[0],
                partition=tp[1],
                fetch_offset=f.state.fetch_offset,
                current_leader_epoch=f.leader_epoch,
                log_start_offset=f.partition.log.log_start_offset,
                max_bytes=self.config.fetch_max_bytes,
            )
            for tp, f in ready.items()
        ]
        results = await self.endpoint.fetch(
            requests,
            max_wait_ms=self.config.fetch_wait_max_ms,
            min_bytes=self.config.fetch_min_bytes,
            max_bytes=self.config.fetch_max_bytes * max(1, len(requests)),
        )
        progressed = False
        for tp, followed in ready.items():
            if (
                self.partitions.get(tp) is not followed
                or followed.state.phase is not FollowerPhase.FETCHING
            ):
                continue
            result = results.get(tp)
            if result is None:
                continue
            part = followed.partition
            if result.error == ErrorCode.none:
                if result.records:
                    try:
                        part.log.append_as_follower(result.records, now_ms=now_ms())
                    except UnexpectedAppendOffset as exc:
                        log.warning("%s-%d: %s; truncating again", tp[0], tp[1], exc)
                        followed.state = FollowerState(
                            broker_id=self.config.broker_id,
                            leader_id=self.source_broker,
                            leader_epoch=followed.leader_epoch,
                            log_end_offset=part.log.log_end_offset,
                            high_watermark=part.high_watermark,
                        )
                        continue
                change = followed.state.on_fetch_response(
                    part.log.log_end_offset, result.high_watermark
                )
                part.set_follower_high_watermark(followed.state.high_watermark, change is not None)
                if result.log_start_offset > part.log.log_start_offset:
                    part.log.maybe_increment_log_start_offset(
                        min(result.log_start_offset, followed.state.high_watermark)
                    )
                progressed = True
            elif result.error == ErrorCode.offset_out_of_range:
                effect = followed.state.on_offset_out_of_range(
                    result.log_start_offset, result.high_watermark
                )
                if isinstance(effect, TruncationDecision):
                    self._truncate(followed, effect)
                elif isinstance(effect, RestartAt):
                    part.log.truncate_fully_and_start_at(effect.offset)
                    part.truncate_high_watermark(effect.offset)
                progressed = True
            else:
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
    ) -> None:
        self.config = config
        self._endpoint_factory = endpoint_factory or (
            lambda broker_id, host, port: RemoteLeaderEndpoint(
                config.broker_id, host, port, config.request_timeout_ms
            )
        )
        self.fetchers: dict[tuple[int, int, str, int], ReplicaFetcher] = {}
        self._where: dict[TopicPartition, tuple[int, int, str, int]] = {}

    def _fetcher_id(self, tp: TopicPartition) -> int:
        return zlib.crc32(f"{tp[0]}-{tp[1]}".encode()) % self.config.num_fetchers

    def add_partition(
        self, part: Partition, leader_id: int, leader_address: tuple[str, int] | None
    ) -> None:
        tp = (part.topic, part.partition)
        self.remove_partition(*tp)
        if leader_address is None or part.state is None:
            log.warning(
                "%s-%d: leader %d has no known address; not fetching", tp[0], tp[1], leader_id
            )
            return
        key = (leader_id, self._fetcher_id(tp), leader_address[0], leader_address[1])
        fetcher = self.fetchers.get(key)
        if fetcher is None:
            fetcher = ReplicaFetcher(
                leader_id, self._endpoint_factory(leader_id, *leader_address), self.config
            )
            self.fetchers[key] = fetcher
            fetcher.start()
        state = FollowerState(
            broker_id=self.config.broker_id,
            leader_id=leader_id,
            leader_epoch=part.state.leader_epoch,
            log_end_offset=part.log.log_end_offset,
            high_watermark=part.high_watermark,
        )
        fetcher.add(FollowedPartition(part, state, part.state.leader_epoch))
        self._where[tp] = key

    def remove_partition(self, topic: str, partition: int) -> None:
        key = self._where.pop((topic, partition), None)
        if key is not None and key in self.fetchers:
            self.fetchers[key].remove((topic, partition))

    async def shutdown(self) -> None:
        for fetcher in self.fetchers.values():
            await fetcher.stop()
        self.fetchers.clear()
        self._where.clear()

    async def remove_idle_fetchers(self) -> None:
        for key, fetcher in list(self.fetchers.items()):
            if not fetcher.partitions:
                del self.fetchers[key]
                await fetcher.stop()
