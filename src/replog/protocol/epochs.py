"""The leader epoch answer that several layers share (KIP-101, KIP-279).

``EpochEndOffset`` is one partition of an ``OffsetsForLeaderEpoch`` answer: the
storage layer's epoch cache computes it, the fetch codec carries it (a fetch
response's ``diverging_epoch``), the replication layer truncates with it. It lives
here, at the bottom, so that ``protocol`` needs nothing from ``storage``.

Concurrency: immutable values; safe anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_END_OFFSET",
    "UNDEFINED_EPOCH_OFFSET",
    "EpochEndOffset",
]

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """One partition of an ``OffsetsForLeaderEpoch`` answer.

    ``leader_epoch`` is the largest epoch <= the requested one that the
    answering log knows, ``end_offset`` the offset where that epoch ends
    (the start of the next epoch, or the log end offset for the latest).
    Both are ``-1`` (UNDEFINED) when the answering log has no usable entry.
    """

    leader_epoch: int
    end_offset: int

    @property
    def is_undefined(self) -> bool:
        return self.end_offset == UNDEFINED_EPOCH_OFFSET


UNDEFINED_EPOCH_END_OFFSET = EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
