"""The controller core's leadership moves asked for: controlled shutdown, replica leader
elections (ElectLeaders, ``/admin/preferred_replica_election``) and the auto leader
rebalance, sans-IO: every handler is a generator of ``replog.controller.core_requests``.

Concurrency: run by the driver's controller task, one event at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from replog.controller import decisions
from replog.controller import events as ev
from replog.controller.context import ControllerContext, TopicPartition
from replog.controller.core_requests import ApplyRecord, Step, zk_call
from replog.controller.effects import ControllerDecision
from replog.zk import data as zd

if TYPE_CHECKING:
    from replog.controller.core import ControllerCore

log = logging.getLogger("replog.controller")

NOT_CONTROLLER = 41  # Kafka Errors.NOT_CONTROLLER


def process_controlled_shutdown(
    core: ControllerCore, e: ev.ControlledShutdown, started: float
) -> Step[None]:
    answer = decisions.ControlledShutdownResult(NOT_CONTROLLER, ())
    applied: ApplyRecord | None = None
    try:
        if core.context is not None:
            results: list[decisions.ControlledShutdownResult] = []

            def decide(ctx: ControllerContext) -> ControllerDecision:
                d, result = decisions.on_controlled_shutdown(ctx, e.broker_id, e.broker_epoch)
                results.append(result)
                return d

            applied = yield from core.apply(decide, lambda ctx, _stale: decide(ctx), started)
            answer = results[-1]
            log.info(
                "controller: controlled shutdown of broker %d (epoch %d): error %d, "
                "%d partitions still led by it",
                e.broker_id,
                e.broker_epoch,
                answer.error_code,
                len(answer.remaining),
            )
            yield from core.report(f"controlled shutdown of broker {e.broker_id}", applied)
    finally:
        # Answer once the new leaders acknowledged (off the event task), so the broker
        # closes its listeners only after clients can find them.
        yield from core.reply(e.callback, answer, applied)


def process_replica_leader_election(
    core: ControllerCore, e: ev.ReplicaLeaderElection, started: float
) -> Step[None]:
    outcomes: dict[TopicPartition, decisions.ElectionOutcome] | None = None
    applied: ApplyRecord | None = None
    try:
        if core.context is None:
            return
        if e.trigger is ev.ElectionTrigger.ZK:
            try:
                listed = yield zk_call("get_preferred_replica_election")
            except zd.ZkDataError as exc:  # Kafka logs and drops a malformed request
                log.error("controller: ignoring /admin/preferred_replica_election: %s", exc)
                listed = set()
            if listed is None:
                return
            partitions = frozenset(TopicPartition(t, p) for t, p in listed)
        else:
            partitions = e.partitions or frozenset()
        # Kafka reads the partition states before electing: the ISRs this context
        # holds lag the leaders' by up to one ISR change notification.
        yield from core.refresh(partitions)
        found: dict[TopicPartition, decisions.ElectionOutcome] = {}
        outcomes = found

        def decide(ctx: ControllerContext, tps: Iterable[TopicPartition]) -> ControllerDecision:
            d, result = decisions.on_replica_election(ctx, tps, e.election_type)
            found.update(result)
            return d

        applied = yield from core.apply(partial(decide, tps=partitions), decide, started)
        errors = {
            tp: o.error_code
            for tp, o in found.items()
            if o.error_code not in (ErrorCode.none, ErrorCode.election_not_needed)
        }
        what = "preferred" if e.election_type == decisions.PREFERRED_ELECTION else "unclean"
        yield from core.report(f"{what} replica leader election by {e.trigger.value}", applied)
        if errors:
            log.warning("controller: %s election failed for %s", what, sorted(errors.items()))
        if e.trigger is ev.ElectionTrigger.ZK:
            assert core.context is not None
            yield zk_call(
                "delete_preferred_replica_election", core.context.controller_epoch_zk_version
            )
    finally:
        yield from core.reply(e.callback, outcomes, applied)


def process_auto_preferred_election(
    core: ControllerCore, _e: ev.AutoPreferredReplicaLeaderElection, started: float
) -> Step[None]:
    if core.context is None:
        return
    percentage = core.config.leader_imbalance_per_broker_percentage
    yield from core.refresh(decisions.not_led_by_preferred_replica(core.context))
    if core.context is None or not decisions.auto_rebalance_candidates(core.context, percentage):
        return
    applied = yield from core.apply(
        partial(decisions.on_auto_leader_rebalance, imbalance_percentage=percentage),
        None,
        started,
    )
    yield from core.report("auto leader rebalance", applied)
