"""The controller core's topic events: new and vanished topics, topic deletion and its
StopReplica answers, and unclean leader election switched on (per topic or by default),
sans-IO: every handler is a generator of ``replog.controller.core_requests``.

Concurrency: run by the driver's controller task, one event at a time.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING

from replog.controller import controller_zk, decisions
from replog.controller import events as ev
from replog.controller.core_election import remove_deletion_markers
from replog.controller.core_requests import Step, zk_call

if TYPE_CHECKING:
    from replog.controller.core import ControllerCore

log = logging.getLogger("replog.controller")


def process_topic_change(core: ControllerCore, _e: ev.TopicChange, started: float) -> Step[None]:
    if core.context is None:
        return
    topics = yield zk_call("get_all_topics")
    ctx = core.context
    new = topics - ctx.all_topics
    vanished = ctx.all_topics - topics
    # Known topics still without an id (one that could not be written before) too.
    idless = (ctx.all_topics & topics) - ctx.topic_ids.keys()
    if not (new or vanished or idless):
        return
    assignments = yield zk_call("get_topic_assignments", new)
    ids = yield zk_call(
        controller_zk.assign_topic_ids,
        assignments.keys() | idless,
        ctx.controller_epoch_zk_version,
    )
    overrides = yield zk_call(controller_zk.read_unclean_overrides, assignments, core.zk_timeout_s)
    ctx = ctx.copy()
    for topic in vanished:  # deleted behind the controller's back
        log.warning("controller: topic %s disappeared from ZooKeeper", topic)
        ctx.remove_topic(topic)
    ctx.unclean_leader_election_enable.update(overrides)
    ctx.topic_ids.update((t, ids[t]) for t in idless if t in ids)
    core.install(ctx)
    yield from core.operations.after_topic_change(assignments.keys(), vanished)
    if assignments:
        applied = yield from core.apply(
            partial(decisions.on_new_topics, assignments=assignments, topic_ids=ids),
            None,
            started,
        )
        yield from core.report(f"new topics {sorted(assignments)}", applied)


def process_topic_deletion(
    core: ControllerCore, _e: ev.TopicDeletion, started: float
) -> Step[None]:
    if core.context is None:
        return
    marked = yield zk_call("get_topics_marked_for_deletion")
    ctx = core.context
    if not core.config.delete_topic_enable:
        yield from remove_deletion_markers(core, marked)
        return
    unknown = marked - ctx.all_topics
    if unknown:
        yield from remove_deletion_markers(core, unknown)
    wanted = (marked & ctx.all_topics) - ctx.topics_to_be_deleted
    if wanted:
        log.info("controller: deleting topics %s", sorted(wanted))
        yield from core.apply(partial(decisions.on_topic_deletion, topics=wanted), None, started)


def process_stop_replica_response(
    core: ControllerCore, e: ev.TopicDeletionStopReplicaResponseReceived, started: float
) -> Step[None]:
    if core.context is None:
        return
    decide = partial(
        decisions.on_stop_replica_response,
        broker_id=e.replica_id,
        error_code=e.error_code,
        partition_errors=e.partition_errors,
    )
    yield from core.apply(decide, None, started)


def process_topic_unclean_election_enable(
    core: ControllerCore, e: ev.TopicUncleanLeaderElectionEnable, started: float
) -> Step[None]:
    if core.context is None or e.topic not in core.context.all_topics:
        return
    overrides = yield zk_call(controller_zk.read_unclean_overrides, [e.topic], core.zk_timeout_s)
    assert core.context is not None
    ctx = core.context.copy()
    ctx.unclean_leader_election_enable.pop(e.topic, None)
    ctx.unclean_leader_election_enable.update(overrides)
    core.install(ctx)
    if ctx.unclean_election_enabled(e.topic):
        applied = yield from core.apply(
            partial(decisions.on_unclean_leader_election_enable, topics={e.topic}),
            None,
            started,
        )
        yield from core.report(f"unclean leader election enabled for topic {e.topic}", applied)


def process_unclean_election_enable(
    core: ControllerCore, _e: ev.UncleanLeaderElectionEnable, started: float
) -> Step[None]:
    if core.context is None:
        return
    ctx = core.context.copy()
    ctx.default_unclean_leader_election_enable = core.unclean_leader_election_default()
    core.install(ctx)
    if ctx.default_unclean_leader_election_enable:
        applied = yield from core.apply(decisions.on_unclean_leader_election_enable, None, started)
        yield from core.report("unclean leader election enabled by default", applied)
