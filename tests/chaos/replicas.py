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
    out: dict[int, str] = {}
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
                    out[record.offset] = record.value.decode()
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
