"""The admin workload: scratch topics created, given a second partition and deleted, in a
loop, while the faults happen.

Each operation is recorded as an ``admin`` event: ``invoke``, then ``ok`` or ``fail``
with the error's name and whether Kafka counts it retriable::

    {"type": "admin", "phase": "fail", "op": "create", "topic": "scratch-3", "attempt": 1,
     "error": "...", "code": "REQUEST_TIMED_OUT", "retriable": true}

A retriable failure is retried (up to ``ATTEMPTS`` times). The checker
(``chaos.checker``) accepts retriable errors, the "already done" answer to a retry whose
earlier attempt may have succeeded (``ALREADY_DONE``), and INVALID_REPLICATION_FACTOR
while a fault keeps a broker away (Kafka's answer when fewer brokers are registered than
the replication factor); any other error is an anomaly, as is a broker that exited.

Concurrency: one thread of its own; it only appends to the History.
"""

from __future__ import annotations

import threading

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from chaos.history import History
from chaos.workload import CLIENT_LOGGER

ATTEMPTS = 8
# Kafka's RetriableException family, and librdkafka's local transport and timeout errors
RETRIABLE = frozenset(
    {
        "REQUEST_TIMED_OUT",
        "NOT_CONTROLLER",
        "NETWORK_EXCEPTION",
        "LEADER_NOT_AVAILABLE",
        "NOT_LEADER_OR_FOLLOWER",
        "UNKNOWN_TOPIC_OR_PART",
        "NOT_ENOUGH_REPLICAS",
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        "KAFKA_STORAGE_ERROR",
        "COORDINATOR_NOT_AVAILABLE",
        "NOT_COORDINATOR",
        "COORDINATOR_LOAD_IN_PROGRESS",
        "REBALANCE_IN_PROGRESS",
        "UNKNOWN_TOPIC_ID",
        "THROTTLING_QUOTA_EXCEEDED",
        "_TIMED_OUT",
        # timed out before it could be sent: the controller was fenced or moving (seen under
        # two controller session expiries in a row, seed 104 --dense)
        "_TIMED_OUT_QUEUE",
        "_TRANSPORT",
        "_ALL_BROKERS_DOWN",
        "_MSG_TIMED_OUT",
        "_WAIT_COORD",
    }
)
# the answer to a retry whose earlier attempt took effect after all
ALREADY_DONE = {
    "create": "TOPIC_ALREADY_EXISTS",
    "delete": "UNKNOWN_TOPIC_OR_PART",
    "create-partitions": "INVALID_PARTITIONS",
}


# answered, as Kafka does, while fewer brokers are registered than the replication factor
DEGRADED = "INVALID_REPLICATION_FACTOR"
# how long after a heal a broker may still be missing (a paused one re-registers)
DEGRADED_AFTER_HEAL_S = 10.0


def accepted(op: str, code: str, attempt: int, degraded: bool = False) -> bool:
    """Whether an admin error is one a client must expect under faults; ``degraded``: a
    fault was active (or healed less than ``DEGRADED_AFTER_HEAL_S`` ago)."""
    return (
        code in RETRIABLE
        or (code == ALREADY_DONE[op] and attempt > 1)
        or (code == DEGRADED and degraded)
    )


class AdminWorkload:
    def __init__(self, history: History, bootstrap: str, pause_s: float = 0.5) -> None:
        self.history = history
        self.bootstrap = bootstrap
        self.pause_s = pause_s
        self.done = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-admin", daemon=True)

    def _run(self) -> None:
        admin = AdminClient(
            {
                "bootstrap.servers": self.bootstrap,
                "socket.timeout.ms": 5000,
                "logger": CLIENT_LOGGER,
            }
        )
        number = 0
        while not self._stop.is_set():
            name = f"scratch-{number}"
            number += 1

            def create(name=name):
                topic = NewTopic(name, 1, 3, config={"min.insync.replicas": "2"})
                return admin.create_topics([topic], operation_timeout=10, request_timeout=15)

            def grow(name=name):
                return admin.create_partitions([NewPartitions(name, 2)], request_timeout=15)

            def delete(name=name):
                return admin.delete_topics([name], operation_timeout=10, request_timeout=15)

            if self._op("create", name, create) and self._op("create-partitions", name, grow):
                self._op("delete", name, delete)
            self._stop.wait(self.pause_s)

    def _op(self, op: str, topic: str, call) -> bool:
        """Run ``op`` until it succeeds, fails for good, or runs out of attempts."""
        for attempt in range(1, ATTEMPTS + 1):
            self.history.append("admin", phase="invoke", op=op, topic=topic, attempt=attempt)
            try:
                call()[topic].result(timeout=30)
            except (KafkaException, TimeoutError) as exc:
                if isinstance(exc, KafkaException):
                    err: KafkaError = exc.args[0]
                    code, error = err.name(), str(err)
                else:  # the future itself gave up waiting
                    code, error = "_TIMED_OUT", repr(exc)
                self.history.append(
                    "admin",
                    phase="fail",
                    op=op,
                    topic=topic,
                    attempt=attempt,
                    error=error,
                    code=code,
                    retriable=code in RETRIABLE,
                )
                if accepted(op, code, attempt) and code not in RETRIABLE:
                    return True
                if code not in RETRIABLE or self._stop.wait(0.5):
                    return False
                continue
            self.history.append("admin", phase="ok", op=op, topic=topic, attempt=attempt)
            self.done += 1
            return True
        return False

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
