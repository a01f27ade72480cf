"""Virtual clock, event queue and a fake network for the replication simulation.

Peer traffic (``send``: fetches, OffsetsForLeaderEpoch, produce) is delayed by a
random time, so messages overtake each other (reordering); when configured it
is also dropped, duplicated, or held up by a latency spike, and it is lost on a
link that is cut. Links are one-way: ``cut_link(a, b)`` stops a -> b only
(an asymmetric partition); cut both directions for a full one.

Controller and ZooKeeper traffic (LeaderAndIsr, answers to ZooKeeper writes)
goes over ``send_reliable``: in order per connection and never lost while the
destination lives, like Kafka's ControllerChannelManager retrying on its own
connection. A cut link holds it until the link heals.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
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
    """``/brokers/topics/t/partitions/0/state`` plus its znode version and the assignment.

    What one partition of a LeaderAndIsr request carries; ``controller_epoch`` is
    the epoch of the controller that wrote the state.
    """

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    assigned: tuple[int, ...]
    controller_epoch: int = 0


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
    # KIP-227, as the follower's FetchSessionHandler built it: the session and its epoch,
    # and whether the partition is named (an incremental fetch names it only when its
    # fetch offset or epoch changed)
    session_id: int = 0
    session_epoch: int = -1
    names_partition: bool = True


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
    # KIP-227: the session the leader answers in, its top-level error, and whether the
    # partition is in the answer (an incremental answer leaves out one with no news)
    session_id: int = 0
    session_error: ErrorCode = ErrorCode.none
    names_partition: bool = True


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
    controller_epoch: int = 0  # the sender's epoch (a broker refuses an older one)
    sender: int = 0  # the broker whose controller sent it (its answer goes back there)
    sender_generation: int = 0  # that controller's session, as in ControllerWork


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
    sender_incarnation: int | None = None  # which process of the sender sent it


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


@dataclass(frozen=True, slots=True)
class ControllerWork:
    """One event for the controller of ``broker`` (Kafka's ``ControllerEvent``s): a
    ZooKeeper watch fired (``reelect``, ``broker_change``, ``isr_change``) or the
    session ended (``expire``). ``generation`` is the broker's ZooKeeper session as
    the controller knows it: an event queued before the broker learned that its
    session expired is dropped (Kafka's ``Expire`` clears the queue)."""

    broker: int
    generation: int
    kind: str


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

    def peek_time(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def advance_timers(self, broker: int, now_ms: int, jump_ms: int) -> int:
        """``broker``'s clock jumped ``jump_ms`` forward: its timers fire that much sooner
        (never before ``now_ms``). Returns how many timers moved."""
        moved = 0
        heap = []
        for at, seq, event in self._heap:
            if isinstance(event, Timer) and event.broker == broker and at > now_ms:
                at = max(now_ms, at - jump_ms)
                moved += 1
            heap.append((at, seq, event))
        heapq.heapify(heap)
        self._heap = heap
        return moved

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
    links_down: dict[tuple[int, int], int] = field(default_factory=dict)  # (src, dst) -> heals at
    channel_extra_delay_ms: dict[tuple[str, int], int] = field(default_factory=dict)
    _reliable_tail: dict[tuple[str, int], int] = field(default_factory=dict)
    # The world's ZooKeeper connection per broker: returns True when it took the
    # message (an answer to a write that cannot reach ZooKeeper yet).
    zookeeper_gate: Callable[[int, Any], bool] | None = None
    incarnation_of: Callable[[int], int | None] = lambda _broker: None
    sent: int = 0
    dropped: int = 0
    duplicated: int = 0

    def _delay(self) -> int:
        c = self.config
        if c.spike_probability and self.rng.random() < c.spike_probability:
            return self.rng.randint(c.max_delay_ms, c.spike_max_ms)
        return self.rng.randint(c.min_delay_ms, c.max_delay_ms)

    def cut_link(self, src: int, dst: int, until_ms: int) -> None:
        """Messages from ``src`` to ``dst`` are lost (reliable ones held) until ``until_ms``."""
        key = (src, dst)
        self.links_down[key] = max(until_ms, self.links_down.get(key, 0))

    def link_heals_at(self, src: int, dst: int, now_ms: int) -> int | None:
        heal = self.links_down.get((src, dst))
        return heal if heal is not None and now_ms < heal else None

    def link_is_down(self, src: int, dst: int, now_ms: int) -> bool:
        return self.link_heals_at(src, dst, now_ms) is not None

    def send(self, now_ms: int, src: int, dst: int, message: Any) -> None:
        """Peer traffic: may be delayed, dropped, duplicated, reordered."""
        self.sent += 1
        if self.link_is_down(src, dst, now_ms):
            self.dropped += 1
            return
        if self.config.drop_probability and self.rng.random() < self.config.drop_probability:
            self.dropped += 1
            return
        deliver = Deliver(message, self.incarnation_of(src))
        self.queue.push(now_ms + self._delay(), deliver)
        if (
            self.config.duplicate_probability
            and self.rng.random() < self.config.duplicate_probability
        ):
            self.duplicated += 1
            self.queue.push(now_ms + self._delay(), deliver)

    def send_reliable(
        self, now_ms: int, dst: int, message: Any, *, channel: str, src: int | None = None
    ) -> None:
        """Controller or ZooKeeper traffic: delayed, but in order per channel and never lost.

        ``channel`` names the connection: each controller's connection to a broker
        (``controller:<broker>:<epoch>``), the broker's own ZooKeeper session
        (``zookeeper``). An answer to a ZooKeeper write can overtake a LeaderAndIsr
        the controller sent earlier, and a new controller's request can overtake an
        old one's. Extra delays in ``channel_extra_delay_ms`` are keyed by the
        channel's kind (the part before the first ``:``). With ``src`` given, a cut
        ``src -> dst`` link holds the message until it heals (the sender retries).
        """
        if channel == "zookeeper" and self.zookeeper_gate and self.zookeeper_gate(dst, message):
            return
        key = (channel, dst)
        kind = channel.split(":", 1)[0]
        start = now_ms
        if src is not None:
            heal = self.link_heals_at(src, dst, now_ms)
            if heal is not None:
                start = heal
        delay = self._delay() + self.channel_extra_delay_ms.get((kind, dst), 0)
        at = max(start + delay, self._reliable_tail.get(key, 0))
        self._reliable_tail[key] = at
        self.queue.push(at, Deliver(message))
