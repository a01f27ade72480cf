"""The follower's side of an incremental fetch session (KIP-227),
``replog.replication.fetch_session_handler``, driven directly: what each request carries
(full, then only what changed and what was dropped), how the epoch moves, and when the
follower goes back to a full fetch."""

from __future__ import annotations

import uuid
from dataclasses import replace

from kio.schema.errors import ErrorCode

from replog.protocol.fetch_metadata import INITIAL, MAX_EPOCH, FetchMetadata
from replog.replication.fetch_rules import FetchPartitionRequest
from replog.replication.fetch_session_handler import FetchSessionHandler

SESSION = 4242


def req(partition: int, offset: int = 0, topic: str = "t") -> FetchPartitionRequest:
    return FetchPartitionRequest(
        topic=topic,
        partition=partition,
        fetch_offset=offset,
        max_bytes=1 << 20,
        current_leader_epoch=3,
        log_start_offset=0,
    )


def tps(requests) -> list[tuple[str, int]]:
    return [(p.topic, p.partition) for p in requests]


def in_session(parts: list[FetchPartitionRequest]) -> FetchSessionHandler:
    """A handler whose full fetch of ``parts`` the leader answered with ``SESSION``."""
    h = FetchSessionHandler(1)
    data = h.build(parts)
    assert h.handle_response(ErrorCode.none, SESSION, tps(data.to_send))
    return h


def test_the_first_fetch_is_full_at_the_initial_epoch() -> None:
    h = FetchSessionHandler(1)
    data = h.build([req(0), req(1), req(2)])
    assert data.metadata == INITIAL
    assert tps(data.to_send) == [("t", 0), ("t", 1), ("t", 2)]
    assert data.to_forget == []
    assert data.session_size == 3


def test_then_incremental_fetches_carry_only_what_changed() -> None:
    parts = [req(0, 10), req(1, 20), req(2, 30)]
    h = in_session(parts)
    data = h.build(parts)
    assert data.metadata == FetchMetadata(SESSION, 1)
    assert data.to_send == [] and data.to_forget == []
    assert data.session_size == 3
    moved = [req(0, 10), req(1, 25), req(2, 30)]
    assert h.handle_response(ErrorCode.none, SESSION, [])
    data = h.build(moved)
    assert data.metadata == FetchMetadata(SESSION, 2)
    assert data.to_send == [req(1, 25)]


def test_each_fetch_parameter_counts_as_a_change() -> None:
    base = req(0, 10)
    for changed in (
        replace(base, fetch_offset=11),
        replace(base, log_start_offset=5),
        replace(base, max_bytes=100),
        replace(base, current_leader_epoch=4),
    ):
        h = in_session([base, req(1)])
        data = h.build([changed, req(1)])
        assert data.to_send == [changed], changed
        # and the session remembers it: sent once
        assert h.handle_response(ErrorCode.none, SESSION, [])
        assert h.build([changed, req(1)]).to_send == []


def test_added_partitions_are_sent_and_dropped_ones_forgotten() -> None:
    h = in_session([req(0), req(1), req(2, topic="u")])
    data = h.build([req(0), req(3), req(4, topic="v")])
    assert tps(data.to_send) == [("t", 3), ("v", 4)]
    assert data.to_forget == [("t", 1), ("u", 2)]
    assert data.session_size == 3
    # the leader answers a new partition; one outside the session is refused
    assert h.handle_response(ErrorCode.none, SESSION, [("t", 3)])
    h.build([req(0), req(3), req(4, topic="v")])
    assert not h.handle_response(ErrorCode.none, SESSION, [("t", 1)])
    assert h.next_metadata == FetchMetadata(SESSION, 0)


def test_the_epoch_wraps_to_one() -> None:
    h = in_session([req(0)])
    h.next_metadata = FetchMetadata(SESSION, MAX_EPOCH)
    assert h.build([req(0)]).metadata == FetchMetadata(SESSION, MAX_EPOCH)
    assert h.handle_response(ErrorCode.none, SESSION, [])
    assert h.next_metadata == FetchMetadata(SESSION, 1)


def test_session_id_not_found_starts_over_without_a_session() -> None:
    parts = [req(0), req(1)]
    h = in_session(parts)
    h.build(parts)
    assert not h.handle_response(ErrorCode.fetch_session_id_not_found, 0, [])
    data = h.build(parts)
    assert data.metadata == INITIAL
    assert tps(data.to_send) == [("t", 0), ("t", 1)]  # full again, unchanged or not


def test_invalid_epoch_closes_the_session_and_asks_for_a_new_one() -> None:
    parts = [req(0), req(1)]
    h = in_session(parts)
    h.build(parts)
    assert not h.handle_response(ErrorCode.invalid_fetch_session_epoch, 0, [])
    data = h.build(parts)
    assert data.metadata == FetchMetadata(SESSION, 0)
    assert tps(data.to_send) == [("t", 0), ("t", 1)]
    # The leader opens another session.
    assert h.handle_response(ErrorCode.none, SESSION + 1, tps(data.to_send))
    assert h.build(parts).metadata == FetchMetadata(SESSION + 1, 1)


def test_a_failed_request_makes_the_next_one_full() -> None:
    parts = [req(0), req(1)]
    h = in_session(parts)
    h.build(parts)
    h.handle_error()
    data = h.build(parts)
    assert data.metadata == FetchMetadata(SESSION, 0)
    assert len(data.to_send) == 2


def test_a_leader_without_room_is_fetched_in_full_every_time() -> None:
    parts = [req(0)]
    h = FetchSessionHandler(1)
    for _ in range(3):
        data = h.build(parts)
        assert data.metadata == INITIAL and data.to_send == parts
        assert h.handle_response(ErrorCode.none, 0, [("t", 0)])


def test_a_leader_closing_the_session_in_an_incremental_answer() -> None:
    parts = [req(0)]
    h = in_session(parts)
    h.build(parts)
    assert h.handle_response(ErrorCode.none, 0, [])
    assert h.build(parts).metadata == INITIAL


def test_a_full_answer_that_leaves_out_a_partition_is_not_used() -> None:
    h = FetchSessionHandler(1)
    h.build([req(0), req(1)])
    assert not h.handle_response(ErrorCode.none, SESSION, [("t", 0)])
    assert h.next_metadata == INITIAL
    h.build([req(0)])
    assert not h.handle_response(ErrorCode.none, SESSION, [("t", 0), ("t", 9)])


def test_a_follower_that_stops_fetching_closes_its_session_at_the_final_epoch() -> None:
    """Its last request names the session at epoch FINAL (-1), which the leader takes as
    a close; with no session there is nothing to send; a later fetch starts over."""
    assert FetchSessionHandler(1).close() is None
    h = in_session([req(0), req(1)])
    assert h.close() == FetchMetadata(SESSION, -1)
    assert h.close() is None  # once
    data = h.build([req(0)])
    assert data.metadata == INITIAL and tps(data.to_send) == [("t", 0)]
    # a failed request keeps the session's id (a full fetch closes it): still closed at FINAL
    h = in_session([req(0)])
    h.handle_error()
    assert h.close() == FetchMetadata(SESSION, -1)


# -- topic ids (KIP-516: Fetch v13+ names topics by id) -------------------------------------------

T_ID = uuid.UUID(int=1)
U_ID = uuid.UUID(int=2)


def test_a_session_of_topics_with_ids_names_them_by_id() -> None:
    parts = [replace(req(0), topic_id=T_ID), replace(req(0, topic="u"), topic_id=U_ID)]
    h = FetchSessionHandler(1)
    data = h.build(parts)
    assert data.can_use_topic_ids
    assert h.handle_response(ErrorCode.none, SESSION, tps(data.to_send))
    assert h.topic_names() == {T_ID: "t", U_ID: "u"}
    data = h.build(parts[:1])  # u dropped: forgotten under its id
    assert data.metadata == FetchMetadata(SESSION, 1) and data.can_use_topic_ids
    assert data.to_forget == [("u", 0)] and data.to_forget_by_id == [(U_ID, ("u", 0))]


def test_a_topic_made_again_under_a_new_id_is_forgotten_under_the_old_one() -> None:
    """Kafka's "replaced" partitions: the same name, a new topic id."""
    h = in_session([replace(req(0), topic_id=T_ID)])
    new_id = uuid.UUID(int=3)
    data = h.build([replace(req(0), topic_id=new_id)])
    assert data.metadata == FetchMetadata(SESSION, 1)
    assert [p.topic_id for p in data.to_send] == [new_id]
    assert data.to_forget == [] and data.to_forget_by_id == [(T_ID, ("t", 0))]
    assert h.topic_names() == {new_id: "t"}


def test_a_partition_without_a_topic_id_makes_the_session_start_over_by_name() -> None:
    """A session keeps the way it named topics: a partition of a topic without an id
    joining a session by id (or the reverse) closes it and asks for a new one."""
    h = in_session([replace(req(0), topic_id=T_ID)])
    data = h.build([replace(req(0), topic_id=T_ID), req(0, topic="old")])
    assert data.metadata == FetchMetadata(SESSION, 0)  # full: close SESSION, ask anew
    assert not data.can_use_topic_ids
    assert tps(data.to_send) == [("t", 0), ("old", 0)]
    assert h.handle_response(ErrorCode.none, SESSION + 1, tps(data.to_send))
    data = h.build([replace(req(0), topic_id=T_ID)])  # "old" gone: by id again
    assert data.metadata == FetchMetadata(SESSION + 1, 0) and data.can_use_topic_ids


def test_the_leaders_topic_id_error_starts_a_new_session() -> None:
    h = in_session([replace(req(0), topic_id=T_ID)])
    h.build([replace(req(0), topic_id=T_ID)])
    assert not h.handle_response(ErrorCode.fetch_session_topic_id_error, SESSION, [])
    assert h.build([replace(req(0), topic_id=T_ID)]).metadata == FetchMetadata(SESSION, 0)
