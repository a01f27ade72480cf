"""Which Kafka APIs replog serves, at which versions, and their schema classes.

Schemas come from kio; the ZooKeeper-era controller APIs (LeaderAndIsr,
StopReplica, UpdateMetadata, ControlledShutdown) come from
``replog.protocol.controller_schemas``.
"""

from __future__ import annotations

import enum
import sys
from dataclasses import fields
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69


# api key -> (min version, max version) that this broker answers. The lower ends follow
# Kafka 4.0's KIP-896 baseline (clients of Kafka 2.1 and later); the upper ends are at
# least what librdkafka 2.16 asks for (tests/test_protocol_currency.py). Unknown tagged
# fields of flexible versions are skipped (frames falls back to schema_reader).
CLIENT_API_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 12),
    ApiKey.FETCH: (4, 17),
    ApiKey.LIST_OFFSETS: (1, 11),
    ApiKey.METADATA: (0, 13),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.INIT_PRODUCER_ID: (0, 5),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 4),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.DESCRIBE_CLUSTER: (0, 2),
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.OFFSET_COMMIT: (2, 9),
    ApiKey.OFFSET_FETCH: (1, 9),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.TXN_OFFSET_COMMIT: (0, 4),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.JOIN_GROUP: (2, 9),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
    # Inter-broker (ClusterAction). v0 left with Kafka 4.0 (KIP-896); kio has v1 and v2,
    # and v2's transaction version 2 (KIP-890 part 2) is not served.
    ApiKey.WRITE_TXN_MARKERS: (1, 1),
}

# Filled in by replog.protocol.controller_schemas when it is importable.
CONTROLLER_API_VERSIONS: dict[int, tuple[int, int]] = {}
# Both tables merged, kept current by ``register_extra_api``: ``is_supported`` runs on
# every request, so it reads one dictionary instead of merging two.
_SUPPORTED: dict[int, tuple[int, int]] = dict(CLIENT_API_VERSIONS)
_EXTRA_REQUESTS: dict[int, dict[int, type]] = {}
_EXTRA_RESPONSES: dict[int, dict[int, type]] = {}


def register_extra_api(
    api_key: int,
    versions: tuple[int, int],
    requests: dict[int, type],
    responses: dict[int, type],
) -> None:
    """Make an API whose schema kio does not carry known to the server and client."""
    CONTROLLER_API_VERSIONS[api_key] = versions
    _SUPPORTED[api_key] = versions
    _EXTRA_REQUESTS[api_key] = requests
    _EXTRA_RESPONSES[api_key] = responses


def supported_versions() -> dict[int, tuple[int, int]]:
    return {**CLIENT_API_VERSIONS, **CONTROLLER_API_VERSIONS}


def is_supported(api_key: int, version: int) -> bool:
    span = _SUPPORTED.get(api_key)
    return span is not None and span[0] <= version <= span[1]


@cache
def request_schema(api_key: int, version: int) -> type[Any]:
    if api_key in _EXTRA_REQUESTS:
        return _EXTRA_REQUESTS[api_key][version]
    return load_request_schema(api_key, version)


@cache
def response_schema(api_key: int, version: int) -> type[Any]:
    if api_key in _EXTRA_RESPONSES:
        return _EXTRA_RESPONSES[api_key][version]
    return load_response_schema(api_key, version)


@cache
def _field_names(cls: type[Any]) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def make(cls: type[Any], **values: Any) -> Any:
    """Build a kio entity from a superset of its fields.

    Handlers write one response shape for all versions; each version's class
    keeps the fields it has and drops the rest.
    """
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def nested(parent: type[Any], name: str) -> type[Any]:
    """The nested entity class called ``name`` in the module that defines ``parent``."""
    return getattr(sys.modules[parent.__module__], name)


def _register_controller_apis() -> None:
    from replog.protocol import controller_schemas as schemas

    for key, versions in schemas.API_VERSIONS.items():
        register_extra_api(key, versions, schemas.REQUESTS[key], schemas.RESPONSES[key])


_register_controller_apis()
