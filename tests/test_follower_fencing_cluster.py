"""What a follower answers and what it leaves behind, on two broker processes (real
ZooKeeper, confluent-kafka's admin client, the project's protocol client for the raw
requests no client sends to a follower).

* The leader epoch is checked before leadership (Kafka ``Partition.getLocalLog``): a
  follower asked at a newer epoch than it knows answers UNKNOWN_LEADER_EPOCH, at an
  older one FENCED_LEADER_EPOCH (the client's metadata is stale: it refreshes it),
  and only at its own epoch NOT_LEADER_OR_FOLLOWER; Fetch, ListOffsets and
  OffsetsForLeaderEpoch alike.
* A follower that stops fetching from a leader closes its incremental fetch session
  there (a last Fetch at epoch FINAL): when its last partition from that leader is
  deleted (the fetcher is left idle), and when it shuts down. The leader's session
  cache (its metrics) is empty again, instead of holding the session until eviction.
"""

from __future__ import annotations

import asyncio
import datetime

from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v10 import request as list_v10
from kio.schema.offset_for_leader_epoch.v4 import request as epoch_v4

from clients_util import wait_for_leaders
from cluster_util import ZkView, create_topic, wait_for
from replog.cluster.launcher import LocalCluster
from replog.protocol.apis import ApiKey, make, nested, request_schema
from replog.protocol.client import KafkaConnection
from test_fetch_sessions_cluster import PREFIX, scrape

FETCH_VERSION = 12


def _ask(port: int, request):
    async def go():
        conn = KafkaConnection("127.0.0.1", port, client_id="replog-tests")
        await conn.connect()
        try:
            return await conn.request(request, timeout_s=30)
        finally:
            await conn.close()

    return asyncio.run(go())


def fetch_error(port: int, topic: str, current_leader_epoch: int) -> ErrorCode:
    """A consumer's sessionless Fetch v12 of ``topic``-0 at ``current_leader_epoch``."""
    cls = request_schema(ApiKey.FETCH, FETCH_VERSION)
    request = make(
        cls,
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=0),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(
            make(
                nested(cls, "FetchTopic"),
                topic=topic,
                partitions=(
                    make(
                        nested(cls, "FetchPartition"),
                        partition=0,
                        current_leader_epoch=current_leader_epoch,
                        fetch_offset=0,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    response = _ask(port, request)
    assert response.error_code == ErrorCode.none
    return ErrorCode(response.responses[0].partitions[0].error_code)


def list_offsets_error(port: int, topic: str, current_leader_epoch: int) -> ErrorCode:
    response = _ask(
        port,
        list_v10.ListOffsetsRequest(
            replica_id=-1,
            isolation_level=0,
            topics=(
                list_v10.ListOffsetsTopic(
                    name=topic,
                    partitions=(
                        list_v10.ListOffsetsPartition(
                            partition_index=0,
                            timestamp=-1,
                            current_leader_epoch=current_leader_epoch,
                        ),
                    ),
                ),
            ),
            timeout=datetime.timedelta(seconds=1),
        ),
    )
    return ErrorCode(response.topics[0].partitions[0].error_code)


def epoch_request_error(port: int, topic: str, current_leader_epoch: int) -> ErrorCode:
    response = _ask(
        port,
        epoch_v4.OffsetForLeaderEpochRequest(
            replica_id=-1,
            topics=(
                epoch_v4.OffsetForLeaderTopic(
                    topic=topic,
                    partitions=(
                        epoch_v4.OffsetForLeaderPartition(
                            partition=0, current_leader_epoch=current_leader_epoch, leader_epoch=0
                        ),
                    ),
                ),
            ),
        ),
    )
    return ErrorCode(response.topics[0].partitions[0].error_code)


def sessions(cluster: LocalCluster, broker_id: int) -> float | None:
    """The incremental fetch sessions ``broker_id``'s cache holds."""
    try:
        samples = scrape(cluster, broker_id)
    except OSError:
        return None
    return samples.get((PREFIX + "numincrementalfetchsessions", frozenset()))


def in_sync_state(zk: ZkView, topic: str) -> dict:
    """``topic``-0's partition state once both replicas are in its ISR."""
    return wait_for(
        lambda: (s := zk.partition_state(topic, 0)) is not None and len(s["isr"]) == 2 and s,
        60,
        f"both replicas of {topic}-0 in its ISR",
    )


def test_a_follower_fences_stale_epochs_and_closes_its_fetch_sessions(cluster_factory) -> None:
    cluster: LocalCluster = cluster_factory(
        2,
        overrides={
            "replica.lag.time.max.ms": "10000",
            "auto.leader.rebalance.enable": "false",
        },
        metrics=True,
    )
    bootstrap = cluster.bootstrap_servers()
    zk = ZkView(cluster)
    try:
        create_topic(bootstrap, "fenced-a", partitions=1, replication=2)
        wait_for_leaders(bootstrap, {"fenced-a": 1})
        state = in_sync_state(zk, "fenced-a")
        leader, epoch = int(state["leader"]), int(state["leader_epoch"])
        (follower,) = (b for b in cluster.broker_ids if b != leader)
        wait_for(lambda: sessions(cluster, leader) == 1, 60, "the follower's fetch session")

        # The follower knows epoch ``epoch``: newer is unknown to it, its own is not led here.
        port = cluster.port(follower)
        assert fetch_error(port, "fenced-a", epoch + 1) is ErrorCode.unknown_leader_epoch
        assert list_offsets_error(port, "fenced-a", epoch + 1) is ErrorCode.unknown_leader_epoch
        assert epoch_request_error(port, "fenced-a", epoch + 1) is ErrorCode.unknown_leader_epoch
        assert fetch_error(port, "fenced-a", epoch) is ErrorCode.not_leader_or_follower
        assert fetch_error(port, "fenced-a", -1) is ErrorCode.not_leader_or_follower
        assert fetch_error(cluster.port(leader), "fenced-a", epoch) is ErrorCode.none

        # Its only partition from the leader deleted: the idle fetcher closes its session.
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.delete_topics(["fenced-a"], operation_timeout=30)["fenced-a"].result(60)
        wait_for(lambda: sessions(cluster, leader) == 0, 60, "the session closed on deletion")

        create_topic(bootstrap, "fenced-b", partitions=1, replication=2)
        wait_for_leaders(bootstrap, {"fenced-b": 1})
        state = in_sync_state(zk, "fenced-b")
        leader = int(state["leader"])
        (follower,) = (b for b in cluster.broker_ids if b != leader)
        wait_for(lambda: sessions(cluster, leader) == 1, 60, "the follower's fetch session")

        # A follower that shuts down closes its session too.
        cluster.stop_broker(follower)
        wait_for(lambda: sessions(cluster, leader) == 0, 60, "the session closed on shutdown")

        # Back, it follows at the epoch the controller bumped when it took it out of the
        # ISR: a request at the older epoch is fenced, by the follower as by the leader.
        cluster.start_broker(follower)
        state = in_sync_state(zk, "fenced-b")
        epoch = int(state["leader_epoch"])
        assert epoch >= 1, state
        port = cluster.port(follower)
        wait_for(
            lambda: fetch_error(port, "fenced-b", epoch) is ErrorCode.not_leader_or_follower,
            60,
            "the restarted follower at the current epoch",
        )
        assert fetch_error(port, "fenced-b", epoch - 1) is ErrorCode.fenced_leader_epoch
        assert list_offsets_error(port, "fenced-b", epoch - 1) is ErrorCode.fenced_leader_epoch
        assert epoch_request_error(port, "fenced-b", epoch - 1) is ErrorCode.fenced_leader_epoch
        port = cluster.port(leader)
        assert fetch_error(port, "fenced-b", epoch - 1) is ErrorCode.fenced_leader_epoch
    finally:
        zk.close()
