"""KIP-903 in the shipped ISR write: an expansion adding a replica that is not
registered at the broker epoch it fetched with is refused (Kafka's
``INELIGIBLE_REPLICA``), and the partition's znode is left as it was.

``write_isr_change`` runs against a real ZooKeeper here; the simulator carries out
its ISR writes with the same function on its own ZooKeeper, so a break of the rule
must make a seed fail (the rule-break test at the end, ``test_sim_rule_breaks``'s
style).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

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
