"""What TLS and SASL cost: produce and consume throughput over PLAINTEXT, SSL and SASL_SSL
(SCRAM-SHA-512) on the same broker, and the rate of new authenticated connections; one
run (prints figures).

    .venv/bin/python bench/security.py [--runs 3] [--records 200000] [--size 100]
                                       [--connections 50]

One broker (a 1-broker LocalCluster) serving the three listeners, with a CA and broker
certificate made by ``openssl``; the same confluent-kafka client on each listener,
alternated: one partition, ``acks=1``, ``linger.ms=5``, records of ``--size`` bytes.
Connection setup: ``--connections`` new clients one after the other, each until its
first Metadata answer (TCP, TLS handshake, SASL exchange), per listener. Medians over
``--runs``; ratios are against PLAINTEXT.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--connections", type=int, default=50)
    args = parser.parse_args()
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
