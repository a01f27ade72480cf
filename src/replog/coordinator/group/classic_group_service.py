"""JoinGroup, SyncGroup, Heartbeat and LeaveGroup on classic groups (Kafka's classic
``GroupCoordinator``), on top of the rebalance machinery of ``classic_group_rebalance``.

- A first JoinGroup without a member id (v4+) gets MEMBER_ID_REQUIRED and a member id
  to join with (KIP-394); the id is pending until it joins or its session times out.
- A JoinGroup starting or joining a rebalance, and a SyncGroup during
  CompletingRebalance, are parked until the generation forms or is written.
- Static members (``group.instance.id``, KIP-345) rejoining with a new member id replace
  their old id (which is then FENCED_INSTANCE_ID); in a Stable group whose selected
  protocol does not change they keep their assignment without a rebalance (if writing
  the new id fails, the old id is put back). A static member that does not rejoin a
  rebalance stays in the group (it may be restarting) until its session runs out; only
  dynamic members are dropped when the rebalance timeout ends the join phase.

Concurrency: owned by the event loop. Group state changes in callbacks that do not await;
the awaits are the parked responses and the write of a generation, after which the group
is re-checked.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from replog.coordinator.group import records as rec
from replog.coordinator.group.classic_group import ClassicGroup, GroupMember, GroupState
from replog.coordinator.group.classic_group_rebalance import (
    FIRST_SKIP_ASSIGNMENT,
    NEW_MEMBER_JOIN_TIMEOUT_MS,
    NO_GENERATION,
    UNKNOWN_MEMBER,
    ClassicRebalance,
    JoinRequest,
    JoinResult,
    SyncResult,
    answer_parked,
    current_assignments,
    join_key,
    session_key,
    sync_key,
    write_generation,
)
from replog.coordinator.group.consumer_group import ConsumerGroup

if TYPE_CHECKING:
    from replog.coordinator.group.consumer_group_runtime import ConsumerGroupRuntime
    from replog.coordinator.group.coordinator import GroupCoordinator
    from replog.coordinator.group.shard import GroupShard

log = logging.getLogger(__name__)

__all__ = ["ClassicGroupService", "JoinRequest", "JoinResult", "SyncResult", "NO_GENERATION"]


class ClassicGroupService(ClassicRebalance):
    """The classic protocol on this broker's loaded shards; classic members of consumer
    groups are the KIP-848 runtime's (``classic_members``).

    Concurrency: owned by the event loop (see the module docstring).
    """

    def __init__(self, coordinator: GroupCoordinator) -> None:
        super().__init__(coordinator)
        coordinator.classic_service = self
        runtime = getattr(coordinator, "consumer_runtime", None)
        if runtime is not None:
            runtime.classic = self

    # -- lookups -----------------------------------------------------------------------

    def _group(self, shard: GroupShard, group_id: str) -> tuple[ErrorCode, ClassicGroup | None]:
        group = shard.groups.get(group_id)
        if group is None:
            return ErrorCode.none, None
        if not isinstance(group, ClassicGroup):
            return ErrorCode.inconsistent_group_protocol, None
        return ErrorCode.none, group

    def _runtime(self) -> ConsumerGroupRuntime | None:
        """The KIP-848 runtime, which answers classic members of consumer groups."""
        return getattr(self.coordinator, "consumer_runtime", None)

    # -- protocol conversions (group_conversion) -------------------------------------------

    def on_upgraded(self, shard: GroupShard, group: ClassicGroup) -> None:
        """The group is a consumer group now: its parked requests are answered with
        REBALANCE_IN_PROGRESS (the members rejoin it) and its timers stop."""
        p = self._p(shard)
        gid = group.group_id
        for key in [k for k in p.joins if k[0] == gid]:
            answer_parked(p.joins, key, JoinResult(ErrorCode.rebalance_in_progress, key[1]))
        for key in [k for k in p.syncs if k[0] == gid]:
            answer_parked(p.syncs, key, SyncResult(ErrorCode.rebalance_in_progress))
        for member_id in list(group.members) + list(group.pending_members):
            shard.cancel(session_key(gid, member_id))
        shard.cancel(join_key(gid))
        shard.cancel(sync_key(gid))

    def on_downgraded(self, shard: GroupShard, group: ClassicGroup) -> None:
        """The consumer group became ``group`` (Stable at its last assignment): arm its
        members' sessions and rebalance, so they rejoin as a classic group."""
        for member in group.members.values():
            self._schedule_session(shard, group, member)
        self._prepare_rebalance(shard, group, "converted from a consumer group")

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
            runtime = self._runtime()
            if runtime is not None and runtime.hosts_classic_members(existing):
                return await runtime.classic_join(shard, request)
            if not existing.is_empty():
                return JoinResult(error, request.member_id)
            del shard.groups[request.group_id]  # an empty consumer group becomes classic
            group = None
        if group is None:
            if request.member_id != UNKNOWN_MEMBER:
                return JoinResult(ErrorCode.unknown_member_id, request.member_id)
            group = ClassicGroup(request.group_id, state_timestamp_ms=shard.now_ms())
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
        self, shard: GroupShard, group: ClassicGroup, request: JoinRequest
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
                    session_key(group.group_id, member_id),
                    request.session_timeout_ms,
                    lambda: self._expire_pending(shard, group, member_id),
                )
                return JoinResult(ErrorCode.member_id_required, member_id)
        shard.cancel(session_key(group.group_id, member_id))
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
        self, shard: GroupShard, group: ClassicGroup, request: JoinRequest
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
        answer_parked(
            p.joins, (group.group_id, old_id), JoinResult(ErrorCode.fenced_instance_id, old_id)
        )
        answer_parked(p.syncs, (group.group_id, old_id), SyncResult(ErrorCode.fenced_instance_id))
        shard.cancel(session_key(group.group_id, old_id))
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
        error = await write_generation(shard, group, current_assignments(group))
        if error != ErrorCode.none:
            # Kafka puts the old member id back: the log still holds it.
            if (
                shard.groups.get(group.group_id) is group
                and group.static_members.get(instance_id) == new_id
            ):
                shard.cancel(session_key(group.group_id, new_id))
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
        self, shard: GroupShard, group: ClassicGroup, request: JoinRequest
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
        self, shard: GroupShard, group: ClassicGroup, member: GroupMember, reason: str
    ) -> JoinResult:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[JoinResult] = loop.create_future()
        p = self._p(shard)
        answer_parked(  # a duplicate JoinGroup replaces the earlier one
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
        runtime = self._runtime()
        if error != ErrorCode.none and runtime is not None:
            return await runtime.classic_sync(
                shard,
                group_id,
                generation_id,
                member_id,
                group_instance_id,
                protocol_type,
                protocol_name,
            )
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
        answer_parked(p.syncs, (group_id, member_id), SyncResult(ErrorCode.rebalance_in_progress))
        p.syncs[(group_id, member_id)] = future
        member.awaiting_sync = True
        if member_id == group.leader_id:
            asyncio.get_running_loop().create_task(
                self._store_generation(shard, group, group.generation_id, assignments)
            )
        return await future

    # -- Heartbeat -------------------------------------------------------------------------

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        error, shard = self.coordinator.shard_for(group_id)
        if error == ErrorCode.coordinator_load_in_progress:
            # Kafka: "the group is still loading, so blindly respond" NONE (a client such
            # as aiokafka takes COORDINATOR_LOAD_IN_PROGRESS in a heartbeat as fatal).
            return ErrorCode.none
        if shard is None:
            return error
        error, group = self._group(shard, group_id)
        runtime = self._runtime()
        if error != ErrorCode.none and runtime is not None:
            return runtime.classic_heartbeat(
                shard, group_id, generation_id, member_id, group_instance_id
            )
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

    async def leave(
        self, group_id: str, members: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        """LeaveGroup: from a classic group (``leave_group``), or classic members leaving
        a consumer group (written, so it awaits)."""
        error, shard = self.coordinator.shard_for(group_id)
        runtime = self._runtime()
        if shard is not None and runtime is not None:
            if isinstance(shard.groups.get(group_id), ConsumerGroup):
                return await runtime.classic_leave(shard, group_id, members)
        return self.leave_group(group_id, members)

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
                shard.cancel(session_key(group_id, member_id))
                results.append((member_id, instance_id, ErrorCode.none))
                self._try_complete_join(shard, group)
                continue
            if member_id not in group.members:
                results.append((member_id, instance_id, ErrorCode.unknown_member_id))
                continue
            self._remove_member(shard, group, member_id, "left the group")
            results.append((member_id, instance_id, ErrorCode.none))
        return ErrorCode.none, results

    # -- loading and unloading -------------------------------------------------------------

    def on_loaded(self, shard: GroupShard) -> None:
        """A shard finished loading: every member of its classic groups gets a session
        timer (members lost with the old coordinator then time out)."""
        for group in shard.groups.values():
            if isinstance(group, ClassicGroup):
                for member in group.members.values():
                    self._schedule_session(shard, group, member)


def replay_group_metadata(shard: GroupShard, group_id: str, value: bytes | None) -> None:
    """A GroupMetadata record of ``group_id`` while loading: the group as of that
    generation, or gone (a tombstone)."""
    if value is None:
        group = shard.groups.get(group_id)
        if isinstance(group, ClassicGroup):
            del shard.groups[group_id]
        return
    shard.groups[group_id] = ClassicGroup.from_record(
        group_id, rec.decode_group_metadata_value(value)
    )


def replay_group_metadata_record(
    shard: GroupShard, _key_version: int, key: bytes, value: bytes | None
) -> None:
    """``replay_group_metadata`` as the runtime's replayer of GroupMetadata records."""
    replay_group_metadata(shard, rec.decode_group_metadata_key(key), value)
