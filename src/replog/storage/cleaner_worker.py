"""The log cleaner's worker process: ``python -m replog.storage.cleaner_worker <fd>``.

One per cleaner thread (see ``cleaner_threads.ProcessRunner`` for the messages). It
runs ``Cleaner`` on the tasks it is sent, asks the broker to swap in each cleaned group
and waits for the answer, and stops a cleaning when asked (checked between chunks). It
exits when the socket to the broker closes: after a broker is killed, the worker drops
its partial ``.cleaned`` file and leaves within one chunk.

Concurrency: single-threaded.
"""

from __future__ import annotations

import logging
import sys
import traceback
from multiprocessing.connection import Connection

from replog.protocol.records import InvalidRecordBatch
from replog.storage.cleaner import CleanedGroup, Cleaner, CleaningAborted
from replog.storage.cleaner_throttler import throttler_for
from replog.storage.offset_map import OffsetMap

log = logging.getLogger("replog.storage.cleaner_worker")


class _BrokerGone(Exception):
    """The socket to the broker closed."""


class Worker:
    def __init__(self, conn: Connection, memory: int, rate: float, io_buffer_size: int) -> None:
        self.conn = conn
        self.seq = 0
        self.cleaner = Cleaner(
            OffsetMap(memory),
            throttler=throttler_for(rate),
            check_done=self._check_done,
            io_buffer_size=io_buffer_size,
        )

    def serve(self) -> None:
        while True:
            try:
                msg = self.conn.recv()
            except EOFError:
                return
            if msg[0] == "exit":
                return
            if msg[0] != "clean":
                continue  # a late answer or abort for an abandoned cleaning
            self.seq, task = msg[1], msg[2]
            try:
                reply: tuple = ("done", self.cleaner.clean(task, self._swap))
            except _BrokerGone:
                return
            except CleaningAborted as exc:
                reply = ("aborted", str(exc))
            except InvalidRecordBatch as exc:
                reply = ("invalid", str(exc))
            except OSError as exc:
                reply = ("oserror", (exc.errno, str(exc)))
            except Exception:
                reply = ("error", traceback.format_exc())
            if not self._send(reply):
                return

    def _send(self, reply: tuple) -> bool:
        try:
            self.conn.send((self.seq, *reply))
            return True
        except OSError:
            return False

    def _check_done(self) -> None:
        while self.conn.poll():
            try:
                msg = self.conn.recv()
            except EOFError:
                raise _BrokerGone() from None
            if msg[0] == "abort" and msg[1] == self.seq:
                raise CleaningAborted("asked to stop")
            if msg[0] == "exit":
                raise _BrokerGone()

    def _swap(self, group: CleanedGroup) -> bool:
        if not self._send(("group", group)):
            raise _BrokerGone()
        while True:
            try:
                msg = self.conn.recv()
            except EOFError:
                raise _BrokerGone() from None
            if msg[0] == "exit":
                raise _BrokerGone()
            if len(msg) < 2 or msg[1] != self.seq:
                continue
            if msg[0] == "swapped":
                return bool(msg[2])
            if msg[0] == "abort":
                return False


def main(argv: list[str]) -> int:
    logging.basicConfig(
        level=logging.INFO,
        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    conn = Connection(int(argv[1]))
    try:
        msg = conn.recv()
    except EOFError:
        return 0
    _, memory, rate, io_buffer_size = msg
    Worker(conn, memory, rate, io_buffer_size).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
