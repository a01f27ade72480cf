"""The classic group protocol through real clients on a 3-broker cluster: members of one
group share the partitions, every record is consumed once, a member that leaves or dies
has its partitions reassigned, static members keep theirs across a restart, and clients
of different libraries share one group."""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

TOPIC = "members"
PARTITIONS = 6


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    from replog.cluster.launcher import LocalCluster

    c = LocalCluster(tmp_path_factory.mktemp("group-membership"))
    try:
        c.up(
            3,
            zookeeper=f"{zookeeper.connect}/replog-{uuid.uuid4().hex[:8]}",
            overrides={
                "offsets.topic.num.partitions": "6",
                "group.initial.rebalance.delay.ms": "0",
                "group.min.session.timeout.ms": "1000",
            },
        )
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers()})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
        yield c
    finally:
        c.down()


def produce(bootstrap: str, count: int, tag: str) -> set[str]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    values = {f"{tag}-{i}" for i in range(count)}
    for i, value in enumerate(sorted(values)):
        producer.produce(TOPIC, value=value.encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    return values


def consumer(bootstrap: str, group: str, **extra) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            **extra,
        }
    )


def drain(members: list[Consumer], wanted: set[str], timeout_s: float = 60) -> Counter[str]:
    """Poll every member in turn until ``wanted`` values were all seen."""
    seen: Counter[str] = Counter()
    deadline = time.monotonic() + timeout_s
    while not wanted <= set(seen) and time.monotonic() < deadline:
        for member in members:
            message = member.poll(0.05)
            if message is not None and message.error() is None:
                value = message.value().decode()
                if value in wanted:
                    seen[value] += 1
    return seen


def assigned(member: Consumer) -> set[int]:
    return {tp.partition for tp in member.assignment()}


def test_three_members_share_six_partitions_and_consume_each_record_once(cluster) -> None:
    group = f"g-{uuid.uuid4().hex[:6]}"
    bootstrap = cluster.bootstrap_servers()
    members = [consumer(bootstrap, group) for _ in range(3)]
    try:
        for m in members:
            m.subscribe([TOPIC])
        values = produce(bootstrap, 300, group)
        seen = drain(members, values)
        assert set(seen) == values
        assert max(seen.values()) == 1, "a record was consumed twice"
        owned = [assigned(m) for m in members]
        assert sorted(p for parts in owned for p in parts) == list(range(PARTITIONS))
        assert all(len(parts) == 2 for parts in owned)
    finally:
        for m in members:
            m.close()


def test_a_leaving_member_hands_its_partitions_over(cluster) -> None:
    group = f"g-{uuid.uuid4().hex[:6]}"
    bootstrap = cluster.bootstrap_servers()
    first, second = consumer(bootstrap, group), consumer(bootstrap, group)
    try:
        first.subscribe([TOPIC])
        second.subscribe([TOPIC])
        drain([first, second], produce(bootstrap, 60, f"{group}-a"))
        first.close()  # LeaveGroup; commits its offsets on the way out
        later = produce(bootstrap, 60, f"{group}-b")
        seen = drain([second], later)
        assert set(seen) == later
        assert assigned(second) == set(range(PARTITIONS))
    finally:
        second.close()


def test_a_static_member_keeps_its_assignment_across_a_restart(cluster) -> None:
    group = f"g-{uuid.uuid4().hex[:6]}"
    bootstrap = cluster.bootstrap_servers()
    static = {"group.instance.id": "instance-a", "session.timeout.ms": 10000}
    a = consumer(bootstrap, group, **static)
    b = consumer(bootstrap, group, **{"group.instance.id": "instance-b"})
    revoked: list[int] = []
    try:
        a.subscribe([TOPIC])
        b.subscribe([TOPIC], on_revoke=lambda _c, parts: revoked.append(len(parts)))
        drain([a, b], produce(bootstrap, 60, f"{group}-a"))
        before_a, before_b = assigned(a), assigned(b)
        assert before_a and before_b
        revoked.clear()
        a.close()  # a static member does not leave the group on close
        a = consumer(bootstrap, group, **static)
        a.subscribe([TOPIC])
        later = produce(bootstrap, 60, f"{group}-b")
        seen = drain([a, b], later)
        assert set(seen) == later
        assert assigned(a) == before_a
        assert assigned(b) == before_b
        assert not revoked, "the static member's return made the group rebalance"
    finally:
        a.close()
        b.close()


def test_kafkajs_consumes_in_a_group_and_resumes_after_its_commit(cluster) -> None:
    from kafkajs_util import kafkajs_group_consume

    group = f"js-{uuid.uuid4().hex[:6]}"
    topic = f"js-{uuid.uuid4().hex[:6]}"
    bootstrap = cluster.bootstrap_servers()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(20):
        producer.produce(topic, value=f"v{i}".encode())
    assert producer.flush(30) == 0
    first = kafkajs_group_consume(bootstrap, group, topic, 8)
    second = kafkajs_group_consume(bootstrap, group, topic, 12)
    assert first == [f"v{i}" for i in range(8)]
    assert second == [f"v{i}" for i in range(8, 20)]  # resumed at the commit


def test_kcat_balanced_consumer_reads_the_group(cluster) -> None:
    import shutil
    import subprocess

    from confluent_kafka import ConsumerGroupTopicPartitions

    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed: run `make test`")
    group = f"kcat-{uuid.uuid4().hex[:6]}"
    topic = group
    bootstrap = cluster.bootstrap_servers()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 3)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    values = {f"k{i}" for i in range(30)}
    for i, value in enumerate(sorted(values)):
        producer.produce(topic, value=value.encode(), partition=i % 2)
    assert producer.flush(30) == 0
    done = subprocess.run(
        [
            "kcat",
            "-b",
            bootstrap,
            "-G",
            group,
            "-o",
            "beginning",
            "-c",
            "30",
            "-f",
            "%s\n",
            "-q",
            topic,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == sorted(values)
    committed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[
        group
    ].result(30)
    assert sum(tp.offset for tp in committed.topic_partitions) == 30  # kcat committed all


def test_members_of_three_libraries_share_one_group(cluster) -> None:
    import asyncio
    import threading

    from aiokafka import AIOKafkaConsumer
    from kafka import KafkaConsumer

    group = f"mixed-{uuid.uuid4().hex[:6]}"
    bootstrap = cluster.bootstrap_servers()
    seen: Counter[str] = Counter()
    owners: dict[str, set[int]] = {}
    stop = threading.Event()
    lock = threading.Lock()

    def record(who: str, value: bytes, partition: int) -> None:
        with lock:
            seen[value.decode()] += 1

    def owns(who: str, partitions: set[int]) -> None:
        with lock:
            owners[who] = partitions

    def run_aiokafka() -> None:
        async def main() -> None:
            c = AIOKafkaConsumer(
                TOPIC,
                bootstrap_servers=bootstrap,
                group_id=group,
                auto_offset_reset="earliest",
                session_timeout_ms=6000,
                heartbeat_interval_ms=500,
            )
            await c.start()
            try:
                while not stop.is_set():
                    owns("aiokafka", {tp.partition for tp in c.assignment()})
                    batches = await c.getmany(timeout_ms=100)
                    for tp, messages in batches.items():
                        for m in messages:
                            record("aiokafka", m.value, tp.partition)
            finally:
                await c.stop()

        asyncio.run(main())

    def run_kafka_python() -> None:
        c = KafkaConsumer(
            TOPIC,
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
        )
        try:
            while not stop.is_set():
                owns("kafka-python", {tp.partition for tp in c.assignment()})
                for tp, messages in c.poll(timeout_ms=100).items():
                    for m in messages:
                        record("kafka-python", m.value, tp.partition)
        finally:
            c.close()

    threads = [threading.Thread(target=run_aiokafka), threading.Thread(target=run_kafka_python)]
    for t in threads:
        t.start()
    ck = consumer(bootstrap, group, **{"partition.assignment.strategy": "roundrobin,range"})
    try:
        ck.subscribe([TOPIC])
        deadline = time.monotonic() + 60
        values: set[str] = set()
        while time.monotonic() < deadline:
            message = ck.poll(0.1)
            if message is not None and message.error() is None:
                record("confluent-kafka", message.value(), message.partition())
            owns("confluent-kafka", assigned(ck))
            with lock:
                shares = sorted(p for parts in owners.values() for p in parts)
            if not values and len(owners) == 3 and shares == list(range(PARTITIONS)):
                # One generation: the three libraries own the six partitions between them.
                values = produce(bootstrap, 120, group)
            with lock:
                if values and values <= set(seen):
                    break
        with lock:
            mine = {v: n for v, n in seen.items() if v in values}
        assert values and set(mine) == values
        assert max(mine.values()) == 1, "a record was consumed twice"
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        ck.close()


def test_members_find_the_new_coordinator_after_a_kill(cluster) -> None:
    from confluent_kafka import TopicPartition

    from replog.common.topics import GROUP_METADATA_TOPIC_NAME
    from replog.coordinator.group.offsets_topic import partition_for

    group = f"g-{uuid.uuid4().hex[:6]}"
    bootstrap = cluster.bootstrap_servers()
    members = [consumer(bootstrap, group, **{"enable.auto.commit": False}) for _ in range(2)]
    seen: Counter[str] = Counter()

    def consume_and_commit(wanted: set[str], timeout_s: float = 90) -> None:
        deadline = time.monotonic() + timeout_s
        while not wanted <= set(seen) and time.monotonic() < deadline:
            for m in members:
                message = m.poll(0.05)
                if message is None or message.error() is not None:
                    continue
                seen[message.value().decode()] += 1
                tp = TopicPartition(message.topic(), message.partition(), message.offset() + 1)
                while True:  # commit each record before the next: none is read twice
                    try:
                        m.commit(offsets=[tp], asynchronous=False)
                        break
                    except Exception as exc:  # retriable while the coordinator moves
                        if time.monotonic() > deadline:
                            raise AssertionError(f"commit never succeeded: {exc}") from exc
                        time.sleep(0.1)

    victim = None
    try:
        for m in members:
            m.subscribe([TOPIC])
        first = produce(bootstrap, 60, f"{group}-a")
        consume_and_commit(first)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        meta = admin.list_topics(timeout=30).topics[GROUP_METADATA_TOPIC_NAME]
        victim = meta.partitions[partition_for(group, 6)].leader
        cluster.kill_broker(victim)
        survivors = cluster.bootstrap_servers([b for b in cluster.broker_ids if b != victim])
        second = produce(survivors, 60, f"{group}-b")
        consume_and_commit(second)
        assert first | second <= set(seen)
        twice = [v for v, n in seen.items() if n > 1]
        assert not twice, f"committed records read again: {twice[:5]}"
    finally:
        for m in members:
            m.close()
        if victim is not None:
            cluster.start_broker(victim)
            cluster.wait_full_isr(60)


def test_cooperative_sticky_join_does_not_stop_the_others(cluster) -> None:
    group = f"coop-{uuid.uuid4().hex[:6]}"
    bootstrap = cluster.bootstrap_servers()
    coop = {"partition.assignment.strategy": "cooperative-sticky"}
    revoked: list[int] = []
    a = consumer(bootstrap, group, **coop)
    b = consumer(bootstrap, group, **coop)
    try:
        a.subscribe([TOPIC], on_revoke=lambda _c, parts: revoked.append(len(parts)))
        drain([a], produce(bootstrap, 30, f"{group}-a"))
        assert assigned(a) == set(range(PARTITIONS))
        b.subscribe([TOPIC])
        seen = drain([a, b], produce(bootstrap, 60, f"{group}-b"))
        assert len(seen) == 60
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(assigned(b)) != PARTITIONS // 2:
            a.poll(0.05)
            b.poll(0.05)
        assert len(assigned(a)) == len(assigned(b)) == PARTITIONS // 2
        # Incremental: the first member gave up only the partitions that moved.
        assert revoked == [PARTITIONS // 2]
    finally:
        a.close()
        b.close()


MEMBER_PROCESS = """
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
              "session.timeout.ms": 3000, "heartbeat.interval.ms": 300})
c.subscribe([sys.argv[3]])
while True:
    c.poll(0.1)
"""


def test_a_killed_member_is_dropped_after_its_session_timeout(cluster) -> None:
    import subprocess
    import sys

    group = f"g-{uuid.uuid4().hex[:6]}"
    bootstrap = cluster.bootstrap_servers()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    process = subprocess.Popen([sys.executable, "-c", MEMBER_PROCESS, bootstrap, group, TOPIC])
    survivor = consumer(bootstrap, group, **{"session.timeout.ms": 3000})
    try:
        survivor.subscribe([TOPIC])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            survivor.poll(0.1)
            described = admin.describe_consumer_groups([group])[group].result(10)
            if len(described.members) == 2 and len(assigned(survivor)) == PARTITIONS // 2:
                break
        assert len(assigned(survivor)) == PARTITIONS // 2
        process.kill()  # no LeaveGroup: only the session timeout tells the coordinator
        process.wait(10)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and assigned(survivor) != set(range(PARTITIONS)):
            survivor.poll(0.1)
        assert assigned(survivor) == set(range(PARTITIONS))
        described = admin.describe_consumer_groups([group])[group].result(10)
        assert len(described.members) == 1
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        survivor.close()


def test_replog_groups_lists_describes_resets_and_deletes(cluster, capsys) -> None:
    from confluent_kafka import TopicPartition

    from replog.cli.main import main

    group = f"cli-{uuid.uuid4().hex[:6]}"
    bootstrap = cluster.bootstrap_servers()
    produce(bootstrap, 60, group)  # 10 more records per partition
    member = consumer(bootstrap, group, **{"enable.auto.commit": False})
    try:
        member.subscribe([TOPIC])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(assigned(member)) != PARTITIONS:
            member.poll(0.1)
        from group_util import commit

        commit(member, [TopicPartition(TOPIC, p, 1) for p in range(PARTITIONS)])
        assert main(["groups", "--bootstrap-server", bootstrap, "list"]) == 0
        assert group in capsys.readouterr().out.split()
        assert main(["groups", "--bootstrap-server", bootstrap, "describe", group]) == 0
        out = capsys.readouterr().out
        assert "Stable, 1 members" in out
        rows = [line.split() for line in out.splitlines() if line.startswith(group)]
        assert len(rows) == PARTITIONS
        for row in rows:  # GROUP TOPIC PARTITION CURRENT LOG-END LAG CONSUMER-ID HOST CLIENT
            assert row[3] == "1" and int(row[5]) == int(row[4]) - 1 and row[6] != "-"
        # A group with members cannot be reset.
        reset = ["groups", "--bootstrap-server", bootstrap, "reset-offsets", group]
        assert main([*reset, "--all-topics", "--to-earliest", "--execute"]) == 1
        assert "inactive" in capsys.readouterr().err
    finally:
        member.close()
    assert main([*reset, "--topic", f"{TOPIC}:0", "--to-offset", "3"]) == 0
    assert "dry run" in capsys.readouterr().out
    assert main([*reset, "--topic", f"{TOPIC}:0", "--to-offset", "3", "--execute"]) == 0
    capsys.readouterr()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    from confluent_kafka import ConsumerGroupTopicPartitions

    def committed() -> dict[int, int]:
        result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
        return {tp.partition: tp.offset for tp in result[group].result(30).topic_partitions}

    assert committed()[0] == 3
    assert main([*reset, "--all-topics", "--shift-by", "-100", "--execute"]) == 0
    assert set(committed().values()) == {0}  # clamped to the log start
    assert main(["groups", "--bootstrap-server", bootstrap, "delete", group]) == 0
    assert committed() == {}
    assert main(["groups", "--bootstrap-server", bootstrap, "delete", group]) == 1
    assert "GROUP_ID_NOT_FOUND" in capsys.readouterr().err


def test_admin_client_group_operations(cluster) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    group = f"admin-{uuid.uuid4().hex[:6]}"
    bootstrap = cluster.bootstrap_servers()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    member = consumer(bootstrap, group)
    try:
        member.subscribe([TOPIC])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(assigned(member)) != PARTITIONS:
            member.poll(0.1)
        listed = admin.list_consumer_groups().result(30)
        assert group in {g.group_id for g in listed.valid}
        described = admin.describe_consumer_groups([group])[group].result(30)
        assert described.state.name == "STABLE" and len(described.members) == 1
        [m] = described.members
        assert {tp.partition for tp in m.assignment.topic_partitions} == set(range(PARTITIONS))
        assert described.partition_assignor == "range"
    finally:
        member.close()
    offsets = [TopicPartition(TOPIC, p, 5) for p in range(2)]
    altered = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, offsets)])
    assert [tp.offset for tp in altered[group].result(30).topic_partitions] == [5, 5]
    fetched = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    got = {tp.partition: tp.offset for tp in fetched[group].result(30).topic_partitions}
    assert got[0] == got[1] == 5
    admin.delete_consumer_groups([group])[group].result(30)
    listed = admin.list_consumer_groups().result(30)
    assert group not in {g.group_id for g in listed.valid}


def test_bad_group_requests_get_kafkas_errors_and_touch_no_other_group(cluster) -> None:
    """Raw requests with bad input, while a healthy group keeps consuming."""
    import asyncio
    import datetime

    from kio.schema.heartbeat.v4.request import HeartbeatRequest
    from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
    from kio.schema.offset_commit.v8 import request as commit
    from kio.schema.sync_group.v5.request import SyncGroupRequest
    from kio.static.primitive import i32, i32Timedelta, i64

    from replog.common.topics import GROUP_METADATA_TOPIC_NAME
    from replog.coordinator.group.offsets_topic import partition_for
    from replog.protocol.client import KafkaConnection

    bootstrap = cluster.bootstrap_servers()
    healthy = f"healthy-{uuid.uuid4().hex[:6]}"
    member = consumer(bootstrap, healthy)
    member.subscribe([TOPIC])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(assigned(member)) != PARTITIONS:
        member.poll(0.1)
    ms = lambda n: i32Timedelta.parse(datetime.timedelta(milliseconds=n))  # noqa: E731
    bad = f"bad-{uuid.uuid4().hex[:6]}"
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30)
    leader = meta.topics[GROUP_METADATA_TOPIC_NAME].partitions[partition_for(bad, 6)].leader
    # A group without members, coordinated by the same broker.
    simple = next(
        f"{bad}-{i}" for i in range(1000) if partition_for(f"{bad}-{i}", 6) == partition_for(bad, 6)
    )

    def join(group: str, session_ms: int, member_id: str = "", protocol: str = "consumer"):
        return JoinGroupRequest(
            group_id=group,
            session_timeout=ms(session_ms),
            rebalance_timeout=ms(10000),
            member_id=member_id,
            group_instance_id=None,
            protocol_type=protocol,
            protocols=(JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01"),),
            reason=None,
        )

    async def ask():
        conn = KafkaConnection("127.0.0.1", cluster.port(leader))
        await conn.connect()
        try:
            out = {}
            out["empty id"] = (await conn.request(join("", 10000))).error_code
            out["session"] = (await conn.request(join(bad, 10))).error_code
            out["unknown member"] = (await conn.request(join(bad, 10000, "nobody"))).error_code
            required = await conn.request(join(bad, 10000))
            out["first join"] = required.error_code
            joined = await conn.request(join(bad, 10000, required.member_id))
            out["second join"] = joined.error_code
            out["other protocol"] = (await conn.request(join(bad, 10000, "", "connect"))).error_code
            out["generation"] = (
                await conn.request(
                    HeartbeatRequest(
                        group_id=bad,
                        generation_id=i32(joined.generation_id + 5),
                        member_id=joined.member_id,
                        group_instance_id=None,
                    )
                )
            ).error_code
            out["sync stranger"] = (
                await conn.request(
                    SyncGroupRequest(
                        group_id=bad,
                        generation_id=joined.generation_id,
                        member_id="stranger",
                        group_instance_id=None,
                        protocol_type="consumer",
                        protocol_name="range",
                        assignments=(),
                    )
                )
            ).error_code
            big = await conn.request(
                commit.OffsetCommitRequest(
                    group_id=simple,
                    generation_id_or_member_epoch=i32(-1),
                    member_id="",
                    group_instance_id=None,
                    topics=(
                        commit.OffsetCommitRequestTopic(
                            name=TOPIC,
                            partitions=(
                                commit.OffsetCommitRequestPartition(
                                    partition_index=i32(0),
                                    committed_offset=i64(1),
                                    committed_leader_epoch=i32(-1),
                                    committed_metadata="x" * 5000,
                                ),
                            ),
                        ),
                    ),
                )
            )
            out["metadata"] = big.topics[0].partitions[0].error_code
            huge = await conn.request(
                commit.OffsetCommitRequest(
                    group_id="g" * 40000,  # longer than a record key's string can hold
                    generation_id_or_member_epoch=i32(-1),
                    member_id="",
                    group_instance_id=None,
                    topics=(
                        commit.OffsetCommitRequestTopic(
                            name=TOPIC,
                            partitions=(
                                commit.OffsetCommitRequestPartition(
                                    partition_index=i32(0),
                                    committed_offset=i64(1),
                                    committed_leader_epoch=i32(-1),
                                    committed_metadata="",
                                ),
                            ),
                        ),
                    ),
                )
            )
            out["huge group id"] = huge.topics[0].partitions[0].error_code
            return out
        finally:
            await conn.close()

    try:
        errors = asyncio.run(ask())
        assert errors["empty id"] == ErrorCode.invalid_group_id
        assert errors["session"] == ErrorCode.invalid_session_timeout
        assert errors["unknown member"] == ErrorCode.unknown_member_id
        assert errors["first join"] == ErrorCode.member_id_required
        assert errors["second join"] == ErrorCode.none
        assert errors["other protocol"] == ErrorCode.inconsistent_group_protocol
        assert errors["generation"] == ErrorCode.illegal_generation
        assert errors["sync stranger"] == ErrorCode.unknown_member_id
        assert errors["metadata"] == ErrorCode.offset_metadata_too_large
        assert errors["huge group id"] == ErrorCode.invalid_group_id
        # The healthy group did not notice.
        values = produce(bootstrap, 30, healthy)
        assert set(drain([member], values)) == values
        assert assigned(member) == set(range(PARTITIONS))
    finally:
        member.close()
