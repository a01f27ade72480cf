"""``replog groups`` (Kafka ``kafka-consumer-groups.sh``).

    replog groups --bootstrap-server H:P list [--state STATE ...]
    replog groups --bootstrap-server H:P describe GROUP
    replog groups --bootstrap-server H:P reset-offsets GROUP (--topic T[:P,P] ... | --all-topics)
        (--to-earliest | --to-latest | --to-offset N | --shift-by N) [--execute]
    replog groups --bootstrap-server H:P delete GROUP

``list`` asks every broker (ListGroups); ``describe`` asks the group's coordinator
(FindCoordinator, then DescribeGroups or ConsumerGroupDescribe) and prints members,
assignments and per-partition lag (log end offset minus committed offset), as Kafka's
tool does. ``reset-offsets`` prints the plan and commits it only with ``--execute``,
and only while the group has no members (Kafka: "Assignments can only be reset if the
group is inactive"). Failures print one line and exit 1; bad arguments exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass

from kio.schema.consumer_group_describe.v0 import request as consumer_describe_req
from kio.schema.delete_groups.v2 import request as delete_req
from kio.schema.describe_groups.v5 import request as describe_req
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as find_req
from kio.schema.list_groups.v4 import request as list_req
from kio.schema.list_offsets.v7 import request as offsets_req
from kio.schema.metadata.v8 import request as metadata_req
from kio.schema.offset_commit.v8 import request as commit_req
from kio.schema.offset_fetch.v8 import request as fetch_req
from kio.static.primitive import i8, i32, i64

from replog.cli.connection import CommandError, connect, connect_any
from replog.coordinator.group.consumer_protocol import assigned_partitions
from replog.protocol.client import KafkaConnection

CLIENT_ID = "replog-groups"
EARLIEST, LATEST = -2, -1
RETRIABLE = {
    ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.not_coordinator,
}
WAIT_S = 30


@dataclass
class Cluster:
    brokers: dict[int, str]  # id -> host:port
    leaders: dict[tuple[str, int], int]  # (topic, partition) -> leader id


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
    leaders = {
        (str(t.name), int(p.partition_index)): int(p.leader_id)
        for t in response.topics
        for p in t.partitions
    }
    return Cluster(brokers, leaders)


async def _coordinator(conn: KafkaConnection, group: str) -> KafkaConnection:
    """A connection to ``group``'s coordinator (waiting while it loads or is elected)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        response = await conn.request(
            find_req.FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(group,))
        )
        [c] = response.coordinators
        if c.error_code == ErrorCode.none:
            return await connect(f"{c.host}:{c.port}", CLIENT_ID)
        if c.error_code not in RETRIABLE or time.monotonic() > deadline:
            raise CommandError(f"cannot find the coordinator of {group}: {c.error_code.name}")
        await asyncio.sleep(0.2)


async def _retrying(call, what: str):
    """``await call()`` (returning (error, value)) until no coordinator error remains."""
    deadline = time.monotonic() + WAIT_S
    while True:
        error, value = await call()
        if error == ErrorCode.none:
            return value
        if error not in RETRIABLE or time.monotonic() > deadline:
            raise CommandError(f"{what}: {error.name.upper()}")
        await asyncio.sleep(0.2)


# -- list -----------------------------------------------------------------------------


async def _list(args: argparse.Namespace, conn: KafkaConnection) -> int:
    cluster = await _cluster(conn)
    states = tuple(args.state or ())
    found: dict[str, tuple[str, str]] = {}
    for address in cluster.brokers.values():
        broker = await connect(address, CLIENT_ID)
        try:
            response = await broker.request(list_req.ListGroupsRequest(states_filter=states))
        finally:
            await broker.close()
        if response.error_code != ErrorCode.none:
            raise CommandError(
                f"broker {address} could not list groups: {response.error_code.name}"
            )
        for g in response.groups:
            found[str(g.group_id)] = (str(g.group_state), str(g.protocol_type))
    if states:
        print(f"{'GROUP':<40} STATE")
        for group in sorted(found):
            print(f"{group:<40} {found[group][0]}")
    else:
        for group in sorted(found):
            print(group)
    return 0


# -- describe -------------------------------------------------------------------------


async def _committed(coordinator: KafkaConnection, group: str) -> dict[tuple[str, int], int]:
    async def call():
        response = await coordinator.request(
            fetch_req.OffsetFetchRequest(
                groups=(fetch_req.OffsetFetchRequestGroup(group_id=group, topics=None),),
                require_stable=False,
            )
        )
        [g] = response.groups
        return g.error_code, {
            (str(t.name), int(p.partition_index)): int(p.committed_offset)
            for t in g.topics
            for p in t.partitions
        }

    return await _retrying(call, f"cannot fetch the offsets of {group}")


async def _log_offsets(
    cluster: Cluster, partitions: list[tuple[str, int]], timestamp: int
) -> dict[tuple[str, int], int]:
    """Each partition's earliest (-2) or latest (-1) offset, from its leader."""
    by_leader: dict[int, list[tuple[str, int]]] = {}
    for tp in partitions:
        by_leader.setdefault(cluster.leaders.get(tp, -1), []).append(tp)
    out: dict[tuple[str, int], int] = {}
    for leader, tps in by_leader.items():
        if leader not in cluster.brokers:
            continue
        topics: dict[str, list[int]] = {}
        for topic, partition in tps:
            topics.setdefault(topic, []).append(partition)
        conn = await connect(cluster.brokers[leader], CLIENT_ID)
        try:
            response = await conn.request(
                offsets_req.ListOffsetsRequest(
                    replica_id=i32(-1),
                    isolation_level=i8(0),
                    topics=tuple(
                        offsets_req.ListOffsetsTopic(
                            name=topic,
                            partitions=tuple(
                                offsets_req.ListOffsetsPartition(
                                    partition_index=i32(p),
                                    current_leader_epoch=i32(-1),
                                    timestamp=i64(timestamp),
                                )
                                for p in parts
                            ),
                        )
                        for topic, parts in topics.items()
                    ),
                )
            )
        finally:
            await conn.close()
        for t in response.topics:
            for p in t.partitions:
                if p.error_code == ErrorCode.none:
                    out[(str(t.name), int(p.partition_index))] = int(p.offset)
    return out


@dataclass
class GroupDescription:
    state: str
    members: list[tuple[str, str, str, list[tuple[str, int]]]]  # id, host, client, partitions


async def _describe_group(coordinator: KafkaConnection, group: str) -> GroupDescription:
    """DescribeGroups for a classic group; a KIP-848 group (which DescribeGroups calls
    GROUP_ID_NOT_FOUND) is asked again with ConsumerGroupDescribe, as admin clients do."""

    async def classic():
        response = await coordinator.request(
            describe_req.DescribeGroupsRequest(groups=(group,), include_authorized_operations=False)
        )
        [g] = response.groups
        return g.error_code, g

    async def consumer():
        response = await coordinator.request(
            consumer_describe_req.ConsumerGroupDescribeRequest(
                group_ids=(group,), include_authorized_operations=False
            )
        )
        [g] = response.groups
        return g.error_code, g

    try:
        g = await _retrying(classic, f"cannot describe {group}")
    except CommandError:
        g = await _retrying(consumer, f"cannot describe {group}")
        return GroupDescription(
            str(g.group_state),
            [
                (
                    str(m.member_id),
                    str(m.client_host),
                    str(m.client_id),
                    [
                        (str(t.topic_name), int(p))
                        for t in m.assignment.topic_partitions
                        for p in t.partitions
                    ],
                )
                for m in g.members
            ],
        )
    return GroupDescription(
        str(g.group_state),
        [
            (
                str(m.member_id),
                str(m.client_host),
                str(m.client_id),
                assigned_partitions(bytes(m.member_assignment)),
            )
            for m in g.members
        ],
    )


async def _describe(args: argparse.Namespace, conn: KafkaConnection) -> int:
    group = args.group
    cluster = await _cluster(conn)
    coordinator = await _coordinator(conn, group)
    try:
        described = await _describe_group(coordinator, group)
        committed = await _committed(coordinator, group)
    finally:
        await coordinator.close()
    owners: dict[tuple[str, int], tuple[str, str, str]] = {}
    for member_id, host, client, partitions in described.members:
        for tp in partitions:
            owners[tp] = (member_id, host, client)
    partitions = sorted(set(committed) | set(owners))
    ends = await _log_offsets(cluster, partitions, LATEST)
    state = described.state
    if state == "Dead" and not committed:
        raise CommandError(f"consumer group {group} does not exist")
    print(f"Consumer group '{group}' ({state}, {len(described.members)} members)")
    print()
    header = (
        f"{'GROUP':<24} {'TOPIC':<24} {'PARTITION':>9} {'CURRENT-OFFSET':>14} "
        f"{'LOG-END-OFFSET':>14} {'LAG':>6} {'CONSUMER-ID':<40} {'HOST':<16} CLIENT-ID"
    )
    print(header)
    for tp in partitions:
        current = committed.get(tp, -1)
        end = ends.get(tp)
        lag = "-" if current < 0 or end is None else str(max(end - current, 0))
        member, host, client = owners.get(tp, ("-", "-", "-"))
        print(
            f"{group:<24} {tp[0]:<24} {tp[1]:>9} {current if current >= 0 else '-':>14} "
            f"{end if end is not None else '-':>14} {lag:>6} {member:<40} {host:<16} {client}"
        )
    return 0


# -- reset-offsets --------------------------------------------------------------------


def _targets(args: argparse.Namespace, cluster: Cluster, committed) -> list[tuple[str, int]]:
    if args.all_topics:
        return sorted(committed)
    out = []
    for spec in args.topic:
        topic, _, parts = spec.partition(":")
        if parts:
            try:
                wanted = [int(p) for p in parts.split(",")]
            except ValueError as exc:
                raise CommandError(f"--topic {spec!r}: partitions must be numbers") from exc
        else:
            wanted = sorted(p for t, p in cluster.leaders if t == topic)
        if not wanted:
            raise CommandError(f"topic {topic} does not exist")
        out.extend((topic, p) for p in wanted)
    return out


async def _reset(args: argparse.Namespace, conn: KafkaConnection) -> int:
    group = args.group
    cluster = await _cluster(conn)
    coordinator = await _coordinator(conn, group)
    try:
        described = await _describe_group(coordinator, group)
        if described.state not in ("Empty", "Dead"):
            raise CommandError(
                f"assignments can only be reset if the group '{group}' is inactive, "
                f"but the current state is {described.state}"
            )
        committed = await _committed(coordinator, group)
        targets = _targets(args, cluster, committed)
        earliest = await _log_offsets(cluster, targets, EARLIEST)
        latest = await _log_offsets(cluster, targets, LATEST)
        plan: dict[tuple[str, int], int] = {}
        for tp in targets:
            if tp not in earliest or tp not in latest:
                raise CommandError(f"{tp[0]}-{tp[1]} has no leader at the moment")
            if args.to_earliest:
                new = earliest[tp]
            elif args.to_latest:
                new = latest[tp]
            elif args.to_offset is not None:
                new = args.to_offset
            else:
                new = committed.get(tp, latest[tp]) + args.shift_by
            plan[tp] = min(max(new, earliest[tp]), latest[tp])  # as Kafka clamps
        print(f"{'GROUP':<24} {'TOPIC':<24} {'PARTITION':>9} {'NEW-OFFSET':>10}")
        for (topic, partition), offset in sorted(plan.items()):
            print(f"{group:<24} {topic:<24} {partition:>9} {offset:>10}")
        if not args.execute:
            print("(dry run: add --execute to commit these offsets)")
            return 0
        topics: dict[str, list[tuple[int, int]]] = {}
        for (topic, partition), offset in plan.items():
            topics.setdefault(topic, []).append((partition, offset))
        response = await coordinator.request(
            commit_req.OffsetCommitRequest(
                group_id=group,
                generation_id_or_member_epoch=i32(-1),
                member_id="",
                group_instance_id=None,
                topics=tuple(
                    commit_req.OffsetCommitRequestTopic(
                        name=topic,
                        partitions=tuple(
                            commit_req.OffsetCommitRequestPartition(
                                partition_index=i32(p),
                                committed_offset=i64(o),
                                committed_leader_epoch=i32(-1),
                                committed_metadata="",
                            )
                            for p, o in parts
                        ),
                    )
                    for topic, parts in topics.items()
                ),
            )
        )
    finally:
        await coordinator.close()
    failed = [
        f"{t.name}-{p.partition_index}: {p.error_code.name.upper()}"
        for t in response.topics
        for p in t.partitions
        if p.error_code != ErrorCode.none
    ]
    if failed:
        raise CommandError(f"committing failed for {', '.join(failed)}")
    return 0


# -- delete ---------------------------------------------------------------------------


async def _delete(args: argparse.Namespace, conn: KafkaConnection) -> int:
    group = args.group
    coordinator = await _coordinator(conn, group)
    try:

        async def call():
            response = await coordinator.request(
                delete_req.DeleteGroupsRequest(groups_names=(group,))
            )
            [r] = response.results
            return r.error_code, r

        await _retrying(call, f"cannot delete {group}")
    finally:
        await coordinator.close()
    print(f"Deletion of requested consumer groups ('{group}') was successful.")
    return 0


ACTIONS = {"list": _list, "describe": _describe, "reset-offsets": _reset, "delete": _delete}


async def _run(args: argparse.Namespace) -> int:
    conn = await connect_any(args.bootstrap_server, CLIENT_ID)
    try:
        return await ACTIONS[args.action](args, conn)
    finally:
        await conn.close()


def _main(args: argparse.Namespace) -> int:
    if args.action == "reset-offsets":
        chosen = [
            args.to_earliest,
            args.to_latest,
            args.to_offset is not None,
            args.shift_by is not None,
        ]
        if sum(chosen) != 1:
            print(
                "replog: give one of --to-earliest, --to-latest, --to-offset, --shift-by",
                file=sys.stderr,
            )
            return 2
        if bool(args.topic) == args.all_topics:
            print("replog: give either --topic (repeatable) or --all-topics", file=sys.stderr)
            return 2
    try:
        return asyncio.run(_run(args))
    except (CommandError, OSError, TimeoutError) as exc:
        print(f"replog groups: {exc}", file=sys.stderr)
        return 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("groups", help="list, describe, reset and delete consumer groups")
    p.add_argument("--bootstrap-server", required=True, help="host:port[,host:port...]")
    actions = p.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="every group in the cluster")
    listing.add_argument("--state", action="append", help="only groups in this state (repeatable)")
    actions.add_parser("describe", help="members, assignments and lag").add_argument("group")
    reset = actions.add_parser("reset-offsets", help="move an inactive group's offsets")
    reset.add_argument("group")
    reset.add_argument("--topic", action="append", default=[], help="TOPIC or TOPIC:P,P")
    reset.add_argument("--all-topics", action="store_true", help="every committed partition")
    reset.add_argument("--to-earliest", action="store_true")
    reset.add_argument("--to-latest", action="store_true")
    reset.add_argument("--to-offset", type=int)
    reset.add_argument("--shift-by", type=int)
    reset.add_argument("--execute", action="store_true", help="commit (default: dry run)")
    actions.add_parser("delete", help="delete an empty group and its offsets").add_argument("group")
    p.set_defaults(func=_main)
