"""The transaction coordinators of the transactional workload, as a client finds them, for
the coordinator-targeted nemeses (``chaos.nemesis``).

- ``find_transaction_coordinator``: FindCoordinator v4 with key type 1 (TRANSACTION) asked
  of each broker in turn until one names the coordinator of a transactional id;
- ``describe_transactions``: DescribeTransactions v0 at that coordinator (states such as
  ``PrepareCommit``), through the project's own reader of its answer;
- ``data_leaders``: the leaders of the workload's input and output partitions, from
  ZooKeeper's partition states.

Each call opens a connection of its own and closes it (``asyncio.run``); a broker that
does not answer within ``timeout_s`` is skipped.

Concurrency: called from the campaign's thread only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as find_v4

from chaos.cluster import BROKER_PORT, ChaosCluster
from replog.protocol import describe_transactions_codec
from replog.protocol.apis import ApiKey
from replog.protocol.client import KafkaConnection
from replog.protocol.wire import CodecError

TRANSACTION_KEY_TYPE = 1


async def _ask(address: str, request, timeout_s: float):
    conn = KafkaConnection(address, BROKER_PORT, client_id="chaos-nemesis")
    await conn.connect(timeout_s)
    try:
        return await conn.request(request, timeout_s)
    finally:
        await conn.close()


async def _ask_encoded(address: str, body: bytes, timeout_s: float) -> bytes:
    conn = KafkaConnection(address, BROKER_PORT, client_id="chaos-nemesis")
    await conn.connect(timeout_s)
    try:
        return await conn.request_encoded(ApiKey.DESCRIBE_TRANSACTIONS, 0, body, timeout_s)
    finally:
        await conn.close()


def find_transaction_coordinator(
    cluster: ChaosCluster, transactional_id: str, timeout_s: float = 3.0
) -> int | None:
    """The broker id FindCoordinator names for ``transactional_id`` (None: no broker
    answered one, e.g. every one of them loading or unreachable)."""
    request = find_v4.FindCoordinatorRequest(
        key_type=TRANSACTION_KEY_TYPE, coordinator_keys=(transactional_id,)
    )
    for broker in sorted(cluster.broker_nodes):
        node = cluster.broker_nodes[broker]
        try:
            answer = asyncio.run(_ask(node.address, request, timeout_s))
        except (OSError, TimeoutError):  # refused, unreachable, lost: ask the next broker
            continue
        found = answer.coordinators[0]
        if found.error_code is ErrorCode.none and int(found.node_id) in cluster.broker_nodes:
            return int(found.node_id)
    return None


def describe_transactions(
    cluster: ChaosCluster, broker: int, transactional_ids: list[str], timeout_s: float = 3.0
) -> list[describe_transactions_codec.DescribedTransaction]:
    """DescribeTransactions at ``broker`` (empty when it does not answer)."""
    body = describe_transactions_codec.encode_request(transactional_ids)
    address = cluster.broker_nodes[broker].address
    try:
        frame = asyncio.run(_ask_encoded(address, body, timeout_s))
    except (OSError, TimeoutError, CodecError):  # unreachable, or an answer cut short
        return []
    return describe_transactions_codec.decode_response(frame)


def data_leaders(cluster: ChaosCluster, topics: Iterable[str], partitions: int) -> set[int]:
    """The brokers leading some partition of ``topics`` (ZooKeeper's view)."""
    leaders = set()
    for topic in topics:
        for p in range(partitions):
            try:
                state = cluster.partition_state(topic, p)
            except Exception:  # ZooKeeper briefly unreachable: that partition unknown
                state = None
            if state is not None and state[0] >= 0:
                leaders.add(state[0])
    return leaders
