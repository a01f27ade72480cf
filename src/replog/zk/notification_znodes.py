"""Notifications through ZooKeeper: ISR changes (``/isr_change_notification``), log
dir failures (KIP-112, ``/log_dir_event_notification``), and dynamic configs
(``/config/<type>/<name>`` with their ``/config/changes`` notices; Kafka
``AdminZkClient.changeConfigs``, ``ZkConfigManager``).

Concurrency: as :class:`~replog.zk.client.KafkaZkClient` (blocking; worker threads).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kazoo.client import TransactionRequest
from kazoo.exceptions import NoNodeError, RolledBackError

from replog.zk import config_znodes as cz
from replog.zk import data as zd
from replog.zk import notification_data as nd
from replog.zk import security as zsec
from replog.zk.data import TopicPartition
from replog.zk.fencing import ControllerMovedError
from replog.zk.ops import ZkWriteError
from replog.zk.znode_access import GET_DATA, ZnodeAccess, epoch_check, log

__all__ = ["NotificationZnodes"]


class NotificationZnodes(ZnodeAccess):
    """``KafkaZkClient``'s methods on notification and dynamic config znodes."""

    # --- ISR change notifications ----------------------------------------------------

    def propagate_isr_changes(self, partitions: Iterable[TopicPartition]) -> str:
        """Create ``/isr_change_notification/isr_change_<seq>``; return the node's name."""
        path = self._ops.call(
            self._zk.create,
            zd.isr_change_path(zd.ISR_CHANGE_PREFIX),
            nd.encode_isr_change(partitions),
            sequence=True,
        )
        return str(path).rsplit("/", 1)[-1]

    def get_isr_change_notifications(self) -> list[str]:
        return sorted(self._ops.call(self._zk.get_children, zd.ISR_CHANGE_NOTIFICATION_PATH))

    def read_isr_change_notifications(self, names: Iterable[str]) -> set[TopicPartition]:
        paths = [zd.isr_change_path(name) for name in names]
        changed: set[TopicPartition] = set()
        for result in self._ops.read_many(paths, GET_DATA):
            if not isinstance(result, Exception):
                changed |= nd.decode_isr_change(result[0])
        return changed

    def delete_isr_change_notifications(
        self, names: Iterable[str], expected_controller_epoch_zk_version: int
    ) -> None:
        """Delete the named ISR change notifications, guarded by the epoch check."""
        paths = [zd.isr_change_path(name) for name in names]
        results = self._ops.write_batched(
            [(p, ("delete", p, b"", -1)) for p in paths],
            epoch_check(expected_controller_epoch_zk_version),
        )
        if any(r.error is ZkWriteError.CONTROLLER_MOVED for r in results.values()):
            raise ControllerMovedError("controller moved while deleting ISR change notifications")

    # --- log dir event notifications (KIP-112) ----------------------------------------

    def propagate_log_dir_event(self, broker_id: int) -> str:
        """Kafka ``propagateLogDirEvent``: create ``/log_dir_event_notification/
        log_dir_event_<seq>`` naming ``broker_id``; return the node's name."""
        path = self._ops.call(
            self._zk.create,
            zd.log_dir_event_path(zd.LOG_DIR_EVENT_PREFIX),
            nd.encode_log_dir_event(broker_id),
            sequence=True,
            makepath=True,
        )
        return str(path).rsplit("/", 1)[-1]

    def get_log_dir_event_notifications(self) -> list[str]:
        try:
            names = self._ops.call(self._zk.get_children, zd.LOG_DIR_EVENT_NOTIFICATION_PATH)
        except NoNodeError:
            return []
        return sorted(names)

    def read_log_dir_event_notifications(self, names: Iterable[str]) -> set[int]:
        """The brokers the named notifications report (Kafka
        ``getBrokerIdsFromLogDirEvents``); unreadable or vanished ones are skipped."""
        paths = [zd.log_dir_event_path(name) for name in names]
        brokers: set[int] = set()
        for result in self._ops.read_many(paths, GET_DATA):
            if isinstance(result, Exception):
                continue
            try:
                broker = nd.decode_log_dir_event(result[0])
            except zd.ZkDataError as exc:
                log.warning("ignoring %s", exc)
                continue
            if broker is not None:
                brokers.add(broker)
        return brokers

    def delete_log_dir_event_notifications(
        self, names: Iterable[str], expected_controller_epoch_zk_version: int
    ) -> None:
        """Delete the named notifications, guarded by the epoch check."""
        paths = [zd.log_dir_event_path(name) for name in names]
        results = self._ops.write_batched(
            [(p, ("delete", p, b"", -1)) for p in paths],
            epoch_check(expected_controller_epoch_zk_version),
        )
        if any(r.error is ZkWriteError.CONTROLLER_MOVED for r in results.values()):
            raise ControllerMovedError("controller moved while deleting log dir events")

    # --- dynamic configs (Kafka AdminZkClient.changeConfigs, ZkConfigManager) ---------

    def get_entity_config(
        self, entity_type: str, entity_name: str
    ) -> tuple[dict[str, str], int | None]:
        """``/config/<type>/<name>`` and its znode version; ``({}, None)`` when absent."""
        path = cz.entity_config_path(entity_type, entity_name)
        try:
            data, stat = self._ops.call(self._zk.get, path)
        except NoNodeError:
            return {}, None
        return cz.decode_entity_config(data), stat.version

    def get_entity_names(self, entity_type: str) -> list[str]:
        """The entities with a ``/config/<type>/<name>`` znode (e.g. the SCRAM users)."""
        if entity_type not in zd.CONFIG_TYPES:
            raise ValueError(f"unknown config entity type {entity_type!r}")
        try:
            return sorted(self._ops.call(self._zk.get_children, f"{zd.CONFIG_PATH}/{entity_type}"))
        except NoNodeError:
            return []

    def get_entity_configs(
        self, entity_type: str, names: Iterable[str]
    ) -> dict[str, dict[str, str]]:
        """Many entities' configs in batched reads; absent ones are omitted."""
        wanted = list(names)
        paths = [cz.entity_config_path(entity_type, name) for name in wanted]
        return {
            name: cz.decode_entity_config(result[0])
            for name, result in zip(wanted, self._ops.read_many(paths, GET_DATA), strict=True)
            if not isinstance(result, Exception)
        }

    def change_entity_config(
        self,
        entity_type: str,
        entity_name: str,
        config: Mapping[str, str],
        expected_version: int | None,
    ) -> None:
        """Kafka ``AdminZkClient.changeEntityConfig`` in one transaction: write
        ``/config/<type>/<name>`` and create ``/config/changes/config_change_<seq>``.

        ``expected_version`` fences the write: the znode version the caller read, or
        ``None`` if it read no znode. Raises ``BadVersionError``/``NodeExistsError``
        (nothing written) when another writer came first.
        """
        path = cz.entity_config_path(entity_type, entity_name)
        data = cz.encode_entity_config(config)
        note = cz.encode_config_change(cz.ConfigChange(entity_type, entity_name))

        acl = zsec.default_acls(path, self._set_acl)  # (SCRAM credentials: owner only)

        def build(txn: TransactionRequest) -> None:
            if expected_version is None:
                txn.create(path, data, acl=acl)
            else:
                txn.set_data(path, data, expected_version)
            txn.create(cz.config_change_path(cz.CONFIG_CHANGE_PREFIX), note, sequence=True)

        for result in self._ops.commit(build):
            if isinstance(result, Exception) and not isinstance(result, RolledBackError):
                raise result

    def get_config_change_notifications(self) -> list[str]:
        return sorted(self._ops.call(self._zk.get_children, cz.CONFIG_CHANGES_PATH))

    def read_config_change_notifications(
        self, names: Iterable[str]
    ) -> dict[str, tuple[bytes, int]]:
        """Each notification's data and creation time (ms); vanished ones are omitted."""
        wanted = list(names)
        paths = [cz.config_change_path(name) for name in wanted]
        return {
            name: (result[0], int(result[1].ctime))
            for name, result in zip(wanted, self._ops.read_many(paths, GET_DATA), strict=True)
            if not isinstance(result, Exception)
        }

    def delete_config_change_notifications(self, names: Iterable[str]) -> None:
        """Delete expired notifications; one already deleted by another broker is fine."""
        for name in names:
            try:
                self._ops.call(self._zk.delete, cz.config_change_path(name))
            except NoNodeError:
                pass
