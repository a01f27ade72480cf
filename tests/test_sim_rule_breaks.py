"""Rule-break tests: a bug planted in one replication rule must make a simulated seed fail.

STYLE.md: "simulate the code that ships ... a bug planted in a replication rule
must make a seed fail" (FoundationDB, TigerBeetle's VOPR). Each test breaks ONE
rule of the shipped code with ``monkeypatch`` (``src/`` is never edited), runs
the short random simulation over a few seeds and requires an invariant
violation: one of the world's invariants (``tests/sim/world.py``) or one of the
core's always-on assertions (``ReplicationInvariantError``). Where the core's
assertion is what catches a break, a second test switches those assertions off
to show the world's invariants catch it as well.

``test_unbroken_rules_pass_the_same_seeds`` is the control: the same seeds pass
with no break, so a violation found here is the break's doing. Rules whose break
random runs do not reach have a scripted scenario instead, run once with the rule
(the control) and once broken.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

import pytest
from kio.schema.errors import ErrorCode

from replog.controller import controller_zk, core_election, decisions, state_machines
from replog.controller.core_apply import MAX_WRITE_ATTEMPTS, DecisionExecutor
from replog.controller.core_requests import ApplyRecord, Send, zk_call
from replog.controller.effects import ControllerDecision
from replog.controller.election import ElectionResult
from replog.replication import fetch_decision
from replog.replication import machine as machine_module
from replog.replication.core import AcksAllStatus, HwChange, LeaderState, ReplicationInvariantError
from replog.replication.follower import FollowerPhase
from replog.replication.machine import PartitionMachine
from replog.replication.truncation import high_watermark_truncation
from replog.server import fetch_session
from sim.broker import TruncationRule
from sim.logcheck import every_log_record_formats
from sim.run import PROFILES, failure_kind, run_random
from sim.script import commit, payloads, scripted, three_replicas
from sim.world import SimInvariantViolation, World

# The "lossy" profile of the random simulation: three replicas, min.insync.replicas=2,
# crashes that may lose the unflushed tail, every kind of fault; a short run per seed.
PROFILE = "lossy"
SEEDS = range(8)
# The rules of the operators' actions (controlled shutdown) run in the "operations" profile,
# "lossy" with half of the crashes replaced by controlled shutdowns.
OPERATIONS_PROFILE = "operations"
STEPS = 3_000


@pytest.fixture(autouse=True)
def _quiet_controller_logs(caplog) -> Iterator[None]:
    """Failed elections are logged at WARNING thousands of times; keep reports readable."""
    caplog.set_level(logging.ERROR)
    yield


@pytest.fixture(autouse=True)
def _log_records_format(_quiet_controller_logs) -> Iterator[None]:
    """Every log record the runs make the shipped code write formats (sim/logcheck.py)."""
    with every_log_record_formats():
        yield


def first_violation(
    others: list[str], profile: str = PROFILE, seeds: Iterable[int] = SEEDS
) -> tuple[int, str] | None:
    """(seed, what broke) for the first seed that breaks an invariant, or None.

    A run that fails otherwise (a liveness bound, a glue error) is not a
    violation: the next seed is tried, and the failure goes to ``others``.
    """
    for seed in seeds:
        try:
            run_random(seed, PROFILES[profile], STEPS, label=profile)
        except SimInvariantViolation as exc:
            return seed, exc.kind
        except AssertionError as exc:
            if isinstance(exc.__cause__, ReplicationInvariantError):
                return seed, f"core: {str(exc.__cause__).splitlines()[0]}"
            others.append(f"seed {seed}: {str(exc).splitlines()[0][:160]}")
    return None


def assert_caught(
    *, world_only: bool = False, profile: str = PROFILE, seeds: Iterable[int] = SEEDS
) -> str:
    others: list[str] = []
    found = first_violation(others, profile, seeds)
    assert found is not None, f"no seed in {seeds} broke an invariant; other failures: {others}"
    seed, kind = found
    if world_only:
        assert not kind.startswith("core:"), f"seed {seed}: {kind}"
    print(f"caught by seed {seed}: {kind}")
    return kind


def disable_core_assertions(monkeypatch) -> None:
    monkeypatch.setattr(LeaderState, "check_invariants", lambda self: None)
    monkeypatch.setattr(PartitionMachine, "check_invariants", lambda self: None)


@pytest.mark.parametrize(
    "profile", [PROFILE, OPERATIONS_PROFILE, "controller", "elections", "disks"]
)
def test_unbroken_rules_pass_the_same_seeds(profile: str) -> None:
    """Control: with every rule intact the seeds below run, heal and converge."""
    others: list[str] = []
    found = first_violation(others, profile)
    assert found is None and others == [], (found, others)


# -- (a) the high watermark ------------------------------------------------------------------


def _set_high_watermark(ls: LeaderState, candidate: int) -> HwChange | None:
    if candidate <= ls._high_watermark:
        return None
    change = HwChange(ls._high_watermark, candidate)
    ls._high_watermark = candidate
    return change


def break_hw_is_leader_log_end(monkeypatch) -> None:
    monkeypatch.setattr(
        LeaderState,
        "_maybe_increment_high_watermark",
        lambda self: _set_high_watermark(self, self._log_end_offset),
    )


def test_hw_is_the_leaders_log_end(monkeypatch) -> None:
    """Rule: HW = min LEO over the ISR. Break: HW = the leader's own log end offset."""
    break_hw_is_leader_log_end(monkeypatch)
    assert_caught()


def test_hw_is_the_leaders_log_end_caught_by_the_world(monkeypatch) -> None:
    """As above, with the core's own assertions off: the world's invariants see it too."""
    break_hw_is_leader_log_end(monkeypatch)
    disable_core_assertions(monkeypatch)
    assert_caught(world_only=True)


def break_hw_over_committed_isr(monkeypatch) -> None:
    def committed_isr_only(self: LeaderState) -> HwChange | None:
        candidate = self._log_end_offset
        for r in self._isr.isr:  # the rule: self._isr.maximal_isr
            if r != self.broker_id:
                leo = self._followers[r].log_end_offset
                if leo is None:
                    return None
                candidate = min(candidate, leo)
        return _set_high_watermark(self, candidate)

    monkeypatch.setattr(LeaderState, "_maybe_increment_high_watermark", committed_isr_only)


def test_hw_over_the_committed_isr_ignoring_a_pending_expansion(monkeypatch) -> None:
    """Rule: while an ISR expansion is pending the HW waits for the maximal ISR.
    Break: the HW is computed over the committed ISR only."""
    break_hw_over_committed_isr(monkeypatch)
    assert_caught()


def test_hw_over_the_committed_isr_caught_by_the_world(monkeypatch) -> None:
    """As above, with the core's own assertions off."""
    break_hw_over_committed_isr(monkeypatch)
    disable_core_assertions(monkeypatch)
    assert_caught(world_only=True)


def test_hw_without_waiting_for_followers_of_unknown_offset(monkeypatch) -> None:
    """Rule: an ISR follower whose offset is unknown in this leadership holds the HW.
    Break: followers not heard from yet are skipped (the core cannot see this one:
    it knows no offset to compare with)."""

    def skip_unknown(self: LeaderState) -> HwChange | None:
        candidate = self._log_end_offset
        for r in self._isr.maximal_isr:
            leo = None if r == self.broker_id else self._followers[r].log_end_offset
            if leo is not None:
                candidate = min(candidate, leo)
        return _set_high_watermark(self, candidate)

    monkeypatch.setattr(LeaderState, "_maybe_increment_high_watermark", skip_unknown)
    assert_caught(world_only=True)


# -- (b) follower truncation -------------------------------------------------------------------


def test_follower_truncates_to_its_hw_instead_of_the_divergence_point(monkeypatch) -> None:
    """Rule (KIP-101): a new follower truncates where its latest epoch ends in the
    leader's log. Break: it truncates to its high watermark (the pre-KIP-101 rule)."""

    def to_high_watermark(self: PartitionMachine):
        fs = self._follower()
        return high_watermark_truncation(self.log.log_end_offset, fs.high_watermark)

    monkeypatch.setattr(PartitionMachine, "next_truncation_step", to_high_watermark)
    assert_caught(world_only=True)


# -- (c) acks=all and fencing of a deposed leader -----------------------------------------------


def test_acks_all_answered_whatever_the_leadership(monkeypatch) -> None:
    """Rule: an acks=all produce is tied to the leadership it was appended in (a leader
    epoch at or after the one that leadership began at). Break: a pending produce completes once this replica's HW passes it, whatever
    role the replica has by then (a deposed leader acknowledges as a follower)."""

    def by_high_watermark(self: PartitionMachine, required_offset: int, leader_epoch: int):
        ls = self.leader_state
        if ls is not None and ls.is_leading:
            return ls.acks_all_status(required_offset)
        if self.high_watermark >= required_offset:
            return AcksAllStatus.SATISFIED
        return AcksAllStatus.PENDING

    monkeypatch.setattr(PartitionMachine, "acks_all_status", by_high_watermark)
    assert_caught(world_only=True)


def produce_pending_when_its_leadership_ends() -> World:
    """b1 appends x at epoch 0; its followers' fetches reach it, the answers do not. b1's
    session expires: b2 leads at epoch 1, b1 follows it and truncates x, y is committed at
    x's offset. b2 crashes: b1 leads again at epoch 2, and its HW passes x's offset."""
    world = three_replicas()
    b1, b2 = world.brokers[1], world.brokers[2]
    world.cut_link(1, 2, 400, both_ways=False)
    world.cut_link(1, 3, 400, both_ways=False)
    world.produce(1, "x")
    world.run_until(lambda: b1.log.log_end_offset == 2)
    world.expire_session(1, 50)
    world.run_until(lambda: b2.is_acting_leader)
    world.run_until(
        lambda: (
            b1.follower_state is not None
            and payloads(world, 1) == ["m0"]
            and 1 in world.controller.state.isr
        )
    )
    commit(world, 2, "y")
    world.crash(2)
    world.run_until(lambda: b1.is_acting_leader)
    commit(world, 1, "z")
    assert payloads(world, 1) == ["m0", "y", "z"]
    world.heal_and_converge()
    world.check_acked_everywhere()
    return world


def test_acks_all_ignores_the_leader_epoch_only(monkeypatch) -> None:
    """Rule: as above. Break: only the leader epoch check goes; leadership is still
    required, so a produce appended in an earlier leadership of this broker could complete
    in a later one, whose log was truncated and rewritten in between.

    Not observable, by design: the driver settles every pending produce at each role
    change (the broker's ``Partition._carry_out`` tries its delayed operations on every
    RoleChange, and the simulator's driver does the same), so x is answered
    NOT_LEADER_OR_FOLLOWER when b1 becomes a follower, before it leads again; the epoch
    check is the second line behind it. This scenario pins that first line: with the
    break planted, x is still never acknowledged (see tests/sim/MUTATION.md)."""

    def any_epoch(self: PartitionMachine, required_offset: int, leader_epoch: int):
        ls = self.leader_state
        if ls is None or not ls.is_leading:
            return AcksAllStatus.NOT_LEADER_OR_FOLLOWER
        return ls.acks_all_status(required_offset)

    monkeypatch.setattr(PartitionMachine, "acks_all_status", any_epoch)
    world = produce_pending_when_its_leadership_ends()
    assert "x" not in world.acked_payloads
    assert world.stats["produce_not_leader_or_follower"] == 1


def test_acks_all_ignores_min_insync_replicas_after_the_append(monkeypatch) -> None:
    """Rule: an acks=all produce whose ISR shrank below min.insync.replicas before the HW
    passed it is NOT_ENOUGH_REPLICAS_AFTER_APPEND (Kafka ``checkEnoughReplicasReachOffset``).
    Break: it is acknowledged once the HW passes it, whatever the ISR. The world sees an
    acknowledgement held by fewer than min.insync.replicas replicas."""

    def by_high_watermark_only(self: LeaderState, required_offset: int) -> AcksAllStatus:
        if self._high_watermark < required_offset:
            return AcksAllStatus.PENDING
        return AcksAllStatus.SATISFIED

    monkeypatch.setattr(LeaderState, "acks_all_status", by_high_watermark_only)
    assert assert_caught(world_only=True) == "ack_below_min_isr"


def test_fenced_leader_ignores_a_rejected_isr_write(monkeypatch) -> None:
    """Rule (seed 000): a rejected conditional ISR write means a controller moved the
    partition on: stop leading. Break: the machine treats the rejection as a success."""
    original = PartitionMachine.on_isr_update_result

    def as_if_accepted(self, proposal, new_zk_version, *, ineligible=False):
        if new_zk_version is None and not ineligible and self.leader_state is not None:
            new_zk_version = self.leader_state.partition_zk_version + 1
        return original(self, proposal, new_zk_version, ineligible=ineligible)

    monkeypatch.setattr(PartitionMachine, "on_isr_update_result", as_if_accepted)
    assert_caught(world_only=True)


# -- (d) ISR expansion -------------------------------------------------------------------------


def break_expand_below_hw(monkeypatch) -> None:
    def can_expand(self: LeaderState, replica_id: int, fetch_offset: int) -> bool:
        return (
            not self._isr.is_inflight
            and replica_id not in self._isr.isr
            and fetch_offset >= self.leader_epoch_start_offset
        )

    monkeypatch.setattr(LeaderState, "_can_expand", can_expand)


def test_isr_expanded_before_the_follower_reached_the_hw(monkeypatch) -> None:
    """Rule: a follower joins the ISR once its fetch offset reaches the HW.
    Break: the HW condition is dropped."""
    break_expand_below_hw(monkeypatch)
    assert_caught()


def test_isr_expanded_below_the_hw_caught_by_the_world(monkeypatch) -> None:
    """As above, with the core's own assertions off."""
    break_expand_below_hw(monkeypatch)
    disable_core_assertions(monkeypatch)
    assert_caught(world_only=True)


def follower_admitted_below_the_epoch_start() -> World:
    """KAFKA-7128, scripted: random runs do not reach its window (none in 8 seeds x 20000
    steps). b1 leads; m1 is committed on it while b2's HW still says 1. b1 crashes losing
    m1 (unflushed); b2 leads at a new epoch starting at 2 with its HW at 1, b3's offset in
    the new epoch unknown (its LeaderAndIsr is slow) so the HW stays there. b1 comes back
    and fetches at 1: the HW, but below the epoch start. Its answer is lost (b2 -> b1 is
    cut), then b2 crashes: whoever the controller elects from the ISR must hold m1."""
    world = scripted(
        TruncationRule.LEADER_EPOCH,
        replicas=3,
        min_insync_replicas=2,
        flush_on_append=False,
        flush_interval_ms=None,
    )
    b1, b2 = world.brokers[1], world.brokers[2]
    commit(world, 1, "m0")
    world.run_until(lambda: all(b.high_watermark == 1 for b in world.brokers.values()))
    b1.log.flushed = 1
    world.produce(1, "m1")
    world.run_until(lambda: b1.high_watermark == 2)
    assert b2.high_watermark == 1 and "m1" in world.acked_payloads
    world.network.channel_extra_delay_ms[("controller", 3)] = 10_000
    world.crash(1, lose_unflushed=True)
    world.run_until(lambda: b2.is_acting_leader)
    assert b2.leader_state.leader_epoch_start_offset == 2 and b2.high_watermark == 1
    world.restart(1)
    world.run_until(
        lambda: b1.follower_state is not None and b1.follower_state.phase is FollowerPhase.FETCHING
    )
    assert b1.log.log_end_offset == 1
    world.cut_link(2, 1, 10_000, both_ways=False)
    until = world.now + 300
    world.run_until(lambda: world.now >= until)
    world.crash(2)

    def elected_leads() -> bool:
        leader = world.controller.state.leader
        return leader in (1, 3) and world.brokers[leader].is_acting_leader

    world.run_until(elected_leads, deadline_ms=world.now + 20_000)
    return world


def test_a_follower_admitted_at_the_epoch_start_keeps_committed_records() -> None:
    """Control: with the rule, b1 stays out of the ISR until it reaches 2; b3 leads."""
    world = follower_admitted_below_the_epoch_start()
    assert world.controller.state.leader == 3
    world.heal_and_converge()
    world.check_acked_everywhere()


def test_isr_expanded_before_the_follower_reached_the_epoch_start(monkeypatch) -> None:
    """Rule: a follower joins the ISR only once it reached the offset where this
    leader epoch started (records below it may be committed although this new
    leader's HW does not say so yet). Break: that condition is dropped."""

    def can_expand(self: LeaderState, replica_id: int, fetch_offset: int) -> bool:
        return (
            not self._isr.is_inflight
            and replica_id not in self._isr.isr
            and fetch_offset >= self._high_watermark
        )

    monkeypatch.setattr(LeaderState, "_can_expand", can_expand)
    with pytest.raises(SimInvariantViolation) as caught:
        follower_admitted_below_the_epoch_start()
    assert caught.value.kind == "committed_lost", caught.value


# -- (e) KIP-320 -------------------------------------------------------------------------------


def follower_that_missed_two_leader_epochs() -> World:
    """KIP-320, scripted: random runs do not reach it (none in 8 seeds x 20000 steps).
    b3's LeaderAndIsr requests are slow. b1 leads at epoch 0 and appends x, which b3
    fetches and b2 does not (b1 -> b2 is cut). b1's session expires: b2 leads at epoch 1,
    b1 follows it and truncates x, y is committed on b2 and b1. b2 crashes: b1 leads again
    at epoch 2. b3, still following b1 at epoch 0, fetches past its x at offset 1, where
    b1 now has y."""
    world = three_replicas()
    b1, b2, b3 = (world.brokers[i] for i in (1, 2, 3))
    world.network.channel_extra_delay_ms[("controller", 3)] = 20_000
    world.cut_link(1, 2, 400, both_ways=False)
    world.produce(1, "x")
    world.run_until(lambda: b3.log.log_end_offset == 2)
    world.expire_session(1, 50)
    world.run_until(lambda: b2.is_acting_leader)
    world.run_until(
        lambda: (
            b1.follower_state is not None
            and payloads(world, 1) == ["m0"]
            and 1 in world.controller.state.isr
        )
    )
    commit(world, 2, "y")
    world.crash(2)
    world.run_until(lambda: b1.is_acting_leader)
    assert b1.known_leader_epoch == 2 and b3.known_leader_epoch == 0
    assert payloads(world, 1) == ["m0", "y"] and payloads(world, 3) == ["m0", "x"]
    world.produce(1, "z")
    until = world.now + 2_000
    world.run_until(lambda: world.now >= until)
    return world


def test_a_follower_two_leader_epochs_behind_is_fenced() -> None:
    """Control: b1 answers b3's fetches at epoch 0 with FENCED_LEADER_EPOCH until b3
    hears of epoch 2 and truncates x."""
    world = follower_that_missed_two_leader_epochs()
    assert payloads(world, 3) == ["m0", "x"]  # nothing appended past x meanwhile
    world.heal_and_converge()
    world.check_acked_everywhere()


def test_kip_320_leader_epoch_check_skipped(monkeypatch) -> None:
    """Rule (KIP-320): a fetch or OffsetsForLeaderEpoch carrying another leader epoch
    is FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH. Break: every epoch is accepted."""
    monkeypatch.setattr(
        machine_module, "validate_current_leader_epoch", lambda current, ours: ErrorCode.none
    )
    with pytest.raises(SimInvariantViolation) as caught:
        follower_that_missed_two_leader_epochs()
    assert caught.value.kind == "committed_changed", caught.value


# -- (b2) a follower kept at a newer epoch without truncating ------------------------------------

# A seed of the "operations" profile whose schedule has a follower miss a leader epoch while
# its leader was deposed and re-elected (seeds 56 and 636 among the first 800 since the
# simulated followers fetch in KIP-227 sessions and the leaders fence themselves on session
# expiry; 268 before that).
MISSED_EPOCH_SEED = 56


def test_follower_keeps_following_a_new_leader_without_truncating(monkeypatch) -> None:
    """Rule: a follower skips the truncation round only for its own leader at the very
    next epoch. Break: any newer LeaderAndIsr naming another broker is followed on from
    where the log ends, without asking the new leader where the logs diverge."""

    def any_other_leader(self, state):
        return (
            self.role is machine_module.Role.FOLLOWER
            and state.leader >= 0
            and state.leader != self.broker_id
        )

    monkeypatch.setattr(PartitionMachine, "_continues_following", any_other_leader)
    assert_caught()


def test_unbroken_rules_pass_the_missed_epoch_seed() -> None:
    """Control for the test below: the same seed runs, heals and converges."""
    others: list[str] = []
    found = first_violation(others, OPERATIONS_PROFILE, (MISSED_EPOCH_SEED,))
    assert found is None and others == [], (found, others)


def test_follower_keeps_following_its_leader_across_a_missed_epoch(monkeypatch) -> None:
    """Rule: the same leader at a later epoch than the next one may have been deposed,
    made a follower (truncated) and re-elected in between: truncate again. Break: any
    later epoch of the same leader is followed on without truncating."""

    def same_leader_any_epoch(self, state):
        return (
            self.role is machine_module.Role.FOLLOWER
            and self.state is not None
            and state.leader == self.state.leader
        )

    monkeypatch.setattr(PartitionMachine, "_continues_following", same_leader_any_epoch)
    assert_caught(profile=OPERATIONS_PROFILE, seeds=(MISSED_EPOCH_SEED,))


# -- (f) the controller's election ---------------------------------------------------------------


def test_controller_elects_a_leader_outside_the_isr(monkeypatch) -> None:
    """Rule: a clean election picks a live ISR member, or no leader at all.
    Break: unclean.leader.election.enable is taken as true: with no live ISR member
    the first live replica leads. (test_replication_simulation.py plants the bolder
    break, any live replica whether in sync or not.)"""
    original = state_machines.offline_partition_leader

    def always_unclean(assignment, isr, live, unclean_allowed):
        return original(assignment, isr, live, True)

    # state_machines calls the name it imported from replog.controller.election
    monkeypatch.setattr(state_machines, "offline_partition_leader", always_unclean)
    assert_caught(world_only=True)


def test_controlled_shutdown_moves_leadership_outside_the_isr(monkeypatch) -> None:
    """Rule: a controlled shutdown hands leadership to a live ISR member that is not
    shutting down (Kafka ``leaderForControlledShutdown``), or leaves it where it is.
    Break: the first live replica that is not shutting down leads, in sync or not (with
    itself as the ISR when it was not in it, as an unclean election would)."""

    def any_live_replica(assignment, isr, live_or_shutting_down, shutting_down):
        for replica in assignment:
            if replica in live_or_shutting_down and replica not in shutting_down:
                if replica not in isr:
                    return ElectionResult(replica, (replica,), was_unclean=True)
                return ElectionResult(replica, tuple(r for r in isr if r not in shutting_down))
        return None

    monkeypatch.setattr(state_machines, "controlled_shutdown_leader", any_live_replica)
    assert_caught(world_only=True, profile=OPERATIONS_PROFILE)


ELECTIONS_PROFILE = "elections"


def test_preferred_election_leaves_the_leader_in_place(monkeypatch) -> None:
    """Rule: a preferred replica election (ElectLeaders, the auto leader rebalance) hands
    leadership to the first assigned replica when it is live and in sync (Kafka
    ``leaderForPreferredReplica``). Break: it never finds it eligible."""
    monkeypatch.setattr(
        state_machines, "preferred_replica_leader", lambda assignment, isr, live: None
    )
    kind = assert_caught(world_only=True, profile=ELECTIONS_PROFILE)
    assert kind == "preferred_leader", kind


def test_preferred_election_takes_a_replica_out_of_sync(monkeypatch) -> None:
    """Rule: as above, only an in-sync preferred replica. Break: a live one is enough
    (with itself as the ISR, as an unclean election would)."""

    def live_enough(assignment, isr, live):
        preferred = assignment[0] if assignment else None
        if preferred in live:
            in_sync = tuple(isr) if preferred in isr else (preferred,)
            return ElectionResult(preferred, in_sync, was_unclean=preferred not in isr)
        return None

    monkeypatch.setattr(state_machines, "preferred_replica_leader", live_enough)
    assert_caught(world_only=True, profile=ELECTIONS_PROFILE)


def test_controller_ignores_a_replica_in_a_failed_log_dir(monkeypatch) -> None:
    """Rule: a LeaderAndIsr answer of KAFKA_STORAGE_ERROR takes the replica out of its
    ISR and its leadership elsewhere (Kafka ``onReplicasBecomeOffline``). Break: the
    answer is recorded, nothing moves."""
    original = decisions.on_leader_and_isr_response

    def recorded_only(ctx, broker_id, broker_epoch, offline, online):
        d, _ = original(ctx, broker_id, broker_epoch, offline, online)
        return ControllerDecision(d.context), []

    monkeypatch.setattr(decisions, "on_leader_and_isr_response", recorded_only)
    kind = assert_caught(world_only=True, profile="disks")
    assert kind == "offline_replica", kind


# -- (g) the controller core's write / install / send / re-read / retry loop -----------------------
#
# The "controller" profile drives the shipped ControllerCore through reassignments, controlled
# shutdowns and controller takeovers in the middle of an event. A break of the loop may show as
# an invariant violation or as a cluster that never recovers (liveness): both fail a seed.

CONTROLLER_PROFILE = "controller"


def assert_seed_fails(profile: str = CONTROLLER_PROFILE, seeds: Iterable[int] = SEEDS) -> str:
    """The first seed that fails in any way (an invariant, liveness, a glue error)."""
    others: list[str] = []
    found = first_violation(others, profile, seeds)
    if found is not None:
        print(f"caught by seed {found[0]}: {found[1]}")
        return found[1]
    assert others, f"every seed in {seeds} passed"
    print(f"caught: {others[0]}")
    return others[0]


def broken_apply(*, install: bool = True, reread: bool = True, send: bool = True):
    """``DecisionExecutor.apply`` with one of its steps left out (the rest as shipped)."""

    def apply(self, decide, retry, started, record=None):
        if record is None:
            record = ApplyRecord(started)
        d = decide(self.context)
        record.decision = d
        for attempt in range(1, MAX_WRITE_ATTEMPTS + 1):
            stale = yield zk_call(controller_zk.write_decision, d)
            if stale:
                d.drop_failed_writes(stale)
            if install:
                self.install(d.context)
            if send:
                record.leader_and_isr += yield Send(d)
            if not stale:
                break
            ctx = self.context
            if reread:
                fresh = yield zk_call("get_partition_states", sorted(stale))
                ctx = decisions.refreshed(self.context, fresh)
                self.install(ctx)
            if retry is None or attempt == MAX_WRITE_ATTEMPTS:
                break
            d = retry(ctx, stale)
        return record

    return apply


@pytest.mark.parametrize("step", ["install", "reread", "send"])
def test_controller_applies_a_decision_without_one_step(monkeypatch, step: str) -> None:
    """Rule: a decision is written, its context installed, its requests sent; writes
    that lost a version race are re-read and decided again. Break: one step left out."""
    monkeypatch.setattr(DecisionExecutor, "apply", broken_apply(**{step: False}))
    assert_seed_fails()


def failover_losing_its_zookeeper_connection() -> World:
    """b1's session expires: b2 or b3 wins the controller election, and its failover's
    first ZooKeeper read fails with ConnectionLoss, its session alive (kazoo's answer while
    the connection is down); the same happens to the next winner. The random runs fence a
    failover only by a takeover, which ends its session: the Expire event resigns anyway."""
    world = three_replicas()
    for b in (2, 3):
        world.lose_zookeeper_call(b, "get_isr_change_notifications")
    world.expire_session(1, 50)
    world.run_until(lambda: world.stats.get("zk_connection_loss", 0) >= 1)
    return world


def test_a_failed_failover_resigns_and_another_election_follows() -> None:
    """Control: each failed failover resigns and deletes /controller; a third election
    succeeds, the new controller moves leadership off b1, and the cluster converges."""
    world = failover_losing_its_zookeeper_connection()
    world.heal_and_converge()
    world.check_acked_everywhere()
    assert world.stats["zk_connection_loss"] == 2
    assert world.controller.controller_epoch == 4  # b1's, two failed failovers, the last


def test_controller_keeps_acting_after_a_failed_failover(monkeypatch) -> None:
    """Rule: a failover that fails resigns and gives /controller up. Break: the error
    is logged and the broker acts on: it holds /controller without a context, nobody
    else may take over, and the cluster never gets a controller again."""
    original = core_election.on_controller_failover

    def failover_errors_ignored(core, epoch):
        try:
            yield from original(core, epoch)
        except Exception:
            pass

    monkeypatch.setattr(core_election, "on_controller_failover", failover_errors_ignored)
    world = failover_losing_its_zookeeper_connection()
    with pytest.raises(AssertionError) as caught:
        world.heal_and_converge()
    assert failure_kind(caught.value) == "liveness", caught.value
    assert world.controller.active is None and world.controller.zk.controller_owner in (2, 3)


def test_controller_fenced_in_an_event_does_not_resign(monkeypatch) -> None:
    """Rule: a controller fenced by a newer one (ControllerMovedError) resigns (Kafka
    ``maybeResign``). Break: it keeps its context and goes on. Caught since the simulated
    leaders fence themselves on session expiry (before, the Expire event resigned such a
    controller anyway and no event reached it in between)."""

    def never_resign(core):
        current = yield zk_call("get_controller_id")
        core.active_controller_id = -1 if current is None else current

    monkeypatch.setattr(core_election, "maybe_resign", never_resign)
    assert_seed_fails()


def test_controlled_shutdown_answered_without_moving_leadership(monkeypatch) -> None:
    """Rule: a controlled shutdown moves the broker's leaderships to other live ISR
    members before the answer, and the answer lists those it could not move.
    Break: nothing moves, and the answer says nothing remains."""
    original = decisions.on_controlled_shutdown

    def nothing_moved(ctx, broker_id, broker_epoch):
        _, result = original(ctx, broker_id, broker_epoch)
        return ControllerDecision(ctx), decisions.ControlledShutdownResult(result.error_code, ())

    monkeypatch.setattr(decisions, "on_controlled_shutdown", nothing_moved)
    kind = assert_caught(profile=OPERATIONS_PROFILE)
    assert kind == "shutdown_leader", kind


# -- (h) KIP-595 at the leader, KIP-227 sessions and their cache -----------------------------------
# The "consumers" profile: consumers fetch with last_fetched_epoch, in sessions of one to
# three partitions, from brokers whose session cache has two slots.
CONSUMERS_PROFILE = "consumers"
CONSUMERS_SEEDS = range(3)


def test_unbroken_session_and_divergence_rules_pass_the_same_seeds() -> None:
    """Control for (h)."""
    others: list[str] = []
    found = first_violation(others, CONSUMERS_PROFILE, CONSUMERS_SEEDS)
    assert found is None and others == [], (found, others)


def test_divergence_at_the_end_of_the_last_fetched_epoch(monkeypatch) -> None:
    """Rule (KIP-595): a fetcher diverges when the leader's end of its last fetched epoch
    is below its fetch offset. Break: at the fetch offset too (a consumer at the end of
    an epoch is told to go back though its log agrees)."""
    original = fetch_decision.check_last_fetched_epoch

    def off_by_one(*, last_fetched_epoch, fetch_offset, log_start_offset, epoch_end):
        return original(
            last_fetched_epoch=last_fetched_epoch,
            fetch_offset=fetch_offset + 1,
            log_start_offset=log_start_offset,
            epoch_end=epoch_end,
        )

    monkeypatch.setattr(fetch_decision, "check_last_fetched_epoch", off_by_one)
    kind = assert_caught(profile=CONSUMERS_PROFILE, seeds=CONSUMERS_SEEDS)
    assert kind == "consumer_false_divergence", kind


def test_incremental_fetch_forgets_partitions(monkeypatch) -> None:
    """Rule (KIP-227): an incremental fetch's forgotten partitions leave the session.
    Break: they stay, and the broker reads partitions the client no longer asks for."""
    original = fetch_session.FetchSession.update
    monkeypatch.setattr(
        fetch_session.FetchSession,
        "update",
        lambda self, fetch_data, to_forget: original(self, fetch_data, []),
    )
    kind = assert_caught(profile=CONSUMERS_PROFILE, seeds=CONSUMERS_SEEDS)
    assert kind == "fetch_session_partitions", kind


def test_followers_sessions_are_privileged(monkeypatch) -> None:
    """Rule (KIP-227): a follower's new session evicts a consumer's; a consumer's evicts
    only a session unused for min.incremental.fetch.session.eviction.ms (or a consumer's
    older one). Break: the cache evicts nothing but stale sessions."""
    original = fetch_session.FetchSessionCache._try_evict

    def stale_only(self, privileged, size, now_ms):
        return original(self, False, 0, now_ms)

    monkeypatch.setattr(fetch_session.FetchSessionCache, "_try_evict", stale_only)
    kind = assert_caught(profile=CONSUMERS_PROFILE, seeds=CONSUMERS_SEEDS)
    assert kind == "fetch_session_follower_refused", kind
