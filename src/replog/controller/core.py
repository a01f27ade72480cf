"""The controller core: one broker's controller without IO (Kafka ``KafkaController``'s
event processing, as h11's ``Connection`` is HTTP without sockets).

``ControllerCore.process(event, started)`` is a generator: it yields the requests of
``replog.controller.core_requests`` (a ZooKeeper call, requests to brokers, a reply once
they are acknowledged, a watch, a timer), receives their results and changes the
core's state. Both drivers run the same core: the broker's ``KafkaController`` (asyncio,
ZooKeeper calls in worker threads) and the simulator's world (synchronous, against its
simulated ZooKeeper and network), so every line of the controller's logic ships and is
simulated at once. The handlers live by role:

* ``core_election``: election, failover, resignation, session expiry;
* ``core_topics``: topic creation, deletion, unclean election switched on;
* ``core_brokers``: broker changes, ISR change notifications, failed log dirs;
* ``core_shutdown``: controlled shutdown, replica leader elections, auto rebalance;
* ``operations.ClusterOperations``: added partitions and reassignments;
* ``core_apply.DecisionExecutor``: the state and the one executor of decisions.

Concurrency: owned by the driver's controller task; one event at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from replog.config import KafkaConfig
from replog.controller import core_brokers, core_election, core_shutdown, core_topics, decisions
from replog.controller import events as ev
from replog.controller.core_apply import DecisionExecutor
from replog.controller.core_requests import Step
from replog.controller.operations import ClusterOperations
from replog.zk.fencing import ControllerMovedError

log = logging.getLogger("replog.controller")

NOT_CONTROLLER = core_shutdown.NOT_CONTROLLER

Handler = Callable[[Any, Any, float], Step[None]]

HANDLERS: dict[type, Handler] = {
    ev.Startup: core_election.process_startup,
    ev.ControllerChange: core_election.process_controller_change,
    ev.Reelect: core_election.process_reelect,
    ev.Expire: core_election.process_expire,
    ev.RegisterBrokerAndReelect: core_election.process_register_broker_and_reelect,
    ev.BrokerChange: core_brokers.process_broker_change,
    ev.IsrChangeNotification: core_brokers.process_isr_change,
    ev.LogDirEventNotification: core_brokers.process_log_dir_event,
    ev.LeaderAndIsrResponseReceived: core_brokers.process_leader_and_isr_response,
    ev.TopicChange: core_topics.process_topic_change,
    ev.TopicDeletion: core_topics.process_topic_deletion,
    ev.TopicDeletionStopReplicaResponseReceived: core_topics.process_stop_replica_response,
    ev.TopicUncleanLeaderElectionEnable: core_topics.process_topic_unclean_election_enable,
    ev.UncleanLeaderElectionEnable: core_topics.process_unclean_election_enable,
    ev.ControlledShutdown: core_shutdown.process_controlled_shutdown,
    ev.ReplicaLeaderElection: core_shutdown.process_replica_leader_election,
    ev.AutoPreferredReplicaLeaderElection: core_shutdown.process_auto_preferred_election,
}


class ControllerCore(DecisionExecutor):
    """One broker's controller, sans-IO; see the module docstring."""

    def __init__(
        self,
        broker_id: int,
        config: KafkaConfig,
        unclean_leader_election_default: Callable[[], bool] | None = None,
    ) -> None:
        super().__init__(broker_id, config, unclean_leader_election_default)
        self.operations = ClusterOperations(self)
        """Added partitions and replica reassignments (their events and hooks)."""
        self._operation_handlers = self.operations.handlers()

    def process(self, event: ev.ControllerEvent, started: float) -> Step[None]:
        """Handle one event (``started``: when it was enqueued, by the driver's clock).
        Fenced by a newer controller (``ControllerMovedError``): resign (Kafka)."""
        handler = HANDLERS.get(type(event))
        try:
            if handler is not None:
                yield from handler(self, event, started)
            elif type(event) in self._operation_handlers:
                yield from self._operation_handlers[type(event)](event, started)
            else:
                log.info("controller: %s is not handled", type(event).__name__)
        except ControllerMovedError as exc:
            log.warning("broker %d: controller moved (%s): resigning", self.broker_id, exc)
            yield from core_election.maybe_resign(self)

    def resign(self) -> Step[None]:
        """Step down (the broker stops): forget the term, end its watches and channels."""
        yield from core_election.on_controller_resignation(self)

    def preempt(self, event: ev.ControllerEvent) -> None:
        """Answer a request-driven event dropped from the queue (Kafka ``preempt``)."""
        if self.operations.preempt(event):
            return
        if isinstance(event, ev.ControlledShutdown) and event.callback is not None:
            event.callback(decisions.ControlledShutdownResult(NOT_CONTROLLER, ()))
        elif isinstance(event, ev.ReplicaLeaderElection) and event.callback is not None:
            event.callback(None)
