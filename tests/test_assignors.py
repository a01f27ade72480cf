"""The KIP-848 server-side assignors (``uniform``, ``range``): pure functions, checked
with Hypothesis for validity, balance and stickiness."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replog.coordinator.group.assignors import (
    MemberSpec,
    TopicSpec,
    configured_assignors,
    range_assign,
    uniform_assign,
)

TOPIC_IDS = [uuid.UUID(int=i + 1) for i in range(6)]


def _topics(counts: list[int]) -> dict[uuid.UUID, TopicSpec]:
    return {TOPIC_IDS[i]: TopicSpec(TOPIC_IDS[i], f"t{i}", n) for i, n in enumerate(counts)}


topic_counts = st.lists(st.integers(0, 12), min_size=1, max_size=4)


@st.composite
def groups(draw, homogeneous: bool = False):
    counts = draw(topic_counts)
    topics = _topics(counts)
    ids = list(topics)
    n = draw(st.integers(1, 7))
    names = [f"m{i:02d}" for i in range(n)]
    if homogeneous:
        sub = frozenset(draw(st.sets(st.sampled_from(ids), min_size=1)))
        subs = {m: sub for m in names}
    else:
        subs = {m: frozenset(draw(st.sets(st.sampled_from(ids)))) for m in names}
    return topics, {m: MemberSpec(subs[m]) for m in names}


def _check_valid(topics, members, result) -> None:
    assert set(result) == set(members)
    seen: dict[tuple[uuid.UUID, int], str] = {}
    for m, assignment in result.items():
        for topic_id, partitions in assignment.items():
            assert topic_id in members[m].subscribed_topic_ids, "assigned an unsubscribed topic"
            assert partitions, "empty partition sets are left out"
            for p in partitions:
                assert 0 <= p < topics[topic_id].num_partitions
                assert (topic_id, p) not in seen, "a partition assigned twice"
                seen[(topic_id, p)] = m
    for t in topics.values():
        if any(t.topic_id in s.subscribed_topic_ids for s in members.values()):
            for p in range(t.num_partitions):
                assert (t.topic_id, p) in seen, "a subscribed partition left unassigned"


def _count(assignment) -> int:
    return sum(len(ps) for ps in assignment.values())


def _with_current(members, result):
    return {
        m: MemberSpec(spec.subscribed_topic_ids, assigned=result.get(m, {}))
        for m, spec in members.items()
    }


def _flat(assignment) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for t, ps in assignment.items() for p in ps}


@pytest.mark.parametrize("assign", [uniform_assign, range_assign])
@given(data=groups())
@settings(max_examples=150, deadline=None)
def test_every_subscribed_partition_goes_to_one_subscriber(assign, data) -> None:
    topics, members = data
    _check_valid(topics, members, assign(members, topics))


@given(data=groups(homogeneous=True))
@settings(max_examples=150, deadline=None)
def test_uniform_balances_identical_subscriptions_within_one(data) -> None:
    topics, members = data
    result = uniform_assign(members, topics)
    counts = [_count(a) for a in result.values()]
    assert max(counts) - min(counts) <= 1


@given(data=groups())
@settings(max_examples=150, deadline=None)
def test_uniform_no_partition_could_move_to_a_less_loaded_subscriber(data) -> None:
    topics, members = data
    result = uniform_assign(members, topics)
    counts = {m: _count(a) for m, a in result.items()}
    for owner, assignment in result.items():
        for topic_id in assignment:
            for other, spec in members.items():
                if topic_id in spec.subscribed_topic_ids:
                    assert counts[owner] <= counts[other] + 1


@pytest.mark.parametrize("assign", [uniform_assign, range_assign])
@given(data=groups(homogeneous=True), newcomer_first=st.booleans())
@settings(max_examples=150, deadline=None)
def test_a_joining_member_takes_only_what_balance_requires(assign, data, newcomer_first) -> None:
    topics, members = data
    before = assign(members, topics)
    sub = next(iter(members.values())).subscribed_topic_ids
    newcomer = "a-new" if newcomer_first else "z-new"
    grown = {**_with_current(members, before), newcomer: MemberSpec(sub)}
    after = assign(grown, topics)
    _check_valid(topics, grown, after)
    for m in members:
        assert _flat(after[m]) <= _flat(before[m]), "an old member received a partition"
    moved = sum(len(_flat(before[m]) - _flat(after[m])) for m in members)
    assert moved == _count(after[newcomer])


@pytest.mark.parametrize("assign", [uniform_assign, range_assign])
@given(data=groups(homogeneous=True), leaving=st.integers(0, 6))
@settings(max_examples=150, deadline=None)
def test_a_leaving_member_only_hands_out_its_partitions(assign, data, leaving) -> None:
    topics, members = data
    if len(members) < 2:
        return
    before = assign(members, topics)
    gone = sorted(members)[leaving % len(members)]
    rest = {m: s for m, s in _with_current(members, before).items() if m != gone}
    after = assign(rest, topics)
    for m in rest:
        assert _flat(before[m]) <= _flat(after[m])


@given(data=groups())
@settings(max_examples=100, deadline=None)
def test_assignors_are_stable_when_nothing_changes(data) -> None:
    topics, members = data
    for assign in (uniform_assign, range_assign):
        first = assign(members, topics)
        again = assign(_with_current(members, first), topics)
        assert again == first


@given(data=groups())
@settings(max_examples=150, deadline=None)
def test_range_balances_each_topic_and_co_partitions(data) -> None:
    topics, members = data
    result = range_assign(members, topics)
    for t in topics.values():
        subs = sorted(m for m, s in members.items() if t.topic_id in s.subscribed_topic_ids)
        if not subs:
            continue
        sizes = [len(result[m].get(t.topic_id, ())) for m in subs]
        assert max(sizes) - min(sizes) <= 1
        # Fresh ranges are consecutive, the first members (by id) holding one more.
        quota, extra = divmod(t.num_partitions, len(subs))
        start = 0
        for i, m in enumerate(subs):
            size = quota + (1 if i < extra else 0)
            assert sorted(result[m].get(t.topic_id, ())) == list(range(start, start + size))
            start += size
    for a in topics.values():
        for b in topics.values():
            subs_a = {m for m, s in members.items() if a.topic_id in s.subscribed_topic_ids}
            subs_b = {m for m, s in members.items() if b.topic_id in s.subscribed_topic_ids}
            if subs_a == subs_b and a.num_partitions == b.num_partitions:
                for m in subs_a:
                    assert result[m].get(a.topic_id, frozenset()) == result[m].get(
                        b.topic_id, frozenset()
                    )


def test_range_keeps_co_partitioned_topics_together_after_a_join() -> None:
    topics = _topics([6, 6])
    both = frozenset(topics)
    members = {m: MemberSpec(both) for m in ("a", "b")}
    before = range_assign(members, topics)
    grown = {**_with_current(members, before), "c": MemberSpec(both)}
    after = range_assign(grown, topics)
    t0, t1 = TOPIC_IDS[0], TOPIC_IDS[1]
    for m in grown:
        assert after[m][t0] == after[m][t1]
        assert len(after[m][t0]) == 2


def test_uniform_spreads_a_members_share_over_topics() -> None:
    topics = _topics([3, 3])
    members = {m: MemberSpec(frozenset(topics)) for m in ("a", "b", "c")}
    result = uniform_assign(members, topics)
    for m in members:
        assert {t: len(ps) for t, ps in result[m].items()} == {TOPIC_IDS[0]: 1, TOPIC_IDS[1]: 1}


def test_a_deleted_topic_or_fewer_partitions_drop_out_of_the_assignment() -> None:
    topics = _topics([4, 2])
    gone = TOPIC_IDS[1]
    members = {
        "a": MemberSpec(
            frozenset(topics), assigned={TOPIC_IDS[0]: frozenset({0, 1, 7}), gone: frozenset({0})}
        ),
        "b": MemberSpec(frozenset(topics), assigned={TOPIC_IDS[0]: frozenset({2, 3})}),
    }
    del topics[gone]
    result = uniform_assign(members, topics)
    assert result == {
        "a": {TOPIC_IDS[0]: frozenset({0, 1})},
        "b": {TOPIC_IDS[0]: frozenset({2, 3})},
    }


def test_configured_assignors_take_kafka_names_and_keep_order() -> None:
    assert list(configured_assignors("range,uniform")) == ["range", "uniform"]
    assert list(
        configured_assignors(["org.apache.kafka.coordinator.group.assignor.UniformAssignor"])
    ) == ["uniform"]
    with pytest.raises(ValueError):
        configured_assignors("sticky")
