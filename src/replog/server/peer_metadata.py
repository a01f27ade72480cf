"""Asking the other brokers whether their metadata shows new partitions yet.

Beyond Kafka: each broker applies the controller's UpdateMetadata on its own event loop,
tens of milliseconds apart under load, so a client bootstrapped on another broker right
after a CreateTopics answer could miss the new partitions. Once this broker's cache is
complete, ``admin.AdminManager`` asks every other live broker's Metadata for the topics
until each shows them (``PeerMetadata.peers_know``), within what is left of the request's
timeout and at most ``PEER_WAIT_MAX_S``. Best effort: it never changes the answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from replog.protocol.apis import ApiKey, make, nested, request_schema
from replog.protocol.client import KafkaConnection
from replog.server.authentication import inter_broker_client_security

if TYPE_CHECKING:
    from replog.config import KafkaConfig
    from replog.server.metadata_cache import MetadataCache

log = logging.getLogger(__name__)

# Asking the other brokers whether their metadata shows new partitions yet (peers_know):
# Metadata v12 by topic name, again after a pause doubling from the first to the last.
PEER_METADATA_VERSION = 12
PEER_RETRY_S = (0.002, 0.05)
PEER_WAIT_MAX_S = 2.0  # the window measured is under 0.15 s at p99 on a busy machine
# Metadata errors of a topic a broker has not learnt yet; any other stops the asking.
_NOT_YET = (ErrorCode.unknown_topic_or_partition, ErrorCode.leader_not_available)


class PeerMetadata:
    """This broker's view of whether its peers know new partitions yet.

    Concurrency: owned by the event loop; each ask opens its own connection.
    """

    def __init__(self, config: KafkaConfig, metadata_cache: MetadataCache) -> None:
        self.config = config
        self.metadata_cache = metadata_cache
        self._security = inter_broker_client_security(config)

    async def peers_know(self, wanted: dict[str, set[int]], deadline: float) -> None:
        """Ask every other live broker (the inter-broker listener's endpoints in this
        broker's cache) for the topics' Metadata until its answer leads every partition of
        ``wanted``, or ``deadline`` (monotonic seconds) passes. Best effort: a peer that
        cannot be reached or answers another error is left alone."""
        peers = self.metadata_cache.brokers_for(self.config.inter_broker_listener_name)
        await asyncio.gather(
            *(
                self._peer_knows(endpoint.host, endpoint.port, wanted, deadline)
                for broker_id, endpoint in sorted(peers.items())
                if broker_id != self.config.broker_id
            )
        )

    async def _peer_knows(
        self, host: str, port: int, wanted: dict[str, set[int]], deadline: float
    ) -> None:
        cls = request_schema(ApiKey.METADATA, PEER_METADATA_VERSION)
        topic_cls = nested(cls, "MetadataRequestTopic")
        body = make(
            cls,
            topics=tuple(make(topic_cls, name=t, topic_id=None) for t in sorted(wanted)),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        conn = KafkaConnection(
            host, port, client_id=f"broker-{self.config.broker_id}-admin", security=self._security
        )
        pause, last_pause = PEER_RETRY_S
        try:
            await conn.connect(timeout_s=max(0.001, deadline - time.monotonic()))
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                answer = await conn.request(body, timeout_s=remaining)
                waiting = False
                for topic in answer.topics:
                    if topic.error_code in _NOT_YET:
                        waiting = True
                    elif topic.error_code != ErrorCode.none:
                        return  # e.g. not authorized: nothing to wait for
                    else:
                        led = {p.partition_index for p in topic.partitions if p.leader_id >= 0}
                        waiting |= not led >= wanted.get(str(topic.name), set())
                if not waiting:
                    return
                await asyncio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
                pause = min(2 * pause, last_pause)
        except (OSError, TimeoutError, ConnectionError) as exc:
            log.info(
                "broker %s:%d not asked whether it knows %s: %s", host, port, sorted(wanted), exc
            )
        finally:
            await conn.close()
