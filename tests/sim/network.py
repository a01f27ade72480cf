"""Virtual clock, event queue and a fake network for the replication simulation.

The network delays every message, and (when configured) drops, duplicates and
reorders them and takes links down. Controller traffic (LeaderAndIsr, answers
to ZooKeeper writes) goes over ``send_reliable``: in order per destination and
never lost while the destination lives, like Kafka's ControllerChannelManager
retrying on its own connection.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from replog.replication.isr import IsrChangeProposal
from replog.replication.truncation import EpochEndOffset


@dataclass(frozen=True, slots=True)
class Record:
    epoch: int
    payload: str


@dataclass(frozen=True, slots=True)
class ZkPartitionState:
    """``/brokers/topics/t/partitions/0/state`` plus its znode version."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    assigned: tuple[int, ...]


# -- messages ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FetchRequest:
    src: int
    src_incarnation: int
    dst: int
    corr: int
    current_leader_epoch: int
    fetch_offset: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class FetchResponse:
    src: int
    dst: int
    dst_incarnation: int
    corr: int
    error: ErrorCode
    base_offset: int
    records: tuple[Record, ...]
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


@dataclass(frozen=True, slots=True)
class EpochRequest:
    src: int
    src_incarnation: int
    dst: int
    corr: int
    current_leader_epoch: int
    requested_epoch: int


@dataclass(frozen=True, slots=True)
class EpochResponse:
    src: int
    dst: int
    dst_incarnation: int
    corr: int
    error: ErrorCode
    answer: EpochEndOffset


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    dst: int
    payload: str


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    dst: int
    state: ZkPartitionState
    broker_epoch: int  # the registration the controller is talking to


@dataclass(frozen=True, slots=True)
class IsrUpdateResult:
    dst: int
    dst_incarnation: int
    owner: Any  # the LeaderState that proposed the change
    proposal: IsrChangeProposal
    new_zk_version: int | None
    ineligible: bool = False


# -- events ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Deliver:
    message: Any


@dataclass(frozen=True, slots=True)
class Timer:
    broker: int
    incarnation: int
    kind: str
    token: Any = None


@dataclass(frozen=True, slots=True)
class WorldEvent:
    """Resume a paused broker, expire its ZooKeeper session, restart it, heal a link."""

    kind: str
    broker: int
    token: Any = None


class EventQueue:
    """Events ordered by (time, insertion order): deterministic for a given seed."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Any]] = []
        self._seq = 0

    def push(self, at_ms: int, event: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at_ms, self._seq, event))

    def pop(self) -> tuple[int, Any]:
        at, _, event = heapq.heappop(self._heap)
        return at, event

    def __len__(self) -> int:
        return len(self._heap)


@dataclass
class NetworkConfig:
    min_delay_ms: int = 1
    max_delay_ms: int = 20
    spike_probability: float = 0.0
    spike_max_ms: int = 3000
    drop_probability: float = 0.0
    duplicate_probability: float = 0.0

    @classmethod
    def chaotic(cls) -> NetworkConfig:
        return cls(
            min_delay_ms=1,
            max_delay_ms=40,
            spike_probability=0.03,
            spike_max_ms=2500,
            drop_probability=0.03,
            duplicate_probability=0.03,
        )

    @classmethod
    def fixed(cls, delay_ms: int = 1) -> NetworkConfig:
        return cls(min_delay_ms=delay_ms, max_delay_ms=delay_ms)


@dataclass
class Network:
    config: NetworkConfig
    rng: random.Random
    queue: EventQueue
    links_down: dict[frozenset[int], int] = field(default_factory=dict)  # link -> heals at
    channel_extra_delay_ms: dict[tuple[str, int], int] = field(default_factory=dict)
    _reliable_tail: dict[tuple[str, int], int] = field(default_factory=dict)
    sent: int = 0
    dropped: int = 0
    duplicated: int = 0

    def _delay(self) -> int:
        c = self.config
        if c.spike_probability and self.rng.random() < c.spike_probability:
            return self.rng.randint(c.max_delay_ms, c.spike_max_ms)
        return self.rng.randint(c.min_delay_ms, c.max_delay_ms)

    def link_is_down(self, a: int, b: int, now_ms: int) -> bool:
        heal = self.links_down.get(frozenset((a, b)))
        return heal is not None and now_ms < heal

    def send(self, now_ms: int, src: int, dst: int, message: Any) -> None:
        """Peer traffic: may be delayed, dropped, duplicated, reordered."""
        self.sent += 1
        if self.link_is_down(src, dst, now_ms):
            self.dropped += 1
            return
        if self.config.drop_probability and self.rng.random() < self.config.drop_probability:
            self.dropped += 1
            return
        self.queue.push(now_ms + self._delay(), Deliver(message))
        if (
            self.config.duplicate_probability
            and self.rng.random() < self.config.duplicate_probability
        ):
            self.duplicated += 1
            self.queue.push(now_ms + self._delay(), Deliver(message))

    def send_reliable(self, now_ms: int, dst: int, message: Any, *, channel: str) -> None:
        """Controller or ZooKeeper traffic: delayed, but in order per channel and never lost.

        ``channel`` separates the controller's connection to a broker from the
        broker's own ZooKeeper session: an answer to a ZooKeeper write can
        overtake a LeaderAndIsr the controller sent earlier.
        """
        key = (channel, dst)
        delay = self._delay() + self.channel_extra_delay_ms.get(key, 0)
        at = max(now_ms + delay, self._reliable_tail.get(key, 0))
        self._reliable_tail[key] = at
        self.queue.push(at, Deliver(message))
