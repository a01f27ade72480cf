"""Every seed that found a bug, kept: ``tests/test_replication_simulation.py`` runs them all.

Add an entry when ``python -m sim.run`` (or a test) finds a bug: the seed, the
profile and the steps it needs, and one line on what broke and why. An entry
whose bug is still open names it in ``open_bug``: its test expects the run to
fail with ``kind`` (reported as xfail) and is skipped if the seed no longer gets
there; the scripted test named in ``scripted`` is a strict xfail that fails once
the bug is fixed. Then set ``open_bug`` to None: the seed must run clean from
then on and guards against the bug coming back. While a bug is open, the random runs
tolerate (count, do not raise) the invariant it breaks, listed in
``OPEN_BUG_KINDS``, so that they keep looking for other bugs; take the kind out
when the fix lands.

A seed replays the world and the code it was found with; once either changes,
it may no longer reach its bug. ``scripted`` names a test in
``tests/test_replication_simulation.py`` that pins the bug whatever the seeds do.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Regression:
    seed: int
    profile: str
    steps: int
    kind: str  # what the run breaks: a violation kind, or "liveness" (sim.run.failure_kind)
    found: str
    open_bug: str | None = None  # still open: what to fix, where
    tolerate: frozenset[str] = field(default_factory=frozenset)  # other open bugs to look past
    scripted: str | None = None  # the scripted test that pins the same bug


# Invariant kinds broken by bugs still open: the random runs count these instead of failing.
OPEN_BUG_KINDS: dict[str, str] = {}

REGRESSIONS: tuple[Regression, ...] = (
    Regression(
        seed=0,
        profile="flushed",
        steps=1_000,
        kind="controller_isr",
        found=(
            "controller_isr: a leader added b1 to the ISR (znode v3) before the controller heard "
            "of it (ISR change notifications wait out a 5 s blackout); b1 bounced, and "
            "on_broker_change took it out of the ISR *as the context knew it* ([3]): nothing to "
            "write, so no conditional write failed and b1 stayed in ZooKeeper's ISR [3, 1]. "
            "With an unflushed tail lost in that crash, b1 is an electable in-sync replica "
            "without the committed records (found as committed_lost / hw_above_isr_leo)."
        ),
        scripted="test_controller_takes_a_failed_broker_out_of_an_isr_it_has_not_heard_of",
    ),
    Regression(
        seed=11,
        profile="control",
        steps=3_000,
        kind="liveness",
        found=(
            "liveness (first found as control seed 30, then flushed seed 27): b3 bounced "
            "while the leader had changed the ISR behind the controller's back (znode "
            "ahead of the context); the partition write lost the version race, "
            "drop_failed_writes dropped the partition's LeaderAndIsr for every broker, "
            "including the one the startup owed b3, and rerun_failure only re-decides for "
            "brokers that are offline. b3 never hears of the partition again: no full ISR "
            "after heal."
        ),
        scripted="test_a_bounced_broker_gets_leader_and_isr_after_a_version_conflict",
    ),
    Regression(
        seed=1035,
        profile="five",
        steps=2_000,
        kind="committed_changed",
        found=(
            "committed_changed (first found as control seed 414168790), the same bug when "
            "the bounced broker is the leader: b2 led at epoch 5 with m149@41, crashed "
            "losing its unflushed tail and restarted at once; the broker change lost the "
            "version race and rerun_failure did nothing (b2 is live), so ZooKeeper kept b2 "
            "as leader at epoch 5. A controller failover re-sent epoch 5 and b2 led it again, "
            "appending m202 at offset 41 in epoch 5: two records at one (epoch, offset), "
            "which leader-epoch truncation cannot tell apart; b4 keeps m149 below its HW."
        ),
        scripted="test_a_bounced_broker_gets_leader_and_isr_after_a_version_conflict",
    ),
    Regression(
        seed=1600405419,
        profile="control",
        steps=20_000,
        kind="committed_changed",
        found=(
            "committed_changed: b3 led epoch 44 with ISR [3, 1] and b1 fetched m1321@554; b3 "
            "crashed losing its unflushed tail (m1321 with it) and restarted at once, while "
            "the controller moved to b3 itself; the new controller cannot tell that its "
            "leader bounced, so it re-sent epoch 44 and b3 led it again, appending m1352@554 "
            "in epoch 44. b1's (epoch, offset) matches the leader's, so leader-epoch "
            "truncation keeps m1321: the replicas diverge below the HW. Kafka's ZooKeeper "
            "mode has the same window (KRaft closes it with registration epochs)."
        ),
        scripted="tests/test_controller_decisions.py::test_controller_failover_gives_a_restarted_leader_a_new_epoch",
    ),
    Regression(
        seed=0,
        profile="disks",
        steps=3_000,
        kind="offline_replica",
        found=(
            "offline_replica: a broker's log dir failed just after the leader added it back "
            "to the ISR (the znode's ISR has it); the controller, not yet told of that change, "
            "handled its KAFKA_STORAGE_ERROR answer over the ISR its context held: nothing to "
            "remove, so the offline replica stayed in ZooKeeper's ISR. Fixed: the controller "
            "re-reads the partition states before taking offline replicas out of ISRs, as "
            "Kafka's removeReplicasFromIsr does (controller/core_brokers.py)."
        ),
    ),
)
