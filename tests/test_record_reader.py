"""storage.record_reader.iter_records: every field of every record, as encoded."""

from __future__ import annotations

import gzip

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replog.protocol.records import (
    COMPRESSION_GZIP,
    InvalidRecordBatch,
    build_batch,
    encode_record,
    read_header,
)
from replog.storage.record_reader import iter_records

RECORDS = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=20),
        st.none() | st.binary(max_size=50),
        st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2),
    ),
    min_size=1,
    max_size=10,
)


def _batch(records, base: int, compress: bool = False) -> bytes:
    body = b"".join(encode_record(i, i * 3, k, v, tuple(h)) for i, (k, v, h) in enumerate(records))
    return build_batch(
        base_offset=base,
        partition_leader_epoch=0,
        attributes=COMPRESSION_GZIP if compress else 0,
        last_offset_delta=len(records) - 1,
        base_timestamp=100,
        max_timestamp=100 + 3 * (len(records) - 1),
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        record_count=len(records),
        records=gzip.compress(body) if compress else body,
    )


@given(RECORDS, st.integers(0, 1000), st.booleans())
def test_iter_records_returns_what_was_encoded(records, base: int, compress: bool) -> None:
    batch = _batch(records, base, compress)
    got = list(iter_records(batch, read_header(batch)))
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in got] == [
        (base + i, 100 + 3 * i, k, v, [tuple(x) for x in h]) for i, (k, v, h) in enumerate(records)
    ]


def test_a_record_longer_than_its_batch_is_invalid() -> None:
    batch = _batch([(b"k", b"v" * 10, [])], 0)
    header = read_header(batch)
    # The batch claims 5 bytes less than it holds: the record runs past the batch's end.
    cut = header._replace(batch_length=header.batch_length - 5)
    with pytest.raises(InvalidRecordBatch):
        list(iter_records(batch, cut))
