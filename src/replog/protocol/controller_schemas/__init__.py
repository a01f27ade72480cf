"""Schemas of the ZooKeeper-era inter-broker controller APIs, which kio no longer ships.

LeaderAndIsr (4), StopReplica (5), UpdateMetadata (6) and ControlledShutdown (7,
versions 1-3, the only one sent to the controller) were removed from Kafka
in 4.0 together with the ZooKeeper controller. They are defined here as frozen
slotted dataclasses in kio's generated style, so ``kio.serial.entity_reader`` and
``entity_writer`` encode and decode them like any kio schema. One flexible
version per API is served (see ``API_VERSIONS``), and versions 1-3 of ControlledShutdown.

``replog.protocol.apis`` can register them with
``register_extra_api(key, API_VERSIONS[key], REQUESTS[key], RESPONSES[key])``.
"""

from __future__ import annotations

from . import controlled_shutdown
from .controlled_shutdown import ControlledShutdownRequest, ControlledShutdownResponse
from .leader_and_isr import (
    LeaderAndIsrLiveLeader,
    LeaderAndIsrPartitionError,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    LeaderAndIsrTopicError,
    LeaderAndIsrTopicState,
)
from .stop_replica import (
    StopReplicaPartitionError,
    StopReplicaPartitionState,
    StopReplicaRequest,
    StopReplicaResponse,
    StopReplicaTopicState,
)
from .update_metadata import (
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
    UpdateMetadataTopicState,
)

LEADER_AND_ISR = 4
STOP_REPLICA = 5
UPDATE_METADATA = 6
CONTROLLED_SHUTDOWN = 7

REQUESTS: dict[int, dict[int, type]] = {
    LEADER_AND_ISR: {6: LeaderAndIsrRequest},
    STOP_REPLICA: {3: StopReplicaRequest},
    UPDATE_METADATA: {7: UpdateMetadataRequest},
    CONTROLLED_SHUTDOWN: controlled_shutdown.REQUESTS,
}
"""api key -> version -> request class."""

RESPONSES: dict[int, dict[int, type]] = {
    LEADER_AND_ISR: {6: LeaderAndIsrResponse},
    STOP_REPLICA: {3: StopReplicaResponse},
    UPDATE_METADATA: {7: UpdateMetadataResponse},
    CONTROLLED_SHUTDOWN: controlled_shutdown.RESPONSES,
}
"""api key -> version -> response class."""

API_VERSIONS: dict[int, tuple[int, int]] = {
    key: (min(versions), max(versions)) for key, versions in REQUESTS.items()
}
"""api key -> (min version, max version) to advertise in ApiVersions."""

__all__ = [
    "API_VERSIONS",
    "CONTROLLED_SHUTDOWN",
    "LEADER_AND_ISR",
    "REQUESTS",
    "RESPONSES",
    "STOP_REPLICA",
    "UPDATE_METADATA",
    "ControlledShutdownRequest",
    "ControlledShutdownResponse",
    "LeaderAndIsrLiveLeader",
    "LeaderAndIsrPartitionError",
    "LeaderAndIsrPartitionState",
    "LeaderAndIsrRequest",
    "LeaderAndIsrResponse",
    "LeaderAndIsrTopicError",
    "LeaderAndIsrTopicState",
    "StopReplicaPartitionError",
    "StopReplicaPartitionState",
    "StopReplicaRequest",
    "StopReplicaResponse",
    "StopReplicaTopicState",
    "UpdateMetadataBroker",
    "UpdateMetadataEndpoint",
    "UpdateMetadataPartitionState",
    "UpdateMetadataRequest",
    "UpdateMetadataResponse",
    "UpdateMetadataTopicState",
]
