"""The event loop's lag: how late a periodic timer fires, as a histogram for ``/metrics``.

Every request, replica fetch, ZooKeeper callback and timer of a broker runs on its one
asyncio loop, so a callback that runs for 30 ms delays everything else by up to 30 ms:
the latency tails a client sees. ``LoopLagMonitor`` arms a timer every ``interval_s``
(20 ms) and records, each time it fires, how much later than its due time it ran
(``loop.time()`` is the loop's own monotonic clock). A stall of ``S`` ms shows as a lag
of at least ``S - interval`` ms, and of ``S`` when the timer fell due as it began: the
histogram's tail and ``max`` show the longest stalls, as Node's
``monitorEventLoopDelay`` does. The next timer is armed from when this one ran, so a
stall gives one late sample, not a burst of catch-up ones.

On a machine shared with other work, a timer is also late because the broker's thread was
runnable but not running (other processes had the CPUs): lag that is not the loop's doing.
So each tick also reads the loop thread's run-queue wait from Linux's
``/proc/thread-self/schedstat`` (its second field, nanoseconds waited for a CPU) and
records a second histogram, the loop's own lag: the lag minus the wait since the previous
tick (not below 0). A callback that computes for 30 ms, or blocks in a system call (an
``fsync``) for 30 ms, shows in both; 30 ms of preemption only in the first. Without
schedstat (not Linux) the two are equal.

Exported as ``kafka_server_eventloop_lagms`` (a histogram in milliseconds: the name the
JMX exporter would give ``kafka.server<type=EventLoop, name=LagMs>``, after
``RequestMetrics``' ``TotalTimeMs``), ``kafka_server_eventloop_ownlagms`` (the lag
without the run-queue wait), and ``kafka_server_eventloop_maxlagms`` and
``kafka_server_eventloop_maxownlagms`` (the largest of each since the broker started). ``LagHistogram`` holds the counts and renders them
(no IO, no clock); the monitor is the timer.

Cost: one timer callback per ``interval_s``, one ``pread`` of schedstat (4 µs), two
``bisect`` and a few additions; with the loop's wake-up about 35 µs on this machine, so
about 0.002 cores at 20 ms (0.004 at 10 ms: the interval trades an idle broker's CPU for
the resolution of short stalls).

Concurrency: event loop only.
"""

from __future__ import annotations

import asyncio
import os
from bisect import bisect_left

from prometheus_client.utils import floatToGoString

LAG_MS_BUCKETS = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)
LAG = "kafka_server_eventloop_lagms"
MAX_LAG = "kafka_server_eventloop_maxlagms"
OWN_LAG = "kafka_server_eventloop_ownlagms"
MAX_OWN_LAG = "kafka_server_eventloop_maxownlagms"
SCHEDSTAT = "/proc/thread-self/schedstat"
_HELP = {
    LAG: "How late the event loop ran a periodic timer (ms)",
    OWN_LAG: "The event loop's lag less the time its thread waited for a CPU (ms)",
}
INTERVAL_S = 0.02
_BOUNDS = [float(b) for b in LAG_MS_BUCKETS]
_LE = [floatToGoString(b) for b in LAG_MS_BUCKETS] + ["+Inf"]


class LagHistogram:
    """Lags in milliseconds: counts per bucket (not cumulative; the last is +Inf), their
    sum, and the largest."""

    __slots__ = ("name", "max_name", "buckets", "sum_ms", "max_ms")

    def __init__(self, name: str = LAG, max_name: str = MAX_LAG) -> None:
        self.name = name
        self.max_name = max_name
        self.buckets = [0] * (len(_BOUNDS) + 1)
        self.sum_ms = 0.0
        self.max_ms = 0.0

    def observe(self, ms: float) -> None:
        if ms < 0:  # asyncio runs a timer up to its clock's resolution early
            ms = 0.0
        self.buckets[bisect_left(_BOUNDS, ms)] += 1
        self.sum_ms += ms
        if ms > self.max_ms:
            self.max_ms = ms

    @property
    def count(self) -> int:
        return sum(self.buckets)

    def exposition(self) -> str:
        """The histogram and the max gauge in Prometheus' text format (0.0.4)."""
        name, help_text = self.name, _HELP.get(self.name, "Event loop lag (ms)")
        lines = [f"# HELP {name} {help_text}\n", f"# TYPE {name} histogram\n"]
        total = 0
        for le, n in zip(_LE, self.buckets, strict=True):
            total += n
            lines.append(f'{name}_bucket{{le="{le}"}} {floatToGoString(total)}\n')
        lines.append(f"{name}_count {floatToGoString(total)}\n")
        lines.append(f"{name}_sum {floatToGoString(self.sum_ms)}\n")
        lines.append(f"# HELP {self.max_name} The largest of {name} since the start\n")
        lines.append(f"# TYPE {self.max_name} gauge\n")
        lines.append(f"{self.max_name} {floatToGoString(self.max_ms)}\n")
        return "".join(lines)


class LoopLagMonitor:
    """A timer re-armed every ``interval_s`` on the running loop; its lateness goes into
    ``histogram``, the lag less the thread's run-queue wait into ``own_histogram``."""

    def __init__(self, interval_s: float = INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.histogram = LagHistogram()
        self.own_histogram = LagHistogram(OWN_LAG, MAX_OWN_LAG)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._schedstat: int | None = None  # the loop thread's, opened on it
        self._waited_ns = 0

    def exposition(self) -> str:
        return self.histogram.exposition() + self.own_histogram.exposition()

    def _run_queue_wait_ns(self) -> int:
        """The loop thread's time waiting for a CPU so far (0 without schedstat)."""
        if self._schedstat is None:
            return 0
        try:
            return int(os.pread(self._schedstat, 128, 0).split()[1])
        except (OSError, ValueError, IndexError):
            return 0

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        try:
            self._schedstat = os.open(SCHEDSTAT, os.O_RDONLY)
        except OSError:
            self._schedstat = None
        self._waited_ns = self._run_queue_wait_ns()
        self._due = self._loop.time() + self.interval_s
        self._handle = self._loop.call_at(self._due, self._tick)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._schedstat is not None:
            os.close(self._schedstat)
            self._schedstat = None

    def _tick(self) -> None:
        loop = self._loop
        assert loop is not None
        now = loop.time()
        waited_ns = self._run_queue_wait_ns()
        lag_ms = (now - self._due) * 1000.0
        self.histogram.observe(lag_ms)
        self.own_histogram.observe(lag_ms - (waited_ns - self._waited_ns) / 1e6)
        self._waited_ns = waited_ns
        self._due = now + self.interval_s
        self._handle = loop.call_at(self._due, self._tick)
