"""The controller's elections: controlled shutdown (Kafka ``doControlledShutdown``),
preferred and unclean replica leader elections (KIP-460, ``onReplicaElection``),
unclean election switched on, and the auto leader rebalance.

Pure: see ``replog.controller.decisions``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from replog.controller.context import (
    NO_LEADER,
    ControllerContext,
    PartitionReplica,
    TopicPartition,
)
from replog.controller.effects import ControllerDecision
from replog.controller.state_machines import (
    ControlledShutdownElection,
    OfflineElection,
    PreferredReplicaElection,
    partition_state_change,
    replica_state_change,
)
from replog.controller.states import PartitionState, ReplicaState
from replog.zk.fencing import is_stale_broker_epoch

_P = PartitionState
_R = ReplicaState


@dataclass(frozen=True, slots=True)
class ControlledShutdownResult:
    """Answer to ControlledShutdown: ``remaining`` partitions still led by the broker."""

    error_code: int
    remaining: tuple[TopicPartition, ...]


def on_controlled_shutdown(
    context: ControllerContext, broker_id: int, broker_epoch: int
) -> tuple[ControllerDecision, ControlledShutdownResult]:
    """Kafka ``doControlledShutdown``: move leadership and ISR membership off a broker
    that asked to shut down. Partitions with a single replica are left alone.
    """
    d = ControllerDecision(context)
    ctx = d.context
    if broker_id not in ctx.live_brokers:
        return d, ControlledShutdownResult(ErrorCode.broker_not_available, ())
    if is_stale_broker_epoch(broker_epoch, ctx.broker_epoch(broker_id)):
        return d, ControlledShutdownResult(ErrorCode.stale_broker_epoch, ())
    ctx.shutting_down_broker_ids.add(broker_id)
    led: list[TopicPartition] = []
    followed: list[PartitionReplica] = []
    for replica in ctx.replicas_on_brokers((broker_id,)):
        tp = replica.topic_partition
        state = ctx.partition_leadership.get(tp)
        if tp[0] in ctx.topics_to_be_deleted or state is None or len(ctx.replicas_for(tp)) <= 1:
            continue
        if state.leader_and_isr.leader == broker_id:
            led.append(tp)
        else:
            followed.append(replica)
    partition_state_change(d, led, _P.OnlinePartition, ControlledShutdownElection())
    # Followers stop fetching (StopReplica without delete) and leave the ISR.
    replica_state_change(d, followed, _R.OfflineReplica)
    remaining = tuple(
        tp
        for tp in led
        if (state := ctx.partition_leadership.get(tp)) is not None
        and state.leader_and_isr.leader == broker_id
    )
    return d, ControlledShutdownResult(ErrorCode.none, remaining)


def on_preferred_replica_election(
    context: ControllerContext, partitions: Iterable[TopicPartition]
) -> ControllerDecision:
    """Kafka ``onReplicaElection`` with the preferred strategy: lead from the first
    assigned replica where it is live and in sync and not already leading (the
    decision of ``on_replica_election``, without the per-partition answers)."""
    return on_replica_election(context, partitions, PREFERRED_ELECTION)[0]


def on_unclean_leader_election_enable(
    context: ControllerContext, topics: Iterable[str] | None = None
) -> ControllerDecision:
    """Kafka ``processTopicUncleanLeaderElectionEnable`` (``topics``) and
    ``processUncleanLeaderElectionEnable`` (None: every topic): unclean election was just
    allowed, so the New and Offline partitions of those topics are elected again, each
    unclean where its topic now allows it (``context`` already holds the new setting)."""
    d = ControllerDecision(context)
    ctx = d.context
    wanted = None if topics is None else set(topics)
    candidates = [
        tp
        for tp, state in sorted(ctx.partition_states.items())
        if state in (_P.NewPartition, _P.OfflinePartition)
        and tp[0] not in ctx.topics_to_be_deleted
        and (wanted is None or tp[0] in wanted)
    ]
    partition_state_change(d, candidates, _P.OnlinePartition, OfflineElection())
    return d


# --- replica leader election (KIP-460) ------------------------------------------------

# ElectLeaders election_type (Kafka ``ElectionType``).
PREFERRED_ELECTION = 0
UNCLEAN_ELECTION = 1


@dataclass(frozen=True, slots=True)
class ElectionOutcome:
    """One partition's answer to a replica leader election: ``error_code`` NONE and the
    ``leader`` elected, or an error (Kafka's ``Either[ApiError, Int]``)."""

    error_code: int
    leader: int = -1
    message: str | None = None


def on_replica_election(
    context: ControllerContext, partitions: Iterable[TopicPartition], election_type: int
) -> tuple[ControllerDecision, dict[TopicPartition, ElectionOutcome]]:
    """Kafka ``processReplicaLeaderElection`` + ``onReplicaElection``.

    Preferred (0): partitions whose first assigned replica is not leading get it as
    leader when it is live and in the ISR (else PREFERRED_LEADER_NOT_AVAILABLE).
    Unclean (1): partitions without a live leader get the first live ISR member, or
    else the first live assigned replica (else ELIGIBLE_LEADERS_NOT_AVAILABLE).
    A partition that already has the leader the election would give is
    ELECTION_NOT_NEEDED; unknown partitions UNKNOWN_TOPIC_OR_PARTITION; partitions of
    topics being deleted INVALID_TOPIC_EXCEPTION. Nothing else changes.
    """
    if election_type not in (PREFERRED_ELECTION, UNCLEAN_ELECTION):
        raise ValueError(f"unknown election type {election_type}")
    d = ControllerDecision(context)
    ctx = d.context
    outcomes: dict[TopicPartition, ElectionOutcome] = {}
    electable: list[TopicPartition] = []
    live = ctx.live_broker_ids
    for raw_tp in sorted(set(partitions)):
        tp = TopicPartition(raw_tp[0], raw_tp[1])
        state = ctx.partition_leadership.get(tp)
        replicas = ctx.replicas_for(tp) if tp[0] in ctx.partition_assignments else ()
        if not replicas:
            outcomes[tp] = ElectionOutcome(
                ErrorCode.unknown_topic_or_partition, message="The partition does not exist."
            )
        elif tp[0] in ctx.topics_to_be_deleted:
            outcomes[tp] = ElectionOutcome(
                ErrorCode.invalid_topic_exception, message="The topic is being deleted"
            )
        elif election_type == PREFERRED_ELECTION:
            if state is not None and state.leader_and_isr.leader == replicas[0]:
                outcomes[tp] = ElectionOutcome(ErrorCode.election_not_needed)
            else:
                electable.append(tp)
        else:
            leader = state.leader_and_isr.leader if state is not None else NO_LEADER
            if leader != NO_LEADER and leader in live:
                outcomes[tp] = ElectionOutcome(ErrorCode.election_not_needed)
            else:
                electable.append(tp)
    if election_type == PREFERRED_ELECTION:
        # A partition not yet initialized (New) has no ISR to elect from.
        online = [tp for tp in electable if ctx.partition_state(tp) is not _P.NewPartition]
        failed = set(electable) - set(online)
        failed |= set(
            partition_state_change(d, online, _P.OnlinePartition, PreferredReplicaElection())
        )
        error = ErrorCode.preferred_leader_not_available
    else:
        failed = set(
            partition_state_change(
                d, electable, _P.OnlinePartition, OfflineElection(allow_unclean=True)
            )
        )
        error = ErrorCode.eligible_leaders_not_available
    for tp in electable:
        if tp in failed:
            outcomes[tp] = ElectionOutcome(
                error, message=f"Failed to elect leader for partition {tp[0]}-{tp[1]}"
            )
        else:
            outcomes[tp] = ElectionOutcome(
                ErrorCode.none, ctx.partition_leadership[tp].leader_and_isr.leader
            )
    return d, outcomes


def not_led_by_preferred_replica(context: ControllerContext) -> list[TopicPartition]:
    """Partitions (of topics not being deleted) whose first assigned replica is not the
    leader: what the IO layer re-reads from ZooKeeper before the auto rebalance, since
    the ISRs it knows may lag the leaders' (Kafka reads them before electing too)."""
    ctx = context
    return sorted(
        tp
        for tp, state in ctx.partition_leadership.items()
        if tp[0] not in ctx.topics_to_be_deleted
        and (replicas := ctx.replicas_for(tp))
        and state.leader_and_isr.leader != replicas[0]
    )


def auto_rebalance_candidates(
    context: ControllerContext, imbalance_percentage: int
) -> list[TopicPartition]:
    """Kafka ``checkAndTriggerAutoLeaderRebalance``: for every broker that is the
    preferred replica of some partitions, the share of those it does not lead; where
    that share is over ``leader.imbalance.per.broker.percentage``, its partitions whose
    preferred replica could lead now (live and in the ISR). Topics being deleted and
    partitions being reassigned are left alone (the reassignment itself moves their
    leadership to a target replica)."""
    ctx = context
    by_preferred: dict[int, list[TopicPartition]] = {}
    for tp in ctx.all_partitions():
        replicas = ctx.replicas_for(tp)
        if (
            replicas
            and tp[0] not in ctx.topics_to_be_deleted
            and tp not in ctx.partition_reassignments
        ):
            by_preferred.setdefault(replicas[0], []).append(tp)
    live = ctx.live_broker_ids
    candidates: list[TopicPartition] = []
    for preferred, tps in sorted(by_preferred.items()):
        not_led = [
            tp
            for tp in tps
            if (state := ctx.partition_leadership.get(tp)) is not None
            and state.leader_and_isr.leader != preferred
        ]
        if len(not_led) / len(tps) <= imbalance_percentage / 100:
            continue
        for tp in not_led:
            lai = ctx.partition_leadership[tp].leader_and_isr
            if preferred in live and preferred in lai.isr:
                candidates.append(tp)
    return sorted(candidates)


def on_auto_leader_rebalance(
    context: ControllerContext, imbalance_percentage: int
) -> ControllerDecision:
    """Kafka ``processAutoPreferredReplicaLeaderElection``: a preferred replica
    election for ``auto_rebalance_candidates``."""
    candidates = auto_rebalance_candidates(context, imbalance_percentage)
    return on_replica_election(context, candidates, PREFERRED_ELECTION)[0]
