"""Dynamic topic and broker configs on one broker (Kafka ``ZkConfigManager``,
``TopicConfigHandler``, ``BrokerConfigHandler``, and the config half of ``ZkAdminManager``).

Reading: at start the broker reads ``/config/brokers/<default>``, ``/config/brokers/<id>``
and the configs of the topics it holds logs of; then it watches ``/config/changes``.
Each new ``config_change_<seq>`` names an entity; the broker re-reads that entity's
znode and applies it at once to its live logs and partitions (retention, segment
rolling, max.message.bytes, timestamps, min.insync.replicas) and tells the controller
(``unclean.leader.election.enable``). Notifications older than 15 minutes are deleted.

Writing: DescribeConfigs, AlterConfigs and IncrementalAlterConfigs validate with the
pure rules of ``replog.server.dynamic_config`` and write the entity's znode and a change
notification in one transaction, fenced by the znode version read (a concurrent writer
makes the request re-read and merge again). Nothing is written when a request is refused
or ``validate_only``.

Concurrency: owned by the event loop. ZooKeeper calls run in worker threads; the kazoo
watch only hands the children list to the loop (``loop.call_soon_threadsafe``), where one
task processes notifications in sequence order. State changes (``layers``, the topic
override cache) happen on the loop, never across an await between a read and its use.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kazoo.exceptions import BadVersionError, NodeExistsError
from kio.schema.errors import ErrorCode

from replog.common.clock import now_ms
from replog.replication.quota import ReplicationQuota
from replog.server.admin import validate_topic_name
from replog.server.dynamic_config import (
    AlterOp,
    BrokerConfigLayers,
    ConfigEntry,
    ConfigRejected,
    ResourceType,
    apply_incremental,
    broker_entity,
    check_ops,
    describe_broker,
    describe_topic,
    sanitize_broker_config,
    sanitize_topic_config,
    validate_broker_config,
    validate_topic_config,
)
from replog.storage.log_config import LogConfig
from replog.zk import config_znodes as cz
from replog.zk.ops import WatchHandle, ZkSessionState

if TYPE_CHECKING:
    from replog.config import KafkaConfig
    from replog.replication.replica_manager import ReplicaManager
    from replog.storage.log_manager import LogManager
    from replog.zk.client import KafkaZkClient

log = logging.getLogger(__name__)

WRITE_ATTEMPTS = 10  # read-merge-write rounds against concurrent writers


@dataclass(frozen=True, slots=True)
class Outcome:
    error: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass(frozen=True, slots=True)
class Described:
    error: ErrorCode
    message: str | None
    entries: tuple[ConfigEntry, ...] = ()


class ConfigManager:
    """See the module docstring. ``on_topic_config_change(topic)`` and
    ``on_unclean_default_change(enabled)`` are the controller's hooks (set by the broker)."""

    def __init__(
        self,
        config: KafkaConfig,
        zk: KafkaZkClient,
        log_manager: LogManager,
        replica_manager: ReplicaManager,
    ) -> None:
        self.broker_id = config.broker_id
        self.zk = zk
        self.log_manager = log_manager
        self.replica_manager = replica_manager
        self.layers = BrokerConfigLayers(config.broker_id, dict(config.static_properties))
        # Kafka ReplicationQuotaManager LeaderReplication / FollowerReplication: the rates
        # follow the dynamic broker configs (_install_layers).
        window = {
            "window_num": config.replication_quota_window_num,
            "window_size_s": float(config.replication_quota_window_size_seconds),
        }
        self.leader_quota = ReplicationQuota(config.leader_replication_throttled_rate, **window)
        self.follower_quota = ReplicationQuota(config.follower_replication_throttled_rate, **window)
        self.on_topic_config_change: Callable[[str], None] | None = None
        self.on_unclean_default_change: Callable[[bool], None] | None = None
        self._topic_overrides: dict[str, dict[str, str]] = {}
        self._last_sequence = -1
        self._created_ms: dict[str, int] = {}  # notification -> znode ctime, for the purge
        self._children: list[str] = []
        self._wake = asyncio.Event()
        self._resync = False
        self._task: asyncio.Task[None] | None = None
        self._watch: WatchHandle | None = None

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Read the dynamic configs, apply them to the loaded logs, watch for changes."""
        names = await asyncio.to_thread(self.zk.get_config_change_notifications)
        existing = await asyncio.to_thread(self.zk.read_config_change_notifications, names)
        self._created_ms = {name: ctime for name, (_, ctime) in existing.items()}
        self._last_sequence = max(
            (cz.change_sequence(n) for n in cz.changes_after(names, -1)), default=-1
        )
        await self._load_everything()
        loop = asyncio.get_running_loop()

        def on_children(children: list[str]) -> None:  # kazoo's thread
            loop.call_soon_threadsafe(self._on_children, children)

        def on_session(state: ZkSessionState) -> None:  # kazoo's connection thread
            if state is ZkSessionState.NEW_SESSION:
                loop.call_soon_threadsafe(self._on_new_session)

        self._on_session = on_session
        self.zk.add_session_listener(on_session)
        self._watch = await asyncio.to_thread(
            self.zk.watch_children, cz.CONFIG_CHANGES_PATH, on_children
        )
        self._task = asyncio.create_task(self._run(), name="config-changes")

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        with contextlib.suppress(ValueError, AttributeError):
            self.zk.remove_session_listener(self._on_session)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _load_everything(self) -> None:
        """Both broker layers and the overrides of every topic with a local log."""
        default, _ = await asyncio.to_thread(
            self.zk.get_entity_config, cz.BROKERS, cz.DEFAULT_ENTITY
        )
        mine, _ = await asyncio.to_thread(
            self.zk.get_entity_config, cz.BROKERS, cz.broker_entity_name(self.broker_id)
        )
        topics = sorted({topic for topic, _ in self.log_manager.local_partitions_on_disk()})
        topics = sorted(set(topics) | set(self._topic_overrides))
        found = await asyncio.to_thread(self.zk.get_entity_configs, cz.TOPICS, topics)
        for topic in topics:
            self._topic_overrides[topic] = self._sanitized_topic(topic, found.get(topic, {}))
        layers = self.layers.with_dynamic(False, self._sanitized_broker(cz.DEFAULT_ENTITY, default))
        self._install_layers(layers.with_dynamic(True, self._sanitized_broker("mine", mine)))
        for topic in topics:
            self._apply_topic(topic)

    # --- the topic configs the logs use -------------------------------------------------

    def log_config_for(self, topic: str) -> LogConfig:
        """The topic's config on this broker: its overrides on this broker's defaults.

        A topic not seen yet has its overrides read from ZooKeeper here, blocking (the
        replica manager asks while creating the partition, on the loop)."""
        overrides = self._topic_overrides.get(topic)
        if overrides is None:
            raw, _ = self.zk.get_entity_config(cz.TOPICS, topic)
            overrides = self._topic_overrides[topic] = self._sanitized_topic(topic, raw)
        return LogConfig.from_properties(overrides, base=self.layers.log_defaults)

    def forget_topic(self, topic: str) -> None:
        """A local replica of the topic was deleted: read its config again if it returns."""
        self._topic_overrides.pop(topic, None)

    def _sanitized_topic(self, topic: str, raw: dict[str, str]) -> dict[str, str]:
        kept, problems = sanitize_topic_config(raw)
        for problem in problems:
            log.warning("topic %s: ignoring its stored config: %s", topic, problem)
        return kept

    def _sanitized_broker(self, entity: str, raw: dict[str, str]) -> dict[str, str]:
        kept, problems = sanitize_broker_config(self.layers.static, raw)
        for problem in problems:
            log.warning("broker config %s: ignoring %s", entity, problem)
        return kept

    def _apply_topic(self, topic: str) -> None:
        """Push the topic's current config into its local logs and partitions."""
        config = self.log_config_for(topic)
        for name, partition in sorted(self.log_manager.local_partitions_on_disk()):
            if name != topic:
                continue
            part = self.replica_manager.get_partition(topic, partition)
            if part is not None:
                part.update_config(config)
            else:
                found = self.log_manager.get_log(topic, partition)
                if found is not None:
                    found.update_config(config)

    def _install_layers(self, layers: BrokerConfigLayers) -> None:
        old, self.layers = self.layers, layers
        effective = layers.kafka_config
        for name, quota, rate in (
            ("leader", self.leader_quota, effective.leader_replication_throttled_rate),
            ("follower", self.follower_quota, effective.follower_replication_throttled_rate),
        ):
            if quota.quota != rate:
                log.info("%s.replication.throttled.rate now %d bytes/s", name, rate)
                quota.update_quota(rate)
        if old.log_defaults != layers.log_defaults:
            self.log_manager.default_config = layers.log_defaults
            for topic in sorted({t for t, _ in self.log_manager.local_partitions_on_disk()}):
                self._apply_topic(topic)
        if old.unclean_leader_election_enable != layers.unclean_leader_election_enable:
            if self.on_unclean_default_change is not None:
                self.on_unclean_default_change(layers.unclean_leader_election_enable)

    # --- change notifications -----------------------------------------------------------

    def _on_children(self, children: list[str]) -> None:
        self._children = children
        self._wake.set()

    def _on_new_session(self) -> None:
        """A new ZooKeeper session may have missed changes: read everything again."""
        self._resync = True
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                if self._resync:
                    self._resync = False
                    await self._load_everything()
                await self._process(list(self._children))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("config change processing failed; retrying")
                await asyncio.sleep(1)
                self._wake.set()

    async def _process(self, children: list[str]) -> None:
        new = cz.changes_after(children, self._last_sequence)
        if new:
            notes = await asyncio.to_thread(self.zk.read_config_change_notifications, new)
            for name in new:
                found = notes.get(name)
                if found is not None:
                    data, ctime = found
                    self._created_ms[name] = ctime
                    try:
                        change = cz.decode_config_change(data)
                    except ValueError as exc:
                        log.warning("skipping config change %s: %s", name, exc)
                    else:
                        await self._apply_change(change)
                self._last_sequence = cz.change_sequence(name)
        present = set(children)
        self._created_ms = {n: c for n, c in self._created_ms.items() if n in present}
        expired = cz.expired_changes(self._created_ms.items(), now_ms())
        if expired:
            await asyncio.to_thread(self.zk.delete_config_change_notifications, expired)
            for name in expired:
                self._created_ms.pop(name, None)

    async def _apply_change(self, change: cz.ConfigChange) -> None:
        if change.entity_type == cz.TOPICS:
            topic = change.entity_name
            raw, _ = await asyncio.to_thread(self.zk.get_entity_config, cz.TOPICS, topic)
            local = any(t == topic for t, _ in self.log_manager.local_partitions_on_disk())
            if local or topic in self._topic_overrides:
                self._topic_overrides[topic] = self._sanitized_topic(topic, raw)
                self._apply_topic(topic)
                log.info("topic %s: config is now %s", topic, self._topic_overrides[topic])
            if self.on_topic_config_change is not None:
                self.on_topic_config_change(topic)
        elif change.entity_type == cz.BROKERS:
            mine = cz.broker_entity_name(self.broker_id)
            if change.entity_name not in (cz.DEFAULT_ENTITY, mine):
                return
            raw, _ = await asyncio.to_thread(
                self.zk.get_entity_config, cz.BROKERS, change.entity_name
            )
            per_broker = change.entity_name == mine
            kept = self._sanitized_broker(change.entity_name, raw)
            self._install_layers(self.layers.with_dynamic(per_broker, kept))
            log.info("broker config %s is now %s", change.entity_name, kept)

    # --- DescribeConfigs ----------------------------------------------------------------

    async def describe(
        self,
        resource_type: int,
        name: str,
        keys: Iterable[str] | None,
        include_synonyms: bool,
        include_documentation: bool,
    ) -> Described:
        """One DescribeConfigs resource, as Kafka's ``ConfigHelper`` answers it in
        ZooKeeper mode: a broker's configs are the ones it runs with (``layers``, applied
        when the change notification arrived; a write not yet notified is not shown), a
        topic's overrides are read from its znode, on this broker's applied defaults."""
        try:
            if resource_type == ResourceType.TOPIC:
                entries = await self._describe_topic(
                    name, keys, include_synonyms, include_documentation
                )
            elif resource_type == ResourceType.BROKER:
                per_broker = broker_entity(self.broker_id, name) is not None
                entries = describe_broker(
                    self.layers, per_broker, keys, include_synonyms, include_documentation
                )
            else:
                raise ConfigRejected(
                    ErrorCode.invalid_request, f"Unsupported resource type: {resource_type}"
                )
        except ConfigRejected as exc:
            return Described(exc.error, exc.message)
        return Described(ErrorCode.none, None, tuple(entries))

    async def _describe_topic(
        self, topic: str, keys, include_synonyms: bool, include_documentation: bool
    ) -> list[ConfigEntry]:
        problem = validate_topic_name(topic)
        if problem:
            raise ConfigRejected(ErrorCode.invalid_topic_exception, problem)
        await self._require_topic(topic)
        raw, _ = await asyncio.to_thread(self.zk.get_entity_config, cz.TOPICS, topic)
        overrides, _ = sanitize_topic_config(raw)
        return describe_topic(self.layers, overrides, keys, include_synonyms, include_documentation)

    async def _require_topic(self, topic: str) -> None:
        if not await asyncio.to_thread(self.zk.topic_exists, topic):
            raise ConfigRejected(
                ErrorCode.unknown_topic_or_partition, f"The topic '{topic}' does not exist."
            )

    async def _read_layers(self) -> BrokerConfigLayers:
        default, _ = await asyncio.to_thread(
            self.zk.get_entity_config, cz.BROKERS, cz.DEFAULT_ENTITY
        )
        mine, _ = await asyncio.to_thread(
            self.zk.get_entity_config, cz.BROKERS, cz.broker_entity_name(self.broker_id)
        )
        return self.layers.with_dynamic(False, default).with_dynamic(True, mine)

    # --- AlterConfigs, IncrementalAlterConfigs ------------------------------------------

    async def alter(
        self,
        resource_type: int,
        name: str,
        ops: Sequence[AlterOp],
        *,
        incremental: bool,
        validate_only: bool,
    ) -> Outcome:
        """One resource of AlterConfigs (``incremental=False``: ``ops`` are SETs and are
        the resource's whole dynamic config) or IncrementalAlterConfigs."""
        try:
            check_ops(ops, incremental)
            if resource_type == ResourceType.TOPIC:
                await self._alter_topic(name, ops, incremental, validate_only)
            elif resource_type == ResourceType.BROKER:
                await self._alter_broker(name, ops, incremental, validate_only)
            else:
                raise ConfigRejected(
                    ErrorCode.invalid_request, f"Unknown resource type {resource_type}"
                )
        except ConfigRejected as exc:
            log.info("config change of %s %r refused: %s", resource_type, name, exc.message)
            return Outcome(exc.error, exc.message)
        return Outcome()

    async def _alter_topic(
        self, topic: str, ops: Sequence[AlterOp], incremental: bool, validate_only: bool
    ) -> None:
        if not topic:
            raise ConfigRejected(
                ErrorCode.invalid_request, "Default topic resources are not allowed."
            )
        for _ in range(WRITE_ATTEMPTS):
            await self._require_topic(topic)
            current, version = await asyncio.to_thread(self.zk.get_entity_config, cz.TOPICS, topic)
            props = (
                apply_incremental(ResourceType.TOPIC, current, ops)
                if incremental
                else {op.name: str(op.value) for op in ops}
            )
            validate_topic_config(topic, props)
            if validate_only:
                return
            if await self._write(cz.TOPICS, topic, props, version):
                log.info("topic %s: config set to %s", topic, props)
                return
        raise _too_busy(f"topic {topic}")

    async def _alter_broker(
        self, name: str, ops: Sequence[AlterOp], incremental: bool, validate_only: bool
    ) -> None:
        broker_id = broker_entity(self.broker_id, name)
        per_broker = broker_id is not None
        entity = cz.broker_entity_name(broker_id)
        for _ in range(WRITE_ATTEMPTS):
            layers = await self._read_layers()
            current, version = await asyncio.to_thread(
                self.zk.get_entity_config, cz.BROKERS, entity
            )
            props = (
                apply_incremental(ResourceType.BROKER, current, ops)
                if incremental
                else {op.name: str(op.value) for op in ops}
            )
            validate_broker_config(layers, per_broker, props)
            if validate_only:
                return
            if await self._write(cz.BROKERS, entity, props, version):
                log.info("broker config %s set to %s", entity, props)
                return
        raise _too_busy(f"broker config {entity}")

    async def _write(self, entity_type: str, name: str, props, version: int | None) -> bool:
        """Write and notify; False if another writer changed the znode since it was read."""
        try:
            await asyncio.to_thread(self.zk.change_entity_config, entity_type, name, props, version)
        except (BadVersionError, NodeExistsError):
            return False
        return True


def _too_busy(what: str) -> ConfigRejected:
    return ConfigRejected(
        ErrorCode.unknown_server_error, f"{what} kept changing under concurrent writers"
    )
