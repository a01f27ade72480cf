"""KIP-903 in the shipped ISR write: an expansion adding a replica that is not
registered at the broker epoch it fetched with is refused (Kafka's
``INELIGIBLE_REPLICA``), and the partition's znode is left as it was. A follower's
Fetch v15+ carries that epoch (``ReplicaState.ReplicaEpoch``); the last test sends one
to a broker process as the follower.

``write_isr_change`` runs against a real ZooKeeper here; the simulator carries out
its ISR writes with the same function on its own ZooKeeper, so a break of the rule
must make a seed fail (the rule-break test at the end, ``test_sim_rule_breaks``'s
style).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from clients_util import log_lines
from cluster_util import ZkView, wait_for
from replog.protocol.apis import ApiKey, make, nested, request_schema
from replog.protocol.client import KafkaConnection
from replog.replication import isr_write
from replog.replication.isr import IsrChangeProposal, IsrState
from replog.replication.isr_write import IsrWriteResult, write_isr_change
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
