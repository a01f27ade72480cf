"""What the controller core asks its driver to do (the sans-IO seam of the controller).

The core's event handlers (``replog.controller.core``) are generators: they ``yield``
one of the requests below and receive its result through ``send()`` (or its error
through ``throw()``), as sans-IO libraries do. Two drivers carry the requests out:
``KafkaController`` (a ZooKeeper call in a worker thread, requests to brokers through
the channel manager, timers on the event loop) and the simulator's world (the same
calls, synchronously, against its simulated ZooKeeper and network). Every rule of the
controller, its write / install / send / re-read / retry loop included, is in the core;
a driver only carries out what it is asked, in order.

Concurrency: a request is carried out before the next one is asked for; nothing else
touches the core meanwhile (it is owned by the driver's one controller task).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from replog.controller.effects import ControllerDecision
from replog.controller.events import ControllerEvent

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ZkCall:
    """A blocking ZooKeeper call: ``zk.<target>(*args)`` when ``target`` is a method
    name of ``KafkaZkClient``, else ``target(zk, *args)`` (``controller_zk``'s helpers).
    Its result is sent back; its exception (``ControllerMovedError``, kazoo's errors) is
    thrown into the handler."""

    target: str | Callable[..., Any]
    args: tuple[Any, ...] = ()

    def run(self, zk: Any) -> Any:
        if isinstance(self.target, str):
            return getattr(zk, self.target)(*self.args)
        return self.target(zk, *self.args)


def zk_call(target: str | Callable[..., Any], *args: Any) -> ZkCall:
    return ZkCall(target, args)


@dataclass(frozen=True, slots=True)
class ReadClock:
    """The driver's monotonic clock, in seconds (for the timings of ``ApplyRecord``)."""


@dataclass(frozen=True, slots=True)
class ReadWallClockMs:
    """The wall clock in milliseconds (the ``/controller`` znode's timestamp)."""


@dataclass(frozen=True, slots=True)
class Send:
    """Queue the decision's requests to the brokers (the channels follow the context's
    live brokers first); the result is the list of LeaderAndIsr acknowledgements, as
    handles the driver alone understands (``Reply`` and ``Report`` wait on them)."""

    decision: ControllerDecision


@dataclass(frozen=True, slots=True)
class LetSendersRun:
    """Let the requests queued so far leave before the next decision is made."""


@dataclass(frozen=True, slots=True)
class Reply:
    """Call ``callback(answer)`` once every acknowledgement of ``acks`` came (or failed);
    at once if there are none. Not awaited: the handler goes on."""

    callback: Callable[[Any], None]
    answer: Any
    acks: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class Report:
    """Log (and count) what an event did once its LeaderAndIsr requests are answered."""

    what: str
    record: ApplyRecord


@dataclass(frozen=True, slots=True)
class Enqueue:
    """Put an event at the end of the controller's queue."""

    event: ControllerEvent


@dataclass(frozen=True, slots=True)
class RegisterBroker:
    """Re-create this broker's ``/brokers/ids/<id>`` in the new ZooKeeper session
    (Kafka ``RegisterBrokerAndReelect``)."""


@dataclass(frozen=True, slots=True)
class WatchController:
    """Watch ``/controller`` (Kafka ``ControllerChangeHandler``): its deletion enqueues
    ``Reelect``, its creation or change ``ControllerChange``."""


@dataclass(frozen=True, slots=True)
class WatchCluster:
    """At failover: watch ``/brokers/ids``, ``/brokers/topics``, ``/admin/delete_topics``,
    ``/isr_change_notification``, ``/log_dir_event_notification`` (each change enqueues
    its event) and ``/admin/preferred_replica_election``."""


@dataclass(frozen=True, slots=True)
class WatchReassignments:
    """Watch ``/admin/reassign_partitions``: its creation enqueues
    ``ZkPartitionReassignment``."""


@dataclass(frozen=True, slots=True)
class WatchTopics:
    """A data watch on each topic znode not yet watched (``PartitionModifications``)."""

    topics: frozenset[str]


@dataclass(frozen=True, slots=True)
class UnwatchTopics:
    topics: frozenset[str]


@dataclass(frozen=True, slots=True)
class ScheduleAutoRebalance:
    """Start the auto leader rebalance timer (``AutoPreferredReplicaLeaderElection``)."""


@dataclass(frozen=True, slots=True)
class EndTerm:
    """The controller resigned: drop its watches and timers, close its channels."""


Request = (
    ZkCall
    | ReadClock
    | ReadWallClockMs
    | Send
    | LetSendersRun
    | Reply
    | Report
    | Enqueue
    | RegisterBroker
    | WatchController
    | WatchCluster
    | WatchReassignments
    | WatchTopics
    | UnwatchTopics
    | ScheduleAutoRebalance
    | EndTerm
)

Step = Generator[Request, Any, T]
"""A handler of the core: yields requests, receives their results, returns ``T``."""


@dataclass
class ApplyRecord:
    """What carrying out an event's decisions did (for logs, metrics and ``bench/``).

    Times are seconds of the driver's clock since ``started`` (the event's enqueue time).
    """

    started: float
    partitions_reelected: int = 0
    partitions_offline: int = 0
    zk_writes: int = 0
    zk_writes_s: float = 0.0
    new_leaders_zk_writes_s: float = 0.0
    """Of a broker change applied in two decisions: until the first one's writes."""
    leader_and_isr: list[Any] = field(default_factory=list)
    """The acknowledgement handles of every LeaderAndIsr sent (see ``Send``)."""
    new_leaders: list[Any] | None = None
    """The first decision's LeaderAndIsr handles, when an event applies two."""
    update_metadata_sent: set[Any] = field(default_factory=set)
    """Partitions sent in UpdateMetadata to every live broker."""
    decision: ControllerDecision | None = None
