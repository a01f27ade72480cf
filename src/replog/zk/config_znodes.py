"""Kafka's dynamic config znodes (Kafka ``ConfigEntityZNode``,
``ConfigEntityChangeNotificationSequenceZNode``), as pure codecs beside their paths.

==============================================  =========================================
path                                            data
==============================================  =========================================
``/config/topics/<topic>``                      ``{"version":1,"config":{"k":"v"}}``
``/config/brokers/<id>``                        ``{"version":1,"config":{"k":"v"}}``
``/config/brokers/<default>``                   the cluster-wide broker defaults, same
``/config/changes/config_change_<10 digits>``   ``{"version":2,"entity_path":"topics/t"}``
==============================================  =========================================

A writer (Kafka's ``AdminZkClient.changeConfigs``, or the old ``kafka-configs.sh
--zookeeper``) sets the entity's config znode, then creates a persistent sequential
change notification naming it. Every broker watches ``/config/changes`` and re-reads the
named entity (Kafka ``ZkConfigManager``); notifications older than
``CHANGE_EXPIRATION_MS`` are deleted by whichever broker sees them. Version 1
notifications (``{"version":1,"entity_type":"topics","entity_name":"t"}``, Kafka before
1.1) are read too.

No IO here; everything is a plain function of its arguments.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from replog.zk import data as zd

TOPICS = "topics"
BROKERS = "brokers"
DEFAULT_ENTITY = "<default>"  # Kafka ConfigEntityName.Default
CONFIG_CHANGES_PATH = zd.CONFIG_CHANGES_PATH
CONFIG_CHANGE_PREFIX = "config_change_"
CHANGE_EXPIRATION_MS = 15 * 60 * 1000  # Kafka ZkConfigManager's changeExpirationMs
CHANGE_NOTIFICATION_VERSION = 2

# The entity config codec is shared with topic creation (``zk.data``): one format.
encode_entity_config = zd.encode_config
decode_entity_config = zd.decode_config


def entity_config_path(entity_type: str, entity_name: str) -> str:
    """``/config/<type>/<name>``; ``entity_type`` is one of Kafka's config types."""
    if entity_type not in zd.CONFIG_TYPES:
        raise ValueError(f"unknown config entity type {entity_type!r}")
    if not entity_name or "/" in entity_name:
        raise ValueError(f"bad config entity name {entity_name!r}")
    return f"{zd.CONFIG_PATH}/{entity_type}/{entity_name}"


def broker_entity_name(broker_id: int | None) -> str:
    """The entity name of one broker's configs, or of the defaults (``None``)."""
    return DEFAULT_ENTITY if broker_id is None else str(broker_id)


def config_change_path(name: str) -> str:
    return f"{CONFIG_CHANGES_PATH}/{name}"


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """What a change notification names: ``("topics", "t")``, ``("brokers", "<default>")``."""

    entity_type: str
    entity_name: str

    @property
    def entity_path(self) -> str:
        return f"{self.entity_type}/{self.entity_name}"


def encode_config_change(change: ConfigChange) -> bytes:
    body = {"version": CHANGE_NOTIFICATION_VERSION, "entity_path": change.entity_path}
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def decode_config_change(data: bytes) -> ConfigChange:
    """Version 2 (``entity_path``) or version 1 (``entity_type`` and ``entity_name``)."""
    try:
        js = json.loads(data)
    except (TypeError, UnicodeDecodeError, json.JSONDecodeError):
        js = None
    if not isinstance(js, dict):
        raise zd.ZkDataError(f"config change notification: {data!r}")
    version = js.get("version")
    if version == 1:
        entity_type, entity_name = js.get("entity_type"), js.get("entity_name")
    elif version == 2:
        path = js.get("entity_path")
        if not isinstance(path, str) or "/" not in path:
            raise zd.ZkDataError(f"config change notification without entity_path: {data!r}")
        entity_type, _, entity_name = path.partition("/")
    else:
        raise zd.ZkDataError(f"config change notification version {version!r}: {data!r}")
    if entity_type not in zd.CONFIG_TYPES or not isinstance(entity_name, str) or not entity_name:
        raise zd.ZkDataError(f"config change notification names no entity: {data!r}")
    return ConfigChange(entity_type, entity_name)


def change_sequence(name: str) -> int:
    """The sequence number of ``config_change_0000000042`` (42)."""
    digits = name[len(CONFIG_CHANGE_PREFIX) :]
    if not name.startswith(CONFIG_CHANGE_PREFIX) or not digits.isdigit():
        raise zd.ZkDataError(f"not a config change notification: {name!r}")
    return int(digits)


def changes_after(names: Iterable[str], last_sequence: int) -> list[str]:
    """The notifications after ``last_sequence``, oldest first; other znodes are skipped."""
    found = []
    for name in names:
        try:
            sequence = change_sequence(name)
        except zd.ZkDataError:
            continue
        if sequence > last_sequence:
            found.append((sequence, name))
    return [name for _, name in sorted(found)]


def expired_changes(
    ctimes: Iterable[tuple[str, int]], now_ms: int, expiration_ms: int = CHANGE_EXPIRATION_MS
) -> list[str]:
    """Notifications created (znode ctime, ms) more than ``expiration_ms`` before ``now_ms``
    (Kafka ``purgeObsoleteNotifications``)."""
    return sorted(name for name, ctime in ctimes if ctime < now_ms - expiration_ms)
