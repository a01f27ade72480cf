"""A leader cut off from ZooKeeper stops leading once its session is surely gone
(``replog.server.zk_fence``), so producers move to the new leader during the cut.

Three real brokers, each reaching ZooKeeper through a TCP proxy of its own; the test cuts
one (a black hole: no reset, only silence) of a broker that is not the controller and
leads the topic's partition (RF 3, min.insync.replicas 2). It still reaches the other
brokers and the clients. An
acks=all producer runs through a 14 s cut. The controller elects another leader when
the session expires (6 s); broker 2 fences itself about then, so acknowledgements resume
during the cut instead of after it (Kafka's ZooKeeper mode waits for the heal). Every
acknowledged record is read back after the heal, and the cut-off broker is back in the ISR.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from clients_util import consume_confluent
from cluster_util import ZkView, leader_of, wait_for
from replog.cluster.launcher import LocalCluster
from tcp_proxy import TcpProxy

SESSION_S = 6.0
CUT_S = 14.0
TOPIC = "fenced"


@pytest.fixture(scope="module")
def setup(zookeeper, tmp_path_factory) -> Iterator[tuple[LocalCluster, dict[int, TcpProxy]]]:
    chroot = f"/replog-{uuid.uuid4().hex[:8]}"
    proxies = {b: TcpProxy(zookeeper.port).start() for b in range(3)}
    cluster = LocalCluster(tmp_path_factory.mktemp("zk-fence"))
    try:
        cluster.up(
            3,
            zookeeper=f"{zookeeper.connect}{chroot}",
            overrides={"zookeeper.session.timeout.ms": str(int(SESSION_S * 1000))},
            broker_overrides={
                b: {"zookeeper.connect": f"127.0.0.1:{p.port}{chroot}"} for b, p in proxies.items()
            },
        )
        yield cluster, proxies
    finally:
        for proxy in proxies.values():
            proxy.heal()
        cluster.down()
        for proxy in proxies.values():
            proxy.close()


def test_producers_move_to_the_new_leader_during_the_cut(setup) -> None:
    cluster, proxies = setup
    bootstrap = cluster.bootstrap_servers()
    zk = ZkView(cluster)
    try:
        wait_for(lambda: zk.controller()[0] is not None, 30, "a controller")
        controller = zk.controller()[0]
        victim = next(b for b in range(3) if b != controller)
        proxy = proxies[victim]
        others = [b for b in range(3) if b != victim]
        new = NewTopic(
            TOPIC,
            1,
            replica_assignment=[[victim, *others]],
            config={"min.insync.replicas": "2"},
        )
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([new])[TOPIC].result(30)
        wait_for(
            lambda: (s := zk.partition_state(TOPIC, 0)) is not None and len(s["isr"]) == 3,
            30,
            "the partition led by the victim with a full ISR",
        )
        assert leader_of(zk, TOPIC, 0) == victim

        acked: list[tuple[float, int, bytes]] = []
        errors: list[str] = []
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
            }
        )

        def report(err, msg) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                acked.append((time.monotonic(), msg.offset(), msg.value()))

        def produce_for(seconds: float, tag: str) -> None:
            end = time.monotonic() + seconds
            i = 0
            while time.monotonic() < end:
                producer.produce(TOPIC, value=f"{tag}-{i}".encode(), on_delivery=report)
                producer.poll(0.02)
                i += 1

        produce_for(3, "before")
        cut_at = time.monotonic()
        proxy.cut()
        try:
            produce_for(CUT_S, "during")
        finally:
            healed_at = time.monotonic()
            proxy.heal()
        produce_for(3, "after")
        assert producer.flush(120) == 0 and not errors, errors[:5]

        during = sorted(t for t, _, _ in acked if cut_at <= t < healed_at)
        assert during and during[-1] > cut_at + SESSION_S, (
            "no acknowledgement after the session expired and before the heal: "
            "producers stayed with the cut-off leader"
        )
        marks = [cut_at, *during, healed_at]
        longest = max(b - a for a, b in zip(marks, marks[1:], strict=False))
        print(f"longest time without an acknowledgement during the cut: {longest:.2f} s")
        assert longest < SESSION_S + 4, f"acknowledgements stopped for {longest:.1f} s"
        assert leader_of(zk, TOPIC, 0) != victim
        assert "stopped leading" in (cluster.broker_dir(victim) / "broker.log").read_text()

        # Nothing acknowledged is lost; the cut-off broker rejoins the ISR after the heal.
        ends = {0: max(offset for _, offset, _ in acked) + 1}
        read = {(r.offset, r.value) for r in consume_confluent(bootstrap, TOPIC, ends)}
        missing = [(o, v) for _, o, v in acked if (o, v) not in read]
        assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:3]}"
        wait_for(
            lambda: victim in (zk.partition_state(TOPIC, 0) or {}).get("isr", []),
            60,
            "the cut-off broker back in the ISR after the heal",
        )
    finally:
        zk.close()
