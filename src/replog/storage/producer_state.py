"""Idempotent producer state: per producer id, its epoch and last 5 batches.

Kafka's ``ProducerStateManager`` in small: the leader checks each batch of a
client append (``validate_client_batches``) before anything is written, and
every appended batch, on leader, follower or during recovery, is applied with
``update``. Snapshots (``<20-digit offset>.snapshot`` in the partition
directory, Kafka's v1 binary format with a CRC32C) let a restart skip
replaying the whole log; like Kafka's, they keep only the last batch of each
producer.

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

from replog.protocol.records import NO_SEQUENCE, BatchHeader, InvalidRecordBatch
from replog.storage.checkpoints import atomic_write

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
INT32_MAX = 0x7FFFFFFF
SNAPSHOT_SUFFIX = ".snapshot"
_SNAPSHOT_NAME = re.compile(r"^(\d{20})\.snapshot$")
_SNAPSHOT_VERSION = 1
_SNAPSHOT_HEADER = struct.Struct(">hI")  # version, crc (over the entries)
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")


class OutOfOrderSequence(Exception):
    """A batch whose sequence does not follow the producer's last one (Kafka OUT_OF_ORDER_SEQUENCE_NUMBER)."""


class InvalidProducerEpoch(Exception):
    """A batch from a fenced (older) producer epoch (Kafka INVALID_PRODUCER_EPOCH)."""


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

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        if header.producer_epoch != self.producer_epoch:
            return None
        first, last = header.base_sequence, header.last_sequence
        for meta in self.batches:
            if meta.first_seq == first and meta.last_seq == last:
                return meta
        return None


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

    def reset(self, offset: int) -> None:
        self.producers.clear()
        self.map_end_offset = offset

    # -- leader checks ----------------------------------------------------
    def validate_client_batches(self, headers: list[BatchHeader]) -> BatchMetadata | None:
        """Check a client append; return the original metadata if it is a retried duplicate.

        Raises InvalidProducerEpoch, OutOfOrderSequence or InvalidRecordBatch. Changes nothing.
        """
        pending: dict[int, tuple[int, int]] = {}  # pid -> (epoch, last_seq) after earlier batches
        for h in headers:
            pid = h.producer_id
            if pid < 0:
                continue
            if h.base_sequence < 0:
                raise InvalidRecordBatch(f"idempotent batch from producer {pid} has no sequence")
            entry = self.producers.get(pid)
            if pid in pending:
                epoch, last_seq = pending[pid]
            elif entry is not None:
                duplicate = entry.find_duplicate(h)
                if duplicate is not None:
                    return duplicate
                epoch, last_seq = entry.producer_epoch, entry.last_seq
            else:
                epoch, last_seq = NO_PRODUCER_EPOCH, NO_SEQUENCE
            if h.producer_epoch < epoch:
                raise InvalidProducerEpoch(
                    f"{self.name}: producer {pid} epoch {h.producer_epoch} is older than {epoch}"
                )
            if h.producer_epoch != epoch:
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
            pending[pid] = (h.producer_epoch, h.last_sequence)
        return None

    # -- state changes ---------------------------------------------------
    def update(self, h: BatchHeader) -> None:
        """Apply an appended batch (offsets final). Batches without a producer id only move the map offset."""
        if h.next_offset > self.map_end_offset:
            self.map_end_offset = h.next_offset
        pid = h.producer_id
        if pid < 0:
            return
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

    # -- snapshots -------------------------------------------------------
    def write_snapshot(self, dir: Path) -> Path:
        """Write ``<map_end_offset>.snapshot`` atomically; returns its path."""
        body = bytearray(struct.pack(">i", len(self.producers)))
        for pid, entry in sorted(self.producers.items()):
            last = entry.batches[-1] if entry.batches else None
            body += _SNAPSHOT_ENTRY.pack(
                pid,
                entry.producer_epoch,
                last.last_seq if last else NO_SEQUENCE,
                last.last_offset if last else -1,
                last.offset_delta if last else 0,
                last.timestamp if last else entry.last_timestamp,
                entry.coordinator_epoch,
                -1,  # current transaction first offset: transactions are not supported
            )
        data = _SNAPSHOT_HEADER.pack(_SNAPSHOT_VERSION, crc32c(bytes(body))) + bytes(body)
        path = snapshot_path(dir, self.map_end_offset)
        atomic_write(path, data, durable=False)  # CRC-checked on load
        return path

    def load_snapshot(self, path: Path, offset: int) -> bool:
        """Replace the state with the snapshot at ``path``; False (state untouched) if it is corrupt."""
        try:
            data = path.read_bytes()
            version, crc = _SNAPSHOT_HEADER.unpack_from(data, 0)
            body = data[_SNAPSHOT_HEADER.size :]
            if version != _SNAPSHOT_VERSION or crc32c(body) != crc:
                raise ValueError("bad version or CRC")
            (count,) = struct.unpack_from(">i", body, 0)
            if len(body) != 4 + count * _SNAPSHOT_ENTRY.size:
                raise ValueError("bad length")
        except (OSError, ValueError, struct.error) as exc:
            log.warning("%s: ignoring corrupt producer snapshot %s: %s", self.name, path, exc)
            return False
        producers: dict[int, ProducerStateEntry] = {}
        for fields in _SNAPSHOT_ENTRY.iter_unpack(body[4:]):
            pid, epoch, last_seq, last_offset, offset_delta, ts, coordinator_epoch, _ = fields
            entry = ProducerStateEntry(pid, epoch, coordinator_epoch=coordinator_epoch)
            entry.last_timestamp = ts
            if last_offset >= 0 and last_seq >= 0:
                entry.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, ts))
            producers[pid] = entry
        self.producers = producers
        self.map_end_offset = offset
        return True
