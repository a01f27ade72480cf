"""Which log to clean next, and each log's cleaning state (Kafka ``LogCleanerManager``).

Choosing: every compacted log not being cleaned and not marked uncleanable gets a
``LogToClean``: its clean bytes (segments below the first dirty offset, from
``cleaner-offset-checkpoint``), its cleanable bytes (closed segments from the first dirty
offset up to the first uncleanable one: the segment holding the high watermark, the
active segment, or the first segment younger than ``min.compaction.lag.ms``, whichever
comes first). The log with the highest dirty ratio above its
``min.cleanable.dirty.ratio`` is cleaned, or one whose oldest dirty record is older than
``max.compaction.lag.ms``. replog adds one rule Kafka lacks: when nothing else is due,
a log whose kept tombstones have passed their delete horizon (known from its last
cleaning, in memory) is cleaned, so tombstones go after ``delete.retention.ms`` even
when no new record arrives.

``cleanable_offsets``, ``log_to_clean`` and ``choose_filthiest`` are functions of a
``Log`` and the time. ``LogCleanerManager`` keeps the state: logs in progress, logs
marked uncleanable (a corrupt segment: skipped, never deleted), the checkpoints, the
earliest tombstone horizon of each log.

Concurrency: the state is behind one lock, shared by the cleaner threads and the logs'
owner. The methods that read or change ``Log`` objects (``grab_filthiest_compacted_log``,
``swap_cleaned_group``, ``still_planned``, ``remove_log``) run on the logs' owner
(the event loop); the others run anywhere.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from replog.storage.checkpoints import (
    CLEANER_OFFSET_CHECKPOINT,
    CheckpointError,
    OffsetCheckpointFile,
)
from replog.storage.cleaner import CleanedGroup, CleaningTask, SegmentRef
from replog.storage.log import Log
from replog.storage.segment import (
    CLEANED_FILE_SUFFIX,
    LogSegment,
    segment_paths,
    txn_index_path,
)

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class LogToClean:
    """A compacted log's cleanable range and sizes (Kafka ``LogToClean``)."""

    tp: TopicPartition
    first_dirty_offset: int
    first_uncleanable_offset: int  # a segment base: only whole closed segments are cleaned
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def cleanable_offsets(log_: Log, last_clean_offset: int | None, now_ms: int) -> tuple[int, int]:
    """``(first dirty offset, first uncleanable offset)`` (Kafka ``cleanableOffsets``): a
    checkpoint below the log start or past the log end restarts at the log start. Never
    past the high watermark (no high watermark yet: nothing is cleanable)."""
    start = log_.log_start_offset
    first_dirty = last_clean_offset if last_clean_offset is not None else start
    if first_dirty < start or first_dirty > log_.log_end_offset:
        first_dirty = start
    high_watermark = log_.high_watermark if log_.high_watermark is not None else start
    bounds = [high_watermark, log_.active_segment.base_offset]
    if log_.high_watermark is not None:
        bounds.append(log_.last_stable_offset())  # never an open transaction (Kafka)
    lag = log_.config.min_compaction_lag_ms
    if lag > 0:
        for segment in _closed_segments_from(log_.segments, first_dirty):
            if segment.largest_timestamp() > now_ms - lag:
                bounds.append(segment.base_offset)
                break
    return first_dirty, max(first_dirty, min(bounds))


def _closed_segments_from(segments: list[LogSegment], offset: int) -> list[LogSegment]:
    """Closed segments holding offsets at or after ``offset`` (Kafka nonActiveLogSegmentsFrom)."""
    return [s for s, nxt in zip(segments, segments[1:], strict=False) if nxt.base_offset > offset]


def log_to_clean(
    tp: TopicPartition, log_: Log, last_clean_offset: int | None, now_ms: int
) -> LogToClean:
    first_dirty, uncleanable = cleanable_offsets(log_, last_clean_offset, now_ms)
    segments = log_.segments
    ends = [s.base_offset for s in segments[1:]] + [log_.log_end_offset]
    # Round the uncleanable offset down to the base of the segment holding it.
    first_uncleanable = segments[-1].base_offset
    for segment, end in zip(segments[:-1], ends, strict=False):
        if end > uncleanable:
            first_uncleanable = segment.base_offset
            break
    clean = cleanable = 0
    low = min(first_dirty, first_uncleanable)
    for segment, end in zip(segments, ends, strict=True):
        if segment.base_offset < first_dirty:
            clean += segment.size
        if end > low and segment.base_offset < first_uncleanable:
            cleanable += segment.size
    # max.compaction.lag.ms: the oldest first-batch timestamp among the dirty closed segments.
    earliest = min(
        (
            ts
            for s in _closed_segments_from(segments, first_dirty)
            if (ts := s.rolling_based_timestamp or -1) > 0
        ),
        default=None,
    )
    lag = max(log_.config.max_compaction_lag_ms, 0)
    need_now = earliest is not None and earliest < now_ms - lag
    return LogToClean(
        tp, first_dirty, max(first_dirty, first_uncleanable), clean, cleanable, need_now
    )


def choose_filthiest(candidates: list[tuple[LogToClean, float]]) -> LogToClean | None:
    """The log to clean of ``(log to clean, its min.cleanable.dirty.ratio)`` pairs: the
    highest dirty ratio among those above their minimum or past max.compaction.lag.ms."""
    due = [
        ltc
        for ltc, min_ratio in candidates
        if ltc.total_bytes > 0
        and (
            (ltc.need_compaction_now and ltc.cleanable_bytes > 0) or ltc.cleanable_ratio > min_ratio
        )
    ]
    return max(due, key=lambda ltc: ltc.cleanable_ratio) if due else None


@dataclass
class CleaningPlan:
    """A cleaning under way: the task sent to the cleaner and, on the owner's side, the
    segment objects it was planned from (a swap must find exactly them)."""

    tp: TopicPartition
    log: Log
    log_dir: Path
    task: CleaningTask
    segments: dict[int, LogSegment]
    truncations: int


@dataclass
class _State:
    in_progress: set[TopicPartition] = field(default_factory=set)
    aborted: set[TopicPartition] = field(default_factory=set)
    uncleanable: set[TopicPartition] = field(default_factory=set)
    tombstone_horizons: dict[TopicPartition, int] = field(default_factory=dict)


class LogCleanerManager:
    def __init__(
        self,
        log_dirs: list[Path],
        logs: Callable[[], Mapping[TopicPartition, Log]],
        log_dir_of: Callable[[TopicPartition], Path | None],
    ) -> None:
        self._checkpoints = {
            Path(d): OffsetCheckpointFile(Path(d) / CLEANER_OFFSET_CHECKPOINT) for d in log_dirs
        }
        self._logs = logs
        self._log_dir_of = log_dir_of
        self._lock = threading.Lock()
        self._state = _State()
        self._offsets: dict[Path, dict[TopicPartition, int]] = {}
        for d, checkpoint in self._checkpoints.items():
            try:
                self._offsets[d] = checkpoint.read()
            except CheckpointError as exc:
                log.warning(
                    "ignoring unreadable cleaner checkpoint (logs are cleaned from their start): %s",
                    exc,
                )
                self._offsets[d] = {}

    # -- state (any thread) -------------------------------------------------------
    def checkpointed_offset(self, tp: TopicPartition) -> int | None:
        with self._lock:
            for offsets in self._offsets.values():
                if tp in offsets:
                    return offsets[tp]
        return None

    def is_uncleanable(self, tp: TopicPartition) -> bool:
        with self._lock:
            return tp in self._state.uncleanable

    def is_aborted(self, tp: TopicPartition) -> bool:
        with self._lock:
            return tp in self._state.aborted

    def abort_cleaning(self, tp: TopicPartition) -> None:
        """Ask a cleaning of ``tp`` under way to stop (it checks between chunks). Does not
        wait: the swap checks the log anyway."""
        with self._lock:
            if tp in self._state.in_progress:
                self._state.aborted.add(tp)

    def mark_uncleanable(self, tp: TopicPartition) -> None:
        with self._lock:
            self._state.uncleanable.add(tp)

    def done_cleaning(
        self,
        plan: CleaningPlan,
        end_offset: int | None,
        tombstone_horizon: int | None = None,
    ) -> None:
        """Leave the in-progress state; a completed cleaning (``end_offset``) moves the
        checkpoint, unless it was aborted meanwhile (Kafka ``doneCleaning``)."""
        with self._lock:
            tp = plan.tp
            aborted = tp in self._state.aborted
            self._state.in_progress.discard(tp)
            self._state.aborted.discard(tp)
            if end_offset is None or aborted:
                return
            if tombstone_horizon is None:
                self._state.tombstone_horizons.pop(tp, None)
            else:
                self._state.tombstone_horizons[tp] = tombstone_horizon
            self._write_checkpoint(plan.log_dir, set_=(tp, end_offset))

    def _write_checkpoint(
        self,
        log_dir: Path,
        *,
        set_: tuple[TopicPartition, int] | None = None,
        remove: TopicPartition | None = None,
    ) -> None:
        """Under the lock: change one entry and rewrite the log dir's checkpoint file."""
        offsets = self._offsets.setdefault(log_dir, {})
        if remove is not None:
            offsets.pop(remove, None)
        if set_ is not None:
            offsets[set_[0]] = set_[1]
        checkpoint = self._checkpoints.get(log_dir)
        if checkpoint is None:
            return
        try:
            checkpoint.write(offsets)
        except OSError as exc:
            log.error("could not write %s: %s", checkpoint.path, exc)

    # -- on the logs' owner ------------------------------------------------------------
    def remove_log(self, tp: TopicPartition, log_dir: Path) -> None:
        """A deleted log: abort its cleaning, forget its checkpoint and marks."""
        self.abort_cleaning(tp)
        with self._lock:
            self._state.uncleanable.discard(tp)
            self._state.tombstone_horizons.pop(tp, None)
            if tp in self._offsets.get(log_dir, {}):
                self._write_checkpoint(log_dir, remove=tp)

    def grab_filthiest_compacted_log(self, now_ms: int) -> CleaningPlan | None:
        """Choose the log to clean and mark it in progress; None if none is due. Runs on
        the owner: it reads the logs' segments."""
        with self._lock:
            candidates = []
            for tp, log_ in self._logs().items():
                if not log_.config.compact or log_.closed:
                    continue
                if tp in self._state.in_progress or tp in self._state.uncleanable:
                    continue
                log_dir = self._log_dir_of(tp)
                if log_dir is None:
                    continue
                self._truncate_checkpoint(tp, log_, log_dir)
                last = self._offsets.get(log_dir, {}).get(tp)
                candidates.append((log_to_clean(tp, log_, last, now_ms), log_))
            chosen = choose_filthiest(
                [(ltc, lg.config.min_cleanable_dirty_ratio) for ltc, lg in candidates]
            )
            if chosen is None:  # replog's rule: tombstones past their horizon
                expired = [
                    ltc
                    for ltc, _ in candidates
                    if self._state.tombstone_horizons.get(ltc.tp, now_ms + 1) <= now_ms
                ]
                chosen = expired[0] if expired else None
            if chosen is None:
                return None
            log_ = next(lg for ltc, lg in candidates if ltc is chosen)
            self._state.in_progress.add(chosen.tp)
            log_dir = self._log_dir_of(chosen.tp)
            assert log_dir is not None
            return _plan(chosen, log_, log_dir, now_ms)

    def _truncate_checkpoint(self, tp: TopicPartition, log_: Log, log_dir: Path) -> None:
        """Under the lock: a truncation below the checkpoint moves it down (Kafka
        ``maybeTruncateCheckpoint``)."""
        offset = log_.min_truncation_offset
        if offset is None:
            return
        log_.min_truncation_offset = None
        current = self._offsets.get(log_dir, {}).get(tp)
        if current is not None and current > offset:
            self._write_checkpoint(log_dir, set_=(tp, offset))

    def still_planned(self, plan: CleaningPlan) -> bool:
        """Whether the log is still the one planned: open, not replaced, not truncated, and
        every planned segment live with its planned size (so an error reading it was not
        caused by a change)."""
        log_ = plan.log
        if log_.closed or self._logs().get(plan.tp) is not log_:
            return False
        if log_.truncations != plan.truncations:
            return False
        live = {s.base_offset: s for s in log_.segments}
        return all(
            live.get(ref.base_offset) is plan.segments[ref.base_offset]
            and live[ref.base_offset].size == ref.size
            for ref in plan.task.segments
        )

    def swap_cleaned_group(self, plan: CleaningPlan, group: CleanedGroup) -> bool:
        """Swap a cleaned group in, if the segments it replaces are still exactly the live
        ones it was cleaned from; otherwise delete it and return False."""
        log_ = plan.log
        old: list[LogSegment] = []
        ok = (
            not log_.closed
            and log_.config.compact  # no longer compacted: its records stay
            and self._logs().get(plan.tp) is log_
            and log_.truncations == plan.truncations
            and not self.is_aborted(plan.tp)
        )
        if ok:
            live = {s.base_offset: s for s in log_.segments[:-1]}
            for ref in group.replaced:
                segment = live.get(ref.base_offset)
                if (
                    segment is None
                    or segment is not plan.segments.get(ref.base_offset)
                    or segment.size != ref.size
                    or segment.next_offset != ref.next_offset
                ):
                    ok = False
                    break
                old.append(segment)
        if ok:
            new = LogSegment(
                log_.dir,
                group.base_offset,
                index_interval_bytes=log_.config.index_interval_bytes,
                created_ms=old[0].created_ms,
                fresh=False,
                suffix=CLEANED_FILE_SUFFIX,
            )
            if new.needs_recovery:
                new.recover()
            else:
                new.load_next_offset()
            if (new.size, new.next_offset) != (group.size, group.next_offset):
                log.error(
                    "%s: cleaned segment %d is not what the cleaner wrote; not swapped",
                    log_.name,
                    group.base_offset,
                )
                new.delete()
                return False
            log_.replace_segments(new, old)
            return True
        for path in segment_paths(log_.dir, group.base_offset, CLEANED_FILE_SUFFIX):
            path.unlink(missing_ok=True)
        txn_index_path(log_.dir, group.base_offset, CLEANED_FILE_SUFFIX).unlink(missing_ok=True)
        return False


def _plan(ltc: LogToClean, log_: Log, log_dir: Path, now_ms: int) -> CleaningPlan:
    segments = [s for s in log_.segments[:-1] if s.base_offset < ltc.first_uncleanable_offset]
    task = CleaningTask(
        name=log_.name,
        dir=str(log_.dir),
        segments=tuple(SegmentRef(s.base_offset, s.next_offset, s.size) for s in segments),
        first_dirty_offset=ltc.first_dirty_offset,
        first_uncleanable_offset=ltc.first_uncleanable_offset,
        segment_bytes=log_.config.segment_bytes,
        index_interval_bytes=log_.config.index_interval_bytes,
        delete_retention_ms=log_.config.delete_retention_ms,
        last_offsets_of_active_producers=log_.last_offsets_of_active_producers(),
        now_ms=now_ms,
        aborted_transactions=tuple(
            log_.collect_aborted_transactions(segments[0].base_offset, ltc.first_uncleanable_offset)
        )
        if segments
        else (),
    )
    return CleaningPlan(
        ltc.tp, log_, log_dir, task, {s.base_offset: s for s in segments}, log_.truncations
    )
