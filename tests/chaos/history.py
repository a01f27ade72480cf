"""The campaign's history: every operation as one JSON object per line.

Event shapes (``t`` is seconds since the campaign's start, monotonic clock; ``wall`` is
the Unix time, for matching broker logs):

    {"type": "invoke", "value": "17", "partition": 2}
    {"type": "ok", "value": "17", "partition": 2, "offset": 5}
    {"type": "fail", "value": "17", "partition": 2, "error": "..."}   indeterminate
    {"type": "read", "reader": "final", "partition": 2, "offset": 5, "value": "17"}
    {"type": "end", "reader": "final", "partition": 2, "offset": 9}   high watermark reached
    {"type": "nemesis", "phase": "start"|"stop", "fault": 3, "name": "...", "detail": "...",
     "began": 12.3}   a start is recorded once the fault is in place; ``began`` is when
                      putting it in place began (a fault may cut links, then wait)
    {"type": "info", "what": "...", ...}

Concurrency: ``append`` may be called from any thread (producer callbacks, the live
consumer, the nemesis); one lock orders the list and the file together.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any


def fault_began(event: dict[str, Any]) -> float:
    """When a nemesis ``start`` event's fault began to act (histories before ``began``
    was recorded: the event's time)."""
    return event.get("began", event["t"])


class History:
    def __init__(self, path: Path | None = None) -> None:
        self.events: list[dict[str, Any]] = []
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._file = open(path, "w") if path is not None else None  # noqa: SIM115
        self.path = path

    def now(self) -> float:
        return time.monotonic() - self.started

    def append(self, type_: str, **fields: Any) -> dict[str, Any]:
        event = {"t": round(self.now(), 4), "wall": round(time.time(), 3), "type": type_}
        event.update(fields)
        with self._lock:
            self.events.append(event)
            if self._file is not None:
                self._file.write(json.dumps(event) + "\n")
        return event

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)


def load(path: Path) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
