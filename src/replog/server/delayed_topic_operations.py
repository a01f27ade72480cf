"""Topic work waiting for this broker's metadata cache (Kafka ``DelayedCreatePartitions``
and ``DelayedDeleteTopics``): CreateTopics and CreatePartitions answer once the cache gives
every new partition a leader, DeleteTopics once it no longer names the topics. The cache's
update completes them; their timer expires them with the topics not through, which
``admin.AdminManager`` answers REQUEST_TIMED_OUT.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from replog.server.metadata_cache import MetadataCache


class DelayedTopicOperation:
    """Work on some topics waiting for this broker's metadata cache to reflect it (Kafka
    ``DelayedCreatePartitions``, ``DelayedDeleteTopics``): ``done(cache, topic)`` says
    whether one topic is through. The cache's update completes it (``try_complete``);
    its timer expires it with the topics not through (``expire``). ``result`` gets the
    topics still waiting: none when it completed in time.

    Concurrency: owned by the event loop; the cache calls ``try_complete`` in its update.
    """

    def __init__(
        self,
        topics: Iterable[str],
        done: Callable[[MetadataCache, str], bool],
    ) -> None:
        self.waiting = set(topics)
        self._done = done
        self.result: asyncio.Future[set[str]] = asyncio.get_running_loop().create_future()
        self._timer: asyncio.TimerHandle | None = None

    def try_complete(self, cache: MetadataCache) -> bool:
        if self.result.done():
            return True
        self.waiting = {t for t in self.waiting if not self._done(cache, t)}
        if self.waiting:
            return False
        self._finish()
        return True

    def expire(self) -> None:
        """The timeout passed: answer with the topics still waiting."""
        self._finish()

    def _finish(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if not self.result.done():
            self.result.set_result(set(self.waiting))

    async def wait(self, cache: MetadataCache, timeout_ms: int) -> set[str]:
        """Watch ``cache`` for up to ``timeout_ms``; the topics not through by then."""
        if cache.watch(self):
            return set()
        self._timer = asyncio.get_running_loop().call_later(timeout_ms / 1000, self.expire)
        try:
            return await self.result
        finally:
            self._finish()  # also when the request's connection went away
            cache.unwatch(self)


def delayed_create_partitions(wanted: dict[str, set[int]]) -> DelayedTopicOperation:
    """Through once every partition of ``wanted[topic]`` has a leader in the cache."""
    return DelayedTopicOperation(
        wanted, lambda cache, topic: cache.missing_leaders(topic, wanted[topic]) == 0
    )


def delayed_delete_topics(topics: Iterable[str]) -> DelayedTopicOperation:
    """Through once the cache no longer names the topic."""
    return DelayedTopicOperation(topics, lambda cache, topic: not cache.has_topic(topic))
