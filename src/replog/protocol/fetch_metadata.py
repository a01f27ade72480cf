"""A Fetch request's session id and epoch (KIP-227; Kafka ``FetchMetadata``).

Both ends of an incremental fetch session read these rules: the leader's session cache
(``replog.server.fetch_session``) and the follower's session handler
(``replog.replication.fetch_session_handler``).

* session id 0 is no session; epoch -1 (FINAL) asks for none, a sessionless full fetch;
* epoch 0 (INITIAL) is a full fetch that asks the leader to create a session (and to
  close the one it names, if any);
* any other epoch is an incremental fetch in the session named, which the leader
  expects at exactly that epoch; each answered request moves it on by ``next_epoch``.

Concurrency: immutable values and pure functions; safe anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1

FIRST_SESSION_VERSION = 7  # Fetch v7 adds session_id, session_epoch and forgotten topics


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``: FINAL stays FINAL, and past int32's top comes 1 (0 is
    INITIAL, which only a full fetch carries)."""
    if epoch < 0:
        return FINAL_EPOCH
    if epoch == MAX_EPOCH:
        return 1
    return epoch + 1


# A value, never changed once built, but not frozen: built on every request, and a frozen
# dataclass costs ~0.3 µs a field to build here (bench/README.md, issue 27).
@dataclass(slots=True, unsafe_hash=True)
class FetchMetadata:
    session_id: int
    epoch: int

    @property
    def is_full(self) -> bool:
        """A full fetch names every partition; an incremental one only what changed."""
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)

    def next_close_existing_attempt_new(self) -> FetchMetadata:
        """Close this session, if any, and ask for a new one (after an error)."""
        return FetchMetadata(self.session_id, INITIAL_EPOCH)

    def next_incremental(self) -> FetchMetadata:
        return FetchMetadata(self.session_id, next_epoch(self.epoch))

    @staticmethod
    def new_incremental(session_id: int) -> FetchMetadata:
        """The first incremental fetch of a session the leader just created."""
        return FetchMetadata(session_id, next_epoch(INITIAL_EPOCH))


INITIAL = FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)
"""A full fetch asking for a new session."""
LEGACY = FetchMetadata(INVALID_SESSION_ID, FINAL_EPOCH)
"""A sessionless full fetch (what a Fetch below v7 is, and what most clients send)."""
