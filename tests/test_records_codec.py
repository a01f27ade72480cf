"""Property tests for the magic-v2 record batch header codec (protocol/records.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replog.protocol.records import (
    ATTR_TIMESTAMP_TYPE,
    CRC_START,
    HEADER_SIZE,
    CorruptRecordBatch,
    InvalidRecordBatch,
    build_batch,
    iter_batches,
    peek_size,
    read_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    simple_batch,
    verify_crc,
)

INT64 = st.integers(-(2**63), 2**63 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)

batch_fields = st.fixed_dictionaries(
    {
        "base_offset": st.integers(0, 2**62),
        "partition_leader_epoch": INT32,
        "attributes": st.integers(0, 0x3F),
        "last_offset_delta": st.integers(0, 2**31 - 1),
        "base_timestamp": INT64,
        "max_timestamp": INT64,
        "producer_id": INT64,
        "producer_epoch": st.integers(-(2**15), 2**15 - 1),
        "base_sequence": INT32,
        "record_count": st.integers(0, 2**31 - 1),
        "records": st.binary(max_size=300),
    }
)


@given(batch_fields)
def test_build_then_read_header_round_trips(fields: dict) -> None:
    raw = build_batch(**fields)
    header = read_header(raw)
    for name, value in fields.items():
        if name != "records":
            assert getattr(header, name) == value, name
    assert header.size == len(raw) == HEADER_SIZE + len(fields["records"])
    assert peek_size(raw, 0) == len(raw)
    assert raw[HEADER_SIZE:] == fields["records"]
    verify_crc(raw, 0, header)


@settings(max_examples=200)
@given(batch_fields, st.data())
def test_any_single_byte_flip_in_crc_range_is_detected(fields: dict, data: st.DataObject) -> None:
    raw = bytearray(build_batch(**fields))
    header = read_header(raw)  # the flip may also make the header unreadable: check the CRC
    position = data.draw(st.integers(CRC_START, len(raw) - 1), label="position")
    flip = data.draw(st.integers(1, 255), label="xor")
    raw[position] ^= flip
    with pytest.raises(CorruptRecordBatch):
        verify_crc(raw, 0, header)
    with pytest.raises(InvalidRecordBatch):  # and the batch walker never accepts it
        list(iter_batches(raw))


@given(batch_fields, st.integers(0, 2**62), INT32)
def test_patching_offset_and_epoch_keeps_crc_valid(fields: dict, offset: int, epoch: int) -> None:
    raw = bytearray(build_batch(**fields))
    set_base_offset(raw, 0, offset)
    set_partition_leader_epoch(raw, 0, epoch)
    header = read_header(raw)
    assert (header.base_offset, header.partition_leader_epoch) == (offset, epoch)
    assert header.last_offset == offset + fields["last_offset_delta"]
    verify_crc(raw, 0, header)


@given(batch_fields, INT64)
def test_log_append_time_restamps_crc(fields: dict, now: int) -> None:
    raw = bytearray(build_batch(**fields))
    set_log_append_time(raw, 0, len(raw), now)
    header = read_header(raw)
    assert header.max_timestamp == now
    assert header.attributes & ATTR_TIMESTAMP_TYPE
    assert header.base_timestamp == fields["base_timestamp"]
    verify_crc(raw, 0, header)


@given(st.lists(st.lists(st.binary(max_size=20), min_size=1, max_size=4), min_size=1, max_size=6))
def test_iter_batches_walks_concatenated_batches(values: list[list[bytes]]) -> None:
    batches = [simple_batch(v, base_offset=i * 10) for i, v in enumerate(values)]
    buf = b"".join(batches)
    found = list(iter_batches(buf))
    assert [pos for pos, _ in found] == [sum(map(len, batches[:i])) for i in range(len(batches))]
    assert [h.record_count for _, h in found] == [len(v) for v in values]
    # any truncation inside the last batch is reported, never silently accepted
    with pytest.raises(InvalidRecordBatch):
        list(iter_batches(buf[:-1]))


def test_read_header_rejects_wrong_magic_and_short_input() -> None:
    raw = bytearray(simple_batch([b"x"]))
    with pytest.raises(InvalidRecordBatch):
        read_header(raw[: HEADER_SIZE - 1])
    raw[16] = 1
    with pytest.raises(InvalidRecordBatch):
        read_header(raw)
