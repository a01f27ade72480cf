"""KIP-595's check of a fetch's ``last_fetched_epoch`` (Kafka ``Partition.readRecords``).

The leader's epoch cache here: epoch 0 from offset 0, epoch 2 from 10 (epoch 1 wrote
nothing this leader kept), epoch 3 from 15; log end offset 20, log start offset 5. The
leader's OffsetsForLeaderEpoch answer comes from the same function the broker uses.
"""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from replog.protocol.epochs import EpochEndOffset
from replog.replication.fetch_rules import LastFetchedEpochCheck, check_last_fetched_epoch
from replog.storage.epoch_entries import end_offset_for_epoch

ENTRIES = [(0, 0), (2, 10), (3, 15)]
LOG_END = 20
LOG_START = 5


def check(last_fetched_epoch: int, fetch_offset: int) -> LastFetchedEpochCheck | None:
    return check_last_fetched_epoch(
        last_fetched_epoch=last_fetched_epoch,
        fetch_offset=fetch_offset,
        log_start_offset=LOG_START,
        epoch_end=end_offset_for_epoch(ENTRIES, LOG_END, last_fetched_epoch),
    )


@pytest.mark.parametrize(
    ("last_fetched_epoch", "fetch_offset"),
    [(0, 10), (0, 7), (2, 15), (2, 12), (3, 20), (3, 16)],
)
def test_a_fetch_within_its_epoch_reads_as_usual(last_fetched_epoch, fetch_offset) -> None:
    assert check(last_fetched_epoch, fetch_offset) is None


@pytest.mark.parametrize(
    ("last_fetched_epoch", "fetch_offset", "diverging"),
    [
        # records of epoch 1 this leader never kept: the log diverges where epoch 0 ends
        (1, 12, EpochEndOffset(0, 10)),
        (1, 10, EpochEndOffset(0, 10)),
        # a position past where the fetcher's last epoch ends in the leader's log
        (0, 11, EpochEndOffset(0, 10)),
        (2, 17, EpochEndOffset(2, 15)),
    ],
)
def test_a_diverging_fetch_is_told_where(last_fetched_epoch, fetch_offset, diverging) -> None:
    assert check(last_fetched_epoch, fetch_offset) == LastFetchedEpochCheck(
        ErrorCode.none, diverging
    )


def test_an_epoch_above_every_known_one_is_out_of_range() -> None:
    assert check(4, 20) == LastFetchedEpochCheck(ErrorCode.offset_out_of_range)


def test_an_offset_below_the_log_start_is_out_of_range_even_when_diverging() -> None:
    assert check(0, 3) == LastFetchedEpochCheck(ErrorCode.offset_out_of_range)
    assert check(1, 4) == LastFetchedEpochCheck(ErrorCode.offset_out_of_range)
