"""Broker configuration: Kafka's ``server.properties`` names and defaults.

By role: ``keys`` (the key table: types, defaults), ``kafka_config`` (``KafkaConfig``,
parsed and checked), ``listeners`` (``NAME://host:port``), ``properties`` (reading
files and overrides). The topic keys' broker defaults come from storage's table
(``replog.storage.log_config.BROKER_LOG_KEYS``), with Kafka's unit synonyms.

Only keys replog understands are accepted; an unknown key or a bad value raises
``ConfigError`` with a one-line message naming the key, so ``replog broker start``
can exit non-zero with that line.
"""

from replog.config.kafka_config import KafkaConfig
from replog.config.keys import BROKER_KEYS, DEFAULT_VALUES, KEY_TYPES, KNOWN_KEYS
from replog.config.listeners import LISTENER_PREFIX, SECURITY_PROTOCOLS, Listener, parse_listeners
from replog.config.properties import ConfigError, parse_overrides, read_properties

__all__ = [
    "BROKER_KEYS",
    "DEFAULT_VALUES",
    "KEY_TYPES",
    "KNOWN_KEYS",
    "LISTENER_PREFIX",
    "SECURITY_PROTOCOLS",
    "ConfigError",
    "KafkaConfig",
    "Listener",
    "parse_listeners",
    "parse_overrides",
    "read_properties",
]
