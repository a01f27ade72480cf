"""The controller core's election, failover and resignation (Kafka ``KafkaController``'s
``elect``, ``onControllerFailover``, ``onControllerResignation``, ``maybeResign`` and the
session events ``Expire`` / ``RegisterBrokerAndReelect``), sans-IO: every handler is a
generator of ``replog.controller.core_requests``.

Concurrency: run by the driver's controller task, one event at a time.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from replog.controller import controller_zk, decisions
from replog.controller import events as ev
from replog.controller.core_apply import rerun_failure
from replog.controller.core_requests import (
    EndTerm,
    Enqueue,
    ReadClock,
    ReadWallClockMs,
    RegisterBroker,
    ScheduleAutoRebalance,
    Step,
    WatchCluster,
    WatchController,
    zk_call,
)
from replog.zk.fencing import ControllerEpoch, ControllerMovedError
from replog.zk.ops import UNREACHABLE

if TYPE_CHECKING:
    from replog.controller.core import ControllerCore

log = logging.getLogger("replog.controller")


def process_startup(core: ControllerCore, _e: ev.Startup, started: float) -> Step[None]:
    yield WatchController()
    yield from process_reelect(core, None, started)


def elect(core: ControllerCore) -> Step[None]:
    """Kafka ``elect``: create ``/controller`` (bumping the controller epoch) unless
    another broker holds it; fail over if this broker won.

    ``/controller`` naming this broker while it does not act as controller is a claim
    a resignation could not remove (``trigger_controller_move``): it is given up, and
    its deletion runs the election again (the ``/controller`` watch's ``Reelect``)."""
    current = yield zk_call("get_controller_id")
    if current == core.broker_id and not core.is_active:
        log.info("broker %d: /controller names this broker, not controller", core.broker_id)
        core.active_controller_id = -1
        yield from give_up_controller(core)
        return
    if current is not None:
        core.active_controller_id = current
        log.debug("broker %d: broker %d is controller", core.broker_id, current)
        return
    try:
        now_ms = yield ReadWallClockMs()
        epoch = yield zk_call("register_controller_and_increment_epoch", core.broker_id, now_ms)
    except ControllerMovedError:
        current = yield zk_call("get_controller_id")
        core.active_controller_id = -1 if current is None else current
        log.info("broker %d: lost the election to broker %s", core.broker_id, current)
        return
    core.active_controller_id = core.broker_id
    log.info("broker %d: elected controller at epoch %d", core.broker_id, epoch.epoch)
    try:
        yield from on_controller_failover(core, epoch)
    except Exception:
        log.exception("broker %d: controller failover failed: resigning", core.broker_id)
        yield from trigger_controller_move(core)


def trigger_controller_move(core: ControllerCore) -> Step[None]:
    """Kafka ``triggerControllerMove``: resign and give ``/controller`` up, so that the
    brokers (this one included) elect a controller afresh."""
    core.active_controller_id = -1
    yield from on_controller_resignation(core)
    yield from give_up_controller(core)


def give_up_controller(core: ControllerCore) -> Step[None]:
    """Delete ``/controller`` if this broker's session holds it (Kafka
    ``deleteController``); its deletion wakes every broker's watch.

    Kafka's ZooKeeper client waits for the connection; replog's calls give up after
    ``zookeeper.connection.timeout.ms``, and the session may outlive that. The claim
    then stays, held by a live session: no watch would ever fire and no broker would
    run again. So a failed delete runs the election again (``Reelect``, behind the
    events queued meanwhile), which gives the claim up once ZooKeeper answers; a lost
    session takes the claim with it, and its ``Expire`` empties the queue."""
    try:
        yield zk_call("delete_controller", core.broker_id)
    except UNREACHABLE as exc:
        log.warning(
            "broker %d: could not delete /controller (%s): running for election again",
            core.broker_id,
            exc,
        )
        yield Enqueue(ev.Reelect())


def on_controller_failover(core: ControllerCore, epoch: ControllerEpoch) -> Step[None]:
    """Kafka ``onControllerFailover``: watch, load everything, tell every broker."""
    config = core.config
    started = yield ReadClock()
    yield WatchCluster()
    names = yield zk_call("get_isr_change_notifications")
    yield zk_call("delete_isr_change_notifications", names, epoch.zk_version)
    ctx = yield zk_call(
        controller_zk.load_context,
        core.broker_id,
        epoch,
        core.unclean_leader_election_default(),
        core.zk_timeout_s,
    )
    ctx.topic_ids = yield zk_call(controller_zk.assign_topic_ids, ctx.all_topics, epoch.zk_version)
    ctx.inter_broker_listener = config.inter_broker_listener_name.upper()
    # Active (``is_active``) only once the context is whole, topic ids included.
    core.install(ctx)
    ignored_deletions: set[str] = set()
    if not config.delete_topic_enable:  # Kafka: drop the markers, delete nothing
        ignored_deletions, ctx.topics_to_be_deleted = ctx.topics_to_be_deleted, set()
    what = f"failover to broker {core.broker_id} at epoch {epoch.epoch}"
    log.info(
        "controller: %s: %d brokers, %d topics, %d partitions loaded in %.2f s",
        what,
        len(ctx.live_brokers),
        len(ctx.all_topics),
        len(ctx.partition_leadership),
        (yield ReadClock()) - started,
    )
    applied = yield from core.apply(decisions.on_controller_failover, rerun_failure, started)
    yield from core.report(what, applied)
    yield from core.operations.after_failover(started)
    if config.auto_leader_rebalance_enable:
        yield ScheduleAutoRebalance()
    if ignored_deletions:
        yield from remove_deletion_markers(core, ignored_deletions)


def remove_deletion_markers(core: ControllerCore, topics: set[str]) -> Step[None]:
    assert core.context is not None
    version = core.context.controller_epoch_zk_version
    for topic in sorted(topics):
        log.info("controller: removing deletion marker of topic %s", topic)
        yield zk_call("remove_deletion_marker", topic, version)


def on_controller_resignation(core: ControllerCore) -> Step[None]:
    """Kafka ``onControllerResignation``: forget everything of the term."""
    core.operations.on_resignation()
    if core.context is not None:
        log.info("broker %d: resigned as controller", core.broker_id)
    core.context = None
    yield EndTerm()


def maybe_resign(core: ControllerCore) -> Step[None]:
    """Kafka ``maybeResign``: step down if ZooKeeper names another controller."""
    was_active = core.is_active
    current = yield zk_call("get_controller_id")
    core.active_controller_id = -1 if current is None else current
    if was_active and current != core.broker_id:
        yield from on_controller_resignation(core)
    elif was_active and current == core.broker_id:
        # Fenced by a newer epoch while still holding /controller: give it up.
        yield from trigger_controller_move(core)


def process_controller_change(
    core: ControllerCore, _e: ev.ControllerChange | None, _started: float
) -> Step[None]:
    current = yield zk_call("get_controller_id")
    core.active_controller_id = -1 if current is None else current
    if core.is_active and current != core.broker_id:
        yield from on_controller_resignation(core)


def process_reelect(core: ControllerCore, _e: ev.Reelect | None, started: float) -> Step[None]:
    """Kafka ``Reelect``. An election that could not reach ZooKeeper is run again
    (behind the events queued meanwhile): ``/controller`` may be gone with nobody
    elected, or still be this broker's unremoved claim (``give_up_controller``), and
    no watch would fire again in either case. Each attempt waits for ZooKeeper for
    ``zookeeper.connection.timeout.ms`` before it fails."""
    try:
        yield from process_controller_change(core, None, started)
        yield from elect(core)
    except UNREACHABLE as exc:
        if core.is_active:
            raise
        core.active_controller_id = -1
        log.warning(
            "broker %d: election could not reach ZooKeeper (%s): running again",
            core.broker_id,
            exc,
        )
        yield Enqueue(ev.Reelect())


def process_expire(core: ControllerCore, _e: ev.Expire, _started: float) -> Step[None]:
    # No ZooKeeper calls: the session is gone. Step down at once.
    core.active_controller_id = -1
    if core.is_active:
        log.warning("broker %d: ZooKeeper session expired: resigning", core.broker_id)
        yield from on_controller_resignation(core)


def process_register_broker_and_reelect(
    core: ControllerCore, _e: ev.RegisterBrokerAndReelect, started: float
) -> Step[None]:
    yield RegisterBroker()
    yield from process_reelect(core, None, started)
