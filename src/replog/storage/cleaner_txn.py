"""What the log cleaner does with transactions (Kafka ``CleanedTransactionMetadata``).

The cleaner walks a range of batches in offset order, knowing the aborted transactions
that overlap it (from the ``.txnindex`` files, ``AbortedTxn``):

- a transactional data batch of an aborted transaction is removed whole (its records
  never count for the offset map either); one of a committed transaction is cleaned as
  any batch;
- an ABORT marker is kept while the cleaning removed data of its transaction (its
  aborted range then goes to the cleaned segment's ``.txnindex``); a COMMIT marker
  while the cleaning saw data of its transaction. Otherwise the marker can go: the
  cleaner stamps its delete horizon (``delete.retention.ms``) the first time, as for
  tombstones, and removes it in a cleaning past the horizon, so a consumer that read
  the transaction's data in time still sees its marker. An empty control batch (already
  emptied) can always go.

Pure: headers and markers in, decisions out; one instance per group of segments.
Concurrency: used by one cleaner thread.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from replog.protocol.records import BatchHeader, EndTxnMarker
from replog.storage.txn_index import AbortedTxn


class CleanedTransactions:
    def __init__(self, aborted: Iterable[AbortedTxn] = ()) -> None:
        self._aborted: list[tuple[int, int, AbortedTxn]] = []  # (first offset, seq, txn)
        self._seq = 0
        self._ongoing_committed: set[int] = set()
        # producer id -> (its aborted transaction, whether a batch of it was seen)
        self._ongoing_aborted: dict[int, tuple[AbortedTxn, bool]] = {}
        self.add_aborted(aborted)
        self.cleaned_index: list[AbortedTxn] = []
        """The aborted transactions whose ABORT marker stays: the cleaned segment's
        ``.txnindex`` entries."""

    def add_aborted(self, aborted: Iterable[AbortedTxn]) -> None:
        for txn in aborted:
            heapq.heappush(self._aborted, (txn.first_offset, self._seq, txn))
            self._seq += 1

    def _consume_aborted_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0][0] <= offset:
            _, _, txn = heapq.heappop(self._aborted)
            self._ongoing_aborted.setdefault(txn.producer_id, (txn, False))

    def on_batch_read(self, header: BatchHeader) -> bool:
        """A data batch: True if it belongs to an aborted transaction (remove it)."""
        self._consume_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        found = self._ongoing_aborted.get(header.producer_id)
        if found is not None:
            self._ongoing_aborted[header.producer_id] = (found[0], True)
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def on_control_batch_read(self, header: BatchHeader, marker: EndTxnMarker | None) -> bool:
        """A control batch (``marker`` None: not a COMMIT/ABORT, or emptied): True if the
        marker may be removed (once past its delete horizon)."""
        self._consume_aborted_up_to(header.last_offset)
        if header.record_count == 0:
            return True  # emptied by an earlier cleaning
        if marker is None:
            return False
        pid = header.producer_id
        if not marker.commit:
            found = self._ongoing_aborted.pop(pid, None)
            if found is not None and found[1]:
                self.cleaned_index.append(found[0])
                return False
            return True
        if pid in self._ongoing_committed:
            self._ongoing_committed.discard(pid)
            return False
        return True
