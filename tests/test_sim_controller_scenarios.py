"""Scripted simulator scenarios for controller paths random runs do not reach.

Each drives the shipped controller core (``replog.controller.core*``) through the
simulated world (``tests/sim``) into one rare situation and checks what the controller
does there; each was added because a single-point bug planted in that path passed every
seed (``tests/sim/MUTATION.md`` lists them). They run in ``make test`` and in
``make mutation-sim``'s selection.

- A topic's znode deleted by hand, behind the controller's back: the controller forgets
  the topic without resigning.
- A deletion marker for a topic that does not exist: the controller removes it without
  resigning.
- The auto leader rebalance while the controller's view of the ISR lags ZooKeeper (the
  leader's ISR expansion written, its notification not yet read): the controller reads
  the ISRs again before choosing, and hands the leadership to the preferred replica.
- A controller write that loses its version race again and again: it re-reads and
  decides again up to ``MAX_WRITE_ATTEMPTS`` times, then leaves the state as read.
- A controller election that cannot reach ZooKeeper (ConnectionLoss): it runs again.
- A failed failover whose resignation cannot delete ``/controller``: the claim, held by a
  broker that does not act as controller, is found by its next election and given up.
- A replica in a failed log dir taken out of the ISR by a write that loses its version
  race: the controller decides again for the re-read state.
- A topic marked for deletion while no controller acts: the next one's failover deletes
  it, all its replicas being live.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from replog.controller.context import TopicPartition
from replog.controller.core_apply import MAX_WRITE_ATTEMPTS
from sim.logcheck import every_log_record_formats
from sim.script import three_replicas
from sim.world import World
from sim.zookeeper import PARTITION


@pytest.fixture(autouse=True)
def _log_records_format() -> Iterator[None]:
    with every_log_record_formats():
        yield


def _controller_epoch(world: World) -> int:
    return world.controller.zk.get_controller_epoch().epoch


def test_topic_deleted_behind_the_controllers_back_is_forgotten() -> None:
    """Topic u is created and gets its leader; then its znodes are deleted by hand. The
    controller drops u from its context (partitions, assignment, ids) on the topics
    watch, in the same term (no resignation: the controller epoch stays)."""
    world = three_replicas()
    zk = world.controller.zk
    u0 = TopicPartition("u", 0)
    zk.create_topic("u", {0: [2, 3, 1]})
    world.run_until(lambda: u0 in zk.get_partition_states([u0]))
    active = world.controller.active
    assert u0 in active.context.partition_leadership and "u" in active.context.topic_ids
    epoch = _controller_epoch(world)
    zk.delete_topic_behind_the_controller("u")
    world.run_until(lambda: "u" not in world.controller.active.context.all_topics)
    ctx = world.controller.active.context
    assert world.controller.active is active and _controller_epoch(world) == epoch
    assert u0 not in ctx.partition_leadership
    assert "u" not in ctx.partition_assignments and "u" not in ctx.topic_ids
    assert not any(r.topic_partition.topic == "u" for r in ctx.replica_states)
    world.heal_and_converge()
    world.check_acked_everywhere()


def test_deletion_marker_of_an_unknown_topic_is_removed() -> None:
    """``/admin/delete_topics/nosuch`` for a topic that never existed: the controller
    deletes the marker, keeps its term and keeps serving (a new topic then gets its
    leader)."""
    world = three_replicas()
    zk = world.controller.zk
    active = world.controller.active
    epoch = _controller_epoch(world)
    zk.mark_topic_for_deletion("nosuch")
    world.run_until(lambda: not zk.get_topics_marked_for_deletion())
    assert world.controller.active is active and _controller_epoch(world) == epoch
    w0 = TopicPartition("w", 0)
    zk.create_topic("w", {0: [3, 1, 2]})
    world.run_until(lambda: w0 in zk.get_partition_states([w0]))
    assert zk.get_partition_states([w0])[w0].leader_and_isr.leader == 3
    assert world.controller.active is active and _controller_epoch(world) == epoch
    world.heal_and_converge()
    world.check_acked_everywhere()


def test_auto_rebalance_reads_the_isr_the_controller_has_not_heard_of() -> None:
    """b1, the preferred replica, crashes (b2 or b3 leads and hosts the controller) and
    comes back; the leader takes it into the ISR in ZooKeeper. Before the controller has
    read that change's notification, the auto leader rebalance fires: the controller
    re-reads the partition states it would act on (Kafka reads them before electing),
    finds b1 in sync and makes it the leader."""
    world = three_replicas(leader_elections=True)
    zk = world.controller.zk

    def controller_isr() -> tuple[int, ...]:
        active = world.controller.active
        if active is None:
            return ()
        return tuple(active.context.partition_leadership[PARTITION].leader_and_isr.isr)

    def zk_isr() -> tuple[int, ...]:
        return tuple(zk.partition_state().leader_and_isr.isr)

    world.crash(1)
    world.run_until(lambda: world.controller.state.leader in (2, 3) and 1 not in zk_isr())
    world.run_until(lambda: world.controller.active is not None and 1 not in controller_isr())
    world.restart(1)
    world.run_until(lambda: 1 in zk_isr())
    assert 1 not in controller_isr(), "the notification was read already: no window"
    world.elect_preferred_leader(how="auto")
    deadline = world.now + 200  # well before the ISR change notification is sent
    world.run_until(lambda: zk.partition_state().leader_and_isr.leader == 1, deadline_ms=deadline)
    world.heal_and_converge()
    world.check_acked_everywhere()


@pytest.mark.parametrize("races", [MAX_WRITE_ATTEMPTS - 1, MAX_WRITE_ATTEMPTS])
def test_controller_write_losing_its_version_race(races: int) -> None:
    """b3, a follower, crashes; the controller's write taking it out of the ISR finds the
    state rewritten under it ``races`` times in a row. One race fewer than
    ``MAX_WRITE_ATTEMPTS``: the last attempt writes ISR [1, 2] at once, long before the
    leader would shrink it itself (``replica.lag.time.max.ms``). As many races as
    attempts: the controller leaves the state as it read it (and logs it) and keeps its
    term; the world's check that a handled failure leaves the ISR (``controller_isr``)
    sees it and is told to count it. (The leader, whose cached znode version the races
    left behind, cannot shrink the ISR itself until the controller next sends it the
    state: when b3 comes back in ``heal_and_converge``.)"""
    gives_up = races >= MAX_WRITE_ATTEMPTS
    world = three_replicas(tolerated=frozenset({"controller_isr"} if gives_up else ()))
    zk = world.controller.zk
    active = world.controller.active
    epoch = _controller_epoch(world)
    version = zk.partition_state().leader_and_isr.zk_version
    zk.races_before_controller_writes = races
    world.crash(3)
    soon = world.now + world.config.replica_lag_time_max_ms // 5
    if not gives_up:
        world.run_until(
            lambda: tuple(zk.partition_state().leader_and_isr.isr) == (1, 2), deadline_ms=soon
        )
        state = zk.partition_state()
        assert state.controller_epoch == epoch  # the controller's write, not the leader's
        assert state.leader_and_isr.zk_version == version + races + 1
    else:
        world.run_until(lambda: world.now >= soon)
        state = zk.partition_state().leader_and_isr
        assert (tuple(state.isr), state.zk_version) == ((1, 2, 3), version + races)
        assert world.stats.get("tolerated_controller_isr", 0) >= 1
    assert zk.races_before_controller_writes == 0
    assert world.stats.get("tolerated_controller_isr", 0) == (1 if gives_up else 0)
    assert world.controller.active is active and _controller_epoch(world) == epoch
    world.heal_and_converge()
    world.check_acked_everywhere()


def test_an_election_that_cannot_reach_zookeeper_runs_again() -> None:
    """The controller's session expires; the elections of b2 and b3 each lose their
    ZooKeeper connection once (ConnectionLoss: the sessions live on) at their first
    call. Each runs its election again behind its queue: one of them becomes controller
    and both name it."""
    world = three_replicas()
    zk = world.controller.zk
    old = world.controller.active
    for b in (2, 3):
        world.lose_zookeeper_call(b, "get_controller_id")
    world.expire_session(1, 50)
    world.run_until(lambda: world.controller.active not in (None, old))

    def both_name_it() -> bool:
        owner = zk.get_controller_id()
        controllers = world.controller.controllers
        return owner in (2, 3) and all(
            controllers[b].core.active_controller_id == owner for b in (2, 3)
        )

    world.run_until(both_name_it)
    assert world.stats.get("zk_connection_loss", 0) == 2
    world.heal_and_converge()
    world.check_acked_everywhere()


def test_a_claim_on_controller_left_by_a_failed_resignation_is_given_up() -> None:
    """The controller's session expires. Whichever of b2 and b3 wins fails over with a
    ConnectionLoss (its failover resigns) and cannot delete ``/controller`` either (a
    second ConnectionLoss): ``/controller`` names a broker that does not act as
    controller. Its next election finds that claim and gives it up; the next failover
    succeeds and the cluster converges."""
    world = three_replicas()
    for b in (2, 3):
        world.lose_zookeeper_call(b, "get_isr_change_notifications")
        world.lose_zookeeper_call(b, "delete_controller")
    world.expire_session(1, 50)
    world.run_until(lambda: world.stats.get("zk_connection_loss", 0) >= 2)
    owner = world.controller.zk.get_controller_id()
    assert owner in (2, 3) and not world.controller.controllers[owner].core.is_active
    world.heal_and_converge()
    world.check_acked_everywhere()
    assert world.controller.active is not None


def test_replica_in_a_failed_log_dir_leaves_the_isr_after_a_lost_version_race() -> None:
    """b3's log dir fails; it answers the controller's LeaderAndIsr with
    KAFKA_STORAGE_ERROR, and the controller's write taking b3 out of the ISR finds the
    state rewritten under it once. It re-reads it, decides again
    (``redo_replicas_offline``) and writes ISR [1, 2] at once, long before the leader
    would shrink it itself."""
    world = three_replicas(leader_and_isr_answers=True)
    zk = world.controller.zk
    epoch = _controller_epoch(world)
    version = zk.partition_state().leader_and_isr.zk_version
    zk.races_before_controller_writes = 1
    world.fail_log_dir(3, None)
    soon = world.now + world.config.replica_lag_time_max_ms // 5
    world.run_until(
        lambda: tuple(zk.partition_state().leader_and_isr.isr) == (1, 2), deadline_ms=soon
    )
    state = zk.partition_state()
    assert state.controller_epoch == epoch  # the controller's write, not the leader's
    assert state.leader_and_isr.zk_version == version + 2
    assert zk.races_before_controller_writes == 0
    world.heal_and_converge()
    world.check_acked_everywhere()


def test_topic_marked_for_deletion_between_two_controllers_is_deleted() -> None:
    """Topic u lives on b2 and b3. The controller (b1) crashes and u is marked for
    deletion before another controller acts: the new controller finds the marker at its
    failover and deletes u at once (its replicas are all live, no reassignment is under
    way: nothing makes it ineligible)."""
    world = three_replicas()
    zk = world.controller.zk
    u0 = TopicPartition("u", 0)
    zk.create_topic("u", {0: [2, 3]})
    world.run_until(lambda: u0 in zk.get_partition_states([u0]))
    old = world.controller.active
    world.crash(old.broker_id)
    zk.mark_topic_for_deletion("u")
    world.run_until(lambda: world.controller.active not in (None, old))
    world.run_until(
        lambda: "u" not in zk.get_all_topics() and not zk.get_topics_marked_for_deletion(),
        deadline_ms=world.now + 2_000,
    )
    assert zk.get_partition_states([u0]) == {}
    world.heal_and_converge()
    world.check_acked_everywhere()
