"""The controller core's broker and ISR events: brokers registered or gone, ISR change
notifications, failed log dirs and the LeaderAndIsr answers that name one, sans-IO:
every handler is a generator of ``replog.controller.core_requests``.

Concurrency: run by the driver's controller task, one event at a time.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING

from replog.controller import decisions
from replog.controller import events as ev
from replog.controller.core_requests import ApplyRecord, LetSendersRun, Step, zk_call

if TYPE_CHECKING:
    from replog.controller.core import ControllerCore

log = logging.getLogger("replog.controller")


def process_broker_change(core: ControllerCore, _e: ev.BrokerChange, started: float) -> Step[None]:
    if core.context is None:
        return
    registered = yield zk_call("get_all_brokers")
    changes = decisions.broker_changes(core.context, registered)
    if not changes:
        return
    yield from core.refresh(decisions.partitions_to_refresh(core.context, changes))
    # Two decisions, as Kafka's onReplicasBecomeOffline: the new leaders are written
    # and told first, then the failed brokers leave the other partitions' ISRs.
    record = ApplyRecord(started)
    steps = decisions.broker_change_steps(changes, registered)
    for i, step in enumerate(steps):
        decide = step.decide
        if step.told:
            decide = partial(decide, told=sorted(record.update_metadata_sent))
        yield from core.apply(decide, step.retry, started, record)
        if i == 0 and len(steps) > 1:  # the new leaders' part, timed on its own
            record.new_leaders = list(record.leader_and_isr)
            record.new_leaders_zk_writes_s = record.zk_writes_s
            # Let the channels' sender tasks take the new leaders' requests now:
            # otherwise they wait until the next decision is made and awaits its
            # writes (about 0.05 s at 10,000 partitions).
            yield LetSendersRun()
    yield from core.report(changes.describe(), record)


def process_isr_change(
    core: ControllerCore, _e: ev.IsrChangeNotification, started: float
) -> Step[None]:
    if core.context is None:
        return
    names = yield zk_call("get_isr_change_notifications")
    if not names:
        return
    try:
        changed = yield zk_call("read_isr_change_notifications", names)
        assert core.context is not None
        known = sorted(tp for tp in changed if tp[0] in core.context.all_topics)
        fresh = yield zk_call("get_partition_states", known)
        yield from core.apply(partial(decisions.on_isr_change, fresh_states=fresh), None, started)
        yield from core.operations.after_isr_change(fresh, started)
    finally:
        if core.context is not None:
            yield zk_call(
                "delete_isr_change_notifications", names, core.context.controller_epoch_zk_version
            )


def process_log_dir_event(
    core: ControllerCore, _e: ev.LogDirEventNotification, started: float
) -> Step[None]:
    """Kafka ``processLogDirEventNotification``."""
    if core.context is None:
        return
    names = yield zk_call("get_log_dir_event_notifications")
    if not names:
        return
    try:
        brokers = yield zk_call("read_log_dir_event_notifications", names)
        log.warning("controller: log dir failure on brokers %s", sorted(brokers))
        applied = yield from core.apply(
            partial(decisions.on_broker_log_dir_failure, broker_ids=brokers), None, started
        )
        yield from core.report(f"log dir failure on brokers {sorted(brokers)}", applied)
    finally:
        if core.context is not None:
            yield zk_call(
                "delete_log_dir_event_notifications",
                names,
                core.context.controller_epoch_zk_version,
            )


def process_leader_and_isr_response(
    core: ControllerCore, e: ev.LeaderAndIsrResponseReceived, started: float
) -> Step[None]:
    if core.context is None:
        return
    if e.offline:
        # Kafka re-reads the partition states before taking replicas out of their ISRs
        # (``removeReplicasFromIsr``): the ISRs this context holds lag the leaders' by up
        # to one ISR change notification, and a replica the leader added meanwhile would
        # stay in the ISR, offline (found by the simulator's "disks" profile).
        yield from core.refresh(e.offline)
        if core.context is None:
            return
    d, offline = decisions.on_leader_and_isr_response(
        core.context, e.broker_id, e.broker_epoch, e.offline, e.online
    )
    if not offline:
        core.install(d.context)  # only what is known offline changed
        return
    applied = yield from core.apply(
        lambda _ctx: d,
        partial(decisions.redo_replicas_offline, replicas=offline),
        started,
    )
    yield from core.report(
        f"{len(offline)} replicas of broker {e.broker_id} in a failed log dir", applied
    )
