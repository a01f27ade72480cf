"""KafkaZkClient against a real ZooKeeper (fixtures.zookeeper), and its JSON codecs."""

from __future__ import annotations

import base64
import json
import queue
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kazoo.client import KazooClient

from replog.zk import data as zd
from replog.zk import notification_data as nd
from replog.zk.client import (
    BrokerAlreadyRegisteredError,
    KafkaZkClient,
    TopicExistsError,
    ZkSessionState,
    ZkWriteError,
)
from replog.zk.data import (
    BrokerInfo,
    EndPoint,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
)
from replog.zk.fencing import (
    UNKNOWN_BROKER_EPOCH,
    ControllerMovedError,
    check_controller_epoch,
    is_stale_broker_epoch,
    is_stale_controller_epoch,
)

WAIT_S = 20  # upper bound when waiting for a callback; never reached when things work

# --- helpers ---------------------------------------------------------------------------


@pytest.fixture
def zk(make_client: Callable[[], KafkaZkClient]) -> KafkaZkClient:
    return make_client()


@pytest.fixture
def raw(zk_chroot: str) -> Iterator[KazooClient]:
    """A plain kazoo client inside the test's chroot, to look at znodes directly."""
    hosts, chroot = zk_chroot.split("/", 1)
    root = KazooClient(hosts=hosts)
    root.start(timeout=10)
    root.ensure_path(f"/{chroot}")
    root.stop()
    root.close()
    client = KazooClient(hosts=zk_chroot)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


def expire_session(client: KafkaZkClient) -> None:
    """Expire ``client``'s session the standard way: open and close a second connection
    with the same session id and password."""
    session_id, password = client.client.client_id
    intruder = KazooClient(hosts=client.connect, client_id=(session_id, password))
    intruder.start(timeout=10)
    intruder.stop()
    intruder.close()


def wait_for(events: queue.Queue[Any], predicate: Callable[[Any], bool]) -> Any:
    """Take events until one satisfies ``predicate``; fail after WAIT_S without one."""
    while True:
        try:
            event = events.get(timeout=WAIT_S)
        except queue.Empty:
            pytest.fail("expected callback did not arrive")
        if predicate(event):
            return event


def state(
    leader: int, isr: tuple[int, ...], leader_epoch: int = 0, zk_version: int = 0
) -> LeaderAndIsr:
    return LeaderAndIsr(leader=leader, leader_epoch=leader_epoch, isr=isr, zk_version=zk_version)


# --- codecs ----------------------------------------------------------------------------

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=20)
broker_ids = st.integers(min_value=0, max_value=2**31 - 1)


@given(
    leader=st.integers(-2, 10_000),
    leader_epoch=st.integers(0, 2**31 - 1),
    isr=st.lists(broker_ids, max_size=8).map(tuple),
    controller_epoch=st.integers(0, 2**31 - 1),
    zk_version=st.integers(0, 2**31 - 1),
)
def test_partition_state_round_trip(
    leader: int, leader_epoch: int, isr: tuple[int, ...], controller_epoch: int, zk_version: int
) -> None:
    value = LeaderIsrAndControllerEpoch(
        LeaderAndIsr(leader, leader_epoch, isr, zk_version), controller_epoch
    )
    assert zd.decode_partition_state(zd.encode_partition_state(value), zk_version) == value


@given(
    broker_id=broker_ids,
    endpoints=st.lists(
        st.builds(
            EndPoint,
            listener_name=st.sampled_from(["PLAINTEXT", "INTERNAL", "SSL"]),
            host=st.sampled_from(["127.0.0.1", "localhost", "broker-1.example", "::1"]),
            port=st.integers(0, 65535),
            security_protocol=st.sampled_from(["PLAINTEXT", "SSL", "SASL_PLAINTEXT"]),
        ),
        min_size=1,
        max_size=3,
        unique_by=lambda e: e.listener_name,
    ).map(tuple),
    rack=st.none() | names,
    timestamp=st.integers(0, 2**62),
)
def test_broker_round_trip(
    broker_id: int, endpoints: tuple[EndPoint, ...], rack: str | None, timestamp: int
) -> None:
    info = BrokerInfo(broker_id, endpoints, rack)
    decoded = zd.decode_broker(broker_id, zd.encode_broker(info, timestamp), epoch=7)
    assert decoded == info
    assert (decoded.epoch, decoded.timestamp_ms) == (7, timestamp)


@given(
    assignment=st.dictionaries(
        st.integers(0, 10_000), st.lists(broker_ids, min_size=1, max_size=5), max_size=30
    ),
    config=st.dictionaries(names, st.text(max_size=20), max_size=5),
    partitions=st.sets(st.tuples(names, st.integers(0, 10_000)), max_size=20),
)
def test_topic_config_and_isr_change_round_trip(
    assignment: dict[int, list[int]], config: dict[str, str], partitions: set[tuple[str, int]]
) -> None:
    assert zd.decode_topic_assignment("t", zd.encode_topic_assignment(assignment)) == assignment
    assert zd.decode_config(zd.encode_config(config)) == config
    assert nd.decode_isr_change(nd.encode_isr_change(partitions)) == partitions


def test_decoders_read_what_kafka_writes() -> None:
    """Samples in the exact shapes Kafka 2.x/3.x write (ZkData.scala)."""
    broker = zd.decode_broker(
        3,
        b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT","REPL":"SSL"},'
        b'"endpoints":["PLAINTEXT://kafka-3:9092","REPL://kafka-3:9093"],"jmx_port":-1,'
        b'"port":9092,"host":"kafka-3","version":5,"timestamp":"1700000000000","rack":"r1"}',
        epoch=99,
    )
    assert (broker.host, broker.port, broker.rack, broker.epoch) == ("kafka-3", 9092, "r1", 99)
    assert broker.listeners["REPL"] == EndPoint("REPL", "kafka-3", 9093, "SSL")
    old = zd.decode_broker(1, b'{"jmx_port":-1,"timestamp":"1","host":"h","version":1,"port":9092}')
    assert (old.host, old.port) == ("h", 9092)
    assert zd.decode_topic_assignment(
        "t",
        b'{"version":2,"partitions":{"1":[2,3],"0":[1,2]},"adding_replicas":{},"removing_replicas":{}}',
    ) == {0: [1, 2], 1: [2, 3]}
    # Kafka's Uuid text: url-safe base64 of the 16 bytes; the zero Uuid means "none".
    assert zd.decode_topic_id(
        b'{"version":3,"topic_id":"AAAAAAAAAAAAAAAAAAAAAQ","partitions":{}}'
    ) == uuid.UUID(int=1)
    assert zd.decode_topic_id(b'{"version":3,"topic_id":"AAAAAAAAAAAAAAAAAAAAAA"}') is None
    assert zd.decode_topic_id(b'{"version":2,"partitions":{"0":[1]}}') is None
    with pytest.raises(zd.ZkDataError):
        zd.decode_topic_id(b'{"version":3,"topic_id":"not a uuid"}')
    lisr = zd.decode_partition_state(
        b'{"controller_epoch":5,"leader":2,"version":1,"leader_epoch":7,"isr":[2,1]}', 3
    )
    assert lisr == LeaderIsrAndControllerEpoch(LeaderAndIsr(2, 7, (2, 1), 3), 5)
    assert zd.decode_controller(b'{"version":1,"brokerid":4,"timestamp":"1700000000000"}') == 4
    assert zd.decode_controller_epoch(b"12") == 12
    with pytest.raises(zd.ZkDataError):
        zd.decode_partition_state(b"not json", 0)


# --- fencing rules -----------------------------------------------------------------------


def test_controller_epoch_rule_fences_older_controllers_only() -> None:
    assert is_stale_controller_epoch(3, 4)
    assert not is_stale_controller_epoch(4, 4)
    assert not is_stale_controller_epoch(5, 4)
    check_controller_epoch(4, 4, "t-0")  # same controller
    check_controller_epoch(4, 3, "t-0")  # written by an older one
    with pytest.raises(ControllerMovedError, match="t-0 was written by controller epoch 5"):
        check_controller_epoch(4, 5, "t-0")


def test_broker_epoch_rule_ignores_unknown_epochs() -> None:
    assert is_stale_broker_epoch(10, 11)
    assert not is_stale_broker_epoch(11, 11)
    assert not is_stale_broker_epoch(12, 11)
    assert not is_stale_broker_epoch(UNKNOWN_BROKER_EPOCH, 11)


# --- connection, chroot, brokers ----------------------------------------------------------


def test_start_creates_chroot_and_kafka_paths(zk_chroot: str, zookeeper: Any) -> None:
    chroot = zk_chroot[len(zookeeper.connect) :]
    root = KazooClient(hosts=zookeeper.connect)
    root.start(timeout=10)
    try:
        assert root.exists(chroot) is None
        with KafkaZkClient(zk_chroot) as client:
            assert client.session_id is not None
            for path in (
                "/brokers/ids",
                "/brokers/topics",
                "/admin/delete_topics",
                "/isr_change_notification",
                "/config/topics",
                "/config/changes",
            ):
                assert root.exists(chroot + path) is not None, path
            assert root.exists("/brokers") is None or chroot == ""  # nothing outside the chroot
    finally:
        root.stop()
        root.close()


def test_broker_registration_is_ephemeral(
    make_client: Callable[[], KafkaZkClient], raw: KazooClient
) -> None:
    first, observer = make_client(), make_client()
    info = BrokerInfo(
        1,
        (EndPoint("PLAINTEXT", "127.0.0.1", 9092), EndPoint("INTERNAL", "127.0.0.1", 9093)),
        rack="r1",
    )
    epoch = first.register_broker(info, timestamp_ms=1234)
    assert epoch == raw.exists("/brokers/ids/1").czxid
    registered = observer.get_all_brokers()
    assert registered == {1: info}
    assert registered[1].epoch == epoch and registered[1].port == 9092
    assert observer.get_broker(1) == info and observer.get_broker(2) is None
    # The JSON is Kafka's: what a Kafka tool would parse.
    body = json.loads(raw.get("/brokers/ids/1")[0])
    assert body["version"] == 5 and body["host"] == "127.0.0.1" and body["port"] == 9092
    assert body["endpoints"] == ["PLAINTEXT://127.0.0.1:9092", "INTERNAL://127.0.0.1:9093"]
    assert body["listener_security_protocol_map"] == {
        "PLAINTEXT": "PLAINTEXT",
        "INTERNAL": "PLAINTEXT",
    }
    assert body["timestamp"] == "1234" and body["rack"] == "r1" and body["jmx_port"] == -1
    # Same session may re-register the same data (a retried create); another may not.
    assert first.register_broker(info, timestamp_ms=1234) == epoch
    with pytest.raises(BrokerAlreadyRegisteredError):
        observer.register_broker(info, timestamp_ms=1234)
    first.close()
    assert observer.get_broker_ids() == set()


def test_registration_whose_rival_goes_between_create_and_read_succeeds(
    make_client: Callable[[], KafkaZkClient],
) -> None:
    """The earlier session's node found by the create, then gone before its owner is read
    (that session expired in between): register again, not NoNodeError (seed 14)."""
    old, new = make_client(), make_client()
    info = BrokerInfo.plaintext(7, "127.0.0.1", 9092)
    old.register_broker(info, timestamp_ms=1)
    real_get = new._zk.get
    reads: list[str] = []

    def get_after_the_old_session_is_gone(path: str, *args: Any, **kwargs: Any) -> Any:
        if not reads:
            old.close()  # its ephemeral node goes with it
        reads.append(path)
        return real_get(path, *args, **kwargs)

    new._zk.get = get_after_the_old_session_is_gone  # type: ignore[method-assign]
    try:
        epoch = new.register_broker(info, timestamp_ms=2)
    finally:
        new._zk.get = real_get  # type: ignore[method-assign]
    assert reads == ["/brokers/ids/7"]
    assert new.get_broker_epoch(7) == epoch


def test_session_expiry_drops_ephemerals_and_signals_new_session(
    make_client: Callable[[], KafkaZkClient],
) -> None:
    client, observer = make_client(), make_client()
    events: queue.Queue[ZkSessionState] = queue.Queue()
    client.add_session_listener(events.put)
    client.register_broker(BrokerInfo.plaintext(5, "127.0.0.1", 9092))
    assert client.register_controller_and_increment_epoch(5, timestamp_ms=1).epoch == 1
    seen: queue.Queue[list[str]] = queue.Queue()
    client.watch_children(zd.BROKER_IDS_PATH, seen.put)
    assert seen.get(timeout=WAIT_S) == ["5"]
    old_session = client.session_id

    expire_session(client)

    wait_for(events, lambda e: e is ZkSessionState.LOST)
    wait_for(events, lambda e: e is ZkSessionState.NEW_SESSION)
    assert client.session_id != old_session
    assert observer.get_broker_ids() == set()
    assert observer.get_controller_id() is None
    # The hook's job, done by the caller: register again on the new session.
    client.register_broker(BrokerInfo.plaintext(5, "127.0.0.1", 9092))
    assert observer.get_broker_ids() == {5}
    # The watch set on the old session was re-armed on the new one.
    observer.register_broker(BrokerInfo.plaintext(6, "127.0.0.1", 9093))
    wait_for(seen, lambda ids: ids == ["5", "6"])
    # Re-running the election on the new session works too.
    assert client.register_controller_and_increment_epoch(5, 2).epoch == 2


# --- controller election ----------------------------------------------------------------


def test_controller_race_has_one_winner_and_epochs_increase(
    make_client: Callable[[], KafkaZkClient], raw: KazooClient
) -> None:
    contenders = [make_client() for _ in range(4)]
    assert contenders[0].get_controller_epoch() is None
    barrier = threading.Barrier(len(contenders))
    outcome: dict[int, Any] = {}

    def contend(broker_id: int, client: KafkaZkClient) -> None:
        barrier.wait()
        try:
            outcome[broker_id] = client.register_controller_and_increment_epoch(
                broker_id, 1000 + broker_id
            )
        except ControllerMovedError as exc:
            outcome[broker_id] = exc

    threads = [threading.Thread(target=contend, args=(i, c)) for i, c in enumerate(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    winners = [b for b, r in outcome.items() if not isinstance(r, Exception)]
    assert len(outcome) == 4 and len(winners) == 1
    winner = winners[0]
    assert outcome[winner].epoch == 1
    assert contenders[1].get_controller_id() == winner
    assert contenders[1].get_controller_epoch() == outcome[winner]
    assert json.loads(raw.get("/controller")[0]) == {
        "version": 1,
        "brokerid": winner,
        "timestamp": str(1000 + winner),
    }
    assert raw.get("/controller_epoch")[0] == b"1"

    # The winner leaves; the next one takes over with a higher epoch.
    contenders[winner].close()
    successor = (winner + 1) % 4
    second = contenders[successor].register_controller_and_increment_epoch(successor, 2000)
    assert second.epoch == 2 and second.zk_version > outcome[winner].zk_version

    # Registered earlier by this session: the combined call just bumps the epoch.
    assert contenders[successor].register_controller_and_increment_epoch(successor, 2001).epoch == 3
    # Another broker takes over; the old controller can neither register nor bump.
    contenders[successor].delete_controller(successor)
    other = contenders[
        (successor + 1) % 4 if (successor + 1) % 4 != winner else (successor + 2) % 4
    ]
    assert other.register_controller_and_increment_epoch(77, 3000).epoch == 4
    with pytest.raises(ControllerMovedError):
        contenders[successor].register_controller_and_increment_epoch(successor, 3001)
    with pytest.raises(ControllerMovedError):
        contenders[successor].increment_controller_epoch()
    assert other.increment_controller_epoch().epoch == 5
    assert other.get_controller_epoch().epoch == 5


# --- topics and partition state -----------------------------------------------------------


def test_create_topic_writes_kafka_znodes(zk: KafkaZkClient, raw: KazooClient) -> None:
    topic_id = zk.create_topic(
        "orders", {0: [1, 2], 1: [2, 3]}, {"retention.ms": "1000", "cleanup.policy": "delete"}
    )
    assert zk.topic_exists("orders") and not zk.topic_exists("nope")
    assert zk.get_all_topics() == {"orders"}
    assert zk.get_topic_assignment("orders") == {0: [1, 2], 1: [2, 3]}
    assert zk.get_topic_assignment("nope") is None
    assert zk.get_topic_config("orders") == {"retention.ms": "1000", "cleanup.policy": "delete"}
    assert zk.get_topic_config("nope") == {}
    assert json.loads(raw.get("/brokers/topics/orders")[0]) == {
        "version": 3,
        "partitions": {"0": [1, 2], "1": [2, 3]},
        "adding_replicas": {},
        "removing_replicas": {},
        "topic_id": base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode(),
    }
    assert zk.get_topic_ids(["orders", "nope"]) == {"orders": topic_id}
    assert json.loads(raw.get("/config/topics/orders")[0]) == {
        "version": 1,
        "config": {"retention.ms": "1000", "cleanup.policy": "delete"},
    }
    with pytest.raises(TopicExistsError):
        zk.create_topic("orders", {0: [9]}, {"retention.ms": "5"})
    assert (
        zk.get_topic_config("orders")["retention.ms"] == "1000"
    )  # the failed create wrote nothing


def test_cluster_id_is_created_once(
    make_client: Callable[[], KafkaZkClient], raw: KazooClient
) -> None:
    first, second = make_client(), make_client()
    cluster_id = first.get_or_create_cluster_id()
    assert len(cluster_id) == 22  # Kafka's url-safe base64 UUID
    assert second.get_or_create_cluster_id("another-id") == cluster_id
    assert json.loads(raw.get("/cluster/id")[0]) == {"version": "1", "id": cluster_id}


class TP(NamedTuple):
    topic: str
    partition: int


def _become_controller(zk: KafkaZkClient, broker_id: int = 1) -> tuple[int, int]:
    epoch, version = zk.register_controller_and_increment_epoch(broker_id, 0)
    return epoch, version


def test_partition_states_conditional_writes(
    make_client: Callable[[], KafkaZkClient], raw: KazooClient
) -> None:
    zk = make_client()
    zk.create_topic("t", {0: [1, 2], 1: [2, 1], 2: [1, 2]}, {})
    epoch, epoch_version = _become_controller(zk)
    initial = {TP("t", p): state(1 + p % 2, (1, 2)) for p in range(3)}

    created = zk.create_partition_states(initial, epoch, epoch_version)
    assert all(r.ok and r.zk_version == 0 for r in created.values())
    assert all(type(key) is TP for key in created)  # the caller's key objects come back
    assert json.loads(raw.get("/brokers/topics/t/partitions/1/state")[0]) == {
        "controller_epoch": epoch,
        "leader": 2,
        "version": 1,
        "leader_epoch": 0,
        "isr": [1, 2],
    }
    again = zk.create_partition_states(initial, epoch, epoch_version)
    assert {r.error for r in again.values()} == {ZkWriteError.NODE_EXISTS}
    no_topic = zk.create_partition_states({("absent", 0): state(1, (1,))}, epoch, epoch_version)
    assert no_topic[("absent", 0)].error is ZkWriteError.NO_NODE

    read = zk.get_partition_states([*initial, ("t", 9)])
    assert set(read) == set(initial)
    assert all(read[k] == LeaderIsrAndControllerEpoch(v, epoch) for k, v in initial.items())

    # One stale version in the batch: only that partition fails, and it is not written.
    shrink = {k: state(v.leader, (v.leader,), 1, zk_version=0) for k, v in initial.items()}
    shrink[("t", 2)] = state(1, (1,), 1, zk_version=5)
    result = zk.update_partition_states(shrink, epoch, epoch_version)
    assert result[("t", 0)].ok and result[("t", 0)].zk_version == 1
    assert result[("t", 1)].ok and result[("t", 1)].zk_version == 1
    assert result[("t", 2)].error is ZkWriteError.BAD_VERSION
    after = zk.get_partition_states(initial)
    assert after[("t", 0)].leader_and_isr == state(1, (1,), 1, zk_version=1)
    assert after[("t", 2)].leader_and_isr == initial[("t", 2)]  # untouched

    # A leader's own conditional ISR change.
    lisr = LeaderIsrAndControllerEpoch(state(1, (1, 2), 1), epoch)
    assert zk.update_leader_and_isr_conditional("t", 0, lisr, expected_version=1) == 2
    assert (
        zk.update_leader_and_isr_conditional(
            "t", 0, LeaderIsrAndControllerEpoch(state(1, (1,), 1), epoch), 1
        )
        is None
    )
    assert zk.get_partition_states([("t", 0)])[("t", 0)].leader_and_isr.isr == (1, 2)


def test_stale_controller_epoch_writes_nothing(
    make_client: Callable[[], KafkaZkClient], raw: KazooClient
) -> None:
    old, new = make_client(), make_client()
    old.create_topic("t", {p: [1] for p in range(5)}, {})
    old.create_topic("u", {0: [1]}, {})
    epoch, epoch_version = _become_controller(old, 1)
    assert all(
        r.ok
        for r in old.create_partition_states(
            {("t", p): state(1, (1,)) for p in range(5)}, epoch, epoch_version
        ).values()
    )

    old.close()  # deposed: another broker is elected and bumps the epoch
    new_epoch, _ = _become_controller(new, 2)
    assert new_epoch == epoch + 1

    stale = {("t", p): state(1, (1,), 1, zk_version=0) for p in range(5)}
    zombie = make_client()  # a client still using the old controller's epoch zk version
    result = zombie.update_partition_states(stale, epoch, epoch_version)
    assert {r.error for r in result.values()} == {ZkWriteError.CONTROLLER_MOVED}
    assert all(raw.get(f"/brokers/topics/t/partitions/{p}/state")[1].version == 0 for p in range(5))
    created = zombie.create_partition_states({("u", 0): state(1, (1,))}, epoch, epoch_version)
    assert created[("u", 0)].error is ZkWriteError.CONTROLLER_MOVED
    assert raw.exists("/brokers/topics/u/partitions") is None  # not even the parents
    with pytest.raises(ControllerMovedError):
        zombie.delete_topic_znodes("t", epoch_version)
    assert zombie.topic_exists("t")


def test_two_thousand_partitions_round_trip(zk: KafkaZkClient) -> None:
    count = 2000
    zk.create_topic("big", {p: [1, 2, 3] for p in range(count)}, {})
    epoch, epoch_version = _become_controller(zk)
    states = {("big", p): state(1 + p % 3, (1, 2, 3)) for p in range(count)}
    created = zk.create_partition_states(states, epoch, epoch_version)
    assert len(created) == count and all(r.ok for r in created.values())
    read = zk.get_partition_states(states)
    assert {k: v.leader_and_isr for k, v in read.items()} == states
    moved = {k: state(v.isr[1], v.isr, 1, zk_version=0) for k, v in states.items()}
    updated = zk.update_partition_states(moved, epoch, epoch_version)
    assert all(r.ok and r.zk_version == 1 for r in updated.values())
    again = zk.get_partition_states(states)
    assert {k: v.leader_and_isr for k, v in again.items()} == {
        k: v.with_zk_version(1) for k, v in moved.items()
    }
    assert zk.get_topic_assignments(["big", "none"]) == {
        "big": {p: [1, 2, 3] for p in range(count)}
    }
    zk.delete_topic_znodes("big", epoch_version)
    assert not zk.topic_exists("big") and zk.get_partition_states(states) == {}


# --- deletion and ISR change notifications ------------------------------------------------


def test_topic_deletion_markers(zk: KafkaZkClient, raw: KazooClient) -> None:
    zk.create_topic("gone", {0: [1], 1: [1]}, {"retention.ms": "1"})
    zk.create_topic("kept", {0: [1]}, {})
    epoch, epoch_version = _become_controller(zk)
    zk.create_partition_states(
        {("gone", 0): state(1, (1,)), ("gone", 1): state(1, (1,))}, epoch, epoch_version
    )
    zk.mark_topic_for_deletion("gone")
    zk.mark_topic_for_deletion("gone")  # idempotent
    assert zk.get_topics_marked_for_deletion() == {"gone"}
    zk.delete_topic_znodes("gone", epoch_version)
    zk.remove_deletion_marker("gone", epoch_version)
    assert zk.get_topics_marked_for_deletion() == set()
    assert zk.get_all_topics() == {"kept"}
    assert (
        raw.exists("/config/topics/gone") is None and raw.exists("/config/topics/kept") is not None
    )
    zk.delete_topic_znodes("gone", epoch_version)  # already gone: no error
    with pytest.raises(TypeError):  # the fence is required: no unguarded controller write
        zk.remove_deletion_marker("kept", None)  # type: ignore[arg-type]
    assert zk.get_topics_marked_for_deletion() == set() and zk.topic_exists("kept")
    zk.create_topic("gone", {0: [2]}, {})  # the name can be reused
    assert zk.get_topic_assignment("gone") == {0: [2]}


def test_isr_change_notifications(zk: KafkaZkClient, raw: KazooClient) -> None:
    first = zk.propagate_isr_changes({("a", 0), ("b", 3)})
    second = zk.propagate_isr_changes([("a", 0), ("c", 1)])
    assert first.startswith("isr_change_") and second > first
    assert zk.get_isr_change_notifications() == [first, second]
    assert json.loads(raw.get(f"/isr_change_notification/{first}")[0]) == {
        "version": 1,
        "partitions": [{"topic": "a", "partition": 0}, {"topic": "b", "partition": 3}],
    }
    assert zk.read_isr_change_notifications([first, second, "isr_change_9999999999"]) == {
        ("a", 0),
        ("b", 3),
        ("c", 1),
    }
    _, epoch_version = _become_controller(zk)
    zk.delete_isr_change_notifications([first, second], epoch_version)
    assert zk.get_isr_change_notifications() == []


def test_log_dir_event_notifications(zk: KafkaZkClient, raw: KazooClient) -> None:
    first = zk.propagate_log_dir_event(2)
    second = zk.propagate_log_dir_event(5)
    assert first.startswith("log_dir_event_") and second > first
    # what Kafka's LogDirEventNotificationSequenceZNode writes, and a future event kind
    assert json.loads(raw.get(f"/log_dir_event_notification/{first}")[0]) == {
        "version": 1,
        "broker": 2,
        "event": 1,
    }
    other = raw.create(
        "/log_dir_event_notification/log_dir_event_",
        b'{"version":1,"broker":7,"event":9}',
        sequence=True,
    ).rsplit("/", 1)[-1]
    names = zk.get_log_dir_event_notifications()
    assert names == [first, second, other]
    assert zk.read_log_dir_event_notifications([*names, "log_dir_event_9999999999"]) == {2, 5}
    _, epoch_version = _become_controller(zk)
    with pytest.raises(ControllerMovedError):  # a deposed controller deletes nothing
        zk.delete_log_dir_event_notifications(names, epoch_version - 1)
    assert zk.get_log_dir_event_notifications() == names
    zk.delete_log_dir_event_notifications(names, epoch_version)
    assert zk.get_log_dir_event_notifications() == []


# --- watches ------------------------------------------------------------------------------


def test_watches_fire_on_changes(make_client: Callable[[], KafkaZkClient]) -> None:
    watcher, broker, controller = make_client(), make_client(), make_client()
    broker_sets: queue.Queue[list[str]] = queue.Queue()
    controllers: queue.Queue[int | None] = queue.Queue()
    handle = watcher.watch_children(zd.BROKER_IDS_PATH, broker_sets.put)
    watcher.watch_controller(controllers.put)
    assert broker_sets.get(timeout=WAIT_S) == []
    assert controllers.get(timeout=WAIT_S) is None

    broker.register_broker(BrokerInfo.plaintext(3, "127.0.0.1", 9092))
    wait_for(broker_sets, lambda ids: ids == ["3"])
    controller.register_controller_and_increment_epoch(8, 0)
    wait_for(controllers, lambda c: c == 8)
    controller.close()  # the ephemeral /controller goes away
    wait_for(controllers, lambda c: c is None)
    broker.close()
    wait_for(broker_sets, lambda ids: ids == [])

    with pytest.raises(Exception, match="no_such"):
        watcher.watch_children("/no_such", broker_sets.put)
    handle.cancel()


def test_watch_data_reports_versions(zk: KafkaZkClient) -> None:
    seen: queue.Queue[tuple[bytes | None, int | None]] = queue.Queue()
    zk.watch_data("/brokers/topics/w", lambda data, version: seen.put((data, version)))
    assert seen.get(timeout=WAIT_S) == (None, None)
    zk.create_topic("w", {0: [1]}, {})
    data, version = wait_for(seen, lambda e: e[0] is not None)
    assert version == 0 and zd.decode_topic_assignment("w", data) == {0: [1]}
