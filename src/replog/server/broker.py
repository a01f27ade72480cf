"""One broker process: storage, replicas, the Kafka listener, ZooKeeper, the controller.

Lifecycle (seed 000, "Broker startup"): lock every log dir and check its
``meta.properties`` against ``broker.id``, connect to ZooKeeper (within
``zookeeper.connection.timeout.ms``) and check its ``/cluster/id`` against them too, load
the logs, register in ``/brokers/ids`` (then write ``meta.properties``), read assignments
and partition states from ZooKeeper, create local replicas as leader or follower, delete
local partitions no longer assigned here, then serve. A SIGTERM flushes the logs, writes
the checkpoints, releases the log dir locks and leaves. Which handler answers each
request type is ``kafka_apis.py``'s (Kafka ``KafkaApis``).

A start-up failure the user can cause (another broker on a log dir, another broker's or
cluster's data, ZooKeeper out of reach, no usable log dir, the broker id taken) raises
``BrokerStartupError`` or one of ``replog.storage``'s errors, each one line, before the
logs are touched where it can be found that early; ``replog broker start`` prints it and
exits 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import time
from functools import partial
from typing import Any

from replog.common.clock import now_ms
from replog.common.topics import GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME
from replog.config import KafkaConfig
from replog.controller.controller import KafkaController
from replog.coordinator.group import consumer_records
from replog.coordinator.group import records as group_records
from replog.coordinator.group.classic_group_service import (
    ClassicGroupService,
    replay_group_metadata_record,
)
from replog.coordinator.group.coordinator import GroupCoordinator
from replog.coordinator.transaction.marker_channel import TransactionMarkerChannel
from replog.coordinator.transaction.runtime import (
    TransactionCoordinatorRuntime,
    transaction_config,
)
from replog.protocol.apis import ApiKey
from replog.replication.fetcher import FetcherConfig, ReplicaFetcherManager
from replog.replication.replica_manager import ReplicaManager
from replog.security import sasl
from replog.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from replog.server.admin import AdminManager
from replog.server.authentication import inter_broker_client_security, listener_security
from replog.server.authorizer import Authorizer
from replog.server.broker_startup import (
    BrokerStartupError,
    connect_zookeeper,
    register_broker,
    require_live_log_dirs,
)
from replog.server.broker_tasks import periodic_tasks
from replog.server.config_manager import ConfigManager
from replog.server.controlled_shutdown import (
    controlled_shutdown,
    find_controller,
    send_controlled_shutdown,
)
from replog.server.fetch_session import FetchManager, FetchSessionCache
from replog.server.handlers import metadata
from replog.server.handlers.context import BrokerServices
from replog.server.handlers.controller_requests import ControllerRequests
from replog.server.handlers.controller_rpc import ControllerCommands
from replog.server.kafka_apis import request_handlers
from replog.server.log_dir_failure import LogDirFailureHandler
from replog.server.metadata_cache import MetadataCache
from replog.server.metrics import BrokerMetrics, BrokerStateCollector, RemoteEndOffsets
from replog.server.network import KafkaServer, RequestContext
from replog.server.producer_ids import ProducerIdManager
from replog.server.txn_verification import TransactionVerifier
from replog.server.zk_fence import ZkSessionFence
from replog.storage.cleaner_threads import CleanerConfig, LoopOwner
from replog.storage.log_config import LogConfig
from replog.storage.log_manager import LogManager
from replog.storage.meta_properties import (
    BrokerMetadata,
    check_broker_id,
    check_cluster_id,
    common_metadata,
)
from replog.zk import security as zk_security
from replog.zk.client import BrokerAlreadyRegisteredError, KafkaZkClient
from replog.zk.data import BrokerInfo, EndPoint

log = logging.getLogger(__name__)

# What a broker fenced from ZooKeeper still answers: the controller, which restores it.
CONTROLLER_APIS = frozenset(
    {
        ApiKey.API_VERSIONS,
        ApiKey.LEADER_AND_ISR,
        ApiKey.UPDATE_METADATA,
        ApiKey.STOP_REPLICA,
        ApiKey.CONTROLLED_SHUTDOWN,
    }
)


FLUSH_SLICE_S = 0.01
"""The longest the minute's flush holds the event loop before letting requests in."""


class Broker:
    def __init__(self, config: KafkaConfig) -> None:
        self.config = config
        self.log_manager = LogManager(
            list(config.log_dirs),
            self._default_log_config(),
            self._cleaner_config(),
            shutdown_threads_per_dir=config.num_recovery_threads_per_data_dir,
        )
        self.metadata_cache = MetadataCache()
        self.zk = KafkaZkClient(
            config.zookeeper_connect,
            session_timeout_ms=config.zookeeper_session_timeout_ms,
            connection_timeout_ms=config.zookeeper_connection_timeout_ms,
            # SASL to ZooKeeper from KAFKA_OPTS' JAAS file, as a Kafka broker
            login=zk_security.login_from_environment(dict(os.environ)),
            set_acl=config.zookeeper_set_acl,
        )
        self.replica_manager = ReplicaManager(
            config, self.log_manager, self.log_config_for, self.zk
        )
        self.configs = ConfigManager(config, self.zk, self.log_manager, self.replica_manager)
        self.replica_manager.on_replica_deleted = self.configs.forget_topic
        self.replica_manager.is_live_broker = lambda broker_id: (
            broker_id in self.metadata_cache.brokers
        )
        # How this broker connects to the others (inter.broker.listener.name's security)
        self.client_security = inter_broker_client_security(config)
        self.replica_manager.fetcher_manager = ReplicaFetcherManager(
            FetcherConfig(
                broker_id=config.broker_id,
                fetch_max_bytes=config.replica_fetch_max_bytes,
                fetch_wait_max_ms=config.replica_fetch_wait_max_ms,
                fetch_min_bytes=config.replica_fetch_min_bytes,
                fetch_backoff_ms=config.replica_fetch_backoff_ms,
                request_timeout_ms=config.request_timeout_ms,
                num_fetchers=config.num_replica_fetchers,
                security=self.client_security,
            ),
            quota=self.configs.follower_quota,
            # Fetch v15: topics by the ids of the logs, and this broker's epoch (KIP-903)
            topic_id=self.log_manager.topic_id,
            broker_epoch=lambda: self.broker_epoch,
        )
        self.replica_manager.fetcher_manager.on_storage_error = self.replica_manager.storage_failed
        self.halt = os._exit
        """Ends the process at once (Kafka ``Exit.halt``) when no log dir is left."""
        self.log_dir_failure = LogDirFailureHandler(
            config.broker_id, self.log_manager, self.zk, lambda code: self.halt(code)
        )
        self.admin = AdminManager(config, self.zk, self.metadata_cache)
        self.producer_ids = ProducerIdManager(config.broker_id, self.zk.client)
        self.group_coordinator = GroupCoordinator(
            config,
            self.replica_manager,
            lambda: len(self.metadata_cache.partitions.get(GROUP_METADATA_TOPIC_NAME, {})) or None,
        )
        self.transaction_coordinator = TransactionCoordinatorRuntime(
            transaction_config(config),
            self.replica_manager,
            self.producer_ids.generate_producer_id,
            lambda: (
                len(self.metadata_cache.partitions.get(GROUP_METADATA_TOPIC_NAME, {}))
                or config.offsets_topic_num_partitions
            ),
            self._marker_channel,
            state_partition_count=lambda: len(
                self.metadata_cache.partitions.get(TRANSACTION_STATE_TOPIC_NAME, {})
            ),
        )
        self.services = BrokerServices(
            config=config,
            replica_manager=self.replica_manager,
            metadata_cache=self.metadata_cache,
            admin=self.admin,
            producer_ids=self.producer_ids,
            configs=self.configs,
            group_coordinator=self.group_coordinator,
            fetch_manager=FetchManager(
                FetchSessionCache(
                    config.max_incremental_fetch_session_cache_slots,
                    config.min_incremental_fetch_session_eviction_ms,
                    random.Random(),
                )
            ),
            authorizer=Authorizer.from_config(config, self.zk),
            transaction_coordinator=self.transaction_coordinator,
            transaction_verifier=TransactionVerifier(
                self.metadata_cache,
                listener=config.inter_broker_listener_name.upper(),
                security=self.client_security,
                request_timeout_ms=config.request_timeout_ms,
                client_id=f"broker-{config.broker_id}-txn-verification",
            ),
        )
        self.controller_commands = ControllerCommands(
            self.services, self.zk, lambda: self.broker_epoch
        )
        self.controller_requests = ControllerRequests(
            lambda: self.controller, self.metadata_cache, self._cluster_allowed
        )
        self.metrics = (
            BrokerMetrics(
                BrokerStateCollector(
                    self.replica_manager,
                    self.services.topic_stats,
                    self.group_coordinator,
                    lambda: self.controller,
                    self.services.fetch_manager,
                    RemoteEndOffsets(
                        config.broker_id,
                        self.metadata_cache,
                        config.inter_broker_listener_name,
                        self.client_security,
                    ),
                )
            )
            if config.metrics_port >= 0
            else None
        )
        if self.metrics is not None:
            self.metrics.state.transaction_coordinator = self.transaction_coordinator
        handlers = request_handlers(
            self.services,
            self.zk,
            self._classic_group_service(),
            self.controller_commands,
            self.controller_requests,
            lambda: self.controller,
            self._cluster_allowed,
        )
        # One server per listener; ``self.server`` is the inter-broker one.
        self.servers = [
            KafkaServer(
                listener.host,
                listener.port,
                handlers,
                socket_request_max_bytes=config.socket_request_max_bytes,
                on_unsupported_version=metadata.unsupported_version_response,
                request_observer=None if self.metrics is None else self.metrics.observe_request,
                security=listener_security(config, listener.name, self._scram_credential),
                serves=self._serves,
            )
            for listener in config.listeners
        ]
        inter_broker = config.inter_broker_listener_name.upper()
        self.server = next(s for s in self.servers if s.security.listener_name == inter_broker)
        self.controller: Any = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = asyncio.Event()
        self.broker_epoch = -1
        self._zk_fence: ZkSessionFence | None = None

    def _marker_channel(self, listener: TransactionCoordinatorRuntime) -> TransactionMarkerChannel:
        """WriteTxnMarkers to the partition leaders, as the controller and fetchers reach
        the other brokers (the inter-broker listener and its security)."""
        cache, name = self.metadata_cache, self.config.inter_broker_listener_name.upper()

        def leader_of(topic: str, partition: int) -> int | None:
            if cache.controller_id is None:
                return -1  # no UpdateMetadata yet: wait, a partition unknown is not deleted
            info = cache.partition(topic, partition)
            return None if info is None else info.leader

        def endpoint_of(broker_id: int) -> tuple[str, int] | None:
            broker = cache.brokers_for(name).get(broker_id)
            return None if broker is None else (broker.host, broker.port)

        return TransactionMarkerChannel(
            self.config.broker_id,
            leader_of,
            endpoint_of,
            listener,
            request_timeout_ms=self.config.request_timeout_ms,
            security=self.client_security,
        )

    def _cluster_allowed(self, ctx: RequestContext, operation: AclOperation) -> bool:
        return self.services.allowed(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def _scram_credential(self, mechanism: str, user: str) -> sasl.ScramCredential | None:
        """A user's SCRAM credential from ``/config/users/<user>`` (read at each
        authentication, so a new or changed password applies at once), or None."""
        try:
            config, _ = self.zk.get_entity_config("users", user)
        except ValueError:  # a name ZooKeeper cannot hold
            return None
        text = config.get(mechanism)
        if text is None:
            return None
        try:
            return sasl.parse_credential(text)
        except ValueError as exc:
            log.error("/config/users/%s: unreadable %s credential: %s", user, mechanism, exc)
            return None

    def _cleaner_config(self) -> CleanerConfig:
        c = self.config
        return CleanerConfig(
            enable_cleaner=c.log_cleaner_enable,
            num_threads=c.log_cleaner_threads,
            dedupe_buffer_size=c.log_cleaner_dedupe_buffer_size,
            max_io_bytes_per_second=c.log_cleaner_io_max_bytes_per_second,
            backoff_ms=c.log_cleaner_backoff_ms,
        )

    def _default_log_config(self) -> LogConfig:
        return LogConfig.from_properties(self.config.topic_defaults())

    def log_config_for(self, topic: str) -> LogConfig:
        return self.configs.log_config_for(topic)

    def _classic_group_service(self) -> ClassicGroupService:
        """The classic group protocol on the group coordinator, and the replay of the
        records of ``__consumer_offsets`` by key version."""
        classic = ClassicGroupService(self.group_coordinator)
        self.group_coordinator.listeners.append(classic)
        self.group_coordinator.replayers[group_records.GROUP_METADATA_KEY] = (
            replay_group_metadata_record
        )
        for version in range(
            group_records.FIRST_CONSUMER_GROUP_KEY, group_records.LAST_CONSUMER_GROUP_KEY + 1
        ):
            self.group_coordinator.replayers[version] = consumer_records.replay
        return classic

    # -- lifecycle ----------------------------------------------------------

    async def start(self) -> None:
        # Kafka's order: ZooKeeper and its cluster id, meta.properties, then the logs. The
        # locks come first here, so that a second broker on a dir is refused at once.
        self.log_manager.lock_log_dirs()
        require_live_log_dirs(self.log_manager)
        stored = common_metadata(self.log_manager.read_broker_metadata())
        check_broker_id(self.config.broker_id, stored)
        require_live_log_dirs(self.log_manager)
        await connect_zookeeper(self.zk, self.config)
        cluster_id = await asyncio.to_thread(self.zk.get_or_create_cluster_id)
        check_cluster_id(cluster_id, stored)
        self.admin.cluster_id = cluster_id
        self.log_manager.startup(now_ms())
        require_live_log_dirs(self.log_manager)
        self.replica_manager.on_log_dir_offline = self.log_dir_failure.on_log_dir_offline
        # The log cleaner's threads hand every call on the logs to this loop.
        self.log_manager.start_cleaner(LoopOwner(asyncio.get_running_loop()))
        await self.configs.start()  # dynamic configs before any log is served
        if self.services.authorizer is not None:
            await self.services.authorizer.start()  # ACLs before any request is served
        for server in self.servers:
            await server.start()
        if self.metrics is not None:
            await self.metrics.start(self.server.host, self.config.metrics_port)
        bound = {s.security.listener_name: s.port for s in self.servers}
        info = BrokerInfo(
            self.config.broker_id,
            tuple(
                EndPoint(
                    a.name,
                    a.host,
                    a.port or bound.get(a.name, 0),
                    self.config.security_protocol(a.name),
                )
                for a in self.config.advertised_listeners
            ),
            rack=self.config.broker_rack or None,
        )
        self._broker_info = info
        try:
            self.broker_epoch = await register_broker(self.zk, self.config, info)
        except BrokerAlreadyRegisteredError as exc:
            raise BrokerStartupError(f"{exc} (another broker with this broker.id?)") from None
        # Registered: the dirs are this broker's, of this cluster (Kafka writes it here).
        self.log_manager.checkpoint_broker_metadata(
            BrokerMetadata(self.config.broker_id, cluster_id), time.time()
        )
        self.controller = KafkaController(
            self.config.broker_id,
            self.zk,
            self.config,
            register_broker=self._reregister,
            client_security=self.client_security,
        )
        self.controller.unclean_leader_election_default = lambda: (
            self.configs.layers.unclean_leader_election_enable
        )
        self.configs.on_topic_config_change = self.controller.on_topic_config_change
        self.configs.on_unclean_default_change = lambda _enabled: (
            self.controller.on_unclean_default_change()
        )
        await self.controller.start()
        self._zk_fence = ZkSessionFence(
            asyncio.get_running_loop(),
            self.config.zookeeper_session_timeout_ms / 1000,
            self._fence_from_zookeeper,
            self._rejoin_after_fence,
        )
        self.zk.add_session_listener(self._zk_fence.on_state)
        log.info(
            "broker %d registered in ZooKeeper (epoch %d), listening on %s:%d",
            self.config.broker_id,
            self.broker_epoch,
            self.server.host,
            self.server.port,
        )
        await self._recover_assignments()
        self.transaction_coordinator.start()
        for task in periodic_tasks(
            self.config,
            self.log_manager,
            self.replica_manager,
            self.group_coordinator,
            self._flush_dirty_logs,
        ):
            self._tasks.append(asyncio.create_task(task))

    def _serves(self, api_key: int) -> bool:
        """While fenced from ZooKeeper (until the controller's next UpdateMetadata), only
        the controller's requests: clients are turned away, so that they ask the other
        brokers where the leaders went (librdkafka asks its busiest connection, which
        would otherwise be this broker)."""
        return self.metadata_cache.fenced_leader is None or api_key in CONTROLLER_APIS

    def _fence_from_zookeeper(self) -> None:
        """Our session is surely gone (``replog.server.zk_fence``): stop leading, and stop
        telling clients that this broker leads."""
        self.metadata_cache.fenced_leader = self.config.broker_id
        resigned = self.replica_manager.resign_leaderships()
        log.warning(
            "broker %d: cut off from ZooKeeper; stopped leading %d partitions",
            self.config.broker_id,
            resigned,
        )

    async def _rejoin_after_fence(self) -> None:
        """The session outlived the fence: leave and register again, so that the controller
        sees a new broker epoch and sends LeaderAndIsr to this broker afresh."""
        await asyncio.to_thread(self.zk.deregister_broker, self.config.broker_id)
        await self._reregister()

    async def _reregister(self) -> None:
        """A new ZooKeeper session lost our ephemeral registration: register again."""
        self.broker_epoch = await register_broker(self.zk, self.config, self._broker_info)
        # a leader fenced at an epoch obeys the controller's word at it from now on
        self.replica_manager.on_session_renewed()
        log.info(
            "broker %d registered again after a new ZooKeeper session (epoch %d)",
            self.config.broker_id,
            self.broker_epoch,
        )

    async def _recover_assignments(self) -> None:
        """Seed 000 question 5: delete local partitions no longer assigned to this broker.

        Roles themselves come from the controller's LeaderAndIsr, which it sends
        to every broker that registers.
        """
        topics = await asyncio.to_thread(self.zk.get_all_topics)
        assignments = await asyncio.to_thread(self.zk.get_topic_assignments, topics)
        deleting = await asyncio.to_thread(self.zk.get_topics_marked_for_deletion)
        mine = {
            (topic, partition)
            for topic, parts in assignments.items()
            if topic not in deleting
            for partition, replicas in parts.items()
            if self.config.broker_id in replicas
        }
        for topic, partition in sorted(self.log_manager.local_partitions_on_disk() - mine):
            log.info(
                "%s-%d is no longer assigned to broker %d: deleting its local log",
                topic,
                partition,
                self.config.broker_id,
            )
            self.log_manager.delete_log(topic, partition)

    async def _flush_dirty_logs(self) -> None:
        """The minute's fsyncs, giving the event loop back every ``FLUSH_SLICE_S``: after
        a leader change of thousands of partitions they take seconds, which the broker
        (and the controller, if it is here) spent unable to answer anything."""
        slice_end = time.monotonic() + FLUSH_SLICE_S
        for _ in self.log_manager.flush_dirty_log_steps():
            if time.monotonic() >= slice_end:
                await asyncio.sleep(0)
                slice_end = time.monotonic() + FLUSH_SLICE_S

    async def _controlled_shutdown(self) -> None:
        """Kafka ``controlledShutdown``: leaderships move away while the listeners
        still serve (see ``replog.server.controlled_shutdown``)."""
        started = time.monotonic()
        c = self.config
        done = await controlled_shutdown(
            c.broker_id,
            lambda: self.broker_epoch,
            partial(
                find_controller,
                self.zk,
                self.metadata_cache,
                self.config.inter_broker_listener_name.upper(),
            ),
            c.controlled_shutdown_max_retries,
            c.controlled_shutdown_retry_backoff_ms / 1000,
            c.controller_socket_timeout_ms / 1000,
            send=partial(send_controlled_shutdown, security=self.client_security),
        )
        log.info(
            "broker %d: controlled shutdown %s in %.3f s",
            c.broker_id,
            "completed" if done else "gave up",
            time.monotonic() - started,
        )

    async def run_until_stopped(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stopped.set)
        await self.start()
        await self._stopped.wait()
        await self.stop()

    async def stop(self) -> None:
        log.info("broker %d shutting down", self.config.broker_id)
        if self.config.controlled_shutdown_enable and self.broker_epoch >= 0:
            await self._controlled_shutdown()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.controller is not None:
            await self.controller.stop()
        for server in self.servers:
            await server.stop()
        if self.metrics is not None:
            await self.metrics.stop()
        await self.group_coordinator.shutdown()
        await self.transaction_coordinator.shutdown()
        if self.services.transaction_verifier is not None:
            await self.services.transaction_verifier.close()
        await self.configs.stop()
        await self.replica_manager.shutdown()
        if self._zk_fence is not None:
            self._zk_fence.close()
        await asyncio.to_thread(self.log_manager.stop_cleaner)  # its threads wait on this loop
        self.log_manager.shutdown()
        await asyncio.to_thread(self.zk.close)
        log.info("broker %d stopped cleanly", self.config.broker_id)
