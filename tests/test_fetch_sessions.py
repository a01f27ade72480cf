"""Incremental fetch sessions (KIP-227) against a real broker, with raw Fetch requests.

One session, by topic name (v11) and by topic id (v16): a full fetch at epoch 0 opens
it and is answered in full; an incremental fetch naming nothing is answered with only
the partition that got a record; one naming a partition whose fetch moved, with nothing
new, is answered empty; a repeated epoch is INVALID_FETCH_SESSION_EPOCH and an unknown
session FETCH_SESSION_ID_NOT_FOUND, at the top level with no partitions; the long poll
of an incremental fetch that names no partition waits on the session's partitions and
not on the ones it forgot (a record for a forgotten partition is not answered; one for a
partition of the session ends the wait, well before its 60 s); the FINAL epoch closes
the session, and is answered in full with no session.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from clients_util import create_topic
from replog.cluster.launcher import LocalCluster
from replog.protocol.apis import ApiKey, make, nested, request_schema
from replog.protocol.client import KafkaConnection
from replog.protocol.records import simple_batch

TopicKey = str | uuid.UUID


def _fetch(
    version: int,
    session_id: int,
    epoch: int,
    partitions: list[tuple[TopicKey, int, int]],
    *,
    forgotten: list[tuple[TopicKey, list[int]]] = (),
    max_wait_ms: int = 200,
) -> Any:
    """A consumer's Fetch of ``(topic name or id, partition, offset)`` in a session."""
    cls = request_schema(ApiKey.FETCH, version)
    by_topic: dict[TopicKey, list] = {}
    for topic, partition, offset in partitions:
        by_topic.setdefault(topic, []).append(
            make(
                nested(cls, "FetchPartition"),
                partition=partition,
                current_leader_epoch=-1,
                fetch_offset=offset,
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=1 << 20,
            )
        )

    def key(k: TopicKey) -> dict[str, Any]:
        return {
            "topic": k if isinstance(k, str) else None,
            "topic_id": k if isinstance(k, uuid.UUID) else None,
        }

    return make(
        cls,
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=1,
        max_bytes=1 << 24,
        isolation_level=0,
        session_id=session_id,
        session_epoch=epoch,
        topics=tuple(
            make(nested(cls, "FetchTopic"), partitions=tuple(parts), **key(k))
            for k, parts in by_topic.items()
        ),
        forgotten_topics_data=tuple(
            make(nested(cls, "ForgottenTopic"), partitions=tuple(parts), **key(k))
            for k, parts in forgotten
        ),
        rack_id="",
    )


def _produce(topic: str, partition: int, values: list[bytes]) -> Any:
    cls = request_schema(ApiKey.PRODUCE, 9)
    part = nested(cls, "PartitionProduceData")(index=partition, records=simple_batch(values))
    return cls(
        transactional_id=None,
        acks=1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(nested(cls, "TopicProduceData")(name=topic, partition_data=(part,)),),
    )


def _answered(response: Any) -> list[tuple[int, int, int, int]]:
    """``(partition, error, high watermark, record bytes)`` of each partition answered."""
    return [
        (
            int(p.partition_index),
            int(p.error_code),
            int(p.high_watermark),
            len(p.records or b""),
        )
        for t in response.responses
        for p in t.partitions
    ]


async def _topic_id(conn: KafkaConnection, topic: str) -> uuid.UUID:
    cls = request_schema(ApiKey.METADATA, 12)
    response = await conn.request(
        make(
            cls,
            topics=(make(nested(cls, "MetadataRequestTopic"), name=topic, topic_id=None),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    [t] = response.topics
    assert t.topic_id is not None
    return t.topic_id


@pytest.mark.parametrize("version", [11, 16])
def test_a_fetch_session_from_full_to_incremental_to_closed(
    replog_broker: LocalCluster, version: int
) -> None:
    port = replog_broker.port(replog_broker.broker_ids[0])
    topic = f"sessions-v{version}"
    create_topic(replog_broker.bootstrap_servers(), topic, partitions=3)

    async def go() -> None:
        conn = KafkaConnection("127.0.0.1", port, client_id="fetch-sessions")
        producer = KafkaConnection("127.0.0.1", port, client_id="fetch-sessions-producer")
        await conn.connect()
        await producer.connect()
        try:
            await scenario(conn, producer)
        finally:
            await conn.close()
            await producer.close()

    async def produce(producer: KafkaConnection, partition: int, n: int = 1) -> None:
        response = await producer.request(
            _produce(topic, partition, [f"p{partition}-{i}".encode() for i in range(n)])
        )
        [answer] = response.responses[0].partition_responses
        assert answer.error_code == ErrorCode.none

    async def scenario(conn: KafkaConnection, producer: KafkaConnection) -> None:
        for partition in range(3):
            await produce(producer, partition, 2)
        key: TopicKey = topic if version < 13 else await _topic_id(conn, topic)

        async def fetch(session_id: int, epoch: int, parts=(), **kw) -> Any:
            return await conn.request(
                _fetch(version, session_id, epoch, list(parts), **kw), timeout_s=30
            )

        # A full fetch at epoch 0 opens a session and is answered in full.
        full = await fetch(0, 0, [(key, p, 2) for p in range(3)])
        assert full.error_code == ErrorCode.none
        session = int(full.session_id)
        assert session != 0
        assert _answered(full) == [(p, 0, 2, 0) for p in range(3)]

        # One record for partition 1: an incremental fetch naming nothing gets only it.
        await produce(producer, 1)
        inc = await fetch(session, 1)
        assert (inc.error_code, int(inc.session_id)) == (ErrorCode.none, session)
        [(partition, error, hw, size)] = _answered(inc)
        assert (partition, error, hw) == (1, 0, 3) and size > 0

        # Partition 1's fetch moves past the record: nothing new anywhere, nothing answered.
        inc = await fetch(session, 2, [(key, 1, 3)])
        assert (inc.error_code, int(inc.session_id)) == (ErrorCode.none, session)
        assert _answered(inc) == []

        # Epoch 2 again (a duplicate), and a session the broker never made.
        dup = await fetch(session, 2, [(key, 0, 0)])
        assert dup.error_code == ErrorCode.invalid_fetch_session_epoch
        assert _answered(dup) == []
        unknown = session + 1 if session < 2**31 - 1 else 1
        lost = await fetch(unknown, 1)
        assert lost.error_code == ErrorCode.fetch_session_id_not_found
        assert _answered(lost) == []

        # Partition 0 is forgotten, then gets a record; the long poll waits on 1 and 2 only,
        # and a record for partition 2 ends it well before its 60 s (the request would
        # time out at 30 s otherwise).
        await produce(producer, 0)
        waiting = asyncio.ensure_future(
            fetch(session, 3, forgotten=[(key, [0])], max_wait_ms=60_000)
        )
        await asyncio.sleep(0.5)
        assert not waiting.done(), _answered(waiting.result())
        await produce(producer, 2)
        woken = await waiting
        [(partition, error, hw, size)] = _answered(woken)
        assert (partition, error, hw) == (2, 0, 3) and size > 0

        # FINAL closes the session: answered in full, with no session.
        final = await fetch(session, -1, [(key, 1, 3)])
        assert (final.error_code, int(final.session_id)) == (ErrorCode.none, 0)
        assert _answered(final) == [(1, 0, 3, 0)]
        gone = await fetch(session, 4)
        assert gone.error_code == ErrorCode.fetch_session_id_not_found

    asyncio.run(go())


def test_sessionless_fetches_are_answered_in_full_every_time(
    replog_broker: LocalCluster,
) -> None:
    """librdkafka, kafka-python and aiokafka send session 0 at epoch -1: no session, the
    whole request answered each time, records or not."""
    port = replog_broker.port(replog_broker.broker_ids[0])
    topic = "sessions-none"
    create_topic(replog_broker.bootstrap_servers(), topic, partitions=2)

    async def go() -> None:
        conn = KafkaConnection("127.0.0.1", port, client_id="fetch-sessionless")
        await conn.connect()
        try:
            for _ in range(2):
                response = await conn.request(
                    _fetch(11, 0, -1, [(topic, 0, 0), (topic, 1, 0)], max_wait_ms=50)
                )
                assert (response.error_code, int(response.session_id)) == (ErrorCode.none, 0)
                assert _answered(response) == [(0, 0, 0, 0), (1, 0, 0, 0)]
        finally:
            await conn.close()

    asyncio.run(go())
