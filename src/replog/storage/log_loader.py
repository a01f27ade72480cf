"""Opening a log directory: segments, recovery of a torn tail, producer state.

Kafka's ``LogLoader`` in small. After a clean shutdown nothing is scanned
(the log end offset comes from a short read after the last index entry).
Otherwise every segment from the one holding the recovery point onward is
rescanned with CRC checks; the first bad or truncated batch ends the log:
that segment is cut there, later segments are deleted, indexes are rebuilt
and a warning says how many bytes were dropped.

An interrupted log cleaner swap is finished first, by Kafka's rules: ``.cleaned``
files (a cleaning not yet handed over) are deleted; a ``<base>.log.swap`` (a cleaned
segment whose swap had begun, fsynced before it got that name) is recovered and
replaces the segment at ``base`` and every later one that starts before its end,
then loses its suffix. ``.swap`` index files are deleted and rebuilt. Kafka also
deletes a ``.swap`` above any ``.cleaned`` file (KAFKA-6264, for segment splits);
replog never splits a segment, so every ``.swap`` is completed.

``load_log`` returns the pieces (``LoadedLog``) and ``Log.open`` builds the
``Log`` from them, so this module sits below ``log.py`` and never imports it;
``Log.truncate_to`` calls ``rebuild_producer_state`` from here.

Concurrency: runs before the ``Log`` is shared; single-threaded.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from replog.protocol.records import InvalidRecordBatch, read_end_txn_marker
from replog.storage.checkpoints import fsync_dir
from replog.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT, LeaderEpochFileCache
from replog.storage.log_config import LogConfig
from replog.storage.producer_state import ProducerStateManager, list_snapshots
from replog.storage.segment import (
    CLEANED_FILE_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_FILE_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
)
from replog.storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn

log = logging.getLogger(__name__)

_SEGMENT_FILE = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex|\.txnindex)$")
_LEFTOVER_SUFFIXES = (".tmp", ".deleted", CLEANED_FILE_SUFFIX)
_SWAP_LOG = re.compile(r"^(\d{20})\.log\.swap$")


@dataclass
class LoadedLog:
    """What ``load_log`` found: the pieces ``Log.open`` builds a ``Log`` from."""

    segments: list[LogSegment]
    log_start_offset: int
    recovery_point: int
    leader_epoch_cache: LeaderEpochFileCache
    producer_state: ProducerStateManager


def parse_topic_partition(name: str) -> tuple[str, int]:
    """``"my.topic-3"`` -> ``("my.topic", 3)``: split on the LAST ``-``."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"directory name {name!r} is not <topic>-<partition>")
    return topic, int(partition)


def _remove_leftovers(dir: Path) -> list[int]:
    """Delete files of interrupted operations (Kafka's .deleted/.cleaned, our .tmp, .swap
    indexes); return the base offsets of the ``.log.swap`` files, to be completed."""
    swaps: list[int] = []
    swap_txn_indexes: list[Path] = []
    for path in dir.iterdir():
        if not path.is_file():
            continue
        m = _SWAP_LOG.match(path.name)
        if m:
            swaps.append(int(m.group(1)))
        elif path.name.endswith(TXN_INDEX_SUFFIX + SWAP_FILE_SUFFIX):
            swap_txn_indexes.append(path)
        elif path.name.endswith(_LEFTOVER_SUFFIXES + (SWAP_FILE_SUFFIX,)):
            log.info("%s: removing leftover file %s", dir.name, path.name)
            path.unlink(missing_ok=True)
    for path in swap_txn_indexes:
        # A swap's transaction index cannot be rebuilt from its segment alone: it goes
        # with its ``.log.swap`` (renamed before it), or is a leftover.
        if int(path.name[:20]) not in swaps:
            log.info("%s: removing leftover file %s", dir.name, path.name)
            path.unlink(missing_ok=True)
    return sorted(swaps)


def _complete_swaps(
    dir: Path, segments: list[LogSegment], swaps: list[int], config: LogConfig, now_ms: int
) -> set[int]:
    """Finish interrupted cleaner swaps (Kafka ``LogLoader`` for .swap files): each swap
    segment is recovered, replaces the segments it overlaps and loses its suffix. Returns
    the ids of the completed segments (already recovered)."""
    done: set[int] = set()
    for base in swaps:
        swap = LogSegment(
            dir,
            base,
            index_interval_bytes=config.index_interval_bytes,
            created_ms=now_ms,
            fresh=False,
            suffix=SWAP_FILE_SUFFIX,
        )
        swap.recover()
        end = swap.next_offset
        replaced = [s for s in segments if s.base_offset == base or base < s.base_offset < end]
        for s in replaced:
            s.delete()
            segments.remove(s)
        swap.change_file_suffixes(SWAP_FILE_SUFFIX, "")
        segments.append(swap)
        segments.sort(key=lambda s: s.base_offset)
        done.add(id(swap))
        log.warning(
            "%s: completed an interrupted cleaner swap: segment %d (up to offset %d) "
            "replaces %d segment(s)",
            dir.name,
            base,
            end,
            len(replaced),
        )
    if swaps:
        fsync_dir(dir)
    return done


def _load_segments(dir: Path, config: LogConfig, now_ms: int) -> list[LogSegment]:
    bases: set[int] = set()
    orphans: list[Path] = []
    for path in dir.iterdir():
        m = _SEGMENT_FILE.match(path.name)
        if not m:
            continue
        if m.group(2) == LOG_SUFFIX:
            bases.add(int(m.group(1)))
        else:
            orphans.append(path)
    for path in orphans:
        if int(path.name[:20]) not in bases:
            log.info("%s: removing index without a segment: %s", dir.name, path.name)
            path.unlink(missing_ok=True)
    return [
        LogSegment(
            dir,
            base,
            index_interval_bytes=config.index_interval_bytes,
            created_ms=now_ms,
            fresh=False,
        )
        for base in sorted(bases)
    ]


def load_log(
    dir: Path,
    config: LogConfig,
    *,
    recovery_point: int,
    log_start_offset: int,
    now_ms: int,
    clean_shutdown: bool,
) -> LoadedLog:
    """Open (or create) ``dir``: segments, recovery past ``recovery_point`` unless clean,
    the leader epoch cache and the producer state as of the log end."""
    topic, partition = parse_topic_partition(dir.name)
    name = f"{topic}-{partition}"
    dir.mkdir(parents=True, exist_ok=True)
    swaps = _remove_leftovers(dir)
    segments = _load_segments(dir, config, now_ms)
    epoch_cache = LeaderEpochFileCache(dir / LEADER_EPOCH_CHECKPOINT, topic_partition=name)

    done = _complete_swaps(dir, segments, swaps, config, now_ms)  # ids: next_offset known
    replay_from: int | None = None
    if not clean_shutdown and segments:
        recovered = _recover(name, segments, recovery_point, epoch_cache)
        done |= recovered
        replay_from = min((s.base_offset for s in segments if id(s) in recovered), default=None)
    for segment in segments:
        if id(segment) in done:
            continue
        if segment.needs_recovery:
            dropped = segment.recover()
            log.warning(
                "%s: rebuilt the indexes of segment %d (%d bytes dropped)",
                name,
                segment.base_offset,
                dropped,
            )
        else:
            try:
                segment.load_next_offset()
            except InvalidRecordBatch as exc:
                dropped = segment.recover()
                log.warning(
                    "%s: segment %d unreadable after a clean shutdown (%s); "
                    "recovered it, dropped %d bytes",
                    name,
                    segment.base_offset,
                    exc,
                    dropped,
                )

    if not segments:
        segments.append(_fresh_segment(dir, log_start_offset, config, now_ms))
    log_end_offset = segments[-1].next_offset
    log_start_offset = max(log_start_offset, segments[0].base_offset)
    if log_start_offset > log_end_offset:
        log.warning(
            "%s: log start offset %d is past the log end %d; starting an empty log there",
            name,
            log_start_offset,
            log_end_offset,
        )
        for segment in segments:
            segment.delete()
        segments = [_fresh_segment(dir, log_start_offset, config, now_ms)]
        log_end_offset = log_start_offset
    epoch_cache.truncate_from_end(log_end_offset)
    epoch_cache.truncate_from_start(log_start_offset)

    producer_state = ProducerStateManager(name)
    rebuild_producer_state(producer_state, dir, segments, replay_from=replay_from)
    return LoadedLog(
        segments,
        log_start_offset=log_start_offset,
        recovery_point=log_end_offset if clean_shutdown else min(recovery_point, log_end_offset),
        leader_epoch_cache=epoch_cache,
        producer_state=producer_state,
    )


def _fresh_segment(dir: Path, base: int, config: LogConfig, now_ms: int) -> LogSegment:
    return LogSegment(
        dir,
        base,
        index_interval_bytes=config.index_interval_bytes,
        created_ms=now_ms,
        fresh=True,
    )


def _recover(
    name: str,
    segments: list[LogSegment],
    recovery_point: int,
    epoch_cache: LeaderEpochFileCache,
) -> set[int]:
    """Rescan segments from the one holding ``recovery_point``; cut the log at the first bad batch."""

    def on_batch(h) -> None:  # type: ignore[no-untyped-def]
        epoch = h.partition_leader_epoch
        latest = epoch_cache.latest_epoch
        if epoch >= 0 and (latest is None or epoch > latest):
            epoch_cache.assign(epoch, h.base_offset)

    start = 0
    for i, segment in enumerate(segments):
        if segment.base_offset <= recovery_point:
            start = i
    recovered: set[int] = set()
    for i in range(start, len(segments)):
        segment = segments[i]
        truncated = segment.recover(on_batch)
        recovered.add(id(segment))
        if truncated > 0:
            later = segments[i + 1 :]
            dropped = truncated + sum(s.size for s in later)
            for s in later:
                s.delete()
            del segments[i + 1 :]
            log.warning(
                "%s: recovery found a corrupt or torn tail in segment %d at position %d; "
                "dropped %d bytes (%d later segment(s) deleted), log end offset %d",
                name,
                segment.base_offset,
                segment.size,
                dropped,
                len(later),
                segment.next_offset,
            )
            break
    if recovered:
        log.info("%s: recovered %d segment(s) past the recovery point", name, len(recovered))
    return recovered


def rebuild_producer_state(
    state: ProducerStateManager,
    dir: Path,
    segments: list[LogSegment],
    *,
    replay_from: int | None = None,
) -> None:
    """Load the latest usable producer snapshot (at or below ``replay_from`` when given)
    and replay batch headers up to the log end.

    The replay also gives back the ``.txnindex`` entries of the ABORT markers it passes
    that their segment lacks (written only on flush, so lost with an unclean stop):
    recovery passes the base of the first segment it rescanned as ``replay_from``, so
    every marker past the recovery point is replayed."""
    end = segments[-1].next_offset
    first_base = segments[0].base_offset
    limit = end if replay_from is None else min(end, replay_from)
    start: int | None = None
    for offset, path in reversed(list_snapshots(dir)):
        if offset > end:
            path.unlink(missing_ok=True)
            continue
        if start is None and first_base <= offset <= limit:
            if state.load_snapshot(path, offset):
                start = offset
            else:
                path.unlink(missing_ok=True)
    if start is None:
        # Like Kafka without snapshots: replay only the last two segments.
        start = segments[-2].base_offset if len(segments) >= 2 else first_base
        if replay_from is not None:
            start = max(first_base, min(start, replay_from))
        state.reset(start)
    for segment in segments:
        if segment.next_offset <= start:
            continue
        located = segment.find_batch(start)
        if located is None:
            continue
        for pos, header, _ in segment.iter_batches(located[0], headers_only=True):
            if header.base_offset < start:
                continue
            marker = None
            if header.is_control and header.has_producer_id:
                batch = segment.pread(header.size, pos)
                marker = read_end_txn_marker(batch, header)
            completed = state.update(header, marker)
            if (
                completed is not None
                and completed.is_aborted
                and completed.last_offset > segment.txn_index.last_offset
            ):
                segment.txn_index.append(
                    AbortedTxn(
                        completed.producer_id,
                        completed.first_offset,
                        completed.last_offset,
                        state.last_stable_offset(completed),
                    )
                )
    state.map_end_offset = end


def segment_files(dir: Path) -> list[Path]:
    """Every segment, index and time index file in ``dir`` (for tests and tools)."""
    return sorted(
        p for p in dir.iterdir() if p.suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)
    )
