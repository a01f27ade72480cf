"""What TLS and SASL cost: produce and consume throughput over PLAINTEXT, SSL and SASL_SSL
(SCRAM-SHA-512) on the same broker, and the rate of new authenticated connections; one
run (prints figures).

    .venv/bin/python bench/security.py [--runs 3] [--records 200000] [--size 100]
                                       [--connections 50]
    .venv/bin/python bench/security.py --replication [--runs 3] [--records 200000]

One broker (a 1-broker LocalCluster) serving the three listeners, with a CA and broker
certificate made by ``openssl``; the same confluent-kafka client on each listener,
alternated: one partition, ``acks=1``, ``linger.ms=5``, records of ``--size`` bytes.
Connection setup: ``--connections`` new clients one after the other, each until its
first Metadata answer (TCP, TLS handshake, SASL exchange), per listener. Medians over
``--runs``; ratios are against PLAINTEXT.

``--replication``: what TLS and SASL between brokers cost. Two 3-broker clusters up at
once, one replicating over PLAINTEXT, the other over SASL_SSL (SCRAM-SHA-512, user
``broker``); the same producer (PLAINTEXT listener, ``acks=all``) into a topic with RF 3
and ``min.insync.replicas=2`` on each, alternated; medians and the ratio.
"""

from __future__ import annotations

import argparse
import time
import uuid

from common import consume_all, create_topic, median, produce_burst, say, work_dir

from replog.cluster.certificates import make_ca, make_cert
from replog.security import sasl
from replog.zk.client import KafkaZkClient

USER, PASSWORD = "bench", "bench-secret"
PRODUCER = {"acks": "1", "linger.ms": 5, "compression.type": "none"}


def client_configs(cluster, certs) -> dict[str, dict[str, str]]:
    ca = str(certs / "ca.pem")
    return {
        "PLAINTEXT": {"bootstrap.servers": cluster.bootstrap_servers()},
        "SSL": {
            "bootstrap.servers": cluster.bootstrap_servers(listener="SSL"),
            "security.protocol": "SSL",
            "ssl.ca.location": ca,
        },
        "SASL_SSL": {
            "bootstrap.servers": cluster.bootstrap_servers(listener="SASL_SSL"),
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": sasl.SCRAM_SHA_512,
            "sasl.username": USER,
            "sasl.password": PASSWORD,
            "ssl.ca.location": ca,
        },
    }


def connections_per_second(config: dict[str, str], count: int) -> float:
    from confluent_kafka.admin import AdminClient

    started = time.perf_counter()
    for _ in range(count):
        AdminClient(config).list_topics(timeout=20)
    return count / (time.perf_counter() - started)


def replication_cost(args: argparse.Namespace, out) -> None:
    from replog.cluster.launcher import LocalCluster, free_port
    from replog.cluster.zookeeper import start_zookeeper, stop_zookeeper

    certs = out / "certs"
    make_ca(certs, "ca")
    make_cert(certs, "broker", "ca", "/CN=127.0.0.1", "IP:127.0.0.1")
    login = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="broker" password="{PASSWORD}";'
    )
    secured = {
        "ssl.keystore.location": str(certs / "broker.pem"),
        "ssl.truststore.location": str(certs / "ca.pem"),
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.mechanism.inter.broker.protocol": sasl.SCRAM_SHA_512,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": login,
    }
    clusters = {"PLAINTEXT": LocalCluster(out / "plain"), "SASL_SSL": LocalCluster(out / "secured")}
    producer = {"acks": "all", "linger.ms": 5, "compression.type": "none"}
    times: dict[str, list[float]] = {name: [] for name in clusters}
    zookeeper = None
    try:
        clusters["PLAINTEXT"].up(3, wait_s=120)
        # the brokers' SCRAM user must exist before they start: a ZooKeeper of their own first
        zookeeper = start_zookeeper(out / "secured-zookeeper", free_port())
        zk = KafkaZkClient(zookeeper.connect)
        zk.start()
        credential = sasl.scram_credential(sasl.SCRAM_SHA_512, PASSWORD)
        zk.change_entity_config(
            "users", "broker", {sasl.SCRAM_SHA_512: sasl.format_credential(credential)}, None
        )
        zk.close()
        clusters["SASL_SSL"].up(
            3,
            zookeeper=zookeeper.connect,
            overrides=secured,
            extra_listeners=("SASL_SSL",),
            wait_s=120,
        )
        for run in range(args.runs + 1):  # the first run warms up
            order = list(clusters) if run % 2 == 0 else list(clusters)[::-1]
            for name in order:
                bootstrap = clusters[name].bootstrap_servers()
                topic = f"repl-{uuid.uuid4().hex[:6]}"
                create_topic(bootstrap, topic, 3, 3, {"min.insync.replicas": "2"})
                seconds = produce_burst(bootstrap, topic, args.records, args.size, producer, 3)
                if run:
                    times[name].append(args.records / seconds)
                say(f"run {run} {name} between brokers: {args.records / seconds:,.0f} rec/s")
    finally:
        for cluster in clusters.values():
            cluster.down()
        if zookeeper is not None:
            stop_zookeeper(zookeeper)
    base = median(times["PLAINTEXT"])
    print(f"\nRF 3 acks=all produce, {args.size}-byte records, medians of {args.runs} runs")
    for name, values in times.items():
        print(
            f"  replication over {name:9} {median(values):>9,.0f} rec/s ({median(values) / base:.2f})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--replication", action="store_true", help="TLS and SASL between brokers")
    args = parser.parse_args()
    if args.replication:
        print(
            f"command: .venv/bin/python bench/security.py --replication --runs {args.runs} "
            f"--records {args.records} --size {args.size}"
        )
        with work_dir("security-replication") as out:
            replication_cost(args, out)
        return
    print(
        f"command: .venv/bin/python bench/security.py --runs {args.runs} --records "
        f"{args.records} --size {args.size} --connections {args.connections}"
    )
    with work_dir("security") as out:
        certs = out / "certs"
        make_ca(certs, "ca")
        make_cert(certs, "broker", "ca", "/CN=127.0.0.1", "IP:127.0.0.1")
        overrides = {
            "ssl.keystore.location": str(certs / "broker.pem"),
            "ssl.truststore.location": str(certs / "ca.pem"),
        }
        from replog.cluster.launcher import LocalCluster

        cluster = LocalCluster(out / "cluster")
        try:
            cluster.up(1, overrides=overrides, extra_listeners=("SSL", "SASL_SSL"), wait_s=120)
            zk = KafkaZkClient(cluster.zookeeper_connect)
            zk.start()
            credential = sasl.scram_credential(sasl.SCRAM_SHA_512, PASSWORD)
            zk.change_entity_config(
                "users", USER, {sasl.SCRAM_SHA_512: sasl.format_credential(credential)}, None
            )
            zk.close()
            configs = client_configs(cluster, certs)
            throughput: dict[str, list[tuple[float, float]]] = {name: [] for name in configs}
            setup: dict[str, list[float]] = {name: [] for name in configs}
            names = list(configs)
            for name in names:  # warm-up
                topic = f"warm-{name.lower()}-{uuid.uuid4().hex[:6]}"
                create_topic(cluster.bootstrap_servers(), topic, 1, 1)
                produce_burst(
                    configs[name]["bootstrap.servers"],
                    topic,
                    10_000,
                    args.size,
                    {**configs[name], **PRODUCER},
                )
            for run in range(args.runs):
                order = names if run % 2 == 0 else names[::-1]
                for name in order:
                    config = configs[name]
                    topic = f"bench-{name.lower()}-{uuid.uuid4().hex[:6]}"
                    create_topic(cluster.bootstrap_servers(), topic, 1, 1)
                    produced = produce_burst(
                        config["bootstrap.servers"],
                        topic,
                        args.records,
                        args.size,
                        {**config, **PRODUCER},
                    )
                    consumed = consume_all(
                        config["bootstrap.servers"], topic, args.records, config=config
                    )
                    throughput[name].append((args.records / produced, args.records / consumed))
                    setup[name].append(connections_per_second(config, args.connections))
                    say(
                        f"run {run + 1} {name}: {throughput[name][-1][0]:,.0f} / "
                        f"{throughput[name][-1][1]:,.0f} rec/s, {setup[name][-1]:.1f} conn/s"
                    )
        finally:
            cluster.down()
    base_p = median([t[0] for t in throughput["PLAINTEXT"]])
    base_c = median([t[1] for t in throughput["PLAINTEXT"]])
    base_s = median(setup["PLAINTEXT"])
    print(
        f"\n{args.size}-byte records, medians of {args.runs} alternated runs (ratio to PLAINTEXT)"
    )
    for name in names:
        p = median([t[0] for t in throughput[name]])
        c = median([t[1] for t in throughput[name]])
        s = median(setup[name])
        print(
            f"  {name:10} produce {p:>9,.0f} rec/s ({p / base_p:.2f})  consume {c:>9,.0f} "
            f"rec/s ({c / base_c:.2f})  new connections {s:6.1f}/s ({s / base_s:.2f})"
        )


if __name__ == "__main__":
    main()
