"""A group coordinator shard: the groups and committed offsets of one ``__consumer_offsets``
partition this broker leads (Kafka ``GroupCoordinatorShard``), and what the runtime asks of
the group protocols' services around it (the replay of their records while a shard loads,
and being told when a shard starts or stops serving).

``coordinator.GroupCoordinator`` makes, loads and unloads the shards; a shard's writes go
through it (acks=all on the partition's leader). A shard sees it only as a
``ShardRuntime``, so this module does not import the runtime built on it.

Concurrency: owned by the event loop (see ``GroupShard``).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode

from replog.common.topics import GROUP_METADATA_TOPIC_NAME
from replog.coordinator.group import records as rec
from replog.coordinator.group.group import Group, Record
from replog.coordinator.group.offsets import CommittedOffset, OffsetStore

if TYPE_CHECKING:
    from replog.config import KafkaConfig

log = logging.getLogger(__name__)


class ShardState(enum.Enum):
    LOADING = "loading"
    LOADED = "loaded"
    UNLOADED = "unloaded"


class GroupShard:
    """The groups and committed offsets of one ``__consumer_offsets`` partition.

    Concurrency: owned by the event loop. ``active`` turns False when the shard is
    unloaded; code that awaited a ``write`` checks it before touching state again.
    """

    def __init__(
        self,
        coordinator: ShardRuntime,
        partition: int,
        leader_epoch: int,
    ) -> None:
        self.coordinator = coordinator
        self.config: KafkaConfig = coordinator.config
        self.partition = partition
        self.leader_epoch = leader_epoch
        self.state = ShardState.LOADING
        self.groups: dict[str, Group] = {}
        self.offsets = OffsetStore()
        self._timers: dict[str, asyncio.TimerHandle] = {}

    @property
    def active(self) -> bool:
        return self.state is not ShardState.UNLOADED

    def now_ms(self) -> int:
        return self.coordinator.clock()

    async def write(self, records: list[Record]) -> ErrorCode:
        """Append ``records`` to this shard's partition with acks=all and wait for them."""
        error, _ = await self.coordinator.append(self, records)
        return error

    async def write_at(self, records: list[Record]) -> tuple[ErrorCode, int]:
        """As ``write``, also returning the offset of the first record written."""
        return await self.coordinator.append(self, records)

    def schedule(self, key: str, delay_ms: int, callback: Callable[[], None]) -> None:
        """Run ``callback`` after ``delay_ms`` unless cancelled or the shard unloads; a
        timer already under ``key`` is replaced."""
        self.cancel(key)
        if not self.active:
            return
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._timers.pop(key, None)
            if self.active:
                callback()

        self._timers[key] = loop.call_later(max(delay_ms, 0) / 1000, fire)

    def scheduled(self, key: str) -> bool:
        """Whether a timer is set under ``key``."""
        return key in self._timers

    def cancel(self, key: str) -> None:
        handle = self._timers.pop(key, None)
        if handle is not None:
            handle.cancel()

    def unload(self, error: ErrorCode) -> None:
        self.state = ShardState.UNLOADED
        self.offsets = OffsetStore()  # pending transactional commits go with the rest
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        for group in list(self.groups.values()):
            try:
                group.on_deleted(error)
            except Exception:
                log.exception("unloading group %s", group.group_id)
        self.groups.clear()

    # -- replay -------------------------------------------------------------------

    def replay(
        self, record_offset: int, key: bytes, value: bytes | None, producer_id: int = -1
    ) -> None:
        """Apply one record of the partition, in log order; ``producer_id`` is that of a
        transactional batch (its offset commits wait for the transaction's marker)."""
        version = rec.key_version(key)
        if version in (rec.OFFSET_COMMIT_KEY_V0, rec.OFFSET_COMMIT_KEY):
            k = rec.decode_offset_commit_key(key)
            tp = (k.topic, k.partition)
            if value is None:
                self.offsets.remove(k.group, tp, record_offset)
                return
            committed = CommittedOffset.of(rec.decode_offset_commit_value(value), record_offset)
            if producer_id >= 0:
                self.offsets.put_pending(producer_id, k.group, tp, committed)
            else:
                self.offsets.put(k.group, tp, committed)
            return
        replayer = self.coordinator.replayers.get(version)
        if replayer is None:
            log.warning(
                "%s-%d: skipping a record with unknown key version %d at offset %d",
                GROUP_METADATA_TOPIC_NAME,
                self.partition,
                version,
                record_offset,
            )
            return
        replayer(self, version, key, value)

    def replay_end_transaction_marker(self, producer_id: int, commit: bool) -> list[str]:
        """A COMMIT or ABORT marker of ``producer_id``, read or written (Kafka
        ``replayEndTransactionMarker``): its pending offset commits are decided."""
        return self.offsets.complete_transaction(producer_id, commit)


Replayer = Callable[["GroupShard", int, bytes, "bytes | None"], None]
"""Applies one record of a group type while a shard loads: ``(shard, key version, key,
value or None for a tombstone)``."""


class ShardRuntime(Protocol):
    """What a shard asks of the runtime that owns it (``coordinator.GroupCoordinator``):
    its configuration and clock, the group types' replays, and appends with acks=all."""

    config: KafkaConfig
    clock: Callable[[], int]
    replayers: dict[int, Replayer]

    async def append(self, shard: GroupShard, records: list[Record]) -> tuple[ErrorCode, int]: ...


class ShardListener(Protocol):
    """A group protocol's service, told when a shard starts or stops serving (Kafka
    ``onLoaded`` / ``onUnloaded``): it arms its members' timers, or answers what it
    parked."""

    def on_loaded(self, shard: GroupShard) -> None: ...

    def on_unloaded(self, shard: GroupShard, error: ErrorCode) -> None: ...
