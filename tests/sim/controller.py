"""A ZooKeeper + controller stand-in for one partition.

Holds the partition state znode (leader, leader epoch, ISR, version) and acts
like Kafka's ZooKeeper-mode controller: on broker failure it elects a new
leader from the live ISR (``replog.controller.election.offline_partition_leader``,
no unclean elections) or removes the broker from the ISR, always bumping the
leader epoch; on broker startup it elects a leader for a leaderless partition
and sends LeaderAndIsr. Leaders change the ISR with conditional updates that
fail once the version moved on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from replog.controller.election import offline_partition_leader
from replog.replication.isr import IsrChangeProposal
from sim.network import ZkPartitionState

NO_LEADER = -1
INELIGIBLE = "ineligible"


class SimController:
    def __init__(
        self,
        assigned: tuple[int, ...],
        send: Callable[[int, ZkPartitionState], None],
        trace: Callable[[str], None],
    ) -> None:
        self.assigned = assigned
        self.live: set[int] = set(assigned)
        self.state = ZkPartitionState(
            leader=assigned[0], leader_epoch=0, isr=assigned, zk_version=0, assigned=assigned
        )
        self._send = send
        self._trace = trace
        self.isr_change_notifications = 0
        # /brokers/ids/<id> registrations: broker -> broker epoch (its znode's czxid)
        self.registrations: dict[int, int] = {}
        self._next_broker_epoch = 100

    def register(self, broker: int) -> int:
        """A broker (re)created its ephemeral registration: a new broker epoch."""
        self._next_broker_epoch += 1
        self.registrations[broker] = self._next_broker_epoch
        return self._next_broker_epoch

    def _set(self, new: ZkPartitionState, why: str) -> None:
        old = self.state
        if new.leader_epoch < old.leader_epoch or new.zk_version <= old.zk_version:
            raise AssertionError(f"controller: epoch/version went back {old} -> {new}")
        if new.leader != NO_LEADER and new.leader not in new.isr:
            raise AssertionError(f"controller: leader outside ISR {new}")
        self.state = new
        self._trace(
            f"zk: {why}: leader={new.leader} epoch={new.leader_epoch} isr={list(new.isr)} "
            f"v={new.zk_version}"
        )

    def _broadcast(self) -> None:
        for b in self.assigned:
            if b in self.live:
                self._send(b, self.state)

    def broker_down(self, broker: int) -> None:
        """The broker's ZooKeeper session ended (crash, or a pause past the session timeout)."""
        self.registrations.pop(broker, None)
        if broker not in self.live:
            return
        self.live.discard(broker)
        st = self.state
        if st.leader == broker:
            result = offline_partition_leader(self.assigned, st.isr, self.live, False)
            if result is None:
                # Kafka keeps the last ISR member: it is the one that must come back.
                isr = st.isr if len(st.isr) == 1 else tuple(r for r in st.isr if r != broker)
                new = replace(st, leader=NO_LEADER, isr=isr)
            else:
                new = replace(st, leader=result.leader, isr=result.isr)
        elif broker in st.isr and len(st.isr) > 1:
            new = replace(st, isr=tuple(r for r in st.isr if r != broker))
        else:
            return
        self._set(
            replace(new, leader_epoch=st.leader_epoch + 1, zk_version=st.zk_version + 1),
            f"broker {broker} down",
        )
        self._broadcast()

    def broker_up(self, broker: int) -> None:
        """The broker registered again: elect it if the partition has no leader, tell it the state."""
        self.live.add(broker)
        st = self.state
        if st.leader == NO_LEADER:
            result = offline_partition_leader(self.assigned, st.isr, self.live, False)
            if result is not None:
                self._set(
                    replace(
                        st,
                        leader=result.leader,
                        isr=result.isr,
                        leader_epoch=st.leader_epoch + 1,
                        zk_version=st.zk_version + 1,
                    ),
                    f"broker {broker} up, elected",
                )
                self._broadcast()
                return
        self._send(broker, self.state)

    def conditional_update(self, proposal: IsrChangeProposal) -> int | str | None:
        """A leader's ISR write; applied only at the version the leader last saw.

        Returns the new version, None on a version conflict, or ``INELIGIBLE``
        when a replica being added is not registered at the broker epoch it
        fetched with (KIP-903; the IO layer checks the registration znode).
        """
        st = self.state
        if (
            proposal.partition_zk_version != st.zk_version
            or proposal.leader_id != st.leader
            or proposal.leader_epoch != st.leader_epoch
        ):
            self._trace(
                f"zk: reject ISR {list(proposal.new_isr)} from {proposal.leader_id} "
                f"(epoch {proposal.leader_epoch} v{proposal.partition_zk_version}, "
                f"znode epoch {st.leader_epoch} v{st.zk_version})"
            )
            return None
        for replica, broker_epoch in proposal.added_broker_epochs:
            if self.registrations.get(replica) != broker_epoch:
                self._trace(
                    f"zk: reject adding {replica} at broker epoch {broker_epoch} "
                    f"(registered: {self.registrations.get(replica)})"
                )
                return INELIGIBLE
        self._set(
            replace(st, isr=proposal.new_isr, zk_version=st.zk_version + 1),
            f"leader {proposal.leader_id} {proposal.kind.name}",
        )
        return self.state.zk_version

    def on_isr_change_notification(self, partitions: frozenset) -> None:
        self.isr_change_notifications += 1
