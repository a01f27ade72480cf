"""DeleteRecords and the low watermark, as ``PartitionMachine`` decides them.

Kafka's rules (``Partition.deleteRecordsOnLeader``, ``lowWatermarkIfLeader``,
``DelayedDeleteRecords``): only the leader moves its log start; -1 means the
high watermark; a target below 0 or above the high watermark is
OFFSET_OUT_OF_RANGE; the answer waits until every live replica's log start (the
low watermark) reaches the target; a follower learns the leader's log start from
fetch answers and never moves past its own high watermark.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog.replication.actions import AdvanceLogStart
from replog.replication.delete_records import (
    DeleteRecordsStatus,
    delete_records_progress,
    delete_records_target,
    low_watermark,
)
from replog.replication.machine import PartitionLeadership, PartitionMachine
from replog.replication.truncation import TruncationDecision
from test_replication_machine import MemLog, lai


def everyone(_broker_id: int) -> bool:
    return True


def leader(*, leo: int = 10, hw: int = 10, start: int = 0) -> tuple[PartitionMachine, MemLog]:
    """Broker 1 leads (1, 2, 3) at epoch 5 with the whole ISR caught up to ``hw``."""
    log = MemLog(leo, start, ((5, 0),))
    m = PartitionMachine(
        1, log, high_watermark=hw, replica_lag_time_max_ms=1000, min_insync_replicas=1
    )
    error, _ = m.on_leader_and_isr(lai(1, 5), 0)
    assert error is ErrorCode.none and m.high_watermark == hw
    return m, log


def fetch(m: PartitionMachine, replica: int, offset: int, log_start: int):
    decision = m.on_fetch(replica, offset, 5, 1, follower_log_start_offset=log_start)
    assert decision.error is ErrorCode.none
    return decision


def test_the_pure_rules() -> None:
    assert delete_records_target(5, 10, delete_allowed=True) == (ErrorCode.none, 5)
    assert delete_records_target(-1, 10, delete_allowed=True) == (ErrorCode.none, 10)
    assert delete_records_target(0, 10, delete_allowed=True) == (ErrorCode.none, 0)
    for offset in (11, -2, -3):
        assert delete_records_target(offset, 10, delete_allowed=True)[0] is (
            ErrorCode.offset_out_of_range
        )
    assert delete_records_target(5, 10, delete_allowed=False)[0] is ErrorCode.policy_violation
    assert low_watermark(7, []) == 7
    assert low_watermark(7, [9, 3]) == 3
    assert low_watermark(7, [-1, 9]) == -1
    assert delete_records_progress(5, 5) == DeleteRecordsStatus(True, ErrorCode.none, 5)
    assert delete_records_progress(4, 5) == DeleteRecordsStatus(False, ErrorCode.none, 4)


def test_only_the_leader_deletes() -> None:
    log = MemLog(10, 0, ((5, 0),))
    m = PartitionMachine(
        1, log, high_watermark=4, replica_lag_time_max_ms=1000, min_insync_replicas=1
    )
    m.on_leader_and_isr(lai(2, 5), 0)  # a follower
    decision = m.delete_records(3, delete_allowed=True, is_live=everyone)
    assert decision.error is ErrorCode.not_leader_or_follower
    assert decision.actions == () and decision.low_watermark == -1
    assert m.low_watermark(everyone) is None


def test_offsets_outside_zero_to_high_watermark_are_out_of_range() -> None:
    m, _ = leader(leo=12, hw=10)
    for offset in (11, 12, -2, -5):
        decision = m.delete_records(offset, delete_allowed=True, is_live=everyone)
        assert decision.error is ErrorCode.offset_out_of_range, offset
        assert decision.actions == ()
    # the high watermark itself is allowed; -1 stands for it
    assert m.delete_records(10, delete_allowed=True, is_live=everyone).actions == (
        AdvanceLogStart(10),
    )
    minus_one = m.delete_records(-1, delete_allowed=True, is_live=everyone)
    assert minus_one.error is ErrorCode.none and minus_one.requested_offset == 10


def test_a_compacted_topic_refuses() -> None:
    m, _ = leader()
    decision = m.delete_records(3, delete_allowed=False, is_live=everyone)
    assert decision.error is ErrorCode.policy_violation and decision.actions == ()


def test_low_watermark_waits_for_every_live_follower() -> None:
    m, log = leader(leo=10, hw=10)
    # followers that have not fetched in this leadership count as -1 (Kafka's UnknownOffset)
    decision = m.delete_records(6, delete_allowed=True, is_live=everyone)
    assert decision.error is ErrorCode.none
    assert decision.actions == (AdvanceLogStart(6),)
    assert decision.requested_offset == 6 and decision.low_watermark == -1
    log.log_start_offset = 6  # the driver carried the action out
    epoch = m.leader_epoch  # the DeleteRecords was accepted at it
    assert m.delete_records_status(6, epoch, everyone) == DeleteRecordsStatus(
        False, low_watermark=-1
    )
    assert fetch(m, 2, 10, 0).follower_log_start_advanced
    assert fetch(m, 3, 10, 6).follower_log_start_advanced
    assert m.low_watermark(everyone) == 0
    assert not m.delete_records_status(6, epoch, everyone).done
    assert not fetch(m, 3, 10, 6).follower_log_start_advanced  # no news
    assert fetch(m, 2, 10, 6).follower_log_start_advanced
    assert m.delete_records_status(6, epoch, everyone) == DeleteRecordsStatus(
        True, ErrorCode.none, 6
    )


def test_dead_followers_do_not_hold_the_low_watermark() -> None:
    m, log = leader()
    log.log_start_offset = 4
    fetch(m, 2, 10, 4)

    def only_1_and_2(broker_id: int) -> bool:
        return broker_id in (1, 2)

    assert m.low_watermark(everyone) == -1  # broker 3 never fetched
    assert m.low_watermark(only_1_and_2) == 4


def test_an_offset_below_the_log_start_changes_nothing() -> None:
    m, log = leader(start=7)
    fetch(m, 2, 10, 7)
    fetch(m, 3, 10, 7)
    decision = m.delete_records(3, delete_allowed=True, is_live=everyone)
    assert decision.error is ErrorCode.none and decision.actions == ()
    assert (decision.requested_offset, decision.low_watermark) == (3, 7)
    assert m.delete_records_status(3, m.leader_epoch, everyone).done


def test_a_lost_leadership_ends_the_wait() -> None:
    m, _ = leader()
    decision = m.delete_records(5, delete_allowed=True, is_live=everyone)
    epoch = m.leader_epoch  # the DeleteRecords was accepted at it
    m.on_leader_and_isr(lai(2, 6), 0)
    assert m.delete_records_status(decision.requested_offset, epoch, everyone) == (
        DeleteRecordsStatus(True, ErrorCode.not_leader_or_follower)
    )


def test_a_follower_follows_the_leader_log_start_up_to_its_high_watermark() -> None:
    log = MemLog(8, 0, ((5, 0),))
    m = PartitionMachine(
        3, log, high_watermark=2, replica_lag_time_max_ms=1000, min_insync_replicas=1
    )
    m.on_leader_and_isr(PartitionLeadership(1, 5, (1, 2, 3), (1, 2, 3), 1, 1), 0)
    m.on_truncated(TruncationDecision(8, True))
    # the leader's HW is 6 and its log starts at 7: the follower (LEO 8) takes HW 6 first,
    # then moves its log start no further than that
    actions = m.on_fetch_response(leader_high_watermark=6, leader_log_start_offset=7)
    assert AdvanceLogStart(6) in actions
    log.log_start_offset = 6
    actions = m.on_fetch_response(leader_high_watermark=8, leader_log_start_offset=7)
    assert AdvanceLogStart(7) in actions
    log.log_start_offset = 7
    assert not any(
        isinstance(a, AdvanceLogStart)
        for a in m.on_fetch_response(leader_high_watermark=8, leader_log_start_offset=7)
    )


def test_validate_replica_request_fences_on_the_known_epoch_in_any_role() -> None:
    log = MemLog(8, 0, ((5, 0),))
    m = PartitionMachine(
        3, log, high_watermark=2, replica_lag_time_max_ms=1000, min_insync_replicas=1
    )
    assert m.validate_replica_request(-1) is ErrorCode.not_leader_or_follower
    m.on_leader_and_isr(lai(1, 5), 0)
    assert m.validate_replica_request(-1) is ErrorCode.none
    assert m.validate_replica_request(5) is ErrorCode.none
    assert m.validate_replica_request(4) is ErrorCode.fenced_leader_epoch
    assert m.validate_replica_request(6) is ErrorCode.unknown_leader_epoch


def test_a_new_leader_whose_high_watermark_lags_its_epoch_start() -> None:
    m, _ = leader(leo=10, hw=4)  # epoch 5 starts at 10, the HW is still 4
    assert m.high_watermark_behind_epoch_start
    fetch(m, 2, 10, 0)
    fetch(m, 3, 10, 0)
    assert m.high_watermark == 10 and not m.high_watermark_behind_epoch_start
