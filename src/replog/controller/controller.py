"""``KafkaController``: the IO driver of the controller core (Kafka ``KafkaController``).

Every broker runs one. The rules (election, failover, every event's handling and the
write / install / send / re-read / retry loop) are the sans-IO ``ControllerCore`` of
``replog.controller.core``, which the simulator drives too; this class keeps only the
IO: the event queue and its task, the ZooKeeper calls (in worker threads), the watches
and session listener (they only enqueue), the channels to the brokers and the timers.
It carries out, in order, each request of ``replog.controller.core_requests`` the core
yields, and hands the result (or the exception) back.

Concurrency rules
-----------------
* All controller work happens in ONE task (``ControllerEventManager``), one event at a
  time. ZooKeeper watches and session listeners run on kazoo's threads and only enqueue
  an event (``put_threadsafe``); broker responses run on the loop and only enqueue.
* Blocking ZooKeeper calls run in worker threads (``asyncio.to_thread``); the event
  task awaits them, and nothing else touches the core meanwhile.
* ``context`` is replaced, never mutated in place, once a decision's writes succeeded
  (the contract of ``replog.controller.effects``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from functools import partial
from typing import Any

from kio.schema.errors import ErrorCode

from replog.config import KafkaConfig
from replog.controller import decisions
from replog.controller import events as ev
from replog.controller.channel_manager import ControllerChannelManager
from replog.controller.context import ControllerContext, ReplicaAssignment, TopicPartition
from replog.controller.core import ControllerCore
from replog.controller.core_apply import ControllerStats
from replog.controller.core_requests import (
    ApplyRecord,
    EndTerm,
    Enqueue,
    LetSendersRun,
    ReadClock,
    ReadWallClockMs,
    RegisterBroker,
    Reply,
    Report,
    Request,
    ScheduleAutoRebalance,
    Send,
    Step,
    UnwatchTopics,
    WatchCluster,
    WatchController,
    WatchReassignments,
    WatchTopics,
    ZkCall,
)
from replog.controller.decision_timing import DecisionTiming
from replog.controller.effects import ControllerDecision
from replog.controller.event_manager import ControllerEventManager, QueuedEvent
from replog.controller.reassignment import ReassignmentOutcome
from replog.protocol.controller_schemas import LeaderAndIsrRequest, StopReplicaRequest
from replog.security.client_security import PLAINTEXT, ClientSecurity
from replog.zk import data as zd
from replog.zk.client import KafkaZkClient
from replog.zk.ops import WatchHandle, ZkSessionState

log = logging.getLogger("replog.controller")

__all__ = ["ControllerStats", "KafkaController"]


def _now_ms() -> int:
    return int(time.time() * 1000)


class KafkaController:
    """One broker's controller: the driver of its ``ControllerCore``; see the module
    docstring.

    ``register_broker`` is awaited (in the controller task) after this broker's
    ZooKeeper session expired and a new one began, before the re-election (Kafka
    ``RegisterBrokerAndReelect``): the broker re-creates ``/brokers/ids/<id>`` there.
    """

    def __init__(
        self,
        broker_id: int,
        zk: KafkaZkClient,
        config: KafkaConfig,
        register_broker: Callable[[], Awaitable[object]] | None = None,
        client_security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.broker_id = broker_id
        self.zk = zk
        self.config = config
        self.register_broker = register_broker
        self.core = ControllerCore(broker_id, config)
        """Every rule of the controller; this class carries out what it asks for."""
        self.events = ControllerEventManager(self._process, self.core.preempt)
        self.channels = ControllerChannelManager(
            broker_id,
            request_timeout_s=config.controller_socket_timeout_ms / 1000,
            listener=config.inter_broker_listener_name.upper(),
            security=client_security,
        )
        self.timings: deque[DecisionTiming] = deque(maxlen=100)
        self.operations = ReassignmentRequests(self.events)
        """AlterPartitionReassignments and ListPartitionReassignments."""
        self._controller_watch: WatchHandle | None = None
        self._watches: list[WatchHandle] = []
        self._topic_watches: dict[str, WatchHandle] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._rebalance_timer: asyncio.Task[None] | None = None

    # --- public API --------------------------------------------------------------------

    @property
    def context(self) -> ControllerContext | None:
        """The cluster as this controller knows it; None unless active."""
        return self.core.context

    @property
    def active_controller_id(self) -> int:
        """The controller as last read from ZooKeeper (-1: none known)."""
        return self.core.active_controller_id

    @property
    def stats(self) -> ControllerStats:
        return self.core.stats

    @property
    def unclean_leader_election_default(self) -> Callable[[], bool]:
        """This broker's ``unclean.leader.election.enable``, dynamic configs included."""
        return self.core.unclean_leader_election_default

    @unclean_leader_election_default.setter
    def unclean_leader_election_default(self, value: Callable[[], bool]) -> None:
        self.core.unclean_leader_election_default = value

    @property
    def is_active(self) -> bool:
        return self.core.is_active

    @property
    def controller_epoch(self) -> int:
        return self.core.controller_epoch

    async def start(self) -> None:
        """Start the event task; watch ``/controller`` and run the election."""
        self.events.start()
        self.zk.add_session_listener(self._on_session_state)
        self.events.put(ev.Startup())

    async def stop(self) -> None:
        """Stop the event task, resign (deleting ``/controller`` if ours), close channels."""
        await self.events.close()
        try:
            self.zk.remove_session_listener(self._on_session_state)
        except ValueError:
            pass
        if self._controller_watch is not None:
            self._controller_watch.cancel()
        was_active = self.is_active
        await self._drive(self.core.resign())
        if was_active:
            try:
                await asyncio.to_thread(self.zk.delete_controller, self.broker_id)
            except Exception as exc:
                log.warning("broker %d: could not delete /controller: %s", self.broker_id, exc)
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    async def controlled_shutdown(
        self, broker_id: int, broker_epoch: int
    ) -> decisions.ControlledShutdownResult:
        """Kafka's ControlledShutdown: move leadership off ``broker_id``; the answer
        lists the partitions it still leads (error NOT_CONTROLLER if not active)."""
        future: asyncio.Future[decisions.ControlledShutdownResult] = (
            asyncio.get_running_loop().create_future()
        )
        self.events.put(ev.ControlledShutdown(broker_id, broker_epoch, callback=_resolver(future)))
        return await future

    async def elect_leaders(
        self, partitions: frozenset[TopicPartition], election_type: int
    ) -> dict[TopicPartition, decisions.ElectionOutcome] | None:
        """Kafka ``electLeaders`` (KIP-460): the outcome per partition once the new
        leaders acknowledged their LeaderAndIsr; None if this broker is not the
        controller (NOT_CONTROLLER)."""
        future: asyncio.Future[dict[TopicPartition, decisions.ElectionOutcome] | None] = (
            asyncio.get_running_loop().create_future()
        )
        self.events.put(
            ev.ReplicaLeaderElection(
                partitions, election_type, ev.ElectionTrigger.ADMIN_CLIENT, _resolver(future)
            )
        )
        return await future

    def on_topic_config_change(self, topic: str) -> None:
        """A topic's dynamic config changed (Kafka ``TopicConfigHandler``); only the
        active controller acts on it."""
        if self.is_active:
            self.events.put(ev.TopicUncleanLeaderElectionEnable(topic))

    def on_unclean_default_change(self) -> None:
        """``unclean_leader_election_default()`` changed (Kafka ``DynamicLogConfig``)."""
        if self.is_active:
            self.events.put(ev.UncleanLeaderElectionEnable())

    # --- driving the core --------------------------------------------------------------

    async def _process(self, queued: QueuedEvent) -> None:
        await self._drive(self.core.process(queued.event, queued.enqueue_time_s))
        if self.core.is_active:
            self._sync_channels()

    async def _drive(self, step: Step[Any]) -> Any:
        """Run a handler of the core: carry out each request it yields, in order, and
        hand the result (or the exception) back to it."""
        result: Any = None
        error: BaseException | None = None
        try:
            while True:
                try:
                    request = step.throw(error) if error is not None else step.send(result)
                except StopIteration as stop:
                    return stop.value
                result, error = None, None
                try:
                    result = await self._carry_out(request)
                except Exception as exc:
                    error = exc
        finally:  # cancelled (a stop that timed out): the handler is abandoned
            with contextlib.suppress(RuntimeError):
                step.close()

    async def _carry_out(self, request: Request) -> Any:
        match request:
            case ZkCall():
                return await asyncio.to_thread(request.run, self.zk)
            case Send(decision=d):
                self._sync_channels()
                return self._send_requests(d)
            case ReadClock():
                return time.monotonic()
            case ReadWallClockMs():
                return _now_ms()
            case LetSendersRun():
                await asyncio.sleep(0)
            case Reply(callback=callback, answer=answer, acks=acks):
                self._answer_after_acks(acks, callback, answer)
            case Report(what=what, record=record):
                self._report(what, record)
            case Enqueue(event=event):
                self.events.put(event)
            case RegisterBroker():
                if self.register_broker is not None:
                    await self.register_broker()
            case WatchController():
                if self._controller_watch is None:
                    self._controller_watch = await asyncio.to_thread(self._watch_controller)
            case WatchCluster():
                self._watches += await asyncio.to_thread(self._register_child_watches)
            case WatchReassignments():
                self._watches.append(await asyncio.to_thread(self._watch_reassignments))
            case WatchTopics(topics=topics):
                await asyncio.to_thread(self._watch_topics, topics)
            case UnwatchTopics(topics=topics):
                for topic in topics:
                    handle = self._topic_watches.pop(topic, None)
                    if handle is not None:
                        handle.cancel()
            case ScheduleAutoRebalance():
                if self._rebalance_timer is None:
                    self._rebalance_timer = asyncio.get_running_loop().create_task(
                        self._auto_rebalance_timer()
                    )
            case EndTerm():
                await self._end_term()
            case _:
                raise AssertionError(f"unknown controller request {request!r}")
        return None

    async def _end_term(self) -> None:
        for watch in [*self._watches, *self._topic_watches.values()]:
            watch.cancel()
        self._watches = []
        self._topic_watches = {}
        if self._rebalance_timer is not None:
            self._rebalance_timer.cancel()
            self._rebalance_timer = None
        await self.channels.close()

    # --- ZooKeeper watches and timers (they only enqueue) ------------------------------

    def _on_session_state(self, state: ZkSessionState) -> None:
        """kazoo's connection thread: enqueue only, never call ZooKeeper here."""
        if state is ZkSessionState.LOST:
            self.events.put_threadsafe(ev.Expire(), clear=True)
        elif state is ZkSessionState.NEW_SESSION:
            self.events.put_threadsafe(ev.RegisterBrokerAndReelect())

    def _enqueue_on_change(self, make: Callable[[], ev.ControllerEvent]) -> Callable[..., None]:
        """A watch callback (kazoo thread) that enqueues ``make()`` on every call but the
        first, which reports the state at registration that the caller reads itself."""
        first = True

        def callback(*_args: object) -> None:
            nonlocal first
            if first:
                first = False
                return
            self.events.put_threadsafe(make())

        return callback

    def _watch_controller(self) -> WatchHandle:
        """Blocking. Kafka ControllerChangeHandler: deletion -> Reelect, creation or
        change -> ControllerChange. The first call reports the state at registration:
        the election reads it itself."""
        first = [True]

        def on_controller(controller_id: int | None) -> None:
            if first[0]:
                first[0] = False
                return
            self.events.put_threadsafe(
                ev.Reelect() if controller_id is None else ev.ControllerChange()
            )

        return self.zk.watch_controller(on_controller)

    def _register_child_watches(self) -> list[WatchHandle]:
        """Blocking. The watches fire events; the state they report first is read by the
        failover right after, so that first call is skipped."""
        paths: list[tuple[str, Callable[[], ev.ControllerEvent]]] = [
            (zd.BROKER_IDS_PATH, ev.BrokerChange),
            (zd.TOPICS_PATH, ev.TopicChange),
            (zd.DELETE_TOPICS_PATH, ev.TopicDeletion),
            (zd.ISR_CHANGE_NOTIFICATION_PATH, ev.IsrChangeNotification),
            (zd.LOG_DIR_EVENT_NOTIFICATION_PATH, ev.LogDirEventNotification),
        ]
        watches = [self.zk.watch_children(p, self._enqueue_on_change(make)) for p, make in paths]

        def on_preferred_election(data: bytes | None, _version: int | None) -> None:
            # Kafka PreferredReplicaElectionHandler; also a znode left from before failover.
            if data is not None:
                self.events.put_threadsafe(
                    ev.ReplicaLeaderElection(
                        None, decisions.PREFERRED_ELECTION, ev.ElectionTrigger.ZK
                    )
                )

        watches.append(
            self.zk.watch_data(zd.PREFERRED_REPLICA_ELECTION_PATH, on_preferred_election)
        )
        return watches

    def _watch_reassignments(self) -> WatchHandle:
        """Blocking: ``/admin/reassign_partitions``'s creation enqueues
        ``ZkPartitionReassignment`` (Kafka ``PartitionReassignmentHandler``)."""
        seen: list[bool | None] = [None]

        def on_reassign(data: bytes | None, _version: int | None) -> None:
            existed, seen[0] = seen[0], data is not None
            if existed is False and data is not None:
                self.events.put_threadsafe(ev.ZkPartitionReassignment())

        return self.zk.watch_data(zd.REASSIGN_PARTITIONS_PATH, on_reassign)

    def _watch_topics(self, topics: frozenset[str]) -> None:
        """Blocking: a data watch on each topic znode not yet watched (Kafka
        ``PartitionModificationsHandler``)."""
        for topic in sorted(topics - self._topic_watches.keys()):
            self._topic_watches[topic] = self.zk.watch_data(
                zd.topic_path(topic),
                self._enqueue_on_change(partial(ev.PartitionModifications, topic)),
            )

    async def _auto_rebalance_timer(self) -> None:
        """Kafka ``scheduleAutoLeaderRebalanceTask``: the first check 5 s after failover
        (sooner if the interval is shorter), then every
        ``leader.imbalance.check.interval.seconds``. Only enqueues."""
        interval = max(self.config.leader_imbalance_check_interval_seconds, 0.1)
        await asyncio.sleep(min(5.0, interval))
        while True:
            self.events.put(ev.AutoPreferredReplicaLeaderElection())
            await asyncio.sleep(interval)

    # --- requests to brokers -----------------------------------------------------------

    def _sync_channels(self) -> None:
        """One channel per live (or shutting-down) broker, re-opened for restarted ones."""
        context = self.core.context
        if context is None:
            return
        live = context.live_brokers
        for broker_id in self.channels.broker_ids - live.keys():
            self.channels.remove_broker(broker_id)
        for info in live.values():
            self.channels.add_broker(info)

    def _send_requests(self, d: ControllerDecision) -> list[asyncio.Future[Any]]:
        """Queue the decision's requests; returns the LeaderAndIsr response futures."""
        leader_and_isr: list[asyncio.Future[Any]] = []
        for broker_id, requests in d.requests().items():
            for request in requests:
                callback = None
                if isinstance(request, StopReplicaRequest) and any(
                    p.delete_partition for t in request.topic_states for p in t.partition_states
                ):
                    callback = partial(self._on_stop_replica_response, broker_id, request)
                future = self.channels.send(broker_id, request, callback)
                if isinstance(request, LeaderAndIsrRequest):
                    future.add_done_callback(
                        partial(self._on_leader_and_isr_response, broker_id, request)
                    )
                    leader_and_isr.append(future)
        return leader_and_isr

    def _on_leader_and_isr_response(
        self, broker_id: int, request: LeaderAndIsrRequest, future: asyncio.Future[Any]
    ) -> None:
        """On the loop, one pass over the answer: its errors are logged, and one naming
        replicas in a failed log dir (KAFKA_STORAGE_ERROR), or from a broker known to have
        some, becomes an event (Kafka enqueues every answer; the others change nothing)."""
        if future.cancelled() or future.exception() is not None:
            return
        response = future.result()
        top = int(response.error_code)
        errors: list[tuple[int, int]] = []
        offline: set[TopicPartition] = set()
        online: set[TopicPartition] = set()
        known_offline = self.core.context is not None and (
            broker_id in self.core.context.replicas_on_offline_dirs
        )
        for topic_state, topic_errors in zip(request.topic_states, response.topics, strict=False):
            topic = str(topic_state.topic_name)
            for p in topic_errors.partition_errors:
                code = int(p.error_code)
                if code == 0:
                    if known_offline:
                        online.add(TopicPartition(topic, int(p.partition_index)))
                    continue
                errors.append((int(p.partition_index), code))
                if code == ErrorCode.kafka_storage_error:
                    offline.add(TopicPartition(topic, int(p.partition_index)))
        if top != 0 or errors:
            log.warning(
                "controller: LeaderAndIsr to broker %d: error %d, partition errors %s",
                broker_id,
                top,
                errors[:20],
            )
        if top == 0 and self.core.context is not None and (offline or known_offline):
            self.events.put(
                ev.LeaderAndIsrResponseReceived(
                    broker_id, int(request.broker_epoch), frozenset(offline), frozenset(online)
                )
            )

    def _on_stop_replica_response(
        self, broker_id: int, request: StopReplicaRequest, response: Any
    ) -> None:
        """On the loop (sender task): turn a deletion StopReplica answer into an event."""
        errors: dict[TopicPartition, int] = {
            TopicPartition(str(p.topic_name), int(p.partition_index)): int(p.error_code)
            for p in response.partition_errors
        }
        top = int(response.error_code)
        if top != 0 and not errors:  # a top-level error fails every partition sent
            for t in request.topic_states:
                for p in t.partition_states:
                    errors[TopicPartition(str(t.topic_name), int(p.partition_index))] = top
        self.events.put(ev.TopicDeletionStopReplicaResponseReceived(broker_id, top, errors))

    def _answer_after_acks(
        self, acks: tuple[Any, ...], callback: Callable[[Any], None], answer: Any
    ) -> None:
        """Call ``callback(answer)`` once every LeaderAndIsr future of ``acks`` is done
        (answered or failed); at once if there are none."""
        if not acks:
            callback(answer)
            return

        async def wait_then_answer() -> None:
            try:
                await asyncio.gather(*acks, return_exceptions=True)
            finally:
                callback(answer)

        self._in_background(wait_then_answer())

    def _in_background(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _report(self, what: str, record: ApplyRecord) -> None:
        """Log the timing once every LeaderAndIsr is answered (in a background task)."""
        timing = DecisionTiming.of(what, record)
        self.timings.append(timing)
        self._in_background(timing.complete(record, self.core.stats))


class ReassignmentRequests:
    """AlterPartitionReassignments and ListPartitionReassignments as controller events
    (``KafkaController.operations``; the handlers are ``ClusterOperations``')."""

    def __init__(self, events: ControllerEventManager) -> None:
        self._events = events

    async def alter_partition_reassignments(
        self, reassignments: Mapping[TopicPartition, tuple[int, ...] | None]
    ) -> dict[TopicPartition, ReassignmentOutcome] | None:
        """The outcome per partition once the reassignment is recorded and started;
        None if this broker is not the controller."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._events.put(ev.ApiPartitionReassignment(dict(reassignments), _resolver(future)))
        return await future

    async def list_partition_reassignments(
        self, partitions: frozenset[TopicPartition] | None
    ) -> dict[TopicPartition, ReplicaAssignment] | None:
        """None if this broker is not the controller."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._events.put(ev.ListPartitionReassignments(partitions, _resolver(future)))
        return await future


def _resolver(future: asyncio.Future[Any]) -> Callable[[Any], None]:
    def resolve(value: Any) -> None:
        if not future.done():
            future.set_result(value)

    return resolve
