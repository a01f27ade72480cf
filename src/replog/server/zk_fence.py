"""A broker cut off from ZooKeeper stops leading once its session is surely gone.

In Kafka's ZooKeeper mode a leader that loses ZooKeeper keeps leading: its metadata still
names it, so producers keep sending to it while the controller (which saw the session
expire) has already elected another leader. Their writes wait for acknowledgements that
cannot come (acks=all) or are acknowledged and then truncated away (acks=1) until the
network heals. replog fences itself instead, as KRaft brokers do when their heartbeats
stop:

* the connection drops (kazoo SUSPENDED): a timer of ``zookeeper.session.timeout.ms``
  starts. kazoo pings every third of the session timeout and drops a connection whose ping
  went unanswered until the next one, so the last word from ZooKeeper came at least a third
  of the timeout before the drop: a standalone ZooKeeper has expired the session by the
  time the timer fires. An ensemble that changes leaders keeps its sessions and starts
  their clocks again, so there a session can outlive the timer (two thirds of the timeout
  would do for one server; the whole timeout fences fewer brokers that would have
  reconnected);
* the timer fires, or kazoo reports the session LOST: ``fence`` runs. Every partition led
  here stops leading, and clients are turned away (their connections closed) until the
  controller's next UpdateMetadata, so they ask the other brokers, whose metadata names
  the new leaders;
* the connection comes back with the same session after the fence (the ensemble case):
  this broker resigned while the controller still counts on it, so ``rejoin`` registers
  again, and the controller, seeing a new broker epoch, sends fresh LeaderAndIsr requests;
* a new session (the usual end): the broker registers again and the controller's
  LeaderAndIsr at newer epochs restores its roles; the next UpdateMetadata lifts the
  metadata fence.

Concurrency: ``on_state`` is a session listener called on kazoo's thread; everything else
runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from replog.zk.ops import ZkSessionState

log = logging.getLogger(__name__)


class ZkSessionFence:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        session_timeout_s: float,
        fence: Callable[[], None],
        rejoin: Callable[[], Awaitable[None]],
    ) -> None:
        self._loop = loop
        self._timeout_s = session_timeout_s
        self._delay_s = session_timeout_s  # (see the module docstring)
        self._fence = fence
        self._rejoin = rejoin
        self._timer: asyncio.TimerHandle | None = None
        self.fenced = False
        self._rejoining: asyncio.Task[None] | None = None
        self._closed = False

    def on_state(self, state: ZkSessionState) -> None:
        """kazoo's thread: hand the state to the event loop."""
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.handle, state)

    def handle(self, state: ZkSessionState) -> None:
        if self._closed:  # (closing the client on shutdown reports LOST)
            return
        if state is ZkSessionState.SUSPENDED:
            if self._timer is None and not self.fenced:
                self._timer = self._loop.call_later(self._delay_s, self._expire, "timed out")
        elif state is ZkSessionState.LOST:
            self._expire("reported lost")
        else:
            self._cancel_timer()
            if state is ZkSessionState.CONNECTED and self.fenced:
                log.warning("ZooKeeper session survived the fence; registering again")
                self._rejoining = self._loop.create_task(self._rejoin())
            # (after a new session the re-registration brings LeaderAndIsr at newer epochs)
            self.fenced = False

    def _expire(self, how: str) -> None:
        self._cancel_timer()
        if self.fenced:
            return
        self.fenced = True
        log.warning(
            "ZooKeeper session %s (no contact for longer than its timeout, %.1f s): "
            "no longer leading",
            how,
            self._timeout_s,
        )
        self._fence()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def close(self) -> None:
        self._closed = True
        self._cancel_timer()
        if self._rejoining is not None:
            self._rejoining.cancel()
