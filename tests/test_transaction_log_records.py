"""Pure parts of the transaction coordinator's log: the ``__transaction_state`` records,
byte for byte as Kafka writes them, and which partition holds a transactional id."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replog.coordinator.transaction import transaction_log as txlog
from replog.coordinator.transaction.transaction_topic import (
    TransactionConfig,
    partition_for,
    transaction_topic_configs,
)
from replog.protocol.wire import CodecError


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


# -- which partition --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("transactional_id", "partition"),
    [
        # String.hashCode and Utils.abs(h) % 50, printed by Java 17 (see the comment below).
        ("my-transactional-id", 46),  # hashCode -959806496
        ("txn-1", 10),  # 110810510
        ("spark-query-0", 41),  # 405517691
        ("polygenelubricants", 0),  # Integer.MIN_VALUE: Utils.abs gives 0, not MIN_VALUE
        ("\u00e9t\u00e9", 42),  # 227742
        ("\U0001f600-producer", 2),  # -174218052: a surrogate pair is two UTF-16 units
        ("transactional-id-42", 4),  # -1774587604
    ],
)
def test_partition_for_matches_java(transactional_id: str, partition: int) -> None:
    # Printed by: for (String s : ids) System.out.println(abs(s.hashCode()) % 50) with
    # abs(n) = n == Integer.MIN_VALUE ? 0 : Math.abs(n)  (Kafka Utils.abs).
    assert partition_for(transactional_id, 50) == partition


@given(st.text(max_size=40), st.integers(1, 200))
def test_partition_for_is_in_range(transactional_id: str, partitions: int) -> None:
    assert 0 <= partition_for(transactional_id, partitions) < partitions


def test_config_defaults_and_keys_are_kafkas() -> None:
    config = TransactionConfig()
    assert config.transaction_max_timeout_ms == 900_000
    assert config.transactional_id_expiration_ms == 604_800_000
    assert config.transaction_log_num_partitions == 50
    assert config.abort_timed_out_transactions_interval_ms == 10_000
    props = {"transaction.max.timeout.ms": "60000", "transaction.state.log.num.partitions": "3"}
    parsed = TransactionConfig.from_properties(props)
    assert (parsed.transaction_max_timeout_ms, parsed.transaction_log_num_partitions) == (60000, 3)
    assert parsed.valid_transaction_timeout(60000)
    assert not parsed.valid_transaction_timeout(60001)
    assert not parsed.valid_transaction_timeout(0)
    topic = transaction_topic_configs(config)
    assert topic["cleanup.policy"] == "compact"
    assert topic["unclean.leader.election.enable"] == "false"
    assert topic["min.insync.replicas"] == "2"


# -- keys -------------------------------------------------------------------------------


def test_key_bytes() -> None:
    assert txlog.encode_key("tx") == b"\x00\x00" + b"\x00\x02tx"
    assert txlog.decode_key(b"\x00\x00\x00\x02tx") == "tx"


def test_unknown_key_version_is_skipped_not_an_error() -> None:
    assert txlog.decode_key(b"\x00\x01\x00\x02tx") is None
    with pytest.raises(CodecError):
        txlog.decode_key(b"\x00")
    with pytest.raises(CodecError):
        txlog.decode_key(None)
    with pytest.raises(CodecError):
        txlog.decode_key(b"\x00\x00\x00\x05tx")


# -- values: bytes Kafka writes ------------------------------------------------------------

ONGOING = txlog.TransactionLogValue(
    producer_id=1000,
    producer_epoch=5,
    transaction_timeout_ms=60_000,
    transaction_status=1,
    transaction_partitions=(("a", (0, 2)), ("b", (1,))),
    transaction_last_update_timestamp_ms=1_700_000_000_123,
    transaction_start_timestamp_ms=1_700_000_000_000,
)

# TransactionLogValue v0 of ONGOING, from the schema: int16 version, ProducerId int64,
# ProducerEpoch int16, TransactionTimeoutMs int32, TransactionStatus int8, then the
# partitions as int32-count arrays of {int16-length Topic, int32-count PartitionIds},
# TransactionLastUpdateTimestampMs int64, TransactionStartTimestampMs int64.
ONGOING_V0 = (
    i16(0)
    + i64(1000)
    + i16(5)
    + i32(60_000)
    + b"\x01"
    + i32(2)
    + (i16(1) + b"a" + i32(2) + i32(0) + i32(2))
    + (i16(1) + b"b" + i32(1) + i32(1))
    + i64(1_700_000_000_123)
    + i64(1_700_000_000_000)
)

# The same as v1 (flexible): compact arrays and strings are length + 1 as an unsigned
# varint, every partitions entry ends with an empty tagged-field section (0x00), and the
# value ends with its own tagged fields, none here (all at their defaults).
ONGOING_V1 = (
    i16(1)
    + i64(1000)
    + i16(5)
    + i32(60_000)
    + b"\x01"
    + b"\x03"
    + (b"\x02a" + b"\x03" + i32(0) + i32(2) + b"\x00")
    + (b"\x02b" + b"\x02" + i32(1) + b"\x00")
    + i64(1_700_000_000_123)
    + i64(1_700_000_000_000)
    + b"\x00"
)


def test_value_v0_bytes() -> None:
    assert txlog.encode_value(ONGOING, txlog.VALUE_V0) == ONGOING_V0
    assert txlog.decode_value(ONGOING_V0) == ONGOING


def test_value_v1_bytes() -> None:
    assert txlog.encode_value(ONGOING, txlog.VALUE_V1) == ONGOING_V1
    assert txlog.decode_value(ONGOING_V1) == ONGOING
    assert ONGOING.topic_partitions() == {("a", 0), ("a", 2), ("b", 1)}


def test_value_v1_tagged_fields_bytes() -> None:
    value = txlog.TransactionLogValue(
        producer_id=7,
        producer_epoch=0,
        transaction_timeout_ms=1000,
        transaction_status=0,  # Empty: partitions written null
        transaction_partitions=None,
        transaction_last_update_timestamp_ms=5,
        transaction_start_timestamp_ms=-1,
        previous_producer_id=6,
        client_transaction_version=2,
    )
    expected = (
        i16(1)
        + i64(7)
        + i16(0)
        + i32(1000)
        + b"\x00"
        + b"\x00"  # null compact array
        + i64(5)
        + i64(-1)
        + b"\x02"  # two tagged fields, in tag order: 0 then 2 (1 is at its default)
        + b"\x00\x08"
        + i64(6)
        + b"\x02\x02"
        + i16(2)
    )
    assert txlog.encode_value(value, txlog.VALUE_V1) == expected
    assert txlog.decode_value(expected) == value


def test_value_v0_empty_partitions_are_null_and_tags_are_dropped() -> None:
    value = txlog.TransactionLogValue(7, 0, 1000, 0, None, 5, -1, previous_producer_id=6)
    encoded = txlog.encode_value(value, txlog.VALUE_V0)
    assert encoded == i16(0) + i64(7) + i16(0) + i32(1000) + b"\x00" + i32(-1) + i64(5) + i64(-1)
    decoded = txlog.decode_value(encoded)
    assert decoded is not None
    assert decoded.previous_producer_id == -1  # v0 has no place for it
    assert decoded.transaction_partitions is None


def test_an_unknown_tag_from_a_later_kafka_is_skipped() -> None:
    later = ONGOING_V1[:-1] + b"\x02" + b"\x01\x08" + i64(42) + b"\x05\x02" + i16(9)
    decoded = txlog.decode_value(later)
    assert decoded == txlog.TransactionLogValue(**{**ONGOING.__dict__, "next_producer_id": 42})


def test_empty_state_partitions_are_ignored_when_read() -> None:
    # A Kafka bug or an old writer could leave partitions on an Empty value: Kafka ignores them.
    value = txlog.TransactionLogValue(1, 0, 10, 0, (("t", (0,)),), 0, -1)
    with pytest.raises(ValueError):
        txlog.encode_value(value)
    raw = i16(0) + i64(1) + i16(0) + i32(10) + b"\x00" + i32(1) + i16(1) + b"t" + i32(1)
    raw += i32(0) + i64(0) + i64(-1)
    decoded = txlog.decode_value(raw)
    assert decoded is not None and decoded.topic_partitions() == frozenset()


def test_tombstone() -> None:
    assert txlog.decode_value(None) is None


@pytest.mark.parametrize(
    "raw",
    [
        i16(2) + ONGOING_V1[2:],  # unknown version
        ONGOING_V0[:-1],  # truncated
        ONGOING_V0 + b"\x00",  # trailing bytes
        ONGOING_V1[:-1] + b"\x01\x00\x09" + i64(1),  # tag 0 declaring 9 bytes for an int64
        i16(0) + i64(1) + i16(0) + i32(10) + b"\x01" + i32(1_000_000),  # array overruns
    ],
)
def test_bad_values_are_codec_errors(raw: bytes) -> None:
    with pytest.raises(CodecError):
        txlog.decode_value(raw)


# -- values: round trips ---------------------------------------------------------------------

_ids = st.integers(-1, 2**63 - 1)
_partitions = st.dictionaries(
    st.text(min_size=1, max_size=20),
    st.frozensets(st.integers(0, 2**31 - 1), min_size=1, max_size=5),
    max_size=4,
)


@st.composite
def values(draw: st.DrawFn, flexible: bool) -> txlog.TransactionLogValue:
    status = draw(st.integers(0, 7))
    parts = draw(_partitions)
    grouped = (
        None
        if status == 0
        else txlog.group_partitions((t, p) for t, ps in parts.items() for p in ps)
    )
    return txlog.TransactionLogValue(
        producer_id=draw(_ids),
        producer_epoch=draw(st.integers(-1, 32767)),
        transaction_timeout_ms=draw(st.integers(1, 2**31 - 1)),
        transaction_status=status,
        transaction_partitions=grouped,
        transaction_last_update_timestamp_ms=draw(st.integers(-1, 2**63 - 1)),
        transaction_start_timestamp_ms=draw(st.integers(-1, 2**63 - 1)),
        previous_producer_id=draw(_ids) if flexible else -1,
        next_producer_id=draw(_ids) if flexible else -1,
        client_transaction_version=draw(st.integers(0, 2)) if flexible else 0,
    )


@given(values(flexible=False))
def test_value_v0_round_trip(value: txlog.TransactionLogValue) -> None:
    assert txlog.decode_value(txlog.encode_value(value, txlog.VALUE_V0)) == value


@given(values(flexible=True))
def test_value_v1_round_trip(value: txlog.TransactionLogValue) -> None:
    assert txlog.decode_value(txlog.encode_value(value, txlog.VALUE_V1)) == value


@given(st.text(max_size=100))
def test_key_round_trip(transactional_id: str) -> None:
    assert txlog.decode_key(txlog.encode_key(transactional_id)) == transactional_id


@given(st.binary(max_size=80))
def test_garbage_never_escapes_as_anything_but_a_codec_error(raw: bytes) -> None:
    try:
        txlog.decode_value(raw)
    except CodecError:
        pass
