"""A segment's transaction index (``.txnindex``): the aborted transactions whose ABORT
marker is in the segment (Kafka ``TransactionIndex``).

Each entry is Kafka's ``AbortedTxn``, 34 bytes::

    version int16 (0) | producerId int64 | firstOffset int64 | lastOffset int64 |
    lastStableOffset int64

``lastOffset`` is the marker's offset; ``lastStableOffset`` the partition's LSO once the
transaction was aborted, so a search can stop at the first entry whose LSO is past the
range it covers: no later aborted transaction began in it (``collect``).

Entries live in memory and reach the file on ``flush`` / ``close``, as the offset and
time indexes do: a segment past the recovery point gets its missing entries back on an
unclean start, when the producer state is replayed over it (``log_loader``). A file
whose length is not a whole number of entries loses its torn tail on load.

Concurrency: owned by the segment's ``Log``; not thread-safe.
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
_VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    """The aborted transactions of one segment, in marker order."""

    def __init__(self, path: Path, *, load: bool) -> None:
        self.path = Path(path)
        self.entries: list[AbortedTxn] = []
        self._written = 0  # entries in the file
        if load:
            self._load()
        else:
            self.path.unlink(missing_ok=True)

    def _load(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        whole = len(data) - len(data) % _ENTRY.size
        for version, *fields in _ENTRY.iter_unpack(data[:whole]):
            if version != _VERSION:
                log.warning("%s: unknown entry version %d; ignoring the rest", self.path, version)
                break
            self.entries.append(AbortedTxn(*fields))
        self._written = len(self.entries)
        if len(self.entries) * _ENTRY.size != len(data):
            self._rewrite()

    @property
    def last_offset(self) -> int:
        """The last marker offset indexed, or -1."""
        return self.entries[-1].last_offset if self.entries else -1

    def append(self, txn: AbortedTxn) -> None:
        """Add ``txn``; markers come in offset order (an older one is a bug)."""
        if txn.last_offset <= self.last_offset:
            raise ValueError(
                f"{self.path}: aborted transaction at {txn.last_offset} is not after "
                f"{self.last_offset}"
            )
        self.entries.append(txn)

    def truncate_to(self, offset: int) -> None:
        """Drop the transactions whose marker is at or after ``offset``."""
        keep = len(self.entries)
        while keep and self.entries[keep - 1].last_offset >= offset:
            keep -= 1
        if keep == len(self.entries):
            return
        del self.entries[keep:]
        if self._written > keep:
            self._rewrite()

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """The aborted transactions overlapping ``[fetch_offset, upper_bound_offset)``, and
        whether the search is complete (Kafka ``collectAbortedTxns``): later segments
        hold none of them once an entry's LSO reaches the upper bound."""
        found = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def _rewrite(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_bytes(b"".join(_encode(t) for t in self.entries))
        os.replace(tmp, self.path)
        self._written = len(self.entries)

    def flush(self) -> None:
        """Write the new entries and fsync (nothing to do for an index never written)."""
        if self._written == len(self.entries):
            return
        with open(self.path, "ab") as f:
            f.write(b"".join(_encode(t) for t in self.entries[self._written :]))
            f.flush()
            os.fsync(f.fileno())
        self._written = len(self.entries)

    def rename(self, path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, path)
        self.path = Path(path)

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        self.entries.clear()
        self._written = 0


def _encode(txn: AbortedTxn) -> bytes:
    return _ENTRY.pack(
        _VERSION, txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset
    )


def collect_aborted_transactions(
    indexes: list[TransactionIndex], fetch_offset: int, upper_bound_offset: int
) -> list[AbortedTxn]:
    """The aborted transactions overlapping ``[fetch_offset, upper_bound_offset)`` from
    the indexes of the segments from the one holding ``fetch_offset`` on, in order
    (Kafka ``UnifiedLog.collectAbortedTransactions``)."""
    found: list[AbortedTxn] = []
    for index in indexes:
        txns, complete = index.collect(fetch_offset, upper_bound_offset)
        found.extend(txns)
        if complete:
            break
    return found
