"""Every log record the simulated world makes the shipped code write must format.

A log call whose arguments do not match its format string loses the line (logging
prints a traceback to stderr and goes on), or prints its placeholders as they stand when
it has no arguments at all; no test saw either. The simulator's tests
hold ``replog``'s loggers at DEBUG while they run, format every record, and fail on a
record that does not format. Records at the level the loggers had before still reach
the root logger's handlers (pytest's capture), others go nowhere.

Concurrency: the world is single-threaded; the handler only appends to a list.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager

# a placeholder in a record made without arguments (logging prints it as it stands)
_PLACEHOLDER = re.compile(r"%[sdr]")


class _FormatEveryRecord(logging.Handler):
    def __init__(self, forward_from: int) -> None:
        super().__init__(logging.DEBUG)
        self.forward_from = forward_from
        self.records = 0
        self.failures: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records += 1
        try:
            record.getMessage()
            if not record.args and _PLACEHOLDER.search(str(record.msg)):
                raise TypeError("placeholders but no arguments")
        except Exception as exc:  # noqa: BLE001 - any formatting error is the finding
            self.failures.append(
                f"{record.pathname}:{record.lineno}: {exc!r} formatting {record.msg!r} "
                f"with {record.args!r}"
            )
            return
        if record.levelno >= self.forward_from:
            logging.getLogger().handle(record)


@contextmanager
def every_log_record_formats() -> Iterator[None]:
    logger = logging.getLogger("replog")
    handler = _FormatEveryRecord(logger.getEffectiveLevel())
    level, propagate = logger.level, logger.propagate
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
    assert not handler.failures, "log records that do not format:\n" + "\n".join(
        handler.failures[:10]
    )
