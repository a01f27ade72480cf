"""JoinGroup, SyncGroup, Heartbeat and LeaveGroup on classic groups (Kafka's classic
``GroupCoordinator``): parked responses, timers and writes around ``GenericGroup``.

- A JoinGroup that starts or joins a rebalance is parked on a future until the
  generation forms: every known member has rejoined, or the rebalance timeout (the
  members' largest) passed and the missing members are dropped. An empty group's first
  rebalance waits ``group.initial.rebalance.delay.ms``, extended while members keep
  arriving, up to the rebalance timeout (Kafka ``InitialDelayedJoin``).
- A first JoinGroup without a member id (v4+) gets MEMBER_ID_REQUIRED and a member id
  to join with (KIP-394); the id is pending until it joins or its session times out.
- SyncGroup is parked until the leader's SyncGroup brings the assignment; the generation
  is written to ``__consumer_offsets`` (acks=all) and only then is every parked member
  answered and the group Stable. A member that does not SyncGroup within the rebalance
  timeout is dropped and a new rebalance starts.
- Every member has a session timer, restarted by its heartbeats, JoinGroup and SyncGroup;
  when it fires the member is removed and the group rebalances, unless its JoinGroup or
  SyncGroup is parked (Kafka ``hasSatisfiedHeartbeat``: clients do not heartbeat then).
  A new member's parked JoinGroup is bounded by NEW_MEMBER_JOIN_TIMEOUT_MS instead.
- Static members (``group.instance.id``, KIP-345) rejoining with a new member id replace
  their old id (which is then FENCED_INSTANCE_ID); in a Stable group whose selected
  protocol does not change they keep their assignment without a rebalance (if writing
  the new id fails, the old id is put back). A static member that does not rejoin a rebalance stays in the
  group (it may be restarting) until its session runs out; only dynamic members are
  dropped when the rebalance timeout ends the join phase.

Concurrency: owned by the event loop. Group state changes in callbacks that do not await;
the one await is the write of a generation, after which the group is re-checked (same
object, same generation, still CompletingRebalance) before it becomes Stable.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from replog.coordinator.group import records as rec
from replog.coordinator.group.generic_group import GenericGroup, GroupMember, GroupState

if TYPE_CHECKING:
    from replog.coordinator.group.coordinator import GroupCoordinator, GroupShard

log = logging.getLogger(__name__)

UNKNOWN_MEMBER = ""
FIRST_SKIP_ASSIGNMENT = 9  # JoinGroup v9: KIP-814
NO_GENERATION = -1
# Kafka classicGroupNewMemberJoinTimeoutMs: a new member's parked JoinGroup is its only
# sign of life (it has no member id to heartbeat with), so it is dropped after this long.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
# The GroupMetadataKey holds the group id as an int16-length string: a longer id could
# never be stored (Kafka fails the write; replog refuses the join with INVALID_GROUP_ID).


@dataclass
class JoinResult:
    error: ErrorCode
    member_id: str = UNKNOWN_MEMBER
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool
    reason: str | None = None
    api_version: int = 0  # JoinGroup's: v9+ can skip the assignment (KIP-814)


class _Parked:
    """Per shard: the futures of parked JoinGroup and SyncGroup responses."""

    def __init__(self) -> None:
        self.joins: dict[tuple[str, str], asyncio.Future[JoinResult]] = {}
        self.syncs: dict[tuple[str, str], asyncio.Future[SyncResult]] = {}


def _answer(futures: dict, key, result) -> None:
    future = futures.pop(key, None)
    if future is not None and not future.done():
        future.set_result(result)


class GenericGroupService:
    """The classic protocol on this broker's loaded shards.

    Concurrency: owned by the event loop (see the module docstring).
    """

    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.coordinator = coordinator
        self.config = coordinator.config
        self._parked: dict[int, _Parked] = {}

    def _p(self, shard: GroupShard) -> _Parked:
        return self._parked.setdefault(shard.partition, _Parked())

    # -- lookups -----------------------------------------------------------------------

    def _group(self, shard: GroupShard, group_id: str) -> tuple[ErrorCode, GenericGroup | None]:
        group = shard.groups.get(group_id)
        if group is None:
            return ErrorCode.none, None
        if not isinstance(group, GenericGroup):
            return ErrorCode.inconsistent_group_protocol, None
        return ErrorCode.none, group

    # -- JoinGroup ---------------------------------------------------------------------

    async def join_group(self, request: JoinRequest) -> JoinResult:
        c = self.config
        if not request.group_id or not rec.storable(request.group_id):
            return JoinResult(ErrorCode.invalid_group_id, request.member_id)
        if not (
            c.group_min_session_timeout_ms
            <= request.session_timeout_ms
            <= c.group_max_session_timeout_ms
        ):
            return JoinResult(ErrorCode.invalid_session_timeout, request.member_id)
        error, shard = self.coordinator.shard_for(request.group_id)
        if shard is None:
            return JoinResult(error, request.member_id)
        error, group = self._group(shard, request.group_id)
        if error != ErrorCode.none:
            existing = shard.groups[request.group_id]
            if not existing.is_empty():
                return JoinResult(error, request.member_id)
            del shard.groups[request.group_id]  # an empty consumer group becomes classic
            group = None
        if group is None:
            if request.member_id != UNKNOWN_MEMBER:
                return JoinResult(ErrorCode.unknown_member_id, request.member_id)
            group = GenericGroup(request.group_id, state_timestamp_ms=shard.now_ms())
            shard.groups[request.group_id] = group
        if group.state is GroupState.DEAD:
            return JoinResult(ErrorCode.coordinator_not_available, request.member_id)
        if not group.supports(request.protocol_type, request.protocols):
            return JoinResult(ErrorCode.inconsistent_group_protocol, request.member_id)
        if request.member_id == UNKNOWN_MEMBER or request.member_id in group.pending_members:
            if (
                request.member_id == UNKNOWN_MEMBER
                and request.group_instance_id is not None
                and request.group_instance_id in group.static_members
            ):
                return await self._rejoin_static(shard, group, request)
            return await self._join_new(shard, group, request)
        return await self._join_known(shard, group, request)

    async def _join_new(
        self, shard: GroupShard, group: GenericGroup, request: JoinRequest
    ) -> JoinResult:
        if len(group.members) >= self.config.group_max_size:
            return JoinResult(ErrorCode.group_max_size_reached, request.member_id)
        member_id = request.member_id
        if member_id == UNKNOWN_MEMBER:
            member_id = f"{request.client_id}-{uuid.uuid4()}"
            if request.require_known_member_id and request.group_instance_id is None:
                # KIP-394: join again with this id; it is pending until then.
                group.pending_members.add(member_id)
                shard.schedule(
                    _session_key(group.group_id, member_id),
                    request.session_timeout_ms,
                    lambda: self._expire_pending(shard, group, member_id),
                )
                return JoinResult(ErrorCode.member_id_required, member_id)
        shard.cancel(_session_key(group.group_id, member_id))
        member = GroupMember(
            member_id,
            request.group_instance_id,
            request.client_id,
            request.client_host,
            request.rebalance_timeout_ms,
            request.session_timeout_ms,
            request.protocol_type,
            list(request.protocols),
            is_new=True,
        )
        group.add_member(member)
        group.new_member_added = True
        return await self._park_join(shard, group, member, "new member joined")

    async def _rejoin_static(
        self, shard: GroupShard, group: GenericGroup, request: JoinRequest
    ) -> JoinResult:
        """Kafka ``updateStaticMemberThenRebalanceOrCompleteJoin``: the instance's new
        member id replaces the old one (fenced from now on). A Stable group whose
        selected protocol stays the same does not rebalance: the new id is written and
        the member syncs to its old assignment. A restarted leader is answered as Kafka
        answers it: from JoinGroup v9 as the leader with the members and
        ``skip_assignment`` (KIP-814), so it knows the group without assigning; before
        v9 with the leader as it was, so it acts as a follower."""
        instance_id = request.group_instance_id
        assert instance_id is not None
        old_id = group.static_members[instance_id]
        new_id = f"{request.client_id}-{uuid.uuid4()}"
        current_leader = group.leader_id
        # The old member id is fenced: its parked requests are answered so.
        p = self._p(shard)
        _answer(p.joins, (group.group_id, old_id), JoinResult(ErrorCode.fenced_instance_id, old_id))
        _answer(p.syncs, (group.group_id, old_id), SyncResult(ErrorCode.fenced_instance_id))
        shard.cancel(_session_key(group.group_id, old_id))
        member = group.replace_static_member(instance_id, old_id, new_id)
        before = (
            member.rebalance_timeout_ms,
            member.session_timeout_ms,
            member.client_id,
            member.client_host,
            member.protocols,
        )
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        member.client_id, member.client_host = request.client_id, request.client_host
        member.protocols = list(request.protocols)
        self._schedule_session(shard, group, member)
        if group.state is not GroupState.STABLE or group.select_protocol() != group.protocol_name:
            return await self._park_join(shard, group, member, "static member rejoined")
        # KIP-345: no rebalance; the member keeps its assignment. The new id is persisted
        # so that a coordinator failover knows it.
        error = await _write_generation(shard, group, _assignments(group))
        if error != ErrorCode.none:
            # Kafka puts the old member id back: the log still holds it.
            if (
                shard.groups.get(group.group_id) is group
                and group.static_members.get(instance_id) == new_id
            ):
                shard.cancel(_session_key(group.group_id, new_id))
                member = group.replace_static_member(instance_id, new_id, old_id)
                (
                    member.rebalance_timeout_ms,
                    member.session_timeout_ms,
                    member.client_id,
                    member.client_host,
                    member.protocols,
                ) = before
                self._schedule_session(shard, group, member)
            return JoinResult(error, UNKNOWN_MEMBER)
        if current_leader == old_id and request.api_version >= FIRST_SKIP_ASSIGNMENT:
            result = self._join_result(group, member)  # the leader: with every member
            result.skip_assignment = True
            return result
        return JoinResult(
            ErrorCode.none,
            new_id,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            current_leader or "",
            skip_assignment=False,
        )

    async def _join_known(
        self, shard: GroupShard, group: GenericGroup, request: JoinRequest
    ) -> JoinResult:
        member_id = request.member_id
        if request.group_instance_id is not None:
            known = group.static_members.get(request.group_instance_id)
            if known is not None and known != member_id:
                return JoinResult(ErrorCode.fenced_instance_id, member_id)
        member = group.members.get(member_id)
        if member is None or group.state in (GroupState.EMPTY, GroupState.DEAD):
            return JoinResult(ErrorCode.unknown_member_id, member_id)
        changed = not member.matches(request.protocols)
        member.protocols = list(request.protocols)
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        if group.state is GroupState.PREPARING_REBALANCE:
            return await self._park_join(shard, group, member, "member rejoined")
        if group.state is GroupState.COMPLETING_REBALANCE and not changed:
            # The JoinGroup response was lost: send it again (Kafka does the same).
            self._schedule_session(shard, group, member)
            return self._join_result(group, member)
        if group.state is GroupState.STABLE and not changed and member_id != group.leader_id:
            self._schedule_session(shard, group, member)
            return self._join_result(group, member)
        return await self._park_join(shard, group, member, "member rejoined with changes")

    async def _park_join(
        self, shard: GroupShard, group: GenericGroup, member: GroupMember, reason: str
    ) -> JoinResult:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[JoinResult] = loop.create_future()
        p = self._p(shard)
        _answer(  # a duplicate JoinGroup replaces the earlier one
            p.joins,
            (group.group_id, member.member_id),
            JoinResult(ErrorCode.rebalance_in_progress, member.member_id),
        )
        p.joins[(group.group_id, member.member_id)] = future
        member.awaiting_join = True
        self._schedule_session(
            shard, group, member, NEW_MEMBER_JOIN_TIMEOUT_MS if member.is_new else None
        )
        if group.state is not GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(shard, group, reason)
        else:
            self._try_complete_join(shard, group)
        return await future

    def _join_result(self, group: GenericGroup, member: GroupMember) -> JoinResult:
        is_leader = member.member_id == group.leader_id
        members = []
        if is_leader and group.protocol_name is not None:
            members = [
                (m.member_id, m.group_instance_id, m.metadata(group.protocol_name))
                for m in group.members.values()
            ]
        return JoinResult(
            ErrorCode.none,
            member.member_id,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            members,
        )

    # -- rebalances ---------------------------------------------------------------------

    def _prepare_rebalance(self, shard: GroupShard, group: GenericGroup, reason: str) -> None:
        """Kafka ``prepareRebalance``."""
        now = shard.now_ms()
        if group.state is GroupState.COMPLETING_REBALANCE:
            self._reset_syncs(shard, group, ErrorCode.rebalance_in_progress)
        shard.cancel(_sync_key(group.group_id))
        initial = group.state is GroupState.EMPTY
        group.transition_to(GroupState.PREPARING_REBALANCE, now)
        log.info(
            "group %s: preparing to rebalance (generation %d): %s",
            group.group_id,
            group.generation_id,
            reason,
        )
        if initial:
            delay = self.config.group_initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self._schedule_initial_join(shard, group, delay, remaining)
        else:
            shard.schedule(
                _join_key(group.group_id),
                group.rebalance_timeout_ms(),
                lambda: self._complete_join(shard, group),
            )
            self._try_complete_join(shard, group)

    def _schedule_initial_join(
        self, shard: GroupShard, group: GenericGroup, delay: int, remaining: int
    ) -> None:
        def fire() -> None:
            if group.new_member_added and remaining > 0:
                group.new_member_added = False
                step = min(delay, remaining)
                self._schedule_initial_join(shard, group, step, remaining - step)
            else:
                self._complete_join(shard, group)

        group.new_member_added = False
        shard.schedule(_join_key(group.group_id), delay, fire)

    def _try_complete_join(self, shard: GroupShard, group: GenericGroup) -> None:
        if group.state is GroupState.PREPARING_REBALANCE and group.all_members_joined():
            initial = group.previous_state is GroupState.EMPTY
            if initial and self.config.group_initial_rebalance_delay_ms > 0:
                return  # the initial delay always runs its course (InitialDelayedJoin)
            shard.cancel(_join_key(group.group_id))
            self._complete_join(shard, group)

    def _complete_join(self, shard: GroupShard, group: GenericGroup) -> None:
        """Kafka ``completeClassicGroupJoin``: drop the dynamic members that did not
        rejoin (static members stay until their session runs out: they may be restarting),
        form the next generation and answer every parked JoinGroup."""
        if shard.groups.get(group.group_id) is not group:
            return
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        shard.cancel(_join_key(group.group_id))
        p = self._p(shard)
        for member in [m for m in group.members.values() if not m.awaiting_join]:
            if member.group_instance_id is None:
                group.remove_member(member.member_id)
                shard.cancel(_session_key(group.group_id, member.member_id))
        for pending in list(group.pending_members):
            group.pending_members.discard(pending)
            shard.cancel(_session_key(group.group_id, pending))
        if group.members and not group.elect_joined_leader():
            # Only static members that did not rejoin: wait for them (or their sessions).
            log.info(
                "group %s: no member rejoined; waiting another rebalance timeout", group.group_id
            )
            shard.schedule(
                _join_key(group.group_id),
                group.rebalance_timeout_ms(),
                lambda: self._complete_join(shard, group),
            )
            return
        now = shard.now_ms()
        group.init_next_generation(now)
        if group.state is GroupState.EMPTY:
            log.info("group %s: generation %d is empty", group.group_id, group.generation_id)
            self._write_in_background(shard, group, {})
            return
        log.info(
            "group %s: generation %d with %d members, protocol %s",
            group.group_id,
            group.generation_id,
            len(group.members),
            group.protocol_name,
        )
        for member in group.members.values():
            member.awaiting_join = False
            self._schedule_session(shard, group, member)
            _answer(p.joins, (group.group_id, member.member_id), self._join_result(group, member))
        shard.schedule(
            _sync_key(group.group_id),
            group.rebalance_timeout_ms(),
            lambda generation=group.generation_id: self._expire_sync(shard, group, generation),
        )

    def _expire_sync(self, shard: GroupShard, group: GenericGroup, generation: int) -> None:
        """Members that did not SyncGroup within the rebalance timeout are dropped."""
        if (
            shard.groups.get(group.group_id) is not group
            or group.generation_id != generation
            or group.state is not GroupState.COMPLETING_REBALANCE
        ):
            return
        missing = [m.member_id for m in group.members.values() if not m.awaiting_sync]
        for member_id in missing:
            self._remove_member(shard, group, member_id, "did not sync in time", rebalance=False)
        self._prepare_rebalance(shard, group, "members did not sync in time")

    def _reset_syncs(self, shard: GroupShard, group: GenericGroup, error: ErrorCode) -> None:
        p = self._p(shard)
        for member in group.members.values():
            member.awaiting_sync = False
            _answer(p.syncs, (group.group_id, member.member_id), SyncResult(error))

    # -- SyncGroup -------------------------------------------------------------------------

    async def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult:
        error, shard = self.coordinator.shard_for(group_id)
        if shard is None:
            return SyncResult(error)
        error, group = self._group(shard, group_id)
        if error != ErrorCode.none:
            return SyncResult(error)
        if group is None or group.state is GroupState.DEAD:
            return SyncResult(ErrorCode.unknown_member_id)
        if group_instance_id is not None:
            known = group.static_members.get(group_instance_id)
            if known is not None and known != member_id:
                return SyncResult(ErrorCode.fenced_instance_id)
        member = group.members.get(member_id)
        if member is None:
            return SyncResult(ErrorCode.unknown_member_id)
        if generation_id != group.generation_id:
            return SyncResult(ErrorCode.illegal_generation)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return SyncResult(ErrorCode.inconsistent_group_protocol)
        if group.state is GroupState.EMPTY:
            return SyncResult(ErrorCode.unknown_member_id)
        if group.state is GroupState.PREPARING_REBALANCE:
            return SyncResult(ErrorCode.rebalance_in_progress)
        self._schedule_session(shard, group, member)
        if group.state is GroupState.STABLE:
            return SyncResult(
                ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment
            )
        # CompletingRebalance: park until the leader's assignment is written.
        future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        p = self._p(shard)
        _answer(p.syncs, (group_id, member_id), SyncResult(ErrorCode.rebalance_in_progress))
        p.syncs[(group_id, member_id)] = future
        member.awaiting_sync = True
        if member_id == group.leader_id:
            asyncio.get_running_loop().create_task(
                self._store_generation(shard, group, group.generation_id, assignments)
            )
        return await future

    async def _store_generation(
        self, shard: GroupShard, group: GenericGroup, generation: int, assignments: dict[str, bytes]
    ) -> None:
        if group.generation_id != generation or group.state is not GroupState.COMPLETING_REBALANCE:
            return  # a rebalance began before this task ran: its members were answered
        full = {m: assignments.get(m, b"") for m in group.members}
        error = await _write_generation(shard, group, full)
        if (
            shard.groups.get(group.group_id) is not group
            or group.generation_id != generation
            or group.state is not GroupState.COMPLETING_REBALANCE
        ):
            return  # a newer rebalance answered the parked members already
        p = self._p(shard)
        if error != ErrorCode.none:
            self._reset_syncs(shard, group, error)
            self._prepare_rebalance(shard, group, f"storing the generation failed: {error.name}")
            return
        shard.cancel(_sync_key(group.group_id))
        for member_id, member in group.members.items():
            member.assignment = full.get(member_id, b"")
        group.transition_to(GroupState.STABLE, shard.now_ms())
        for member_id, member in group.members.items():
            member.awaiting_sync = False
            _answer(
                p.syncs,
                (group.group_id, member_id),
                SyncResult(
                    ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment
                ),
            )

    def _write_in_background(
        self, shard: GroupShard, group: GenericGroup, assignments: dict[str, bytes]
    ) -> None:
        async def write() -> None:
            error = await _write_generation(shard, group, assignments)
            if error != ErrorCode.none:
                log.warning(
                    "group %s: storing the empty generation failed: %s", group.group_id, error.name
                )

        asyncio.get_running_loop().create_task(write())

    # -- Heartbeat -------------------------------------------------------------------------

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        error, shard = self.coordinator.shard_for(group_id)
        if shard is None:
            return error
        error, group = self._group(shard, group_id)
        if error != ErrorCode.none:
            return error
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.unknown_member_id
        if group_instance_id is not None:
            known = group.static_members.get(group_instance_id)
            if known is not None and known != member_id:
                return ErrorCode.fenced_instance_id
        member = group.members.get(member_id)
        if member is None or group.state is GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        self._schedule_session(shard, group, member)
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # -- LeaveGroup ------------------------------------------------------------------------

    def leave_group(
        self, group_id: str, members: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        """(group error, [(member id, instance id, error)]) for each member leaving."""
        error, shard = self.coordinator.shard_for(group_id)
        if shard is None:
            return error, []
        error, group = self._group(shard, group_id)
        if error != ErrorCode.none:
            return error, []
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.none, [(m, i, ErrorCode.unknown_member_id) for m, i in members]
        results = []
        for member_id, instance_id in members:
            if instance_id is not None:
                known = group.static_members.get(instance_id)
                if known is None:
                    results.append((member_id, instance_id, ErrorCode.unknown_member_id))
                    continue
                if member_id and known != member_id:
                    results.append((member_id, instance_id, ErrorCode.fenced_instance_id))
                    continue
                member_id = known
            if member_id in group.pending_members:
                group.pending_members.discard(member_id)
                shard.cancel(_session_key(group_id, member_id))
                results.append((member_id, instance_id, ErrorCode.none))
                self._try_complete_join(shard, group)
                continue
            if member_id not in group.members:
                results.append((member_id, instance_id, ErrorCode.unknown_member_id))
                continue
            self._remove_member(shard, group, member_id, "left the group")
            results.append((member_id, instance_id, ErrorCode.none))
        return ErrorCode.none, results

    # -- members leaving -----------------------------------------------------------------

    def _remove_member(
        self,
        shard: GroupShard,
        group: GenericGroup,
        member_id: str,
        why: str,
        rebalance: bool = True,
    ) -> None:
        """Kafka ``removeMemberAndUpdateGroup``."""
        p = self._p(shard)
        _answer(
            p.joins, (group.group_id, member_id), JoinResult(ErrorCode.unknown_member_id, member_id)
        )
        _answer(p.syncs, (group.group_id, member_id), SyncResult(ErrorCode.unknown_member_id))
        shard.cancel(_session_key(group.group_id, member_id))
        group.remove_member(member_id)
        log.info("group %s: member %s %s", group.group_id, member_id, why)
        if not rebalance:
            return
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(shard, group, f"member {member_id} {why}")
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(shard, group)

    def _schedule_session(
        self,
        shard: GroupShard,
        group: GenericGroup,
        member: GroupMember,
        timeout_ms: int | None = None,
    ) -> None:
        member_id = member.member_id
        shard.schedule(
            _session_key(group.group_id, member_id),
            member.session_timeout_ms if timeout_ms is None else timeout_ms,
            lambda: self._expire_session(shard, group, member_id),
        )

    def _expire_session(self, shard: GroupShard, group: GenericGroup, member_id: str) -> None:
        if shard.groups.get(group.group_id) is not group:
            return
        member = group.members.get(member_id)
        if member is None:
            return
        if not member.is_new and (member.awaiting_join or member.awaiting_sync):
            # Kafka ``hasSatisfiedHeartbeat``: a parked JoinGroup or SyncGroup is a sign of
            # life (clients do not heartbeat meanwhile). The session starts over.
            self._schedule_session(shard, group, member)
            return
        self._remove_member(shard, group, member_id, "session timed out")

    def _expire_pending(self, shard: GroupShard, group: GenericGroup, member_id: str) -> None:
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._try_complete_join(shard, group)

    # -- loading and unloading -------------------------------------------------------------

    def on_loaded(self, shard: GroupShard) -> None:
        """A shard finished loading: every member of its classic groups gets a session
        timer (members lost with the old coordinator then time out)."""
        for group in shard.groups.values():
            if isinstance(group, GenericGroup):
                for member in group.members.values():
                    self._schedule_session(shard, group, member)

    def on_unloaded(self, shard: GroupShard, error: ErrorCode) -> None:
        p = self._parked.pop(shard.partition, None)
        if p is None:
            return
        for (_, member_id), future in list(p.joins.items()):
            if not future.done():
                future.set_result(JoinResult(error, member_id))
        for future in list(p.syncs.values()):
            if not future.done():
                future.set_result(SyncResult(error))


def _assignments(group: GenericGroup) -> dict[str, bytes]:
    return {m.member_id: m.assignment for m in group.members.values()}


async def _write_generation(
    shard: GroupShard, group: GenericGroup, assignments: dict[str, bytes]
) -> ErrorCode:
    """Write the group's GroupMetadataValue (acks=all). A field too long for the record
    (a member id made of a 32 KiB client id) answers UNKNOWN_SERVER_ERROR, as Kafka's
    failed serialization does, instead of leaving the parked requests unanswered."""
    try:
        record = group.metadata_record(assignments, shard.now_ms())
    except (struct.error, ValueError) as e:
        log.warning("group %s: its metadata cannot be written: %s", group.group_id, e)
        return ErrorCode.unknown_server_error
    return await shard.write([record])


def _session_key(group_id: str, member_id: str) -> str:
    return f"classic-session-{group_id}-{member_id}"


def _join_key(group_id: str) -> str:
    return f"classic-join-{group_id}"


def _sync_key(group_id: str) -> str:
    return f"classic-sync-{group_id}"


def replay_group_metadata(shard: GroupShard, group_id: str, value: bytes | None) -> None:
    """A GroupMetadata record of ``group_id`` while loading: the group as of that
    generation, or gone (a tombstone)."""
    if value is None:
        group = shard.groups.get(group_id)
        if isinstance(group, GenericGroup):
            del shard.groups[group_id]
        return
    shard.groups[group_id] = GenericGroup.from_record(
        group_id, rec.decode_group_metadata_value(value)
    )


def replay_group_metadata_record(
    shard: GroupShard, _key_version: int, key: bytes, value: bytes | None
) -> None:
    """``replay_group_metadata`` as the runtime's replayer of GroupMetadata records."""
    replay_group_metadata(shard, rec.decode_group_metadata_key(key), value)
