"""Carries out ConsumerGroupHeartbeat decisions on a shard: writes, replays, timers.

Write, then apply. A heartbeat's decision (``consumer_group_heartbeat``) is computed
from the group as it is; its records are written to ``__consumer_offsets`` with acks=all
and only once they are committed are they replayed into the group
(``consumer_records.apply``, the same code that loads a partition after a failover)
and the member answered. If the write fails the group is unchanged and the member gets
the coordinator error (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE) and retries.

Kafka applies first and answers after the commit, reverting its timeline snapshot when a
write fails; replog instead lets one heartbeat (or timer) per group run at a time: each
group id has a lock held from the decision to the replay, so the next decision sees the
previous one's records applied. Heartbeats of different groups run concurrently. A
heartbeat that changes nothing writes nothing and waits only for the group's lock.

Timers are the shard's (cancelled when it unloads): a session timeout per member,
rescheduled by each heartbeat, and a rebalance timeout while a member is revoking; when
one fires it fences the member through the same write-then-apply path. After a shard is
loaded every member of its consumer groups gets a fresh session timeout, and a revoking
member its rebalance timeout (Kafka ``onLoaded``), so members lost during a failover are
removed.

Conversions (``group_conversion``, ``group.consumer.migration.policy``): a heartbeat
joining a non-empty classic group writes the classic group's tombstone and the consumer
group's records before its own, then the classic service answers what it had parked;
a member using the consumer protocol leaving a group whose other members all use the
classic protocol writes the consumer group's tombstones and a classic generation, and
the classic service takes the group over and starts a rebalance. Classic members
inside a consumer group (``classic_members``) go through the same lock, write and
replay.

Concurrency: owned by the event loop. The per-group lock is held across the write's
await; nothing else changes a consumer group (DeleteGroups and offsets expiry touch
only empty groups, and the heartbeat re-checks the group is still the same object
after its write).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
import weakref
from collections.abc import Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode

from replog.coordinator.group import classic_members, consumer_records
from replog.coordinator.group import consumer_group_heartbeat as hb
from replog.coordinator.group import consumer_records_codec as cr
from replog.coordinator.group import group_conversion as conversion
from replog.coordinator.group.assignors import configured_assignors
from replog.coordinator.group.classic_group import ClassicGroup
from replog.coordinator.group.classic_group_rebalance import JoinRequest, JoinResult, SyncResult
from replog.coordinator.group.consumer_group import ConsumerGroup
from replog.coordinator.group.consumer_protocol import CONSUMER_PROTOCOL_TYPE
from replog.coordinator.group.reconciliation import MemberState

if TYPE_CHECKING:
    from replog.config import KafkaConfig
    from replog.coordinator.group.coordinator import GroupCoordinator
    from replog.coordinator.group.shard import GroupShard

log = logging.getLogger(__name__)

FENCE_RETRY_MS = 1000  # a fence whose write failed is tried again after this


class ClassicListener(Protocol):
    """The classic service, told when a group changes protocol (``ClassicGroupService``)."""

    def on_upgraded(self, shard: GroupShard, group: ClassicGroup) -> None:
        """The classic group became a consumer group: answer its parked requests with
        REBALANCE_IN_PROGRESS and stop its timers."""
        ...

    def on_downgraded(self, shard: GroupShard, group: ClassicGroup) -> None:
        """The consumer group became this classic group: arm its members' sessions and
        start a rebalance."""
        ...


def settings_from(config: KafkaConfig) -> hb.GroupSettings:
    return hb.GroupSettings(
        assignors=configured_assignors(config.group_consumer_assignors),
        max_size=config.group_consumer_max_size,
        heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
        session_timeout_ms=config.group_consumer_session_timeout_ms,
    )


def _session_key(group_id: str, member_id: str) -> str:
    return f"consumer-session-{group_id}-{member_id}"


def _rebalance_key(group_id: str, member_id: str) -> str:
    return f"consumer-rebalance-{group_id}-{member_id}"


def _classic_join_key(group_id: str, member_id: str) -> str:
    return f"consumer-classic-join-{group_id}-{member_id}"


def _classic_sync_key(group_id: str, member_id: str) -> str:
    return f"consumer-classic-sync-{group_id}-{member_id}"


def _member_keys(group_id: str, member_id: str) -> tuple[str, ...]:
    return (
        _session_key(group_id, member_id),
        _rebalance_key(group_id, member_id),
        _classic_join_key(group_id, member_id),
        _classic_sync_key(group_id, member_id),
    )


class _GroupLocks:
    """An asyncio lock per (shard, group id), dropped when nobody holds or waits on it."""

    def __init__(self) -> None:
        self._locks: weakref.WeakKeyDictionary[GroupShard, dict[str, tuple[asyncio.Lock, int]]] = (
            weakref.WeakKeyDictionary()
        )

    @asynccontextmanager
    async def hold(self, shard: GroupShard, group_id: str):
        locks = self._locks.setdefault(shard, {})
        lock, users = locks.get(group_id, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        locks[group_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = locks[group_id]
            if users == 1:
                del locks[group_id]
            else:
                locks[group_id] = (lock, users - 1)


class ConsumerGroupRuntime:
    """This broker's driver of KIP-848 groups; see the module docstring.

    Concurrency: owned by the event loop; one decision per group at a time.
    """

    def __init__(
        self,
        coordinator: GroupCoordinator,
        config: KafkaConfig,
        topics: hb.TopicImage,
        new_member_id: Callable[[], str] = lambda: str(uuid.uuid4()),
    ) -> None:
        self.coordinator = coordinator
        self.settings = settings_from(config)
        self.policy = conversion.ConsumerGroupMigrationPolicy.parse(
            getattr(config, "group_consumer_migration_policy", "bidirectional")
        )
        self.classic_max_size = config.group_max_size
        self.topics = topics
        self._new_member_id = new_member_id
        self._locks = _GroupLocks()
        self._tasks: set[asyncio.Task[None]] = set()
        # The classic service, once it registers (it converts groups back and forth).
        self.classic: ClassicListener | None = getattr(coordinator, "classic_service", None)
        listeners = getattr(coordinator, "listeners", None)
        if listeners is not None:
            listeners.append(self)  # on_loaded / on_unloaded (shard.ShardListener)
        coordinator.consumer_runtime = self

    # -- heartbeats --------------------------------------------------------------------------

    async def heartbeat(self, shard: GroupShard, request: hb.HeartbeatRequest) -> hb.Decision:
        async with self._locks.hold(shard, request.group_id):
            if not shard.active:
                return hb.Decision(error=ErrorCode.not_coordinator)
            gid = request.group_id
            existing = shard.groups.get(gid)
            upgrade: list[cr.ConsumerGroupRecord] = []
            current = existing
            if isinstance(existing, ClassicGroup) and not existing.is_empty():
                if request.member_epoch != 0 or self.classic is None:
                    return hb.Decision(
                        error=ErrorCode.group_id_not_found,
                        message=f"Group {gid} is not a consumer group.",
                    )
                try:
                    conversion.validate_online_upgrade(
                        existing, self.policy, self.settings.max_size
                    )
                    upgrade = conversion.upgrade_records(existing, self.topics)
                except conversion.UpgradeRefused as refused:
                    log.info("group %s: %s", gid, refused)
                    return hb.Decision(error=ErrorCode.group_id_not_found, message=str(refused))
                current = conversion.replayed(gid, upgrade)
            decision = hb.heartbeat(
                current, request, self.settings, self.topics, self._new_member_id()
            )
            if decision.error != ErrorCode.none:
                return decision
            if (
                isinstance(existing, ConsumerGroup)
                and request.member_epoch == hb.LEAVE_GROUP_MEMBER_EPOCH
                and decision.member_id in existing.members
                and self._may_downgrade(existing, {decision.member_id})
            ):
                error = await self._downgrade(shard, existing, {decision.member_id})
                return decision if error == ErrorCode.none else hb.Decision(error=error)
            records = upgrade + decision.records
            replaces = decision.replaces_classic_group or bool(upgrade)
            error = await self._write_and_apply(shard, gid, existing, records, replaces)
            if error != ErrorCode.none:
                return hb.Decision(error=error)
            if upgrade:
                assert isinstance(existing, ClassicGroup)
                log.info("group %s: converted from a classic group to a consumer group", gid)
                if self.classic is not None:
                    self.classic.on_upgraded(shard, existing)
                for member in current.members.values():
                    assert member.classic is not None
                    self._schedule_session(
                        shard, gid, member.member_id, member.classic.session_timeout_ms
                    )
            self._carry_out(shard, gid, decision.effects)
            return decision

    # -- downgrade -----------------------------------------------------------------------------

    def _may_downgrade(self, group: ConsumerGroup, leaving: set[str]) -> bool:
        return self.classic is not None and conversion.can_downgrade(
            group, leaving, self.policy, self.classic_max_size
        )

    async def _downgrade(
        self, shard: GroupShard, group: ConsumerGroup, leaving: set[str]
    ) -> ErrorCode:
        """Write the consumer group's tombstones and its classic generation, then hand
        the classic group to the classic service (which starts a rebalance)."""
        gid = group.group_id
        classic, records = conversion.downgrade(group, leaving, shard.now_ms())
        error = await shard.write(records)
        if error != ErrorCode.none:
            return error
        if not shard.active:
            return ErrorCode.not_coordinator
        if shard.groups.get(gid) is not group:
            return ErrorCode.coordinator_not_available
        for member_id in group.members:
            for key in _member_keys(gid, member_id):
                shard.cancel(key)
        group.on_deleted(ErrorCode.coordinator_not_available)
        shard.groups[gid] = classic
        log.info("group %s: converted from a consumer group to a classic group", gid)
        assert self.classic is not None
        self.classic.on_downgraded(shard, classic)
        return ErrorCode.none

    # -- classic members inside a consumer group ---------------------------------------------

    def hosts_classic_members(self, group) -> bool:
        """Whether classic requests to ``group`` are answered here: a non-empty consumer
        group (an empty one is replaced by a classic group on JoinGroup)."""
        return isinstance(group, ConsumerGroup) and not group.is_empty()

    async def classic_join(self, shard: GroupShard, request: JoinRequest) -> JoinResult:
        gid = request.group_id
        async with self._locks.hold(shard, gid):
            group = shard.groups.get(gid)
            if not shard.active:
                return JoinResult(ErrorCode.not_coordinator, request.member_id)
            if not isinstance(group, ConsumerGroup):
                return JoinResult(ErrorCode.coordinator_not_available, request.member_id)
            d = classic_members.join(
                group, request, self.settings, self.topics, self._new_member_id()
            )
            if d.error != ErrorCode.none:
                return JoinResult(d.error, d.member_id)
            error = await self._write_and_apply(shard, gid, group, d.records, False)
            if error != ErrorCode.none:
                return JoinResult(error, request.member_id)
            self._carry_out(shard, gid, d.effects)
            # Kafka: the member must SyncGroup within its rebalance timeout.
            shard.cancel(_classic_join_key(gid, d.member_id))
            self._schedule_classic_timeout(
                shard, _classic_sync_key(gid, d.member_id), gid, d.member_id, "sync"
            )
            return JoinResult(
                ErrorCode.none,
                d.member_id,
                d.generation_id,
                CONSUMER_PROTOCOL_TYPE,
                d.protocol_name,
                leader_id="",
            )

    def _classic_group(self, shard: GroupShard, group_id: str) -> ConsumerGroup | None:
        group = shard.groups.get(group_id)
        return group if isinstance(group, ConsumerGroup) else None

    async def classic_sync(
        self,
        shard: GroupShard,
        group_id: str,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> SyncResult:
        async with self._locks.hold(shard, group_id):
            group = self._classic_group(shard, group_id)
            if group is None:
                return SyncResult(ErrorCode.unknown_member_id)
            error, assignment = classic_members.sync(
                group, member_id, instance_id, generation_id, protocol_type, protocol_name
            )
            if error != ErrorCode.none:
                return SyncResult(error)
            self._restart_classic_session(shard, group, member_id)
            shard.cancel(_classic_sync_key(group_id, member_id))
            member = group.members[member_id]
            assert member.classic is not None
            name = protocol_name or member.classic.supported_protocols[0][0]
            return SyncResult(ErrorCode.none, CONSUMER_PROTOCOL_TYPE, name, assignment)

    def classic_heartbeat(
        self,
        shard: GroupShard,
        group_id: str,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
    ) -> ErrorCode:
        group = self._classic_group(shard, group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        error = classic_members.heartbeat(group, member_id, instance_id, generation_id)
        if error in (ErrorCode.none, ErrorCode.rebalance_in_progress):
            self._restart_classic_session(shard, group, member_id)
        if error == ErrorCode.rebalance_in_progress:
            # Kafka ``scheduleConsumerGroupJoinTimeoutIfAbsent``: told to rejoin, it must
            # within its rebalance timeout (it could keep heartbeating while holding
            # partitions the others wait for).
            key = _classic_join_key(group_id, member_id)
            if not shard.scheduled(key):
                self._schedule_classic_timeout(shard, key, group_id, member_id, "rejoin")
        return error

    def _schedule_classic_timeout(
        self, shard: GroupShard, key: str, group_id: str, member_id: str, what: str
    ) -> None:
        group = self._classic_group(shard, group_id)
        member = group.members.get(member_id) if group is not None else None
        if member is None:
            return
        shard.schedule(
            key,
            member.rebalance_timeout_ms,
            lambda: self._spawn(
                self._fence(shard, group_id, member_id, f"it did not {what} in time", None)
            ),
        )

    def _restart_classic_session(
        self, shard: GroupShard, group: ConsumerGroup, member_id: str
    ) -> None:
        member = group.members.get(member_id)
        if member is not None and member.classic is not None:
            self._schedule_session(
                shard, group.group_id, member_id, member.classic.session_timeout_ms
            )

    async def classic_leave(
        self, shard: GroupShard, group_id: str, members: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        async with self._locks.hold(shard, group_id):
            group = self._classic_group(shard, group_id)
            if group is None:
                return ErrorCode.none, [(m, i, ErrorCode.unknown_member_id) for m, i in members]
            records, results, leaving = classic_members.leave(group, members, self.topics)
            error = await self._write_and_apply(shard, group_id, group, records, False)
            if error != ErrorCode.none:
                return error, []
            for member_id in leaving:
                for key in _member_keys(group_id, member_id):
                    shard.cancel(key)
            return ErrorCode.none, results

    async def _write_and_apply(
        self,
        shard: GroupShard,
        group_id: str,
        existing,
        records: list[cr.ConsumerGroupRecord],
        replaces_classic: bool,
    ) -> ErrorCode:
        if not records:
            return ErrorCode.none
        encoded = [r.encode() for r in records]
        if replaces_classic:
            encoded = existing.metadata_tombstones() + encoded
        error = await shard.write(encoded)
        if error != ErrorCode.none:
            return error
        if not shard.active:
            return ErrorCode.not_coordinator
        if shard.groups.get(group_id) is not existing:
            # Deleted or taken by a classic member while the write was in flight.
            log.warning("group %s changed while its heartbeat was written", group_id)
            return ErrorCode.coordinator_not_available
        if replaces_classic:
            del shard.groups[group_id]
            existing.on_deleted(ErrorCode.group_id_not_found)
        for record in records:
            consumer_records.apply(shard, record)
        return ErrorCode.none

    # -- timers ------------------------------------------------------------------------------

    def _carry_out(self, shard: GroupShard, group_id: str, effects: list[hb.Effect]) -> None:
        for effect in effects:
            if isinstance(effect, hb.ScheduleSessionTimeout):
                self._schedule_session(shard, group_id, effect.member_id, effect.delay_ms)
            elif isinstance(effect, hb.ScheduleRebalanceTimeout):
                self._schedule_rebalance(
                    shard, group_id, effect.member_id, effect.member_epoch, effect.delay_ms
                )
            elif isinstance(effect, hb.CancelRebalanceTimeout):
                shard.cancel(_rebalance_key(group_id, effect.member_id))
            elif isinstance(effect, hb.CancelMemberTimers):
                for key in _member_keys(group_id, effect.member_id):
                    shard.cancel(key)

    def _schedule_session(
        self, shard: GroupShard, group_id: str, member_id: str, delay_ms: int
    ) -> None:
        shard.schedule(
            _session_key(group_id, member_id),
            delay_ms,
            lambda: self._spawn(self._session_expired(shard, group_id, member_id)),
        )

    def _schedule_rebalance(
        self, shard: GroupShard, group_id: str, member_id: str, epoch: int, delay_ms: int
    ) -> None:
        shard.schedule(
            _rebalance_key(group_id, member_id),
            delay_ms,
            lambda: self._spawn(self._rebalance_timeout(shard, group_id, member_id, epoch)),
        )

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _session_expired(self, shard: GroupShard, group_id: str, member_id: str) -> None:
        await self._fence(shard, group_id, member_id, "its session expired", None)

    async def _rebalance_timeout(
        self, shard: GroupShard, group_id: str, member_id: str, epoch: int
    ) -> None:
        await self._fence(
            shard, group_id, member_id, "it did not revoke its partitions in time", epoch
        )

    async def _fence(
        self,
        shard: GroupShard,
        group_id: str,
        member_id: str,
        reason: str,
        revoking_epoch: int | None,
    ) -> None:
        async with self._locks.hold(shard, group_id):
            group = shard.groups.get(group_id)
            if not shard.active or not isinstance(group, ConsumerGroup):
                return
            if revoking_epoch is None:
                records, effects = hb.session_expired(group, member_id, self.topics)
            else:
                records, effects = hb.rebalance_timed_out(
                    group, member_id, revoking_epoch, self.topics
                )
            if not records:
                return
            log.info("group %s: member %s fenced because %s", group_id, member_id, reason)
            if self._may_downgrade(group, {member_id}):
                error = await self._downgrade(shard, group, {member_id})
            else:
                error = await self._write_and_apply(shard, group_id, group, records, False)
            if error != ErrorCode.none:
                log.info("group %s: fencing %s failed (%s)", group_id, member_id, error.name)
                if shard.active:
                    self._schedule_session(shard, group_id, member_id, FENCE_RETRY_MS)
                return
            self._carry_out(shard, group_id, effects)

    # -- after loading -----------------------------------------------------------------------

    def on_loaded(self, shard: GroupShard) -> None:
        """Arm the timers of every member of the shard's consumer groups."""
        for group in list(shard.groups.values()):
            if not isinstance(group, ConsumerGroup):
                continue
            for member in group.members.values():
                session_ms = (
                    self.settings.session_timeout_ms
                    if member.classic is None
                    else member.classic.session_timeout_ms
                )
                self._schedule_session(shard, group.group_id, member.member_id, session_ms)
                if member.state is MemberState.UNREVOKED_PARTITIONS:
                    self._schedule_rebalance(
                        shard,
                        group.group_id,
                        member.member_id,
                        member.member_epoch,
                        member.rebalance_timeout_ms,
                    )

    def on_unloaded(self, shard: GroupShard, error: ErrorCode) -> None:
        """Nothing waits on a consumer group; the shard cancelled its timers."""

    async def shutdown(self) -> None:
        for task in list(self._tasks):
            task.cancel()
