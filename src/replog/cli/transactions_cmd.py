"""``replog transactions`` (Kafka ``kafka-transactions.sh``, ``TransactionsCommand``).

    replog transactions --bootstrap-server H:P list
    replog transactions --bootstrap-server H:P describe --transactional-id T
    replog transactions --bootstrap-server H:P describe-producers --topic T --partition P
    replog transactions --bootstrap-server H:P abort --topic T --partition P
        (--start-offset O | --producer-id I --producer-epoch E --coordinator-epoch C)
    replog transactions --bootstrap-server H:P find-hanging
        (--broker-id B | --topic T [--partition P]) [--max-transaction-timeout MINUTES]

``list`` asks every broker (ListTransactions: each lists the transactions it
coordinates). ``describe`` finds the transactional id's coordinator (FindCoordinator key
type 1) and asks it (DescribeTransactions). ``describe-producers`` asks the partition's
leader (DescribeProducers). ``abort`` is Kafka's ``Admin.abortTransaction``: the
producer whose open transaction starts at the offset is found with DescribeProducers,
then the partition leader is sent an ABORT marker (WriteTxnMarkers) with that producer's
id and epoch and its latest coordinator epoch (or those given, Kafka's other form).
``find-hanging`` lists the open transactions on the broker's partitions (or the topic's,
at their leaders) older than ``--max-transaction-timeout`` minutes
(15, Kafka's default) that no coordinator lists as ongoing with that partition.

Columns as Kafka's tool prints them. Failures print one line and exit 1; bad arguments
exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass

from kio.schema.describe_producers.v0 import request as producers_req
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as find_req
from kio.schema.list_transactions.v1 import request as list_req
from kio.schema.metadata.v8 import request as metadata_req
from kio.schema.write_txn_markers.v1 import request as markers_req
from kio.static.primitive import i8, i16, i32, i64

from replog.cli.connection import CommandError, command_config, connect, connect_any
from replog.protocol import describe_transactions_codec as describe_codec
from replog.protocol.apis import ApiKey
from replog.protocol.client import KafkaConnection
from replog.protocol.describe_transactions_codec import DescribedTransaction
from replog.protocol.wire import CodecError
from replog.security.client_security import ClientSecurity

CLIENT_ID = "replog-transactions"
TRANSACTION_KEY_TYPE = 1
RETRIABLE = {
    ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.not_coordinator,
}
WAIT_S = 30
ONGOING = "Ongoing"


@dataclass
class Cluster:
    brokers: dict[int, str]  # id -> host:port
    leaders: dict[tuple[str, int], int]  # (topic, partition) -> leader id
    replicas: dict[tuple[str, int], tuple[int, ...]]


@dataclass(frozen=True)
class OpenProducer:
    """One producer's state on a partition (a DescribeProducers entry)."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    last_sequence: int
    last_timestamp: int
    current_txn_start_offset: int


def _table(headers: list[str], rows: list[list[object]]) -> None:
    cells = [headers] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        print("\t".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


async def _cluster(conn: KafkaConnection) -> Cluster:
    response = await conn.request(
        metadata_req.MetadataRequest(
            topics=None,
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
    )
    brokers = {int(b.node_id): f"{b.host}:{b.port}" for b in response.brokers}
    leaders, replicas = {}, {}
    for t in response.topics:
        for p in t.partitions:
            key = (str(t.name), int(p.partition_index))
            leaders[key] = int(p.leader_id)
            replicas[key] = tuple(int(r) for r in p.replica_nodes)
    return Cluster(brokers, leaders, replicas)


async def _ask(address: str, security: ClientSecurity, body: object) -> object:
    conn = await connect(address, CLIENT_ID, security)
    try:
        return await conn.request(body)
    finally:
        await conn.close()


def _leader(cluster: Cluster, topic: str, partition: int) -> str:
    leader = cluster.leaders.get((topic, partition))
    if leader is None:
        raise CommandError(f"{topic}-{partition} does not exist")
    if leader not in cluster.brokers:
        raise CommandError(f"{topic}-{partition} has no leader")
    return cluster.brokers[leader]


# -- list -----------------------------------------------------------------------------


async def _list_all(
    cluster: Cluster, security: ClientSecurity, producer_ids: tuple[int, ...] = ()
) -> list[tuple[str, int, int, str]]:
    """Every broker's transactions: (transactional id, coordinator, producer id, state)."""
    found = []
    request = list_req.ListTransactionsRequest(
        state_filters=(), producer_id_filters=tuple(i64(p) for p in producer_ids)
    )
    for broker_id, address in sorted(cluster.brokers.items()):
        deadline = time.monotonic() + WAIT_S
        response = await _ask(address, security, request)
        while response.error_code in RETRIABLE and time.monotonic() < deadline:
            await asyncio.sleep(0.2)  # a coordinator still loading its partitions
            response = await _ask(address, security, request)
        if response.error_code != ErrorCode.none:
            raise CommandError(
                f"broker {broker_id} could not list transactions: {response.error_code.name}"
            )
        for t in response.transaction_states:
            found.append(
                (str(t.transactional_id), broker_id, int(t.producer_id), str(t.transaction_state))
            )
    return sorted(found)


async def _list(args: argparse.Namespace, conn: KafkaConnection, security: ClientSecurity) -> int:
    rows = await _list_all(await _cluster(conn), security)
    _table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], rows)
    return 0


# -- describe -------------------------------------------------------------------------


async def _coordinator(conn: KafkaConnection, transactional_id: str) -> tuple[int, str]:
    """The transactional id's coordinator: (broker id, host:port), waiting while it loads."""
    deadline = time.monotonic() + WAIT_S
    while True:
        response = await conn.request(
            find_req.FindCoordinatorRequest(
                key_type=i8(TRANSACTION_KEY_TYPE), coordinator_keys=(transactional_id,)
            )
        )
        [c] = response.coordinators
        if c.error_code == ErrorCode.none:
            return int(c.node_id), f"{c.host}:{c.port}"
        if c.error_code not in RETRIABLE or time.monotonic() > deadline:
            raise CommandError(
                f"cannot find the coordinator of {transactional_id}: {c.error_code.name}"
            )
        await asyncio.sleep(0.2)


async def describe_transaction(
    conn: KafkaConnection, transactional_id: str, security: ClientSecurity
) -> tuple[int, DescribedTransaction]:
    """(coordinator id, DescribeTransactions' answer) of ``transactional_id``."""
    deadline = time.monotonic() + WAIT_S
    while True:
        coordinator, address = await _coordinator(conn, transactional_id)
        broker = await connect(address, CLIENT_ID, security)
        try:
            frame = await broker.request_encoded(
                ApiKey.DESCRIBE_TRANSACTIONS,
                describe_codec.API_VERSION,
                describe_codec.encode_request([transactional_id]),
            )
        finally:
            await broker.close()
        try:
            [state] = describe_codec.decode_response(frame)
        except (CodecError, ValueError) as exc:  # also not one answer for one id
            raise CommandError(
                f"cannot read the description of {transactional_id}: {exc}"
            ) from None
        if state.error_code == ErrorCode.none:
            return coordinator, state
        if state.error_code not in RETRIABLE or time.monotonic() > deadline:
            raise CommandError(f"cannot describe {transactional_id}: {state.error_code.name}")
        await asyncio.sleep(0.2)


async def _describe(
    args: argparse.Namespace, conn: KafkaConnection, security: ClientSecurity
) -> int:
    coordinator, state = await describe_transaction(conn, args.transactional_id, security)
    start_ms = state.transaction_start_time_ms
    now = int(time.time() * 1000)
    partitions = ",".join(f"{topic}-{p}" for topic, parts in state.topics for p in parts)
    _table(
        [
            "CoordinatorId",
            "TransactionalId",
            "ProducerId",
            "ProducerEpoch",
            "TransactionState",
            "TransactionTimeoutMs",
            "CurrentTransactionStartTimeMs",
            "TransactionDurationMs",
            "TopicPartitions",
        ],
        [
            [
                coordinator,
                state.transactional_id,
                state.producer_id,
                state.producer_epoch,
                state.transaction_state,
                state.transaction_timeout_ms,
                start_ms if start_ms >= 0 else "None",
                now - start_ms if start_ms >= 0 else "None",
                partitions,
            ]
        ],
    )
    return 0


# -- describe-producers ---------------------------------------------------------------


async def describe_producers(
    address: str, security: ClientSecurity, partitions: dict[str, list[int]]
) -> dict[tuple[str, int], list[OpenProducer]]:
    """DescribeProducers on ``address`` for ``partitions``; a partition's error raises."""
    response = await _ask(
        address,
        security,
        producers_req.DescribeProducersRequest(
            topics=tuple(
                producers_req.TopicRequest(
                    name=topic, partition_indexes=tuple(i32(p) for p in parts)
                )
                for topic, parts in partitions.items()
            )
        ),
    )
    out: dict[tuple[str, int], list[OpenProducer]] = {}
    for t in response.topics:
        for p in t.partitions:
            if p.error_code != ErrorCode.none:
                raise CommandError(
                    f"cannot describe the producers of {t.name}-{p.partition_index}: "
                    f"{p.error_code.name}"
                )
            out[(str(t.name), int(p.partition_index))] = [
                OpenProducer(
                    int(s.producer_id),
                    int(s.producer_epoch),
                    int(s.coordinator_epoch),
                    int(s.last_sequence),
                    int(s.last_timestamp),
                    int(s.current_txn_start_offset),
                )
                for s in p.active_producers
            ]
    return out


async def _describe_producers(
    args: argparse.Namespace, conn: KafkaConnection, security: ClientSecurity
) -> int:
    address = _leader(await _cluster(conn), args.topic, args.partition)
    found = await describe_producers(address, security, {args.topic: [args.partition]})
    rows = [
        [
            s.producer_id,
            s.producer_epoch,
            s.coordinator_epoch,
            s.last_sequence,
            s.last_timestamp,
            s.current_txn_start_offset if s.current_txn_start_offset >= 0 else "None",
        ]
        for s in found[(args.topic, args.partition)]
    ]
    _table(
        [
            "ProducerId",
            "ProducerEpoch",
            "LatestCoordinatorEpoch",
            "LastSequence",
            "LastTimestamp",
            "CurrentTransactionStartOffset",
        ],
        rows,
    )
    return 0


# -- abort ----------------------------------------------------------------------------


async def _abort(args: argparse.Namespace, conn: KafkaConnection, security: ClientSecurity) -> int:
    topic, partition, start = args.topic, args.partition, args.start_offset
    address = _leader(await _cluster(conn), topic, partition)
    if start is None:  # the producer given: Kafka's --producer-id form
        producer = OpenProducer(
            args.producer_id, args.producer_epoch, args.coordinator_epoch, -1, -1, -1
        )
        what = f"producer {producer.producer_id}"
    else:
        producers = (await describe_producers(address, security, {topic: [partition]}))[
            (topic, partition)
        ]
        matching = [p for p in producers if p.current_txn_start_offset == start]
        if not matching:
            raise CommandError(
                f"no open transaction on {topic}-{partition} starts at offset {start} "
                "(see describe-producers)"
            )
        [producer] = matching  # one producer's transaction per first offset
        what = f"producer {producer.producer_id} (epoch {producer.producer_epoch})"
    response = await _ask(
        address,
        security,
        markers_req.WriteTxnMarkersRequest(
            markers=(
                markers_req.WritableTxnMarker(
                    producer_id=i64(producer.producer_id),
                    producer_epoch=i16(producer.producer_epoch),
                    transaction_result=False,  # ABORT
                    topics=(
                        markers_req.WritableTxnMarkerTopic(
                            name=topic, partition_indexes=(i32(partition),)
                        ),
                    ),
                    # Kafka's tool: the producer's latest coordinator epoch, 0 if none
                    coordinator_epoch=i32(max(producer.coordinator_epoch, 0)),
                ),
            )
        ),
    )
    errors = [p.error_code for m in response.markers for t in m.topics for p in t.partitions]
    if errors != [ErrorCode.none]:
        names = ", ".join(e.name for e in errors) or "no answer"
        raise CommandError(f"cannot abort the transaction on {topic}-{partition}: {names}")
    print(
        f"Aborted the transaction of {what} on {topic}-{partition}"
        + ("" if start is None else f" starting at offset {start}")
    )
    return 0


# -- find-hanging ---------------------------------------------------------------------


async def _find_hanging(
    args: argparse.Namespace, conn: KafkaConnection, security: ClientSecurity
) -> int:
    cluster = await _cluster(conn)
    by_broker: dict[str, dict[str, list[int]]] = {}  # address -> topic -> partitions
    if args.broker_id is not None:
        broker = args.broker_id
        if broker not in cluster.brokers:
            raise CommandError(f"broker {broker} is not in the cluster")
        for (topic, partition), replicas in sorted(cluster.replicas.items()):
            if broker in replicas:
                by_broker.setdefault(cluster.brokers[broker], {}).setdefault(topic, []).append(
                    partition
                )
    else:  # --topic [--partition]: each partition at its leader
        chosen = sorted(
            tp for tp in cluster.leaders if tp[0] == args.topic and args.partition in (None, tp[1])
        )
        if not chosen:
            raise CommandError(f"{args.topic} has no such partition")
        for topic, partition in chosen:
            leader = _leader(cluster, topic, partition)
            by_broker.setdefault(leader, {}).setdefault(topic, []).append(partition)
    now = int(time.time() * 1000)
    max_timeout_ms = args.max_transaction_timeout * 60_000
    candidates = []
    for address, partitions in by_broker.items():
        described = await describe_producers(address, security, partitions)
        for tp, producers in sorted(described.items()):
            for p in producers:
                if p.current_txn_start_offset >= 0 and now - p.last_timestamp > max_timeout_ms:
                    candidates.append((tp, p))
    hanging = []
    if candidates:
        producer_ids = tuple(sorted({p.producer_id for _, p in candidates}))
        listed = await _list_all(cluster, security, producer_ids)
        ongoing: dict[int, set[tuple[str, int]]] = {}  # producer id -> its partitions
        for tid, _, producer_id, state in listed:
            if state != ONGOING:
                continue
            _, description = await describe_transaction(conn, tid, security)
            if description.transaction_state == ONGOING and description.producer_id == producer_id:
                ongoing.setdefault(producer_id, set()).update(
                    (topic, p) for topic, parts in description.topics for p in parts
                )
        hanging = [(tp, p) for tp, p in candidates if tp not in ongoing.get(p.producer_id, ())]
    _table(
        [
            "Topic",
            "Partition",
            "ProducerId",
            "ProducerEpoch",
            "CoordinatorEpoch",
            "StartOffset",
            "LastTimestamp",
            "Duration(min)",
        ],
        [
            [
                topic,
                partition,
                p.producer_id,
                p.producer_epoch,
                p.coordinator_epoch,
                p.current_txn_start_offset,
                p.last_timestamp,
                (now - p.last_timestamp) // 60_000,
            ]
            for (topic, partition), p in hanging
        ],
    )
    return 0


ACTIONS = {
    "list": _list,
    "describe": _describe,
    "describe-producers": _describe_producers,
    "abort": _abort,
    "find-hanging": _find_hanging,
}


async def _run(args: argparse.Namespace) -> int:
    security = command_config(args.command_config)
    conn = await connect_any(args.bootstrap_server, CLIENT_ID, security)
    try:
        return await ACTIONS[args.action](args, conn, security)
    finally:
        await conn.close()


def _main(args: argparse.Namespace) -> int:
    for name in (
        "partition",
        "start_offset",
        "broker_id",
        "max_transaction_timeout",
        "producer_id",
        "producer_epoch",
        "coordinator_epoch",
    ):
        if getattr(args, name, None) is not None and getattr(args, name) < 0:
            print(f"replog transactions: --{name.replace('_', '-')} must be >= 0", file=sys.stderr)
            return 2
    if args.action == "abort" and args.producer_id is not None:
        if args.producer_epoch is None or args.coordinator_epoch is None:
            print(
                "replog transactions: --producer-id needs --producer-epoch and --coordinator-epoch",
                file=sys.stderr,
            )
            return 2
    if args.action == "find-hanging" and args.partition is not None and args.topic is None:
        print("replog transactions: --partition needs --topic", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_run(args))
    except (CommandError, OSError, TimeoutError) as exc:
        print(f"replog transactions: {exc}", file=sys.stderr)
        return 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("transactions", help="list, describe, abort and find hanging transactions")
    p.add_argument("--bootstrap-server", required=True, help="host:port[,host:port...]")
    p.add_argument("--command-config", help="client properties file (TLS, SASL)")
    actions = p.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="every transaction the coordinators know")
    describe = actions.add_parser("describe", help="one transaction, from its coordinator")
    describe.add_argument("--transactional-id", required=True)
    producers = actions.add_parser(
        "describe-producers", help="a partition's producers and their open transactions"
    )
    abort = actions.add_parser(
        "abort",
        help="abort the open transaction starting at an offset (or of a given producer)",
    )
    for action in (producers, abort):
        action.add_argument("--topic", required=True)
        action.add_argument("--partition", type=int, required=True)
    which = abort.add_mutually_exclusive_group(required=True)
    which.add_argument("--start-offset", type=int, help="the transaction's first offset")
    which.add_argument("--producer-id", type=int, help="with --producer-epoch, --coordinator-epoch")
    abort.add_argument("--producer-epoch", type=int)
    abort.add_argument("--coordinator-epoch", type=int)
    hanging = actions.add_parser(
        "find-hanging", help="open transactions on a broker that no coordinator knows"
    )
    where = hanging.add_mutually_exclusive_group(required=True)
    where.add_argument("--broker-id", type=int, help="every partition with a replica there")
    where.add_argument("--topic", help="the topic's partitions, at their leaders")
    hanging.add_argument("--partition", type=int, help="with --topic: only this partition")
    hanging.add_argument(
        "--max-transaction-timeout",
        type=int,
        default=15,
        metavar="MINUTES",
        help="only transactions open longer than this (default 15)",
    )
    p.set_defaults(func=_main)
