"""The JSON of the notification and admin request znodes (Kafka ``ZkData.scala``):
written by one party (a broker, an operator's tool) for the controller to pick up.

=========================================  ===============================================
path                                       data
=========================================  ===============================================
``/isr_change_notification/isr_change_N``  ``{"version":1,"partitions":[{"topic":..,
                                           "partition":..}]}``
``/log_dir_event_notification/``           ``{"version":1,"broker":1,"event":1}`` (event 1:
``log_dir_event_N``                         a log dir of that broker failed)
``/admin/preferred_replica_election``       ``{"version":1,"partitions":[{"topic":..,
                                           "partition":..}]}``
``/admin/reassign_partitions``              ``{"version":1,"partitions":[{"topic":..,
                                           "partition":..,"replicas":[..]}]}``
=========================================  ===============================================

Their paths are in ``replog.zk.data``, with every other path. No IO here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from replog.zk.data import TopicPartition, ZkDataError, _dumps, _loads

ISR_CHANGE_VERSION = 1
PREFERRED_REPLICA_ELECTION_VERSION = 1
REASSIGN_PARTITIONS_VERSION = 1


# --- ISR change notifications ------------------------------------------------------------


def encode_isr_change(partitions: Iterable[TopicPartition]) -> bytes:
    return _dumps(
        {
            "version": ISR_CHANGE_VERSION,
            "partitions": [{"topic": t, "partition": p} for t, p in sorted(set(partitions))],
        }
    )


def decode_isr_change(data: bytes) -> set[TopicPartition]:
    js = _loads(data, "isr change notification")
    return {(str(e["topic"]), int(e["partition"])) for e in js.get("partitions", [])}


# --- log dir event notifications (KIP-112) --------------------------------------------------

LOG_DIR_EVENT_VERSION = 1
LOG_DIR_FAILURE_EVENT = 1
"""Kafka ``LogDirEventNotificationHandler.LogDirFailureEvent``, the only event there is."""


def encode_log_dir_event(broker_id: int) -> bytes:
    """Kafka ``LogDirEventNotificationSequenceZNode.encode``: a log dir of ``broker_id``
    failed."""
    return _dumps(
        {"version": LOG_DIR_EVENT_VERSION, "broker": broker_id, "event": LOG_DIR_FAILURE_EVENT}
    )


def decode_log_dir_event(data: bytes) -> int | None:
    """The broker a log dir event names, or None for an event other than a failure."""
    js = _loads(data, "log dir event notification")
    try:
        if int(js.get("event", LOG_DIR_FAILURE_EVENT)) != LOG_DIR_FAILURE_EVENT:
            return None
        return int(js["broker"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ZkDataError(f"log dir event notification: {data!r}") from exc


# --- preferred replica election ------------------------------------------------------------


def encode_preferred_replica_election(partitions: Iterable[TopicPartition]) -> bytes:
    """Kafka ``PreferredReplicaElectionZNode.encode`` (what kafka-preferred-replica-election
    writes)."""
    return _dumps(
        {
            "version": PREFERRED_REPLICA_ELECTION_VERSION,
            "partitions": [{"topic": t, "partition": p} for t, p in sorted(set(partitions))],
        }
    )


def decode_preferred_replica_election(data: bytes) -> set[TopicPartition]:
    js = _loads(data, "preferred replica election")
    try:
        return {(str(e["topic"]), int(e["partition"])) for e in js.get("partitions", [])}
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ZkDataError(f"preferred replica election: {data!r}") from exc


# --- partition reassignment ----------------------------------------------------------------


def encode_reassign_partitions(reassignments: Mapping[TopicPartition, Iterable[int]]) -> bytes:
    """Kafka ``ReassignPartitionsZNode.encode`` (what kafka-reassign-partitions writes)."""
    return _dumps(
        {
            "version": REASSIGN_PARTITIONS_VERSION,
            "partitions": [
                {"topic": t, "partition": p, "replicas": list(replicas)}
                for (t, p), replicas in sorted(reassignments.items())
            ],
        }
    )


def decode_reassign_partitions(data: bytes) -> dict[TopicPartition, tuple[int, ...]]:
    js = _loads(data, "reassign partitions")
    try:
        return {
            (str(e["topic"]), int(e["partition"])): tuple(int(r) for r in e["replicas"])
            for e in js.get("partitions", [])
        }
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ZkDataError(f"reassign partitions: {data[:200]!r}") from exc
