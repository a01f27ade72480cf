"""Offsets retention (Kafka ``cleanupGroupMetadata``): the runtime's expiry pass over a
loaded shard, with its writes captured by a coordinator whose append is a list."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from replog.config import KafkaConfig
from replog.coordinator.group import records as rec
from replog.coordinator.group.classic_group import ClassicGroup, GroupMember, GroupState
from replog.coordinator.group.coordinator import GroupCoordinator
from replog.coordinator.group.group import Record
from replog.coordinator.group.offsets import CommittedOffset
from replog.coordinator.group.shard import GroupShard, ShardState

MINUTE = 60_000


class ListCoordinator(GroupCoordinator):
    """The runtime with its log replaced by a list (no broker, no replication)."""

    def __init__(self, now: list[int]) -> None:
        config = KafkaConfig.from_properties(
            {"zookeeper.connect": "zk", "offsets.retention.minutes": "10"}
        )
        super().__init__(config, None, lambda: 1, clock=lambda: now[0])  # type: ignore[arg-type]
        self.written: list[Record] = []

    async def append(self, shard: GroupShard, records: list[Record]) -> tuple[ErrorCode, int]:
        first = len(self.written)
        self.written.extend(records)
        return ErrorCode.none, first


def committed(offset: int, at: int) -> CommittedOffset:
    return CommittedOffset(offset, -1, "", at, -1, record_offset=-1)


def test_expiry_of_simple_empty_and_active_groups() -> None:
    now = [0]
    coordinator = ListCoordinator(now)
    shard = GroupShard(coordinator, 0, 1)
    shard.state = ShardState.LOADED
    coordinator._shards[0] = shard
    # A group that only ever committed (no members): each offset ages from its commit.
    shard.offsets.put("simple", ("t", 0), committed(5, at=0))
    shard.offsets.put("simple", ("t", 1), committed(6, at=8 * MINUTE))
    # A classic group that became empty at minute 5: every offset ages from then.
    empty = ClassicGroup("empty")
    empty.transition_to(GroupState.PREPARING_REBALANCE, 0)
    empty.transition_to(GroupState.EMPTY, 5 * MINUTE)
    shard.groups["empty"] = empty
    shard.offsets.put("empty", ("t", 0), committed(7, at=0))
    # A group with a member: never expired by retention.
    active = ClassicGroup("active")
    active.add_member(GroupMember("m", None, "c", "/h", 1000, 1000, "consumer", [("range", b"")]))
    active.transition_to(GroupState.PREPARING_REBALANCE, 0)
    active.init_next_generation(0)
    active.transition_to(GroupState.STABLE, 0)
    shard.groups["active"] = active
    shard.offsets.put("active", ("t", 0), committed(9, at=0))

    now[0] = 11 * MINUTE
    assert asyncio.run(coordinator.expire_offsets()) == 1
    assert shard.offsets.get("simple", ("t", 0)) is None
    assert shard.offsets.get("simple", ("t", 1)) is not None
    assert [rec.decode_offset_commit_key(r.key) for r in coordinator.written] == [
        rec.OffsetCommitKey("simple", "t", 0)
    ]
    assert all(r.value is None for r in coordinator.written)

    now[0] = 16 * MINUTE  # the empty group's offsets are 11 minutes past its emptiness
    assert asyncio.run(coordinator.expire_offsets()) == 1
    assert "empty" not in shard.groups  # no offsets left: the group goes too
    assert shard.offsets.get("empty", ("t", 0)) is None
    assert rec.key_version(coordinator.written[-1].key) == rec.GROUP_METADATA_KEY
    assert coordinator.written[-1].value is None

    now[0] = 100 * MINUTE
    asyncio.run(coordinator.expire_offsets())
    assert shard.offsets.get("active", ("t", 0)) is not None
    assert "active" in shard.groups
