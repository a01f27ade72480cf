"""The KIP-848 runtime on a stand-in shard (the coordinator's write and timers, in
memory): write-then-apply, a failed write changing nothing, the session timer fencing
a silent member, one decision per group at a time, and timers armed again after a
shard loads."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from consumer_group_util import Topics
from replog.config import KafkaConfig
from replog.coordinator.group import consumer_records
from replog.coordinator.group import consumer_records_codec as cr
from replog.coordinator.group.consumer_group_heartbeat import HeartbeatRequest
from replog.coordinator.group.consumer_group_runtime import ConsumerGroupRuntime


class FakeShard:
    """GroupShard's interface: groups, write (acks=all, here a list), timers."""

    def __init__(self) -> None:
        self.groups: dict = {}
        self.active = True
        self.log: list = []
        self.fail_with = ErrorCode.none
        self.write_delay = 0.0
        self._timers: dict[str, asyncio.TimerHandle] = {}

    async def write(self, records) -> ErrorCode:
        await asyncio.sleep(self.write_delay)
        if self.fail_with != ErrorCode.none:
            return self.fail_with
        self.log += records
        return ErrorCode.none

    def schedule(self, key, delay_ms, callback) -> None:
        self.cancel(key)
        self._timers[key] = asyncio.get_running_loop().call_later(delay_ms / 1000, callback)

    def cancel(self, key) -> None:
        handle = self._timers.pop(key, None)
        if handle is not None:
            handle.cancel()


class FakeCoordinator:
    pass


def _runtime(session_timeout_ms: int = 100) -> ConsumerGroupRuntime:
    config = KafkaConfig.from_properties(
        {
            "broker.id": "0",
            "zookeeper.connect": "127.0.0.1:1",
            "log.dirs": "/nonexistent",
            "group.consumer.session.timeout.ms": str(session_timeout_ms),
            "group.consumer.min.session.timeout.ms": str(session_timeout_ms),
            "group.consumer.heartbeat.interval.ms": str(session_timeout_ms // 2),
            "group.consumer.min.heartbeat.interval.ms": str(session_timeout_ms // 2),
            "group.consumer.max.session.timeout.ms": str(max(session_timeout_ms, 60000)),
            "group.consumer.max.heartbeat.interval.ms": str(max(session_timeout_ms // 2, 15000)),
        }
    )
    ids = iter(range(1000))
    return ConsumerGroupRuntime(
        FakeCoordinator(), config, Topics(orders=4), new_member_id=lambda: f"id-{next(ids)}"
    )


def _join(member_id: str) -> HeartbeatRequest:
    return HeartbeatRequest(
        "g", member_id, 0, rebalance_timeout_ms=1000, subscribed_topic_names=("orders",), owned=()
    )


def test_a_failed_write_changes_nothing_and_answers_the_coordinator_error() -> None:
    async def main() -> None:
        runtime, shard = _runtime(), FakeShard()
        shard.fail_with = ErrorCode.not_coordinator
        decision = await runtime.heartbeat(shard, _join("a"))
        assert decision.error == ErrorCode.not_coordinator
        assert shard.groups == {} and shard._timers == {}
        shard.fail_with = ErrorCode.none
        decision = await runtime.heartbeat(shard, _join("a"))
        assert decision.error == ErrorCode.none and decision.member_epoch == 1
        assert shard.groups["g"].state_name() == "Stable"
        assert shard.log and "consumer-session-g-a" in shard._timers

    asyncio.run(main())


def test_a_silent_member_is_fenced_when_its_session_expires() -> None:
    async def main() -> None:
        runtime, shard = _runtime(session_timeout_ms=50), FakeShard()
        await runtime.heartbeat(shard, _join("a"))
        await runtime.heartbeat(shard, _join("b"))
        group = shard.groups["g"]
        for _ in range(100):
            await asyncio.sleep(0.01)
            if not group.members:
                break
        assert group.members == {} and group.state_name() == "Empty"
        tombstones = [r for r in shard.log if r.value is None]
        assert len(tombstones) == 6  # three per member

    asyncio.run(main())


def test_heartbeats_of_a_group_are_decided_one_at_a_time() -> None:
    async def main() -> None:
        runtime, shard = _runtime(session_timeout_ms=60_000), FakeShard()
        shard.write_delay = 0.01
        decisions = await asyncio.gather(*(runtime.heartbeat(shard, _join(m)) for m in "abcd"))
        assert all(d.error == ErrorCode.none for d in decisions)
        # Each saw the one before: four joins, four group epochs.
        assert sorted(d.member_epoch for d in decisions) == [1, 2, 3, 4]
        assert shard.groups["g"].group_epoch == 4

    asyncio.run(main())


def test_members_of_a_loaded_shard_get_their_timers() -> None:
    async def main() -> None:
        runtime = _runtime(session_timeout_ms=60_000)
        shard = FakeShard()
        await runtime.heartbeat(shard, _join("a"))
        loaded = FakeShard()
        for record in shard.log:
            consumer_records.apply(loaded, cr.decode(record.key, record.value))
        runtime.on_loaded(loaded)
        assert set(loaded._timers) == {"consumer-session-g-a"}

    asyncio.run(main())


def test_a_v0_member_gets_an_id_from_the_coordinator() -> None:
    async def main() -> None:
        runtime, shard = _runtime(session_timeout_ms=60_000), FakeShard()
        request = HeartbeatRequest(
            "g",
            "",
            0,
            rebalance_timeout_ms=1000,
            subscribed_topic_names=("orders",),
            owned=(),
            api_version=0,
        )
        decision = await runtime.heartbeat(shard, request)
        assert decision.member_id == "id-0"

    asyncio.run(main())
