"""Replica placement (Kafka AdminUtils.assignReplicasToBrokers)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replog.controller.placement import (
    AdminOperationError,
    BrokerMetadata,
    InvalidPartitions,
    InvalidReplicationFactor,
    assign_replicas_to_brokers,
    rack_alternated_broker_list,
)


def plain(ids) -> list[BrokerMetadata]:
    return [BrokerMetadata(i) for i in ids]


@given(
    st.lists(st.integers(0, 50), min_size=1, max_size=12, unique=True),
    st.integers(1, 60),
    st.data(),
    st.integers(0, 2**32),
)
def test_rack_unaware_properties(ids, num_partitions, data, seed) -> None:
    rf = data.draw(st.integers(1, len(ids)))
    result = assign_replicas_to_brokers(plain(ids), num_partitions, rf, random.Random(seed))
    assert sorted(result) == list(range(num_partitions))
    for replicas in result.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf  # at most one replica per broker
        assert set(replicas) <= set(ids)
    # Leaders (first replicas) are spread evenly: round robin over the sorted brokers.
    leaders = Counter(r[0] for r in result.values())
    counts = [leaders.get(b, 0) for b in ids]
    assert max(counts) - min(counts) <= 1
    # Same seed, same result.
    assert assign_replicas_to_brokers(plain(ids), num_partitions, rf, random.Random(seed)) == result


def test_rack_unaware_matches_kafka_example() -> None:
    # Kafka AdminUtils doc example: 5 brokers, 10 partitions, rf 3, start index 0, shift 0.
    result = assign_replicas_to_brokers(
        plain(range(5)), 10, 3, random.Random(0), fixed_start_index=0
    )
    assert result == {
        0: (0, 1, 2),
        1: (1, 2, 3),
        2: (2, 3, 4),
        3: (3, 4, 0),
        4: (4, 0, 1),
        5: (0, 2, 3),
        6: (1, 3, 4),
        7: (2, 4, 0),
        8: (3, 0, 1),
        9: (4, 1, 2),
    }


def test_followers_of_every_broker_spread() -> None:
    result = assign_replicas_to_brokers(plain(range(6)), 600, 3, random.Random(7))
    replicas = Counter(b for r in result.values() for b in r)
    assert set(replicas.values()) == {300}


@given(
    st.integers(2, 5),
    st.integers(1, 4),
    st.integers(1, 50),
    st.data(),
    st.integers(0, 2**32),
)
def test_rack_aware_spreads_each_partition_across_racks(
    num_racks, per_rack, num_partitions, data, seed
) -> None:
    brokers = [
        BrokerMetadata(rack * 10 + i, f"rack-{rack}")
        for rack in range(num_racks)
        for i in range(per_rack)
    ]
    rf = data.draw(st.integers(1, len(brokers)))
    result = assign_replicas_to_brokers(brokers, num_partitions, rf, random.Random(seed))
    rack_of = {b.id: b.rack for b in brokers}
    for replicas in result.values():
        assert len(set(replicas)) == rf
        racks = [rack_of[r] for r in replicas]
        # Every rack gets a replica before any rack gets a second one.
        assert len(set(racks)) == min(rf, num_racks)
    assert assign_replicas_to_brokers(brokers, num_partitions, rf, random.Random(seed)) == result


def test_rack_alternated_list() -> None:
    rack_of = {0: "a", 1: "a", 2: "a", 3: "b", 4: "b", 5: "c"}
    assert rack_alternated_broker_list(rack_of) == [0, 3, 5, 1, 4, 2]


def test_rack_aware_leaders_alternate_racks() -> None:
    brokers = [BrokerMetadata(i, "ab"[i % 2]) for i in range(6)]
    result = assign_replicas_to_brokers(brokers, 6, 2, random.Random(1), fixed_start_index=0)
    racks = [brokers[result[p][0]].rack for p in range(6)]
    assert racks == ["a", "b", "a", "b", "a", "b"]


def test_errors() -> None:
    rng = random.Random(0)
    with pytest.raises(InvalidPartitions) as e:
        assign_replicas_to_brokers(plain([1, 2]), 0, 1, rng)
    assert e.value.error_code == 37
    with pytest.raises(InvalidReplicationFactor) as e2:
        assign_replicas_to_brokers(plain([1, 2]), 1, 0, rng)
    assert e2.value.error_code == 38
    with pytest.raises(InvalidReplicationFactor, match="larger than available brokers: 2"):
        assign_replicas_to_brokers(plain([1, 2]), 1, 3, rng)
    with pytest.raises(AdminOperationError, match="Not all brokers have rack"):
        assign_replicas_to_brokers([BrokerMetadata(1, "a"), BrokerMetadata(2)], 1, 1, rng)


def test_start_partition_id_continues_numbering() -> None:
    result = assign_replicas_to_brokers(
        plain(range(3)), 2, 2, random.Random(0), start_partition_id=4
    )
    assert sorted(result) == [4, 5]
