"""The controller's IO layer against a real ZooKeeper and real TCP broker endpoints.

Each "broker" here is a ZooKeeper session that registers ``/brokers/ids/<id>`` plus a
tiny asyncio server that speaks the Kafka protocol (``replog.protocol.frames``), answers
LeaderAndIsr / UpdateMetadata / StopReplica and records what it got. Controllers are
real ``KafkaController`` instances; nothing of ZooKeeper or the network is mocked.
Waiting is done by polling a condition up to a deadline, never by a fixed sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kio.schema.errors import ErrorCode

from fixtures.processes import free_port
from replog.config import KafkaConfig
from replog.controller import controller_zk
from replog.controller.channel_manager import ControllerChannelManager
from replog.controller.context import TopicPartition
from replog.controller.controller import KafkaController
from replog.controller.event_manager import ControllerEventManager, QueuedEvent
from replog.controller.events import BrokerChange, ControlledShutdown, ControllerEvent, TopicChange
from replog.controller.states import ReplicaState
from replog.protocol import controller_schemas as cs
from replog.protocol import frames
from replog.zk.client import KafkaZkClient
from replog.zk.data import (
    BrokerInfo,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    broker_path,
    delete_topic_path,
    topic_config_path,
    topic_path,
)
from replog.zk.fencing import ControllerMovedError

WAIT_S = 30.0  # upper bound for a condition; never reached when things work


# --- helpers -----------------------------------------------------------------------------


async def eventually(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    """Poll ``condition`` until true; fail with ``what`` at the deadline."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def eventually_zk(read: Callable[[], Any], check: Callable[[Any], bool], what: str) -> Any:
    """Poll a blocking ZooKeeper read (in a thread) until ``check`` accepts its value."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while True:
        value = await asyncio.to_thread(read)
        if check(value):
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last value {value!r}")
        await asyncio.sleep(0.02)


class BrokerPeer:
    """A real TCP endpoint answering the controller's RPCs and recording them."""

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.received: list[Any] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self, port: int = 0) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = frames.SIZE.unpack(await reader.readexactly(4))
                request = frames.decode_request(await reader.readexactly(size))
                self.received.append(request.body)
                answer = _answer(request.body)
                writer.write(
                    frames.encode_response(request.api_key, request.correlation_id, answer)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def of_type(self, cls: type) -> list[Any]:
        return [r for r in self.received if isinstance(r, cls)]

    def leader_and_isr_states(self) -> dict[TopicPartition, Any]:
        """The last LeaderAndIsr partition state received for each partition."""
        out: dict[TopicPartition, Any] = {}
        for request in self.of_type(cs.LeaderAndIsrRequest):
            for t in request.topic_states:
                for p in t.partition_states:
                    out[TopicPartition(str(t.topic_name), int(p.partition_index))] = p
        return out

    def stop_replica_deletes(self) -> set[TopicPartition]:
        return {
            TopicPartition(str(t.topic_name), int(p.partition_index))
            for request in self.of_type(cs.StopReplicaRequest)
            for t in request.topic_states
            for p in t.partition_states
            if p.delete_partition
        }


def _answer(body: Any) -> Any:
    if isinstance(body, cs.LeaderAndIsrRequest):
        return cs.LeaderAndIsrResponse(
            error_code=ErrorCode.none,
            topics=tuple(
                cs.LeaderAndIsrTopicError(
                    topic_id=t.topic_id,
                    partition_errors=tuple(
                        cs.LeaderAndIsrPartitionError(
                            partition_index=p.partition_index, error_code=ErrorCode.none
                        )
                        for p in t.partition_states
                    ),
                )
                for t in body.topic_states
            ),
        )
    if isinstance(body, cs.UpdateMetadataRequest):
        return cs.UpdateMetadataResponse(error_code=ErrorCode.none)
    if isinstance(body, cs.StopReplicaRequest):
        return cs.StopReplicaResponse(
            error_code=ErrorCode.none,
            partition_errors=tuple(
                cs.StopReplicaPartitionError(
                    topic_name=t.topic_name,
                    partition_index=p.partition_index,
                    error_code=ErrorCode.none,
                )
                for t in body.topic_states
                for p in t.partition_states
            ),
        )
    raise AssertionError(f"unexpected request {type(body).__name__}")


class Cluster:
    """Brokers (ZooKeeper session + TCP peer + optional controller) of one test."""

    def __init__(self, connect: str, tmp_path: Path) -> None:
        self.connect = connect
        self.tmp_path = tmp_path
        self.sessions: dict[int, KafkaZkClient] = {}
        self.peers: dict[int, BrokerPeer] = {}
        self.controllers: dict[int, KafkaController] = {}
        self.registrations: dict[int, int] = {}
        self.admin = KafkaZkClient(connect, session_timeout_ms=10000)

    def config(self, broker_id: int, **extra: str) -> KafkaConfig:
        props = {
            "broker.id": str(broker_id),
            "zookeeper.connect": self.connect,
            "log.dirs": str(self.tmp_path / f"logs-{broker_id}"),
            "controller.socket.timeout.ms": "5000",
            **extra,
        }
        return KafkaConfig.from_properties(props)

    async def start(self) -> None:
        await asyncio.to_thread(self.admin.start)

    async def add_broker(self, broker_id: int, with_controller: bool = True) -> None:
        peer = BrokerPeer(broker_id)
        await peer.start()
        self.peers[broker_id] = peer
        session = KafkaZkClient(self.connect, session_timeout_ms=10000)
        await asyncio.to_thread(session.start)
        self.sessions[broker_id] = session
        await self.register(broker_id)
        if with_controller:
            self.controllers[broker_id] = KafkaController(
                broker_id,
                session,
                self.config(broker_id),
                register_broker=partial(self.register, broker_id),
            )

    async def register(self, broker_id: int) -> int:
        self.registrations[broker_id] = self.registrations.get(broker_id, 0) + 1
        info = BrokerInfo.plaintext(broker_id, "127.0.0.1", self.peers[broker_id].port)
        return await asyncio.to_thread(self.sessions[broker_id].register_broker, info)

    async def unregister(self, broker_id: int) -> None:
        """The broker's registration disappears (as when its session dies)."""
        await asyncio.to_thread(self.admin.client.delete, broker_path(broker_id))

    async def close(self) -> None:
        for controller in self.controllers.values():
            with contextlib.suppress(Exception):
                await controller.stop()
        for peer in self.peers.values():
            await peer.stop()
        for session in [*self.sessions.values(), self.admin]:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(session.close)

    def active(self) -> list[KafkaController]:
        return [c for c in self.controllers.values() if c.is_active]

    async def state(self, topic: str, partition: int) -> LeaderIsrAndControllerEpoch | None:
        states = await asyncio.to_thread(self.admin.get_partition_states, [(topic, partition)])
        return states.get((topic, partition))


def run(zk_chroot: str, tmp_path: Path, scenario: Callable[[Cluster], Awaitable[None]]) -> None:
    async def main() -> None:
        cluster = Cluster(zk_chroot, tmp_path)
        try:
            await cluster.start()
            await scenario(cluster)
        finally:
            await cluster.close()

    asyncio.run(main())


async def single_controller_cluster(cluster: Cluster, broker_ids: list[int]) -> KafkaController:
    """Brokers ``broker_ids``; only the first runs a controller (and so wins)."""
    for broker_id in broker_ids:
        await cluster.add_broker(broker_id, with_controller=broker_id == broker_ids[0])
    controller = cluster.controllers[broker_ids[0]]
    await controller.start()
    await eventually(lambda: controller.is_active, "the controller to be elected")
    return controller


# --- election ----------------------------------------------------------------------------


def test_two_controllers_race_one_wins_and_the_loser_takes_over(
    zk_chroot: str, tmp_path: Path
) -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.add_broker(1)
        await cluster.add_broker(2)
        first, second = cluster.controllers[1], cluster.controllers[2]
        await asyncio.gather(first.start(), second.start())
        await eventually(lambda: len(cluster.active()) == 1, "one active controller")
        await eventually(
            lambda: first.active_controller_id == second.active_controller_id != -1,
            "both brokers to know the controller",
        )
        (winner,) = cluster.active()
        loser = second if winner is first else first
        assert not loser.is_active
        epoch = await asyncio.to_thread(cluster.admin.get_controller_epoch)
        assert epoch is not None and epoch.epoch == winner.controller_epoch == 1
        assert await asyncio.to_thread(cluster.admin.get_controller_id) == winner.broker_id
        # The winner told every live broker the full state, at its epoch.
        for peer in cluster.peers.values():
            await eventually(
                lambda peer=peer: any(
                    r.controller_epoch == 1 and r.controller_id == winner.broker_id
                    for r in peer.of_type(cs.UpdateMetadataRequest)
                ),
                f"UpdateMetadata at broker {peer.broker_id}",
            )

        await winner.stop()
        await eventually(lambda: loser.is_active, "the loser to take over")
        assert loser.controller_epoch == 2
        epoch = await asyncio.to_thread(cluster.admin.get_controller_epoch)
        assert epoch is not None and epoch.epoch == 2
        assert await asyncio.to_thread(cluster.admin.get_controller_id) == loser.broker_id

    run(zk_chroot, tmp_path, scenario)


def test_session_expiry_resigns_reregisters_and_reelects(zk_chroot: str, tmp_path: Path) -> None:
    async def scenario(cluster: Cluster) -> None:
        controller = await single_controller_cluster(cluster, [1, 2])
        assert controller.controller_epoch == 1
        assert cluster.registrations[1] == 1
        session = cluster.sessions[1]
        old_session_id = session.session_id

        def expire() -> None:
            # The standard way: a second connection with the same session id and password.
            session_id, password = session.client.client_id
            intruder = KazooClient(hosts=session.connect, client_id=(session_id, password))
            intruder.start(timeout=10)
            intruder.stop()
            intruder.close()

        await asyncio.to_thread(expire)
        await eventually(
            lambda: controller.is_active and controller.controller_epoch == 2,
            "re-election on the new session",
        )
        assert session.session_id != old_session_id
        assert cluster.registrations[1] == 2
        assert await asyncio.to_thread(cluster.admin.get_broker_ids) == {1, 2}
        assert await asyncio.to_thread(cluster.admin.get_controller_id) == 1

    run(zk_chroot, tmp_path, scenario)


# --- topics ------------------------------------------------------------------------------


def test_new_topic_gets_partition_states_and_leader_and_isr(zk_chroot: str, tmp_path: Path) -> None:
    async def scenario(cluster: Cluster) -> None:
        controller = await single_controller_cluster(cluster, [1, 2, 3])
        assignment = {0: [1, 2], 1: [2, 3], 2: [3, 1]}
        await asyncio.to_thread(cluster.admin.create_topic, "orders", assignment, {})
        for partition, replicas in assignment.items():
            state = await eventually_zk(
                lambda p=partition: cluster.admin.get_partition_states([("orders", p)]),
                lambda found: len(found) == 1,
                f"state of orders-{partition}",
            )
            lai = state[("orders", partition)].leader_and_isr
            assert lai.leader == replicas[0]
            assert list(lai.isr) == replicas
            assert lai.leader_epoch == 0
            assert state[("orders", partition)].controller_epoch == controller.controller_epoch
        for partition, replicas in assignment.items():
            tp = TopicPartition("orders", partition)
            for broker_id in replicas:
                peer = cluster.peers[broker_id]
                await eventually(
                    lambda peer=peer, tp=tp: tp in peer.leader_and_isr_states(),
                    f"LeaderAndIsr for {tp} at broker {broker_id}",
                )
                sent = peer.leader_and_isr_states()[tp]
                assert int(sent.leader) == replicas[0]
                assert [int(r) for r in sent.replicas] == replicas
                assert sent.is_new
            outsider = ({1, 2, 3} - set(replicas)).pop()
            assert tp not in cluster.peers[outsider].leader_and_isr_states()

    run(zk_chroot, tmp_path, scenario)


def test_topics_without_ids_get_one_that_failover_keeps(zk_chroot: str, tmp_path: Path) -> None:
    """KIP-516 in ZooKeeper mode: the controller gives a topic znode written without an id
    (as tools older than Kafka 2.8 write it) a new one, on becoming controller and on a
    topic change; the brokers hear it in LeaderAndIsr and UpdateMetadata; the next
    controller reads the same ids and writes nothing; a deposed controller cannot write."""
    old_tool = b'{"version":2,"partitions":{"0":[1,2]},"adding_replicas":{},"removing_replicas":{}}'

    async def scenario(cluster: Cluster) -> None:
        zk = cluster.admin.client
        await asyncio.to_thread(zk.create, topic_path("legacy"), old_tool)
        await cluster.add_broker(1)
        await cluster.add_broker(2)
        first, second = cluster.controllers[1], cluster.controllers[2]
        await first.start()
        await eventually(lambda: first.is_active, "broker 1 to be controller")
        await second.start()
        ids = await eventually_zk(
            lambda: cluster.admin.get_topic_ids(["legacy"]),
            lambda found: found.get("legacy") is not None,
            "an id in the legacy topic's znode",
        )
        legacy_id = ids["legacy"]
        assert first.context is not None and first.context.topic_ids["legacy"] == legacy_id
        assert await asyncio.to_thread(cluster.admin.get_topic_assignment, "legacy") == {0: [1, 2]}

        # A topic created by an old tool while the controller runs gets one too.
        await asyncio.to_thread(zk.create, topic_path("late"), old_tool)
        ids = await eventually_zk(
            lambda: cluster.admin.get_topic_ids(["late"]),
            lambda found: found.get("late") is not None,
            "an id in the late topic's znode",
        )
        late_id = ids["late"]
        assert late_id != legacy_id
        for peer in cluster.peers.values():
            await eventually(
                lambda peer=peer: any(
                    t.topic_name == "late" and t.topic_id == late_id
                    for r in peer.of_type(cs.LeaderAndIsrRequest)
                    for t in r.topic_states
                ),
                f"LeaderAndIsr with the late topic's id at broker {peer.broker_id}",
            )
            await eventually(
                lambda peer=peer: any(
                    t.topic_name == "late" and t.topic_id == late_id
                    for r in peer.of_type(cs.UpdateMetadataRequest)
                    for t in r.topic_states
                ),
                f"UpdateMetadata with the late topic's id at broker {peer.broker_id}",
            )
        versions = {
            t: (await asyncio.to_thread(zk.get, topic_path(t)))[1].version
            for t in ("legacy", "late")
        }
        old_epoch = await asyncio.to_thread(cluster.admin.get_controller_epoch)
        assert old_epoch is not None

        await first.stop()
        await eventually(lambda: second.is_active, "broker 2 to take over")
        assert second.context is not None
        assert second.context.topic_ids == {"legacy": legacy_id, "late": late_id}
        for topic, version in versions.items():
            assert (await asyncio.to_thread(zk.get, topic_path(topic)))[1].version == version
        # The new controller's UpdateMetadata is sent after it becomes active: wait for it.
        await eventually(
            lambda: any(
                t.topic_name == "legacy" and t.topic_id == legacy_id
                for r in cluster.peers[1].of_type(cs.UpdateMetadataRequest)
                if r.controller_epoch == second.controller_epoch
                for t in r.topic_states
            ),
            "UpdateMetadata with the legacy topic's id from the new controller",
        )

        # The deposed controller's epoch no longer fences anything in: no id is written.
        # (The orphan is created after the last controller stops, or that one may id it.)
        await second.stop()
        await asyncio.to_thread(zk.create, topic_path("orphan"), old_tool)
        with pytest.raises(ControllerMovedError):
            await asyncio.to_thread(
                controller_zk.assign_topic_ids, cluster.admin, ["orphan"], old_epoch.zk_version
            )
        assert await asyncio.to_thread(cluster.admin.get_topic_ids, ["orphan"]) == {"orphan": None}

    run(zk_chroot, tmp_path, scenario)


def test_broker_failure_elects_from_isr_or_goes_offline(zk_chroot: str, tmp_path: Path) -> None:
    """Broker 2 dies. Partitions it led get a live ISR member as leader with a higher
    leader epoch; with no live ISR member they go offline (leader -1) unless the topic
    allows unclean election. ``solo``/``unclean`` have an ISR that shrank to [2] behind
    the controller's back: its first write loses the version race and it decides again.
    """

    async def scenario(cluster: Cluster) -> None:
        controller = await single_controller_cluster(cluster, [1, 2, 3])
        admin = cluster.admin
        await asyncio.to_thread(admin.create_topic, "pairs", {0: [2, 3], 1: [3, 2]}, {})
        await asyncio.to_thread(admin.create_topic, "single", {0: [2]}, {})
        await asyncio.to_thread(admin.create_topic, "solo", {0: [2, 3]}, {})
        await asyncio.to_thread(
            admin.create_topic, "unclean", {0: [2, 3]}, {"unclean.leader.election.enable": "true"}
        )
        for topic in ("pairs", "single", "solo", "unclean"):
            await eventually_zk(
                lambda t=topic: admin.get_partition_states([(t, 0)]),
                lambda found: len(found) == 1,
                f"state of {topic}-0",
            )
        await eventually(
            lambda: all(
                tp in (controller.context.partition_leadership if controller.context else {})
                for tp in [("solo", 0), ("unclean", 0)]
            ),
            "the controller to know the new partitions",
        )
        # The leader (2) shrinks the ISR to itself; the controller is not told.
        for topic in ("solo", "unclean"):
            current = await cluster.state(topic, 0)
            assert current is not None and list(current.leader_and_isr.isr) == [2, 3]
            shrunk = LeaderIsrAndControllerEpoch(
                LeaderAndIsr(2, current.leader_and_isr.leader_epoch, (2,)),
                current.controller_epoch,
            )
            version = await asyncio.to_thread(
                admin.update_leader_and_isr_conditional,
                topic,
                0,
                shrunk,
                current.leader_and_isr.zk_version,
            )
            assert version is not None
        before = {tp: await cluster.state(*tp) for tp in [("pairs", 0), ("pairs", 1)]}

        await cluster.unregister(2)

        pairs0 = await eventually_zk(
            lambda: admin.get_partition_states([("pairs", 0)]),
            lambda s: s[("pairs", 0)].leader_and_isr.leader == 3,
            "pairs-0 to be led by 3",
        )
        lai = pairs0[("pairs", 0)].leader_and_isr
        assert list(lai.isr) == [3]
        assert lai.leader_epoch > before[("pairs", 0)].leader_and_isr.leader_epoch
        pairs1 = await eventually_zk(
            lambda: admin.get_partition_states([("pairs", 1)]),
            lambda s: list(s[("pairs", 1)].leader_and_isr.isr) == [3],
            "broker 2 to leave the ISR of pairs-1",
        )
        assert pairs1[("pairs", 1)].leader_and_isr.leader == 3
        single = await cluster.state("single", 0)
        assert single is not None
        assert (single.leader_and_isr.leader, list(single.leader_and_isr.isr)) == (-1, [2])
        solo = await eventually_zk(
            lambda: admin.get_partition_states([("solo", 0)]),
            lambda s: s[("solo", 0)].leader_and_isr.leader == -1,
            "solo-0 to go offline",
        )
        assert list(solo[("solo", 0)].leader_and_isr.isr) == [2]
        unclean = await eventually_zk(
            lambda: admin.get_partition_states([("unclean", 0)]),
            lambda s: s[("unclean", 0)].leader_and_isr.leader == 3,
            "unclean-0 to be led by 3 (unclean election)",
        )
        assert list(unclean[("unclean", 0)].leader_and_isr.isr) == [3]

        # Broker 3 is told it leads pairs-0, at the new leader epoch.
        peer3 = cluster.peers[3]
        await eventually(
            lambda: int(peer3.leader_and_isr_states()[("pairs", 0)].leader) == 3,
            "LeaderAndIsr making 3 the leader of pairs-0",
        )
        assert int(peer3.leader_and_isr_states()[("pairs", 0)].leader_epoch) == lai.leader_epoch
        # The failover was timed, up to the LeaderAndIsr answers.
        timing = next(t for t in controller.timings if t.what == "broker failure of [2]")
        await asyncio.wait_for(timing.done.wait(), WAIT_S)
        assert timing.partitions_reelected >= 2  # pairs-0, unclean-0
        assert timing.leader_and_isr_acked_s is not None
        assert 2 not in controller.channels.broker_ids

    run(zk_chroot, tmp_path, scenario)


def test_topic_deletion_completes_only_after_the_down_broker_returns(
    zk_chroot: str, tmp_path: Path
) -> None:
    async def scenario(cluster: Cluster) -> None:
        controller = await single_controller_cluster(cluster, [1, 2, 3])
        admin = cluster.admin
        await asyncio.to_thread(admin.create_topic, "doomed", {0: [2, 3], 1: [3, 2]}, {})
        await eventually_zk(
            lambda: admin.get_partition_states([("doomed", 0), ("doomed", 1)]),
            lambda found: len(found) == 2,
            "states of doomed",
        )
        await cluster.unregister(3)
        await eventually(
            lambda: controller.context is not None and 3 not in controller.context.live_brokers,
            "the controller to see broker 3 die",
        )
        await asyncio.to_thread(admin.mark_topic_for_deletion, "doomed")

        # Broker 2 deletes its replicas; broker 3's cannot be deleted while it is down.
        doomed = {TopicPartition("doomed", 0), TopicPartition("doomed", 1)}
        await eventually(
            lambda: cluster.peers[2].stop_replica_deletes() == doomed,
            "StopReplica(delete) at broker 2",
        )

        def deleted_on_2() -> bool:
            ctx = controller.context
            return ctx is not None and all(
                ctx.replica_states.get((tp, 2)) is ReplicaState.ReplicaDeletionSuccessful
                for tp in doomed
            )

        await eventually(deleted_on_2, "broker 2's StopReplica answers to be processed")
        assert controller.context is not None
        assert "doomed" in controller.context.topics_ineligible_for_deletion
        assert await asyncio.to_thread(admin.topic_exists, "doomed")
        assert not cluster.peers[3].stop_replica_deletes()

        await cluster.register(3)

        await eventually(
            lambda: cluster.peers[3].stop_replica_deletes() == doomed,
            "StopReplica(delete) at broker 3 once it is back",
        )
        client = admin.client
        await eventually_zk(
            lambda: [
                client.exists(topic_path("doomed")),
                client.exists(topic_config_path("doomed")),
                client.exists(delete_topic_path("doomed")),
            ],
            lambda found: found == [None, None, None],
            "the topic's znodes to be deleted",
        )
        await eventually(
            lambda: (
                controller.context is not None and "doomed" not in controller.context.all_topics
            ),
            "the controller to forget the topic",
        )

    run(zk_chroot, tmp_path, scenario)


def test_isr_change_notification_reaches_every_broker(zk_chroot: str, tmp_path: Path) -> None:
    async def scenario(cluster: Cluster) -> None:
        controller = await single_controller_cluster(cluster, [1, 2])
        admin = cluster.admin
        await asyncio.to_thread(admin.create_topic, "events", {0: [1, 2]}, {})
        current = await eventually_zk(
            lambda: admin.get_partition_states([("events", 0)]),
            lambda found: len(found) == 1,
            "state of events-0",
        )
        state = current[("events", 0)]
        shrunk = LeaderIsrAndControllerEpoch(
            LeaderAndIsr(1, state.leader_and_isr.leader_epoch, (1,)), state.controller_epoch
        )
        await asyncio.to_thread(
            admin.update_leader_and_isr_conditional,
            "events",
            0,
            shrunk,
            state.leader_and_isr.zk_version,
        )
        await asyncio.to_thread(admin.propagate_isr_changes, [("events", 0)])

        def metadata_isr(peer: BrokerPeer) -> list[int] | None:
            isr = None
            for request in peer.of_type(cs.UpdateMetadataRequest):
                for t in request.topic_states:
                    for p in t.partition_states:
                        if str(t.topic_name) == "events" and int(p.partition_index) == 0:
                            isr = [int(r) for r in p.isr]
            return isr

        for peer in cluster.peers.values():
            await eventually(
                lambda peer=peer: metadata_isr(peer) == [1],
                f"UpdateMetadata with the shrunk ISR at broker {peer.broker_id}",
            )
        await eventually_zk(
            admin.get_isr_change_notifications, lambda names: names == [], "notification deletion"
        )
        assert controller.context is not None
        assert list(controller.context.partition_leadership[("events", 0)].leader_and_isr.isr) == [
            1
        ]

    run(zk_chroot, tmp_path, scenario)


def test_controlled_shutdown_moves_leadership_away(zk_chroot: str, tmp_path: Path) -> None:
    async def scenario(cluster: Cluster) -> None:
        controller = await single_controller_cluster(cluster, [1, 2, 3])
        admin = cluster.admin
        await asyncio.to_thread(admin.create_topic, "moving", {0: [2, 3], 1: [2]}, {})
        await eventually(
            lambda: (
                controller.context is not None
                and len([tp for tp in controller.context.partition_leadership if tp[0] == "moving"])
                == 2
            ),
            "the controller to create moving's partitions",
        )
        result = await controller.controlled_shutdown(2, -1)
        assert result.error_code == 0
        assert result.remaining == ()  # moving-1 has a single replica: left alone
        state = await cluster.state("moving", 0)
        assert state is not None
        assert (state.leader_and_isr.leader, list(state.leader_and_isr.isr)) == (3, [3])

    run(zk_chroot, tmp_path, scenario)


# --- building blocks ---------------------------------------------------------------------


def test_channel_manager_retries_until_the_broker_listens() -> None:
    """Requests queued for a broker that is not listening yet are delivered, in order,
    once it is; the response callback runs."""

    async def scenario() -> None:
        port = free_port()
        channels = ControllerChannelManager(7, backoff_initial_s=0.01, backoff_max_s=0.05)
        peer = BrokerPeer(1)
        try:
            channels.add_broker(BrokerInfo.plaintext(1, "127.0.0.1", port, None).with_epoch(5))
            answered: list[Any] = []
            requests = [
                cs.UpdateMetadataRequest(
                    controller_id=7,
                    controller_epoch=epoch,
                    broker_epoch=5,
                    topic_states=(),
                    live_brokers=(),
                )
                for epoch in (1, 2, 3)
            ]
            futures = [channels.send(1, r, answered.append) for r in requests]
            await eventually(lambda: channels.queued(1) == 3, "requests to wait")
            await peer.start(port)
            responses = await asyncio.wait_for(asyncio.gather(*futures), WAIT_S)
            assert all(int(r.error_code) == 0 for r in responses)
            assert len(answered) == 3
            assert [r.controller_epoch for r in peer.received] == [1, 2, 3]
            # A removed broker's queued requests are cancelled, not sent.
            await peer.stop()
            channels.remove_broker(1)
            late = channels.send(1, requests[0])
            assert late.cancelled()
        finally:
            await channels.close()
            await peer.stop()

    asyncio.run(scenario())


def test_event_manager_processes_in_order_across_threads_and_preempts() -> None:
    async def scenario() -> None:
        seen: list[ControllerEvent] = []
        preempted: list[ControllerEvent] = []
        gate = asyncio.Event()

        async def process(queued: QueuedEvent) -> None:
            seen.append(queued.event)
            if isinstance(queued.event, BrokerChange):
                await gate.wait()

        manager = ControllerEventManager(process, preempted.append)
        manager.start()
        manager.put(BrokerChange())
        await eventually(lambda: len(seen) == 1, "the first event to start")
        thread = threading.Thread(
            target=lambda: [manager.put_threadsafe(TopicChange()) for _ in range(3)]
        )
        thread.start()
        thread.join()
        await eventually(lambda: manager.size() == 3, "the thread's events")
        shutdown = ControlledShutdown(1, 1)
        manager.put(shutdown)
        manager.clear_and_put(TopicChange())
        assert preempted == [TopicChange(), TopicChange(), TopicChange(), shutdown]
        gate.set()
        await eventually(lambda: len(seen) == 2, "the queued event")
        assert seen == [BrokerChange(), TopicChange()]
        await manager.close()
        assert not manager.running

    asyncio.run(scenario())


def test_events_put_while_or_after_the_event_task_stops_are_preempted() -> None:
    """A ControlledShutdown put behind the shutdown (the controller's broker stopping
    while another broker asks it) or after it is answered at once, never left waiting:
    its broker waited controller.socket.timeout.ms per attempt, and a LocalCluster
    stopping its brokers together killed one past its 60 s stop timeout."""

    async def scenario() -> None:
        preempted: list[ControllerEvent] = []
        gate = asyncio.Event()

        async def process(queued: QueuedEvent) -> None:
            await gate.wait()

        manager = ControllerEventManager(process, preempted.append)
        manager.start()
        manager.put(BrokerChange())
        await eventually(lambda: manager.current_event is not None, "the first event to start")
        closing = asyncio.get_running_loop().create_task(manager.close())
        await eventually(lambda: manager.size() == 1, "the shutdown queued")
        behind = ControlledShutdown(1, 1)
        manager.put(behind)
        assert preempted == []
        gate.set()
        await closing
        assert not manager.running
        assert preempted == [behind]
        after = ControlledShutdown(2, 1)
        manager.put(after)
        assert preempted == [behind, after]
        assert manager.size() == 0

    asyncio.run(scenario())
