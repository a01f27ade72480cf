"""Server-side partition assignors of KIP-848 consumer groups: ``uniform`` and ``range``.

An assignor is a pure function from the members (what each is subscribed to and what
it was assigned by the previous target assignment) and the subscribed topics (id,
name, partition count) to the new target assignment of every member. Both are
sticky: a partition stays with its member unless balance requires it to move (Kafka
``UniformAssignor`` / ``RangeAssignor`` of the new group coordinator).

- ``uniform``: spreads all partitions as evenly as the subscriptions allow. When every
  member has the same subscription (Kafka's "homogeneous" case, the common one) each
  member gets ``P // N`` or one more, computed directly; otherwise partitions are
  placed on the least loaded subscribed member and then moved, one at a time, from a
  member to a subscribed one holding at least two fewer, until none can move
  (Kafka ``GeneralUniformAssignmentBuilder``'s goal, a simpler route).
- ``range``: per topic, the subscribed members sorted by member id get consecutive
  ranges, the first ``P % N`` one partition more. Topics with the same subscribers and
  the same partition count ("co-partitioned") always get the same ranges, so a join
  between them stays local; stickiness follows the topic of the group that has a
  current assignment.

Both keep these invariants, which the tests check with Hypothesis: every partition of a
subscribed topic is assigned to exactly one member subscribed to it; with identical
subscriptions ``uniform`` is balanced within one partition; a member joining a group
whose assignment came from the same assignor takes partitions only from the others,
which lose only what balance requires.

Rack awareness is not implemented: ``MemberSpec.rack_id`` is carried but not used.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

Assignment = dict[uuid.UUID, frozenset[int]]


class PartitionAssignorError(Exception):
    """The assignor could not compute an assignment (Kafka ``PartitionAssignorException``)."""


@dataclass(frozen=True)
class TopicSpec:
    topic_id: uuid.UUID
    name: str
    num_partitions: int


@dataclass(frozen=True)
class MemberSpec:
    subscribed_topic_ids: frozenset[uuid.UUID]
    rack_id: str | None = None
    # The member's partitions in the current target assignment.
    assigned: Mapping[uuid.UUID, frozenset[int]] = field(default_factory=dict)


Assignor = Callable[
    [Mapping[str, MemberSpec], Mapping[uuid.UUID, TopicSpec]], dict[str, Assignment]
]

TopicPartition = tuple[uuid.UUID, int]


def _ordered_topics(topics: Mapping[uuid.UUID, TopicSpec]) -> list[TopicSpec]:
    return sorted(topics.values(), key=lambda t: (t.name, str(t.topic_id)))


def _subscriptions(
    members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, TopicSpec]
) -> dict[str, frozenset[uuid.UUID]]:
    """Each member's subscribed topics that exist (are in ``topics``)."""
    return {m: frozenset(spec.subscribed_topic_ids & topics.keys()) for m, spec in members.items()}


def _retained(
    members: Mapping[str, MemberSpec],
    topics: Mapping[uuid.UUID, TopicSpec],
    subscriptions: Mapping[str, frozenset[uuid.UUID]],
) -> dict[str, list[TopicPartition]]:
    """Each member's current partitions that it may keep: of a topic it is still
    subscribed to, still existing, and not claimed by a member earlier in id order."""
    order = {t.topic_id: i for i, t in enumerate(_ordered_topics(topics))}
    claimed: set[TopicPartition] = set()
    retained: dict[str, list[TopicPartition]] = {}
    for member in sorted(members):
        keep: list[TopicPartition] = []
        for topic_id, partitions in members[member].assigned.items():
            if topic_id not in subscriptions[member]:
                continue
            count = topics[topic_id].num_partitions
            for p in partitions:
                tp = (topic_id, p)
                if 0 <= p < count and tp not in claimed:
                    claimed.add(tp)
                    keep.append(tp)
        keep.sort(key=lambda tp: (order[tp[0]], tp[1]))
        retained[member] = keep
    return retained


def _to_assignment(owned: Mapping[str, list[TopicPartition]], members) -> dict[str, Assignment]:
    result: dict[str, Assignment] = {}
    for member in members:
        by_topic: dict[uuid.UUID, set[int]] = {}
        for topic_id, p in owned.get(member, ()):
            by_topic.setdefault(topic_id, set()).add(p)
        result[member] = {t: frozenset(ps) for t, ps in by_topic.items()}
    return result


def _capacities(
    ordered_members: list[str], retained: Mapping[str, list], total: int
) -> dict[str, int]:
    """How many partitions each member ends with: ``total // n``, and one more for
    ``total % n`` of them: first those already holding more than the quota (they keep
    one extra instead of giving it away), then those holding least (they receive
    partitions anyway), in ``ordered_members`` order among equals."""
    n = len(ordered_members)
    quota, extra = divmod(total, n)
    rank = {m: i for i, m in enumerate(ordered_members)}
    over = [m for m in ordered_members if len(retained[m]) > quota]
    rest = sorted(
        (m for m in ordered_members if len(retained[m]) <= quota),
        key=lambda m: (len(retained[m]), rank[m]),
    )
    caps = dict.fromkeys(ordered_members, quota)
    for m in (over + rest)[:extra]:
        caps[m] += 1
    return caps


# -- uniform ---------------------------------------------------------------------------


def uniform_assign(
    members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, TopicSpec]
) -> dict[str, Assignment]:
    if not members:
        return {}
    subscriptions = _subscriptions(members, topics)
    retained = _retained(members, topics, subscriptions)
    if len(set(subscriptions.values())) == 1:
        owned = _uniform_homogeneous(
            sorted(members), next(iter(subscriptions.values())), topics, retained
        )
    else:
        owned = _uniform_heterogeneous(sorted(members), subscriptions, topics, retained)
    return _to_assignment(owned, members)


def _uniform_homogeneous(
    ordered: list[str],
    subscribed: frozenset[uuid.UUID],
    topics: Mapping[uuid.UUID, TopicSpec],
    retained: dict[str, list[TopicPartition]],
) -> dict[str, list[TopicPartition]]:
    all_partitions = [
        (t.topic_id, p)
        for t in _ordered_topics(topics)
        if t.topic_id in subscribed
        for p in range(t.num_partitions)
    ]
    caps = _capacities(ordered, retained, len(all_partitions))
    owned = {m: retained[m][: caps[m]] for m in ordered}
    taken = {tp for tps in owned.values() for tp in tps}
    pool = [tp for tp in all_partitions if tp not in taken]
    # Hand the free partitions out round-robin so each member's share mixes topics.
    hungry = [m for m in ordered if len(owned[m]) < caps[m]]
    i = 0
    for tp in pool:
        while len(owned[hungry[i % len(hungry)]]) >= caps[hungry[i % len(hungry)]]:
            i += 1
        owned[hungry[i % len(hungry)]].append(tp)
        i += 1
    return owned


def _uniform_heterogeneous(
    ordered: list[str],
    subscriptions: Mapping[str, frozenset[uuid.UUID]],
    topics: Mapping[uuid.UUID, TopicSpec],
    retained: dict[str, list[TopicPartition]],
) -> dict[str, list[TopicPartition]]:
    subscribers = {t: [m for m in ordered if t in subscriptions[m]] for t in topics}
    owner: dict[TopicPartition, str] = {}
    count = dict.fromkeys(ordered, 0)
    for m in ordered:
        for tp in retained[m]:
            owner[tp] = m
            count[m] += 1
    rank = {m: i for i, m in enumerate(ordered)}

    def least_loaded(topic_id: uuid.UUID) -> str:
        return min(subscribers[topic_id], key=lambda m: (count[m], rank[m]))

    # Most constrained topics (fewest subscribers) first.
    for t in sorted(_ordered_topics(topics), key=lambda t: len(subscribers[t.topic_id])):
        if not subscribers[t.topic_id]:
            continue
        for p in range(t.num_partitions):
            if (t.topic_id, p) not in owner:
                m = least_loaded(t.topic_id)
                owner[(t.topic_id, p)] = m
                count[m] += 1

    owned: dict[str, list[TopicPartition]] = {m: [] for m in ordered}
    for tp, m in owner.items():
        owned[m].append(tp)
    order = {t.topic_id: i for i, t in enumerate(_ordered_topics(topics))}
    for m in ordered:
        owned[m].sort(key=lambda tp: (order[tp[0]], tp[1]))

    # Move one partition at a time from the most loaded member that can give to a
    # subscribed member holding at least two fewer; each move lowers the sum of squared
    # counts, so this ends.
    while True:
        moved = False
        for giver in sorted(ordered, key=lambda m: (-count[m], rank[m])):
            for i, tp in enumerate(owned[giver]):
                receiver = least_loaded(tp[0])
                if count[giver] - count[receiver] >= 2:
                    owned[giver].pop(i)
                    owned[receiver].append(tp)
                    count[giver] -= 1
                    count[receiver] += 1
                    moved = True
                    break
            if moved:
                break
        if not moved:
            return owned


# -- range -----------------------------------------------------------------------------


def range_assign(
    members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, TopicSpec]
) -> dict[str, Assignment]:
    if not members:
        return {}
    subscriptions = _subscriptions(members, topics)
    # Co-partitioned topics: the same subscribers and the same number of partitions.
    groups: dict[tuple[tuple[str, ...], int], list[TopicSpec]] = {}
    for t in _ordered_topics(topics):
        subs = tuple(m for m in sorted(members) if t.topic_id in subscriptions[m])
        if subs:
            groups.setdefault((subs, t.num_partitions), []).append(t)
    owned: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for (subs, num_partitions), group_topics in groups.items():
        reference = next(
            (t for t in group_topics if any(members[m].assigned.get(t.topic_id) for m in subs)),
            group_topics[0],
        )
        ranges = _sticky_ranges(subs, num_partitions, members, reference.topic_id)
        for t in group_topics:
            for m in subs:
                owned[m].extend((t.topic_id, p) for p in ranges[m])
    return _to_assignment(owned, members)


def _sticky_ranges(
    subscribers: tuple[str, ...],
    num_partitions: int,
    members: Mapping[str, MemberSpec],
    topic_id: uuid.UUID,
) -> dict[str, list[int]]:
    """Partitions of one topic per subscriber: members keep what they have up to their
    share; free partitions fill the members in member-id order, lowest first, so with
    no current assignment the shares are Kafka's consecutive ranges."""
    claimed: set[int] = set()
    retained: dict[str, list[int]] = {}
    for m in subscribers:
        keep = sorted(
            p
            for p in members[m].assigned.get(topic_id, ())
            if 0 <= p < num_partitions and p not in claimed
        )
        claimed.update(keep)
        retained[m] = keep
    caps = _capacities(list(subscribers), retained, num_partitions)
    ranges = {m: retained[m][: caps[m]] for m in subscribers}
    taken = {p for ps in ranges.values() for p in ps}
    pool = iter(p for p in range(num_partitions) if p not in taken)
    for m in subscribers:
        while len(ranges[m]) < caps[m]:
            ranges[m].append(next(pool))
        ranges[m].sort()
    return ranges


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform_assign, "range": range_assign}


def configured_assignors(names: list[str] | str) -> dict[str, Assignor]:
    """The assignors named by ``group.consumer.assignors`` in order (the first is the
    default); Kafka class names are accepted for the two built in."""
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    result: dict[str, Assignor] = {}
    for name in names:
        short = _CLASS_NAMES.get(name, name)
        if short not in ASSIGNORS:
            raise ValueError(f"unknown group.consumer.assignors entry {name!r}")
        result[short] = ASSIGNORS[short]
    if not result:
        raise ValueError("group.consumer.assignors names no assignor")
    return result


_CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}
