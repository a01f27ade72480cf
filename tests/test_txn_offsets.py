"""Transactional offset commits in the group coordinator (TxnOffsetCommit, KIP-447),
without a broker: the offset store's pending commits and their markers, the groups'
fencing rules, and the runtime's write, marker and load paths over an in-memory
``__consumer_offsets`` partition (the log is a list of record batches with offsets, the
rest of the runtime is the code that ships)."""

from __future__ import annotations

import asyncio
import struct
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.offset_fetch.v7 import request as fetch_v7
from kio.schema.txn_offset_commit.v3 import request as txn_v3

from replog.common.topics import GROUP_METADATA_TOPIC_NAME
from replog.config import KafkaConfig
from replog.coordinator.group import records as rec
from replog.coordinator.group.classic_group import ClassicGroup, GroupMember, GroupState
from replog.coordinator.group.consumer_group import ConsumerGroup, ConsumerGroupMember
from replog.coordinator.group.coordinator import (
    GroupCoordinator,
    TransactionalProducer,
    offset_commit_record,
    offset_tombstone,
)
from replog.coordinator.group.offsets import CommittedOffset, OffsetStore
from replog.coordinator.group.reconciliation import MemberAssignment
from replog.coordinator.group.shard import GroupShard, ShardState
from replog.coordinator.group.txn_offsets import (
    GroupFence,
    commit_transactional_offsets,
    validate_txn_offset_commit,
)
from replog.protocol.records import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    build_batch,
    encode_record,
    iter_batches,
)
from replog.replication.delayed_operations import ProduceResult
from replog.security.acl import AclOperation, ResourceType
from replog.server.handlers.group_coordinator import GroupCoordinatorRequests
from replog.server.handlers.txn_offsets import handle_txn_offset_commit
from replog.storage.record_reader import iter_records

TP0 = ("t", 0)
TP1 = ("t", 1)


def at(offset: int, record_offset: int) -> CommittedOffset:
    return CommittedOffset(offset, -1, "", 0, -1, record_offset)


# -- the offset store ---------------------------------------------------------------------


def test_pending_commit_is_invisible_until_its_marker_commits_it() -> None:
    store = OffsetStore()
    store.put("g", TP0, at(3, record_offset=1))
    store.put_pending(7, "g", TP0, at(10, record_offset=5))
    assert store.get("g", TP0) == at(3, 1)  # OffsetFetch still sees the last committed
    assert store.has_pending("g", TP0) and not store.has_pending("g", TP1)
    assert store.has_open_transactions("g")
    assert store.complete_transaction(7, commit=True) == ["g"]
    assert store.get("g", TP0) == at(10, 5)
    assert not store.has_pending("g", TP0) and not store.has_open_transactions("g")
    assert store.complete_transaction(7, commit=True) == []  # a second marker: nothing left


def test_abort_drops_the_pending_commits() -> None:
    store = OffsetStore()
    store.put_pending(7, "g", TP0, at(10, record_offset=5))
    store.put_pending(7, "h", TP1, at(11, record_offset=6))
    assert sorted(store.complete_transaction(7, commit=False)) == ["g", "h"]
    assert store.get("g", TP0) is None and store.get("h", TP1) is None
    assert not store.has_open_transactions("g") and not store.has_open_transactions("h")
    assert store.groups() == []


def test_a_later_plain_commit_wins_over_an_earlier_transactional_one() -> None:
    """Kafka's ordering rule: the record written last decides, whichever kind it is."""
    store = OffsetStore()
    store.put_pending(7, "g", TP0, at(10, record_offset=5))
    store.put("g", TP0, at(12, record_offset=8))  # a plain OffsetCommit after it
    store.complete_transaction(7, commit=True)
    assert store.get("g", TP0) == at(12, 8)
    # the other way round: the transactional commit was written after the plain one
    store.put_pending(8, "g", TP0, at(20, record_offset=9))
    store.complete_transaction(8, commit=True)
    assert store.get("g", TP0) == at(20, 9)


def test_producers_pending_on_the_same_partition_are_decided_separately() -> None:
    store = OffsetStore()
    store.put_pending(7, "g", TP0, at(10, record_offset=5))
    store.put_pending(8, "g", TP0, at(11, record_offset=6))
    store.complete_transaction(8, commit=False)
    assert store.has_pending("g", TP0)  # producer 7's is still open
    assert store.get("g", TP0) is None
    store.complete_transaction(7, commit=True)
    assert store.get("g", TP0) == at(10, 5)
    assert not store.has_pending("g", TP0)


def test_a_tombstone_removes_pending_commits_written_before_it() -> None:
    store = OffsetStore()
    store.put_pending(7, "g", TP0, at(10, record_offset=5))
    store.put_pending(7, "g", TP1, at(11, record_offset=9))
    store.remove("g", TP0, record_offset=6)
    store.remove("g", TP1, record_offset=6)  # older than the pending commit: stays
    assert not store.has_pending("g", TP0) and store.has_pending("g", TP1)
    store.complete_transaction(7, commit=True)
    assert store.get("g", TP0) is None  # deleted offsets do not come back with the commit
    assert store.get("g", TP1) == at(11, 9)
    # a tombstone over every pending commit of a group leaves no transaction open on it
    store.put_pending(8, "h", TP0, at(1, record_offset=10))
    store.remove("h", TP0, record_offset=11)
    assert not store.has_open_transactions("h")
    assert store.open_producer_ids() == set()


def test_drop_pending_takes_back_only_its_own_write() -> None:
    store = OffsetStore()
    store.put_pending(7, "g", TP0, at(10, record_offset=5))
    store.drop_pending(7, "g", TP0, record_offset=4)
    assert store.has_pending("g", TP0)
    store.drop_pending(7, "g", TP0, record_offset=5)
    assert not store.has_pending("g", TP0)
    assert not store.has_open_transactions("g")  # nothing of producer 7 left for g
    assert store.complete_transaction(7, commit=True) == []
    assert store.get("g", TP0) is None


def test_expiry_leaves_partitions_with_pending_commits() -> None:
    store = OffsetStore()
    store.put("g", TP0, CommittedOffset(1, -1, "", 0, -1, 1))
    store.put("g", TP1, CommittedOffset(1, -1, "", 0, -1, 2))
    store.put_pending(7, "g", TP1, at(5, record_offset=3))
    assert store.expired("g", now_ms=10_000, retention_ms=1, empty_since_ms=None) == [TP0]
    store.complete_transaction(7, commit=False)
    assert sorted(store.expired("g", now_ms=10_000, retention_ms=1, empty_since_ms=None)) == [
        TP0,
        TP1,
    ]


# -- fencing (KIP-447) ----------------------------------------------------------------------


def classic_group(state: GroupState = GroupState.STABLE) -> ClassicGroup:
    """A classic group at generation 1 with members m1 (static, instance i1) and m2."""
    group = ClassicGroup("g")
    group.add_member(GroupMember("m1", "i1", "c", "/h", 1000, 1000, "consumer", [("range", b"")]))
    group.add_member(GroupMember("m2", None, "c", "/h", 1000, 1000, "consumer", [("range", b"")]))
    group.transition_to(GroupState.PREPARING_REBALANCE, 0)
    group.init_next_generation(0)
    if state is GroupState.STABLE:
        group.transition_to(GroupState.STABLE, 0)
    return group


@pytest.mark.parametrize(
    ("fence", "expected"),
    [
        (GroupFence(1, "m2"), ErrorCode.none),
        (GroupFence(1, "m1", "i1"), ErrorCode.none),
        (GroupFence(), ErrorCode.none),  # v0-v2: nothing to check
        (GroupFence(0, "m2"), ErrorCode.illegal_generation),
        (GroupFence(2, "m2"), ErrorCode.illegal_generation),
        (GroupFence(1, "zombie"), ErrorCode.unknown_member_id),
        (GroupFence(1, "m2", "i1"), ErrorCode.fenced_instance_id),
        (GroupFence(1, "m1", "unknown-instance"), ErrorCode.unknown_member_id),
        (GroupFence(-1, "m2"), ErrorCode.illegal_generation),
    ],
)
def test_classic_group_fencing(fence: GroupFence, expected: ErrorCode) -> None:
    assert validate_txn_offset_commit(classic_group(), fence) == expected


def test_classic_group_rebalance_and_dead_states() -> None:
    # A transaction may commit while the group completes a rebalance (Kafka checks
    # REBALANCE_IN_PROGRESS only for plain commits).
    completing = classic_group(GroupState.COMPLETING_REBALANCE)
    assert completing.state is GroupState.COMPLETING_REBALANCE
    assert validate_txn_offset_commit(completing, GroupFence(1, "m2")) == ErrorCode.none
    dead = classic_group()
    dead.transition_to(GroupState.DEAD, 0)
    assert validate_txn_offset_commit(dead, GroupFence()) == ErrorCode.coordinator_not_available


def test_groups_that_do_not_exist() -> None:
    assert validate_txn_offset_commit(None, GroupFence()) == ErrorCode.none
    assert validate_txn_offset_commit(None, GroupFence(3, "m")) == ErrorCode.illegal_generation


def consumer_group() -> ConsumerGroup:
    group = ConsumerGroup("g")
    group.members["m"] = ConsumerGroupMember("m", assignment=MemberAssignment(5, 4))
    return group


@pytest.mark.parametrize(
    ("fence", "expected"),
    [
        (GroupFence(5, "m"), ErrorCode.none),
        (GroupFence(), ErrorCode.none),
        # Kafka answers a stale member epoch with ILLEGAL_GENERATION in TxnOffsetCommit
        (GroupFence(4, "m"), ErrorCode.illegal_generation),
        (GroupFence(6, "m"), ErrorCode.illegal_generation),
        (GroupFence(5, "other"), ErrorCode.unknown_member_id),
        (GroupFence(-1, "m"), ErrorCode.illegal_generation),
    ],
)
def test_consumer_group_fencing(fence: GroupFence, expected: ErrorCode) -> None:
    assert validate_txn_offset_commit(consumer_group(), fence) == expected


def test_empty_consumer_group_accepts_commits_from_outside_the_group() -> None:
    assert validate_txn_offset_commit(ConsumerGroup("g"), GroupFence(-1, "x")) == ErrorCode.none


# -- the runtime over an in-memory offsets partition -----------------------------------------


class ListPartition:
    """The leader's replica of one ``__consumer_offsets`` partition: batches in a list,
    every append at once below the high watermark (a single in-sync replica)."""

    def __init__(self) -> None:
        self.batches: list[bytes] = []
        self.log_end_offset = 0
        self.log_start_offset = 0
        self.is_leader = True
        self.leader_epoch = 1

    @property
    def high_watermark(self) -> int:
        return self.log_end_offset

    def append(self, batch: bytes) -> int:
        buf = bytearray(batch)
        base = self.log_end_offset
        struct.pack_into(">q", buf, 0, base)
        self.batches.append(bytes(buf))
        count = struct.unpack_from(">i", buf, 57)[0]
        self.log_end_offset += count
        return base

    def read_records(self, offset: int, max_bytes: int, max_offset: int) -> bytes:
        out = b""
        for batch in self.batches:
            [(_, header)] = list(iter_batches(batch))
            if header.next_offset > offset and header.base_offset < max_offset:
                out += batch
        return out


class ListReplicaManager:
    def __init__(self) -> None:
        self.partition = ListPartition()
        self.fail_acks_with = ErrorCode.none
        self.on_acks = None  # called while waiting for acks=all
        self.guard: object | None = None
        self.verified: list[tuple[bool, object | None]] = []  # each append's verification

    def get_partition(self, topic: str, partition: int):
        assert topic == GROUP_METADATA_TOPIC_NAME
        return self.partition if partition == 0 else None

    def append_to_leader(
        self,
        topic: str,
        partition: int,
        batch: bytes,
        acks: int,
        now: int,
        *,
        from_coordinator,
        verification_required=False,
        verification_guard=None,
    ):
        assert acks == -1 and from_coordinator  # no sequence check: the coordinator's batch
        self.verified.append((verification_required, verification_guard))
        return ProduceResult(ErrorCode.none, base_offset=self.partition.append(batch))

    def maybe_start_transaction_verification(self, topic: str, partition: int, producer_id: int):
        """KIP-890: ``self.guard`` to verify with (None: the transaction is open here)."""
        return ErrorCode.none, self.guard

    async def wait_for_acks_all(self, results: dict, timeout_ms: int) -> None:
        if self.on_acks is not None:
            self.on_acks()
        for result in results.values():
            if self.fail_acks_with != ErrorCode.none:
                result.error = self.fail_acks_with


def runtime() -> tuple[GroupCoordinator, ListReplicaManager]:
    config = KafkaConfig.from_properties({"zookeeper.connect": "zk"})
    rm = ListReplicaManager()
    return GroupCoordinator(config, rm, lambda: 1, clock=lambda: 1000), rm  # type: ignore[arg-type]


async def loaded(coordinator: GroupCoordinator) -> GroupShard:
    coordinator.on_partition_role(0, is_leader=True, leader_epoch=1)
    await asyncio.gather(*coordinator._tasks)
    shard = coordinator._shards[0]
    assert shard.state is ShardState.LOADED
    return shard


def value(offset: int) -> rec.OffsetCommitValue:
    return rec.OffsetCommitValue(offset, -1, "", 1000)


def batch(records, *, producer_id: int = -1, epoch: int = -1, attributes: int = 0) -> bytes:
    body = b"".join(encode_record(i, 0, k, v) for i, (k, v) in enumerate(records))
    return build_batch(
        base_offset=0,
        partition_leader_epoch=1,
        attributes=attributes,
        last_offset_delta=len(records) - 1,
        base_timestamp=0,
        max_timestamp=0,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=-1,
        record_count=len(records),
        records=body,
    )


def commit_batch(group: str, tp, offset: int, producer_id: int = -1) -> bytes:
    r = offset_commit_record(group, tp, value(offset))
    attributes = ATTR_TRANSACTIONAL if producer_id >= 0 else 0
    return batch([(r.key, r.value)], producer_id=producer_id, epoch=0, attributes=attributes)


def marker_batch(producer_id: int, commit: bool) -> bytes:
    kind = rec.CONTROL_TYPE_COMMIT if commit else rec.CONTROL_TYPE_ABORT
    key = struct.pack(">hh", 0, kind)
    marker = struct.pack(">hi", 0, 7)  # version, coordinator epoch
    return batch(
        [(key, marker)],
        producer_id=producer_id,
        epoch=0,
        attributes=ATTR_TRANSACTIONAL | ATTR_CONTROL,
    )


def test_control_record_keys() -> None:
    assert rec.end_transaction_marker(struct.pack(">hh", 0, 1)) is True
    assert rec.end_transaction_marker(struct.pack(">hh", 0, 0)) is False
    assert rec.end_transaction_marker(struct.pack(">hh", 0, 5)) is None
    assert rec.end_transaction_marker(b"\x00") is None
    assert rec.end_transaction_marker(None) is None


def test_txn_offset_commit_writes_a_transactional_batch_held_until_the_marker() -> None:
    async def scenario() -> None:
        coordinator, rm = runtime()
        shard = await loaded(coordinator)
        producer = TransactionalProducer(42, 3)
        error = await commit_transactional_offsets(
            coordinator, "g", producer, GroupFence(), [(TP0, value(10)), (TP1, value(11))]
        )
        assert error == ErrorCode.none
        [written] = rm.partition.batches
        [(_, header)] = list(iter_batches(written))
        assert header.is_transactional and not header.is_control
        assert (header.producer_id, header.producer_epoch) == (42, 3)
        assert header.base_sequence == -1
        keys = [rec.decode_offset_commit_key(r.key) for r in iter_records(written, header)]
        assert keys == [rec.OffsetCommitKey("g", "t", 0), rec.OffsetCommitKey("g", "t", 1)]
        assert shard.offsets.get("g", TP0) is None  # not visible yet
        assert shard.offsets.has_pending("g", TP0) and shard.offsets.has_pending("g", TP1)

        coordinator.on_transaction_marker(0, 42, commit=True)
        assert shard.offsets.get("g", TP0).offset == 10
        assert shard.offsets.get("g", TP1).offset == 11
        assert not shard.offsets.has_open_transactions("g")

        await commit_transactional_offsets(
            coordinator, "g", producer, GroupFence(), [(TP0, value(20))]
        )
        coordinator.on_transaction_marker(0, 42, commit=False)
        assert shard.offsets.get("g", TP0).offset == 10  # aborted: the old offset stays
        assert not shard.offsets.has_pending("g", TP0)

    asyncio.run(scenario())


def test_a_marker_during_the_wait_for_acks_finds_the_pending_commit() -> None:
    """The marker follows the batch in the log, and may be acknowledged before the
    batch's own acks=all wait resumes: the pending entry is there from the append on."""

    async def scenario() -> None:
        coordinator, rm = runtime()
        shard = await loaded(coordinator)
        rm.on_acks = lambda: coordinator.on_transaction_marker(0, 42, commit=True)
        error = await commit_transactional_offsets(
            coordinator, "g", TransactionalProducer(42, 0), GroupFence(), [(TP0, value(10))]
        )
        assert error == ErrorCode.none
        assert shard.offsets.get("g", TP0).offset == 10

    asyncio.run(scenario())


def test_a_failed_write_leaves_nothing_pending() -> None:
    async def scenario() -> None:
        coordinator, rm = runtime()
        shard = await loaded(coordinator)
        rm.fail_acks_with = ErrorCode.not_enough_replicas_after_append
        error = await commit_transactional_offsets(
            coordinator, "g", TransactionalProducer(42, 0), GroupFence(), [(TP0, value(10))]
        )
        assert error == ErrorCode.coordinator_not_available
        assert not shard.offsets.has_pending("g", TP0)
        assert not shard.offsets.has_open_transactions("g")

    asyncio.run(scenario())


def test_fencing_errors_write_nothing() -> None:
    async def scenario() -> None:
        coordinator, rm = runtime()
        shard = await loaded(coordinator)
        shard.groups["g"] = classic_group()
        error = await commit_transactional_offsets(
            coordinator, "g", TransactionalProducer(42, 0), GroupFence(0, "m2"), [(TP0, value(1))]
        )
        assert error == ErrorCode.illegal_generation
        error = await commit_transactional_offsets(
            coordinator, "g", TransactionalProducer(-1, -1), GroupFence(), [(TP0, value(1))]
        )
        assert error == ErrorCode.invalid_producer_id_mapping
        assert rm.partition.batches == []
        assert not shard.offsets.has_open_transactions("g")

    asyncio.run(scenario())


def test_markers_for_other_partitions_and_unloaded_shards_are_ignored() -> None:
    async def scenario() -> None:
        coordinator, _ = runtime()
        coordinator.on_transaction_marker(5, 42, commit=True)  # not led here
        shard = await loaded(coordinator)
        shard.offsets.put_pending(42, "g", TP0, at(1, 0))
        coordinator.on_partition_role(0, is_leader=False, leader_epoch=2)
        assert not shard.active
        coordinator.on_transaction_marker(0, 42, commit=True)
        assert not shard.offsets.has_open_transactions("g")  # unloading dropped it
        assert shard.offsets.get("g", TP0) is None

    asyncio.run(scenario())


def test_loading_keeps_undecided_commits_pending_and_applies_the_markers() -> None:
    async def scenario() -> None:
        coordinator, rm = runtime()
        log = rm.partition
        log.append(commit_batch("g", TP0, 5, producer_id=7))  # committed below
        log.append(commit_batch("g", TP1, 3))  # a plain commit
        log.append(marker_batch(7, commit=True))
        log.append(commit_batch("g", TP1, 9, producer_id=9))  # aborted below
        log.append(commit_batch("g", TP0, 8, producer_id=8))  # still open at the end
        log.append(marker_batch(9, commit=False))
        log.append(commit_batch("h", TP0, 4, producer_id=10))  # deleted by a tombstone
        tomb = offset_tombstone("h", TP0)
        log.append(batch([(tomb.key, tomb.value)]))
        log.append(marker_batch(10, commit=True))
        shard = await loaded(coordinator)
        assert shard.offsets.get("g", TP0).offset == 5
        assert shard.offsets.get("g", TP1).offset == 3  # the aborted 9 never appears
        assert shard.offsets.has_pending("g", TP0) and not shard.offsets.has_pending("g", TP1)
        assert shard.offsets.open_producer_ids() == {8}
        assert shard.offsets.get("h", TP0) is None and not shard.offsets.has_pending("h", TP0)
        # the open transaction's marker, written after the load, decides it
        coordinator.on_transaction_marker(0, 8, commit=True)
        assert shard.offsets.get("g", TP0).offset == 8

    asyncio.run(scenario())


def test_a_marker_acknowledged_while_loading_is_read_by_the_load() -> None:
    """``on_transaction_marker`` ignores a loading shard; the load reads to the high
    watermark it finds at its end, so the marker is applied all the same."""

    async def scenario() -> None:
        coordinator, rm = runtime()
        log = rm.partition
        log.append(commit_batch("g", TP0, 5, producer_id=7))
        coordinator.on_partition_role(0, is_leader=True, leader_epoch=1)
        shard = coordinator._shards[0]
        assert shard.state is ShardState.LOADING
        log.append(marker_batch(7, commit=True))
        coordinator.on_transaction_marker(0, 7, commit=True)  # ignored: still loading
        await asyncio.gather(*coordinator._tasks)
        assert shard.state is ShardState.LOADED
        assert shard.offsets.get("g", TP0).offset == 5
        assert shard.offsets.open_producer_ids() == set()

    asyncio.run(scenario())


def test_expiry_keeps_groups_with_open_transactions() -> None:
    async def scenario() -> None:
        now = [0]
        config = KafkaConfig.from_properties(
            {"zookeeper.connect": "zk", "offsets.retention.minutes": "1"}
        )
        rm = ListReplicaManager()
        coordinator = GroupCoordinator(config, rm, lambda: 1, clock=lambda: now[0])  # type: ignore[arg-type]
        shard = await loaded(coordinator)
        group = ClassicGroup("g")
        group.transition_to(GroupState.PREPARING_REBALANCE, 0)
        group.transition_to(GroupState.EMPTY, 0)
        shard.groups["g"] = group
        shard.offsets.put("g", TP0, CommittedOffset(1, -1, "", 0, -1, 0))
        shard.offsets.put_pending(7, "g", TP1, at(2, record_offset=1))
        now[0] = 10 * 60_000
        assert await coordinator.expire_offsets() == 1
        assert shard.offsets.get("g", TP0) is None
        assert "g" in shard.groups  # an open transaction keeps the group
        assert shard.offsets.has_pending("g", TP1)
        coordinator.on_transaction_marker(0, 7, commit=True)
        assert shard.offsets.get("g", TP1).offset == 2

    asyncio.run(scenario())


# -- the handler's checks, in Kafka's order ------------------------------------------------


class Grants:
    """The authorizer's answer for this test: the grants listed, nothing else."""

    def __init__(self, *grants: tuple[AclOperation, ResourceType, str]) -> None:
        self.grants = set(grants)

    def allowed(self, ctx, operation, resource_type, name) -> bool:
        return (operation, resource_type, name) in self.grants


class Topics:
    def partition(self, topic: str, partition: int):
        return object() if topic in ("t", "secret") and partition < 2 else None


class Verifier:
    """The transaction coordinator's answer to KIP-890's verification, and who asked."""

    def __init__(self, answer: ErrorCode) -> None:
        self.answer = answer
        self.asked: list[tuple] = []

    async def verify(self, transactional_id, producer_id, producer_epoch, partitions):
        self.asked.append((transactional_id, producer_id, producer_epoch, tuple(partitions)))
        return dict.fromkeys(partitions, self.answer)


def handle(
    coordinator: GroupCoordinator, grants: Grants, request, verifier: Verifier | None = None
) -> dict:
    services = SimpleNamespace(
        config=coordinator.config,
        group_coordinator=coordinator,
        metadata_cache=Topics(),
        allowed=grants.allowed,
        replica_manager=coordinator.replica_manager,
        transaction_verifier=verifier,
    )
    ctx = SimpleNamespace(api_version=int(type(request).__version__))
    response = asyncio.run(handle_txn_offset_commit(services, ctx, request))  # type: ignore[arg-type]
    return {
        (str(t.name), int(p.partition_index)): p.error_code
        for t in response.topics
        for p in t.partitions
    }


def txn_request(group: str = "g", topics=(("t", (0,)), ("secret", (0,)), ("t", (5,)))):
    return txn_v3.TxnOffsetCommitRequest(
        transactional_id="tx",
        group_id=group,
        producer_id=42,
        producer_epoch=0,
        topics=tuple(
            txn_v3.TxnOffsetCommitRequestTopic(
                name=name,
                partitions=tuple(
                    txn_v3.TxnOffsetCommitRequestPartition(
                        partition_index=p, committed_offset=1, committed_metadata=""
                    )
                    for p in parts
                ),
            )
            for name, parts in topics
        ),
    )


ALL = (
    (AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, "tx"),
    (AclOperation.READ, ResourceType.GROUP, "g"),
    (AclOperation.READ, ResourceType.TOPIC, "t"),
)


def test_handler_authorizes_transactional_id_then_group_then_topics() -> None:
    coordinator, rm = runtime()
    coordinator._shards[0] = shard = GroupShard(coordinator, 0, 1)
    shard.state = ShardState.LOADED
    every = {("t", 0), ("secret", 0), ("t", 5)}
    answer = handle(coordinator, Grants(*ALL[1:]), txn_request())
    assert answer == dict.fromkeys(every, ErrorCode.transactional_id_authorization_failed)
    answer = handle(coordinator, Grants(ALL[0], ALL[2]), txn_request())
    assert answer == dict.fromkeys(every, ErrorCode.group_authorization_failed)
    assert rm.partition.batches == []
    answer = handle(coordinator, Grants(*ALL), txn_request())
    assert answer[("secret", 0)] == ErrorCode.topic_authorization_failed
    assert answer[("t", 5)] == ErrorCode.unknown_topic_or_partition
    assert answer[("t", 0)] == ErrorCode.none
    [written] = rm.partition.batches  # only the authorized, existing partition
    [(_, header)] = list(iter_batches(written))
    keys = [rec.decode_offset_commit_key(r.key) for r in iter_records(written, header)]
    assert keys == [rec.OffsetCommitKey("g", "t", 0)]
    assert shard.offsets.has_pending("g", ("t", 0))


def test_handler_answers_coordinator_errors_for_every_partition() -> None:
    coordinator, _ = runtime()  # no shard loaded: not the coordinator
    grants = Grants(*ALL, (AclOperation.READ, ResourceType.GROUP, ""))
    answer = handle(coordinator, grants, txn_request(topics=(("t", (0, 1)),)))
    assert answer == {("t", 0): ErrorCode.not_coordinator, ("t", 1): ErrorCode.not_coordinator}
    answer = handle(coordinator, grants, txn_request(group="", topics=(("t", (0,)),)))
    assert answer == {("t", 0): ErrorCode.invalid_group_id}


# -- OffsetFetch require_stable, DeleteGroups and OffsetDelete with pending commits ---------


def group_requests(coordinator: GroupCoordinator) -> GroupCoordinatorRequests:
    services = SimpleNamespace(
        config=coordinator.config,
        group_coordinator=coordinator,
        metadata_cache=Topics(),
        allowed=lambda *args: True,
        authorizer=None,
    )
    return GroupCoordinatorRequests(services)  # type: ignore[arg-type]


def fetch(coordinator: GroupCoordinator, require_stable: bool, partitions=(0, 1)) -> dict:
    request = fetch_v7.OffsetFetchRequest(
        group_id="g",
        topics=(fetch_v7.OffsetFetchRequestTopic(name="t", partition_indexes=partitions),),
        require_stable=require_stable,
    )
    ctx = SimpleNamespace(api_version=7)
    response = asyncio.run(group_requests(coordinator).handle_offset_fetch(ctx, request))  # type: ignore[arg-type]
    assert response.error_code == ErrorCode.none
    [topic] = response.topics
    return {
        int(p.partition_index): (int(p.committed_offset), p.error_code) for p in topic.partitions
    }


def test_offset_fetch_require_stable() -> None:
    coordinator, _ = runtime()
    coordinator._shards[0] = shard = GroupShard(coordinator, 0, 1)
    shard.state = ShardState.LOADED
    shard.offsets.put("g", TP0, at(3, record_offset=0))
    shard.offsets.put("g", TP1, at(4, record_offset=1))
    shard.offsets.put_pending(42, "g", TP0, at(10, record_offset=2))
    assert fetch(coordinator, require_stable=False) == {
        0: (3, ErrorCode.none),
        1: (4, ErrorCode.none),
    }
    assert fetch(coordinator, require_stable=True) == {
        0: (-1, ErrorCode.unstable_offset_commit),
        1: (4, ErrorCode.none),
    }
    coordinator.on_transaction_marker(0, 42, commit=True)
    assert fetch(coordinator, require_stable=True) == {
        0: (10, ErrorCode.none),
        1: (4, ErrorCode.none),
    }


def test_deleting_a_group_deletes_its_pending_commits() -> None:
    """Kafka's ``deleteAllOffsets``: a group known only by a pending commit can be
    deleted, and a later COMMIT does not bring its offsets back."""

    async def scenario() -> None:
        coordinator, rm = runtime()
        shard = await loaded(coordinator)
        await commit_transactional_offsets(
            coordinator, "g", TransactionalProducer(42, 0), GroupFence(), [(TP0, value(10))]
        )
        assert await group_requests(coordinator)._delete_group("g") == ErrorCode.none
        tombstone = rm.partition.batches[-1]
        [(_, header)] = list(iter_batches(tombstone))
        [record] = list(iter_records(tombstone, header))
        assert record.value is None
        assert rec.decode_offset_commit_key(record.key) == rec.OffsetCommitKey("g", "t", 0)
        coordinator.on_transaction_marker(0, 42, commit=True)
        assert shard.offsets.get("g", TP0) is None
        assert await group_requests(coordinator)._delete_group("g") == (
            ErrorCode.group_id_not_found
        )

    asyncio.run(scenario())


def test_handler_metadata_too_large_after_the_group_check() -> None:
    coordinator, rm = runtime()
    coordinator._shards[0] = shard = GroupShard(coordinator, 0, 1)
    shard.state = ShardState.LOADED
    big = "x" * (coordinator.config.offset_metadata_max_bytes + 1)

    def request(generation: int, member: str):
        return txn_v3.TxnOffsetCommitRequest(
            transactional_id="tx",
            group_id="g",
            producer_id=42,
            producer_epoch=0,
            generation_id=generation,
            member_id=member,
            topics=(
                txn_v3.TxnOffsetCommitRequestTopic(
                    name="t",
                    partitions=(
                        txn_v3.TxnOffsetCommitRequestPartition(
                            partition_index=0, committed_offset=1, committed_metadata=big
                        ),
                        txn_v3.TxnOffsetCommitRequestPartition(
                            partition_index=1, committed_offset=1, committed_metadata="ok"
                        ),
                    ),
                ),
            ),
        )

    shard.groups["g"] = classic_group()
    answer = handle(coordinator, Grants(*ALL), request(7, "m2"))  # a fenced zombie
    assert answer == {TP0: ErrorCode.illegal_generation, TP1: ErrorCode.illegal_generation}
    assert rm.partition.batches == []
    answer = handle(coordinator, Grants(*ALL), request(1, "m2"))
    assert answer == {TP0: ErrorCode.offset_metadata_too_large, TP1: ErrorCode.none}
    assert not shard.offsets.has_pending("g", TP0) and shard.offsets.has_pending("g", TP1)


def test_handler_verifies_the_offsets_partition_before_opening_a_transaction_there() -> None:
    """KIP-890: a TxnOffsetCommit that would open the producer's transaction on the
    offsets partition is verified with the transaction coordinator first; a refusal is
    every partition's answer and nothing is written or pending (a late request after
    its transaction ended cannot open it again); once verified, the append carries the
    guard; with the transaction open there already, no one is asked."""
    coordinator, rm = runtime()
    coordinator._shards[0] = shard = GroupShard(coordinator, 0, 1)
    shard.state = ShardState.LOADED
    request = txn_request(topics=(("t", (0, 1)),))
    rm.guard = guard = object()
    refusing = Verifier(ErrorCode.invalid_txn_state)  # not in its ongoing transaction
    assert handle(coordinator, Grants(*ALL), request, refusing) == {
        ("t", 0): ErrorCode.invalid_txn_state,
        ("t", 1): ErrorCode.invalid_txn_state,
    }
    assert refusing.asked == [("tx", 42, 0, ((GROUP_METADATA_TOPIC_NAME, 0),))]
    assert rm.verified == [] and not shard.offsets.has_open_transactions("g")
    retriable = Verifier(ErrorCode.concurrent_transactions)
    answer = handle(coordinator, Grants(*ALL), request, retriable)
    assert set(answer.values()) == {ErrorCode.coordinator_not_available}  # clients retry
    assert handle(coordinator, Grants(*ALL), request, Verifier(ErrorCode.none)) == {
        ("t", 0): ErrorCode.none,
        ("t", 1): ErrorCode.none,
    }
    assert rm.verified == [(True, guard)]
    assert shard.offsets.has_pending("g", ("t", 0))
    rm.guard = None  # its transaction is open on the partition now
    unasked = Verifier(ErrorCode.invalid_txn_state)
    assert set(handle(coordinator, Grants(*ALL), request, unasked).values()) == {ErrorCode.none}
    assert unasked.asked == [] and rm.verified[-1] == (True, None)
