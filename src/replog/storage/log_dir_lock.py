"""The lock on a log dir: one broker per directory (Kafka's ``FileLock`` on ``<dir>/.lock``).

A broker takes an exclusive ``flock`` on ``<dir>/.lock`` in every log dir before it
writes anything there, and holds it for its whole life; ``LogManager.shutdown`` lets it
go after the clean-shutdown marker is written. A second broker (another process, or
another ``LogManager`` in this one: a ``flock`` belongs to the open file, not to the
process) is refused with Kafka's message. The kernel drops the lock when the holder's
process ends, however it ends, so a broker killed with SIGKILL leaves no stale lock.

``flock`` rather than ``fcntl``'s record locks (Java's ``FileChannel.tryLock``): a record
lock belongs to the process and any ``close`` of the file in that process drops it, so it
can neither refuse a second holder in the same process nor survive a careless ``open``.
The price: a Java Kafka broker does not see replog's lock, nor replog Kafka's.

The lock file is created empty and never written; opening an existing one changes
nothing, so a refused broker leaves the directory as it found it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_FILE = ".lock"


class LogDirLockedError(Exception):
    """Another broker holds the log dir (Kafka's ``KafkaException`` from ``lockLogDirs``);
    the message is Kafka's, in one line."""


class LogDirLock:
    """An exclusive lock on ``<log_dir>/.lock``, held from :meth:`acquire` to :meth:`release`.

    Concurrency: owned by the log manager; ``release`` is idempotent.
    """

    def __init__(self, log_dir: Path, fd: int) -> None:
        self.log_dir = log_dir
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, log_dir: Path) -> LogDirLock:
        """Lock ``log_dir`` without waiting. ``LogDirLockedError`` if another holder has it;
        ``OSError`` if the file cannot be opened or locked (a disk error: Kafka takes the
        dir offline)."""
        # Not inherited by the processes the broker starts (os.open's default, PEP 446).
        fd = os.open(log_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LogDirLockedError(
                f"Failed to acquire lock on file {LOCK_FILE} in {log_dir}. A Kafka instance "
                "in another process or thread is using this directory."
            ) from None
        except OSError:
            os.close(fd)
            raise
        return cls(log_dir, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor of the open file drops its flock
