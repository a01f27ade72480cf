"""After a campaign: every replica's log read from disk, compared below the high watermark.

A replica that holds a different value at an offset the final reader saw below the high
watermark has diverged: a committed record differs between replicas, which the final read
(served by one leader) cannot see. Read with replog's own ``Log`` once the brokers are
stopped.
"""

from __future__ import annotations

import time
from pathlib import Path

from kafka.record import MemoryRecords

from replog.storage.log import Log
from replog.storage.log_config import LogConfig


def replica_values(data_dir: Path, topic: str, partition: int) -> dict[int, str]:
    """offset -> value of every record in a stopped broker's log for ``topic``-``partition``."""
    return {o: r[0] for o, r in replica_records(data_dir, topic, partition).items()}


def replica_records(
    data_dir: Path, topic: str, partition: int
) -> dict[int, tuple[str, int, int, int]]:
    """offset -> (value, producer id, producer epoch, sequence) of every record."""
    out: dict[int, tuple[str, int, int, int]] = {}
    path = data_dir / f"{topic}-{partition}"
    if not path.is_dir():
        return out
    log = Log.open(
        path,
        LogConfig(),
        recovery_point=0,
        log_start_offset=0,
        now_ms=int(time.time() * 1000),
        clean_shutdown=False,
    )
    try:
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            records = MemoryRecords(bytes(log.read(offset, 1 << 24).records))
            if not records.has_next():
                break
            while records.has_next():
                batch = records.next_batch()
                for record in batch:
                    sequence = batch.base_sequence + record.offset - batch.base_offset
                    out[record.offset] = (
                        record.value.decode(),
                        batch.producer_id,
                        batch.producer_epoch,
                        sequence if batch.base_sequence >= 0 else -1,
                    )
                offset = batch.next_offset
    finally:
        log.close()
    return out


def divergences(
    data_dirs: dict[int, Path], topic: str, high_watermarks: dict[int, int]
) -> list[dict]:
    """One entry per (partition, offset) below the high watermark where replicas differ or
    one lacks the record: ``{"partition", "offset", "values": {broker: value or None}}``."""
    out = []
    for partition, high in sorted(high_watermarks.items()):
        logs = {b: replica_values(d, topic, partition) for b, d in sorted(data_dirs.items())}
        for offset in range(high):
            values = {b: log.get(offset) for b, log in logs.items()}
            if len(set(values.values())) > 1:
                out.append({"partition": partition, "offset": offset, "values": values})
    return out


def duplicate_origins(
    data_dirs: dict[int, Path], topic: str, duplicates: dict[str, list[tuple[int, int]]]
) -> list[dict]:
    """For each duplicated value, the producer id, epoch and sequence of each copy as the
    replicas' logs hold it: ``{"value", "copies": [[partition, offset, pid, epoch, seq]]}``.
    Copies written under two epochs of one producer are a client's epoch bump, which no
    broker can deduplicate; copies under one epoch and sequence are a missed duplicate."""
    logs: dict[tuple[int, int], dict[int, tuple[str, int, int, int]]] = {}
    out = []
    for value, positions in sorted(duplicates.items()):
        copies = []
        for partition, offset in positions:
            for broker, data_dir in sorted(data_dirs.items()):
                key = (broker, partition)
                if key not in logs:
                    logs[key] = replica_records(data_dir, topic, partition)
                record = logs[key].get(offset)
                if record is not None and record[0] == value:
                    copies.append([partition, offset, record[1], record[2], record[3]])
                    break
        out.append({"value": value, "copies": copies})
    return out
