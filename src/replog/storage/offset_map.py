"""The log cleaner's offset map: key -> the latest offset seen for it (Kafka ``OffsetMap``).

Kafka's ``SkimpyOffsetMap`` is an open-addressing table in a byte buffer of
``log.cleaner.dedupe.buffer.size`` bytes: 24 bytes a slot (an MD5 of the key and
an offset), filled to ``log.cleaner.io.buffer.load.factor`` (0.9). Here the table
is a dict and a slot costs what CPython spends on one entry (``ENTRY_BYTES``,
measured: the dict slot, the key object and the offset int), so the configured
buffer still bounds the memory the map takes; it holds fewer keys than Kafka's for
the same buffer (about 0.94 million per 128 MiB rather than 5 million).

Keys shorter than 16 bytes are stored as they are; longer keys as their 16-byte MD5,
as in Kafka. A short key can never equal a digest (lengths differ), so only two long
keys can collide, with MD5's odds.

Concurrency: one map per cleaner, used by that cleaner only.
"""

from __future__ import annotations

import hashlib

ENTRY_BYTES = 128  # CPython: dict entry ~40, key bytes object ~50, offset int ~32
LOAD_FACTOR = 0.9  # Kafka log.cleaner.io.buffer.load.factor
_DIGEST_SIZE = 16


def _map_key(key: bytes) -> bytes:
    if len(key) < _DIGEST_SIZE:
        return key
    return hashlib.md5(key, usedforsecurity=False).digest()


class OffsetMap:
    """Key -> latest offset, plus the latest offset the map has covered."""

    def __init__(self, memory_bytes: int, load_factor: float = LOAD_FACTOR) -> None:
        self.slots = max(memory_bytes // ENTRY_BYTES, 1)
        self.max_entries = max(int(self.slots * load_factor), 1)
        self._offsets: dict[bytes, int] = {}
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def full(self) -> bool:
        """No room for another key (the dirty section is mapped only up to here)."""
        return len(self._offsets) >= self.max_entries

    @property
    def utilization(self) -> float:
        return len(self._offsets) / self.slots

    def put(self, key: bytes, offset: int) -> None:
        """Record ``offset`` as the latest for ``key``; offsets come in increasing order."""
        self._offsets[_map_key(key)] = offset
        if offset > self.latest_offset:
            self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The latest offset of ``key``, or -1 if the map does not hold it."""
        return self._offsets.get(_map_key(key), -1)

    def update_latest_offset(self, offset: int) -> None:
        """The map covers offsets up to ``offset`` even where no keyed record was (gaps,
        keyless or control batches)."""
        if offset > self.latest_offset:
            self.latest_offset = offset

    def clear(self) -> None:
        self._offsets.clear()
        self.latest_offset = -1
