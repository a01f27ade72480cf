"""KIP-903 in the shipped ISR write: an expansion adding a replica that is not
registered at the broker epoch it fetched with is refused (Kafka's
``INELIGIBLE_REPLICA``), and the partition's znode is left as it was. A follower's
Fetch v15+ carries that epoch (``ReplicaState.ReplicaEpoch``): replog's follower
(``RemoteLeaderEndpoint``) sends its current one (checked here against a leader stand-in
that decodes its frames); a test sends one to a broker process as the follower, and a
replog broker restarted under a new registration fetches its way back into the ISR.

``write_isr_change`` runs against a real ZooKeeper here; the simulator carries out
its ISR writes with the same function on its own ZooKeeper, so a break of the rule
must make a seed fail (the rule-break test at the end, ``test_sim_rule_breaks``'s
style).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import struct
import urllib.request
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from prometheus_client.parser import text_string_to_metric_families

from clients_util import log_lines
from cluster_util import ZkView, wait_for
from replog.protocol import fetch_codec, frames
from replog.protocol.apis import ApiKey, make, nested, request_schema
from replog.protocol.client import KafkaConnection
from replog.replication import isr_write
from replog.replication.fetch_rules import FetchPartitionRequest
from replog.replication.isr import IsrChangeProposal, IsrState
from replog.replication.isr_write import IsrWriteResult, write_isr_change
from replog.replication.leader_endpoint import (
    FETCH_VERSION,
    FETCH_VERSION_BY_NAME,
    RemoteLeaderEndpoint,
)
from replog.zk.client import KafkaZkClient
from replog.zk.data import BrokerInfo, EndPoint, LeaderAndIsr, LeaderIsrAndControllerEpoch
from replog.zk.fencing import UNKNOWN_BROKER_EPOCH
from sim.run import PROFILES, run_random
from sim.world import SimInvariantViolation

TOPIC = "t"


def _broker(broker_id: int) -> BrokerInfo:
    return BrokerInfo(broker_id, (EndPoint("PLAINTEXT", "127.0.0.1", 9090 + broker_id),))


def _expansion(zk_version: int, added_epoch: int) -> IsrChangeProposal:
    """Leader 1 at leader epoch 0 adds replica 2, which fetched at ``added_epoch``."""
    return IsrChangeProposal(
        leader_id=1,
        leader_epoch=0,
        kind=IsrState.PENDING_EXPAND_ISR,
        current_isr=(1,),
        new_isr=(1, 2),
        partition_zk_version=zk_version,
        added_broker_epochs=((2, added_epoch),),
    )


def _partition(zk: KafkaZkClient, isr: tuple[int, ...]) -> int:
    """Topic ``t``, partition 0 on (1, 2), led by 1 with ``isr``; the controller epoch."""
    zk.create_topic(TOPIC, {0: [1, 2]}, {})
    epoch, epoch_version = zk.register_controller_and_increment_epoch(1, 0)
    created = zk.create_partition_states(
        {(TOPIC, 0): LeaderAndIsr(leader=1, leader_epoch=0, isr=isr, zk_version=0)},
        epoch,
        epoch_version,
    )
    assert created[(TOPIC, 0)].ok
    return epoch


def _isr(zk: KafkaZkClient) -> tuple[tuple[int, ...], int]:
    lai = zk.get_partition_states([(TOPIC, 0)])[(TOPIC, 0)].leader_and_isr
    return tuple(lai.isr), lai.zk_version


def test_expansion_refused_for_a_stale_or_missing_registration(
    make_client: Callable[[], KafkaZkClient],
) -> None:
    zk = make_client()
    epoch = _partition(zk, (1,))

    # Broker 2 is not registered at all: no fetch epoch makes it eligible.
    assert zk.get_broker_epoch(2) is None
    assert write_isr_change(zk, TOPIC, 0, _expansion(0, UNKNOWN_BROKER_EPOCH), epoch) == (
        IsrWriteResult(None, (2,))
    )

    # Broker 2 registers, crashes (its session ends) and registers again: a new epoch.
    first = make_client()
    old_epoch = first.register_broker(_broker(2))
    assert zk.get_broker_epoch(2) == old_epoch
    first.close()
    second = make_client()
    new_epoch = second.register_broker(_broker(2))
    assert new_epoch > old_epoch and zk.get_broker_epoch(2) == new_epoch

    # A fetch of the earlier incarnation must not add the restarted broker.
    assert write_isr_change(zk, TOPIC, 0, _expansion(0, old_epoch), epoch) == IsrWriteResult(
        None, (2,)
    )
    assert _isr(zk) == ((1,), 0)  # the znode was not touched

    # The current incarnation's fetch may; the write is still conditional on the version.
    assert write_isr_change(zk, TOPIC, 0, _expansion(0, new_epoch), epoch) == IsrWriteResult(1)
    assert _isr(zk) == ((1, 2), 1)
    stale_shrink = IsrChangeProposal(1, 0, IsrState.PENDING_SHRINK_ISR, (1, 2), (1,), 0)
    assert write_isr_change(zk, TOPIC, 0, stale_shrink, epoch) == IsrWriteResult(None)
    written = zk.get_partition_states([(TOPIC, 0)])[(TOPIC, 0)]
    assert written == LeaderIsrAndControllerEpoch(
        LeaderAndIsr(leader=1, leader_epoch=0, isr=(1, 2), zk_version=1), epoch
    )


def test_fetch_without_an_epoch_needs_a_registration_only(
    make_client: Callable[[], KafkaZkClient],
) -> None:
    """A Fetch below v15 carries no broker epoch: as Kafka, only liveness is checked."""
    zk = make_client()
    epoch = _partition(zk, (1,))
    make_client().register_broker(_broker(2))
    result = write_isr_change(zk, TOPIC, 0, _expansion(0, UNKNOWN_BROKER_EPOCH), epoch)
    assert result == IsrWriteResult(1)
    assert _isr(zk) == ((1, 2), 1)


def test_shrink_checks_no_registration(make_client: Callable[[], KafkaZkClient]) -> None:
    zk = make_client()
    epoch = _partition(zk, (1, 2))
    shrink = IsrChangeProposal(1, 0, IsrState.PENDING_SHRINK_ISR, (1, 2), (1,), 0)
    assert write_isr_change(zk, TOPIC, 0, shrink, epoch) == IsrWriteResult(1)
    assert _isr(zk) == ((1,), 1)


# -- the rule broken: the simulator must notice ---------------------------------------------------

# "lossy": crashes that lose the unflushed tail, so a restarted follower may be behind what
# its previous incarnation's last fetch claimed. Seed 7 meets the rule within these seeds.
PROFILE = "lossy"
SEEDS = range(8)
STEPS = 3_000


def test_stale_broker_epoch_added_to_the_isr_fails_a_seed(monkeypatch, caplog) -> None:
    caplog.set_level(logging.ERROR)
    monkeypatch.setattr(isr_write, "ineligible_replicas", lambda proposal, registered: ())
    others: list[str] = []
    for seed in SEEDS:
        try:
            run_random(seed, PROFILES[PROFILE], STEPS, label=PROFILE)
        except SimInvariantViolation as exc:
            logging.getLogger(__name__).error("seed %d: %s", seed, exc.kind)
            return
        except AssertionError as exc:
            others.append(f"seed {seed}: {str(exc).splitlines()[0][:160]}")
    pytest.fail(f"no seed in {SEEDS} broke an invariant; other failures: {others}")


def test_unbroken_seeds_pass_and_reach_the_rule(caplog) -> None:
    """The control: the same seeds pass with the rule in place, and some of them do
    have an expansion refused, so the break above is what fails a seed."""
    caplog.set_level(logging.ERROR)
    refused = 0
    for seed in SEEDS:
        world = run_random(seed, PROFILES[PROFILE], STEPS, label=PROFILE)
        refused += world.stats.get("isr_ineligible", 0)
    assert refused > 0


# -- the broker: a follower's Fetch v15 carries its broker epoch to the ISR write ---------------


def _follower_fetch(port: int, topic_id: uuid.UUID, replica_id: int, replica_epoch: int) -> None:
    """One sessionless Fetch v15 of partition 0 at offset 0, as follower ``replica_id`` of
    broker epoch ``replica_epoch`` sends it (``ReplicaState``, KIP-903)."""
    cls = request_schema(ApiKey.FETCH, 15)
    request = make(
        cls,
        replica_state=nested(cls, "ReplicaState")(
            replica_id=replica_id, replica_epoch=replica_epoch
        ),
        max_wait=datetime.timedelta(milliseconds=0),
        min_bytes=1,
        topics=(
            make(
                nested(cls, "FetchTopic"),
                topic_id=topic_id,
                partitions=(
                    make(
                        nested(cls, "FetchPartition"),
                        partition=0,
                        fetch_offset=0,
                        partition_max_bytes=1 << 20,
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )

    async def go() -> None:
        conn = KafkaConnection("127.0.0.1", port, client_id=f"replica-{replica_id}")
        await conn.connect()
        try:
            response = await conn.request(request, timeout_s=30)
        finally:
            await conn.close()
        assert int(response.error_code) == ErrorCode.none
        (answer,) = response.responses[0].partitions
        assert int(answer.error_code) == ErrorCode.none

    asyncio.run(go())


def test_broker_refuses_a_follower_fetching_with_a_stale_broker_epoch(
    cluster_factory, make_client: Callable[[], KafkaZkClient]
) -> None:
    """A broker process leads partition 0 of (leader, replica); the replica's broker is
    this test: a registration in ZooKeeper and a Fetch v15 carrying a broker epoch. A
    fetch at an epoch the replica is not registered at now (an earlier incarnation's)
    brings it back in sync but not into the ISR; one at its registered epoch does."""
    cluster = cluster_factory(1, overrides={"replica.lag.time.max.ms": "1000"})
    (leader,) = cluster.broker_ids
    replica = leader + 1  # this test
    zk_view = ZkView(cluster)
    try:
        follower = KafkaZkClient(cluster.zookeeper_connect, session_timeout_ms=30000)
        follower.start()
        try:
            epoch = follower.register_broker(BrokerInfo.plaintext(replica, "127.0.0.1", 1))
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()})
            wait_for(
                lambda: replica in admin.list_topics(timeout=10).brokers,
                what="the leader to know the replica's broker",
            )
            admin.create_topics([NewTopic("kip903", 1, replica_assignment=[[leader, replica]])])[
                "kip903"
            ].result(timeout=60)
            # The replica never fetched: the leader shrinks it out of the ISR.
            wait_for(
                lambda: (zk_view.partition_state("kip903", 0) or {}).get("isr") == [leader],
                what="the replica out of the ISR",
            )
            topic_id = follower.get_topic_ids({"kip903"})["kip903"]
            _follower_fetch(cluster.port(leader), topic_id, replica, epoch - 1)
            refused = r"ISR expansion .* refused"
            wait_for(
                lambda: (
                    log_lines(cluster.broker_dir(leader), refused)
                    or zk_view.partition_state("kip903", 0)["isr"] != [leader]
                ),
                what="the leader to answer the expansion",
            )
            assert zk_view.partition_state("kip903", 0)["isr"] == [leader]
            assert log_lines(cluster.broker_dir(leader), refused)
            _follower_fetch(cluster.port(leader), topic_id, replica, epoch)
            wait_for(
                lambda: zk_view.partition_state("kip903", 0)["isr"] == [leader, replica],
                what="the replica back in the ISR",
            )
        finally:
            follower.close()
    finally:
        zk_view.close()


# -- replog's follower: its fetches carry its broker epoch ----------------------------------------


def _fetches_seen_by_a_leader(
    partitions: list[FetchPartitionRequest], epochs: list[int]
) -> tuple[list[frames.Request], list[dict]]:
    """A follower (broker 2) fetches ``partitions`` once per entry of ``epochs``, its broker
    epoch at that moment, from a stand-in leader that decodes each request with the
    broker's reader and answers each partition with one record set: the requests as
    the leader read them, and the follower's results."""
    seen: list[frames.Request] = []

    async def leader(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                request = frames.decode_request(await reader.readexactly(size))
                seen.append(request)
                version = request.api_version
                by_id = version >= fetch_codec.FIRST_TOPIC_ID
                answers = [
                    fetch_codec.FetchResponsePartitionData(
                        "" if by_id else str(t.topic),
                        int(p.partition),
                        0,
                        7,
                        7,
                        0,
                        b"records",
                        topic_id=t.topic_id if by_id else None,
                    )
                    for t in request.body.topics
                    for p in t.partitions
                ]
                body = frames.EncodedBody(
                    fetch_codec.encode_fetch_response(version, answers),
                    flexible=version >= fetch_codec.FIRST_FLEXIBLE,
                )
                for part in frames.encode_response_parts(
                    ApiKey.FETCH, request.correlation_id, body
                ):
                    writer.write(part)
                await writer.drain()
        writer.close()

    async def go() -> list[dict]:
        server = await asyncio.start_server(leader, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        epoch = iter(epochs)
        current = [UNKNOWN_BROKER_EPOCH]
        endpoint = RemoteLeaderEndpoint(
            2, "127.0.0.1", port, timeout_ms=5000, broker_epoch=lambda: current[0]
        )
        results = []
        try:
            for current[0] in epoch:
                results.append(
                    await endpoint.fetch(partitions, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20)
                )
        finally:
            await endpoint.close()
            server.close()
            await server.wait_closed()
        return results

    return seen, asyncio.run(go())


def test_a_followers_fetch_carries_its_current_broker_epoch() -> None:
    """Fetch v15 names the topic by id and carries ``ReplicaState(2, epoch)``, the epoch
    read at each request (a broker registering again has a new one); the answer, by id,
    reaches the fetcher under the topic's name."""
    topic_id = uuid.uuid4()
    asked = [FetchPartitionRequest("t", 0, 0, 1 << 20, 3, 0, topic_id=topic_id)]
    seen, results = _fetches_seen_by_a_leader(asked, [40, 41])
    fetches = [r for r in seen if r.api_key == ApiKey.FETCH and r.body.topics]
    assert [r.api_version for r in fetches] == [
        FETCH_VERSION,
        FETCH_VERSION,
    ] and FETCH_VERSION >= 15
    assert [
        (int(r.body.replica_state.replica_id), int(r.body.replica_state.replica_epoch))
        for r in fetches
    ] == [(2, 40), (2, 41)]
    assert fetches[0].body.topics[0].topic_id == topic_id
    assert all(r.client_id == "replica-2" for r in fetches)
    assert results[0][("t", 0)].records == b"records"
    assert results[0][("t", 0)].high_watermark == 7


def test_a_topic_without_an_id_is_fetched_by_name() -> None:
    """A partition of a topic made before ids (no ``topic_id``) makes the whole fetch fall
    back to the last version naming topics, as Kafka's fetcher does: it carries the
    replica id, and no broker epoch (the ISR write then checks liveness only)."""
    asked = [
        FetchPartitionRequest("old", 0, 0, 1 << 20, 3, 0),
        FetchPartitionRequest("new", 0, 0, 1 << 20, 3, 0, topic_id=uuid.uuid4()),
    ]
    seen, results = _fetches_seen_by_a_leader(asked, [40])
    (fetch,) = [r for r in seen if r.api_key == ApiKey.FETCH and r.body.topics]
    assert fetch.api_version == FETCH_VERSION_BY_NAME < fetch_codec.FIRST_TOPIC_ID
    assert int(fetch.body.replica_id) == 2
    assert sorted(str(t.topic) for t in fetch.body.topics) == ["new", "old"]
    assert set(results[0]) == {("old", 0), ("new", 0)}


def _requests_by_version(cluster, broker_id: int, request: str) -> dict[str, float]:
    """``{version: count}`` of ``request`` the broker answered (its Prometheus metrics)."""
    url = cluster.metrics_url(broker_id)
    assert url is not None
    with urllib.request.urlopen(url, timeout=20) as response:
        text = response.read().decode()
    return {
        s.labels["version"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "kafka_network_requestmetrics_requests_total"
        and s.labels.get("request") == request
    }


def test_a_restarted_replog_follower_fetches_back_into_the_isr_at_its_new_epoch(
    cluster_factory,
) -> None:
    """Two broker processes; the follower is stopped (out of the ISR) and started again
    under a new registration, a new broker epoch. Its fetches (v15, the epoch read from
    its registration) bring it back into the ISR: a fetch at another epoch than the one
    registered would have the expansion refused (the posing test above)."""
    cluster = cluster_factory(2, overrides={"replica.lag.time.max.ms": "1000"}, metrics=True)
    leader, follower = cluster.broker_ids
    zk_view = ZkView(cluster)
    zk = KafkaZkClient(cluster.zookeeper_connect, session_timeout_ms=30000)
    zk.start()
    topic = "kip903-restart"

    def isr() -> list[int] | None:
        return (zk_view.partition_state(topic, 0) or {}).get("isr")

    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()})
        admin.create_topics([NewTopic(topic, 1, replica_assignment=[[leader, follower]])])[
            topic
        ].result(timeout=60)
        wait_for(lambda: isr() == [leader, follower], what="both replicas in the ISR")
        first_epoch = zk.get_broker_epoch(follower)
        assert first_epoch is not None

        cluster.stop_broker(follower)
        wait_for(lambda: isr() == [leader], what="the stopped follower out of the ISR")
        cluster.start_broker(follower)
        second_epoch = zk.get_broker_epoch(follower)
        assert second_epoch is not None and second_epoch > first_epoch

        wait_for(lambda: isr() == [leader, follower], what="the restarted follower in the ISR")
        assert not log_lines(cluster.broker_dir(leader), r"ISR expansion .* refused")
        fetched = _requests_by_version(cluster, leader, "FetchFollower")
        assert fetched.get(str(FETCH_VERSION), 0) > 0, fetched
        assert set(fetched) == {str(FETCH_VERSION)}, fetched  # every follower fetch carried it
    finally:
        zk.close()
        zk_view.close()
