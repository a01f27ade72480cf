"""Rules of the leader's fetch path checked from outside, around each fetch the simulated
brokers answer, followers' and consumers' alike: Kafka's fetch session cache (KIP-227) and
the incremental requests its clients build, the long-poll readiness a waiting fetch asks (``PartitionMachine.fetch_ready``), and the
replication throttle's answers.

Concurrency: pure checks, called by the single-threaded world.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from replog.server.fetch_session import FetchSession, FetchSessionCache

if TYPE_CHECKING:
    from replog.replication.actions import FetchDecision
    from replog.replication.fetch_rules import FetchPartitionRequest
    from replog.replication.fetch_session_handler import FetchRequestData
    from sim.broker import SimBroker
    from sim.world import World


def check_fetch_ready(
    world: World, broker: SimBroker, fetcher: str, ready: bool, decision: FetchDecision
) -> None:
    """``fetch_ready_disagrees``: a fetch that would wait (Kafka ``DelayedFetch``) is
    ready exactly when the read it waits for is not empty, while the broker leads. Asked
    before the read: ``ready`` is ``fetch_ready``'s answer for the fetch's offset."""
    ls = broker.machine.leader_state
    if ls is None or not ls.is_leading:
        if not ready:
            world.violation(
                "fetch_ready_disagrees", f"{fetcher} at b{broker.id}: not leading, not ready"
            )
        return
    if decision.error is not ErrorCode.none or decision.bounds is None:
        return
    if decision.diverging_epoch is not None or decision.throttled:
        return
    has_data = not decision.bounds.is_empty
    if ready != has_data:
        world.violation(
            "fetch_ready_disagrees",
            f"{fetcher} at b{broker.id}: ready={ready}, the read is "
            f"[{decision.bounds.start_offset}, {decision.bounds.end_offset})",
        )


def check_incremental_request(
    world: World,
    requester: str,
    before: dict[tuple[str, int], FetchPartitionRequest],
    data: FetchRequestData,
) -> None:
    """``fetch_session_resent_unchanged``: an incremental request (KIP-227) names only the
    partitions added to the session or changed since they were last sent (Kafka
    ``FetchSessionHandler.Builder``); ``before``: the session's partitions as last sent,
    taken before ``FetchSessionHandler.build`` made ``data``."""
    if data.metadata.is_full:
        return
    for p in data.to_send:
        if before.get((p.topic, p.partition)) == p:
            world.violation(
                "fetch_session_resent_unchanged",
                f"{requester}: {p.topic}-{p.partition} sent again unchanged in session "
                f"{data.metadata.session_id} at epoch {data.metadata.epoch}",
            )


def check_session_cache(
    world: World,
    cache: FetchSessionCache,
    before: dict[int, FetchSession],
    *,
    requester: str,
    privileged: bool,
    session_id: int,
    own_session: int,
    now_ms: int,
) -> None:
    """Kafka's eviction rules seen from outside, after one fetch's context was made and
    answered (``before``: the cache's sessions when the request came, ``session_id``: the
    one answered, ``own_session``: the one the request named, which a full fetch closes).

    * ``fetch_session_cache_full``: the cache never holds more than its slots.
    * ``fetch_session_follower_refused``: a follower's full fetch gets a session whenever
      the cache holds a consumer's (followers are privileged).
    * ``fetch_session_evicted_in_use``: a consumer's fetch never evicts a session used in
      the last ``min.incremental.fetch.session.eviction.ms`` unless it is a consumer's
      created longer ago than that; a follower's fetch evicts only consumers' sessions and
      sessions created or last used longer ago than that.
    """
    if len(cache.sessions) > cache.max_entries:
        world.violation(
            "fetch_session_cache_full",
            f"{len(cache.sessions)} sessions in a cache of {cache.max_entries}",
        )
    if privileged and session_id == 0 and any(not s.privileged for s in cache.sessions.values()):
        world.violation(
            "fetch_session_follower_refused",
            f"{requester}: no session while the cache holds a consumer's",
        )
    for sid, s in before.items():
        if sid in cache.sessions or sid == own_session:
            continue
        stale = now_ms - s.last_used_ms > cache.eviction_ms
        old = now_ms - s.creation_ms > cache.eviction_ms
        allowed = stale or (old if not privileged else old or not s.privileged)
        if s.privileged and not privileged:
            allowed = stale
        if not allowed:
            world.violation(
                "fetch_session_evicted_in_use",
                f"{requester}: evicted session {sid} (privileged={s.privileged}, created "
                f"{now_ms - s.creation_ms} ms ago, last used {now_ms - s.last_used_ms} ms ago)",
            )
        else:
            world.count("fetch_session_evicted")


def check_follower_answer(
    world: World, broker: SimBroker, follower: int, in_sync: bool, decision: FetchDecision
) -> None:
    """What a follower's fetch is answered, the replication throttle included (Kafka
    ``shouldLeaderThrottle``: only a follower out of the ISR is throttled, and then gets
    nothing to read):

    * ``throttled_in_sync``: a follower in the ISR when it fetched is never throttled;
    * ``throttled_with_records``: a throttled answer has nothing to read;
    * ``follower_answer_lso``: an answer without error carries a last stable offset, at
      most the HW it answers (which the fetch itself may have moved past the LSO read
      before it; no transaction is ever open here).
    """
    if decision.throttled:
        world.count("fetch_throttled")
        if in_sync:
            world.violation(
                "throttled_in_sync", f"b{follower} in the ISR throttled by b{broker.id}"
            )
        if decision.bounds is None or not decision.bounds.is_empty:
            world.violation(
                "throttled_with_records",
                f"b{follower} throttled by b{broker.id}: {decision.bounds}",
            )
    lso = decision.last_stable_offset
    if decision.error is ErrorCode.none and not (
        isinstance(lso, int) and 0 <= lso <= decision.high_watermark
    ):
        world.violation(
            "follower_answer_lso",
            f"b{follower} at b{broker.id}: answered LSO {decision.last_stable_offset}, "
            f"HW {decision.high_watermark}",
        )
