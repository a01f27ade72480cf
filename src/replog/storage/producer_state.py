"""Idempotent producer state: per producer id, its epoch and last 5 batches.

Kafka's ``ProducerStateManager`` in small: the leader checks each batch of a
client append (``validate_client_batches``) before anything is written, and
every appended batch, on leader, follower or during recovery, is applied with
``update``, so a follower that becomes leader knows the batches its old leader
appended. A retry of any of a producer's last ``NUM_BATCHES_TO_RETAIN`` batches
is a duplicate (its original offsets are answered); an older one, or a gap, is
OUT_OF_ORDER_SEQUENCE_NUMBER, as in Kafka (``ProducerAppendInfo.checkSequence``
raises only OutOfOrderSequenceException; DUPLICATE_SEQUENCE_NUMBER is not sent).

Snapshots (``<20-digit offset>.snapshot`` in the partition directory, CRC32C
over the body) let a restart or a truncation skip replaying the whole log.
Version 2, written here, keeps every retained batch of each producer, so
duplicates are still recognised after a restart or a truncation that reloads
a snapshot::

    version int16 (2), crc uint32, producer count int32, then per producer
      producer_id int64, producer_epoch int16, coordinator_epoch int32,
      last_timestamp int64, current_txn_first_offset int64 (-1), batch count int16,
      then per batch, oldest first:
        last_sequence int32, last_offset int64, offset_delta int32, timestamp int64

Transactions (Kafka ``ProducerAppendInfo``): a transactional batch from a producer with
no open transaction on the partition opens one at its first offset
(``current_txn_first_offset``); a COMMIT or ABORT marker (a control batch) closes it and
yields a ``CompletedTxn`` (none for an empty transaction). ``first_unstable_offset`` is
the first offset of the oldest open transaction: the last stable offset is never past
it. The leader's checks (``validate_client_batches``, ``validate_marker``) refuse a plain
batch inside an open transaction (INVALID_TXN_STATE), an older producer epoch
(INVALID_PRODUCER_EPOCH) and a marker from an older coordinator epoch
(TRANSACTION_COORDINATOR_FENCED); followers and recovery apply what the leader wrote.

KIP-890 part 1: before a leader appends a transactional batch that would open a
transaction, the broker asks the transaction coordinator whether the partition is in
the producer's ongoing transaction. ``maybe_start_verification`` hands out a
``VerificationGuard`` for the producer (None: its transaction is open here, nothing to
ask); a marker or the transaction's first batch voids it, so an answer that comes back
after the transaction ended cannot open a hanging one (``check_verified``).

Version 1 (Kafka's own format: one fixed-size entry per producer holding its
last batch only) is still read, so snapshots written before version 2 load.

Concurrency: owned by its ``Log``; one task, no awaits inside.
"""

from __future__ import annotations

import logging
import re
import struct
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from crc32c import crc32c

from replog.protocol.errors import (
    InvalidProducerEpoch,
    InvalidTxnState,
    OutOfOrderSequence,
    TransactionCoordinatorFenced,
)
from replog.protocol.records import NO_SEQUENCE, BatchHeader, EndTxnMarker, InvalidRecordBatch
from replog.storage.checkpoints import atomic_write

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
INT32_MAX = 0x7FFFFFFF
SNAPSHOT_SUFFIX = ".snapshot"
_SNAPSHOT_NAME = re.compile(r"^(\d{20})\.snapshot$")
_SNAPSHOT_VERSION = 2
_SNAPSHOT_HEADER = struct.Struct(">hI")  # version, crc (over the body)
_SNAPSHOT_COUNT = struct.Struct(">i")
# v1 (Kafka): pid, epoch, last seq, last offset, offset delta, timestamp, coordinator epoch,
# current txn first offset
_V1_ENTRY = struct.Struct(">qhiqiqiq")
# v2: pid, epoch, coordinator epoch, last timestamp, current txn first offset, batch count
_V2_PRODUCER = struct.Struct(">qhiqqh")
_V2_BATCH = struct.Struct(">iqiq")  # last seq, last offset, offset delta, timestamp


class CorruptSnapshot(ValueError):
    """A producer snapshot that fails its CRC, version or length checks."""


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        if self.last_seq < self.offset_delta:
            return INT32_MAX - (self.offset_delta - self.last_seq) + 1
        return self.last_seq - self.offset_delta

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN)
    )
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int = -1  # first offset of its open transaction here, or -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        """The retained batch ``header`` retries, or None.

        A transactional batch retries only a batch of the producer's transaction open
        on this partition: a batch of a transaction a marker has since ended is no
        answer to it. Kafka answers that match too, and loses the write: librdkafka,
        aborting a transaction, purges the batches it holds for retry and reuses their
        sequence numbers in the next transaction at the same epoch (transaction version
        1), though a purged batch may already be in the log (a leader killed before it
        answered). Answering the aborted batch's offsets would acknowledge records that
        were never written; here the batch fails the sequence check instead
        (OUT_OF_ORDER_SEQUENCE_NUMBER, which aborts the transaction and bumps the epoch).
        """
        if header.producer_epoch != self.producer_epoch:
            return None
        first, last = header.base_sequence, header.last_sequence
        for meta in self.batches:
            if meta.first_seq == first and meta.last_seq == last:
                if header.is_transactional and not (
                    0 <= self.current_txn_first_offset <= meta.first_offset
                ):
                    return None
                return meta
        return None


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker ended (Kafka ``CompletedTxn``): ``[first_offset,
    last_offset]``, the marker at ``last_offset``."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class VerificationGuard:
    """A token for one verification of a producer's transaction on the partition (Kafka
    ``VerificationGuard``): compared by identity."""

    __slots__ = ()


def last_stable_offset(
    high_watermark: int, log_start_offset: int, first_unstable_offset: int | None
) -> int:
    """The LSO (Kafka ``UnifiedLog.lastStableOffset``): the first offset of the oldest
    open transaction, never past the high watermark nor below the log start (an open
    transaction whose start retention or DeleteRecords removed)."""
    if first_unstable_offset is None:
        return high_watermark
    return min(max(first_unstable_offset, log_start_offset), high_watermark)


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def snapshot_path(dir: Path, offset: int) -> Path:
    return dir / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def list_snapshots(dir: Path) -> list[tuple[int, Path]]:
    """``(offset, path)`` of every producer snapshot in ``dir``, sorted by offset."""
    found = []
    for path in dir.iterdir():
        m = _SNAPSHOT_NAME.match(path.name)
        if m:
            found.append((int(m.group(1)), path))
    return sorted(found)


class ProducerStateManager:
    """Producer id -> state, as of ``map_end_offset`` (the offset the state is computed up to)."""

    def __init__(self, topic_partition: str = "") -> None:
        self.name = topic_partition
        self.producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = 0
        self.ongoing_txns: dict[int, int] = {}  # producer id -> first offset of its open txn
        self.verification_guards: dict[int, VerificationGuard] = {}

    def reset(self, offset: int) -> None:
        self.producers.clear()
        self.ongoing_txns.clear()
        self.verification_guards.clear()
        self.map_end_offset = offset

    # -- KIP-890 verification ----------------------------------------------
    def maybe_start_verification(self, producer_id: int) -> VerificationGuard | None:
        """The guard a verification of ``producer_id``'s transaction carries (one shared by
        the verifications in flight), or None when its transaction is open here."""
        if producer_id in self.ongoing_txns:
            return None
        guard = self.verification_guards.get(producer_id)
        if guard is None:
            guard = self.verification_guards[producer_id] = VerificationGuard()
        return guard

    def check_verified(self, headers: list[BatchHeader], guard: VerificationGuard | None) -> None:
        """A client append with verification on: a transactional batch that opens a
        transaction needs the producer's current guard (Kafka
        ``batchMissingRequiredVerification``); INVALID_TXN_STATE otherwise."""
        opened: set[int] = set()
        for h in headers:
            pid = h.producer_id
            if not h.is_transactional or h.is_control or pid in self.ongoing_txns:
                continue
            if pid not in opened and (
                guard is None or self.verification_guards.get(pid) is not guard
            ):
                raise InvalidTxnState(
                    f"{self.name}: record from producer {pid} was not part of an ongoing "
                    "transaction (not verified with its transaction coordinator)"
                )
            opened.add(pid)

    # -- transactions ----------------------------------------------------
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction (Kafka ``firstUnstableOffset``)."""
        return min(self.ongoing_txns.values()) if self.ongoing_txns else None

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO once ``completed`` is done: the first offset of the oldest other open
        transaction, else just past its marker (Kafka ``lastStableOffset(completedTxn)``)."""
        others = [o for pid, o in self.ongoing_txns.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def validate_marker(self, producer_id: int, producer_epoch: int, marker: EndTxnMarker) -> None:
        """A leader's checks of a marker before it is written (Kafka ``appendEndTxnMarker``
        from the coordinator): INVALID_PRODUCER_EPOCH for an older producer epoch,
        TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpoch(
                f"{self.name}: marker for producer {producer_id} at epoch {producer_epoch}, "
                f"older than {entry.producer_epoch}"
            )
        if marker.coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFenced(
                f"{self.name}: marker for producer {producer_id} from coordinator epoch "
                f"{marker.coordinator_epoch}, older than {entry.coordinator_epoch}"
            )

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        """The producer's epoch and last batches (Kafka ``lastEntry``); None if unknown."""
        return self.producers.get(producer_id)

    # -- leader checks ----------------------------------------------------
    def validate_client_batches(
        self, headers: list[BatchHeader], *, from_coordinator: bool = False
    ) -> BatchMetadata | None:
        """Check a client append; return the original metadata if it is a retried duplicate.

        ``from_coordinator`` (Kafka's ``AppendOrigin.COORDINATOR``: the group coordinator
        writing a TxnOffsetCommit's records as the producer's transactional batch): the
        producer epoch is checked, the sequence is not (such batches carry none).

        A duplicate is a batch whose epoch and sequence range match one of the
        producer's retained (last five) batches; an older batch fails the
        sequence check like a gap does (OutOfOrderSequence), as in Kafka.

        Raises InvalidProducerEpoch, OutOfOrderSequence, InvalidTxnState (a plain batch
        while the producer's transaction is open) or InvalidRecordBatch. Changes nothing.
        """
        pending: dict[int, tuple[int, int]] = {}  # pid -> (epoch, last_seq) after earlier batches
        for h in headers:
            pid = h.producer_id
            if pid < 0:
                if h.is_transactional:
                    raise InvalidRecordBatch("transactional batch without a producer id")
                continue
            if h.base_sequence < 0 and not from_coordinator:
                raise InvalidRecordBatch(f"idempotent batch from producer {pid} has no sequence")
            entry = self.producers.get(pid)
            if pid in pending:
                epoch, last_seq = pending[pid]
            elif entry is not None:
                duplicate = None if from_coordinator else entry.find_duplicate(h)
                if duplicate is not None:
                    return duplicate
                epoch, last_seq = entry.producer_epoch, entry.last_seq
            else:
                epoch, last_seq = NO_PRODUCER_EPOCH, NO_SEQUENCE
            if h.producer_epoch < epoch:
                raise InvalidProducerEpoch(
                    f"{self.name}: producer {pid} epoch {h.producer_epoch} is older than {epoch}"
                )
            if from_coordinator:
                pass  # no sequence to check
            elif h.producer_epoch != epoch:
                if h.base_sequence != 0 and epoch != NO_PRODUCER_EPOCH:
                    raise OutOfOrderSequence(
                        f"{self.name}: producer {pid} new epoch {h.producer_epoch} "
                        f"starts at sequence {h.base_sequence}, expected 0"
                    )
            elif (
                epoch != NO_PRODUCER_EPOCH
                and last_seq != NO_SEQUENCE
                and not _in_sequence(last_seq, h.base_sequence)
            ):
                raise OutOfOrderSequence(
                    f"{self.name}: producer {pid} epoch {epoch} sequence {h.base_sequence} "
                    f"does not follow {last_seq}"
                )
            if not h.is_transactional and pid in self.ongoing_txns:
                raise InvalidTxnState(
                    f"{self.name}: expected a transactional write from producer {pid}, "
                    f"whose transaction from offset {self.ongoing_txns[pid]} is open"
                )
            pending[pid] = (h.producer_epoch, h.last_sequence)
        return None

    # -- state changes ---------------------------------------------------
    def update(self, h: BatchHeader, marker: EndTxnMarker | None = None) -> CompletedTxn | None:
        """Apply an appended batch (offsets final); ``marker`` is a control batch's COMMIT or
        ABORT. Batches without a producer id only move the map offset. Returns the
        transaction a marker completed (None for an empty one, as Kafka)."""
        if h.next_offset > self.map_end_offset:
            self.map_end_offset = h.next_offset
        pid = h.producer_id
        if pid < 0:
            return None
        if h.is_control:
            return self._end_txn(h, marker) if marker is not None else None
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerStateEntry(pid, h.producer_epoch)
        elif h.producer_epoch != entry.producer_epoch:
            if h.producer_epoch < entry.producer_epoch and h.base_sequence >= 0:
                log.warning(
                    "%s: producer %d epoch went back to %d", self.name, pid, h.producer_epoch
                )
            entry.producer_epoch = h.producer_epoch
            entry.batches.clear()
        if h.base_sequence >= 0:
            entry.batches.append(
                BatchMetadata(h.last_sequence, h.last_offset, h.last_offset_delta, h.max_timestamp)
            )
        entry.last_timestamp = max(entry.last_timestamp, h.max_timestamp)
        if h.is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = h.base_offset
            self.ongoing_txns[pid] = h.base_offset
            self.verification_guards.pop(pid, None)
        return None

    def _end_txn(self, h: BatchHeader, marker: EndTxnMarker) -> CompletedTxn | None:
        """A COMMIT or ABORT marker at ``h.base_offset`` (Kafka ``appendEndTxnMarker``)."""
        pid = h.producer_id
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerStateEntry(pid, h.producer_epoch)
        completed = None
        if entry.current_txn_first_offset >= 0:
            completed = CompletedTxn(
                pid, entry.current_txn_first_offset, h.base_offset, not marker.commit
            )
        if h.producer_epoch != entry.producer_epoch:
            entry.producer_epoch = h.producer_epoch
            entry.batches.clear()
        entry.current_txn_first_offset = -1
        self.ongoing_txns.pop(pid, None)
        self.verification_guards.pop(pid, None)  # a verification in flight is void
        entry.coordinator_epoch = marker.coordinator_epoch
        entry.last_timestamp = max(entry.last_timestamp, h.max_timestamp)
        return completed

    # -- snapshots -------------------------------------------------------
    def write_snapshot(self, dir: Path) -> Path:
        """Write ``<map_end_offset>.snapshot`` (version 2) atomically; returns its path."""
        path = snapshot_path(dir, self.map_end_offset)
        atomic_write(path, encode_snapshot(self.producers), durable=False)  # CRC-checked on load
        return path

    def load_snapshot(self, path: Path, offset: int) -> bool:
        """Replace the state with the snapshot at ``path``; False (state untouched) if it is corrupt."""
        try:
            producers = decode_snapshot(path.read_bytes())
        except (OSError, CorruptSnapshot) as exc:
            log.warning("%s: ignoring corrupt producer snapshot %s: %s", self.name, path, exc)
            return False
        self.producers = producers
        self.ongoing_txns = {
            pid: e.current_txn_first_offset
            for pid, e in producers.items()
            if e.current_txn_first_offset >= 0
        }
        self.map_end_offset = offset
        return True


def encode_snapshot(producers: dict[int, ProducerStateEntry]) -> bytes:
    """A version 2 snapshot of ``producers`` (header and body)."""
    body = bytearray(_SNAPSHOT_COUNT.pack(len(producers)))
    for pid, entry in sorted(producers.items()):
        body += _V2_PRODUCER.pack(
            pid,
            entry.producer_epoch,
            entry.coordinator_epoch,
            entry.last_timestamp,
            entry.current_txn_first_offset,
            len(entry.batches),
        )
        for meta in entry.batches:
            body += _V2_BATCH.pack(
                meta.last_seq, meta.last_offset, meta.offset_delta, meta.timestamp
            )
    return _SNAPSHOT_HEADER.pack(_SNAPSHOT_VERSION, crc32c(bytes(body))) + bytes(body)


def decode_snapshot(data: bytes) -> dict[int, ProducerStateEntry]:
    """Producer id -> entry from a version 1 or 2 snapshot; raises CorruptSnapshot."""
    try:
        version, crc = _SNAPSHOT_HEADER.unpack_from(data, 0)
        body = memoryview(data)[_SNAPSHOT_HEADER.size :]
        if crc32c(body) != crc:
            raise CorruptSnapshot("bad CRC")
        if version == 1:
            return _decode_v1(body)
        if version == 2:
            return _decode_v2(body)
        raise CorruptSnapshot(f"unknown version {version}")
    except struct.error as exc:
        raise CorruptSnapshot(f"truncated: {exc}") from None


def _decode_v1(body: memoryview) -> dict[int, ProducerStateEntry]:
    (count,) = _SNAPSHOT_COUNT.unpack_from(body, 0)
    if len(body) != _SNAPSHOT_COUNT.size + count * _V1_ENTRY.size:
        raise CorruptSnapshot("bad length")
    producers: dict[int, ProducerStateEntry] = {}
    for fields in _V1_ENTRY.iter_unpack(body[_SNAPSHOT_COUNT.size :]):
        pid, epoch, last_seq, last_offset, offset_delta, ts, coordinator_epoch, txn = fields
        entry = ProducerStateEntry(
            pid, epoch, coordinator_epoch=coordinator_epoch, current_txn_first_offset=txn
        )
        entry.last_timestamp = ts
        if last_offset >= 0 and last_seq >= 0:
            entry.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, ts))
        producers[pid] = entry
    return producers


def _decode_v2(body: memoryview) -> dict[int, ProducerStateEntry]:
    (count,) = _SNAPSHOT_COUNT.unpack_from(body, 0)
    if count < 0:
        raise CorruptSnapshot(f"negative producer count {count}")
    pos = _SNAPSHOT_COUNT.size
    producers: dict[int, ProducerStateEntry] = {}
    for _ in range(count):
        pid, epoch, coordinator_epoch, ts, txn, num_batches = _V2_PRODUCER.unpack_from(body, pos)
        pos += _V2_PRODUCER.size
        if not 0 <= num_batches <= NUM_BATCHES_TO_RETAIN:
            raise CorruptSnapshot(f"producer {pid} has {num_batches} batches")
        entry = ProducerStateEntry(
            pid, epoch, coordinator_epoch=coordinator_epoch, current_txn_first_offset=txn
        )
        entry.last_timestamp = ts
        for _ in range(num_batches):
            entry.batches.append(BatchMetadata(*_V2_BATCH.unpack_from(body, pos)))
            pos += _V2_BATCH.size
        producers[pid] = entry
    if pos != len(body):
        raise CorruptSnapshot("bad length")
    return producers
