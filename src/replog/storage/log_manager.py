"""All logs of a broker, across its ``log.dirs``.

Each log dir holds one directory per partition (``<topic>-<partition>``) and
three files of its own: ``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint`` and, after a clean shutdown, the
``.kafka_cleanShutdown`` marker. ``startup`` loads every partition directory
(recovering only what may be unflushed unless the marker is there) and then
removes the marker; ``shutdown`` flushes, checkpoints and writes it again.

Each partition directory may hold ``partition.metadata``, its topic id (KIP-516):
read at ``startup``, written once by ``assign_topic_id`` (see
``replog.storage.partition_metadata``). The write is atomic but not fsynced at once:
a LeaderAndIsr may bring thousands of partitions, and two fsyncs each (~1 ms) would hold
the event loop for seconds. ``flush_dirty_logs`` and ``shutdown`` fsync them, as Kafka
flushes ``partition.metadata`` with its log; after a crash before that, a lost or torn
file reads as none and the next LeaderAndIsr writes it again.

The log cleaner (``cleaner_threads.LogCleaner``) is the log manager's, as in Kafka:
``start_cleaner`` starts it over these logs once they are loaded, with ``owner`` to run
its calls on the logs' owner; ``stop_cleaner`` stops it (before ``shutdown``). Each log
dir keeps its ``cleaner-offset-checkpoint``; a deleted log leaves it.

A log dir whose disk fails (an ``OSError`` reading or writing it: full, gone, read-only)
goes offline, as in Kafka (KIP-112, ``LogDirFailureChannel``): ``mark_offline`` records
it, and ``handle_log_dir_failure`` closes and forgets its logs, so that nothing touches
that disk again until a restart. The maintenance calls here (flush, checkpoint,
retention) mark a dir offline themselves and go on with the other dirs; the replica
manager is told through ``on_log_dir_failure``, after the call that found the failure.
A dir that cannot be loaded at ``startup`` is offline from the start. With no live log
dir left, the broker cannot serve anything: Kafka halts it.

Before anything is written, ``lock_log_dirs`` locks every log dir (``<dir>/.lock``, see
``replog.storage.log_dir_lock``) for the broker's life: ``shutdown`` releases the locks
last, and a dir going offline releases its own, as Kafka does. ``read_broker_metadata``
and ``checkpoint_broker_metadata`` read and write each live dir's ``meta.properties``
(``replog.storage.meta_properties``); a dir whose file cannot be read or written goes
offline.

Concurrency: owned by the broker's event loop; not thread-safe. ``flush_dirty_logs`` and
``checkpoint`` do fsyncs: run them where blocking is acceptable, without other calls on
the same logs meanwhile; ``flush_dirty_log_steps`` allows other calls between its steps. ``stop_cleaner`` waits for the cleaner threads,
which may be waiting for the owner: call it off the owner's thread.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from replog.protocol.errors import InconsistentTopicId
from replog.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    CheckpointError,
    OffsetCheckpointFile,
    atomic_write,
    fsync_dir,
)
from replog.storage.cleaner_manager import LogCleanerManager
from replog.storage.cleaner_threads import CleanerConfig, LogCleaner, Owner
from replog.storage.log import Log, parse_topic_partition
from replog.storage.log_config import LogConfig
from replog.storage.log_dir_lock import LogDirLock
from replog.storage.meta_properties import (
    BrokerMetadata,
    read_meta_properties,
    write_meta_properties,
)
from replog.storage.partition_metadata import (
    PartitionMetadataError,
    flush_partition_metadata,
    read_partition_metadata,
    write_partition_metadata,
)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanShutdown"


class LogDirOfflineError(OSError):
    """No live log dir can take the log (Kafka's ``KafkaStorageException``): the
    request gets KAFKA_STORAGE_ERROR."""


DELETE_DIR_SUFFIX = "-delete"

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class LogManager:
    """Creates, loads, checkpoints and deletes the logs in ``log_dirs``."""

    def __init__(
        self,
        log_dirs: list[Path],
        default_config: LogConfig,
        cleaner_config: CleanerConfig | None = None,
        shutdown_threads_per_dir: int = 1,
    ) -> None:
        if not log_dirs:
            raise ValueError("log.dirs must name at least one directory")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.default_config = default_config
        self.cleaner_config = cleaner_config
        self.cleaner: LogCleaner | None = None
        self._logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        self._topic_ids: dict[TopicPartition, uuid.UUID] = {}
        self._unflushed_topic_ids: set[TopicPartition] = set()
        self._deleted = 0
        self.shutdown_threads_per_dir = shutdown_threads_per_dir
        """``num.recovery.threads.per.data.dir``: logs flushed and closed at once per dir at
        shutdown (each flush is a few fsyncs, which release the GIL)."""
        self.offline_log_dirs: dict[Path, str] = {}
        """Log dirs taken offline by a disk failure, with the reason (Kafka
        ``LogDirFailureChannel``); they stay offline until the broker restarts."""
        self.on_log_dir_failure: Callable[[Path], None] | None = None
        """Called once per dir newly offline, after the call that found it."""
        self._dir_locks: dict[Path, LogDirLock] = {}
        self._broker_metadata: dict[Path, BrokerMetadata] = {}
        for d in self.log_dirs:
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                self.mark_offline(d, f"cannot create it: {exc}")

    # -- failed log dirs (KIP-112) ------------------------------------------
    @property
    def live_log_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if d not in self.offline_log_dirs]

    def is_offline(self, log_dir: Path) -> bool:
        return bool(self.offline_log_dirs) and log_dir in self.offline_log_dirs

    def mark_offline(self, log_dir: Path, reason: str) -> bool:
        """Record that ``log_dir``'s disk failed (Kafka ``maybeAddOfflineLogDir``); True
        if it was live until now. Its logs stay in place until ``handle_log_dir_failure``."""
        if log_dir in self.offline_log_dirs:
            return False
        self.offline_log_dirs[log_dir] = reason
        log.error("log dir %s is offline: %s", log_dir, reason)
        return True

    def handle_log_dir_failure(self, log_dir: Path) -> list[TopicPartition]:
        """Close and forget every log in the offline ``log_dir`` (Kafka
        ``LogManager.handleLogDirFailure``); returns their partitions. Files stay on disk
        as they are: a restart with the disk repaired loads them again."""
        gone = sorted(tp for tp, d in self._dir_of.items() if d == log_dir)
        lock = self._dir_locks.pop(log_dir, None)
        if lock is not None:
            lock.release()
        for tp in gone:
            target = self._logs.pop(tp)
            del self._dir_of[tp]
            self._unflushed_topic_ids.discard(tp)
            if self.cleaner is not None:
                self.cleaner.manager.remove_log(tp, log_dir)
            try:
                target.close()
            except OSError as exc:  # the disk is failing: nothing more to save
                log.debug("closing %s-%d on the offline dir: %s", tp[0], tp[1], exc)
        return gone

    def fail_log_dir(self, log_dir: Path, what: str, exc: OSError) -> None:
        """``what`` on ``log_dir`` failed with ``exc``: the dir goes offline and, the first
        time, ``on_log_dir_failure`` is told (every failed disk access comes here)."""
        if self.mark_offline(log_dir, f"{what} failed: {exc}") and self.on_log_dir_failure:
            self.on_log_dir_failure(log_dir)

    # -- the dirs' lock and meta.properties ----------------------------------
    def lock_log_dirs(self) -> None:
        """Lock every live log dir (Kafka ``lockLogDirs``). ``LogDirLockedError`` if another
        broker holds one (the locks taken so far are released); a dir whose lock file
        cannot be used goes offline."""
        for log_dir in self.live_log_dirs:
            if log_dir in self._dir_locks:
                continue
            try:
                self._dir_locks[log_dir] = LogDirLock.acquire(log_dir)
            except OSError as exc:
                self.mark_offline(log_dir, f"locking it failed: {exc}")
            except BaseException:
                self.release_locks()
                raise

    def release_locks(self) -> None:
        """Release every log dir lock (``shutdown`` does, last)."""
        for lock in self._dir_locks.values():
            lock.release()
        self._dir_locks.clear()

    def read_broker_metadata(self) -> dict[Path, BrokerMetadata]:
        """Each live dir's ``meta.properties``, for the dirs that have one (Kafka
        ``getBrokerMetadataAndOfflineDirs``); a dir whose file is unreadable goes offline.
        ``MetaPropertiesError`` for a file without a valid ``broker.id``."""
        found = {}
        for log_dir in self.live_log_dirs:
            try:
                metadata = read_meta_properties(log_dir)
            except OSError as exc:
                self.mark_offline(log_dir, f"reading its meta.properties failed: {exc}")
                continue
            if metadata is not None:
                found[log_dir] = metadata
        self._broker_metadata = dict(found)
        return found

    def checkpoint_broker_metadata(self, metadata: BrokerMetadata, now_s: float) -> None:
        """Write ``meta.properties`` into every live dir whose file is missing or differs
        (Kafka ``checkpointBrokerMetadata``, once the broker is registered)."""
        for log_dir in self.live_log_dirs:
            if self._broker_metadata.get(log_dir) == metadata:
                continue
            try:
                write_meta_properties(log_dir, metadata, now_s)
            except OSError as exc:
                self.fail_log_dir(log_dir, "writing its meta.properties", exc)
                continue
            self._broker_metadata[log_dir] = metadata

    # -- loading ---------------------------------------------------------
    def startup(self, now_ms: int, topic_configs: Mapping[str, LogConfig] | None = None) -> None:
        """Load every partition directory of every log dir, then remove the clean marker.

        ``topic_configs`` gives per-topic configs; other topics use the default.
        """
        topic_configs = topic_configs or {}
        for log_dir in self.live_log_dirs:
            try:
                self._load_dir(log_dir, now_ms, topic_configs)
            except OSError as exc:
                for tp in [tp for tp, d in self._dir_of.items() if d == log_dir]:
                    self._topic_ids.pop(tp, None)
                self.handle_log_dir_failure(log_dir)  # the logs it did load
                self.fail_log_dir(log_dir, "loading its logs", exc)

    def _load_dir(self, log_dir: Path, now_ms: int, topic_configs: Mapping[str, LogConfig]) -> None:
        marker = log_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        recovery_points = self._read_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT)
        start_offsets = self._read_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT)
        for sub in sorted(log_dir.iterdir()):
            if not sub.is_dir():
                continue
            if sub.name.endswith(DELETE_DIR_SUFFIX):
                log.info("removing partially deleted log %s", sub)
                shutil.rmtree(sub, ignore_errors=True)
                continue
            try:
                tp = parse_topic_partition(sub.name)
            except ValueError:
                log.warning("ignoring %s: not a <topic>-<partition> directory", sub)
                continue
            if tp in self._logs:
                raise RuntimeError(
                    f"duplicate log directories for {tp[0]}-{tp[1]}: {self._dir_of[tp]} and {log_dir}"
                )
            self._logs[tp] = Log.open(
                sub,
                topic_configs.get(tp[0], self.default_config),
                recovery_point=recovery_points.get(tp, 0),
                log_start_offset=start_offsets.get(tp, 0),
                now_ms=now_ms,
                clean_shutdown=clean,
            )
            self._dir_of[tp] = log_dir
            try:
                topic_id = read_partition_metadata(sub)
            except PartitionMetadataError as exc:
                # Written atomically, so damage is not a torn write; the next
                # LeaderAndIsr with an id writes the file again.
                log.warning("ignoring unreadable partition metadata: %s", exc)
                topic_id = None
            if topic_id is not None:
                self._topic_ids[tp] = topic_id
        if clean:
            marker.unlink()
            fsync_dir(log_dir)
        log.info(
            "loaded %d log(s) from %s (%s shutdown)",
            sum(1 for d in self._dir_of.values() if d == log_dir),
            log_dir,
            "clean" if clean else "unclean",
        )

    @staticmethod
    def _read_checkpoint(path: Path) -> dict[TopicPartition, int]:
        try:
            return OffsetCheckpointFile(path).read()
        except CheckpointError as exc:
            log.warning("ignoring unreadable checkpoint (full recovery follows): %s", exc)
            return {}

    # -- the log cleaner ---------------------------------------------------
    def start_cleaner(self, owner: Owner, *, use_processes: bool = True) -> None:
        """Start the log cleaner if ``log.cleaner.enable`` and ``log.cleaner.threads`` say so."""
        config = self.cleaner_config
        if config is None or not config.enable_cleaner or config.num_threads < 1:
            return
        manager = LogCleanerManager(self.log_dirs, lambda: self._logs, self._dir_of.get)
        self.cleaner = LogCleaner(config, manager, owner, use_processes=use_processes)
        self.cleaner.startup()

    def stop_cleaner(self) -> None:
        """Stop the log cleaner; call it off the owner's thread (see the module docstring)."""
        cleaner, self.cleaner = self.cleaner, None
        if cleaner is not None:
            cleaner.shutdown()

    # -- lookup ----------------------------------------------------------
    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[Log]:
        return list(self._logs.values())

    def local_partitions_on_disk(self) -> set[TopicPartition]:
        return set(self._logs)

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        return self._dir_of.get((topic, partition))

    def topic_id(self, topic: str, partition: int) -> uuid.UUID | None:
        """The topic id recorded in the partition's ``partition.metadata``, if any."""
        return self._topic_ids.get((topic, partition))

    def assign_topic_id(self, topic: str, partition: int, topic_id: uuid.UUID) -> bool:
        """Record the partition's topic id in ``partition.metadata`` (Kafka
        ``UnifiedLog.assignTopicId``): written once, when the log has none. Raises
        ``InconsistentTopicId`` if the log already belongs to another id, KeyError if
        there is no such log. False if the write failed, which took the log dir offline."""
        tp = (topic, partition)
        target = self._logs[tp]
        current = self._topic_ids.get(tp)
        if current == topic_id:
            return True
        if current is not None:
            raise InconsistentTopicId(
                f"{topic}-{partition} belongs to topic id {current}, not {topic_id}"
            )
        try:
            write_partition_metadata(target.dir, topic_id, durable=False)
        except OSError as exc:
            self.fail_log_dir(self._dir_of[tp], f"writing {target.dir.name}'s metadata", exc)
            return False
        self._topic_ids[tp] = topic_id
        self._unflushed_topic_ids.add(tp)
        return True

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig, now_ms: int) -> Log:
        """The existing log, or a new empty one in the log dir holding fewest partitions."""
        tp = (topic, partition)
        existing = self._logs.get(tp)
        if existing is not None:
            return existing
        if not topic or partition < 0 or "/" in topic or " " in topic:
            raise ValueError(f"invalid topic partition {topic!r} {partition}")
        live = self.live_log_dirs
        if not live:
            raise LogDirOfflineError(f"no live log dir for {topic}-{partition}")
        if len(live) == 1:
            log_dir = live[0]
        else:
            counts = dict.fromkeys(live, 0)
            for d in self._dir_of.values():
                if d in counts:
                    counts[d] += 1
            log_dir = min(live, key=lambda d: counts[d])
        try:
            new_log = Log.open(
                log_dir / f"{topic}-{partition}",
                config,
                recovery_point=0,
                log_start_offset=0,
                now_ms=now_ms,
                clean_shutdown=True,
            )
            fsync_dir(log_dir)
        except OSError as exc:
            self.fail_log_dir(log_dir, f"creating the log of {topic}-{partition}", exc)
            raise
        self._logs[tp] = new_log
        self._dir_of[tp] = log_dir
        log.info("created log %s-%d in %s", topic, partition, log_dir)
        return new_log

    def delete_log(self, topic: str, partition: int) -> None:
        """Close the log and remove its directory (renamed to ``*-delete`` first, as Kafka does)."""
        tp = (topic, partition)
        target = self._logs.pop(tp, None)
        log_dir = self._dir_of.pop(tp, None)
        self._topic_ids.pop(tp, None)
        self._unflushed_topic_ids.discard(tp)
        if target is None or log_dir is None:
            return
        if self.cleaner is not None:
            self.cleaner.manager.remove_log(tp, log_dir)
        try:
            target.delete_files()
            self._deleted += 1
            doomed = log_dir / f"{target.dir.name}.{os.getpid()}-{self._deleted}{DELETE_DIR_SUFFIX}"
            os.replace(target.dir, doomed)
            fsync_dir(log_dir)
            shutil.rmtree(doomed, ignore_errors=True)
            self._checkpoint_dir(log_dir)
        except OSError as exc:
            self.fail_log_dir(log_dir, f"deleting the log of {topic}-{partition}", exc)
            return
        log.info("deleted log %s-%d", topic, partition)

    # -- maintenance -----------------------------------------------------
    def cleanup_logs(self, now_ms: int) -> int:
        """Retention across all logs; returns the number of segments deleted."""
        deleted = 0
        for tp, each in list(self._logs.items()):
            log_dir = self._dir_of.get(tp)  # None: its dir went offline meanwhile
            if log_dir is None or self.is_offline(log_dir):
                continue
            try:
                deleted += each.delete_old_segments(now_ms)
            except OSError as exc:
                self.fail_log_dir(log_dir, f"retention of {tp[0]}-{tp[1]}", exc)
        return deleted

    def flush_dirty_logs(self) -> None:
        """fsync every log with data past its recovery point, changed epoch caches and
        newly written ``partition.metadata`` files."""
        for _ in self.flush_dirty_log_steps():
            pass

    def flush_dirty_log_steps(self) -> Iterator[None]:
        """``flush_dirty_logs`` one log at a time: yields after each log it flushed, so
        the owner can serve requests in between (``Broker`` yields its event loop every
        few milliseconds). After a LeaderAndIsr of 10,000 partitions, each has an epoch
        checkpoint to write durably: two fsyncs each, seconds in all, which held the
        broker's event loop in one piece. Logs created, deleted or failed between steps
        are taken as they are at their step."""
        for tp, each in list(self._logs.items()):
            log_dir = self._dir_of.get(tp)  # None: its dir went offline meanwhile
            if log_dir is None or self.is_offline(log_dir) or self._logs.get(tp) is not each:
                continue
            if each.recovery_point < each.log_end_offset:
                flush = each.flush
            elif each.leader_epoch_cache.dirty:
                flush = each.leader_epoch_cache.flush
            else:
                continue  # nothing to write: no step
            try:
                flush()
            except OSError as exc:
                self.fail_log_dir(log_dir, f"flushing {tp[0]}-{tp[1]}", exc)
            yield
        yield from self._flush_partition_metadata()

    def _flush_partition_metadata(self) -> Iterator[None]:
        """fsync the ``partition.metadata`` files written since the last time, yielding
        after each; one left when the steps stop early stays for the next call."""
        for tp in sorted(self._unflushed_topic_ids):
            if tp not in self._unflushed_topic_ids:
                continue  # its log was deleted or its dir failed between steps
            self._unflushed_topic_ids.discard(tp)
            target, log_dir = self._logs.get(tp), self._dir_of.get(tp)
            if target is not None and log_dir is not None and not self.is_offline(log_dir):
                try:
                    flush_partition_metadata(target.dir)
                except OSError as exc:
                    self.fail_log_dir(log_dir, f"flushing {target.dir.name}'s metadata", exc)
                yield

    def flush_and_checkpoint(self, topic: str, partition: int) -> None:
        """fsync one log up to its end, then write its dir's checkpoints, so that its
        recovery point survives an OS crash: a leader about to become the only replica
        that holds its acknowledged records (an ISR shrinking below
        ``min.insync.replicas``) makes them durable first. A failure takes the dir offline."""
        tp = (topic, partition)
        target, log_dir = self._logs.get(tp), self._dir_of.get(tp)
        if target is None or log_dir is None or self.is_offline(log_dir):
            return
        if target.recovery_point >= target.log_end_offset:
            return
        try:
            target.flush()
            self._checkpoint_dir(log_dir)
        except OSError as exc:
            self.fail_log_dir(log_dir, f"flushing {topic}-{partition}", exc)

    def checkpoint(self) -> None:
        """Write the recovery point and log start offset checkpoints of every live log dir."""
        for log_dir in self.live_log_dirs:
            try:
                self._checkpoint_dir(log_dir)
            except OSError as exc:
                self.fail_log_dir(log_dir, "writing its checkpoints", exc)

    def _checkpoint_dir(self, log_dir: Path) -> None:
        logs = {tp: lg for tp, lg in self._logs.items() if self._dir_of[tp] == log_dir}
        OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).write(
            {tp: lg.recovery_point for tp, lg in logs.items()}
        )
        OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT).write(
            {tp: lg.log_start_offset for tp, lg in logs.items()}
        )

    def shutdown(self) -> None:
        """Flush and close every log, checkpoint, and mark each live log dir cleanly shut
        down (an offline dir, or one failing now, gets no marker: recovery at the next
        start)."""

        def flush_and_close(tp: TopicPartition) -> None:
            try:
                self._logs[tp].flush()
                self._logs[tp].close()
            except OSError as exc:
                self.mark_offline(self._dir_of[tp], f"flushing {tp[0]}-{tp[1]} failed: {exc}")

        threads = self.shutdown_threads_per_dir * len(self.log_dirs)
        if threads > 1 and len(self._logs) > 1:
            with ThreadPoolExecutor(threads, thread_name_prefix="log-shutdown") as pool:
                list(pool.map(flush_and_close, list(self._logs)))
        else:
            for tp in list(self._logs):
                flush_and_close(tp)
        for _ in self._flush_partition_metadata():
            pass
        self.checkpoint()
        for log_dir in self.live_log_dirs:
            try:
                atomic_write(log_dir / CLEAN_SHUTDOWN_FILE, b"")
            except OSError as exc:
                self.mark_offline(log_dir, f"writing the clean shutdown marker failed: {exc}")
        self.release_locks()
        log.info("log manager shut down cleanly (%d logs)", len(self._logs))
