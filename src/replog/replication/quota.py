"""Replication throttling (Kafka ``ReplicationQuotaManager``, KIP-73): the pure rules.

A broker has two quotas, each a byte rate: ``leader.replication.throttled.rate`` for what
it sends to followers, ``follower.replication.throttled.rate`` for what it fetches as a
follower (dynamic broker configs; Kafka's default ``Long.MAX_VALUE`` is unthrottled).
They apply only to the replicas a topic lists in ``leader.replication.throttled.replicas``
/ ``follower.replication.throttled.replicas`` (``partition:broker,...`` or ``*``) for this
broker, and only to replicas out of the ISR: an in-sync replica is never slowed.

The rate is Kafka's ``Rate`` over a ``SampledStat``: ``replication.quota.window.num``
samples (11) of ``replication.quota.window.size.seconds`` (1 s); the measured rate is the
bytes of the live samples over the elapsed time since the oldest, at least
``num - 1`` windows. Over the quota means ``rate > quota``.

* Follower (``ReplicaFetcherThread.shouldFollowerThrottle``): while over its quota, a
  follower leaves a throttled partition that is not caught up out of its Fetch request,
  and records the bytes it appended for throttled partitions.
* Leader (``ReplicaManager.shouldLeaderThrottle``): while over its quota, a leader
  answers a follower's fetch of a throttled partition, for a follower out of the ISR,
  with no records, and records the bytes it sent for throttled partitions.

No IO and no clock reads: the time is passed in (seconds, any monotonic origin).

Concurrency: a ``ReplicationQuota`` is owned by the event loop; every method is
synchronous, so no await separates a check from the record that follows it.
"""

from __future__ import annotations

import functools
from collections import deque
from dataclasses import dataclass

LONG_MAX = 2**63 - 1
UNTHROTTLED = LONG_MAX
ALL_REPLICAS = "*"
DEFAULT_WINDOW_NUM = 11  # Kafka replication.quota.window.num
DEFAULT_WINDOW_SIZE_S = 1.0  # Kafka replication.quota.window.size.seconds


@dataclass
class _Sample:
    start: float
    bytes: int


class ReplicationQuota:
    """One byte-rate quota (the leader's or the follower's) of one broker."""

    def __init__(
        self,
        rate_bytes_per_s: int = UNTHROTTLED,
        *,
        window_num: int = DEFAULT_WINDOW_NUM,
        window_size_s: float = DEFAULT_WINDOW_SIZE_S,
    ) -> None:
        assert window_num >= 2 and window_size_s > 0
        self.quota = rate_bytes_per_s
        self.window_num = window_num
        self.window_size_s = window_size_s
        self._samples: deque[_Sample] = deque()

    @property
    def unthrottled(self) -> bool:
        return self.quota >= UNTHROTTLED

    def update_quota(self, rate_bytes_per_s: int) -> None:
        """A new rate; the recorded bytes stay (Kafka keeps the sensor's samples)."""
        assert rate_bytes_per_s >= 0
        self.quota = rate_bytes_per_s

    def _purge(self, now: float) -> None:
        expire = self.window_num * self.window_size_s
        while self._samples and now - self._samples[0].start >= expire:
            self._samples.popleft()

    def record(self, nbytes: int, now: float) -> None:
        self._purge(now)
        if not self._samples or now - self._samples[-1].start >= self.window_size_s:
            self._samples.append(_Sample(now, 0))
        self._samples[-1].bytes += nbytes

    def rate(self, now: float) -> float:
        """Bytes per second over the live samples (Kafka ``Rate.measure``)."""
        self._purge(now)
        if not self._samples:
            return 0.0
        elapsed = now - self._samples[0].start
        full = int(elapsed // self.window_size_s)
        if full < self.window_num - 1:
            elapsed += (self.window_num - 1 - full) * self.window_size_s
        return sum(s.bytes for s in self._samples) / elapsed

    def is_quota_exceeded(self, now: float) -> bool:
        if self.unthrottled:
            return False
        return self.rate(now) > self.quota


@functools.lru_cache(maxsize=1024)
def throttled_partitions(raw: str, broker_id: int) -> frozenset[int] | None:
    """The partitions a throttled-replicas value lists for ``broker_id``; None for ``*``.

    Kafka ``QuotaConfigHandler.parseThrottledPartitions``: ``*`` throttles every
    partition of the topic, otherwise the ``partition:broker`` entries for this broker.
    Values are validated when written (``storage.log_config``); a malformed entry here
    is skipped.
    """
    text = raw.strip()
    if text == ALL_REPLICAS:
        return None
    out = set()
    for entry in text.split(","):
        partition, sep, broker = entry.strip().partition(":")
        if sep and partition.strip().isdigit() and broker.strip().isdigit():
            if int(broker) == broker_id:
                out.add(int(partition))
    return frozenset(out)


def is_throttled(raw: str, partition: int, broker_id: int) -> bool:
    """Whether a topic's throttled-replicas value covers ``partition`` on ``broker_id``."""
    if not raw:
        return False
    listed = throttled_partitions(raw, broker_id)
    return listed is None or partition in listed


def follower_should_throttle(
    quota: ReplicationQuota, throttled: bool, caught_up: bool, now: float
) -> bool:
    """Leave the partition out of this Fetch (Kafka ``shouldFollowerThrottle``)."""
    return throttled and not caught_up and quota.is_quota_exceeded(now)


def leader_should_throttle(
    quota: ReplicationQuota, throttled: bool, follower_in_isr: bool, now: float
) -> bool:
    """Answer the follower's fetch with no records (Kafka ``shouldLeaderThrottle``)."""
    return throttled and not follower_in_isr and quota.is_quota_exceeded(now)
