"""A broker not yet told the cluster's state by the controller (restarted while there is no
controller) answers Metadata for a topic it does not know with LEADER_NOT_AVAILABLE, not
UNKNOWN_TOPIC_OR_PARTITION: librdkafka took the latter for a topic with no partitions
("partition count changed from 6 to 0") and held the messages for them until the end of
campaign seed 16. Once told, a topic the cache lacks is unknown, as in Kafka.

The handler is driven directly: a real ``MetadataCache``, the handler's services reduced to
what Metadata uses (the ACL check allows everything, no auto-creation)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from replog.protocol.apis import ApiKey, make, nested, request_schema
from replog.server.handlers import metadata
from replog.server.metadata_cache import MetadataCache, PartitionInfo
from replog.server.request_context import RequestContext

VERSION = 8  # answered as kio objects (the hand encoder serves v9+)


def ask(services: SimpleNamespace, topic: str) -> object:
    cls = request_schema(ApiKey.METADATA, VERSION)
    request = make(
        cls,
        topics=(make(nested(cls, "MetadataRequestTopic"), name=topic),),
        allow_auto_topic_creation=True,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    ctx = RequestContext(
        api_key=ApiKey.METADATA, api_version=VERSION, correlation_id=1, client_id="t", peer="p"
    )
    body = asyncio.run(metadata.handle_metadata(services, ctx, request))
    (answer,) = body.topics
    return answer


def test_a_broker_not_yet_told_answers_leader_not_available(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metadata, "FIRST_UPDATE_METADATA_WAIT_MS", 50)
    cache = MetadataCache()

    async def cache_changed(timeout_s: float) -> None:
        await asyncio.sleep(timeout_s)

    services = SimpleNamespace(
        metadata_cache=cache,
        admin=SimpleNamespace(metadata_cache_changed=cache_changed, cluster_id="c"),
        allowed=lambda *_args: True,
        config=SimpleNamespace(auto_create_topics_enable=False),
    )
    untold = ask(services, "chaos")
    assert untold.error_code == ErrorCode.leader_not_available and untold.partitions == ()
    cache.update(
        controller_id=1,
        controller_epoch=1,
        brokers=[],
        partitions=[PartitionInfo("chaos", 0, -1, 1, (1,), (1,))],
    )
    told = ask(services, "chaos")
    assert told.error_code == ErrorCode.none and len(told.partitions) == 1
    assert ask(services, "nope").error_code == ErrorCode.unknown_topic_or_partition
