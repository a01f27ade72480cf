"""The classic group protocol's rules (Kafka ``ClassicGroup`` and the classic part of
``GroupMetadataManager``) on a stand-in runtime with a virtual clock: every state
transition and error code of JoinGroup, SyncGroup, Heartbeat and LeaveGroup, static
membership, the initial rebalance delay, session, rebalance and sync timeouts, and the
generation written before SyncGroup answers. Random sequences are in
``test_classic_group_sequences.py``."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from classic_group_util import INITIAL_DELAY_MS, RANGE, Harness, assignment_of, run
from replog.coordinator.group import records as rec
from replog.coordinator.group.classic_group import (
    VALID_PREVIOUS_STATES,
    ClassicGroup,
    GroupMember,
    GroupState,
    IllegalGroupTransition,
)
from replog.coordinator.group.classic_group_service import replay_group_metadata

S = GroupState

# Kafka ClassicGroupState's validPreviousStates, written out again to check the table.
KAFKA_VALID_PREVIOUS = {
    S.PREPARING_REBALANCE: {S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY},
    S.COMPLETING_REBALANCE: {S.PREPARING_REBALANCE},
    S.STABLE: {S.COMPLETING_REBALANCE},
    S.EMPTY: {S.PREPARING_REBALANCE},
    S.DEAD: {S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD},
}


def _group(state: GroupState = S.EMPTY) -> ClassicGroup:
    group = ClassicGroup("g")
    group.state = state
    return group


def _member(member_id: str, protocols=None, instance: str | None = None) -> GroupMember:
    return GroupMember(
        member_id, instance, "c", "/h", 30_000, 10_000, "consumer", list(protocols or RANGE)
    )


# -- the state machine --------------------------------------------------------------------


def test_the_table_of_valid_previous_states_is_kafkas() -> None:
    assert {t: set(p) for t, p in VALID_PREVIOUS_STATES.items()} == KAFKA_VALID_PREVIOUS


@pytest.mark.parametrize("source,target", list(itertools.product(GroupState, GroupState)))
def test_an_illegal_transition_raises_and_a_legal_one_moves(source, target) -> None:
    group = _group(source)
    if source in KAFKA_VALID_PREVIOUS[target]:
        group.transition_to(target, 7)
        assert group.state is target and group.state_timestamp_ms == 7
    else:
        with pytest.raises(IllegalGroupTransition):
            group.transition_to(target, 7)
        assert group.state is source


# -- protocol selection -----------------------------------------------------------------


def test_the_protocol_most_members_rank_highest_among_the_common_ones_is_selected() -> None:
    group = _group()
    group.add_member(_member("a", [("sticky", b""), ("range", b""), ("roundrobin", b"")]))
    group.add_member(_member("b", [("roundrobin", b""), ("range", b"")]))
    group.add_member(_member("c", [("range", b""), ("roundrobin", b"")]))
    # common: range, roundrobin; first choices among them: a range, b roundrobin, c range
    assert group.candidate_protocols() == {"range", "roundrobin"}
    assert group.select_protocol() == "range"


PROTOCOL_NAMES = st.sampled_from(["range", "roundrobin", "sticky", "cooperative-sticky"])


@given(
    st.lists(
        st.lists(PROTOCOL_NAMES, min_size=1, max_size=4, unique=True).map(
            lambda names: names + ["range"] if "range" not in names else names
        ),
        min_size=1,
        max_size=8,
    )
)
def test_the_selected_protocol_is_common_and_has_the_most_first_choice_votes(prefs) -> None:
    group = _group()
    for i, names in enumerate(prefs):
        group.add_member(_member(f"m{i}", [(n, b"") for n in names]))
    chosen = group.select_protocol()
    common = set.intersection(*(set(names) for names in prefs))
    assert chosen in common
    votes = {name: 0 for name in common}
    for names in prefs:
        votes[next(n for n in names if n in common)] += 1
    assert votes[chosen] == max(votes.values())


def test_a_group_supports_only_a_matching_protocol_type_and_a_common_protocol() -> None:
    group = _group()
    assert group.supports("consumer", RANGE)
    assert not group.supports("consumer", [])
    assert not group.supports("", RANGE)
    group.add_member(_member("a"))
    assert group.supports("consumer", [("roundrobin", b""), ("range", b"")])
    assert not group.supports("connect", RANGE)
    assert not group.supports("consumer", [("roundrobin", b"")])


# -- JoinGroup ------------------------------------------------------------------------------


def test_a_first_join_without_member_id_is_given_one_and_must_join_again() -> None:
    async def body(h: Harness) -> None:
        first = h.join(client_id="rdkafka")
        await h.settle()
        answer = first.result()
        assert answer.error == ErrorCode.member_id_required
        prefix, _, suffix = answer.member_id.partition("-")
        assert prefix == "rdkafka" and len(suffix) == 36  # client id - uuid
        assert answer.member_id in h.shard.groups["g"].pending_members
        second = h.join(answer.member_id)
        (joined,) = await h.until_done(second)
        assert h.shard.clock == INITIAL_DELAY_MS
        assert joined.error == ErrorCode.none and joined.member_id == answer.member_id
        assert joined.generation_id == 1 and joined.leader_id == answer.member_id
        assert joined.protocol_name == "range" and joined.protocol_type == "consumer"
        assert joined.members == [(answer.member_id, None, b"range-metadata")]

    run(body)


def test_a_pending_member_id_expires_after_the_session_timeout() -> None:
    async def body(h: Harness) -> None:
        first = h.join(session_ms=1000)
        await h.settle()
        member_id = first.result().member_id
        await h.advance(1000)
        assert member_id not in h.shard.groups["g"].pending_members
        late = h.join(member_id)
        await h.settle()
        assert late.result().error == ErrorCode.unknown_member_id

    run(body)


def test_before_v4_a_join_without_member_id_joins_at_once() -> None:
    async def body(h: Harness) -> None:
        task = h.join(require_known_member_id=False)
        (answer,) = await h.until_done(task)
        assert answer.error == ErrorCode.none and answer.member_id.startswith("client-")

    run(body)


@pytest.mark.parametrize(
    "kwargs,error",
    [
        ({"group": ""}, ErrorCode.invalid_group_id),
        ({"group": "g" * 32768}, ErrorCode.invalid_group_id),  # longer than its record key
        ({"session_ms": 99}, ErrorCode.invalid_session_timeout),
        ({"session_ms": 1_800_001}, ErrorCode.invalid_session_timeout),
        ({"member_id": "nobody"}, ErrorCode.unknown_member_id),  # the group does not exist
        ({"protocols": []}, ErrorCode.inconsistent_group_protocol),
        ({"protocol_type": ""}, ErrorCode.inconsistent_group_protocol),
    ],
)
def test_bad_joins_get_kafkas_errors_and_add_no_member(kwargs, error) -> None:
    async def body(h: Harness) -> None:
        task = h.join(**kwargs)
        await h.settle()
        assert task.result().error == error
        # Kafka creates the (empty) group before it checks the protocols.
        assert all(g.is_empty() and not g.members for g in h.shard.groups.values())

    run(body)


def test_a_join_with_another_protocol_type_or_no_common_protocol_is_inconsistent() -> None:
    async def body(h: Harness) -> None:
        await h.stable_group(1)
        for kwargs in ({"protocol_type": "connect"}, {"protocols": [("roundrobin", b"")]}):
            task = h.join(**kwargs)
            await h.settle()
            assert task.result().error == ErrorCode.inconsistent_group_protocol
        assert h.shard.groups["g"].state is S.STABLE

    run(body)


def test_a_full_group_refuses_another_member() -> None:
    async def body(h: Harness) -> None:
        await h.stable_group(2)
        task = await h.join_dynamic_or_error()
        assert task.error == ErrorCode.group_max_size_reached
        assert len(h.shard.groups["g"].members) == 2

    run(body, **{"group.max.size": "2"})


def test_the_leader_gets_every_members_metadata_and_followers_none() -> None:
    async def body(h: Harness) -> None:
        a = await h.join_dynamic(protocols=[("range", b"a-meta")])
        b = await h.join_dynamic(protocols=[("range", b"b-meta")])
        await h.advance(30_000)  # rejoins complete the rebalance; none were needed here
        ra, rb = a.result(), b.result()
        assert ra.generation_id == rb.generation_id
        assert ra.leader_id == rb.leader_id
        leader, follower = (ra, rb) if ra.member_id == ra.leader_id else (rb, ra)
        assert sorted(leader.members) == sorted(
            [(ra.member_id, None, b"a-meta"), (rb.member_id, None, b"b-meta")]
        )
        assert follower.members == []

    run(body)


def test_a_new_member_starts_a_rebalance_that_completes_when_every_member_rejoined() -> None:
    async def body(h: Harness) -> None:
        (a,) = await h.stable_group(1)
        group = h.shard.groups["g"]
        b = await h.join_dynamic()
        assert group.state is S.PREPARING_REBALANCE and not b.done()
        # The old member keeps heartbeating its generation until it learns to rejoin.
        assert h.heartbeat(a.member_id, a.generation_id) == ErrorCode.rebalance_in_progress
        again = h.join(a.member_id)
        await h.settle()
        ra, rb = again.result(), b.result()
        assert ra.error == rb.error == ErrorCode.none
        assert ra.generation_id == rb.generation_id == a.generation_id + 1
        assert group.state is S.COMPLETING_REBALANCE

    run(body)


def test_members_that_do_not_rejoin_within_the_rebalance_timeout_are_removed() -> None:
    async def body(h: Harness) -> None:
        a, b = await h.stable_group(2, rebalance_ms=5000, session_ms=60_000)
        c = await h.join_dynamic(rebalance_ms=5000, session_ms=60_000)
        again = h.join(a.member_id, rebalance_ms=5000, session_ms=60_000)
        await h.advance(4999)
        assert not c.done()
        await h.advance(1)
        group = h.shard.groups["g"]
        assert set(group.members) == {a.member_id, c.result().member_id}
        assert again.result().generation_id == a.generation_id + 1

    run(body)


def test_a_member_waiting_in_a_long_rebalance_is_not_expired_by_its_session() -> None:
    """Kafka ``hasSatisfiedHeartbeat``: a parked JoinGroup keeps its member alive (clients
    do not heartbeat while their JoinGroup waits), until the rebalance timeout."""

    async def body(h: Harness) -> None:
        kwargs = {"session_ms": 1000, "rebalance_ms": 10_000}
        a, b = await h.stable_group(2, **kwargs)
        c = await h.join_dynamic(**kwargs)  # a rebalance: a rejoins at once
        again = h.join(a.member_id, **kwargs)
        for _ in range(10):  # b is busy for 5 s; its heartbeat thread keeps it alive
            await h.advance(500)
            assert h.heartbeat(b.member_id, b.generation_id) == ErrorCode.rebalance_in_progress
        assert {a.member_id, b.member_id} <= set(h.shard.groups["g"].members)
        late = h.join(b.member_id, **kwargs)
        answers = await h.until_done(again, late, c)
        assert [r.error for r in answers] == [ErrorCode.none] * 3
        assert len({r.generation_id for r in answers}) == 1

    run(body)


def test_a_lost_join_response_is_sent_again_in_completing_rebalance() -> None:
    async def body(h: Harness) -> None:
        (first,) = await h.until_done(await h.join_dynamic())
        again = h.join(first.member_id)
        await h.settle()
        assert again.result().generation_id == first.generation_id
        assert h.shard.groups["g"].state is S.COMPLETING_REBALANCE

    run(body)


def test_the_leader_rejoining_a_stable_group_starts_a_rebalance_a_follower_does_not() -> None:
    async def body(h: Harness) -> None:
        a, b = await h.stable_group(2)
        leader, follower = (a, b) if a.member_id == a.leader_id else (b, a)
        same = h.join(follower.member_id)
        await h.settle()
        assert same.result().generation_id == follower.generation_id
        assert h.shard.groups["g"].state is S.STABLE
        h.join(leader.member_id)
        await h.settle()
        assert h.shard.groups["g"].state is S.PREPARING_REBALANCE

    run(body)


def test_the_initial_rebalance_waits_and_is_extended_while_members_arrive() -> None:
    async def body(h: Harness) -> None:
        a = await h.join_dynamic()
        await h.advance(1000)
        b = await h.join_dynamic()
        await h.advance(1999)  # t=2999
        assert not a.done() and not b.done()
        await h.advance(1)  # t=3000: b arrived, so the delay runs once more
        assert not a.done()
        await h.advance(3000)  # t=6000
        assert a.result().generation_id == b.result().generation_id == 1

    run(body, **{"group.initial.rebalance.delay.ms": "3000"})


def test_an_emptied_group_waits_the_initial_delay_again() -> None:
    """Kafka's InitialDelayedJoin applies whenever the rebalance began in Empty, not only
    to the first generation."""

    async def body(h: Harness) -> None:
        (ra,) = await h.stable_group(1)
        h.leave((ra.member_id, None))
        await h.settle()
        group = h.shard.groups["g"]
        assert group.state is S.EMPTY and group.generation_id == 2
        b = await h.join_dynamic()
        c = await h.join_dynamic()
        assert not b.done() and not c.done()
        await h.advance(3000)
        await h.advance(3000)
        assert b.result().generation_id == c.result().generation_id == 3

    run(body, **{"group.initial.rebalance.delay.ms": "3000"})


# -- SyncGroup ------------------------------------------------------------------------------


def test_sync_answers_only_after_the_generation_is_written() -> None:
    async def body(h: Harness) -> None:
        import asyncio

        ra, rb = await h.until_done(await h.join_dynamic(), await h.join_dynamic())
        leader, follower = (ra, rb) if ra.member_id == ra.leader_id else (rb, ra)
        h.shard.gate = asyncio.Event()
        f = h.sync(follower.member_id, follower.generation_id)
        plan = {m: assignment_of(m, leader.generation_id) for m, _, _ in leader.members}
        led = h.sync(leader.member_id, leader.generation_id, plan)
        await h.settle()
        group = h.shard.groups["g"]
        assert not f.done() and not led.done() and group.state is S.COMPLETING_REBALANCE
        assert h.shard.log == []
        h.shard.gate.set()
        await h.settle()
        assert f.result().assignment == assignment_of(follower.member_id, 1)
        assert led.result().assignment == assignment_of(leader.member_id, 1)
        assert f.result().protocol_name == "range" and f.result().protocol_type == "consumer"
        assert group.state is S.STABLE
        (record,) = h.shard.log
        assert rec.decode_group_metadata_key(record.key) == "g"
        value = rec.decode_group_metadata_value(record.value)
        assert value.generation == 1 and value.protocol == "range"
        assert value.leader == leader.member_id
        assert {m.member_id: m.assignment for m in value.members} == plan

    run(body)


def test_a_failed_write_answers_the_syncs_with_its_error_and_rebalances() -> None:
    async def body(h: Harness) -> None:
        (ra,) = await h.until_done(await h.join_dynamic())
        h.shard.fail_with = ErrorCode.coordinator_not_available
        s = h.sync(ra.member_id, ra.generation_id, {ra.member_id: b"x"})
        await h.settle()
        assert s.result().error == ErrorCode.coordinator_not_available
        group = h.shard.groups["g"]
        assert group.state is S.PREPARING_REBALANCE
        assert group.members[ra.member_id].assignment == b""

    run(body)


def test_sync_errors() -> None:
    async def body(h: Harness) -> None:
        a, b = await h.stable_group(2)
        gen = a.generation_id

        async def sync_error(*args, **kwargs) -> ErrorCode:
            task = h.sync(*args, **kwargs)
            await h.settle()
            return task.result().error

        assert await sync_error("nobody", gen) == ErrorCode.unknown_member_id
        assert await sync_error(a.member_id, gen + 1) == ErrorCode.illegal_generation
        assert await sync_error(a.member_id, gen, group="other") == ErrorCode.unknown_member_id
        assert (
            await sync_error(a.member_id, gen, protocol_type="connect")
            == ErrorCode.inconsistent_group_protocol
        )
        assert (
            await sync_error(a.member_id, gen, protocol_name="roundrobin")
            == ErrorCode.inconsistent_group_protocol
        )
        ok = h.sync(a.member_id, gen, protocol_type="consumer", protocol_name="range")
        await h.settle()
        assert ok.result().assignment == assignment_of(a.member_id, gen)  # Stable: as it is
        await h.join_dynamic()
        assert await sync_error(a.member_id, gen) == ErrorCode.rebalance_in_progress

    run(body)


def test_members_that_do_not_sync_within_the_rebalance_timeout_are_removed() -> None:
    async def body(h: Harness) -> None:
        kwargs = {"rebalance_ms": 4000, "session_ms": 60_000}
        ra, rb = await h.until_done(await h.join_dynamic(**kwargs), await h.join_dynamic(**kwargs))
        leader, follower = (ra, rb) if ra.member_id == ra.leader_id else (rb, ra)
        parked = h.sync(follower.member_id, follower.generation_id)
        await h.advance(4000)
        assert parked.result().error == ErrorCode.rebalance_in_progress
        group = h.shard.groups["g"]
        assert set(group.members) == {follower.member_id}
        assert group.state is S.PREPARING_REBALANCE

    run(body)


# -- Heartbeat ----------------------------------------------------------------------------


def test_heartbeat_errors_and_session_expiry() -> None:
    async def body(h: Harness) -> None:
        a, b = await h.stable_group(2, session_ms=1000)
        gen = a.generation_id
        assert h.heartbeat("nobody", gen) == ErrorCode.unknown_member_id
        assert h.heartbeat(a.member_id, gen, group="other") == ErrorCode.unknown_member_id
        assert h.heartbeat(a.member_id, gen - 1) == ErrorCode.illegal_generation
        for _ in range(5):  # a heartbeats, b does not
            await h.advance(400)
            assert h.heartbeat(a.member_id, gen) in (
                ErrorCode.none,
                ErrorCode.rebalance_in_progress,
            )
        group = h.shard.groups["g"]
        assert b.member_id not in group.members and a.member_id in group.members
        assert group.state is not S.STABLE  # b's partitions are to be reassigned
        assert h.heartbeat(a.member_id, gen) == ErrorCode.rebalance_in_progress

    run(body)


def test_heartbeat_in_completing_rebalance_is_accepted() -> None:
    async def body(h: Harness) -> None:
        (ra,) = await h.until_done(await h.join_dynamic())
        assert h.shard.groups["g"].state is S.COMPLETING_REBALANCE
        assert h.heartbeat(ra.member_id, ra.generation_id) == ErrorCode.none

    run(body)


# -- LeaveGroup ---------------------------------------------------------------------------


def test_leave_group_is_batched_with_an_error_per_member() -> None:
    async def body(h: Harness) -> None:
        a, b, c = await h.stable_group(3)
        error, results = h.leave((a.member_id, None), (b.member_id, None), ("nobody", None))
        assert error == ErrorCode.none
        assert results == [
            (a.member_id, None, ErrorCode.none),
            (b.member_id, None, ErrorCode.none),
            ("nobody", None, ErrorCode.unknown_member_id),
        ]
        group = h.shard.groups["g"]
        assert set(group.members) == {c.member_id}
        assert group.state is S.PREPARING_REBALANCE
        error, results = h.leave((c.member_id, None), group="unknown")
        assert results == [(c.member_id, None, ErrorCode.unknown_member_id)]

    run(body)


def test_the_last_member_leaving_empties_the_group_and_writes_the_generation() -> None:
    async def body(h: Harness) -> None:
        (a,) = await h.stable_group(1)
        h.leave((a.member_id, None))
        await h.settle()
        group = h.shard.groups["g"]
        assert group.state is S.EMPTY and group.generation_id == 2
        value = rec.decode_group_metadata_value(h.shard.log[-1].value)
        assert value.generation == 2 and value.members == () and value.protocol is None

    run(body)


# -- static membership (KIP-345) ----------------------------------------------------------


def test_a_static_member_rejoining_keeps_its_assignment_without_a_rebalance() -> None:
    async def body(h: Harness) -> None:
        ra, rb = await h.until_done(h.join(instance="i-a"), h.join(instance="i-b"))
        await h.sync_all([ra, rb])
        group = h.shard.groups["g"]
        assert group.state is S.STABLE
        generation, written = group.generation_id, len(h.shard.log)
        restarted = h.join(instance="i-b")  # b restarts: no member id
        await h.settle()
        new = restarted.result()
        assert new.error == ErrorCode.none and new.member_id != rb.member_id
        assert new.generation_id == generation and group.state is S.STABLE
        assert len(h.shard.log) == written + 1  # the new member id is persisted
        s = h.sync(new.member_id, generation, instance="i-b")
        await h.settle()
        assert s.result().assignment == assignment_of(rb.member_id, generation)
        # The old member id is fenced.
        assert h.heartbeat(rb.member_id, generation, instance="i-b") == ErrorCode.fenced_instance_id
        old = h.sync(rb.member_id, generation, instance="i-b")
        await h.settle()
        assert old.result().error == ErrorCode.fenced_instance_id
        _, results = h.leave((rb.member_id, "i-b"))
        assert results == [(rb.member_id, "i-b", ErrorCode.fenced_instance_id)]

    run(body)


def test_a_static_member_changing_the_selected_protocol_starts_a_rebalance() -> None:
    async def body(h: Harness) -> None:
        both = [("range", b"r"), ("roundrobin", b"o")]
        ra, rb = await h.until_done(
            h.join(instance="i-a", protocols=both), h.join(instance="i-b", protocols=both)
        )
        await h.sync_all([ra, rb])
        h.join(instance="i-a", protocols=[("roundrobin", b"o")])  # range is no longer common
        await h.settle()
        assert h.shard.groups["g"].state is S.PREPARING_REBALANCE

    run(body)


def test_a_static_member_with_new_metadata_for_the_same_protocol_does_not_rebalance() -> None:
    """Kafka compares the selected protocol only: a restarted cooperative-sticky member
    (whose metadata lists no owned partitions any more) keeps its assignment."""

    async def body(h: Harness) -> None:
        ra, rb = await h.until_done(h.join(instance="i-a"), h.join(instance="i-b"))
        await h.sync_all([ra, rb])
        follower = rb if ra.member_id == ra.leader_id else ra
        instance = "i-b" if follower is rb else "i-a"
        again = h.join(instance=instance, protocols=[("range", b"nothing owned now")])
        await h.settle()
        assert again.result().error == ErrorCode.none
        group = h.shard.groups["g"]
        assert group.state is S.STABLE
        assert group.members[again.result().member_id].protocols == [
            ("range", b"nothing owned now")
        ]

    run(body)


def test_a_restarted_static_leader_is_answered_as_a_follower_without_a_rebalance() -> None:
    async def body(h: Harness) -> None:
        ra, rb = await h.until_done(h.join(instance="i-a"), h.join(instance="i-b"))
        await h.sync_all([ra, rb])
        leader = ra if ra.member_id == ra.leader_id else rb
        instance = "i-a" if leader is ra else "i-b"
        again = h.join(instance=instance)
        await h.settle()
        answer = again.result()
        assert answer.error == ErrorCode.none and answer.members == []
        assert answer.leader_id == leader.member_id != answer.member_id  # the old id
        group = h.shard.groups["g"]
        assert group.state is S.STABLE and group.leader_id == answer.member_id
        sync = h.sync(answer.member_id, answer.generation_id, instance=instance)
        await h.settle()
        assert sync.result().assignment == assignment_of(leader.member_id, 1)

    run(body)


def test_a_restarted_static_leader_on_v9_leads_but_skips_the_assignment() -> None:
    """KIP-814: a JoinGroup v9 leader coming back gets the members and skip_assignment,
    so it knows the group without assigning (and the group does not rebalance)."""

    async def body(h: Harness) -> None:
        ra, rb = await h.until_done(h.join(instance="i-a"), h.join(instance="i-b"))
        await h.sync_all([ra, rb])
        leader = ra if ra.member_id == ra.leader_id else rb
        instance = "i-a" if leader is ra else "i-b"
        generation = h.shard.groups["g"].generation_id
        again = h.join(instance=instance, api_version=9)
        await h.settle()
        answer = again.result()
        assert answer.error == ErrorCode.none and answer.skip_assignment
        assert answer.leader_id == answer.member_id != leader.member_id  # the new id leads
        assert len(answer.members) == 2
        group = h.shard.groups["g"]
        assert group.state is S.STABLE and group.generation_id == generation
        sync = h.sync(answer.member_id, answer.generation_id, instance=instance)
        await h.settle()
        assert sync.result().assignment == assignment_of(leader.member_id, 1)

    run(body)


def test_a_static_member_that_does_not_rejoin_a_rebalance_stays_in_the_group() -> None:
    """Kafka removes only the dynamic members that did not rejoin; a static member being
    restarted keeps its place until its session times out."""

    async def body(h: Harness) -> None:
        kwargs = {"rebalance_ms": 2000, "session_ms": 20_000}
        (ra,) = await h.until_done(h.join(instance="i-a", **kwargs))
        await h.sync_all([ra])
        b = await h.join_dynamic(**kwargs)  # a is restarting: it does not rejoin
        await h.advance(2000)
        group = h.shard.groups["g"]
        assert ra.member_id in group.members
        rb = b.result()
        assert rb.error == ErrorCode.none and rb.leader_id == rb.member_id  # a joined one
        assert sorted(m for m, _, _ in rb.members) == sorted([ra.member_id, rb.member_id])

    run(body)


def test_a_static_member_leaves_by_instance_id() -> None:
    async def body(h: Harness) -> None:
        (ra,) = await h.until_done(h.join(instance="i-a"))
        await h.sync_all([ra])
        _, results = h.leave(("", "i-a"), ("", "i-unknown"))
        assert results == [
            (ra.member_id, "i-a", ErrorCode.none),
            ("", "i-unknown", ErrorCode.unknown_member_id),
        ]
        assert h.shard.groups["g"].state is S.EMPTY

    run(body)


# -- failover: the group from its record --------------------------------------------------


def test_a_replayed_group_is_stable_with_its_members_and_their_sessions_restart() -> None:
    async def body(h: Harness) -> None:
        a, b = await h.stable_group(2, session_ms=1000)
        record = h.shard.log[-1]
        fresh = Harness.make()
        replay_group_metadata(fresh.shard, "g", record.value)
        group = fresh.shard.groups["g"]
        assert group.state is S.STABLE and group.generation_id == a.generation_id
        assert group.leader_id == a.leader_id and group.protocol_name == "range"
        assert group.members[a.member_id].assignment == assignment_of(a.member_id, 1)
        fresh.service.on_loaded(fresh.shard)
        assert fresh.heartbeat(a.member_id, a.generation_id) == ErrorCode.none
        for _ in range(4):
            await fresh.advance(400)
            fresh.heartbeat(a.member_id, a.generation_id)
        assert set(group.members) == {a.member_id}  # b's session ran out on the new one
        replay_group_metadata(fresh.shard, "g", None)
        assert "g" not in fresh.shard.groups

    run(body)


def test_unloading_answers_parked_requests_with_not_coordinator() -> None:
    async def body(h: Harness) -> None:
        (a,) = await h.stable_group(1)
        b = await h.join_dynamic()
        h.service.on_unloaded(h.shard, ErrorCode.not_coordinator)
        await h.settle()
        assert b.result().error == ErrorCode.not_coordinator

    run(body)


def test_a_coordinator_error_is_answered_before_anything_else() -> None:
    async def body(h: Harness) -> None:
        h.coordinator.error = ErrorCode.coordinator_load_in_progress
        task = h.join()
        await h.settle()
        assert task.result().error == ErrorCode.coordinator_load_in_progress
        # Kafka answers a heartbeat NONE while the group loads (aiokafka takes
        # COORDINATOR_LOAD_IN_PROGRESS there as fatal); other errors as they are.
        assert h.heartbeat("m", 1) == ErrorCode.none
        assert h.leave(("m", None))[0] == ErrorCode.coordinator_load_in_progress
        h.coordinator.error = ErrorCode.not_coordinator
        assert h.heartbeat("m", 1) == ErrorCode.not_coordinator

    run(body)


def test_a_rebalance_begun_as_the_leader_syncs_leaves_the_generation_unwritten() -> None:
    """The leader's SyncGroup and a new member's JoinGroup in one turn of the loop: the
    generation's write (a task) starts after the group already rebalances, and must not
    write a record of members that do not support the generation's protocol."""

    async def body(h: Harness) -> None:
        both = [("roundrobin", b"o"), ("range", b"r")]
        (a,) = await h.until_done(await h.join_dynamic(protocols=both))
        assert a.protocol_name == "roundrobin"
        sync = h.sync(a.member_id, a.generation_id, {a.member_id: b"x"})
        join = h.join(protocols=[("range", b"r")], require_known_member_id=False)
        await h.settle()
        assert sync.result().error == ErrorCode.rebalance_in_progress
        assert not join.done() and h.shard.log == []
        rejoin = h.join(a.member_id, protocols=both)
        ra, rb = await h.until_done(rejoin, join)
        assert ra.protocol_name == rb.protocol_name == "range"

    run(body)


def test_a_static_rejoin_whose_write_fails_keeps_the_old_member_id() -> None:
    async def body(h: Harness) -> None:
        ra, rb = await h.until_done(h.join(instance="i-a"), h.join(instance="i-b"))
        await h.sync_all([ra, rb])
        follower = rb if ra.member_id == ra.leader_id else ra
        instance = "i-b" if follower is rb else "i-a"
        h.shard.fail_with = ErrorCode.not_coordinator
        restarted = h.join(instance=instance)
        await h.settle()
        assert restarted.result().error == ErrorCode.not_coordinator
        group = h.shard.groups["g"]
        assert group.static_members[instance] == follower.member_id
        assert h.heartbeat(follower.member_id, follower.generation_id) == ErrorCode.none
        assert f"classic-session-g-{follower.member_id}" in h.shard.timer_keys()

    run(body)


def test_a_generation_that_cannot_be_written_is_answered_not_left_parked() -> None:
    async def body(h: Harness) -> None:
        client_id = "c" * 32767  # the member id (client id - uuid) is too long to store
        (ra,) = await h.until_done(await h.join_dynamic(client_id=client_id))
        sync = h.sync(ra.member_id, ra.generation_id, {ra.member_id: b"x"})
        await h.settle()
        assert sync.result().error == ErrorCode.unknown_server_error
        assert h.shard.groups["g"].state is S.PREPARING_REBALANCE
        other = h.join(group="other", require_known_member_id=False)
        (answer,) = await h.until_done(other)
        assert answer.error == ErrorCode.none  # another group is not affected

    run(body)
