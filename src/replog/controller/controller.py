"""``KafkaController``: the IO layer of the controller (Kafka ``KafkaController``).

Every broker runs one. It watches ``/controller``; the broker that creates it (bumping
``/controller_epoch`` in the same transaction) is the controller until it resigns, its
session expires or it stops. The controller loads the cluster from ZooKeeper into a
``ControllerContext``, watches ``/brokers/ids``, ``/brokers/topics``,
``/admin/delete_topics`` and ``/isr_change_notification``, and turns every change into a
decision of ``replog.controller.decisions`` that it carries out: ZooKeeper writes first
(batched ``multi`` guarded by the controller epoch's znode version), then the requests
to the brokers through the ``ControllerChannelManager``.

Concurrency rules
-----------------
* All controller work happens in ONE task (``ControllerEventManager``), one event at a
  time. ZooKeeper watches and session listeners run on kazoo's threads and only enqueue
  an event (``put_threadsafe``); broker responses run on the loop and only enqueue.
* Blocking ZooKeeper calls run in worker threads (``asyncio.to_thread``); the event
  task awaits them, and nothing else touches the context meanwhile.
* ``context`` is replaced, never mutated in place, once a decision's writes succeeded
  (the contract of ``replog.controller.effects``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kio.schema.errors import ErrorCode

from replog.config import KafkaConfig
from replog.controller import controller_zk, decisions
from replog.controller import events as ev
from replog.controller.channel_manager import ControllerChannelManager
from replog.controller.context import ControllerContext, TopicPartition
from replog.controller.effects import ControllerDecision, DeleteTopic, UpdateTopicAssignment
from replog.controller.event_manager import ControllerEventManager, QueuedEvent
from replog.controller.operations import ClusterOperations
from replog.protocol.controller_schemas import LeaderAndIsrRequest, StopReplicaRequest
from replog.security.client_security import PLAINTEXT, ClientSecurity
from replog.zk import data as zd
from replog.zk.client import KafkaZkClient
from replog.zk.fencing import ControllerEpoch, ControllerMovedError
from replog.zk.ops import WatchHandle, ZkSessionState

log = logging.getLogger("replog.controller")

NOT_CONTROLLER = 41  # Kafka Errors.NOT_CONTROLLER
MAX_WRITE_ATTEMPTS = 5  # decision re-runs after partition version conflicts

Decide = decisions.Decide
Retry = decisions.Retry


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class DecisionTiming:
    """How long one event took to carry out (for logs and ``bench/``).

    Times are seconds from the moment the event was enqueued (the watch fired).
    """

    what: str
    partitions_reelected: int = 0
    partitions_offline: int = 0
    zk_writes: int = 0
    zk_writes_s: float = 0.0
    leader_and_isr_requests: int = 0
    leader_and_isr_acked_s: float | None = None
    """Until the last LeaderAndIsr response; None while some are outstanding."""
    new_leaders_zk_writes_s: float = 0.0
    """Of a broker change applied in two decisions: until the first one's writes."""
    new_leaders_acked_s: float | None = None
    """Of a broker change applied in two decisions: until the last LeaderAndIsr response
    of the first (the new leaders'); None while some are outstanding or if not split."""
    leader_and_isr_failed: int = 0
    """LeaderAndIsr requests dropped (broker died) or answered with an error."""
    done: asyncio.Event = field(default_factory=asyncio.Event, repr=False)


@dataclass
class ControllerStats:
    """Kafka's ``ControllerStats`` as plain counters (the server's metrics read them)."""

    leader_elections: int = 0
    """Partitions given a new leader (Kafka counts each election)."""
    unclean_leader_elections: int = 0
    election_events: int = 0
    """Decisions that moved some leadership, with their time until every broker acked."""
    election_time_s: float = 0.0


@dataclass
class _Applied:
    timing: DecisionTiming
    started: float
    leader_and_isr: list[asyncio.Future[Any]] = field(default_factory=list)
    new_leaders: list[asyncio.Future[Any]] | None = None
    """The first decision's LeaderAndIsr futures, when an event applies two."""
    update_metadata_sent: set[TopicPartition] = field(default_factory=set)
    """Partitions sent in UpdateMetadata to every live broker."""
    decision: ControllerDecision | None = None


class KafkaController:
    """One broker's controller; see the module docstring.

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
        self.events = ControllerEventManager(self._process, self._preempt)
        self.channels = ControllerChannelManager(
            broker_id,
            request_timeout_s=config.controller_socket_timeout_ms / 1000,
            listener=config.inter_broker_listener_name.upper(),
            security=client_security,
        )
        self.context: ControllerContext | None = None
        """The cluster as this controller knows it; None unless active."""
        self.active_controller_id = -1
        """The controller as last read from ZooKeeper (-1: none known)."""
        self._zk_timeout_s = config.zookeeper_connection_timeout_ms / 1000
        self.timings: deque[DecisionTiming] = deque(maxlen=100)
        self.stats = ControllerStats()
        self._controller_watch: WatchHandle | None = None
        self._watches: list[WatchHandle] = []
        self._background: set[asyncio.Task[None]] = set()
        self._rebalance_timer: asyncio.Task[None] | None = None
        self._handlers: dict[type, Callable[[Any, QueuedEvent], Awaitable[None]]] = {
            ev.Startup: self._process_startup,
            ev.ControllerChange: self._process_controller_change,
            ev.Reelect: self._process_reelect,
            ev.Expire: self._process_expire,
            ev.RegisterBrokerAndReelect: self._process_register_broker_and_reelect,
            ev.BrokerChange: self._process_broker_change,
            ev.TopicChange: self._process_topic_change,
            ev.TopicDeletion: self._process_topic_deletion,
            ev.TopicDeletionStopReplicaResponseReceived: self._process_stop_replica_response,
            ev.IsrChangeNotification: self._process_isr_change,
            ev.LogDirEventNotification: self._process_log_dir_event,
            ev.LeaderAndIsrResponseReceived: self._process_leader_and_isr_response,
            ev.ControlledShutdown: self._process_controlled_shutdown,
            ev.ReplicaLeaderElection: self._process_replica_leader_election,
            ev.AutoPreferredReplicaLeaderElection: self._process_auto_preferred_election,
            ev.TopicUncleanLeaderElectionEnable: self._process_topic_unclean_election_enable,
            ev.UncleanLeaderElectionEnable: self._process_unclean_election_enable,
        }
        self.operations = ClusterOperations(self)
        """Added partitions and replica reassignments (their events and watches)."""
        self._handlers.update(self.operations.handlers())
        self.unclean_leader_election_default: Callable[[], bool] = lambda: (
            config.unclean_leader_election_enable
        )
        """This broker's ``unclean.leader.election.enable``, dynamic configs included."""

    # --- public API --------------------------------------------------------------------

    @property
    def is_active(self) -> bool:
        return self.context is not None

    @property
    def controller_epoch(self) -> int:
        return self.context.controller_epoch if self.context is not None else -1

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
        await self._on_controller_resignation()
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

    # --- event dispatch ----------------------------------------------------------------

    async def _process(self, queued: QueuedEvent) -> None:
        handler = self._handlers.get(type(queued.event))
        if handler is None:
            log.info("controller: %s is not handled", type(queued.event).__name__)
            return
        try:
            await handler(queued.event, queued)
        except ControllerMovedError as exc:
            log.warning("broker %d: controller moved (%s): resigning", self.broker_id, exc)
            await self._maybe_resign()

    def _preempt(self, event: ev.ControllerEvent) -> None:
        if self.operations.preempt(event):
            return
        if isinstance(event, ev.ControlledShutdown) and event.callback is not None:
            event.callback(decisions.ControlledShutdownResult(NOT_CONTROLLER, ()))
        elif isinstance(event, ev.ReplicaLeaderElection) and event.callback is not None:
            event.callback(None)

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

    # --- election ----------------------------------------------------------------------

    async def _process_startup(self, _event: ev.Startup, _q: QueuedEvent) -> None:
        first = [True]

        def on_controller(controller_id: int | None) -> None:
            # Kafka ControllerChangeHandler: deletion -> Reelect, creation/change -> change.
            # The first call reports the state at registration: _elect reads it itself.
            if first[0]:
                first[0] = False
                return
            self.events.put_threadsafe(
                ev.Reelect() if controller_id is None else ev.ControllerChange()
            )

        self._controller_watch = await asyncio.to_thread(self.zk.watch_controller, on_controller)
        await self._elect()

    async def _elect(self) -> None:
        current = await asyncio.to_thread(self.zk.get_controller_id)
        if current is not None:
            self.active_controller_id = current
            log.debug("broker %d: broker %d is controller", self.broker_id, current)
            return
        try:
            epoch = await asyncio.to_thread(
                self.zk.register_controller_and_increment_epoch, self.broker_id, _now_ms()
            )
        except ControllerMovedError:
            current = await asyncio.to_thread(self.zk.get_controller_id)
            self.active_controller_id = -1 if current is None else current
            log.info("broker %d: lost the election to broker %s", self.broker_id, current)
            return
        self.active_controller_id = self.broker_id
        log.info("broker %d: elected controller at epoch %d", self.broker_id, epoch.epoch)
        try:
            await self._on_controller_failover(epoch)
        except Exception:
            log.exception("broker %d: controller failover failed: resigning", self.broker_id)
            await self._on_controller_resignation()
            await asyncio.to_thread(self.zk.delete_controller, self.broker_id)

    async def _maybe_resign(self) -> None:
        """Kafka ``maybeResign``: step down if ZooKeeper names another controller."""
        was_active = self.is_active
        current = await asyncio.to_thread(self.zk.get_controller_id)
        self.active_controller_id = -1 if current is None else current
        if was_active and current != self.broker_id:
            await self._on_controller_resignation()
        elif was_active and current == self.broker_id:
            # Fenced by a newer epoch while still holding /controller: give it up.
            await self._on_controller_resignation()
            await asyncio.to_thread(self.zk.delete_controller, self.broker_id)

    async def _process_controller_change(self, _e: ev.ControllerChange, _q: QueuedEvent) -> None:
        current = await asyncio.to_thread(self.zk.get_controller_id)
        self.active_controller_id = -1 if current is None else current
        if self.is_active and current != self.broker_id:
            await self._on_controller_resignation()

    async def _process_reelect(self, _e: ev.Reelect, _q: QueuedEvent) -> None:
        await self._process_controller_change(ev.ControllerChange(), _q)
        await self._elect()

    async def _process_expire(self, _e: ev.Expire, _q: QueuedEvent) -> None:
        # No ZooKeeper calls: the session is gone. Step down at once.
        self.active_controller_id = -1
        if self.is_active:
            log.warning("broker %d: ZooKeeper session expired: resigning", self.broker_id)
            await self._on_controller_resignation()

    async def _process_register_broker_and_reelect(
        self, _e: ev.RegisterBrokerAndReelect, q: QueuedEvent
    ) -> None:
        if self.register_broker is not None:
            await self.register_broker()
        await self._process_reelect(ev.Reelect(), q)

    async def _on_controller_failover(self, epoch: ControllerEpoch) -> None:
        """Kafka ``onControllerFailover``: watch, load everything, tell every broker."""
        started = time.monotonic()
        self._watches = await asyncio.to_thread(self._register_child_watches)
        await asyncio.to_thread(
            self.zk.delete_isr_change_notifications,
            await asyncio.to_thread(self.zk.get_isr_change_notifications),
            epoch.zk_version,
        )
        ctx = await asyncio.to_thread(
            controller_zk.load_context,
            self.zk,
            self.broker_id,
            epoch,
            self.unclean_leader_election_default(),
            self._zk_timeout_s,
        )
        ctx.topic_ids = await asyncio.to_thread(
            controller_zk.assign_topic_ids, self.zk, ctx.all_topics, epoch.zk_version
        )
        ctx.inter_broker_listener = self.config.inter_broker_listener_name.upper()
        # Active (``is_active``) only once the context is whole, topic ids included.
        self.context = ctx
        ignored_deletions: set[str] = set()
        if not self.config.delete_topic_enable:  # Kafka: drop the markers, delete nothing
            ignored_deletions, ctx.topics_to_be_deleted = ctx.topics_to_be_deleted, set()
        self._sync_channels()
        what = f"failover to broker {self.broker_id} at epoch {epoch.epoch}"
        log.info(
            "controller: %s: %d brokers, %d topics, %d partitions loaded in %.2f s",
            what,
            len(ctx.live_brokers),
            len(ctx.all_topics),
            len(ctx.partition_leadership),
            time.monotonic() - started,
        )
        applied = await self._apply(decisions.on_controller_failover, _rerun_failure, started)
        self._report(what, applied)
        await self.operations.after_failover(started)
        if self.config.auto_leader_rebalance_enable:
            self._rebalance_timer = asyncio.get_running_loop().create_task(
                self._auto_rebalance_timer()
            )
        if ignored_deletions:
            await self._remove_deletion_markers(ignored_deletions)

    async def _on_controller_resignation(self) -> None:
        """Kafka ``onControllerResignation``: forget everything of the term."""
        for watch in self._watches:
            watch.cancel()
        self._watches = []
        self.operations.on_resignation()
        if self._rebalance_timer is not None:
            self._rebalance_timer.cancel()
            self._rebalance_timer = None
        if self.context is not None:
            log.info("broker %d: resigned as controller", self.broker_id)
        self.context = None
        await self.channels.close()

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

    async def _auto_rebalance_timer(self) -> None:
        """Kafka ``scheduleAutoLeaderRebalanceTask``: the first check 5 s after failover
        (sooner if the interval is shorter), then every
        ``leader.imbalance.check.interval.seconds``. Only enqueues."""
        interval = max(self.config.leader_imbalance_check_interval_seconds, 0.1)
        await asyncio.sleep(min(5.0, interval))
        while True:
            self.events.put(ev.AutoPreferredReplicaLeaderElection())
            await asyncio.sleep(interval)

    # --- applying decisions ------------------------------------------------------------

    async def _apply(
        self,
        decide: Decide,
        retry: Retry | None,
        started: float,
        applied: _Applied | None = None,
    ) -> _Applied:
        """Carry out a decision per ``effects``' contract: write, install, send.

        Partition writes that lose a version race are dropped from the decision (the
        rest stands), re-read and decided again with ``retry``. With ``applied``, the
        writes and requests are added to it (an event applying several decisions).
        """
        assert self.context is not None
        if applied is None:
            applied = _Applied(DecisionTiming(what=""), started)
        timing = applied.timing
        d = decide(self.context)
        applied.decision = d
        for attempt in range(1, MAX_WRITE_ATTEMPTS + 1):
            base = self.context
            stale = await asyncio.to_thread(controller_zk.write_decision, self.zk, d)
            timing.zk_writes_s = time.monotonic() - started
            if stale:
                d.drop_failed_writes(stale)
            for write in d.zk_writes:
                if isinstance(write, (DeleteTopic, UpdateTopicAssignment)):
                    continue
                timing.zk_writes += 1
                before = base.partition_leadership.get(write.partition)
                leader = write.state.leader_and_isr.leader
                if leader < 0:
                    timing.partitions_offline += 1
                elif before is not None and before.leader_and_isr.leader != leader:
                    timing.partitions_reelected += 1
            self.stats.unclean_leader_elections += len(d.unclean_elections)
            self._install(d.context)
            applied.leader_and_isr += self._send_requests(d)
            if d.batch.update_metadata_to_all_live:
                applied.update_metadata_sent.update(d.batch.update_metadata_partitions)
            if not stale:
                break
            fresh = await asyncio.to_thread(self.zk.get_partition_states, sorted(stale))
            ctx = self.context = decisions.refreshed(self.context, fresh)
            if retry is None or attempt == MAX_WRITE_ATTEMPTS:
                log.error("controller: partitions %s keep changing: left as read", sorted(stale))
                break
            log.info("controller: %d partitions changed under us: deciding again", len(stale))
            d = retry(ctx, stale)
        return applied

    def _install(self, context: ControllerContext) -> None:
        self.context = context
        self._sync_channels()

    def _sync_channels(self) -> None:
        """One channel per live (or shutting-down) broker, re-opened for restarted ones."""
        assert self.context is not None
        live = self.context.live_brokers
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
        known_offline = self.context is not None and (
            broker_id in self.context.replicas_on_offline_dirs
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
        if top == 0 and self.context is not None and (offline or known_offline):
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

    def _report(self, what: str, applied: _Applied) -> None:
        """Log the timing once every LeaderAndIsr is answered (in a background task)."""
        timing = applied.timing
        timing.what = what
        timing.leader_and_isr_requests = len(applied.leader_and_isr)
        self.timings.append(timing)
        started = applied.started

        async def wait_for_acks() -> None:
            if applied.new_leaders is not None:
                await asyncio.gather(*applied.new_leaders, return_exceptions=True)
                timing.new_leaders_acked_s = time.monotonic() - started
            results = await asyncio.gather(*applied.leader_and_isr, return_exceptions=True)
            timing.leader_and_isr_acked_s = time.monotonic() - started
            if timing.partitions_reelected:
                self.stats.leader_elections += timing.partitions_reelected
                self.stats.election_events += 1
                self.stats.election_time_s += timing.leader_and_isr_acked_s
            timing.leader_and_isr_failed = sum(
                1 for r in results if isinstance(r, BaseException) or int(r.error_code) != 0
            )
            timing.done.set()
            new_leaders = (
                ""
                if timing.new_leaders_acked_s is None
                else f"; new leaders' writes {timing.new_leaders_zk_writes_s:.2f} s, "
                f"acked {timing.new_leaders_acked_s:.2f} s"
            )
            log.info(
                "controller: %s: %d partitions re-elected, %d offline, %d partition states "
                "written, zk writes %.2f s, LeaderAndIsr acked %.2f s (%d requests, %d failed)%s",
                what,
                timing.partitions_reelected,
                timing.partitions_offline,
                timing.zk_writes,
                timing.zk_writes_s,
                timing.leader_and_isr_acked_s,
                timing.leader_and_isr_requests,
                timing.leader_and_isr_failed,
                new_leaders,
            )

        task = asyncio.get_running_loop().create_task(wait_for_acks())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # --- cluster events ----------------------------------------------------------------

    async def _process_broker_change(self, _e: ev.BrokerChange, q: QueuedEvent) -> None:
        if self.context is None:
            return
        registered = await asyncio.to_thread(self.zk.get_all_brokers)
        changes = decisions.broker_changes(self.context, registered)
        if not changes:
            return
        await self._refresh(decisions.partitions_to_refresh(self.context, changes))
        # Two decisions, as Kafka's onReplicasBecomeOffline: the new leaders are written
        # and told first, then the failed brokers leave the other partitions' ISRs.
        applied = _Applied(DecisionTiming(what=""), q.enqueue_time_s)
        steps = decisions.broker_change_steps(changes, registered)
        for i, step in enumerate(steps):
            decide = step.decide
            if step.told:
                decide = partial(decide, told=sorted(applied.update_metadata_sent))
            await self._apply(decide, step.retry, q.enqueue_time_s, applied)
            if i == 0 and len(steps) > 1:  # the new leaders' part, timed on its own
                applied.new_leaders = list(applied.leader_and_isr)
                applied.timing.new_leaders_zk_writes_s = applied.timing.zk_writes_s
                # Let the channels' sender tasks take the new leaders' requests now:
                # otherwise they wait until the next decision is made and awaits its
                # writes (about 0.05 s at 10,000 partitions).
                await asyncio.sleep(0)
        self._report(changes.describe(), applied)

    async def _process_topic_change(self, _e: ev.TopicChange, q: QueuedEvent) -> None:
        if self.context is None:
            return
        topics = await asyncio.to_thread(self.zk.get_all_topics)
        ctx = self.context
        new = topics - ctx.all_topics
        vanished = ctx.all_topics - topics
        # Known topics still without an id (one that could not be written before) too.
        idless = (ctx.all_topics & topics) - ctx.topic_ids.keys()
        if not (new or vanished or idless):
            return
        assignments = await asyncio.to_thread(self.zk.get_topic_assignments, new)
        ids = await asyncio.to_thread(
            controller_zk.assign_topic_ids,
            self.zk,
            assignments.keys() | idless,
            ctx.controller_epoch_zk_version,
        )
        overrides = await asyncio.to_thread(
            controller_zk.read_unclean_overrides, self.zk, assignments, self._zk_timeout_s
        )
        ctx = ctx.copy()
        for topic in vanished:  # deleted behind the controller's back
            log.warning("controller: topic %s disappeared from ZooKeeper", topic)
            ctx.remove_topic(topic)
        ctx.unclean_leader_election_enable.update(overrides)
        ctx.topic_ids.update((t, ids[t]) for t in idless if t in ids)
        self._install(ctx)
        await self.operations.after_topic_change(assignments.keys(), vanished)
        if assignments:
            applied = await self._apply(
                partial(decisions.on_new_topics, assignments=assignments, topic_ids=ids),
                None,
                q.enqueue_time_s,
            )
            self._report(f"new topics {sorted(assignments)}", applied)

    async def _process_topic_deletion(self, _e: ev.TopicDeletion, q: QueuedEvent) -> None:
        if self.context is None:
            return
        marked = await asyncio.to_thread(self.zk.get_topics_marked_for_deletion)
        ctx = self.context
        if not self.config.delete_topic_enable:
            await self._remove_deletion_markers(marked)
            return
        unknown = marked - ctx.all_topics
        if unknown:
            await self._remove_deletion_markers(unknown)
        wanted = (marked & ctx.all_topics) - ctx.topics_to_be_deleted
        if wanted:
            log.info("controller: deleting topics %s", sorted(wanted))
            await self._apply(
                partial(decisions.on_topic_deletion, topics=wanted), None, q.enqueue_time_s
            )

    async def _remove_deletion_markers(self, topics: Iterable[str]) -> None:
        assert self.context is not None
        version = self.context.controller_epoch_zk_version
        for topic in sorted(topics):
            log.info("controller: removing deletion marker of topic %s", topic)
            await asyncio.to_thread(self.zk.remove_deletion_marker, topic, version)

    async def _process_stop_replica_response(
        self, e: ev.TopicDeletionStopReplicaResponseReceived, q: QueuedEvent
    ) -> None:
        if self.context is None:
            return
        decide = partial(
            decisions.on_stop_replica_response,
            broker_id=e.replica_id,
            error_code=e.error_code,
            partition_errors=e.partition_errors,
        )
        await self._apply(decide, None, q.enqueue_time_s)

    async def _process_isr_change(self, _e: ev.IsrChangeNotification, q: QueuedEvent) -> None:
        if self.context is None:
            return
        names = await asyncio.to_thread(self.zk.get_isr_change_notifications)
        if not names:
            return
        try:
            changed = await asyncio.to_thread(self.zk.read_isr_change_notifications, names)
            known = sorted(tp for tp in changed if tp[0] in self.context.all_topics)
            fresh = await asyncio.to_thread(self.zk.get_partition_states, known)
            await self._apply(
                partial(decisions.on_isr_change, fresh_states=fresh), None, q.enqueue_time_s
            )
            await self.operations.after_isr_change(fresh, q.enqueue_time_s)
        finally:
            if self.context is not None:
                await asyncio.to_thread(
                    self.zk.delete_isr_change_notifications,
                    names,
                    self.context.controller_epoch_zk_version,
                )

    async def _process_log_dir_event(self, _e: ev.LogDirEventNotification, q: QueuedEvent) -> None:
        """Kafka ``processLogDirEventNotification``."""
        if self.context is None:
            return
        names = await asyncio.to_thread(self.zk.get_log_dir_event_notifications)
        if not names:
            return
        try:
            brokers = await asyncio.to_thread(self.zk.read_log_dir_event_notifications, names)
            log.warning("controller: log dir failure on brokers %s", sorted(brokers))
            applied = await self._apply(
                partial(decisions.on_broker_log_dir_failure, broker_ids=brokers),
                None,
                q.enqueue_time_s,
            )
            self._report(f"log dir failure on brokers {sorted(brokers)}", applied)
        finally:
            if self.context is not None:
                await asyncio.to_thread(
                    self.zk.delete_log_dir_event_notifications,
                    names,
                    self.context.controller_epoch_zk_version,
                )

    async def _process_leader_and_isr_response(
        self, e: ev.LeaderAndIsrResponseReceived, q: QueuedEvent
    ) -> None:
        if self.context is None:
            return
        d, offline = decisions.on_leader_and_isr_response(
            self.context, e.broker_id, e.broker_epoch, e.offline, e.online
        )
        if not offline:
            self._install(d.context)  # only what is known offline changed
            return
        applied = await self._apply(
            lambda _ctx: d,
            partial(decisions.redo_replicas_offline, replicas=offline),
            q.enqueue_time_s,
        )
        self._report(
            f"{len(offline)} replicas of broker {e.broker_id} in a failed log dir", applied
        )

    async def _process_controlled_shutdown(self, e: ev.ControlledShutdown, q: QueuedEvent) -> None:
        answer = decisions.ControlledShutdownResult(NOT_CONTROLLER, ())
        applied: _Applied | None = None
        try:
            if self.context is not None:
                results: list[decisions.ControlledShutdownResult] = []

                def decide(ctx: ControllerContext) -> ControllerDecision:
                    d, result = decisions.on_controlled_shutdown(ctx, e.broker_id, e.broker_epoch)
                    results.append(result)
                    return d

                applied = await self._apply(
                    decide, lambda ctx, _stale: decide(ctx), q.enqueue_time_s
                )
                answer = results[-1]
                log.info(
                    "controller: controlled shutdown of broker %d (epoch %d): error %d, "
                    "%d partitions still led by it",
                    e.broker_id,
                    e.broker_epoch,
                    answer.error_code,
                    len(answer.remaining),
                )
                self._report(f"controlled shutdown of broker {e.broker_id}", applied)
        finally:
            if e.callback is not None:
                # Answer once the new leaders acknowledged (off the event task), so the
                # broker closes its listeners only after clients can find them.
                self._answer_after_acks(applied, e.callback, answer)

    async def _process_replica_leader_election(
        self, e: ev.ReplicaLeaderElection, q: QueuedEvent
    ) -> None:
        outcomes: dict[TopicPartition, decisions.ElectionOutcome] | None = None
        applied: _Applied | None = None
        try:
            if self.context is None:
                return
            if e.trigger is ev.ElectionTrigger.ZK:
                try:
                    listed = await asyncio.to_thread(self.zk.get_preferred_replica_election)
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
            await self._refresh(partitions)
            outcomes = {}

            def decide(ctx: ControllerContext, tps: Iterable[TopicPartition]) -> ControllerDecision:
                d, result = decisions.on_replica_election(ctx, tps, e.election_type)
                outcomes.update(result)
                return d

            applied = await self._apply(partial(decide, tps=partitions), decide, q.enqueue_time_s)
            errors = {
                tp: o.error_code
                for tp, o in outcomes.items()
                if o.error_code not in (ErrorCode.none, ErrorCode.election_not_needed)
            }
            what = "preferred" if e.election_type == decisions.PREFERRED_ELECTION else "unclean"
            self._report(f"{what} replica leader election by {e.trigger.value}", applied)
            if errors:
                log.warning("controller: %s election failed for %s", what, sorted(errors.items()))
            if e.trigger is ev.ElectionTrigger.ZK:
                await asyncio.to_thread(
                    self.zk.delete_preferred_replica_election,
                    self.context.controller_epoch_zk_version,
                )
        finally:
            if e.callback is not None:
                self._answer_after_acks(applied, e.callback, outcomes)

    async def _process_auto_preferred_election(
        self, _e: ev.AutoPreferredReplicaLeaderElection, q: QueuedEvent
    ) -> None:
        if self.context is None:
            return
        percentage = self.config.leader_imbalance_per_broker_percentage
        await self._refresh(decisions.not_led_by_preferred_replica(self.context))
        if self.context is None or not decisions.auto_rebalance_candidates(
            self.context, percentage
        ):
            return
        applied = await self._apply(
            partial(decisions.on_auto_leader_rebalance, imbalance_percentage=percentage),
            None,
            q.enqueue_time_s,
        )
        self._report("auto leader rebalance", applied)

    async def _refresh(self, partitions: Iterable[TopicPartition]) -> None:
        """Re-read the states of the known ``partitions`` among ``partitions`` into the
        context (``ControllerMovedError`` if a newer controller wrote one)."""
        assert self.context is not None
        known = sorted(tp for tp in partitions if tp in self.context.partition_leadership)
        if known:
            fresh = await asyncio.to_thread(self.zk.get_partition_states, known)
            self.context = decisions.refreshed(self.context, fresh)

    def _answer_after_acks(
        self, applied: _Applied | None, callback: Callable[[Any], None], answer: Any
    ) -> None:
        """Call ``callback(answer)`` once every LeaderAndIsr of ``applied`` is answered
        (or failed); at once if there are none."""
        if applied is None or not applied.leader_and_isr:
            callback(answer)
            return

        async def wait_then_answer() -> None:
            try:
                await asyncio.gather(*applied.leader_and_isr, return_exceptions=True)
            finally:
                callback(answer)

        task = asyncio.get_running_loop().create_task(wait_then_answer())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _process_topic_unclean_election_enable(
        self, e: ev.TopicUncleanLeaderElectionEnable, q: QueuedEvent
    ) -> None:
        if self.context is None or e.topic not in self.context.all_topics:
            return
        overrides = await asyncio.to_thread(
            controller_zk.read_unclean_overrides, self.zk, [e.topic], self._zk_timeout_s
        )
        ctx = self.context.copy()
        ctx.unclean_leader_election_enable.pop(e.topic, None)
        ctx.unclean_leader_election_enable.update(overrides)
        self._install(ctx)
        if ctx.unclean_election_enabled(e.topic):
            applied = await self._apply(
                partial(decisions.on_unclean_leader_election_enable, topics={e.topic}),
                None,
                q.enqueue_time_s,
            )
            self._report(f"unclean leader election enabled for topic {e.topic}", applied)

    async def _process_unclean_election_enable(
        self, _e: ev.UncleanLeaderElectionEnable, q: QueuedEvent
    ) -> None:
        if self.context is None:
            return
        ctx = self.context.copy()
        ctx.default_unclean_leader_election_enable = self.unclean_leader_election_default()
        self._install(ctx)
        if ctx.default_unclean_leader_election_enable:
            applied = await self._apply(
                decisions.on_unclean_leader_election_enable, None, q.enqueue_time_s
            )
            self._report("unclean leader election enabled by default", applied)


def _rerun_failure(ctx: ControllerContext, stale: set[TopicPartition]) -> ControllerDecision:
    """Decide again for partitions whose write lost a version race (re-read into ``ctx``):
    a failure of the offline brokers among their replicas re-elects leaders that are not
    live and takes offline replicas out of ISRs; it is idempotent for the rest."""
    offline = {r for tp in stale for r in ctx.replicas_for(tp) if r not in ctx.live_brokers}
    return decisions.on_broker_failure(ctx, offline)


def _resolver(future: asyncio.Future[Any]) -> Callable[[Any], None]:
    def resolve(value: Any) -> None:
        if not future.done():
            future.set_result(value)

    return resolve
