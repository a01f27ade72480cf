"""The KIP-848 group core: heartbeats, incremental reconciliation, leaving, fencing and
static membership, driven directly (no broker), every decision's records replayed."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from consumer_group_util import SETTINGS, Driver, Topics, owned, snapshot
from replog.coordinator.group.consumer_group import ConsumerGroupState
from replog.coordinator.group.consumer_group_heartbeat import (
    CancelMemberTimers,
    ScheduleRebalanceTimeout,
    ScheduleSessionTimeout,
)
from replog.coordinator.group.reconciliation import MemberState


def _partitions(assignment) -> set[int]:
    return {p for ps in (assignment or {}).values() for p in ps}


def test_first_member_gets_every_partition_and_the_group_is_stable() -> None:
    d = Driver(Topics(orders=4))
    r = d.join("a")
    assert r.error == ErrorCode.none
    assert (r.member_id, r.member_epoch) == ("a", 1)
    assert _partitions(r.assignment) == {0, 1, 2, 3}
    assert d.group.state() is ConsumerGroupState.STABLE
    assert (d.group.group_epoch, d.group.assignment_epoch) == (1, 1)
    assert ScheduleSessionTimeout("a", SETTINGS.session_timeout_ms) in r.effects
    # A steady heartbeat changes nothing and carries no assignment.
    again = d.heartbeat("a", 1)
    assert again.records == [] and again.assignment is None and again.member_epoch == 1


def test_a_joining_member_gets_partitions_only_after_the_others_revoke_them() -> None:
    d = Driver(Topics(orders=4))
    a = d.join("a")
    b = d.join("b")
    # b is at the new epoch but everything it should get is still a's.
    assert b.member_epoch == 2 and _partitions(b.assignment) == set()
    assert d.group.members["b"].state is MemberState.UNRELEASED_PARTITIONS
    assert d.group.state() is ConsumerGroupState.RECONCILING
    # a is told to keep half; it stays at epoch 1 until it revokes the rest.
    a2 = d.heartbeat("a", 1, owned=owned(a.assignment))
    kept = _partitions(a2.assignment)
    assert len(kept) == 2 and a2.member_epoch == 1
    assert d.group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert any(isinstance(e, ScheduleRebalanceTimeout) for e in a2.effects)
    # b still cannot have them: a has not acknowledged.
    assert _partitions(d.heartbeat("b", 2, owned=()).assignment) == set()
    # A heartbeat without owned partitions proves nothing.
    assert d.heartbeat("a", 1).member_epoch == 1
    a3 = d.heartbeat("a", 1, owned=owned(a2.assignment))
    assert a3.member_epoch == 2 and d.group.members["a"].state is MemberState.STABLE
    b3 = d.heartbeat("b", 2, owned=())
    assert _partitions(b3.assignment) == {0, 1, 2, 3} - kept
    assert d.group.state() is ConsumerGroupState.STABLE


def test_a_member_leaving_bumps_the_epoch_and_its_partitions_move() -> None:
    d = Driver(Topics(orders=4))
    _converge(d, ["a", "b"])
    left = d.heartbeat("b", -1)
    assert (left.error, left.member_epoch) == (ErrorCode.none, -1)
    assert CancelMemberTimers("b") in left.effects
    assert set(d.group.members) == {"a"} and d.group.state() is ConsumerGroupState.ASSIGNING
    epoch = d.group.members["a"].member_epoch
    a = d.heartbeat("a", epoch, owned=owned(d.group.members["a"].assigned))
    assert _partitions(a.assignment) == {0, 1, 2, 3} and a.member_epoch == d.group.group_epoch


def test_session_expiry_removes_the_member_and_the_rest_take_over() -> None:
    d = Driver(Topics(orders=6))
    _converge(d, ["a", "b", "c"])
    before = d.group.group_epoch
    d.expire("c")
    assert "c" not in d.group.members and d.group.group_epoch == before + 1
    _settle(d)
    got = [_partitions(m.assigned) for m in d.group.members.values()]
    assert sorted(len(g) for g in got) == [3, 3] and set().union(*got) == set(range(6))
    assert snapshot(d.replayed()) == snapshot(d.group)


def test_fenced_epochs_and_unknown_members() -> None:
    d = Driver(Topics(orders=2))
    r = d.join("a")
    assert d.heartbeat("a", 5).error == ErrorCode.fenced_member_epoch
    assert d.heartbeat("ghost", 1).error == ErrorCode.unknown_member_id
    d.join("b")
    d.heartbeat("a", 1, owned=owned(r.assignment))
    a = d.heartbeat("a", 1, owned=owned(d.group.members["a"].assigned))
    assert a.member_epoch == 2
    # The answer that moved a to epoch 2 was lost: its previous epoch with a subset of
    # its partitions is accepted; a superset is fenced.
    assert d.heartbeat("a", 1, owned=owned(d.group.members["a"].assigned)).error == ErrorCode.none
    assert d.heartbeat("a", 1, owned=owned(r.assignment)).error == ErrorCode.fenced_member_epoch
    # Rejoining with epoch 0 while known at a later epoch is fenced too (Kafka).
    assert d.join("a").error == ErrorCode.fenced_member_epoch
    assert d.heartbeat("a", -1).error == ErrorCode.none


def test_the_rebalance_timeout_fences_a_member_that_does_not_revoke() -> None:
    d = Driver(Topics(orders=4))
    a = d.join("a")
    d.join("b")
    d.heartbeat("a", 1, owned=owned(a.assignment))
    assert d.group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert d.rebalance_timeout("a", 0) == []  # another epoch: ignored
    assert d.rebalance_timeout("a", 1) != []
    assert "a" not in d.group.members
    b = d.heartbeat("b", 2, owned=())
    _settle(d)
    assert _partitions(d.group.members["b"].assigned) == {0, 1, 2, 3}
    assert b.error == ErrorCode.none


def test_static_member_restarts_within_its_session_and_keeps_its_assignment() -> None:
    d = Driver(Topics(orders=4))
    _converge(d, ["a", "b"], instance_ids={"a": "host-a"})
    kept = d.group.members["a"].assigned
    epoch = d.group.group_epoch
    left = d.heartbeat("a", -2, instance_id="host-a")
    assert (left.error, left.member_epoch) == (ErrorCode.none, -2)
    assert d.group.members["a"].member_epoch == -2 and d.group.group_epoch == epoch
    # Another process cannot take the instance id of a live member...
    assert d.join("x", instance_id="host-b").error == ErrorCode.none
    assert d.join("y", instance_id="host-b").error == ErrorCode.unreleased_instance_id
    # ...but the restarted one takes over the departed one's place and partitions.
    back = d.join("a2", instance_id="host-a")
    assert back.error == ErrorCode.none and "a" not in d.group.members
    assert d.group.members["a2"].assigned == kept
    assert back.assignment == kept
    # The old member id is fenced.
    assert d.heartbeat("a", 3, instance_id="host-a").error == ErrorCode.fenced_instance_id
    assert snapshot(d.replayed()) == snapshot(d.group)


def test_requests_refused_as_kafka_does() -> None:
    d = Driver(Topics(orders=2))
    bad = [
        ({"group_id": ""}, ErrorCode.invalid_request),
        ({"rebalance_timeout_ms": -1}, ErrorCode.invalid_request),
        ({"owned": None}, ErrorCode.invalid_request),
        ({"subscribed_topic_names": ()}, ErrorCode.invalid_request),
        ({"server_assignor": "sticky"}, ErrorCode.unsupported_assignor),
        ({"subscribed_topic_regex": "(unclosed"}, ErrorCode.invalid_regular_expression),
        ({"member_id": ""}, ErrorCode.invalid_request),  # v1 members bring their own id
    ]
    for change, error in bad:
        d.group_id = change.pop("group_id", "g")
        member = change.pop("member_id", "a")
        fields = {"rebalance_timeout_ms": 1000, "owned": (), "subscribed_topic_names": ("orders",)}
        fields.update(change)
        assert d.heartbeat(member, 0, **fields).error == error, change
    d.group_id = "g"
    assert d.heartbeat("a", 3).error == ErrorCode.group_id_not_found
    # v0: the coordinator names the member.
    r = d.join("", api_version=0)
    assert r.error == ErrorCode.none and r.member_id.startswith("generated-")
    small = Driver(Topics(orders=2), replace(SETTINGS, max_size=1))
    small.join("a")
    assert small.join("b").error == ErrorCode.group_max_size_reached


def test_a_classic_group_blocks_its_id_unless_empty() -> None:
    class Classic:
        group_type = "classic"

        def __init__(self, empty: bool) -> None:
            self.empty = empty

        def is_empty(self) -> bool:
            return self.empty

    d = Driver(Topics(orders=2))
    d.shard.groups["g"] = Classic(empty=False)
    assert d.join("a").error == ErrorCode.group_id_not_found
    d.shard.groups["g"] = Classic(empty=True)
    r = d.join("a")
    assert r.error == ErrorCode.none and r.replaces_classic_group
    assert d.group.group_type == "consumer"


def test_topic_changes_bump_the_group_epoch_on_the_next_heartbeat() -> None:
    topics = Topics(orders=2)
    d = Driver(topics)
    d.join("a", topics=("orders", "later"))
    epoch = d.group.group_epoch
    topics.counts["orders"] = 4  # partitions added
    r = d.heartbeat("a", epoch, owned=owned(d.group.members["a"].assigned))
    assert d.group.group_epoch == epoch + 1 and _partitions(r.assignment) == {0, 1, 2, 3}
    topics.create("later", 1)  # a subscribed topic created
    r = d.heartbeat("a", d.group.group_epoch, owned=owned(r.assignment))
    assert len(r.assignment) == 2
    topics.delete("orders")
    r = d.heartbeat("a", d.group.group_epoch, owned=owned(r.assignment))
    _settle(d)
    assert list(d.group.members["a"].assigned) == [topics.ids["later"]]


def test_regex_subscriptions_follow_the_topics_they_match() -> None:
    topics = Topics(orders=1, payments=1, other=1)
    d = Driver(topics)
    r = d.heartbeat(
        "a", 0, rebalance_timeout_ms=1000, owned=(), subscribed_topic_regex="(orders|pay.*)"
    )
    assert set(r.assignment) == {topics.ids["orders"], topics.ids["payments"]}
    topics.create("payouts", 2)
    r = d.heartbeat("a", d.group.group_epoch, owned=owned(r.assignment))
    assert topics.ids["payouts"] in r.assignment
    assert d.group.is_subscribed_to_topic("payouts")
    assert not d.group.is_subscribed_to_topic("other")


def test_offset_commit_and_fetch_validation() -> None:
    d = Driver(Topics(orders=2))
    d.join("a")
    g = d.group
    assert g.validate_offset_commit("a", 1, None, 9) == ErrorCode.none
    assert g.validate_offset_commit("a", 0, None, 9) == ErrorCode.stale_member_epoch
    assert g.validate_offset_commit("a", 1, None, 8) == ErrorCode.unsupported_version
    assert g.validate_offset_commit("zz", 1, None, 9) == ErrorCode.unknown_member_id
    assert g.validate_offset_commit("", -1, None, 9) == ErrorCode.unknown_member_id
    assert g.validate_offset_fetch(None, -1) == ErrorCode.none
    assert g.validate_offset_fetch("a", 1) == ErrorCode.none
    assert g.validate_offset_fetch("a", 0) == ErrorCode.stale_member_epoch
    assert g.validate_delete_group() == ErrorCode.non_empty_group
    d.heartbeat("a", -1)
    assert g.validate_offset_commit("", -1, None, 9) == ErrorCode.none
    assert g.validate_delete_group() == ErrorCode.none
    d.apply(g.tombstone_records())
    assert "g" not in d.shard.groups and d.replayed() is None


# -- a simulated group: clients that act on what they are told ---------------------------


def _converge(d: Driver, members: list[str], instance_ids=None) -> None:
    for m in members:
        extra = {"instance_id": instance_ids[m]} if instance_ids and m in instance_ids else {}
        d.join(m, **extra)
    _settle(d)


def _settle(d: Driver, rounds: int = 10) -> None:
    """Every member heartbeats, reporting what it was told it owns, until stable."""
    for _ in range(rounds):
        if d.group.state() is ConsumerGroupState.STABLE:
            return
        for member_id in sorted(d.group.members):
            member = d.group.members[member_id]
            extra = {"instance_id": member.instance_id} if member.instance_id else {}
            d.heartbeat(member_id, member.member_epoch, owned=owned(member.assigned), **extra)
    assert d.group.state() is ConsumerGroupState.STABLE


operations = st.lists(
    st.tuples(st.sampled_from(["join", "leave", "expire", "heartbeat", "lose"]), st.integers(0, 5)),
    max_size=40,
)


@given(ops=operations, partitions=st.integers(1, 9))
@settings(max_examples=120, deadline=None)
def test_no_partition_is_ever_owned_by_two_clients(ops, partitions) -> None:
    """Clients own exactly what their last answer assigned; whatever the order of joins,
    leaves, expiries, heartbeats and lost answers, no partition is owned by two clients,
    the group converges once everyone heartbeats, and the log rebuilds the same group."""
    d = Driver(Topics(orders=partitions))
    clients: dict[str, tuple[int, set[int]]] = {}  # member -> (epoch, owned)
    for op, n in ops:
        name = f"m{n}"
        if op == "join" and name not in clients:
            r = d.join(name)
            clients[name] = (r.member_epoch, _partitions(r.assignment))
        elif op in ("leave", "expire") and name in clients:
            if op == "leave":
                d.heartbeat(name, -1)
            else:
                d.expire(name)
            del clients[name]
        elif op in ("heartbeat", "lose") and name in clients:
            epoch, mine = clients[name]
            topic = d.topics.ids["orders"]
            r = d.heartbeat(name, epoch, owned=((topic, tuple(sorted(mine))),))
            if r.error == ErrorCode.fenced_member_epoch:
                # Two answers in a row lost: the client abandons its partitions and
                # its session runs out.
                d.expire(name)
                del clients[name]
                continue
            assert r.error == ErrorCode.none, r.message
            if op == "heartbeat":  # "lose": the answer never arrives
                clients[name] = (
                    r.member_epoch,
                    _partitions(r.assignment) if r.assignment is not None else mine,
                )
        every = [p for _, mine in clients.values() for p in mine]
        assert len(every) == len(set(every)), "a partition owned by two clients"
    if clients:
        _settle(d)
        assert set().union(*(_partitions(m.assigned) for m in d.group.members.values())) == set(
            range(partitions)
        )
    assert snapshot(d.replayed()) == snapshot(d.shard.groups.get("g"))
