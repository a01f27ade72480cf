"""The controller's decisions, one pure function per event (Kafka ``KafkaController``'s
``onControllerFailover``, ``onBrokerStartup``, ``onBrokerFailure``,
``onNewPartitionCreation``, topic deletion, ISR change and controlled shutdown).

Each function takes the current ``ControllerContext`` (not mutated) and the event's data
already read from ZooKeeper, and returns a ``ControllerDecision``: the new context, the
ZooKeeper writes to make in one batch, and the requests to send per broker. See
``replog.controller.effects`` for how the IO layer applies a decision.

No IO, no clock, no randomness: the same context and inputs give the same decision.

The decisions live by role, and this module is their public face:

* ``decisions_brokers``: failover, broker changes, broker startup and failure;
* ``decisions_replicas``: states read back (``refreshed``), ISR changes, failed log dirs;
* ``decisions_topics``: topic creation and deletion;
* ``decisions_elections``: controlled shutdown, replica leader elections, auto rebalance.
"""

from __future__ import annotations

from replog.controller.decisions_brokers import (
    BrokerChanges,
    BrokerChangeStep,
    Decide,
    Retry,
    broker_change_steps,
    broker_changes,
    on_broker_change,
    on_broker_change_leaders,
    on_broker_change_replicas,
    on_broker_failure,
    on_broker_startup,
    on_controller_failover,
    partitions_to_refresh,
    redo_broker_change,
    restarted_in_sync_replicas,
)
from replog.controller.decisions_elections import (
    PREFERRED_ELECTION,
    UNCLEAN_ELECTION,
    ControlledShutdownResult,
    ElectionOutcome,
    auto_rebalance_candidates,
    not_led_by_preferred_replica,
    on_auto_leader_rebalance,
    on_controlled_shutdown,
    on_preferred_replica_election,
    on_replica_election,
    on_unclean_leader_election_enable,
)
from replog.controller.decisions_replicas import (
    on_broker_log_dir_failure,
    on_isr_change,
    on_leader_and_isr_response,
    redo_replicas_offline,
    refreshed,
    replicas_become_offline,
)
from replog.controller.decisions_topics import (
    on_new_topics,
    on_stop_replica_response,
    on_topic_deletion,
)

__all__ = [
    "BrokerChangeStep",
    "BrokerChanges",
    "ControlledShutdownResult",
    "Decide",
    "ElectionOutcome",
    "PREFERRED_ELECTION",
    "Retry",
    "UNCLEAN_ELECTION",
    "auto_rebalance_candidates",
    "broker_change_steps",
    "broker_changes",
    "not_led_by_preferred_replica",
    "on_auto_leader_rebalance",
    "on_broker_change",
    "on_broker_change_leaders",
    "on_broker_change_replicas",
    "on_broker_failure",
    "on_broker_log_dir_failure",
    "on_broker_startup",
    "on_controlled_shutdown",
    "on_controller_failover",
    "on_isr_change",
    "on_leader_and_isr_response",
    "on_new_topics",
    "on_preferred_replica_election",
    "on_replica_election",
    "on_stop_replica_response",
    "on_topic_deletion",
    "on_unclean_leader_election_enable",
    "partitions_to_refresh",
    "redo_broker_change",
    "redo_replicas_offline",
    "refreshed",
    "replicas_become_offline",
    "restarted_in_sync_replicas",
]
