"""The leader's incremental fetch sessions (KIP-227), ``replog.server.fetch_session``,
driven directly: Kafka's request rules (``FetchManager.new_context``), what an
incremental answer leaves out (``CachedPartition.maybe_update_response_data``), the
rotation of answered partitions, the epoch check at answer time, and the cache's
eviction rules, with the time passed in and a seeded random generator."""

from __future__ import annotations

import random
import uuid

import pytest
from kio.schema.errors import ErrorCode

from replog.protocol.fetch_metadata import (
    INITIAL,
    LEGACY,
    MAX_EPOCH,
    FetchMetadata,
    next_epoch,
)
from replog.server.fetch_session import (
    CachedPartition,
    FetchManager,
    FetchSessionCache,
    FullFetchContext,
    IncrementalFetchContext,
    SessionErrorContext,
    SessionlessFetchContext,
)

V = 11  # by names
V_IDS = 13  # by ids
EVICTION_MS = 1000


def part(
    topic: str = "t",
    partition: int = 0,
    *,
    offset: int = 0,
    max_bytes: int = 1 << 20,
    leader_epoch: int = 5,
    log_start: int = 0,
    topic_id: uuid.UUID | None = None,
) -> CachedPartition:
    return CachedPartition(
        topic=topic,
        partition=partition,
        topic_id=topic_id,
        fetch_offset=offset,
        max_bytes=max_bytes,
        current_leader_epoch=leader_epoch,
        log_start_offset=log_start,
    )


def manager(slots: int = 10, seed: int = 1) -> FetchManager:
    return FetchManager(FetchSessionCache(slots, EVICTION_MS, random.Random(seed)))


def answer_all(
    ctx, hw: int = 10, records: tuple[tuple[str, int], ...] = (), now_ms: int = 0
) -> tuple[list[tuple[str | None, int]], int]:
    """Answer every partition of ``ctx`` with ``hw`` (records for those in ``records``):
    the partitions that go out, and the session id the answer carries."""
    out = []
    for p in ctx.partitions():
        has_records = (p.topic, p.partition) in records
        if ctx.must_respond(p, 0, hw, hw, 0, has_records, False):
            out.append((p.topic, p.partition))
    return out, ctx.response_session_id(now_ms)


def new_session(
    fm: FetchManager, parts: list[CachedPartition], *, follower: bool = True, now_ms: int = 0
) -> int:
    ctx = fm.new_context(V, INITIAL, follower, parts, [], now_ms)
    assert isinstance(ctx, FullFetchContext)
    answered, session_id = answer_all(ctx, now_ms=now_ms)
    assert len(answered) == len(parts)
    assert session_id != 0
    return session_id


# -- the request rules ----------------------------------------------------------------------


def test_next_epoch_wraps_past_int32_to_one_and_final_stays_final() -> None:
    assert next_epoch(0) == 1
    assert next_epoch(41) == 42
    assert next_epoch(MAX_EPOCH) == 1
    assert next_epoch(-1) == -1
    assert FetchMetadata(7, MAX_EPOCH).next_incremental() == FetchMetadata(7, 1)


def test_below_v7_is_sessionless_whatever_it_carries() -> None:
    fm = manager()
    ctx = fm.new_context(6, FetchMetadata(0, 0), True, [part()], [], 0)
    assert isinstance(ctx, SessionlessFetchContext)
    assert answer_all(ctx) == ([("t", 0)], 0)
    assert len(fm.cache) == 0


def test_id_zero_final_epoch_is_a_sessionless_full_fetch() -> None:
    fm = manager()
    ctx = fm.new_context(V, LEGACY, False, [part("t", 0), part("t", 1)], [], 0)
    assert isinstance(ctx, SessionlessFetchContext)
    assert answer_all(ctx) == ([("t", 0), ("t", 1)], 0)
    assert len(fm.cache) == 0


@pytest.mark.parametrize("follower", [True, False])
def test_initial_epoch_creates_a_session_holding_every_partition(follower: bool) -> None:
    fm = manager()
    session_id = new_session(fm, [part("t", 0), part("u", 3)], follower=follower)
    session = fm.cache.get(session_id)
    assert session is not None
    assert session.epoch == 1
    assert session.privileged is follower
    assert not session.uses_topic_ids
    assert list(session.partitions) == [("t", 0), ("u", 3)]
    assert session.partitions[("u", 3)].high_watermark == 10  # the answer is cached


def test_no_room_answers_session_id_zero() -> None:
    fm = manager(slots=0)
    ctx = fm.new_context(V, INITIAL, True, [part()], [], 0)
    assert answer_all(ctx) == ([("t", 0)], 0)
    assert len(fm.cache) == 0


def test_a_full_fetch_naming_a_session_closes_it_and_may_open_another() -> None:
    fm = manager()
    old = new_session(fm, [part()])
    ctx = fm.new_context(V, FetchMetadata(old, 0), True, [part("t", 0), part("t", 1)], [], 5)
    assert fm.cache.get(old) is None  # closed before the read
    _, new = answer_all(ctx)
    assert new not in (0, old)
    assert list(fm.cache.sessions) == [new]
    assert len(fm.cache.get(new).partitions) == 2


def test_a_session_id_at_final_epoch_closes_it_and_answers_sessionless() -> None:
    fm = manager()
    session_id = new_session(fm, [part()])
    ctx = fm.new_context(V, FetchMetadata(session_id, -1), True, [part()], [], 0)
    assert isinstance(ctx, SessionlessFetchContext)
    assert answer_all(ctx) == ([("t", 0)], 0)
    assert fm.cache.get(session_id) is None


def test_unknown_session_id_is_fetch_session_id_not_found() -> None:
    fm = manager()
    session_id = new_session(fm, [part()])
    ctx = fm.new_context(V, FetchMetadata(session_id + 1, 1), True, [], [], 0)
    assert isinstance(ctx, SessionErrorContext)
    assert ctx.error == ErrorCode.fetch_session_id_not_found
    assert list(ctx.partitions()) == []


def test_wrong_epoch_is_invalid_fetch_session_epoch_and_changes_nothing() -> None:
    fm = manager()
    session_id = new_session(fm, [part()])
    for wrong in (2, 0 + 7, MAX_EPOCH):
        ctx = fm.new_context(V, FetchMetadata(session_id, wrong), True, [part("x", 9)], [], 0)
        assert ctx.error == ErrorCode.invalid_fetch_session_epoch
    session = fm.cache.get(session_id)
    assert session.epoch == 1
    assert list(session.partitions) == [("t", 0)]
    ctx = fm.new_context(V, FetchMetadata(session_id, 1), True, [], [], 0)
    assert isinstance(ctx, IncrementalFetchContext)


def test_names_and_ids_do_not_mix_in_a_session() -> None:
    fm = manager()
    session_id = new_session(fm, [part()])
    ctx = fm.new_context(V_IDS, FetchMetadata(session_id, 1), True, [], [], 0)
    assert ctx.error == ErrorCode.fetch_session_topic_id_error
    tid = uuid.uuid4()
    ctx = fm.new_context(V_IDS, INITIAL, True, [part(topic_id=tid)], [], 0)
    _, by_ids = answer_all(ctx)
    assert fm.cache.get(by_ids).uses_topic_ids
    ctx = fm.new_context(V, FetchMetadata(by_ids, 1), True, [], [], 0)
    assert ctx.error == ErrorCode.fetch_session_topic_id_error


def test_incremental_adds_updates_and_forgets_then_reads_the_whole_session() -> None:
    fm = manager()
    session_id = new_session(fm, [part("t", 0, offset=5), part("t", 1, offset=6), part("u", 0)])
    ctx = fm.new_context(
        V,
        FetchMetadata(session_id, 1),
        True,
        [part("t", 1, offset=9, leader_epoch=6), part("v", 2, offset=3)],
        [("u", 0), ("never", 0)],
        0,
    )
    assert isinstance(ctx, IncrementalFetchContext)
    read = {(p.topic, p.partition): p.read_request() for p in ctx.partitions()}
    assert list(read) == [("t", 0), ("t", 1), ("v", 2)]
    assert read[("t", 0)].fetch_offset == 5  # not in the request: from the session
    assert (read[("t", 1)].fetch_offset, read[("t", 1)].current_leader_epoch) == (9, 6)
    assert read[("v", 2)].fetch_offset == 3
    assert fm.cache.get(session_id).epoch == 2
    assert fm.incremental_fetches == 1


def test_incremental_answer_names_only_partitions_with_news() -> None:
    fm = manager()
    session_id = new_session(fm, [part("t", p) for p in range(3)])  # all answered hw 10
    ctx = fm.new_context(V, FetchMetadata(session_id, 1), True, [], [], 0)
    by_tp = {(p.topic, p.partition): p for p in ctx.partitions()}
    respond = ctx.must_respond
    assert not respond(by_tp[("t", 0)], 0, 10, 10, 0, False, False)  # nothing new
    assert respond(by_tp[("t", 1)], 0, 10, 10, 0, True, False)  # records
    assert respond(by_tp[("t", 2)], 0, 11, 10, 0, False, False)  # high watermark
    assert ctx.response_error() == ErrorCode.none
    assert ctx.response_session_id(0) == session_id
    # The new high watermark is remembered: the same answer next time has no news.
    ctx = fm.new_context(V, FetchMetadata(session_id, 2), True, [], [], 0)
    by_tp = {(p.topic, p.partition): p for p in ctx.partitions()}
    assert not respond_(ctx, by_tp[("t", 2)], hw=11, lso=10)
    assert respond_(ctx, by_tp[("t", 2)], hw=11, lso=11)  # last stable offset
    assert respond_(ctx, by_tp[("t", 0)], hw=10, lso=10, log_start=4)  # log start offset
    assert respond_(ctx, by_tp[("t", 1)], hw=10, lso=10, news=True)  # diverging epoch
    assert not respond_(ctx, by_tp[("t", 0)], hw=10, lso=10, log_start=4)


def respond_(
    ctx, p: CachedPartition, *, hw: int, lso: int, log_start: int = 0, error: int = 0, news=False
) -> bool:
    return ctx.must_respond(p, error, hw, lso, log_start, False, news)


def test_an_error_goes_out_and_so_does_the_first_answer_after_it() -> None:
    fm = manager()
    session_id = new_session(fm, [part()])
    ctx = fm.new_context(V, FetchMetadata(session_id, 1), True, [], [], 0)
    [p] = ctx.partitions()
    assert respond_(ctx, p, hw=10, lso=10, error=ErrorCode.not_leader_or_follower)
    assert respond_(ctx, p, hw=10, lso=10, error=ErrorCode.not_leader_or_follower)
    assert respond_(ctx, p, hw=10, lso=10)  # the error is over: hw 10 goes out again
    assert not respond_(ctx, p, hw=10, lso=10)


def test_a_partition_answered_with_records_is_read_last_next_time() -> None:
    fm = manager()
    session_id = new_session(fm, [part("t", p) for p in range(4)])
    ctx = fm.new_context(V, FetchMetadata(session_id, 1), True, [], [], 0)
    answered, _ = answer_all(ctx, records=(("t", 1),))
    assert answered == [("t", 1)]
    ctx = fm.new_context(V, FetchMetadata(session_id, 2), True, [], [], 0)
    assert [p.partition for p in ctx.partitions()] == [0, 2, 3, 1]


def test_forgetting_every_partition_closes_the_session() -> None:
    fm = manager()
    session_id = new_session(fm, [part("t", 0), part("t", 1)])
    ctx = fm.new_context(V, FetchMetadata(session_id, 1), True, [], [("t", 0), ("t", 1)], 0)
    assert isinstance(ctx, SessionlessFetchContext)
    assert answer_all(ctx) == ([], 0)
    assert fm.cache.get(session_id) is None


def test_a_concurrent_request_of_the_session_fails_the_first_at_answer_time() -> None:
    fm = manager()
    session_id = new_session(fm, [part()])
    first = fm.new_context(V, FetchMetadata(session_id, 1), True, [], [], 0)
    # While the first waits, the fetcher (a retry) sends the next epoch.
    second = fm.new_context(V, FetchMetadata(session_id, 2), True, [], [], 0)
    assert first.response_error() == ErrorCode.invalid_fetch_session_epoch
    assert second.response_error() == ErrorCode.none
    # The same epoch twice: the second is refused at once.
    again = fm.new_context(V, FetchMetadata(session_id, 2), True, [], [], 0)
    assert again.error == ErrorCode.invalid_fetch_session_epoch


def test_epoch_wraps_to_one_in_a_session() -> None:
    fm = manager()
    session_id = new_session(fm, [part()])
    fm.cache.get(session_id).epoch = MAX_EPOCH
    ctx = fm.new_context(V, FetchMetadata(session_id, MAX_EPOCH), True, [], [], 0)
    assert ctx.response_error() == ErrorCode.none
    assert fm.cache.get(session_id).epoch == 1
    assert isinstance(
        fm.new_context(V, FetchMetadata(session_id, 1), True, [], [], 0), IncrementalFetchContext
    )


def test_sessions_by_id_key_partitions_by_topic_id_and_keep_unknown_ones() -> None:
    fm = manager()
    known, unknown = uuid.uuid4(), uuid.uuid4()
    parts = [part("t", 0, topic_id=known), part(None, 1, topic_id=unknown)]
    ctx = fm.new_context(V_IDS, INITIAL, False, parts, [], 0)
    _, session_id = answer_all(ctx)
    session = fm.cache.get(session_id)
    assert list(session.partitions) == [(known, 0), (unknown, 1)]
    ctx = fm.new_context(
        V_IDS, FetchMetadata(session_id, 1), False, [part("t", 0, offset=7, topic_id=known)], [], 0
    )
    assert [(p.topic_id, p.fetch_offset) for p in ctx.partitions()] == [(known, 7), (unknown, 0)]
    ctx = fm.new_context(V_IDS, FetchMetadata(session_id, 2), False, [], [(unknown, 1)], 0)
    assert [p.topic_id for p in ctx.partitions()] == [known]


def test_read_request_follows_the_partition() -> None:
    p = part("t", 0, offset=3)
    first = p.read_request()
    assert p.read_request() is first  # made once
    p.update_request_params(part("t", 0, offset=8, max_bytes=100))
    assert (p.read_request().fetch_offset, p.read_request().max_bytes) == (8, 100)
    p.resolve_topic("renamed")
    assert p.read_request().topic == "renamed"


# -- the cache ------------------------------------------------------------------------------


class _Scripted(random.Random):
    def __init__(self, values: list[int]) -> None:
        super().__init__(0)
        self.values = values

    def randint(self, a: int, b: int) -> int:
        return self.values.pop(0)


def test_session_ids_are_never_reused_while_a_session_lives() -> None:
    fm = FetchManager(FetchSessionCache(10, EVICTION_MS, _Scripted([7, 7, 7, 9])))
    assert new_session(fm, [part()]) == 7
    assert new_session(fm, [part()]) == 9


def sessions(fm: FetchManager, specs: list[tuple[bool, int, int]]) -> list[int]:
    """Sessions of (privileged, partitions, created at ms)."""
    return [
        new_session(fm, [part("t", p) for p in range(size)], follower=priv, now_ms=at)
        for priv, size, at in specs
    ]


def create(fm: FetchManager, privileged: bool, size: int, now_ms: int) -> int:
    ctx = fm.new_context(V, INITIAL, privileged, [part("n", p) for p in range(size)], [], now_ms)
    return answer_all(ctx, now_ms=now_ms)[1]


def test_a_stale_session_is_evicted_first() -> None:
    fm = manager(slots=2)
    stale, busy = sessions(fm, [(True, 50, 0), (True, 50, 0)])
    fm.cache.touch(fm.cache.get(busy), 1500)
    new = create(fm, False, 1, now_ms=1500)  # stale unused for 1500 ms > 1000
    assert new != 0
    assert set(fm.cache.sessions) == {busy, new}
    assert fm.cache.evictions == 1


def test_a_follower_evicts_a_consumer_however_recent_and_big() -> None:
    fm = manager(slots=2)
    follower, consumer = sessions(fm, [(True, 1, 0), (False, 100, 0)])
    new = create(fm, True, 1, now_ms=10)
    assert new != 0
    assert set(fm.cache.sessions) == {follower, new}


def test_a_consumer_cannot_evict_recent_sessions() -> None:
    fm = manager(slots=2)
    sessions(fm, [(False, 1, 0), (False, 1, 0)])
    assert create(fm, False, 100, now_ms=900) == 0
    assert len(fm.cache) == 2
    assert fm.cache.evictions == 0


def test_a_bigger_session_evicts_the_smallest_old_one_equal_size_does_not() -> None:
    fm = manager(slots=3)
    small, mid, big = sessions(fm, [(False, 2, 0), (False, 5, 0), (False, 9, 0)])
    for s in (small, mid, big):
        fm.cache.touch(fm.cache.get(s), 1500)  # old (created 1500 ms ago) but in use
    assert create(fm, False, 2, now_ms=1500) == 0  # no bigger than the smallest
    new = create(fm, False, 3, now_ms=1500)
    assert new != 0
    assert set(fm.cache.sessions) == {mid, big, new}


def test_followers_evict_only_old_follower_sessions_smaller_than_theirs() -> None:
    fm = manager(slots=2)
    a, b = sessions(fm, [(True, 4, 0), (True, 8, 0)])
    assert create(fm, True, 100, now_ms=500) == 0  # both recent
    for s in (a, b):
        fm.cache.touch(fm.cache.get(s), 1500)
    assert create(fm, True, 4, now_ms=1500) == 0  # not bigger than a
    assert create(fm, False, 100, now_ms=1500) == 0  # a consumer never evicts a follower
    new = create(fm, True, 5, now_ms=1500)
    assert set(fm.cache.sessions) == {b, new}


def test_total_partitions_counts_every_session() -> None:
    fm = manager()
    sessions(fm, [(True, 3, 0), (False, 4, 0)])
    assert fm.cache.total_partitions == 7
