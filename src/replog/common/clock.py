"""The one clock reading of the broker's IO layer.

Sans-IO cores never read a clock: they take ``now_ms`` as an argument. The IO
layer that drives them reads it here, so there is one definition of "now".

Concurrency: pure reads of the system clock; safe anywhere.
"""

from __future__ import annotations

import time

__all__ = ["monotonic_ms", "now_ms"]


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch (Kafka ``Time.milliseconds()``): for
    timestamps that are stored or compared with other brokers' and clients' times."""
    return int(time.time() * 1000)


def monotonic_ms() -> int:
    """Milliseconds of a clock that never steps back: for intervals measured on this
    broker only (a fetch session's idle time)."""
    return int(time.monotonic() * 1000)
