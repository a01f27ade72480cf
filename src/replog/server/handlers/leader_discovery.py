"""KIP-951 leader discovery: where a partition's leader is, in answers that say "not me".

A partition this broker holds no replica of is "not me" too when the cluster knows
it (Kafka's ``ReplicaManager.getPartitionOrError``): NOT_LEADER_OR_FOLLOWER, not
UNKNOWN_TOPIC_OR_PARTITION, so a client with stale metadata (after a reassignment)
is sent to the leader rather than told the partition does not exist.

A Produce answer (v10+) of NOT_LEADER_OR_FOLLOWER, and a Fetch answer (v16+) of
NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH, carry the partition's current
leader and epoch, and the response lists those leaders' endpoints, so a client
can go there without a Metadata round trip first. As Kafka's
``KafkaApis.getCurrentLeader``: the local replica's view of the leadership if
this broker holds one, else the metadata cache's; the endpoint only for a
leader the cache lists among the live brokers.

Concurrency: one object per response, built and used on the event loop
without awaiting.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog.protocol.wire import LeaderIdAndEpoch, NodeEndpoint
from replog.server.handlers.context import BrokerServices

NOT_LEADER_ERRORS = frozenset({ErrorCode.not_leader_or_follower})
NOT_LEADER_OR_FENCED_ERRORS = frozenset(
    {ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch}
)


def not_hosted_error(services: BrokerServices, topic: str, partition: int) -> ErrorCode:
    """The error for a partition with no replica on this broker."""
    known = services.metadata_cache.partition(topic, partition) is not None
    return ErrorCode.not_leader_or_follower if known else ErrorCode.unknown_topic_or_partition


class LeaderDiscovery:
    """Collects the leaders named in one response and their endpoints."""

    def __init__(self, services: BrokerServices, listener: str) -> None:
        self._services = services
        self._listener = listener
        self._endpoints: dict[int, NodeEndpoint] = {}

    def current_leader(self, topic: str, partition: int) -> LeaderIdAndEpoch:
        """The partition's leader and epoch (-1s when unknown); remembers its endpoint."""
        local = self._services.replica_manager.get_partition(topic, partition)
        state = None if local is None else local.state
        if state is not None:
            leader = LeaderIdAndEpoch(state.leader, state.leader_epoch)
        else:
            info = self._services.metadata_cache.partition(topic, partition)
            if info is None:
                return LeaderIdAndEpoch()
            leader = LeaderIdAndEpoch(info.leader, info.leader_epoch)
        broker = self._services.metadata_cache.brokers_for(self._listener).get(leader.leader_id)
        if broker is not None:
            self._endpoints[broker.broker_id] = NodeEndpoint(
                broker.broker_id, broker.host, broker.port, broker.rack
            )
        return leader

    @property
    def node_endpoints(self) -> list[NodeEndpoint]:
        return list(self._endpoints.values())
