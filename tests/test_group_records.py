"""Pure parts of the group coordinator: where a group lives, the offset commit records,
and the committed-offsets store."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replog.coordinator.group import records as rec
from replog.coordinator.group.offsets import CommittedOffset, OffsetStore
from replog.coordinator.group.offsets_topic import java_string_hash, kafka_abs, partition_for
from replog.protocol.wire import CodecError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("hello", 99162322),
        ("polygenelubricants", -(1 << 31)),  # Java's famous Integer.MIN_VALUE hash
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # a surrogate pair: two UTF-16 units
        ("my-group", -1_906_497_762),  # values from Java 17 jshell
        ("console-consumer-12345", 158_455_506),
    ],
)
def test_java_string_hash(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def test_partition_for_follows_kafka_abs() -> None:
    assert kafka_abs(-(1 << 31)) == 0
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50


@given(st.text(max_size=40), st.integers(1, 200))
def test_partition_for_is_in_range(group: str, partitions: int) -> None:
    assert 0 <= partition_for(group, partitions) < partitions


TEXT = st.text(max_size=30)
INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)


@given(TEXT, TEXT, INT32)
def test_offset_commit_key_round_trips(group: str, topic: str, partition: int) -> None:
    key = rec.OffsetCommitKey(group, topic, partition)
    data = rec.encode_offset_commit_key(key)
    assert rec.key_version(data) == rec.OFFSET_COMMIT_KEY
    assert rec.decode_offset_commit_key(data) == key


@given(INT64, INT32, TEXT, INT64, st.one_of(st.just(-1), st.integers(0, 1 << 62)))
def test_offset_commit_value_round_trips(offset, epoch, metadata, ts, expire) -> None:
    value = rec.OffsetCommitValue(offset, epoch, metadata, ts, expire)
    decoded = rec.decode_offset_commit_value(rec.encode_offset_commit_value(value))
    if expire == -1:
        assert decoded == value  # v3 keeps the leader epoch
    else:
        assert decoded == rec.OffsetCommitValue(offset, -1, metadata, ts, expire)  # v1


def test_offset_commit_value_v4_is_flexible() -> None:
    # v4: offset, leader epoch, compact string, commit timestamp, an unknown tagged field.
    data = (
        (4).to_bytes(2, "big")
        + (7).to_bytes(8, "big")
        + (3).to_bytes(4, "big")
        + bytes([3])
        + b"hi"
        + (99).to_bytes(8, "big")
        + bytes([1, 5, 2])
        + b"xy"
    )
    assert rec.decode_offset_commit_value(data) == rec.OffsetCommitValue(7, 3, "hi", 99, -1)


def test_group_metadata_key_round_trips() -> None:
    data = rec.encode_group_metadata_key("g1")
    assert rec.key_version(data) == rec.GROUP_METADATA_KEY
    assert rec.decode_group_metadata_key(data) == "g1"


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x01\x00\x05ab", b"\x00\x09" + b"\x00" * 20])
def test_bad_records_raise_codec_errors(data: bytes) -> None:
    with pytest.raises(CodecError):
        if len(data) < 2:
            rec.key_version(data)
        elif data[:2] == b"\x00\x09":
            rec.decode_offset_commit_value(data)
        else:
            rec.decode_offset_commit_key(data)


def _committed(offset: int, record_offset: int, ts: int = 0, expire: int = -1) -> CommittedOffset:
    return CommittedOffset(offset, -1, "", ts, expire, record_offset)


def test_a_later_record_wins_whatever_order_writes_complete_in() -> None:
    store = OffsetStore()
    store.put("g", ("t", 0), _committed(20, record_offset=11))
    store.put("g", ("t", 0), _committed(10, record_offset=10))  # acknowledged second
    assert store.get("g", ("t", 0)).offset == 20
    store.remove("g", ("t", 0), record_offset=9)  # an older tombstone
    assert store.get("g", ("t", 0)).offset == 20
    store.remove("g", ("t", 0), record_offset=12)
    assert store.get("g", ("t", 0)) is None
    assert store.groups() == []


def test_expiry_counts_from_emptiness_or_from_each_commit() -> None:
    store = OffsetStore()
    store.put("g", ("t", 0), _committed(1, 0, ts=1_000))
    store.put("g", ("t", 1), _committed(1, 1, ts=5_000))
    store.put("g", ("t", 2), _committed(1, 2, ts=0, expire=2_000))
    # No group ever had members: each commit's own timestamp.
    assert sorted(store.expired("g", 6_000, 4_000, None)) == [("t", 0), ("t", 2)]
    # Empty since 3 000: nothing by retention before 7 000.
    assert store.expired("g", 6_000, 4_000, 3_000) == [("t", 2)]
    assert sorted(store.expired("g", 7_000, 4_000, 3_000)) == [("t", 0), ("t", 1), ("t", 2)]


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"group.consumer.session.timeout.ms": "1000"}, "group.consumer.session.timeout.ms"),
        ({"group.consumer.heartbeat.interval.ms": "60000"}, "group.consumer.heartbeat.interval.ms"),
        ({"group.min.session.timeout.ms": "9999999"}, "group.min.session.timeout.ms"),
        ({"group.coordinator.rebalance.protocols": "consumer"}, "group.coordinator.rebalance"),
        ({"offsets.topic.num.partitions": "0"}, "offsets.topic.num.partitions"),
    ],
)
def test_group_settings_out_of_range_stop_the_broker(overrides: dict, key: str) -> None:
    from replog.config import ConfigError, KafkaConfig

    KafkaConfig.from_properties({"zookeeper.connect": "zk"})  # the defaults are valid
    with pytest.raises(ConfigError, match=key):
        KafkaConfig.from_properties({"zookeeper.connect": "zk", **overrides})
