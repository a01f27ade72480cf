"""Replica placement for new topics (Kafka ``AdminUtils.assignReplicasToBrokers``).

Rack-unaware (seed 002 §4): brokers sorted by id; partition ``i``'s first replica (the
preferred leader) goes on broker ``(start + i) mod n``; follower ``j`` goes ``1 + (shift
+ j) mod (n - 1)`` places further on, and ``shift`` grows by one every ``n`` partitions,
so followers of consecutive rounds land on different brokers. ``start`` and the initial
``shift`` are random unless fixed, which spreads leaders of many small topics.

Rack-aware (every broker has ``broker.rack``): the same walk over a broker list that
alternates racks (rack a, rack b, rack c, rack a, ...), skipping a broker when its rack
already holds a replica of the partition while some rack holds none, or when it
already holds one while some broker holds none.

Pure: the caller passes a ``random.Random``; same seed, same placement.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import NamedTuple


class PlacementError(ValueError):
    """Base of the placement errors; ``error_code`` is Kafka's wire error code."""

    error_code: int = -1


class InvalidPartitions(PlacementError):
    """Kafka ``InvalidPartitionsException``."""

    error_code = 37


class InvalidReplicationFactor(PlacementError):
    """Kafka ``InvalidReplicationFactorException``."""

    error_code = 38


class AdminOperationError(PlacementError):
    """Kafka ``AdminOperationException`` (some brokers have a rack, some do not)."""

    error_code = -1


class BrokerMetadata(NamedTuple):
    """Kafka ``BrokerMetadata``: an id and an optional ``broker.rack``."""

    id: int
    rack: str | None = None


def assign_replicas_to_brokers(
    brokers: Sequence[BrokerMetadata],
    num_partitions: int,
    replication_factor: int,
    rng: random.Random,
    fixed_start_index: int = -1,
    start_partition_id: int = -1,
) -> dict[int, tuple[int, ...]]:
    """Partition id -> replicas (first = preferred leader); raises ``PlacementError``.

    ``start_partition_id`` >= 0 numbers the new partitions from there (adding partitions
    to an existing topic); ``fixed_start_index`` >= 0 replaces both random draws.
    """
    if num_partitions <= 0:
        raise InvalidPartitions("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactor("Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise InvalidReplicationFactor(
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{len(brokers)}."
        )
    if len({b.id for b in brokers}) != len(brokers):
        raise AdminOperationError(f"Duplicate broker ids in {sorted(b.id for b in brokers)}.")
    racks = [b.rack for b in brokers]
    if all(rack is None for rack in racks):
        ordered = sorted(b.id for b in brokers)
        return _assign_rack_unaware(
            ordered, num_partitions, replication_factor, rng, fixed_start_index, start_partition_id
        )
    if any(rack is None for rack in racks):
        raise AdminOperationError(
            "Not all brokers have rack information for replica rack aware assignment."
        )
    rack_of = {b.id: b.rack for b in brokers if b.rack is not None}
    return _assign_rack_aware(
        rack_of, num_partitions, replication_factor, rng, fixed_start_index, start_partition_id
    )


def replica_index(first_replica_index: int, shift: int, follower: int, num_brokers: int) -> int:
    """Kafka ``replicaIndex``: where follower ``follower`` (0-based) of a partition goes."""
    step = 1 + (shift + follower) % (num_brokers - 1)
    return (first_replica_index + step) % num_brokers


def _draws(num_brokers: int, rng: random.Random, fixed_start_index: int) -> tuple[int, int]:
    if fixed_start_index >= 0:
        return fixed_start_index, fixed_start_index
    start_index = rng.randrange(num_brokers)
    shift = rng.randrange(num_brokers)
    return start_index, shift


def _assign_rack_unaware(
    broker_ids: list[int],
    num_partitions: int,
    replication_factor: int,
    rng: random.Random,
    fixed_start_index: int,
    start_partition_id: int,
) -> dict[int, tuple[int, ...]]:
    n = len(broker_ids)
    start_index, shift = _draws(n, rng, fixed_start_index)
    partition_id = max(0, start_partition_id)
    result: dict[int, tuple[int, ...]] = {}
    for _ in range(num_partitions):
        if partition_id > 0 and partition_id % n == 0:
            shift += 1
        first = (partition_id + start_index) % n
        replicas = [broker_ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(broker_ids[replica_index(first, shift, j, n)])
        result[partition_id] = tuple(replicas)
        partition_id += 1
    return result


def rack_alternated_broker_list(rack_of: Mapping[int, str]) -> list[int]:
    """Brokers ordered so consecutive entries come from different racks where possible.

    Racks sorted by name, brokers within a rack by id: ``a0, b0, c0, a1, b1, a2, ...``.
    """
    by_rack: dict[str, list[int]] = {}
    for broker, rack in rack_of.items():
        by_rack.setdefault(rack, []).append(broker)
    queues = [sorted(by_rack[rack]) for rack in sorted(by_rack)]
    result: list[int] = []
    depth = 0
    while len(result) < len(rack_of):
        for queue in queues:
            if depth < len(queue):
                result.append(queue[depth])
        depth += 1
    return result


def _assign_rack_aware(
    rack_of: Mapping[int, str],
    num_partitions: int,
    replication_factor: int,
    rng: random.Random,
    fixed_start_index: int,
    start_partition_id: int,
) -> dict[int, tuple[int, ...]]:
    num_racks = len(set(rack_of.values()))
    arranged = rack_alternated_broker_list(rack_of)
    n = len(arranged)
    start_index, shift = _draws(n, rng, fixed_start_index)
    partition_id = max(0, start_partition_id)
    result: dict[int, tuple[int, ...]] = {}
    for _ in range(num_partitions):
        if partition_id > 0 and partition_id % n == 0:
            shift += 1
        first = (partition_id + start_index) % n
        leader = arranged[first]
        replicas = [leader]
        racks_with_replicas = {rack_of[leader]}
        brokers_with_replicas = {leader}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                broker = arranged[replica_index(first, shift * num_racks, k, n)]
                rack = rack_of[broker]
                k += 1
                rack_ok = rack not in racks_with_replicas or len(racks_with_replicas) == num_racks
                broker_ok = broker not in brokers_with_replicas or len(brokers_with_replicas) == n
                if rack_ok and broker_ok:
                    replicas.append(broker)
                    racks_with_replicas.add(rack)
                    brokers_with_replicas.add(broker)
                    break
        result[partition_id] = tuple(replicas)
        partition_id += 1
    return result
