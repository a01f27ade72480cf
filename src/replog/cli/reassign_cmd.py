"""``replog reassign`` (Kafka ``kafka-reassign-partitions.sh``, KIP-455).

    replog reassign --bootstrap-server H:P --generate \\
        --topics-to-move-json-file F --broker-list 1,2,3
    replog reassign --bootstrap-server H:P --execute --reassignment-json-file F [--wait]
        [--throttle BYTES_PER_S]
    replog reassign --bootstrap-server H:P --verify --reassignment-json-file F
    replog reassign --bootstrap-server H:P --cancel --reassignment-json-file F
    replog reassign --bootstrap-server H:P --list

JSON files and printed plans are Kafka's (``{"version":1,"partitions":[{"topic":..,
"partition":..,"replicas":[..]}]}``; topics to move ``{"version":1,"topics":[{"topic":..}]}``).
``--generate`` proposes a placement over the given brokers with the controller's
placement rules; ``--execute`` prints the current assignment (to keep for a rollback)
and sends AlterPartitionReassignments to the controller (``--wait`` then prints
progress until every move is done); ``--verify`` tells which are done; ``--cancel``
reverts the listed partitions to their original replicas. Exits 1 with a one-line
reason on failure, 2 on bad arguments.

``--throttle B`` (Kafka's KIP-73 throttle): ``--execute`` first sets
``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate`` to B
bytes/s on every broker of the moving partitions (current and target replicas), and on
each moving partition's topic ``leader.replication.throttled.replicas`` to its current
replicas and ``follower.replication.throttled.replicas`` to the replicas it adds.
``--verify`` removes both, from every broker and every topic of the file, once every
reassignment of the file is done, as ``kafka-reassign-partitions.sh`` does.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from kio.schema.alter_partition_reassignments.v0 import request as alter_req
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as configs_req
from kio.schema.list_partition_reassignments.v0 import request as list_req
from kio.schema.metadata.v8 import request as metadata_req
from kio.static.primitive import i8, i32, i32Timedelta

from replog.controller import placement
from replog.protocol.client import KafkaConnection

TIMEOUT_MS = 30_000
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4  # Kafka ConfigResource.Type
SET, DELETE = 0, 1  # Kafka AlterConfigOp.OpType
RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
REPLICA_KEYS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
TopicPartition = tuple[str, int]


class CommandError(Exception):
    """A failure to report on one line and exit 1."""


def _timeout() -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=TIMEOUT_MS))


def _plan_json(plan: dict[TopicPartition, list[int]]) -> str:
    return json.dumps(
        {
            "version": 1,
            "partitions": [
                {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
                for (t, p), r in sorted(plan.items())
            ],
        },
        separators=(",", ":"),
    )


def read_plan(path: str) -> dict[TopicPartition, list[int]]:
    """A reassignment JSON file (Kafka's format)."""
    try:
        js = json.loads(Path(path).read_text())
        plan = {
            (str(e["topic"]), int(e["partition"])): [int(r) for r in e["replicas"]]
            for e in js["partitions"]
        }
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CommandError(f"cannot read the reassignment file {path}: {exc}") from exc
    if not plan:
        raise CommandError(f"the reassignment file {path} lists no partitions")
    return plan


def _names(tps: list[TopicPartition]) -> str:
    return ",".join(f"{t}-{p}" for t, p in sorted(tps))


class Cluster:
    """One connection to the bootstrap broker and one to the controller."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.conn: KafkaConnection | None = None
        self.metadata: Any = None

    async def __aenter__(self) -> Cluster:
        last: Exception | None = None
        for server in self.bootstrap.split(","):
            host, _, port = server.strip().rpartition(":")
            conn = KafkaConnection(host or "127.0.0.1", int(port), client_id="replog-reassign")
            try:
                await conn.connect()
            except (OSError, ValueError) as exc:
                last = exc
                continue
            self.conn = conn
            return self
        raise CommandError(f"cannot reach any of {self.bootstrap}: {last}")

    async def __aexit__(self, *exc: object) -> None:
        if self.conn is not None:
            await self.conn.close()

    async def refresh(self, topics: list[str] | None = None) -> Any:
        assert self.conn is not None
        self.metadata = await self.conn.request(
            metadata_req.MetadataRequest(
                topics=None
                if topics is None
                else tuple(metadata_req.MetadataRequestTopic(name=t) for t in topics),
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
        )
        return self.metadata

    def assignment(self, topics: set[str]) -> dict[TopicPartition, list[int]]:
        return {
            (str(t.name), int(p.partition_index)): [int(r) for r in p.replica_nodes]
            for t in self.metadata.topics
            if str(t.name) in topics and t.error_code == ErrorCode.none
            for p in t.partitions
        }

    async def to_controller(self, body: Any) -> Any:
        await self.refresh([])
        md = self.metadata
        for b in md.brokers:
            if int(b.node_id) == int(md.controller_id):
                conn = KafkaConnection(b.host, int(b.port), client_id="replog-reassign")
                await conn.connect()
                try:
                    response = await conn.request(body, timeout_s=TIMEOUT_MS / 1000 + 5)
                finally:
                    await conn.close()
                if response.error_code != ErrorCode.none:
                    raise CommandError(
                        f"the controller refused: {response.error_code.name.upper()}"
                        f"{': ' + response.error_message if response.error_message else ''}"
                    )
                return response
        raise CommandError("the cluster has no controller at the moment")

    async def ongoing(self) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
        response = await self.to_controller(
            list_req.ListPartitionReassignmentsRequest(timeout=_timeout(), topics=None)
        )
        return {
            (str(t.name), int(p.partition_index)): (
                list(map(int, p.replicas)),
                list(map(int, p.adding_replicas)),
                list(map(int, p.removing_replicas)),
            )
            for t in response.topics
            for p in t.partitions
        }

    async def alter(
        self, plan: dict[TopicPartition, list[int] | None]
    ) -> dict[TopicPartition, str]:
        """AlterPartitionReassignments; the failures, ``name: reason`` per partition."""
        by_topic: dict[str, list[alter_req.ReassignablePartition]] = {}
        for (t, p), replicas in sorted(plan.items()):
            by_topic.setdefault(t, []).append(
                alter_req.ReassignablePartition(
                    partition_index=i32(p),
                    replicas=None if replicas is None else tuple(i32(r) for r in replicas),
                )
            )
        response = await self.to_controller(
            alter_req.AlterPartitionReassignmentsRequest(
                timeout=_timeout(),
                topics=tuple(
                    alter_req.ReassignableTopic(name=t, partitions=tuple(ps))
                    for t, ps in by_topic.items()
                ),
            )
        )
        failed: dict[TopicPartition, str] = {}
        for t in response.responses:
            for p in t.partitions:
                if p.error_code != ErrorCode.none:
                    failed[(str(t.name), int(p.partition_index))] = (
                        f"{p.error_code.name.upper()}"
                        f"{': ' + p.error_message if p.error_message else ''}"
                    )
        return failed

    async def alter_configs(
        self, resource_type: int, name: str, changes: dict[str, str | None], broker: Any = None
    ) -> None:
        """IncrementalAlterConfigs of one resource (SET, or DELETE for None); a broker's
        own configs go to that broker."""
        assert self.conn is not None
        body = configs_req.IncrementalAlterConfigsRequest(
            resources=(
                configs_req.AlterConfigsResource(
                    resource_type=i8(resource_type),
                    resource_name=name,
                    configs=tuple(
                        configs_req.AlterableConfig(
                            name=k, config_operation=i8(DELETE if v is None else SET), value=v
                        )
                        for k, v in changes.items()
                    ),
                ),
            ),
            validate_only=False,
        )
        if broker is None:
            response = await self.conn.request(body)
        else:
            conn = KafkaConnection(broker.host, int(broker.port), client_id="replog-reassign")
            await conn.connect()
            try:
                response = await conn.request(body)
            finally:
                await conn.close()
        result = response.responses[0]
        if result.error_code != ErrorCode.none:
            what = f"topic {name}" if resource_type == TOPIC_RESOURCE else f"broker {name}"
            raise CommandError(
                f"cannot change the throttle configs of {what}: "
                f"{result.error_code.name.upper()}: {result.error_message or ''}"
            )

    async def set_broker_configs(self, brokers: list[int], changes: dict[str, str | None]) -> None:
        md = await self.refresh([])
        known = {int(b.node_id): b for b in md.brokers}
        for broker_id in brokers:
            if broker_id in known:
                await self.alter_configs(BROKER_RESOURCE, str(broker_id), changes, known[broker_id])


def throttled_replicas(
    plan: dict[TopicPartition, list[int]], current: dict[TopicPartition, list[int]]
) -> dict[str, dict[str, str]]:
    """Per topic: the leader throttle on every current replica of a moving partition, the
    follower throttle on the replicas it adds (Kafka ``ReassignPartitionsCommand``)."""
    out: dict[str, dict[str, str]] = {}
    for (t, p), target in sorted(plan.items()):
        existing = current.get((t, p), [])
        if existing == target:
            continue
        leader = [f"{p}:{b}" for b in existing]
        follower = [f"{p}:{b}" for b in target if b not in existing]
        entry = out.setdefault(t, {REPLICA_KEYS[0]: "", REPLICA_KEYS[1]: ""})
        for key, items in zip(REPLICA_KEYS, (leader, follower), strict=True):
            entry[key] = ",".join(x for x in (entry[key], *items) if x)
    return out


def _failure(verb: str, failed: dict[TopicPartition, str]) -> CommandError:
    parts = "; ".join(f"{t}-{p}: {why}" for (t, p), why in sorted(failed.items()))
    return CommandError(f"Error {verb} partition(s): {parts}")


async def _generate(args: argparse.Namespace, cluster: Cluster) -> None:
    try:
        js = json.loads(Path(args.topics_to_move_json_file).read_text())
        topics = sorted({str(e["topic"]) for e in js["topics"]})
        brokers = sorted({int(b) for b in args.broker_list.split(",") if b.strip()})
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CommandError(f"cannot read the topics to move: {exc}") from exc
    md = await cluster.refresh(topics)
    known = {int(b.node_id): b for b in md.brokers}
    unknown = [b for b in brokers if b not in known]
    if unknown:
        raise CommandError(f"The given broker list contains unknown brokers: {unknown}")
    current = cluster.assignment(set(topics))
    missing = [t for t in topics if not any(tp[0] == t for tp in current)]
    if missing:
        raise CommandError(f"Topics not found: {', '.join(missing)}")
    proposed: dict[TopicPartition, list[int]] = {}
    rng = random.Random()
    for topic in topics:
        parts = sorted(p for t, p in current if t == topic)
        rf = len(current[(topic, parts[0])])
        try:
            placed = placement.assign_replicas_to_brokers(
                [
                    placement.BrokerMetadata(b, getattr(known[b], "rack", None) or None)
                    for b in brokers
                ],
                len(parts),
                rf,
                rng,
            )
        except placement.PlacementError as exc:
            raise CommandError(str(exc)) from exc
        proposed.update(((topic, p), list(placed[p])) for p in parts)
    print("Current partition replica assignment")
    print(_plan_json(current))
    print()
    print("Proposed partition reassignment configuration")
    print(_plan_json(proposed))


async def _execute(args: argparse.Namespace, cluster: Cluster) -> None:
    plan = read_plan(args.reassignment_json_file)
    await cluster.refresh(sorted({t for t, _ in plan}))
    current = cluster.assignment({t for t, _ in plan})
    print("Current partition replica assignment")
    print()
    print(_plan_json({tp: r for tp, r in current.items() if tp in plan}))
    print()
    print("Save this to use as the --reassignment-json-file option during rollback")
    if args.throttle is not None:
        await _set_throttle(cluster, plan, current, args.throttle)
    failed = await cluster.alter(dict(plan))
    if failed:
        raise _failure("reassigning", failed)
    print(f"Successfully started partition reassignments for {_names(list(plan))}")
    if args.wait:
        await _wait(cluster, list(plan))


async def _set_throttle(
    cluster: Cluster,
    plan: dict[TopicPartition, list[int]],
    current: dict[TopicPartition, list[int]],
    rate: int,
) -> None:
    brokers = sorted({b for tp in plan for b in (*plan[tp], *current.get(tp, []))})
    for topic, changes in sorted(throttled_replicas(plan, current).items()):
        await cluster.alter_configs(TOPIC_RESOURCE, topic, dict(changes))
    await cluster.set_broker_configs(brokers, dict.fromkeys(RATE_KEYS, str(rate)))
    print(
        "Warning: You must run --verify periodically, until the reassignment completes, to "
        "ensure the throttle is removed."
    )
    print(f"The inter-broker throttle limit was set to {rate} B/s")


async def _clear_throttle(cluster: Cluster, plan: dict[TopicPartition, list[int]]) -> None:
    md = await cluster.refresh([])
    brokers = sorted(int(b.node_id) for b in md.brokers)
    await cluster.set_broker_configs(brokers, dict.fromkeys(RATE_KEYS))
    print(f"Clearing broker-level throttles on brokers {','.join(map(str, brokers))}")
    for topic in sorted({t for t, _ in plan}):
        await cluster.alter_configs(TOPIC_RESOURCE, topic, dict.fromkeys(REPLICA_KEYS))
        print(f"Clearing topic-level throttles on topic {topic}")


async def _wait(cluster: Cluster, tps: list[TopicPartition]) -> None:
    started = time.monotonic()
    last = None
    while True:
        ongoing = await cluster.ongoing()
        moving = sorted(tp for tp in tps if tp in ongoing)
        if not moving:
            print(f"All {len(tps)} reassignments completed in {time.monotonic() - started:.1f} s")
            return
        if len(moving) != last:
            print(
                f"{len(tps) - len(moving)} of {len(tps)} reassignments completed; "
                f"still moving: {_names(moving)}",
                flush=True,
            )
            last = len(moving)
        await asyncio.sleep(1)


async def _verify(args: argparse.Namespace, cluster: Cluster) -> None:
    plan = read_plan(args.reassignment_json_file)
    ongoing = await cluster.ongoing()
    await cluster.refresh(sorted({t for t, _ in plan}))
    current = cluster.assignment({t for t, _ in plan})
    print("Status of partition reassignment:")
    wrong = []
    in_progress = [tp for tp in plan if tp in ongoing]
    for (t, p), target in sorted(plan.items()):
        if (t, p) in ongoing:
            print(f"Reassignment of partition {t}-{p} is still in progress.")
        elif current.get((t, p)) == target:
            print(f"Reassignment of partition {t}-{p} is completed.")
        else:
            print(
                f"There is no active reassignment of partition {t}-{p}, but replica set is "
                f"{current.get((t, p))} rather than {target}."
            )
            wrong.append((t, p))
    if wrong:
        raise CommandError(f"{len(wrong)} partition(s) are not at their target replicas")
    if not in_progress:
        await _clear_throttle(cluster, plan)


async def _cancel(args: argparse.Namespace, cluster: Cluster) -> None:
    plan = read_plan(args.reassignment_json_file)
    failed = await cluster.alter(dict.fromkeys(plan))
    if failed:
        raise _failure("cancelling", failed)
    print(f"Successfully cancelled partition reassignments for: {_names(list(plan))}")


async def _list(_args: argparse.Namespace, cluster: Cluster) -> None:
    ongoing = await cluster.ongoing()
    if not ongoing:
        print("No partition reassignments found.")
        return
    print("Current partition reassignments:")
    for (t, p), (replicas, adding, removing) in sorted(ongoing.items()):
        print(
            f"{t}-{p}: replicas: {','.join(map(str, replicas))}. "
            f"adding: {','.join(map(str, adding))}. removing: {','.join(map(str, removing))}."
        )


async def _run(args: argparse.Namespace) -> int:
    action = {
        "generate": _generate,
        "execute": _execute,
        "verify": _verify,
        "cancel": _cancel,
        "list": _list,
    }[args.action]
    async with Cluster(args.bootstrap_server) as cluster:
        await action(args, cluster)
    return 0


def _main(args: argparse.Namespace) -> int:
    actions = [a for a in ("generate", "execute", "verify", "cancel", "list") if getattr(args, a)]
    if len(actions) != 1:
        print(
            "replog: give exactly one of --generate, --execute, --verify, --cancel, --list",
            file=sys.stderr,
        )
        return 2
    args.action = actions[0]
    if args.action == "generate" and not (args.topics_to_move_json_file and args.broker_list):
        print(
            "replog: --generate needs --topics-to-move-json-file and --broker-list", file=sys.stderr
        )
        return 2
    if args.throttle is not None and (args.action != "execute" or args.throttle < 0):
        print("replog: --throttle is a rate >= 0 given with --execute", file=sys.stderr)
        return 2
    if args.action in ("execute", "verify", "cancel") and not args.reassignment_json_file:
        print(f"replog: --{args.action} needs --reassignment-json-file", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_run(args))
    except (CommandError, ConnectionError, TimeoutError, OSError) as exc:
        print(f"replog: {exc}", file=sys.stderr)
        return 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("reassign", help="move partition replicas (kafka-reassign-partitions)")
    p.add_argument("--bootstrap-server", required=True)
    for action in ("generate", "execute", "verify", "cancel", "list"):
        p.add_argument(f"--{action}", action="store_true")
    p.add_argument("--topics-to-move-json-file")
    p.add_argument("--broker-list", help="comma-separated broker ids for --generate")
    p.add_argument("--reassignment-json-file")
    p.add_argument("--wait", action="store_true", help="with --execute: print progress until done")
    p.add_argument(
        "--throttle",
        type=int,
        metavar="BYTES_PER_S",
        help="with --execute: throttle the moving replicas' replication (removed by --verify)",
    )
    p.set_defaults(func=_main)
