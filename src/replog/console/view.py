"""The console's view of a cluster, from what the admin APIs and the metrics say (pure).

``Observation`` is one poll's raw answers (Metadata, reassignments, groups, open
transactions, each broker's metrics samples); ``build_snapshot`` turns it into the page's ``Snapshot``;
``diff_events`` compares two snapshots and names what changed as the controller's
decisions show it (elections, ISR changes, brokers leaving and joining, controller moves,
reassignments). No IO, no clock: the poller passes the time in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from replog.server.metadata_cache import PartitionInfo

MAX_EVENTS = 200

# metrics samples of one broker: (name, sorted label pairs) -> value
Samples = Mapping[tuple[str, tuple[tuple[str, str], ...]], float]


@dataclass(frozen=True)
class GroupMember:
    member_id: str
    client_id: str
    host: str


@dataclass(frozen=True)
class GroupInfo:
    group_id: str
    state: str
    protocol_type: str
    coordinator: int
    members: tuple[GroupMember, ...] = ()


@dataclass(frozen=True)
class TransactionInfo:
    """An open transaction as its coordinator describes it (DescribeTransactions)."""

    transactional_id: str
    coordinator: int
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_ms: int  # -1: not started
    partitions: tuple[tuple[str, int], ...] = ()


@dataclass
class Observation:
    """One poll. ``brokers``: the live brokers Metadata named (id -> host:port);
    ``known_brokers``: every broker ever seen or configured (to show the dead ones)."""

    taken_ms: int
    brokers: dict[int, str]
    known_brokers: set[int]
    controller_id: int
    controller_epoch: int | None
    partitions: list[PartitionInfo]
    reassigning: set[tuple[str, int]] = field(default_factory=set)
    groups: list[GroupInfo] = field(default_factory=list)
    metrics: dict[int, Samples] = field(default_factory=dict)
    transactions: list[TransactionInfo] = field(default_factory=list)


@dataclass
class ReplicaView:
    broker: int
    log_end_offset: int | None
    lag: int | None  # the leader's log end offset minus this replica's


@dataclass
class PartitionView:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    high_watermark: int | None
    replica_states: list[ReplicaView]
    under_replicated: bool
    offline: bool
    reassigning: bool


@dataclass
class BrokerView:
    broker_id: int
    address: str
    alive: bool
    controller: bool


@dataclass
class TopicView:
    topic: str
    partitions: int
    messages_in_per_s: float | None
    bytes_in_per_s: float | None


@dataclass
class GroupView:
    group_id: str
    state: str
    protocol_type: str
    coordinator: int
    members: list[dict[str, str]]
    lag: int | None
    partition_lag: dict[str, int]


@dataclass
class TransactionView:
    transactional_id: str
    coordinator: int
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_ms: int | None
    duration_ms: int | None
    partitions: list[str]
    # per partition, how far its last stable offset is behind its high watermark
    # (Kafka's LastStableOffsetLag, from the partition leader's metrics)
    lso_lag: dict[str, int]


@dataclass
class Event:
    at_ms: int
    kind: str  # election, isr, broker, controller, reassignment
    text: str


@dataclass
class Snapshot:
    taken_ms: int
    controller_id: int
    controller_epoch: int | None
    brokers: list[BrokerView]
    topics: list[TopicView]
    partitions: list[PartitionView]
    groups: list[GroupView]
    events: list[Event] = field(default_factory=list)
    transactions: list[TransactionView] = field(default_factory=list)
    # per-topic (messages in, bytes in) counters summed over the brokers, for the rates
    counters: dict[str, tuple[float, float]] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("counters")
        out["under_replicated"] = sum(1 for p in self.partitions if p.under_replicated)
        out["offline"] = sum(1 for p in self.partitions if p.offline)
        return out


def sample(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def _topic_counters(metrics: Mapping[int, Samples]) -> dict[str, tuple[float, float]]:
    counts: dict[str, list[float]] = {}
    for samples in metrics.values():
        for (name, labels), value in samples.items():
            if name not in (
                "kafka_server_brokertopicmetrics_messagesin_total",
                "kafka_server_brokertopicmetrics_bytesin_total",
            ):
                continue
            topic = dict(labels).get("topic", "")
            if not topic:
                continue
            slot = counts.setdefault(topic, [0.0, 0.0])
            slot[0 if name.endswith("messagesin_total") else 1] += value
    return {t: (c[0], c[1]) for t, c in counts.items()}


def _rate(now: float, before: float | None, seconds: float) -> float | None:
    if before is None or seconds <= 0 or now < before:  # a restarted broker counts from 0
        return None
    return (now - before) / seconds


def build_snapshot(obs: Observation, previous: Snapshot | None) -> Snapshot:
    live = set(obs.brokers)
    brokers = [
        BrokerView(
            b,
            obs.brokers.get(b, ""),
            b in live,
            b == obs.controller_id,
        )
        for b in sorted(obs.known_brokers | live)
    ]
    partitions = []
    for p in sorted(obs.partitions, key=lambda p: (p.topic, p.partition)):
        labels = {"topic": p.topic, "partition": str(p.partition)}
        leader_samples = obs.metrics.get(p.leader, {})
        hw = sample(leader_samples, "kafka_cluster_partition_highwatermark", **labels)
        leader_leo = sample(leader_samples, "kafka_log_log_logendoffset", **labels)
        replicas = []
        for r in p.replicas:
            leo = sample(obs.metrics.get(r, {}), "kafka_log_log_logendoffset", **labels)
            lag = None if leo is None or leader_leo is None else max(int(leader_leo - leo), 0)
            replicas.append(ReplicaView(r, None if leo is None else int(leo), lag))
        offline = p.leader < 0 or p.leader not in live
        partitions.append(
            PartitionView(
                p.topic,
                p.partition,
                p.leader,
                p.leader_epoch,
                list(p.replicas),
                list(p.isr),
                None if hw is None else int(hw),
                replicas,
                under_replicated=not offline and len(p.isr) < len(p.replicas),
                offline=offline,
                reassigning=(p.topic, p.partition) in obs.reassigning,
            )
        )
    counters = _topic_counters(obs.metrics)
    seconds = (obs.taken_ms - previous.taken_ms) / 1000 if previous is not None else 0.0
    counts: dict[str, int] = {}
    for p in obs.partitions:
        counts[p.topic] = counts.get(p.topic, 0) + 1
    topics = []
    for topic in sorted(counts):
        now = counters.get(topic)
        before = previous.counters.get(topic) if previous is not None else None
        topics.append(
            TopicView(
                topic,
                counts[topic],
                None if now is None else _rate(now[0], before and before[0], seconds),
                None if now is None else _rate(now[1], before and before[1], seconds),
            )
        )
    groups = [_group_view(g, obs.metrics.get(g.coordinator, {})) for g in obs.groups]
    snapshot = Snapshot(
        obs.taken_ms,
        obs.controller_id,
        obs.controller_epoch,
        brokers,
        topics,
        partitions,
        sorted(groups, key=lambda g: g.group_id),
        counters=counters,
        transactions=_transaction_views(
            obs, {(p.topic, p.partition): p.leader for p in obs.partitions}
        ),
    )
    new_events = diff_events(previous, snapshot) if previous is not None else []
    kept = previous.events if previous is not None else []
    snapshot.events = (new_events[::-1] + kept)[:MAX_EVENTS]
    return snapshot


def _transaction_views(
    obs: Observation, leaders: Mapping[tuple[str, int], int]
) -> list[TransactionView]:
    """The open transactions, oldest first, each partition's LSO lag from its leader."""
    views = []
    for t in obs.transactions:
        lso_lag = {}
        for topic, partition in t.partitions:
            lag = sample(
                obs.metrics.get(leaders.get((topic, partition), -1), {}),
                "kafka_cluster_partition_laststableoffsetlag",
                topic=topic,
                partition=str(partition),
            )
            if lag is not None:
                lso_lag[f"{topic}-{partition}"] = int(lag)
        started = t.start_ms >= 0
        views.append(
            TransactionView(
                t.transactional_id,
                t.coordinator,
                t.producer_id,
                t.producer_epoch,
                t.state,
                t.timeout_ms,
                t.start_ms if started else None,
                max(obs.taken_ms - t.start_ms, 0) if started else None,
                [f"{topic}-{partition}" for topic, partition in t.partitions],
                lso_lag,
            )
        )
    return sorted(views, key=lambda v: (v.start_ms is None, v.start_ms or 0, v.transactional_id))


def _group_view(group: GroupInfo, samples: Samples) -> GroupView:
    partition_lag: dict[str, int] = {}
    for (name, labels), value in samples.items():
        if name != "kafka_consumergroup_lag":
            continue
        found = dict(labels)
        if found.get("consumergroup") == group.group_id:
            partition_lag[f"{found['topic']}-{found['partition']}"] = int(value)
    return GroupView(
        group.group_id,
        group.state,
        group.protocol_type,
        group.coordinator,
        [asdict(m) for m in group.members],
        sum(partition_lag.values()) if partition_lag else None,
        dict(sorted(partition_lag.items())),
    )


def diff_events(before: Snapshot, after: Snapshot) -> list[Event]:
    """What changed between two polls, oldest first."""
    at = after.taken_ms
    events: list[Event] = []
    if (after.controller_id, after.controller_epoch) != (
        before.controller_id,
        before.controller_epoch,
    ) and after.controller_id >= 0:
        epoch = "" if after.controller_epoch is None else f" (epoch {after.controller_epoch})"
        events.append(Event(at, "controller", f"broker {after.controller_id} is controller{epoch}"))
    was = {b.broker_id: b.alive for b in before.brokers}
    for b in after.brokers:
        if was.get(b.broker_id, False) and not b.alive:
            events.append(Event(at, "broker", f"broker {b.broker_id} left the cluster"))
        elif not was.get(b.broker_id, False) and b.alive:
            events.append(Event(at, "broker", f"broker {b.broker_id} joined the cluster"))
    old = {(p.topic, p.partition): p for p in before.partitions}
    for p in after.partitions:
        name = f"{p.topic}-{p.partition}"
        q = old.get((p.topic, p.partition))
        if q is None:
            continue
        if (p.leader, p.leader_epoch) != (q.leader, q.leader_epoch) and p.leader != q.leader:
            to = "no leader (offline)" if p.leader < 0 else f"broker {p.leader}"
            events.append(
                Event(at, "election", f"{name}: leader {q.leader} -> {to} (epoch {p.leader_epoch})")
            )
        if set(p.isr) != set(q.isr):
            gone = sorted(set(q.isr) - set(p.isr))
            came = sorted(set(p.isr) - set(q.isr))
            what = "; ".join(
                part
                for part in (
                    f"shrank, without {gone}" if gone else "",
                    f"expanded with {came}" if came else "",
                )
                if part
            )
            events.append(Event(at, "isr", f"{name}: ISR {what} -> {p.isr}"))
        if p.reassigning != q.reassigning:
            state = "started" if p.reassigning else "done"
            events.append(
                Event(at, "reassignment", f"{name}: reassignment {state}, replicas {p.replicas}")
            )
    return events


def parse_samples(families: Sequence[Any]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``prometheus_client.parser`` families -> ``Samples``."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in families:
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out
