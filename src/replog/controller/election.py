"""Leader elections as pure functions (Kafka ``kafka.controller.Election``).

Each takes the partition's assigned replicas (AR, preferred replica first), its current
ISR and the set of brokers that may lead, and returns the new leader and ISR, or None
when no replica is eligible. Candidates are tried in assignment order, so the preferred
replica wins whenever it is eligible. No IO, no clock, no randomness.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import NamedTuple


class ElectionResult(NamedTuple):
    leader: int
    isr: tuple[int, ...]
    was_unclean: bool = False
    """True when the leader came from outside the ISR: committed data may be lost."""


def offline_partition_leader(
    assignment: Sequence[int],
    isr: Sequence[int],
    live: Collection[int],
    unclean_allowed: bool,
) -> ElectionResult | None:
    """Kafka ``leaderForOffline``: the first live ISR member in assignment order.

    The new ISR is the live part of the old ISR. Only if no ISR member is live and
    ``unclean_allowed`` (``unclean.leader.election.enable``) is the first live assigned
    replica chosen; it becomes the only ISR member and ``was_unclean`` is set so the
    caller logs the possible data loss.
    """
    for replica in assignment:
        if replica in live and replica in isr:
            return ElectionResult(replica, tuple([r for r in isr if r in live]))
    if unclean_allowed:
        for replica in assignment:
            if replica in live:
                return ElectionResult(replica, (replica,), was_unclean=True)
    return None


def controlled_shutdown_leader(
    assignment: Sequence[int],
    isr: Sequence[int],
    live_or_shutting_down: Collection[int],
    shutting_down: Collection[int],
) -> ElectionResult | None:
    """Kafka ``leaderForControlledShutdown``: move leadership off shutting-down brokers.

    The leader is the first ISR member, in assignment order, that is live and not
    shutting down; the new ISR drops every shutting-down broker.
    """
    in_sync = set(isr)
    for replica in assignment:
        if replica in in_sync and replica in live_or_shutting_down and replica not in shutting_down:
            return ElectionResult(replica, tuple(r for r in isr if r not in shutting_down))
    return None


def preferred_replica_leader(
    assignment: Sequence[int],
    isr: Sequence[int],
    live: Collection[int],
) -> ElectionResult | None:
    """Kafka ``leaderForPreferredReplica``: the first assigned replica, if live and in ISR."""
    if not assignment:
        return None
    preferred = assignment[0]
    if preferred in live and preferred in isr:
        return ElectionResult(preferred, tuple(isr))
    return None


def reassign_partition_leader(
    target_replicas: Sequence[int],
    isr: Sequence[int],
    live: Collection[int],
) -> ElectionResult | None:
    """Kafka ``leaderForReassign``: the first target replica that is live and in the ISR."""
    in_sync = set(isr)
    for replica in target_replicas:
        if replica in live and replica in in_sync:
            return ElectionResult(replica, tuple(isr))
    return None
