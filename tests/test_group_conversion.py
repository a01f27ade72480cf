"""KIP-848's online upgrade and downgrade on the coordinator core (virtual clock, the
shipped classic service and KIP-848 runtime on one stand-in shard): the
``group.consumer.migration.policy`` table with Kafka's error codes, classic members
answered from a consumer group's state (JoinGroup, SyncGroup with the server-side
assignment, Heartbeat's REBALANCE_IN_PROGRESS, LeaveGroup, OffsetCommit), and the
conversions written to the log so that a coordinator loading it has the converted
group. Real clients: ``test_mixed_group_clients.py`` and
``test_group_migration_policy.py``."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from classic_group_util import Harness, run
from consumer_group_util import Topics
from replog.coordinator.group import consumer_records
from replog.coordinator.group import consumer_records_codec as cr
from replog.coordinator.group import records as rec
from replog.coordinator.group.classic_group import ClassicGroup, GroupState
from replog.coordinator.group.classic_group_service import replay_group_metadata_record
from replog.coordinator.group.consumer_group import ConsumerGroup
from replog.coordinator.group.consumer_group_heartbeat import HeartbeatRequest
from replog.coordinator.group.consumer_group_runtime import ConsumerGroupRuntime
from replog.coordinator.group.consumer_protocol import (
    assigned_partitions,
    decode_subscription,
    encode_assignment,
)
from replog.coordinator.group.group_conversion import ConsumerGroupMigrationPolicy
from replog.protocol.wire import I16, I32, string

TOPIC = "orders"
PARTITIONS = 6


def subscription(topics=(TOPIC,), version: int = 0, owned=()) -> bytes:
    """A ConsumerProtocolSubscription as a classic client writes it."""
    out = [I16.pack(version), I32.pack(len(topics))] + [string(t) for t in topics]
    out.append(I32.pack(-1))  # user data
    if version >= 1:
        out.append(I32.pack(len(owned)))
        for topic, partitions in owned:
            out += [string(topic), I32.pack(len(partitions))] + [I32.pack(p) for p in partitions]
    return b"".join(out)


PROTOCOLS = [("range", subscription()), ("roundrobin", subscription())]


def make(policy: str = "bidirectional") -> tuple[Harness, ConsumerGroupRuntime]:
    h = Harness.make(**{"group.consumer.migration.policy": policy})
    ids = iter(f"new-{i}" for i in range(1000))
    runtime = ConsumerGroupRuntime(h.coordinator, h.coordinator.config, Topics(orders=PARTITIONS))
    runtime._new_member_id = lambda: next(ids)
    return h, runtime


def go(policy: str, test) -> None:
    async def body(_unused: Harness) -> None:
        h, runtime = make(policy)
        h.record_tasks()
        await test(h, runtime)

    run(body)


async def classic_group(h: Harness, count: int = 2) -> list:
    """``count`` classic members, Stable, the leader's range assignment synced."""
    tasks = [await h.join_dynamic(protocols=PROTOCOLS) for _ in range(count)]
    answers = await h.until_done(*tasks)
    leader = next(a for a in answers if a.member_id == a.leader_id)
    plan = {
        member: encode_assignment(0, {TOPIC: list(range(i, PARTITIONS, count))})
        for i, (member, _, _) in enumerate(leader.members)
    }
    syncs = [h.sync(a.member_id, a.generation_id, plan if a is leader else None) for a in answers]
    await h.settle()
    assert all(s.result().error == ErrorCode.none for s in syncs)
    assert h.shard.groups["g"].state is GroupState.STABLE
    return answers


async def heartbeat(h: Harness, runtime: ConsumerGroupRuntime, member_id: str, epoch: int, **kw):
    request = HeartbeatRequest(
        "g",
        member_id or "n1",  # v1 clients make their member id
        epoch,
        rebalance_timeout_ms=kw.pop("rebalance_timeout_ms", 30_000 if epoch == 0 else -1),
        subscribed_topic_names=kw.pop("topics", (TOPIC,) if epoch == 0 else None),
        owned=kw.pop("owned", () if epoch == 0 else None),
        **kw,
    )
    return await runtime.heartbeat(h.shard, request)


def held(group: ConsumerGroup) -> list[int]:
    return sorted(p for m in group.members.values() for ps in m.assigned.values() for p in ps)


def loaded(h: Harness):
    """The group as a new coordinator replays it from the written records."""

    class Shard:
        groups: dict = {}

    shard = Shard()
    shard.groups = {}
    for record in h.shard.log:
        version = rec.key_version(record.key)
        if version == rec.GROUP_METADATA_KEY:
            replay_group_metadata_record(shard, version, record.key, record.value)
        elif rec.FIRST_CONSUMER_GROUP_KEY <= version <= rec.LAST_CONSUMER_GROUP_KEY:
            consumer_records.replay(shard, version, record.key, record.value)
    return shard.groups.get("g")


# -- the policy -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "upgrade", "downgrade"),
    [
        ("bidirectional", True, True),
        ("upgrade", True, False),
        ("downgrade", False, True),
        ("disabled", False, False),
        ("BIDIRECTIONAL", True, True),
    ],
)
def test_the_policy_table(policy: str, upgrade: bool, downgrade: bool) -> None:
    parsed = ConsumerGroupMigrationPolicy.parse(policy)
    assert (parsed.upgrade_enabled, parsed.downgrade_enabled) == (upgrade, downgrade)


def test_the_default_policy_is_kafka_4s_bidirectional() -> None:
    h = Harness.make()
    assert h.coordinator.config.group_consumer_migration_policy == "bidirectional"


def test_an_unknown_policy_is_a_config_error() -> None:
    from replog.config import ConfigError

    with pytest.raises(ConfigError, match="group.consumer.migration.policy"):
        Harness.make(**{"group.consumer.migration.policy": "sideways"})


@pytest.mark.parametrize("policy", ["downgrade", "disabled"])
def test_without_upgrade_a_new_member_of_a_classic_group_gets_group_id_not_found(policy) -> None:
    async def test(h: Harness, runtime: ConsumerGroupRuntime) -> None:
        await classic_group(h)
        log_before = list(h.shard.log)
        decision = await heartbeat(h, runtime, "m", 0)
        assert decision.error == ErrorCode.group_id_not_found
        assert decision.message == (
            "Cannot upgrade classic group g to consumer group because online upgrade is disabled."
        )
        assert isinstance(h.shard.groups["g"], ClassicGroup)
        assert h.shard.log == log_before

    go(policy, test)


def test_a_group_that_does_not_use_the_consumer_protocol_is_not_upgraded() -> None:
    async def test(h: Harness, runtime: ConsumerGroupRuntime) -> None:
        tasks = [await h.join_dynamic(protocol_type="connect", protocols=PROTOCOLS)]
        await h.until_done(*tasks)
        decision = await heartbeat(h, runtime, "m", 0)
        assert decision.error == ErrorCode.group_id_not_found
        assert "does not use the consumer embedded protocol" in (decision.message or "")

    go("bidirectional", test)


# -- upgrade ---------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["bidirectional", "upgrade"])
def test_a_new_protocol_member_converts_a_classic_group(policy: str) -> None:
    async def test(h: Harness, runtime: ConsumerGroupRuntime) -> None:
        answers = await classic_group(h)
        classic = h.shard.groups["g"]
        generation = classic.generation_id
        decision = await heartbeat(h, runtime, "", 0)
        assert decision.error == ErrorCode.none, decision
        group = h.shard.groups["g"]
        assert isinstance(group, ConsumerGroup)
        assert classic.state is GroupState.DEAD
        # The classic members are there with their partitions, at their generation.
        for a in answers:
            member = group.members[a.member_id]
            assert member.uses_classic_protocol
            assert member.classic.session_timeout_ms == 10_000
            assert member.classic.supported_protocols == tuple(PROTOCOLS)
        assert group.group_epoch == generation + 1
        # The new member waits for partitions the classic members still hold.
        assert held(group) == list(range(PARTITIONS))
        assert decision.member_epoch == generation + 1
        # The log: the classic group's tombstone, then the consumer group's records.
        classic_key = rec.encode_group_metadata_key("g")
        (at,) = [i for i, r in enumerate(h.shard.log) if r.key == classic_key and r.value is None]
        after = [rec.key_version(r.key) for r in h.shard.log[at + 1 :]]
        assert after and all(rec.FIRST_CONSUMER_GROUP_KEY <= v for v in after)
        again = loaded(h)
        assert isinstance(again, ConsumerGroup)
        assert again.members == group.members
        assert again.group_epoch == group.group_epoch

    go(policy, test)


def test_classic_members_rejoin_and_get_the_server_side_assignment() -> None:
    async def test(h: Harness, runtime: ConsumerGroupRuntime) -> None:
        answers = await classic_group(h)
        generation = answers[0].generation_id
        new = await heartbeat(h, runtime, "", 0)
        new_id = new.member_id
        # Heartbeat: the classic members must rejoin (the group epoch moved on).
        for a in answers:
            assert h.heartbeat(a.member_id, generation) == ErrorCode.rebalance_in_progress
        assert h.heartbeat(answers[0].member_id, generation + 7) == ErrorCode.illegal_generation
        assert h.heartbeat("nobody", generation) == ErrorCode.unknown_member_id
        assert h.heartbeat(new_id, generation) == ErrorCode.unknown_member_id  # not classic
        # They rejoin (eager clients own nothing then) and sync: answered at once.
        partitions: dict[str, list[int]] = {}
        for a in answers:
            join = h.join(a.member_id, protocols=PROTOCOLS)
            await h.settle()
            joined = join.result()
            assert joined.error == ErrorCode.none, joined
            assert (joined.protocol_type, joined.protocol_name) == ("consumer", "range")
            assert joined.leader_id == "" and joined.members == []
            sync = h.sync(a.member_id, joined.generation_id, protocol_name="range")
            await h.settle()
            synced = sync.result()
            assert synced.error == ErrorCode.none
            partitions[a.member_id] = [p for _, p in assigned_partitions(synced.assignment)]
            assert h.heartbeat(a.member_id, joined.generation_id) == ErrorCode.none
        # The new member takes the released partitions on its next heartbeat.
        group = h.shard.groups["g"]
        nxt = await heartbeat(h, runtime, new_id, group.members[new_id].member_epoch)
        mine = sorted(p for ps in (nxt.assignment or {}).values() for p in ps)
        every = mine + [p for ps in partitions.values() for p in ps]
        assert sorted(every) == list(range(PARTITIONS))
        assert sorted(len(ps) for ps in partitions.values()) == [2, 2] and len(mine) == 2
        # A classic member commits with its generation (its member epoch).
        member = group.members[answers[0].member_id]
        commit = group.validate_offset_commit
        assert commit(member.member_id, member.member_epoch, None, 8) == ErrorCode.none
        assert commit(member.member_id, 1, None, 8) == ErrorCode.illegal_generation
        assert commit(new_id, group.members[new_id].member_epoch, None, 8) == (
            ErrorCode.unsupported_version
        )

    go("bidirectional", test)


def test_classic_requests_to_a_consumer_group_get_kafkas_errors() -> None:
    async def test(h: Harness, runtime: ConsumerGroupRuntime) -> None:
        await heartbeat(h, runtime, "", 0)  # a consumer group with one member
        bad = h.join(protocol_type="connect", protocols=PROTOCOLS)
        await h.settle()
        assert bad.result().error == ErrorCode.inconsistent_group_protocol
        first = h.join(protocols=PROTOCOLS)
        await h.settle()
        assert first.result().error == ErrorCode.member_id_required
        member_id = first.result().member_id
        join = h.join(member_id, protocols=PROTOCOLS)
        await h.settle()
        joined = join.result()
        assert joined.error == ErrorCode.none
        # A second classic member must share a protocol with the first.
        other = h.join(protocols=[("sticky", subscription())], require_known_member_id=False)
        await h.settle()
        assert other.result().error == ErrorCode.inconsistent_group_protocol
        wrong = h.sync(member_id, joined.generation_id, protocol_name="roundrobin")
        stale = h.sync(member_id, joined.generation_id - 1)
        await h.settle()
        assert wrong.result().error == ErrorCode.inconsistent_group_protocol
        assert stale.result().error == ErrorCode.illegal_generation
        # LeaveGroup removes it (the group epoch bumps) and answers unknown members.
        epoch = h.shard.groups["g"].group_epoch
        error, results = await h.service.leave("g", [(member_id, None), ("nobody", None)])
        assert error == ErrorCode.none
        assert results == [
            (member_id, None, ErrorCode.none),
            ("nobody", None, ErrorCode.unknown_member_id),
        ]
        group = h.shard.groups["g"]
        assert member_id not in group.members and group.group_epoch == epoch + 1

    go("bidirectional", test)


def test_a_classic_member_that_does_not_rejoin_or_sync_in_time_is_fenced() -> None:
    """Kafka's join and sync timeouts for classic members of a consumer group: each
    keeps heartbeating (its session stays alive), one never rejoins when told to, the
    other rejoins but never syncs; both are removed after their rebalance timeout."""

    async def test(h: Harness, runtime: ConsumerGroupRuntime) -> None:
        answers = await classic_group(h)
        await heartbeat(h, runtime, "", 0)
        stubborn, slow = answers[0].member_id, answers[1].member_id
        generation = answers[0].generation_id
        assert h.heartbeat(stubborn, generation) == ErrorCode.rebalance_in_progress
        join = h.join(slow, protocols=PROTOCOLS)
        await h.settle()
        slow_generation = join.result().generation_id
        for _ in range(8):  # 8 x 5 s: past the 30 s rebalance timeout, within sessions
            await h.advance(5000)
            group = h.shard.groups["g"]
            if stubborn in group.members:
                h.heartbeat(stubborn, generation)
            if slow in group.members:
                h.heartbeat(slow, slow_generation)
        group = h.shard.groups["g"]
        assert stubborn not in group.members and slow not in group.members
        assert list(group.members) == ["n1"]

    go("bidirectional", test)


# -- downgrade -------------------------------------------------------------------------------


async def rejoin(h: Harness, member_id: str) -> None:
    """A classic member's JoinGroup and SyncGroup, as a client does."""
    join = h.join(member_id, protocols=PROTOCOLS)
    await h.settle()
    assert join.result().error == ErrorCode.none
    sync = h.sync(member_id, join.result().generation_id)
    await h.settle()
    assert sync.result().error == ErrorCode.none


async def catch_up(h: Harness, member_ids: list[str]) -> None:
    """The classic members heartbeat and rejoin until none is asked to rejoin (as a
    client does between rebalances)."""
    for _ in range(10):
        group = h.shard.groups["g"]
        behind = [
            m
            for m in member_ids
            if h.heartbeat(m, group.members[m].member_epoch) == ErrorCode.rebalance_in_progress
        ]
        if not behind:
            return
        for m in behind:
            await rejoin(h, m)
    raise AssertionError("classic members keep being asked to rejoin")


async def mixed_group(h: Harness, runtime: ConsumerGroupRuntime) -> tuple[list, str]:
    answers = await classic_group(h)
    new = await heartbeat(h, runtime, "", 0)
    for a in answers:
        await rejoin(h, a.member_id)
    return answers, new.member_id


@pytest.mark.parametrize("policy", ["bidirectional", "downgrade"])
def test_the_last_new_protocol_member_leaving_converts_the_group_back(policy: str) -> None:
    async def test(h: Harness, runtime: ConsumerGroupRuntime) -> None:
        if policy == "downgrade":  # no upgrade: start from a consumer group
            new = await heartbeat(h, runtime, "", 0)
            answers = []
            for _ in range(2):
                first = h.join(protocols=PROTOCOLS)
                await h.settle()
                join = h.join(first.result().member_id, protocols=PROTOCOLS)
                await h.settle()
                answers.append(join.result())
            new_id = new.member_id
        else:
            answers, new_id = await mixed_group(h, runtime)
        await catch_up(h, [a.member_id for a in answers])
        group = h.shard.groups["g"]
        epoch = group.members[new_id].member_epoch
        targets = {m: group.target_assignment.get(m, {}) for m in group.members}
        left = await heartbeat(h, runtime, new_id, -1)
        assert left.error == ErrorCode.none
        classic = h.shard.groups["g"]
        assert isinstance(classic, ClassicGroup)
        assert group.dead
        # Stable at the group epoch with the consumer group's targets, then a rebalance.
        assert classic.state is GroupState.PREPARING_REBALANCE
        assert classic.generation_id == group.group_epoch
        assert classic.protocol_type == "consumer" and classic.protocol_name == "range"
        assert set(classic.members) == {a.member_id for a in answers}
        for member_id, member in classic.members.items():
            written = {p for _, p in assigned_partitions(member.assignment)}
            assert written == {p for ps in targets[member_id].values() for p in ps}
        assert epoch > 0
        # The classic members rejoin as a classic group.
        for a in answers:
            gen = group.members[a.member_id].member_epoch
            assert h.heartbeat(a.member_id, gen) == ErrorCode.rebalance_in_progress
        tasks = [h.join(a.member_id, protocols=PROTOCOLS) for a in answers]
        results = await h.until_done(*tasks)
        assert all(r.error == ErrorCode.none for r in results)
        assert classic.state is GroupState.COMPLETING_REBALANCE
        # A new coordinator loads a classic group from the log.
        again = loaded(h)
        assert isinstance(again, ClassicGroup) and set(again.members) == set(classic.members)

    go(policy, test)


@pytest.mark.parametrize("policy", ["upgrade", "disabled"])
def test_without_downgrade_the_group_stays_a_consumer_group(policy: str) -> None:
    async def test(h: Harness, runtime: ConsumerGroupRuntime) -> None:
        new = await heartbeat(h, runtime, "", 0)
        first = h.join(protocols=PROTOCOLS)
        await h.settle()
        join = h.join(first.result().member_id, protocols=PROTOCOLS)
        await h.settle()
        assert join.result().error == ErrorCode.none
        left = await heartbeat(h, runtime, new.member_id, -1)
        assert left.error == ErrorCode.none
        group = h.shard.groups["g"]
        assert isinstance(group, ConsumerGroup)
        assert list(group.members) == [join.result().member_id]

    go(policy, test)


def test_a_new_protocol_member_whose_session_expires_converts_the_group_back() -> None:
    async def test(h: Harness, runtime: ConsumerGroupRuntime) -> None:
        answers, new_id = await mixed_group(h, runtime)
        # The classic members keep heartbeating; the new one goes silent.
        for _ in range(12):
            await h.advance(4000)
            group = h.shard.groups["g"]
            if isinstance(group, ClassicGroup):
                break
            await catch_up(h, [a.member_id for a in answers])  # heartbeats, rejoins
        assert isinstance(h.shard.groups["g"], ClassicGroup)

    go("bidirectional", test)


# -- the record ------------------------------------------------------------------------------


def test_classic_member_metadata_is_kafkas_tagged_field() -> None:
    value = cr.MemberMetadataValue(
        None, None, "c", "/h", ("orders",), None, 30_000, None,
        cr.ClassicMemberMetadata(10_000, (("range", b"\x00\x01"), ("roundrobin", b""))),
    )  # fmt: skip
    encoded = cr.encode_value(value)
    assert cr.decode_value(cr.MEMBER_METADATA, encoded) == value
    plain = cr.MemberMetadataValue(None, None, "c", "/h", ("orders",), None, 30_000, None)
    plain_bytes = cr.encode_value(plain)
    assert plain_bytes.endswith(b"\x00")  # no tagged field
    # Tag 0, its size, the presence byte, then the struct.
    assert encoded[: len(plain_bytes) - 1] == plain_bytes[:-1]
    tail = encoded[len(plain_bytes) - 1 :]
    assert tail[0] == 1 and tail[1] == 0 and tail[3] == 1 and tail[2] == len(tail) - 3


def test_the_consumer_protocol_subscription_is_read_whole() -> None:
    sub = decode_subscription(subscription(("a", "b"), version=1, owned=[("a", [0, 2])]))
    assert (sub.version, sub.topics, sub.owned_partitions) == (1, ("a", "b"), (("a", (0, 2)),))
    assert decode_subscription(I16.pack(0) + I32.pack(1) + string("a")).topics == ("a",)
    assignment = encode_assignment(1, {"a": [2, 0]})
    assert sorted(assigned_partitions(assignment)) == [("a", 0), ("a", 2)]
