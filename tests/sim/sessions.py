"""Kafka's fetch session cache rules (KIP-227), checked from outside the shipped
``FetchSessionCache`` around each fetch the simulated brokers answer, followers' and
consumers' alike.

Concurrency: pure checks, called by the single-threaded world.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from replog.server.fetch_session import FetchSession, FetchSessionCache

if TYPE_CHECKING:
    from sim.world import World


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
