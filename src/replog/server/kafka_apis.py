"""The broker's request handlers by API key (Kafka ``KafkaApis``): which handler answers
each request type. The handlers themselves are in ``replog.server.handlers``, one per
API; the broker builds this table once and hands it to each listener's ``KafkaServer``.

Concurrency: built once at start-up; the table is not changed afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from replog.coordinator.group.classic_group_service import ClassicGroupService
from replog.protocol.apis import ApiKey
from replog.security.acl import AclOperation
from replog.server.authentication import handle_sasl_without_sasl
from replog.server.handlers import admin as admin_handlers
from replog.server.handlers import (
    cluster,
    fetch,
    metadata,
    offsets,
    produce,
    producers,
    records,
    txn_markers,
)
from replog.server.handlers import configs as config_handlers
from replog.server.handlers import partitions as partition_handlers
from replog.server.handlers.acls import AclRequests
from replog.server.handlers.consumer_groups import ConsumerGroupRequests
from replog.server.handlers.context import BrokerServices
from replog.server.handlers.controller_requests import ControllerRequests
from replog.server.handlers.controller_rpc import ControllerCommands
from replog.server.handlers.group_coordinator import GroupCoordinatorRequests
from replog.server.handlers.group_membership import GroupMembershipRequests
from replog.server.handlers.scram_credentials import ScramCredentialRequests
from replog.server.handlers.txn_offsets import handle_txn_offset_commit
from replog.server.network import RequestContext
from replog.zk.client import KafkaZkClient

__all__ = ["request_handlers"]


def request_handlers(
    services: BrokerServices,
    zk: KafkaZkClient,
    classic: ClassicGroupService,
    controller_commands: ControllerCommands,
    controller_requests: ControllerRequests,
    controller: Callable[[], Any],
    cluster_allowed: Callable[[RequestContext, AclOperation], bool],
) -> dict[int, Any]:
    """API key -> the coroutine function that answers it, as ``KafkaServer`` calls it:
    ``handler(ctx, request)``. ``controller`` returns this broker's ``KafkaController``
    (None before start-up has made it)."""
    s = services
    table = {
        ApiKey.PRODUCE: produce.handle_produce,
        ApiKey.FETCH: fetch.handle_fetch,
        ApiKey.LIST_OFFSETS: offsets.handle_list_offsets,
        ApiKey.METADATA: metadata.handle_metadata,
        ApiKey.API_VERSIONS: metadata.handle_api_versions,
        ApiKey.CREATE_TOPICS: admin_handlers.handle_create_topics,
        ApiKey.DELETE_TOPICS: admin_handlers.handle_delete_topics,
        ApiKey.DESCRIBE_CONFIGS: config_handlers.handle_describe_configs,
        ApiKey.ALTER_CONFIGS: config_handlers.handle_alter_configs,
        ApiKey.INCREMENTAL_ALTER_CONFIGS: config_handlers.handle_incremental_alter_configs,
        ApiKey.INIT_PRODUCER_ID: producers.handle_init_producer_id,
        ApiKey.OFFSET_FOR_LEADER_EPOCH: offsets.handle_offset_for_leader_epoch,
        ApiKey.DELETE_RECORDS: records.handle_delete_records,
        ApiKey.DESCRIBE_LOG_DIRS: cluster.handle_describe_log_dirs,
        ApiKey.DESCRIBE_CLUSTER: cluster.handle_describe_cluster,
        ApiKey.DESCRIBE_PRODUCERS: producers.handle_describe_producers,
        ApiKey.CREATE_PARTITIONS: partition_handlers.handle_create_partitions,
        ApiKey.WRITE_TXN_MARKERS: txn_markers.handle_write_txn_markers,
        ApiKey.TXN_OFFSET_COMMIT: handle_txn_offset_commit,
    }
    handlers = {int(key): partial(handler, s) for key, handler in table.items()}
    acl_requests = AclRequests(services)
    handlers[ApiKey.CREATE_ACLS] = acl_requests.handle_create_acls
    handlers[ApiKey.DESCRIBE_ACLS] = acl_requests.handle_describe_acls
    handlers[ApiKey.DELETE_ACLS] = acl_requests.handle_delete_acls
    scram = ScramCredentialRequests(zk)
    handlers[ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS] = scram.handle_describe
    handlers[ApiKey.ALTER_USER_SCRAM_CREDENTIALS] = scram.handle_alter
    handlers[ApiKey.SASL_HANDSHAKE] = handle_sasl_without_sasl
    handlers[ApiKey.SASL_AUTHENTICATE] = handle_sasl_without_sasl
    commands = controller_commands
    handlers[ApiKey.LEADER_AND_ISR] = commands.handle_leader_and_isr
    handlers[ApiKey.STOP_REPLICA] = commands.handle_stop_replica
    handlers[ApiKey.UPDATE_METADATA] = commands.handle_update_metadata
    handlers[ApiKey.CONTROLLED_SHUTDOWN] = controller_requests.handle_controlled_shutdown
    handlers[ApiKey.ELECT_LEADERS] = controller_requests.handle_elect_leaders
    groups = GroupCoordinatorRequests(services)
    handlers[ApiKey.FIND_COORDINATOR] = groups.handle_find_coordinator
    handlers[ApiKey.OFFSET_COMMIT] = groups.handle_offset_commit
    handlers[ApiKey.OFFSET_FETCH] = groups.handle_offset_fetch
    handlers[ApiKey.OFFSET_DELETE] = groups.handle_offset_delete
    handlers[ApiKey.DELETE_GROUPS] = groups.handle_delete_groups
    transactions = groups.transactions
    handlers[ApiKey.ADD_PARTITIONS_TO_TXN] = transactions.handle_add_partitions_to_txn
    handlers[ApiKey.ADD_OFFSETS_TO_TXN] = transactions.handle_add_offsets_to_txn
    handlers[ApiKey.END_TXN] = transactions.handle_end_txn
    handlers[ApiKey.DESCRIBE_TRANSACTIONS] = transactions.handle_describe_transactions
    handlers[ApiKey.LIST_TRANSACTIONS] = transactions.handle_list_transactions
    membership = GroupMembershipRequests(services, classic)
    handlers[ApiKey.JOIN_GROUP] = membership.handle_join_group
    handlers[ApiKey.SYNC_GROUP] = membership.handle_sync_group
    handlers[ApiKey.HEARTBEAT] = membership.handle_heartbeat
    handlers[ApiKey.LEAVE_GROUP] = membership.handle_leave_group
    handlers[ApiKey.DESCRIBE_GROUPS] = membership.handle_describe_groups
    handlers[ApiKey.LIST_GROUPS] = membership.handle_list_groups
    consumer_groups = ConsumerGroupRequests(services)
    handlers[ApiKey.CONSUMER_GROUP_HEARTBEAT] = consumer_groups.handle_consumer_group_heartbeat
    handlers[ApiKey.CONSUMER_GROUP_DESCRIBE] = consumer_groups.handle_consumer_group_describe
    reassignments = partition_handlers.ReassignmentRequests(controller, cluster_allowed)
    handlers[ApiKey.ALTER_PARTITION_REASSIGNMENTS] = (
        reassignments.handle_alter_partition_reassignments
    )
    handlers[ApiKey.LIST_PARTITION_REASSIGNMENTS] = (
        reassignments.handle_list_partition_reassignments
    )
    return handlers
