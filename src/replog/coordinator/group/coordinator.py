"""The group coordinator's runtime: one shard per ``__consumer_offsets`` partition led here.

When this broker becomes the leader of an offsets partition (LeaderAndIsr), the
runtime makes a ``GroupShard`` for it in the LOADING state and loads it: it waits
until the partition's high watermark reaches the log end offset it had on becoming
leader (every record a former leader acknowledged is then committed here too), reads
the log from its start to the high watermark and replays each record into the groups
and offsets, then serves (Kafka ``GroupMetadataManager.loadGroupsAndOffsets``). Until
then requests for its groups get COORDINATOR_LOAD_IN_PROGRESS; after this broker stops
leading the partition they get NOT_COORDINATOR and clients look for the new
coordinator.

The shard itself (its groups, offsets and timers, and the replay of each record) is
``shard.GroupShard``; this module makes, loads, writes for and unloads the shards.

Writes go through the partition leader's append with acks=all, like a producer's: a
commit is acknowledged only once every in-sync replica has it
(``offsets.commit.timeout.ms`` bounds the wait). The in-memory state changes only
after the write is acknowledged, except a transactional commit's pending entry
(``txn_offsets``), held from its append on so that its transaction's marker, which
can only follow it in the log, always finds it.

Transaction markers: the WriteTxnMarkers handler, after appending a COMMIT or ABORT
marker to an offsets partition with acks=all, calls ``on_transaction_marker``; while
loading, the markers are read from the log instead (control batches), so a shard that
is still loading ignores the call: it reads up to the high watermark it finds at its
end, which is past every marker acknowledged by then.

Concurrency: everything here is owned by the event loop. A shard's groups and offsets
change only in callbacks that do not await between a check and the change; the one
await in a write is the wait for acks=all, after which callers re-check ``active``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from replog.common.clock import now_ms
from replog.common.topics import GROUP_METADATA_TOPIC_NAME
from replog.coordinator.group import records as rec
from replog.coordinator.group.group import Record
from replog.coordinator.group.offsets import CommittedOffset, TopicPartition
from replog.coordinator.group.offsets_topic import partition_for
from replog.coordinator.group.shard import GroupShard, Replayer, ShardListener, ShardState
from replog.protocol.records import ATTR_TRANSACTIONAL, build_batch, encode_record, iter_batches
from replog.protocol.wire import CodecError
from replog.replication.delayed_operations import DelayedHighWatermark
from replog.storage.producer_state import VerificationGuard
from replog.storage.record_reader import iter_records

if TYPE_CHECKING:
    from replog.config import KafkaConfig
    from replog.coordinator.group.classic_group_service import ClassicGroupService
    from replog.coordinator.group.consumer_group_runtime import ConsumerGroupRuntime
    from replog.replication.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

LOAD_READ_BYTES = 5 * 1024 * 1024  # Kafka offsets.load.buffer.size
LOAD_RECHECK_S = 1.0

# Kafka GroupMetadataManager / CoordinatorRuntime: how an append's error reads to a client.
_WRITE_ERRORS = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.fenced_leader_epoch: ErrorCode.not_coordinator,
    ErrorCode.message_too_large: ErrorCode.unknown_server_error,
    ErrorCode.record_list_too_large: ErrorCode.unknown_server_error,
    ErrorCode.invalid_fetch_size: ErrorCode.unknown_server_error,
}


class GroupCoordinator:
    """This broker's group coordinator (Kafka ``GroupCoordinator`` + its runtime).

    Concurrency: owned by the event loop.
    """

    def __init__(
        self,
        config: KafkaConfig,
        replica_manager: ReplicaManager,
        offsets_partition_count: Callable[[], int | None],
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.config = config
        self.replica_manager = replica_manager
        self._partition_count = offsets_partition_count
        self.clock = clock
        self._shards: dict[int, GroupShard] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.listeners: list[ShardListener] = []
        # Key version -> the group type's replay (offset commits are the runtime's own);
        # each protocol's service registers its own when the broker wires it.
        self.replayers: dict[int, Replayer] = {}
        # The two protocols' services register here; each finds the other through them
        # to convert groups (KIP-848's upgrade and downgrade) and to route the classic
        # requests of a consumer group's classic members.
        self.classic_service: ClassicGroupService | None = None
        self.consumer_runtime: ConsumerGroupRuntime | None = None

    # -- where groups live ----------------------------------------------------------

    def partition_count(self) -> int:
        return self._partition_count() or self.config.offsets_topic_num_partitions

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.partition_count())

    def shard_for(self, group_id: str) -> tuple[ErrorCode, GroupShard | None]:
        shard = self._shards.get(self.partition_for(group_id))
        if shard is None or not shard.active:
            return ErrorCode.not_coordinator, None
        if shard.state is ShardState.LOADING:
            return ErrorCode.coordinator_load_in_progress, None
        return ErrorCode.none, shard

    def loaded_shards(self) -> list[GroupShard]:
        return [s for s in self._shards.values() if s.state is ShardState.LOADED]

    def committed_offsets(self) -> Iterator[tuple[str, dict[TopicPartition, CommittedOffset]]]:
        """``(group, {partition: committed offset})`` of every group of the loaded shards
        (the metrics' consumer group lag)."""
        for shard in self.loaded_shards():
            for group in shard.offsets.groups():
                yield group, shard.offsets.of_group(group)

    def loading(self) -> bool:
        return any(s.state is ShardState.LOADING for s in self._shards.values())

    # -- leadership of the offsets partitions ------------------------------------------

    def on_partition_role(self, partition: int, is_leader: bool, leader_epoch: int) -> None:
        """A LeaderAndIsr (or StopReplica: not leader) for ``__consumer_offsets-partition``
        was applied (Kafka ``onElection`` / ``onResignation``)."""
        shard = self._shards.get(partition)
        if is_leader:
            if shard is not None and shard.active and shard.leader_epoch == leader_epoch:
                return
            if shard is not None:
                self._unload(partition, ErrorCode.not_coordinator)
            shard = GroupShard(self, partition, leader_epoch)
            self._shards[partition] = shard
            task = asyncio.get_running_loop().create_task(self._load(shard))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif shard is not None:
            self._unload(partition, ErrorCode.not_coordinator)

    def _unload(self, partition: int, error: ErrorCode) -> None:
        shard = self._shards.pop(partition, None)
        if shard is not None:
            log.info(
                "%s-%d: unloading %d groups (no longer the leader)",
                GROUP_METADATA_TOPIC_NAME,
                partition,
                len(shard.groups),
            )
            shard.unload(error)
            for listener in self.listeners:
                listener.on_unloaded(shard, error)

    def _current_partition(self, shard: GroupShard):
        """The replica of the shard's partition, if this broker still leads it at the
        shard's epoch."""
        part = self.replica_manager.get_partition(GROUP_METADATA_TOPIC_NAME, shard.partition)
        if (
            part is None
            or not shard.active
            or not part.is_leader
            or part.leader_epoch != shard.leader_epoch
        ):
            return None
        return part

    async def _load(self, shard: GroupShard) -> None:
        started = time.monotonic()
        part = self._current_partition(shard)
        if part is None:
            return
        target = part.log_end_offset
        # Everything a former leader acknowledged is below our log end; wait until the
        # ISR has it too (the high watermark reaches it) before reading up to the HW.
        while part.high_watermark < target:
            # Woken by the HW or a role change; the timeout re-checks a replica that was
            # stopped and replaced meanwhile (its waiters would never fire).
            await DelayedHighWatermark(part, target).wait([part], LOAD_RECHECK_S)
            part = self._current_partition(shard)
            if part is None:
                return
        offset = part.log_start_offset
        count = 0
        try:
            # To the high watermark as it is at the end (markers acknowledged meanwhile
            # are read here: ``on_transaction_marker`` ignores a loading shard); nothing
            # awaits between the last check and LOADED.
            while offset < part.high_watermark:
                high_watermark = part.high_watermark
                data = part.read_records(offset, LOAD_READ_BYTES, high_watermark)
                if not data:
                    break
                for pos, header in iter_batches(data):
                    offset = header.next_offset
                    batch = memoryview(data)[pos : pos + header.size]
                    if header.is_control:
                        if header.base_offset < high_watermark:
                            self._replay_control(shard, batch, header)
                        continue
                    producer_id = header.producer_id if header.is_transactional else -1
                    for record in iter_records(batch, header):
                        if record.offset >= high_watermark:
                            break
                        if record.key is None:
                            continue
                        try:
                            shard.replay(record.offset, record.key, record.value, producer_id)
                            count += 1
                        except (CodecError, ValueError) as exc:
                            log.error(
                                "%s-%d: skipping an unreadable record at offset %d: %s",
                                GROUP_METADATA_TOPIC_NAME,
                                shard.partition,
                                record.offset,
                                exc,
                            )
                # Yield between reads so a large partition does not hold the loop.
                await asyncio.sleep(0)
                current = self._current_partition(shard)
                if current is None:
                    return
                part = current
        except Exception:
            log.exception(
                "%s-%d: loading groups failed", GROUP_METADATA_TOPIC_NAME, shard.partition
            )
            self._unload(shard.partition, ErrorCode.coordinator_not_available)
            return
        if not shard.active:
            return
        shard.state = ShardState.LOADED
        for listener in self.listeners:
            listener.on_loaded(shard)
        log.info(
            "%s-%d: loaded %d groups and offsets of %d groups from %d records in %.3f s",
            GROUP_METADATA_TOPIC_NAME,
            shard.partition,
            len(shard.groups),
            len(shard.offsets.groups()),
            count,
            time.monotonic() - started,
        )

    def _replay_control(self, shard: GroupShard, batch: memoryview, header) -> None:
        """A control batch read while loading: a COMMIT or ABORT marker decides the
        pending offset commits of its producer."""
        for record in iter_records(batch, header):
            commit = rec.end_transaction_marker(record.key)
            if commit is None:
                log.warning(
                    "%s-%d: skipping an unknown control record at offset %d",
                    GROUP_METADATA_TOPIC_NAME,
                    shard.partition,
                    record.offset,
                )
                continue
            shard.replay_end_transaction_marker(header.producer_id, commit)

    def on_transaction_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        """A COMMIT (``commit``) or ABORT marker of ``producer_id`` was appended to
        ``__consumer_offsets-partition`` and acknowledged by the ISR (Kafka
        ``GroupCoordinator.onTransactionCompleted`` / ``scheduleHandleTxnCompletion``).
        Synchronous: it only moves or drops the producer's pending commits of the
        partition's groups. A shard that is not loaded here ignores it (a loading shard
        reads the marker from the log; an unloaded one's successor does)."""
        shard = self._shards.get(partition)
        if shard is None or shard.state is not ShardState.LOADED:
            return
        groups = shard.replay_end_transaction_marker(producer_id, commit)
        if groups:
            log.debug(
                "%s-%d: %s of producer %d decided the offsets of groups %s",
                GROUP_METADATA_TOPIC_NAME,
                partition,
                "COMMIT" if commit else "ABORT",
                producer_id,
                sorted(groups),
            )

    # -- writes -------------------------------------------------------------------------

    async def append(self, shard: GroupShard, records: list[Record]) -> tuple[ErrorCode, int]:
        """Append ``records`` as one batch with acks=all; the error to answer with and the
        offset of the first record."""
        return await self._append(shard, records, NON_TRANSACTIONAL, None)

    async def append_transactional(
        self,
        shard: GroupShard,
        records: list[Record],
        producer: TransactionalProducer,
        on_appended: Callable[[int], None],
        verification: Verification | None = None,
    ) -> tuple[ErrorCode, int]:
        """As ``append``, as a transactional batch of ``producer`` (Kafka writes a
        TxnOffsetCommit's records so: the partition checks the producer epoch, and the
        transaction's marker decides them). ``on_appended(first offset)`` runs as soon as
        the leader appended them, before the wait for acks=all. ``verification``: KIP-890's
        check with the transaction coordinator was made (its guard must still be current
        for a batch that opens a transaction on the partition)."""
        return await self._append(shard, records, producer, on_appended, verification)

    async def _append(
        self,
        shard: GroupShard,
        records: list[Record],
        producer: TransactionalProducer,
        on_appended: Callable[[int], None] | None,
        verification: Verification | None = None,
    ) -> tuple[ErrorCode, int]:
        if not records:
            return ErrorCode.none, -1
        if self._current_partition(shard) is None:
            return ErrorCode.not_coordinator, -1
        now = self.clock()
        body = b"".join(encode_record(i, 0, r.key, r.value) for i, r in enumerate(records))
        batch = build_batch(
            base_offset=0,
            partition_leader_epoch=-1,
            attributes=ATTR_TRANSACTIONAL if producer.producer_id >= 0 else 0,
            last_offset_delta=len(records) - 1,
            base_timestamp=now,
            max_timestamp=now,
            producer_id=producer.producer_id,
            producer_epoch=producer.producer_epoch,
            base_sequence=-1,
            record_count=len(records),
            records=body,
        )
        rm = self.replica_manager
        key = (GROUP_METADATA_TOPIC_NAME, shard.partition)
        if verification is None:
            result = rm.append_to_leader(key[0], key[1], batch, -1, now, from_coordinator=True)
        else:
            result = rm.append_to_leader(
                key[0],
                key[1],
                batch,
                -1,
                now,
                verification_required=True,
                verification_guard=verification.guard,
                from_coordinator=True,
            )
        if result.error == ErrorCode.none:
            if on_appended is not None and shard.active:
                on_appended(result.base_offset)
            await rm.wait_for_acks_all({key: result}, self.config.offsets_commit_timeout_ms)
        error = ErrorCode(result.error)
        if error != ErrorCode.none:
            log.info(
                "%s-%d: writing %d records failed: %s",
                GROUP_METADATA_TOPIC_NAME,
                shard.partition,
                len(records),
                error.name,
            )
            return _WRITE_ERRORS.get(error, error), -1
        if not shard.active:
            return ErrorCode.not_coordinator, -1
        return ErrorCode.none, result.base_offset

    # -- offsets retention -----------------------------------------------------------

    async def expire_offsets(self) -> int:
        """Remove expired offsets, and empty groups left without offsets (Kafka
        ``cleanupGroupMetadata``); the number of offsets removed."""
        removed = 0
        retention_ms = self.config.offsets_retention_minutes * 60_000
        for shard in self.loaded_shards():
            now = shard.now_ms()
            tombstones: list[Record] = []
            expired: list[tuple[str, tuple[str, int]]] = []
            dead_groups: list[str] = []
            for group_id in set(shard.offsets.groups()) | set(shard.groups):
                group = shard.groups.get(group_id)
                if group is not None and not group.is_empty():
                    continue
                since = None if group is None else group.empty_since_ms()
                due = shard.offsets.expired(group_id, now, retention_ms, since)
                expired += [(group_id, tp) for tp in due]
                tombstones += [offset_tombstone(group_id, tp) for tp in due]
                if (
                    group is not None
                    and len(due) == len(shard.offsets.of_group(group_id))
                    and not shard.offsets.has_open_transactions(group_id)
                ):
                    dead_groups.append(group_id)
                    tombstones.extend(group.metadata_tombstones())
            if not tombstones:
                continue
            error, first = await shard.write_at(tombstones)
            if error != ErrorCode.none or not shard.active:
                continue
            for i, (group_id, tp) in enumerate(expired):
                shard.offsets.remove(group_id, tp, first + i)
            for group_id in dead_groups:
                group = shard.groups.get(group_id)
                if group is not None and group.is_empty():
                    del shard.groups[group_id]
                    group.on_deleted(ErrorCode.coordinator_not_available)
            removed += len(expired)
            log.info(
                "%s-%d: expired %d offsets and %d groups",
                GROUP_METADATA_TOPIC_NAME,
                shard.partition,
                len(expired),
                len(dead_groups),
            )
        return removed

    async def shutdown(self) -> None:
        for partition in list(self._shards):
            self._unload(partition, ErrorCode.not_coordinator)
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass


@dataclass(frozen=True)
class TransactionalProducer:
    """The producer whose transaction a batch of ``__consumer_offsets`` belongs to
    (``producer_id`` -1: not transactional). ``transactional_id`` is what KIP-890's
    verification asks the transaction coordinator about before the partition appends
    a transaction's first batch (Kafka ``appendForGroup``'s transactional id)."""

    producer_id: int
    producer_epoch: int
    transactional_id: str | None = None


NON_TRANSACTIONAL = TransactionalProducer(-1, -1)


@dataclass(frozen=True)
class Verification:
    """A transactional write verified with the transaction coordinator (KIP-890): the
    partition's guard from before the check (None: the producer's transaction was already
    open there), which a marker written since makes stale."""

    guard: VerificationGuard | None


def offset_commit_record(
    group_id: str, tp: tuple[str, int], value: rec.OffsetCommitValue
) -> Record:
    return Record(
        rec.encode_offset_commit_key(rec.OffsetCommitKey(group_id, tp[0], tp[1])),
        rec.encode_offset_commit_value(value),
    )


def offset_tombstone(group_id: str, tp: tuple[str, int]) -> Record:
    return Record(rec.encode_offset_commit_key(rec.OffsetCommitKey(group_id, tp[0], tp[1])), None)
