"""Synthetic page views and the paced, idempotent producer of the demo.

:class:`EventGenerator` is pure apart from its own seeded ``random.Random``: the time is
passed in. :class:`PacedProducer` is the IO shell: one thread that sends ``rate`` records
per second with confluent-kafka (``acks=all``, ``enable.idempotence=true``) and writes down,
per record, when it was sent and when (and where) it was acknowledged.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

#: Pages and how often each is viewed (a long tail, like real traffic).
PAGES: tuple[str, ...] = (
    "/",
    "/search",
    "/products",
    "/products/42",
    "/products/7",
    "/cart",
    "/checkout",
    "/account",
    "/help",
    "/blog/replication",
    "/blog/isr",
    "/about",
)
PAGE_WEIGHTS: tuple[float, ...] = tuple(1.0 / (rank + 1) for rank in range(len(PAGES)))
_CUMULATIVE = tuple(itertools.accumulate(PAGE_WEIGHTS))


@dataclass(frozen=True)
class PageView:
    page: str
    user: str
    ts: int  # event time, ms since the epoch

    def to_json(self) -> bytes:
        return json.dumps({"page": self.page, "user": self.user, "ts": self.ts}).encode()


class EventGenerator:
    """Page views from a seeded generator; the caller supplies the event time.

    Concurrency: one thread (its ``random.Random`` is not shared).
    """

    def __init__(self, seed: int, users: int = 5_000) -> None:
        self._rng = random.Random(seed)
        self._users = users

    def next(self, now_ms: int) -> PageView:
        page = self._rng.choices(PAGES, cum_weights=_CUMULATIVE)[0]
        user = f"user-{self._rng.randrange(self._users):05d}"
        return PageView(page, user, now_ms)


@dataclass
class AckLog:
    """One slot per record sent: when sent, when acknowledged, where it landed.

    ``ack_time[i]`` is NaN until record ``i`` is acknowledged; ``partition``/``offset`` are
    -1 until then. Written only by the producer thread (librdkafka delivery callbacks run
    inside that thread's ``poll``/``flush``); other threads read it after that thread ended,
    or read the counters racily for a progress line.
    """

    send_time: list[float] = field(default_factory=list)
    ack_time: list[float] = field(default_factory=list)
    partition: list[int] = field(default_factory=list)
    offset: list[int] = field(default_factory=list)
    page: list[str] = field(default_factory=list)
    ts: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    acked: int = 0

    def sent(self, view: PageView, now: float) -> int:
        self.send_time.append(now)
        self.ack_time.append(math.nan)
        self.partition.append(-1)
        self.offset.append(-1)
        self.page.append(view.page)
        self.ts.append(view.ts)
        return len(self.send_time) - 1

    def delivered(self, index: int, now: float, partition: int, offset: int) -> None:
        self.ack_time[index] = now
        self.partition[index] = partition
        self.offset[index] = offset
        self.acked += 1

    def failed(self, index: int, error: str) -> None:
        self.errors.append(f"record {index}: {error}")

    @property
    def count(self) -> int:
        return len(self.send_time)


class PacedProducer(threading.Thread):
    """Sends ``rate`` page views per second for ``duration_s``, then flushes.

    The schedule is fixed in advance (record ``i`` is due at ``start + i / rate``), so a
    stall is caught up afterwards rather than silently lowering the total. ``error`` holds
    an exception that ended the thread; ``stop()`` ends the sending early.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        rate: float,
        duration_s: float,
        seed: int = 1,
        flush_timeout_s: float = 180.0,
        client_config: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(name="demo-producer", daemon=True)
        self.topic = topic
        self.rate = rate
        self.total = int(rate * duration_s)
        self.flush_timeout_s = flush_timeout_s
        self.config: dict[str, Any] = {
            "bootstrap.servers": bootstrap_servers,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "client.id": "replog-demo-producer",
        }
        self.config.update(client_config or {})
        self.generator = EventGenerator(seed)
        self.log = AckLog()
        self.started_at: float | None = None
        self.sending_done_at: float | None = None
        self.unflushed = 0
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()

    def _on_delivery(self, index: int, err: Any, msg: Any) -> None:
        if err is not None:
            self.log.failed(index, str(err))
        else:
            self.log.delivered(index, time.time(), msg.partition(), msg.offset())

    def run(self) -> None:
        from confluent_kafka import Producer

        try:
            producer = Producer(self.config)
            start = self.started_at = time.time()
            sent = 0
            while sent < self.total and not self._halt.is_set():
                due = min(self.total, int((time.time() - start) * self.rate) + 1)
                while sent < due:
                    now = time.time()
                    view = self.generator.next(int(now * 1000))
                    index = self.log.sent(view, now)
                    while True:
                        try:
                            producer.produce(
                                self.topic,
                                key=view.user.encode(),
                                value=view.to_json(),
                                timestamp=view.ts,
                                on_delivery=partial(self._on_delivery, index),
                            )
                            break
                        except BufferError:
                            producer.poll(0.05)
                    sent += 1
                producer.poll(max(0.0, start + sent / self.rate - time.time()))
            self.sending_done_at = time.time()
            self.unflushed = producer.flush(self.flush_timeout_s)
        except BaseException as exc:  # handed to the main thread
            self.error = exc
