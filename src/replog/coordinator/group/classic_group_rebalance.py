"""The rebalance machinery of the classic protocol, the base of ``ClassicGroupService``:
parked JoinGroup/SyncGroup responses, the join and sync phases, session timers and the
write of a generation (Kafka's classic ``GroupMetadataManager`` paths
``prepareRebalance``, ``completeClassicGroupJoin``, ``removeMemberAndUpdateGroup``).

- A JoinGroup that starts or joins a rebalance is parked on a future until the
  generation forms: every known member has rejoined, or the rebalance timeout (the
  members' largest) passed and the missing members are dropped. An empty group's first
  rebalance waits ``group.initial.rebalance.delay.ms``, extended while members keep
  arriving, up to the rebalance timeout (Kafka ``InitialDelayedJoin``).
- SyncGroup is parked until the leader's SyncGroup brings the assignment; the generation
  is written to ``__consumer_offsets`` (acks=all) and only then is every parked member
  answered and the group Stable. A member that does not SyncGroup within the rebalance
  timeout is dropped and a new rebalance starts.
- Every member has a session timer, restarted by its heartbeats, JoinGroup and SyncGroup;
  when it fires the member is removed and the group rebalances, unless its JoinGroup or
  SyncGroup is parked (Kafka ``hasSatisfiedHeartbeat``: clients do not heartbeat then).
  A new member's parked JoinGroup is bounded by NEW_MEMBER_JOIN_TIMEOUT_MS instead.

Concurrency: owned by the event loop. Group state changes in callbacks that do not await;
the one await is the write of a generation, after which the group is re-checked (same
object, same generation, still CompletingRebalance) before it becomes Stable.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from replog.coordinator.group.classic_group import ClassicGroup, GroupMember, GroupState

if TYPE_CHECKING:
    from replog.coordinator.group.coordinator import GroupCoordinator
    from replog.coordinator.group.shard import GroupShard

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


def answer_parked(futures: dict, key, result) -> None:
    future = futures.pop(key, None)
    if future is not None and not future.done():
        future.set_result(result)


class ClassicRebalance:
    """Parked responses, rebalances and session timers of the classic groups on this
    broker's loaded shards; ``ClassicGroupService`` adds the requests on top.

    Concurrency: owned by the event loop (see the module docstring).
    """

    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.coordinator = coordinator
        self.config = coordinator.config
        self._parked: dict[int, _Parked] = {}

    def _p(self, shard: GroupShard) -> _Parked:
        return self._parked.setdefault(shard.partition, _Parked())

    def _join_result(self, group: ClassicGroup, member: GroupMember) -> JoinResult:
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

    def _prepare_rebalance(self, shard: GroupShard, group: ClassicGroup, reason: str) -> None:
        """Kafka ``prepareRebalance``."""
        now = shard.now_ms()
        if group.state is GroupState.COMPLETING_REBALANCE:
            self._reset_syncs(shard, group, ErrorCode.rebalance_in_progress)
        shard.cancel(sync_key(group.group_id))
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
                join_key(group.group_id),
                group.rebalance_timeout_ms(),
                lambda: self._complete_join(shard, group),
            )
            self._try_complete_join(shard, group)

    def _schedule_initial_join(
        self, shard: GroupShard, group: ClassicGroup, delay: int, remaining: int
    ) -> None:
        def fire() -> None:
            if group.new_member_added and remaining > 0:
                group.new_member_added = False
                step = min(delay, remaining)
                self._schedule_initial_join(shard, group, step, remaining - step)
            else:
                self._complete_join(shard, group)

        group.new_member_added = False
        shard.schedule(join_key(group.group_id), delay, fire)

    def _try_complete_join(self, shard: GroupShard, group: ClassicGroup) -> None:
        if group.state is GroupState.PREPARING_REBALANCE and group.all_members_joined():
            initial = group.previous_state is GroupState.EMPTY
            if initial and self.config.group_initial_rebalance_delay_ms > 0:
                return  # the initial delay always runs its course (InitialDelayedJoin)
            shard.cancel(join_key(group.group_id))
            self._complete_join(shard, group)

    def _complete_join(self, shard: GroupShard, group: ClassicGroup) -> None:
        """Kafka ``completeClassicGroupJoin``: drop the dynamic members that did not
        rejoin (static members stay until their session runs out: they may be restarting),
        form the next generation and answer every parked JoinGroup."""
        if shard.groups.get(group.group_id) is not group:
            return
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        shard.cancel(join_key(group.group_id))
        p = self._p(shard)
        for member in [m for m in group.members.values() if not m.awaiting_join]:
            if member.group_instance_id is None:
                group.remove_member(member.member_id)
                shard.cancel(session_key(group.group_id, member.member_id))
        for pending in list(group.pending_members):
            group.pending_members.discard(pending)
            shard.cancel(session_key(group.group_id, pending))
        if group.members and not group.elect_joined_leader():
            # Only static members that did not rejoin: wait for them (or their sessions).
            log.info(
                "group %s: no member rejoined; waiting another rebalance timeout", group.group_id
            )
            shard.schedule(
                join_key(group.group_id),
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
            answer_parked(
                p.joins, (group.group_id, member.member_id), self._join_result(group, member)
            )
        shard.schedule(
            sync_key(group.group_id),
            group.rebalance_timeout_ms(),
            lambda generation=group.generation_id: self._expire_sync(shard, group, generation),
        )

    def _expire_sync(self, shard: GroupShard, group: ClassicGroup, generation: int) -> None:
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

    def _reset_syncs(self, shard: GroupShard, group: ClassicGroup, error: ErrorCode) -> None:
        p = self._p(shard)
        for member in group.members.values():
            member.awaiting_sync = False
            answer_parked(p.syncs, (group.group_id, member.member_id), SyncResult(error))

    async def _store_generation(
        self, shard: GroupShard, group: ClassicGroup, generation: int, assignments: dict[str, bytes]
    ) -> None:
        if group.generation_id != generation or group.state is not GroupState.COMPLETING_REBALANCE:
            return  # a rebalance began before this task ran: its members were answered
        full = {m: assignments.get(m, b"") for m in group.members}
        error = await write_generation(shard, group, full)
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
        shard.cancel(sync_key(group.group_id))
        for member_id, member in group.members.items():
            member.assignment = full.get(member_id, b"")
        group.transition_to(GroupState.STABLE, shard.now_ms())
        for member_id, member in group.members.items():
            member.awaiting_sync = False
            answer_parked(
                p.syncs,
                (group.group_id, member_id),
                SyncResult(
                    ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment
                ),
            )

    def _write_in_background(
        self, shard: GroupShard, group: ClassicGroup, assignments: dict[str, bytes]
    ) -> None:
        async def write() -> None:
            error = await write_generation(shard, group, assignments)
            if error != ErrorCode.none:
                log.warning(
                    "group %s: storing the empty generation failed: %s", group.group_id, error.name
                )

        asyncio.get_running_loop().create_task(write())

    # -- members leaving -----------------------------------------------------------------

    def _remove_member(
        self,
        shard: GroupShard,
        group: ClassicGroup,
        member_id: str,
        why: str,
        rebalance: bool = True,
    ) -> None:
        """Kafka ``removeMemberAndUpdateGroup``."""
        p = self._p(shard)
        answer_parked(
            p.joins, (group.group_id, member_id), JoinResult(ErrorCode.unknown_member_id, member_id)
        )
        answer_parked(p.syncs, (group.group_id, member_id), SyncResult(ErrorCode.unknown_member_id))
        shard.cancel(session_key(group.group_id, member_id))
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
        group: ClassicGroup,
        member: GroupMember,
        timeout_ms: int | None = None,
    ) -> None:
        member_id = member.member_id
        shard.schedule(
            session_key(group.group_id, member_id),
            member.session_timeout_ms if timeout_ms is None else timeout_ms,
            lambda: self._expire_session(shard, group, member_id),
        )

    def _expire_session(self, shard: GroupShard, group: ClassicGroup, member_id: str) -> None:
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

    def _expire_pending(self, shard: GroupShard, group: ClassicGroup, member_id: str) -> None:
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._try_complete_join(shard, group)

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


def current_assignments(group: ClassicGroup) -> dict[str, bytes]:
    return {m.member_id: m.assignment for m in group.members.values()}


async def write_generation(
    shard: GroupShard, group: ClassicGroup, assignments: dict[str, bytes]
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


def session_key(group_id: str, member_id: str) -> str:
    return f"classic-session-{group_id}-{member_id}"


def join_key(group_id: str) -> str:
    return f"classic-join-{group_id}"


def sync_key(group_id: str) -> str:
    return f"classic-sync-{group_id}"
