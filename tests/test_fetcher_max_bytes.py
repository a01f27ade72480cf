"""A follower of thousands of partitions of one leader can still encode its fetch: the
whole request's max_bytes stays within its int32 field."""

from __future__ import annotations

import uuid

import pytest

from replog.protocol import fetch_codec
from replog.replication.fetcher import MAX_INT32, fetch_response_max_bytes
from replog.replication.leader_endpoint import FETCH_VERSION, FETCH_VERSION_BY_NAME

MIB = 1024 * 1024


def test_within_int32() -> None:
    assert fetch_response_max_bytes(MIB, 0) == MIB
    assert fetch_response_max_bytes(MIB, 3) == 3 * MIB
    assert fetch_response_max_bytes(MIB, 2047) == 2047 * MIB
    assert fetch_response_max_bytes(MIB, 2048) == MAX_INT32
    assert fetch_response_max_bytes(MIB, 3334) == MAX_INT32


@pytest.mark.parametrize("version", [FETCH_VERSION, FETCH_VERSION_BY_NAME])
def test_a_fetch_of_3334_partitions_encodes(version: int) -> None:
    """At the follower's version (topics by id) and its fallback (by name)."""
    ids = [uuid.uuid4() for _ in range(10)]
    partitions = [
        fetch_codec.FetchRequestPartitionData(
            topic=f"t{p % 10}",
            partition=p,
            current_leader_epoch=1,
            fetch_offset=0,
            log_start_offset=0,
            partition_max_bytes=MIB,
            topic_id=ids[p % 10] if version >= fetch_codec.FIRST_TOPIC_ID else None,
        )
        for p in range(3334)
    ]
    body = fetch_codec.encode_fetch_request(
        version,
        replica_id=1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=fetch_response_max_bytes(MIB, len(partitions)),
        isolation_level=0,
        partitions=partitions,
    )
    assert len(body) > 3334 * 20
