"""What a fetch at the leader gets, once fencing and leadership passed: the KIP-595
divergence check, the leader's replication throttle, the bounds of the read, and what a
follower's fetch changes in the ``LeaderState``. ``PartitionMachine.on_fetch`` asks it.

Concurrency: a pure function of its arguments (it moves the ``LeaderState`` it is given,
which its owner's task holds); not safe across awaits.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog.replication.actions import Action, FetchDecision, LogView
from replog.replication.core import LeaderState
from replog.replication.fetch_rules import (
    FetchBounds,
    check_last_fetched_epoch,
    fetch_bounds,
    fetch_isolation,
)
from replog.replication.truncation import end_offset_for_epoch
from replog.storage.producer_state import last_stable_offset


def decide_fetch(
    ls: LeaderState,
    log: LogView,
    replica_id: int,
    fetch_offset: int,
    now_ms: int,
    *,
    isolation_level: int,
    broker_epoch: int,
    isr_eligible: bool,
    follower_log_start_offset: int,
    last_fetched_epoch: int,
    replication_throttled: bool,
    first_unstable_offset: int | None = None,
) -> FetchDecision:
    """A fetch at leader ``ls``, after fencing and leadership passed, in Kafka's order:

    1. KIP-595: a fetcher that says which epoch its last record had
       (``last_fetched_epoch``, -1: none) and whose log diverges from ours gets
       ``diverging_epoch`` and no records (or OFFSET_OUT_OF_RANGE);
    2. the leader's throttle: ``replication_throttled`` (the replica is listed in
       ``leader.replication.throttled.replicas`` and the leader is over its quota, the
       driver's meter) answers a follower out of the ISR empty;
    3. the bounds of the read (``fetch_rules.fetch_bounds``);
    4. a follower's fetch moves its replica state (HW, ISR). ``isr_eligible`` is False
       when the controller does not count the follower as a live broker: a late fetch
       from a crashed follower must not bring it back into the ISR (KIP-903).
       ``follower_log_start_offset`` is the one the follower's fetch carries (the low
       watermark is the least of them).

    ``first_unstable_offset`` is the first offset of the log's oldest open transaction
    (None: none is open): the last stable offset answered, and read_committed's bound,
    is it, never past the HW nor below the log start (Kafka ``lastStableOffset``).
    """
    log_start = log.log_start_offset
    lso = last_stable_offset(ls.high_watermark, log_start, first_unstable_offset)
    if last_fetched_epoch >= 0:
        check = check_last_fetched_epoch(
            last_fetched_epoch=last_fetched_epoch,
            fetch_offset=fetch_offset,
            log_start_offset=log_start,
            epoch_end=end_offset_for_epoch(
                log.epoch_entries(), log.log_end_offset, last_fetched_epoch
            ),
        )
        if check is not None:
            return FetchDecision(
                check.error,
                high_watermark=ls.high_watermark,
                log_start_offset=log_start,
                last_stable_offset=lso,
                diverging_epoch=check.diverging_epoch,
            )
    if replication_throttled and replica_id >= 0 and replica_id not in ls.in_sync_replicas:
        return FetchDecision(
            ErrorCode.none,
            FetchBounds(ErrorCode.none, fetch_offset, fetch_offset),
            ls.high_watermark,
            log_start_offset=log_start,
            last_stable_offset=lso,
            throttled=True,
        )
    bounds = fetch_bounds(
        fetch_offset=fetch_offset,
        log_start_offset=log_start,
        high_watermark=ls.high_watermark,
        log_end_offset=log.log_end_offset,
        isolation=fetch_isolation(replica_id, isolation_level),
        last_stable_offset=lso,
    )
    if bounds.error is not ErrorCode.none:
        return FetchDecision(
            bounds.error, high_watermark=ls.high_watermark, log_start_offset=log_start
        )
    actions: list[Action] = []
    lost = False
    log_start_advanced = False
    if replica_id >= 0 and replica_id != ls.broker_id and replica_id in ls.assigned_replicas:
        log_start_before = ls.follower_log_start_offset(replica_id)
        outcome = ls.on_follower_fetch(
            replica_id,
            fetch_offset,
            now_ms,
            broker_epoch=broker_epoch,
            isr_eligible=isr_eligible,
            log_start_offset=follower_log_start_offset,
        )
        log_start_advanced = follower_log_start_offset > log_start_before
        lost = outcome.follower_lost_records
        if outcome.high_watermark_change is not None:
            actions.append(outcome.high_watermark_change)
        if outcome.isr_change is not None:
            actions.append(outcome.isr_change)
    return FetchDecision(
        ErrorCode.none,
        bounds,
        ls.high_watermark,
        tuple(actions),
        follower_lost_records=lost,
        follower_log_start_advanced=log_start_advanced,
        log_start_offset=log.log_start_offset,
        last_stable_offset=lso,
    )
