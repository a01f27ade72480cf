"""Random sequences of JoinGroup, SyncGroup, Heartbeat, LeaveGroup, client restarts,
failed writes and time on one classic group (the stand-in runtime of
``classic_group_util``), with the group's invariants checked after every step:

- the generation never goes back;
- a Stable group's members all hold assignments of the current generation;
- a group forming or holding a generation has members, a leader among them and a
  protocol they all support; an Empty group has none;
- static members map both ways to their member ids;
- every member and pending member has a session timer, a rebalance in preparation a
  join timer and a generation awaiting its assignment a sync timer (nothing can hang);
- every JoinGroup answer of one generation names the same leader (instance) and protocol;
- no request raises.

Then liveness: clients that behave as librdkafka does bring the group to Stable with
all of them, and clients that stop are all dropped, leaving an Empty group and no timers.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from classic_group_util import Harness, assignment_of
from replog.coordinator.group.classic_group import GroupState
from replog.coordinator.group.classic_group_service import JoinResult

S = GroupState
CLIENTS = 4
SESSION_MS = 3000
REBALANCE_MS = 8000
PROTOCOLS = [
    [("range", b"r0"), ("roundrobin", b"o0")],
    [("roundrobin", b"o1"), ("range", b"r1")],
    [("range", b"r2")],
    [("range", b"r3"), ("cooperative-sticky", b"c3")],
]


@dataclass
class Client:
    """What a client knows: its member id, its generation, its parked requests."""

    slot: int
    member_id: str = ""
    generation: int = -1
    joined: JoinResult | None = None
    join: asyncio.Task | None = None
    sync: asyncio.Task | None = None
    synced: bool = False

    @property
    def instance(self) -> str | None:
        return f"i-{self.slot}" if self.slot < 2 else None  # two static, two dynamic


OPS = st.one_of(
    st.tuples(st.just("join"), st.integers(0, CLIENTS - 1)),
    st.tuples(st.just("sync"), st.integers(0, CLIENTS - 1)),
    st.tuples(st.just("heartbeat"), st.integers(0, CLIENTS - 1)),
    st.tuples(st.just("leave"), st.integers(0, CLIENTS - 1)),
    st.tuples(st.just("restart"), st.integers(0, CLIENTS - 1)),
    st.tuples(st.just("restart"), st.integers(0, 1)),  # the static members, more often
    st.tuples(st.just("advance"), st.sampled_from([0, 100, 1000, 2500, 5000, 9000])),
    st.tuples(st.just("writes_fail"), st.booleans()),
    # Every client acts as a poll loop for a while: reaches Stable groups, where static
    # rejoins, leader rejoins and session expiries then happen.
    st.tuples(st.just("behave"), st.sampled_from([1000, 4000, 12_000])),
)


class World:
    def __init__(self, h: Harness) -> None:
        self.h = h
        self.clients = [Client(i) for i in range(CLIENTS)]
        self.max_generation = 0
        self.generations: dict[int, tuple[str, str | None]] = {}

    # -- client actions -----------------------------------------------------------------

    def join(self, c: Client) -> None:
        if c.join is not None and not c.join.done():
            return
        c.join = self.h.join(
            c.member_id,
            instance=c.instance,
            protocols=PROTOCOLS[c.slot],
            session_ms=SESSION_MS,
            rebalance_ms=REBALANCE_MS,
            client_id=f"c{c.slot}",
        )
        c.synced = False

    def sync(self, c: Client) -> None:
        if c.joined is None or (c.sync is not None and not c.sync.done()):
            return
        j = c.joined
        plan = None
        if j.member_id == j.leader_id:
            plan = {m: assignment_of(m, j.generation_id) for m, _, _ in j.members}
        c.sync = self.h.sync(j.member_id, j.generation_id, plan, instance=c.instance)

    def heartbeat(self, c: Client) -> ErrorCode:
        if not c.member_id:
            return ErrorCode.unknown_member_id
        error = self.h.heartbeat(c.member_id, c.generation, instance=c.instance)
        if error in (ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id):
            self.forget(c)
        elif error in (ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation):
            c.joined = None
        return error

    def leave(self, c: Client) -> None:
        if c.member_id or c.instance:
            self.h.leave((c.member_id, c.instance))
        self.forget(c)

    def forget(self, c: Client) -> None:
        """The client starts over (a restart, or told it is unknown)."""
        c.member_id, c.generation, c.joined, c.synced = "", -1, None, False
        c.join = c.sync = None

    # -- answers ------------------------------------------------------------------------

    def collect(self) -> None:
        for c in self.clients:
            if c.join is not None and c.join.done():
                answer = c.join.result()
                c.join = None
                if answer.error == ErrorCode.member_id_required:
                    c.member_id = answer.member_id
                elif answer.error == ErrorCode.none:
                    c.member_id, c.generation, c.joined = (
                        answer.member_id,
                        answer.generation_id,
                        answer,
                    )
                    # A restarted static leader is told its old id (Kafka, before KIP-814),
                    # the others its new one: one client either way (ids are client-uuid).
                    seen = (answer.leader_id.split("-", 1)[0], answer.protocol_name)
                    known = self.generations.setdefault(answer.generation_id, seen)
                    assert known == seen, f"generation {answer.generation_id}: {known} != {seen}"
                elif answer.error in (ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id):
                    self.forget(c)
            if c.sync is not None and c.sync.done():
                answer = c.sync.result()
                c.sync = None
                if answer.error == ErrorCode.none:
                    c.synced = True
                elif answer.error in (ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id):
                    self.forget(c)
                else:
                    c.joined = None

    async def step(self, op: tuple) -> None:
        kind, arg = op
        if kind == "advance":
            await self.h.advance(arg)
        elif kind == "behave":
            await self.behave(list(range(CLIENTS)), arg, converge=False)
        elif kind == "writes_fail":
            self.h.shard.fail_with = ErrorCode.not_coordinator if arg else ErrorCode.none
        else:
            c = self.clients[arg]
            if kind == "join":
                self.join(c)
            elif kind == "sync":
                self.sync(c)
            elif kind == "heartbeat":
                self.heartbeat(c)
            elif kind == "leave":
                self.leave(c)
            elif kind == "restart":  # the process restarts and joins again at once
                self.forget(c)
                self.join(c)
        await self.h.settle()
        self.collect()
        self.check()

    # -- invariants -----------------------------------------------------------------------

    def check(self) -> None:
        self.h.raise_task_errors()
        group = self.h.shard.groups.get("g")
        if group is None:
            return
        timers = self.h.shard.timer_keys()
        assert group.generation_id >= self.max_generation
        self.max_generation = group.generation_id
        assert group.state is not S.DEAD
        if group.state is S.EMPTY:
            assert not group.members
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            assert group.members and group.leader_id in group.members
            assert group.protocol_name is not None
            for m in group.members.values():
                assert group.protocol_name in {name for name, _ in m.protocols}
        if group.state is S.STABLE:
            suffix = f"@{group.generation_id}".encode()
            for m in group.members.values():
                assert m.assignment.endswith(suffix), (m.member_id, m.assignment)
        if group.state is S.PREPARING_REBALANCE:
            assert f"classic-join-{group.group_id}" in timers
        if group.state is S.COMPLETING_REBALANCE:
            assert f"classic-sync-{group.group_id}" in timers
        for instance, member_id in group.static_members.items():
            assert group.members[member_id].group_instance_id == instance
        for member_id, m in group.members.items():
            if m.group_instance_id is not None:
                assert group.static_members[m.group_instance_id] == member_id
            assert f"classic-session-g-{member_id}" in timers, member_id
        for member_id in group.pending_members:
            assert f"classic-session-g-{member_id}" in timers, member_id
        parked = self.h.service._parked.get(self.h.shard.partition)
        if parked is not None:
            for (_, member_id), future in parked.joins.items():
                if not future.done():
                    assert group.members[member_id].awaiting_join

    # -- liveness ---------------------------------------------------------------------------

    async def behave(self, slots: list[int], limit_ms: int, converge: bool = True) -> None:
        """The clients in ``slots`` act as a consumer's poll loop does, every 250 ms;
        with ``converge``, until they form a Stable group (which they must)."""
        if converge:
            self.h.shard.fail_with = ErrorCode.none
        waited = 0
        while waited < limit_ms:
            for slot in slots:
                c = self.clients[slot]
                if c.joined is None or c.generation < 0:
                    self.join(c)
                elif not c.synced:
                    self.sync(c)
                else:
                    self.heartbeat(c)
            await self.h.advance(250)
            waited += 250
            self.collect()
            self.check()
            if not converge:
                continue
            group = self.h.shard.groups.get("g")
            members = {self.clients[s].member_id for s in slots}
            if (
                group is not None
                and group.state is S.STABLE
                and set(group.members) == members
                and all(self.clients[s].synced for s in slots)
                and all(self.clients[s].generation == group.generation_id for s in slots)
            ):
                return
        if not converge:
            return
        raise AssertionError(f"clients {slots} did not reach a Stable group in {limit_ms} ms")


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    st.lists(OPS, min_size=5, max_size=60),
    st.lists(st.integers(0, CLIENTS - 1), min_size=1, max_size=CLIENTS, unique=True),
    st.sampled_from(["0", "1000"]),
)
def test_random_sequences_keep_the_invariants_and_the_group_recovers(
    ops, survivors, initial_delay
) -> None:
    async def main() -> None:
        h = Harness.make(**{"group.initial.rebalance.delay.ms": initial_delay})
        h.record_tasks()
        world = World(h)
        try:
            for op in ops:
                await world.step(op)
            # Liveness 1: the survivors behave and the group settles with them alone.
            for c in world.clients:
                if c.slot not in survivors:
                    world.leave(c) if c.slot % 2 else world.forget(c)  # leave, or vanish
            await world.behave(sorted(survivors), limit_ms=120_000)
            # Liveness 2: everyone vanishes; sessions drop them all.
            for c in world.clients:
                world.forget(c)
            await h.advance(60_000)
            world.collect()
            world.check()
            group = h.shard.groups["g"]
            assert group.state is S.EMPTY and not group.members
            assert not {k for k in h.shard.timer_keys() if k.endswith("-g") or "-g-" in k}
        finally:
            for task in h.created:
                task.cancel()

    asyncio.run(main())
