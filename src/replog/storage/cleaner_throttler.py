"""The log cleaner's I/O throttle (Kafka ``Throttler``): ``log.cleaner.io.max.bytes.per.second``.

Every ``check_interval_ms`` the bytes observed since the last check give a rate; above
the desired rate, the caller sleeps as long as it takes to bring the rate down to it.
The clock and the sleep are passed in, so tests run it on a virtual clock.

Concurrency: one throttler per cleaner (each cleaner process gets its share of the
broker's rate); not thread-safe.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable

CHECK_INTERVAL_MS = 300  # Kafka LogCleaner's throttler check interval


class Throttler:
    def __init__(
        self,
        desired_rate_per_sec: float,
        *,
        check_interval_ms: int = CHECK_INTERVAL_MS,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.desired_rate_per_sec = desired_rate_per_sec
        self.check_interval_s = check_interval_ms / 1000
        self._clock = clock
        self._sleep = sleep
        self._period_start = clock()
        self._observed = 0.0
        self.slept_s = 0.0  # total, for the cleaner's statistics

    def maybe_throttle(self, observed: float) -> None:
        """Count ``observed`` bytes; sleep if the rate of the last interval is too high."""
        self._observed += observed
        now = self._clock()
        elapsed = now - self._period_start
        if elapsed <= self.check_interval_s or self._observed <= 0:
            return
        rate = self._observed / elapsed
        if rate > self.desired_rate_per_sec:
            pause = self._observed / self.desired_rate_per_sec - elapsed
            if pause > 0:
                self._sleep(pause)
                self.slept_s += pause
        self._period_start = self._clock()
        self._observed = 0.0


def throttler_for(rate_per_sec: float) -> Throttler | None:
    """A throttler for ``rate_per_sec``, or None when unlimited (Kafka's default,
    Double.MAX_VALUE)."""
    if math.isinf(rate_per_sec) or rate_per_sec >= sys.float_info.max:
        return None
    return Throttler(rate_per_sec)
