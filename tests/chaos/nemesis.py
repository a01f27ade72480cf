"""Reversible faults. Each has ``start`` (returns a one-line description of what it did,
naming the brokers it chose) and ``stop`` (undoes exactly that; may return a line on what
happened meanwhile).

Targets are chosen when the fault starts, from ZooKeeper's view at that moment: "the
leader of partition k" or "the controller". ``pick`` (from the seeded schedule) chooses
which partition or broker; the same seed gives the same schedule, while which broker is
the leader depends on the run.

Concurrency: called from the campaign's thread only.
"""

from __future__ import annotations

import errno
import json
import os
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kazoo.exceptions import NoNodeError

from chaos import unflushed
from chaos.cluster import FILLER, ChaosCluster
from chaos.net import Drop, Node


@dataclass
class Target:
    cluster: ChaosCluster
    topic: str
    partitions: int


@dataclass
class Fault:
    """Base: ``name`` as it appears in schedules and reports."""

    pick: int
    name: str = ""

    def start(self, target: Target) -> str:
        raise NotImplementedError

    def hold(self, target: Target, seconds: float) -> str | None:
        """The fault's time between start and stop: the schedule's ``seconds`` (not a wait on
        a condition), unless the fault decides its own length; may return a line on it."""
        time.sleep(seconds)
        return None

    def stop(self, target: Target) -> str | None:
        raise NotImplementedError

    def after_recovery(self, target: Target) -> str | None:
        """Called once the cluster's ISRs are full again after the heal: a line on what the
        fault's victim did since (None: nothing to say)."""
        return None


def _leader(target: Target, pick: int) -> tuple[int, int]:
    """(partition, its leader) for ``pick``; falls back to a broker if none is known."""
    partition = pick % target.partitions
    state = target.cluster.partition_state(target.topic, partition)
    if state is None or state[0] < 0:
        return partition, pick % target.cluster.broker_count
    return partition, state[0]


def _broker_node(target: Target, broker_id: int) -> Node:
    return target.cluster.broker_nodes[broker_id]


@dataclass
class KillRestart(Fault):
    """kill -9 the leader of a partition (``of_leader``), a broker, or a ZooKeeper
    (``zookeeper``); restart it on stop."""

    of_leader: bool = True
    zookeeper: bool = False
    name: str = "kill"
    victim: str = ""

    def start(self, target: Target) -> str:
        if self.zookeeper:
            self.victim = f"zk{self.pick % target.cluster.zookeeper_count}"
            pid = target.cluster.pid(self.victim)
            target.cluster.kill(self.victim)
            return f"kill -9 ZooKeeper {self.victim} (pid {pid})"
        if self.of_leader:
            partition, broker = _leader(target, self.pick)
            what = f"leader of partition {partition}"
        else:
            broker = self.pick % target.cluster.broker_count
            what = "a broker"
        self.victim = f"b{broker}"
        pid = target.cluster.pid(self.victim)
        target.cluster.kill(self.victim)
        return f"kill -9 broker {broker} ({what}, pid {pid})"

    def stop(self, target: Target) -> None:
        target.cluster.restart(self.victim)


@dataclass
class Pause(Fault):
    """SIGSTOP the leader of a partition, a follower of it (``follower``) or a ZooKeeper
    (``zookeeper``); SIGCONT on stop."""

    zookeeper: bool = False
    follower: bool = False
    name: str = "pause"
    victim: str = ""

    def start(self, target: Target) -> str:
        if self.zookeeper:
            index = self.pick % target.cluster.zookeeper_count
            self.victim = f"zk{index}"
            what = f"ZooKeeper {self.victim}"
        elif self.follower:
            partition, leader = _leader(target, self.pick)
            followers = [b for b in sorted(target.cluster.broker_nodes) if b != leader]
            broker = followers[(self.pick // target.partitions) % len(followers)]
            self.victim = f"b{broker}"
            what = f"broker {broker}, a follower of partition {partition} (leader {leader})"
        else:
            partition, broker = _leader(target, self.pick)
            self.victim = f"b{broker}"
            what = f"broker {broker}, leader of partition {partition}"
        target.cluster.pause(self.victim)
        return f"SIGSTOP {what} (pid {target.cluster.pid(self.victim)})"

    def stop(self, target: Target) -> None:
        target.cluster.resume(self.victim)


@dataclass
class Partition(Fault):
    """Packet drops between sets of namespaces.

    ``shape``:
    - ``leader-followers``: the leader of a partition from the other brokers, both ways
      (ZooKeeper and clients still reach it);
    - ``leader-followers-oneway``: only the followers' packets to the leader (fetches never
      arrive) or, for odd picks, only the leader's packets to the followers;
    - ``leader-isolated``: the leader from ZooKeeper and the other brokers (clients reach it);
    - ``leader-zookeeper``: the leader of a partition from ZooKeeper only;
    - ``controller-zookeeper``: the controller from ZooKeeper only;
    - ``minority``: the bridge split in two, the leader (with one ZooKeeper when there are
      three) against the other brokers, the ZooKeeper majority and the clients;
    - ``minority-zookeeper-leader``: as ``minority``, the ZooKeeper beside the leader being
      the ensemble's leader;
    - ``zookeeper-minority``: one of three ZooKeepers cut from the other two;
    - ``zookeeper-leader``: the ensemble's leader cut from the other two (the brokers
      connected to any member lose their connection while the other two elect).
    """

    shape: str = "leader-followers"
    name: str = "partition"
    drops: list[Drop] = field(default_factory=list)

    def start(self, target: Target) -> str:
        cluster = target.cluster
        net = cluster.net
        zks = list(cluster.zk_nodes.values())
        if self.shape in ("zookeeper-minority", "zookeeper-leader"):
            if len(zks) < 3:
                raise ValueError(f"{self.shape} needs three ZooKeepers")
            leader = cluster.zookeeper_leader() if self.shape == "zookeeper-leader" else None
            alone = zks[leader if leader is not None else self.pick % len(zks)]
            rest = [z for z in zks if z is not alone]
            self._both(net, [alone], rest)
            role = " (the ensemble's leader)" if leader is not None else ""
            return f"ZooKeeper {alone.name}{role} cut from {', '.join(z.name for z in rest)}"
        if self.shape == "leader-zookeeper":
            partition, leader = _leader(target, self.pick)
            self._both(net, [_broker_node(target, leader)], zks)
            return (
                f"leader {leader} of partition {partition} cut from ZooKeeper only "
                "(followers and clients reach it)"
            )
        if self.shape == "controller-zookeeper":
            controller = cluster.controller()
            if controller is None:
                controller = self.pick % cluster.broker_count
            node = _broker_node(target, controller)
            self._both(net, [node], zks)
            return f"controller {controller} cut from ZooKeeper (both ways)"
        partition, leader = _leader(target, self.pick)
        node = _broker_node(target, leader)
        others = [n for b, n in cluster.broker_nodes.items() if b != leader]
        names = ", ".join(n.name for n in others)
        head = f"leader {leader} of partition {partition}"
        if self.shape == "leader-followers":
            self._both(net, [node], others)
            return f"{head} cut from {names} (both ways); ZooKeeper and clients reach it"
        if self.shape == "leader-followers-oneway":
            if self.pick % 2 == 0:
                self.drops = [net.drop(o, node) for o in others]
                return f"{head}: packets from {names} to it dropped (one way)"
            self.drops = [net.drop(node, o) for o in others]
            return f"{head}: its packets to {names} dropped (one way)"
        if self.shape == "leader-isolated":
            self._both(net, [node], [*others, *zks])
            return f"{head} cut from {names} and ZooKeeper (both ways); clients reach it"
        if self.shape in ("minority", "minority-zookeeper-leader"):
            # the bridge split in two: the leader (and, with three, one ZooKeeper) apart
            minority_zk = zks[self.pick % len(zks)] if len(zks) >= 3 else None
            if self.shape == "minority-zookeeper-leader":
                if len(zks) < 3:
                    raise ValueError(f"{self.shape} needs three ZooKeepers")
                zk_leader = cluster.zookeeper_leader()
                minority_zk = zks[zk_leader if zk_leader is not None else 0]
            majority = [*others, *(z for z in zks if z is not minority_zk)]
            side = [node] if minority_zk is None else [node, minority_zk]
            self._both(net, side, majority, host=True)
            with_zk = f" with ZooKeeper {minority_zk.name}" if minority_zk else ""
            return f"{head} in a minority{with_zk}, cut from the rest and from the clients"
        raise ValueError(f"unknown partition shape {self.shape!r}")

    def _both(self, net, side_a: list[Node], side_b: list[Node], host: bool = False) -> None:
        for a in side_a:
            for b in side_b:
                self.drops.append(net.drop(a, b))
                self.drops.append(net.drop(b, a))
            if host:
                self.drops.extend(net.drop_host(a))

    def stop(self, target: Target) -> None:
        for drop in self.drops:
            target.cluster.net.undrop(drop)
        self.drops = []


@dataclass
class SlowLink(Fault):
    """The inter-broker connections into a partition's leader (its followers' fetches and
    their answers, the controller's requests) delayed (``delay_ms`` each way, 200-500 ms
    from the pick) or lossy (``loss``: a share of new connections and of chunks, 5-25 %
    from the pick, each stalled for 1-3 s then reset), by the leader's proxy (the cluster
    runs with ``proxies``). Clients and ZooKeeper are not touched. Stop sets the proxy
    back to transparent and says what it did meanwhile."""

    lossy: bool = False
    name: str = "slow-leader"
    broker: int | None = None
    before: dict = field(default_factory=dict)

    def start(self, target: Target) -> str:
        cluster = target.cluster
        if not cluster.proxies:
            raise ValueError(f"{self.name} needs the cluster's proxies")
        partition, leader = _leader(target, self.pick)
        proxy = cluster.proxies[leader]
        head = f"inter-broker traffic into broker {leader} (leader of partition {partition})"
        if self.lossy:
            loss = round(0.05 + (self.pick % 21) / 100, 2)
            stall_ms = 1000 + (self.pick % 2001)
            self.before = proxy.set(loss=loss, stall_ms=stall_ms, seed=self.pick)
            self.broker = leader
            return (
                f"{head} lossy: {loss:.0%} of connections and chunks stalled {stall_ms} ms "
                f"then reset (proxy pid {proxy.pid})"
            )
        delay_ms = 200 + (self.pick % 301)
        self.before = proxy.set(delay_ms=delay_ms)
        self.broker = leader
        return f"{head} delayed {delay_ms} ms each way (proxy pid {proxy.pid})"

    def stop(self, target: Target) -> str | None:
        if self.broker is None:
            return None
        after = target.cluster.proxies[self.broker].set(delay_ms=0, loss=0)
        self.broker = None
        done = {k: after[k] - self.before.get(k, 0) for k in ("chunks", "delayed", "lost")}
        return (
            f"proxy back to transparent: {done['chunks']} chunks forwarded, "
            f"{done['delayed']} delayed, {done['lost']} connections lost meanwhile"
        )


@dataclass
class CrashLoseTail(Fault):
    """An operating system crash under the leader of a partition: kill -9, then each of its
    partitions loses what it had not fsynced (``chaos.unflushed``: from the recovery point
    on, every segment cut to a length drawn from the pick, often inside a batch; indexes
    kept, cut, garbled or deleted); restart on stop. The cuts are written to
    ``broker-<id>/unflushed-cuts.jsonl``."""

    name: str = "crash-leader"
    victim: str = ""
    role: str = "leader"
    """Whose crash: ``leader`` (of partition ``pick``), ``follower`` (of it) or
    ``controller``."""

    def start(self, target: Target) -> str:
        cluster = target.cluster
        partition, broker = _leader(target, self.pick)
        what = f"leader of partition {partition}"
        if self.role == "follower":
            followers = [b for b in sorted(cluster.broker_nodes) if b != broker]
            leader, broker = broker, followers[(self.pick // target.partitions) % len(followers)]
            what = f"a follower of partition {partition} (leader {leader})"
        elif self.role == "controller":
            controller = cluster.controller()
            if controller is not None:
                broker, what = controller, "the controller"
        self.victim = f"b{broker}"
        pid = cluster.pid(self.victim)
        cluster.kill(self.victim)
        log_dir = cluster.broker_dir(broker).resolve() / "data"
        rng = random.Random(self.pick)
        cuts = unflushed.plan([log_dir], rng)
        unflushed.apply({c.partition: log_dir for c in cuts}, cuts, rng)
        with open(cluster.broker_dir(broker) / "unflushed-cuts.jsonl", "a") as f:
            f.write(json.dumps({"pick": self.pick, "cuts": [asdict(c) for c in cuts]}) + "\n")
        return (
            f"kill -9 broker {broker} ({what}, pid {pid}), its "
            f"unflushed tail lost: {unflushed.describe(cuts)}"
        )

    def stop(self, target: Target) -> None:
        target.cluster.restart(self.victim)


@dataclass
class SessionExpiry(Fault):
    """The ZooKeeper session of the controller (``controller``) or of a partition's leader
    expired by the ensemble while the broker otherwise stays healthy: the broker cut from
    every ZooKeeper (both ways; brokers and clients still reach it) until its registration
    znode is gone or owned by another session, then healed at once. The schedule's hold is
    not used: the cut lasts the session timeout and the ensemble's expiry tick (bounded by
    ``limit_s``)."""

    controller: bool = False
    name: str = "expire-leader"
    limit_s: float = 30.0
    broker: int | None = None
    session: int = 0
    drops: list[Drop] = field(default_factory=list)
    cut_at: float = 0.0
    healed_at: float = 0.0

    def start(self, target: Target) -> str:
        cluster = target.cluster
        if self.controller:
            broker = cluster.controller()
            what = "the controller"
            if broker is None:
                broker = self.pick % cluster.broker_count
                what = "a broker (no controller known)"
        else:
            partition, broker = _leader(target, self.pick)
            what = f"leader of partition {partition}"
            if broker == cluster.controller():
                what += ", also the controller"
        self.broker = broker
        self.session = _registration_session(cluster, broker)
        node = _broker_node(target, broker)
        for zk in cluster.zk_nodes.values():
            self.drops.append(cluster.net.drop(node, zk))
            self.drops.append(cluster.net.drop(zk, node))
        self.cut_at = time.monotonic()
        return (
            f"broker {broker} ({what}) cut from every ZooKeeper until its session "
            f"0x{self.session:x} expires"
        )

    def hold(self, target: Target, seconds: float) -> str:
        del seconds  # the session timeout decides
        cluster = target.cluster
        assert self.broker is not None
        deadline = self.cut_at + self.limit_s
        expired = False
        while time.monotonic() < deadline:
            try:
                expired = _registration_session(cluster, self.broker) != self.session
            except Exception:  # the ensemble briefly unreachable: ask again
                expired = False
            if expired:
                break
            time.sleep(0.05)
        self._heal(target)
        waited = self.healed_at - self.cut_at
        if expired:
            return f"session 0x{self.session:x} expired on the ensemble; healed {waited:.2f} s after the cut"
        return f"session 0x{self.session:x} still registered after {waited:.2f} s; healed anyway"

    def _heal(self, target: Target) -> None:
        for drop in self.drops:
            target.cluster.net.undrop(drop)
        self.drops = []
        self.healed_at = time.monotonic()

    def stop(self, target: Target) -> None:
        if self.drops:
            self._heal(target)

    def after_recovery(self, target: Target) -> str:
        """The broker registered again under a new session (waited for up to ``limit_s``)."""
        cluster = target.cluster
        assert self.broker is not None
        deadline = time.monotonic() + self.limit_s
        session = 0
        while time.monotonic() < deadline:
            try:
                session = _registration_session(cluster, self.broker)
            except Exception:
                session = 0
            if session not in (0, self.session):
                break
            time.sleep(0.05)
        controller = cluster.controller()
        if session in (0, self.session):
            return (
                f"broker {self.broker} not registered under a new session "
                f"{time.monotonic() - self.healed_at:.1f} s after the heal; controller {controller}"
            )
        return (
            f"broker {self.broker} registered again under session 0x{session:x} (was "
            f"0x{self.session:x}) by {time.monotonic() - self.healed_at:.1f} s after the heal; "
            f"controller now {controller}"
        )


def _registration_session(cluster: ChaosCluster, broker: int) -> int:
    """The session owning ``/brokers/ids/<broker>`` (0: not registered)."""
    try:
        stat = cluster.zk().exists(f"/brokers/ids/{broker}")
    except NoNodeError:
        return 0
    return 0 if stat is None else stat.ephemeralOwner


def fill(path: Path) -> int:
    """Write ``path`` until its file system is full; return the bytes written."""
    written = 0
    with open(path, "wb", buffering=0) as f:
        for chunk in (1 << 20, 1 << 12, 1 << 9):
            block = b"\0" * chunk
            while True:
                try:
                    written += f.write(block)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    return written


@dataclass
class DiskFull(Fault):
    """The log dir of a partition's leader filled (its brokers' ``log.dirs`` are small
    tmpfs mounts, ``ChaosCluster(small_disk_mb=...)``); the filler deleted on stop.

    A broker whose only log dir fails halts, as Kafka does (KIP-112; its leaderships move
    at once, since it closes its ZooKeeper session first): on stop, with the disk emptied,
    a halted broker is started again, as an operator would after repairing the disk."""

    name: str = "disk-full"
    filler: Path | None = None
    broker: int = -1

    def start(self, target: Target) -> str:
        cluster = target.cluster
        if not cluster.small_disk_mb:
            raise ValueError("disk-full needs the brokers' log dirs on small disks")
        partition, broker = _leader(target, self.pick)
        self.broker = broker
        self.filler = cluster.broker_dir(broker).resolve() / "data" / FILLER
        written = fill(self.filler)
        free = os.statvfs(self.filler.parent)
        return (
            f"log dir of broker {broker} (leader of partition {partition}) filled: "
            f"{written >> 20} MB filler, {free.f_bavail * free.f_frsize} bytes left"
        )

    def stop(self, target: Target) -> str | None:
        if self.filler is not None:
            self.filler.unlink(missing_ok=True)
            self.filler = None
        name = f"b{self.broker}"
        process = target.cluster.processes.get(name)
        if process is None or process.poll() is None:
            return f"broker {self.broker} still running"
        status = process.returncode
        target.cluster.restart(name)
        return f"broker {self.broker} had halted (status {status}): disk emptied, restarted"


@dataclass
class Combined(Fault):
    """Several faults at once (``a+b``), started in order and healed in reverse."""

    parts: list[Fault] = field(default_factory=list)
    started: list[Fault] = field(default_factory=list)

    def start(self, target: Target) -> str:
        details = []
        for part in self.parts:
            details.append(part.start(target))
            self.started.append(part)
        return " + ".join(details)

    def stop(self, target: Target) -> str | None:
        details = []
        while self.started:
            details.append(self.started.pop().stop(target))
        return "; ".join(d for d in details if d) or None

    def after_recovery(self, target: Target) -> str | None:
        details = [part.after_recovery(target) for part in self.parts]
        return "; ".join(d for d in details if d) or None


def make_fault(kind: str, pick: int) -> Fault:
    """A fault from its schedule name (``FAULT_KINDS``; ``a+b`` for both at once, with the
    same pick, so both aim at the same partition)."""
    if "+" in kind:
        names = kind.split("+")
        parts = [make_fault(name, pick) for name in names]
        return Combined(pick, name=kind, parts=parts)
    if kind == "kill-leader":
        return KillRestart(pick, name=kind, of_leader=True)
    if kind == "kill-broker":
        return KillRestart(pick, name=kind, of_leader=False)
    if kind == "kill-zookeeper":
        return KillRestart(pick, name=kind, zookeeper=True)
    if kind == "pause-leader":
        return Pause(pick, name=kind)
    if kind == "pause-follower":
        return Pause(pick, name=kind, follower=True)
    if kind == "pause-zookeeper":
        return Pause(pick, name=kind, zookeeper=True)
    if kind == "disk-full":
        return DiskFull(pick, name=kind)
    if kind == "crash-leader":
        return CrashLoseTail(pick, name=kind)
    if kind == "crash-follower":
        return CrashLoseTail(pick, name=kind, role="follower")
    if kind == "crash-controller":
        return CrashLoseTail(pick, name=kind, role="controller")
    if kind == "expire-leader":
        return SessionExpiry(pick, name=kind)
    if kind == "expire-controller":
        return SessionExpiry(pick, name=kind, controller=True)
    if kind in PARTITION_SHAPES:
        return Partition(pick, name=kind, shape=kind)
    if kind == "slow-leader":
        return SlowLink(pick, name=kind)
    if kind == "lossy-leader":
        return SlowLink(pick, name=kind, lossy=True)
    if kind in TXN_FAULTS:
        from chaos.coordinator_faults import make_coordinator_fault  # it builds on this module

        return make_coordinator_fault(kind, pick)
    raise ValueError(f"unknown fault {kind!r}")


PARTITION_SHAPES = (
    "leader-followers",
    "leader-followers-oneway",
    "leader-isolated",
    "leader-zookeeper",
    "controller-zookeeper",
    "minority",
    "zookeeper-minority",
    "zookeeper-leader",
    "minority-zookeeper-leader",
)
SINGLE_FAULTS = (
    "kill-leader",
    "kill-broker",
    "kill-zookeeper",
    "pause-leader",
    "pause-follower",
    "pause-zookeeper",
    "disk-full",
    "crash-leader",
    "expire-leader",
    "expire-controller",
    *PARTITION_SHAPES,
)
# two at once: each leaves two replicas of some partition that can reach each other
COMBINED_FAULTS = (
    "pause-follower+leader-zookeeper",
    "leader-zookeeper+controller-zookeeper",
    "kill-broker+leader-followers-oneway",
    "pause-follower+leader-followers",
)
FAULT_KINDS = SINGLE_FAULTS + COMBINED_FAULTS
# faults carried out by the brokers' proxies (``ChaosCluster(proxies=True)``); drawn only
# when named (``--faults``), so that the schedules of recorded seeds stay as they were
PROXY_FAULTS = ("slow-leader", "lossy-leader")
# OS crashes of others than a leader; drawn only when named, for the same reason
NAMED_ONLY_CRASHES = ("crash-follower", "crash-controller")
# aimed at the transactional workload's coordinators (``chaos.coordinator_faults``);
# drawn by default only with the transactional workload
TXN_FAULTS = (
    "coordinator-leaders",
    "coordinator-markers",
    "coordinator-zookeeper",
    "kill-coordinator-prepared",
    "pause-coordinator-prepared",
)
KNOWN_FAULTS = FAULT_KINDS + PROXY_FAULTS + NAMED_ONLY_CRASHES + TXN_FAULTS
# faults that need a ZooKeeper ensemble
ENSEMBLE_ONLY = ("zookeeper-minority", "zookeeper-leader", "minority-zookeeper-leader")
