"""The log cleaner service (Kafka ``LogCleaner`` and its ``CleanerThread``s).

``log.cleaner.threads`` threads each loop: ask the owner of the logs for the filthiest
compacted log (``LogCleanerManager.grab_filthiest_compacted_log``), have it cleaned,
hand each cleaned group back to the owner to swap in, record the checkpoint; with
nothing to clean, wait ``log.cleaner.backoff.ms``.

Where the work runs: a ``Cleaner`` reads and rewrites whole segments, per record, in
Python. In a thread it would hold the GIL for most of that time and slow the event loop
that serves produce and fetch, so in the broker each cleaner thread drives its own
worker process (``ProcessRunner``: ``python -m replog.storage.cleaner_worker``, started
at the first cleaning) and only waits on a pipe. ``InThreadRunner`` runs the same
``Cleaner`` in the thread (tests, tools). Each worker gets an equal share of
``log.cleaner.dedupe.buffer.size`` (as Kafka's threads do) and of
``log.cleaner.io.max.bytes.per.second`` (Kafka's threads share one throttler).

Concurrency: the ``Log`` objects belong to their owner, the broker's event loop. A
cleaner thread never touches them: every call that does (choosing a log, swapping a
group in, checking a plan) is handed to the owner through ``owner`` (``LoopOwner``:
``loop.call_soon_threadsafe`` and a future) and waits for its result. A swap re-checks
on the owner that the segments cleaned are still the live ones (no truncation, no
deletion, same sizes) and is refused otherwise, so a cleaning that raced a truncation,
a retention pass or a deletion is dropped, never swapped in.
"""

from __future__ import annotations

import concurrent.futures
import logging
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Protocol, TypeVar

from replog.protocol.records import InvalidRecordBatch
from replog.storage.cleaner import (
    IO_BUFFER_SIZE,
    CleanedGroup,
    Cleaner,
    CleaningAborted,
    CleaningTask,
    CleanResult,
)
from replog.storage.cleaner_manager import CleaningPlan, LogCleanerManager
from replog.storage.cleaner_throttler import throttler_for
from replog.storage.offset_map import OffsetMap

log = logging.getLogger(__name__)

T = TypeVar("T")
Owner = Callable[[Callable[[], T]], T]
"""Runs a function on the logs' owner and returns its result (or raises its exception)."""


@dataclass(frozen=True)
class CleanerConfig:
    """The broker's ``log.cleaner.*`` settings (Kafka ``CleanerConfig``)."""

    enable_cleaner: bool = True
    num_threads: int = 1
    dedupe_buffer_size: int = 128 * 1024 * 1024
    max_io_bytes_per_second: float = sys.float_info.max
    backoff_ms: int = 15000
    io_buffer_size: int = IO_BUFFER_SIZE


def direct_owner(fn: Callable[[], T]) -> T:
    """For tests and tools where nothing else touches the logs meanwhile."""
    return fn()


class LoopOwner:
    """Runs functions on an asyncio loop, from another thread, and waits for the result.

    Once ``stopping`` is set a call not yet started is cancelled (CleaningAborted), so a
    thread never waits on a loop that is shutting down.
    """

    def __init__(self, loop: Any) -> None:
        self.loop = loop
        self.stopping = threading.Event()

    def __call__(self, fn: Callable[[], T]) -> T:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def call() -> None:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as exc:
                    future.set_exception(exc)

        try:
            self.loop.call_soon_threadsafe(call)
        except RuntimeError:
            raise CleaningAborted("the event loop is closed") from None
        while True:
            try:
                return future.result(timeout=0.25)
            except concurrent.futures.TimeoutError:
                if self.stopping.is_set() and future.cancel():
                    raise CleaningAborted("shutting down") from None


MAX_WORKER_DEATHS = 3  # cleanings of one log that killed its worker before it is skipped


class WorkerDied(Exception):
    """The cleaner's worker process exited mid-cleaning (killed, out of memory)."""


class Runner(Protocol):
    def clean(
        self,
        task: CleaningTask,
        swap: Callable[[CleanedGroup], bool],
        should_abort: Callable[[], bool],
    ) -> CleanResult: ...

    def close(self) -> None: ...


class InThreadRunner:
    """The ``Cleaner`` in the calling thread."""

    def __init__(self, memory: int, rate: float, io_buffer_size: int = IO_BUFFER_SIZE) -> None:
        self.cleaner = Cleaner(
            OffsetMap(memory), throttler=throttler_for(rate), io_buffer_size=io_buffer_size
        )

    def clean(
        self,
        task: CleaningTask,
        swap: Callable[[CleanedGroup], bool],
        should_abort: Callable[[], bool],
    ) -> CleanResult:
        def check_done() -> None:
            if should_abort():
                raise CleaningAborted(f"{task.name}: cleaning aborted")

        self.cleaner.check_done = check_done
        return self.cleaner.clean(task, swap)

    def close(self) -> None:
        pass


class ProcessRunner:
    """The ``Cleaner`` in a worker process, over a socket pair (pickled tuples).

    To the worker: ``("clean", seq, task)``, ``("swapped", seq, ok)``, ``("abort", seq)``,
    ``("exit",)``. From it: ``(seq, kind, payload)`` with kind ``group`` (a cleaned group
    to swap; the worker waits for ``swapped``), ``done``, ``aborted``, ``invalid`` (a bad
    batch), ``oserror`` or ``error``. ``seq`` numbers the cleanings, so a message left
    from an abandoned one is ignored on both sides. The worker exits when the socket
    closes, so a killed broker leaves no cleaner behind (it deletes its partial
    ``.cleaned`` file on the way out).
    """

    def __init__(self, memory: int, rate: float, io_buffer_size: int = IO_BUFFER_SIZE) -> None:
        self._init = ("init", memory, rate, io_buffer_size)
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._seq = 0

    def _started(self) -> Connection:
        if self._proc is not None and self._proc.poll() is None and self._conn is not None:
            return self._conn
        self.close()
        parent, child = socket.socketpair()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "replog.storage.cleaner_worker", str(child.fileno())],
                pass_fds=(child.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        finally:
            child.close()
        self._conn = Connection(parent.detach())
        self._conn.send(self._init)
        log.info("started log cleaner worker process %d", self._proc.pid)
        return self._conn

    def clean(
        self,
        task: CleaningTask,
        swap: Callable[[CleanedGroup], bool],
        should_abort: Callable[[], bool],
    ) -> CleanResult:
        conn = self._started()
        self._seq += 1
        seq = self._seq
        conn.send(("clean", seq, task))
        abort_sent = False
        while True:
            if not conn.poll(0.1):
                if not abort_sent and should_abort():
                    conn.send(("abort", seq))
                    abort_sent = True
                if self._proc is not None and self._proc.poll() is not None:
                    code = self._proc.returncode
                    self.close()
                    raise WorkerDied(f"the log cleaner worker exited ({code})")
                continue
            try:
                msg_seq, kind, payload = conn.recv()
            except (EOFError, OSError):
                self.close()
                raise WorkerDied("the log cleaner worker's socket closed") from None
            if msg_seq != seq:
                continue
            if kind == "group":
                ok = False
                try:
                    ok = not abort_sent and not should_abort() and swap(payload)
                finally:
                    conn.send(("swapped", seq, ok))
            elif kind == "done":
                return payload
            elif kind == "aborted":
                raise CleaningAborted(payload)
            elif kind == "invalid":
                raise InvalidRecordBatch(payload)
            elif kind == "oserror":
                raise OSError(*payload)
            else:
                raise RuntimeError(f"{task.name}: the log cleaner worker failed: {payload}")

    def close(self) -> None:
        conn, proc = self._conn, self._proc
        self._conn = self._proc = None
        if conn is not None:
            try:
                conn.send(("exit",))
            except OSError:
                pass
            conn.close()
        if proc is not None:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class CleanerThread(threading.Thread):
    def __init__(
        self,
        index: int,
        manager: LogCleanerManager,
        owner: Owner,
        runner: Runner,
        backoff_ms: int,
        stop: threading.Event,
        clock: Callable[[], float],
    ) -> None:
        super().__init__(name=f"kafka-log-cleaner-thread-{index}", daemon=True)
        self.manager = manager
        self.owner = owner
        self.runner = runner
        self.backoff_s = backoff_ms / 1000
        self.stop = stop
        self.clock = clock
        self.worker_deaths: dict[tuple[str, int], int] = {}

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                try:
                    cleaned = self.clean_filthiest_log()
                except CleaningAborted:
                    cleaned = False
                except Exception:
                    log.exception("%s: unexpected error", self.name)
                    cleaned = False
                if not cleaned:
                    self.stop.wait(self.backoff_s)
        finally:
            self.runner.close()

    def clean_filthiest_log(self) -> bool:
        """Clean the filthiest log if one is due; False when there was nothing to do or an
        I/O error asks for a pause (Kafka ``tryCleanFilthiestLog``)."""
        now_ms = int(self.clock() * 1000)
        plan = self.owner(lambda: self.manager.grab_filthiest_compacted_log(now_ms))
        if plan is None:
            return False
        end_offset: int | None = None
        horizon: int | None = None
        log.info(
            "%s: beginning cleaning of offsets [%d, %d)",
            plan.task.name,
            plan.task.first_dirty_offset,
            plan.task.first_uncleanable_offset,
        )
        try:
            result = self.runner.clean(
                plan.task,
                swap=lambda group: self.owner(lambda: self.manager.swap_cleaned_group(plan, group)),
                should_abort=lambda: self.stop.is_set() or self.manager.is_aborted(plan.tp),
            )
            end_offset, horizon = result.end_offset, result.tombstone_horizon
            self.worker_deaths.pop(plan.tp, None)
            log.info("%s", result.stats.summary(plan.task.name))
        except CleaningAborted as exc:
            log.info("%s: cleaning aborted (%s)", plan.task.name, exc)
        except InvalidRecordBatch as exc:
            self._on_bad_batch(plan, exc)
        except OSError as exc:
            log.error(
                "%s: I/O error while cleaning (%s); the old segments stay, cleaning resumes "
                "after log.cleaner.backoff.ms",
                plan.task.name,
                exc,
            )
            return False
        except WorkerDied as exc:
            deaths = self.worker_deaths[plan.tp] = self.worker_deaths.get(plan.tp, 0) + 1
            if deaths >= MAX_WORKER_DEATHS:
                log.error(
                    "%s: %s %d times; the log is marked uncleanable", plan.task.name, exc, deaths
                )
                self.manager.mark_uncleanable(plan.tp)
            else:
                log.warning("%s: %s; a new worker retries after the backoff", plan.task.name, exc)
            return False
        except Exception:
            log.exception("%s: cleaning failed; the log is marked uncleanable", plan.task.name)
            self.manager.mark_uncleanable(plan.tp)
        finally:
            self.manager.done_cleaning(plan, end_offset, horizon)
        return True

    def _on_bad_batch(self, plan: CleaningPlan, exc: Exception) -> None:
        """A batch that did not read right: the log changed under the read (retried), or a
        segment is corrupt (logged; the log is skipped, nothing is deleted)."""
        try:
            unchanged = self.owner(lambda: self.manager.still_planned(plan))
        except CleaningAborted:
            return
        if unchanged:
            log.error(
                "%s: the log cleaner found a corrupt segment (%s); this log is not cleaned "
                "again until the broker restarts, its segments are left as they are",
                plan.task.name,
                exc,
            )
            self.manager.mark_uncleanable(plan.tp)
        else:
            log.info("%s: the log changed while it was cleaned (%s); retrying", plan.task.name, exc)


class LogCleaner:
    """``num_threads`` cleaner threads over the logs ``manager`` sees."""

    def __init__(
        self,
        config: CleanerConfig,
        manager: LogCleanerManager,
        owner: Owner,
        *,
        use_processes: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.manager = manager
        self.owner = owner
        self._stop = threading.Event()
        threads = max(config.num_threads, 1)
        memory = config.dedupe_buffer_size // threads
        rate = config.max_io_bytes_per_second / threads
        make = ProcessRunner if use_processes else InThreadRunner
        self.threads = [
            CleanerThread(
                i,
                manager,
                owner,
                make(memory, rate, config.io_buffer_size),
                config.backoff_ms,
                self._stop,
                clock,
            )
            for i in range(config.num_threads)
        ]

    def startup(self) -> None:
        log.info("starting the log cleaner (%d thread(s))", len(self.threads))
        for thread in self.threads:
            thread.start()

    def shutdown(self) -> None:
        """Stop the threads (aborting cleanings under way) and their workers. Call it off the
        owner's thread: the threads may be waiting for the owner."""
        self._stop.set()
        stopping = getattr(self.owner, "stopping", None)
        if isinstance(stopping, threading.Event):
            stopping.set()
        for thread in self.threads:
            if thread.is_alive():
                thread.join()
        log.info("log cleaner stopped")
