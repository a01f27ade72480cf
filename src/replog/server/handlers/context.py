"""What the handlers share: the broker's components, behind one small object."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.static.primitive import i32Timedelta

from replog.protocol import apis
from replog.security.acl import SUPPORTED_OPERATIONS
from replog.server.topic_stats import BrokerTopicStats
from replog.server.txn_verification import TransactionalAppendOrder

if TYPE_CHECKING:
    from replog.config import KafkaConfig
    from replog.coordinator.group.coordinator import GroupCoordinator
    from replog.coordinator.transaction.runtime import TransactionCoordinatorRuntime
    from replog.replication.replica_manager import ReplicaManager
    from replog.security.acl import AclOperation, ResourceType
    from replog.server.admin import AdminManager
    from replog.server.authorizer import Authorizer
    from replog.server.config_manager import ConfigManager
    from replog.server.fetch_session import FetchManager
    from replog.server.metadata_cache import MetadataCache
    from replog.server.network import RequestContext
    from replog.server.producer_ids import ProducerIdManager
    from replog.server.txn_verification import TransactionVerifier

NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))
UNKNOWN_AUTHORIZED_OPERATIONS = -(1 << 31)  # INT32_MIN: authorized operations not asked for


@dataclass
class BrokerServices:
    config: KafkaConfig
    replica_manager: ReplicaManager
    metadata_cache: MetadataCache
    admin: AdminManager
    producer_ids: ProducerIdManager
    configs: ConfigManager
    group_coordinator: GroupCoordinator
    fetch_manager: FetchManager  # incremental fetch sessions (KIP-227)
    topic_stats: BrokerTopicStats = field(default_factory=BrokerTopicStats)
    authorizer: Authorizer | None = None  # None: no authorizer.class.name, all allowed
    transaction_coordinator: TransactionCoordinatorRuntime | None = None
    # KIP-890 part 1 (transaction.partition.verification.enable); None: no coordinator known
    transaction_verifier: TransactionVerifier | None = None
    # KIP-890: a transactional producer's produce requests verify and append in order.
    transactional_append_order: TransactionalAppendOrder = field(
        default_factory=TransactionalAppendOrder
    )

    def allowed(
        self, ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        """Whether the request's principal may do ``operation`` on the resource."""
        return self.authorizer is None or self.authorizer.allowed(
            ctx, operation, resource_type, name
        )

    def allowed_on_some(
        self, ctx: RequestContext, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Whether the principal may do ``operation`` on at least one resource of the type
        (Kafka ``authorizeByResourceType``)."""
        return self.authorizer is None or self.authorizer.allowed_on_some(
            ctx, operation, resource_type
        )

    def authorized_operations(
        self, ctx: RequestContext, resource_type: ResourceType, name: str
    ) -> int:
        """Kafka's ``authorized_operations`` field: one bit per operation the resource
        type supports that the principal is allowed."""
        field_ = 0
        for op in SUPPORTED_OPERATIONS[resource_type]:
            if self.allowed(ctx, op, resource_type, name):
                field_ |= 1 << int(op)
        return field_


def response_class(api_key: int, version: int) -> type[Any]:
    return apis.response_schema(api_key, version)
