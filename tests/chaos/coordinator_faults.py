"""Faults aimed at the transaction coordinator of the transactional workload (issue 26:
"partitions of coordinator from partition leaders and from ZooKeeper", and the
coordinator's broker lost while transactions are in PrepareCommit).

The coordinator is found as a client finds it, at the fault's start: FindCoordinator (key
type 1) for one of the workload's transactional ids, chosen by ``pick``
(``chaos.coordinators``); the data partitions' leaders from ZooKeeper. The faults:

- ``coordinator-leaders``: the coordinator cut from the brokers leading the workload's
  input and output partitions, both ways (ZooKeeper and clients still reach it): its
  markers, its ``__transaction_state`` replication and KIP-890's verification all stop;
- ``coordinator-markers``: only the connections the coordinator opens to those leaders
  cut (its WriteTxnMarkers, its fetches as their follower); theirs to it (replicating
  ``__transaction_state``, verifying transactional batches), ZooKeeper and clients
  untouched, so transactions reach PrepareCommit/PrepareAbort and wait there;
- ``coordinator-zookeeper``: the coordinator cut from every ZooKeeper, both ways (its
  session expires after 6 s: its ``__transaction_state`` partitions move, and the new
  coordinator loads them and finishes what was prepared);
- ``kill-coordinator-prepared`` / ``pause-coordinator-prepared``: the markers held back
  as in ``coordinator-markers`` until DescribeTransactions at the coordinator shows some
  workload transaction in PrepareCommit or PrepareAbort (at most ``limit_s``), then
  kill -9 (restarted on stop) or SIGSTOP (SIGCONT on stop) of the coordinator, and the
  cut healed at once; after the recovery, each transaction seen prepared is described
  again at whoever coordinates it then: it must have completed.

Concurrency: called from the campaign's thread only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from chaos.cluster import BROKER_PORT
from chaos.coordinators import data_leaders, describe_transactions, find_transaction_coordinator
from chaos.nemesis import TXN_FAULTS, Fault, Partition, Target
from chaos.net import Drop, Node
from chaos.txn_workload import transactional_ids, txn_topics

PREPARED = ("PrepareCommit", "PrepareAbort")
COMPLETED = ("CompleteCommit", "CompleteAbort", "Empty", "Ongoing")


def _coordinator(target: Target, pick: int) -> tuple[str, int, str]:
    """(transactional id, its coordinator's broker id, how it was found)."""
    ids = transactional_ids()
    tid = ids[pick % len(ids)]
    broker = find_transaction_coordinator(target.cluster, tid)
    if broker is None:
        return tid, pick % target.cluster.broker_count, "no coordinator found; a broker"
    return tid, broker, "coordinator"


def _leaders_besides(target: Target, broker: int) -> list[int]:
    """The data partitions' leaders other than ``broker`` (every other broker when it
    leads them all)."""
    cluster = target.cluster
    leaders = data_leaders(cluster, txn_topics(), target.partitions) - {broker}
    return sorted(leaders or (b for b in cluster.broker_nodes if b != broker))


def _cut_outgoing(target: Target, node: Node, brokers: list[int]) -> list[Drop]:
    drops: list[Drop] = []
    for b in brokers:
        other = target.cluster.broker_nodes[b]
        drops.extend(target.cluster.net.drop_connections_to(node, other, BROKER_PORT))
    return drops


@dataclass
class CoordinatorCut(Partition):
    """``shape``: ``coordinator-leaders``, ``coordinator-markers`` or
    ``coordinator-zookeeper`` (see the module docstring); healed on stop."""

    shape: str = "coordinator-leaders"
    name: str = "coordinator-leaders"
    coordinator: int = -1

    def start(self, target: Target) -> str:
        cluster = target.cluster
        tid, broker, how = _coordinator(target, self.pick)
        self.coordinator = broker
        node = cluster.broker_nodes[broker]
        head = f"{how} {broker} of {tid}"
        if self.shape == "coordinator-zookeeper":
            self._both(cluster.net, [node], list(cluster.zk_nodes.values()))
            return f"{head} cut from ZooKeeper (both ways); brokers and clients reach it"
        leaders = _leaders_besides(target, broker)
        names = ", ".join(f"b{b}" for b in leaders)
        if self.shape == "coordinator-leaders":
            self._both(cluster.net, [node], [cluster.broker_nodes[b] for b in leaders])
            return (
                f"{head} cut from the data partitions' leaders {names} (both ways); "
                "ZooKeeper and clients reach it"
            )
        if self.shape == "coordinator-markers":
            self.drops.extend(_cut_outgoing(target, node, leaders))
            return (
                f"{head}: its connections to the data partitions' leaders {names} cut "
                "(its markers, its fetches); theirs to it, ZooKeeper and clients untouched"
            )
        raise ValueError(f"unknown coordinator cut {self.shape!r}")


@dataclass
class CoordinatorPrepared(Fault):
    """kill -9 (or SIGSTOP with ``pause``) the coordinator while some transaction is in
    PrepareCommit/PrepareAbort (see the module docstring)."""

    pause: bool = False
    name: str = "kill-coordinator-prepared"
    limit_s: float = 10.0
    victim: str = ""
    prepared: list[str] = field(default_factory=list)

    def start(self, target: Target) -> str:
        cluster = target.cluster
        tid, broker, how = _coordinator(target, self.pick)
        node = cluster.broker_nodes[broker]
        leaders = _leaders_besides(target, broker)
        drops = _cut_outgoing(target, node, leaders)
        cut_at = time.monotonic()
        seen: list[tuple[str, str]] = []
        try:
            while time.monotonic() < cut_at + self.limit_s:
                seen = [
                    (d.transactional_id, d.transaction_state)
                    for d in describe_transactions(cluster, broker, transactional_ids())
                    if d.error_code is ErrorCode.none and d.transaction_state in PREPARED
                ]
                if seen:
                    break
                time.sleep(0.05)
            held = time.monotonic() - cut_at
            self.victim = f"b{broker}"
            pid = cluster.pid(self.victim)
            if self.pause:
                cluster.pause(self.victim)
            else:
                cluster.kill(self.victim)
        finally:
            for drop in drops:
                cluster.net.undrop(drop)
        self.prepared = [t for t, _ in seen]
        what = "SIGSTOP" if self.pause else "kill -9"
        states = ", ".join(f"{t} in {s}" for t, s in seen)
        found = (
            f"with {states}"
            if seen
            else f"with no transaction seen prepared in {self.limit_s:.0f} s"
        )
        return (
            f"{what} broker {broker} ({how} of {tid}, pid {pid}) {found}; its markers held "
            f"back {held:.2f} s by cutting its connections to {', '.join(f'b{b}' for b in leaders)}"
        )

    def stop(self, target: Target) -> None:
        if self.pause:
            target.cluster.resume(self.victim)
        else:
            target.cluster.restart(self.victim)

    def after_recovery(self, target: Target) -> str | None:
        """Each transaction seen prepared, described where it is coordinated now (waited
        for up to 30 s to leave PrepareCommit/PrepareAbort)."""
        if not self.prepared:
            return None
        cluster = target.cluster
        deadline = time.monotonic() + 30
        states: dict[str, str] = {}
        while True:
            for tid in self.prepared:
                broker = find_transaction_coordinator(cluster, tid)
                if broker is None:
                    states[tid] = "no coordinator"
                    continue
                described = describe_transactions(cluster, broker, [tid])
                if described and described[0].error_code is ErrorCode.none:
                    states[tid] = f"{described[0].transaction_state} at b{broker}"
                else:
                    states[tid] = f"not described by b{broker}"
            done = all(s.split(" ")[0] in COMPLETED for s in states.values())
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        verdict = "completed" if done else "STILL NOT COMPLETED"
        return f"transactions seen prepared {verdict}: " + ", ".join(
            f"{t} {s}" for t, s in states.items()
        )


COORDINATOR_CUTS = ("coordinator-leaders", "coordinator-markers", "coordinator-zookeeper")
assert set(COORDINATOR_CUTS) < set(TXN_FAULTS)


def make_coordinator_fault(kind: str, pick: int) -> Fault:
    if kind in COORDINATOR_CUTS:
        return CoordinatorCut(pick, name=kind, shape=kind)
    if kind == "kill-coordinator-prepared":
        return CoordinatorPrepared(pick, name=kind)
    if kind == "pause-coordinator-prepared":
        return CoordinatorPrepared(pick, name=kind, pause=True)
    raise ValueError(f"unknown fault {kind!r}")
