"""More clients over SASL_SSL with SCRAM-SHA-512 on a secured 3-broker cluster: aiokafka
(its own SCRAM and TLS code, in Python) and kcat (librdkafka's command-line client).

Each produces keyed records to a replicated 3-partition topic and reads them back (aiokafka
in a consumer group, kcat partition by partition to the end); the records read are the
records written, each once, in order within its partition. Each is refused with a wrong
password, for the reason of the wrong password.

kcat's round trip is an expected failure until replog's SCRAM server accepts the nonce
Debian's librdkafka 2.0.2 sends, as Kafka does (see the marker).
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from clients_util import KCAT, wait_for_leaders
from replog.cluster.launcher import LocalCluster
from replog.security import sasl
from security_util import add_scram_user, make_broker_certs, sasl_config, secure_cluster

USER, PASSWORD = "erin", "erin-secret"
PARTITIONS = 3
COUNT = 60


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    return make_broker_certs(tmp_path_factory.mktemp("client-certs"))


@pytest.fixture(scope="module")
def cluster(zookeeper, certs: Path, tmp_path_factory) -> Iterator[LocalCluster]:
    with secure_cluster(zookeeper.connect, certs, tmp_path_factory.mktemp("security-clients")) as c:
        add_scram_user(c, USER, PASSWORD, (sasl.SCRAM_SHA_512,))
        yield c


def create_topic(cluster: LocalCluster, certs: Path, topic: str) -> None:
    """Over SASL_SSL too, so that the cluster answers this user before the client runs."""
    admin = AdminClient(sasl_config(cluster, certs, sasl.SCRAM_SHA_512, USER, PASSWORD))
    admin.create_topics([NewTopic(topic, PARTITIONS, 3)])[topic].result(timeout=40)
    wait_for_leaders(cluster.bootstrap_servers(), {topic: PARTITIONS})


def written(topic: str) -> list[tuple[int, bytes, bytes]]:
    """(partition, key, value) of the records to write, in the order written."""
    return [
        (i % PARTITIONS, f"{topic}-k{i}".encode(), f"{topic}-v{i}-{'x' * (i % 7)}".encode())
        for i in range(COUNT)
    ]


def assert_read_back(
    sent: list[tuple[int, bytes, bytes]], read: list[tuple[int, int, bytes, bytes]]
) -> None:
    """``read`` (partition, offset, key, value) holds each record once, in its partition's
    order, at offsets from 0."""
    assert len(read) == len(sent), f"read {len(read)} records of {len(sent)}"
    for partition in range(PARTITIONS):
        mine = sorted((o, k, v) for p, o, k, v in read if p == partition)
        expected = [(k, v) for p, k, v in sent if p == partition]
        assert [(k, v) for _, k, v in mine] == expected, f"partition {partition}"
        assert [o for o, _, _ in mine] == list(range(len(expected)))


# -- aiokafka ----------------------------------------------------------------------------------


def aiokafka_settings(cluster: LocalCluster, certs: Path, password: str) -> dict:
    from aiokafka.helpers import create_ssl_context

    return dict(
        bootstrap_servers=cluster.bootstrap_servers(listener="SASL_SSL"),
        security_protocol="SASL_SSL",
        sasl_mechanism=sasl.SCRAM_SHA_512,
        sasl_plain_username=USER,
        sasl_plain_password=password,
        ssl_context=create_ssl_context(cafile=str(certs / "ca.pem")),
    )


async def aiokafka_round_trip(
    settings: dict, topic: str, sent: list[tuple[int, bytes, bytes]]
) -> list[tuple[int, int, bytes, bytes]]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    producer = AIOKafkaProducer(acks="all", **settings)
    await producer.start()
    try:
        for partition, key, value in sent:
            await producer.send_and_wait(topic, value, key=key, partition=partition)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        topic,
        group_id=f"{topic}-group",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **settings,
    )
    await consumer.start()
    read: list[tuple[int, int, bytes, bytes]] = []
    try:

        async def until_all() -> None:
            while len(read) < len(sent):
                batches = await consumer.getmany(timeout_ms=1000)
                for records in batches.values():
                    read.extend((m.partition, m.offset, m.key, m.value) for m in records)

        await asyncio.wait_for(until_all(), 60)
        await consumer.commit()
        # nothing more than what was written
        extra = await consumer.getmany(timeout_ms=500)
        assert not any(extra.values()), extra
    finally:
        await consumer.stop()
    return read


def test_aiokafka_scram_sha_512_over_tls(cluster, certs) -> None:
    topic = "aiokafka-scram"
    create_topic(cluster, certs, topic)
    sent = written(topic)
    read = asyncio.run(
        aiokafka_round_trip(aiokafka_settings(cluster, certs, PASSWORD), topic, sent)
    )
    assert_read_back(sent, read)


def test_aiokafka_wrong_password_is_refused(cluster, certs, caplog) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaConnectionError

    async def start() -> None:
        producer = AIOKafkaProducer(**aiokafka_settings(cluster, certs, "not-" + PASSWORD))
        try:
            await producer.start()
        finally:
            await producer.stop()

    with caplog.at_level(logging.ERROR, logger="aiokafka"):
        with pytest.raises(KafkaConnectionError, match="Unable to bootstrap"):
            asyncio.run(start())
    # every bootstrap server refused the login itself (not a network failure)
    refusals = [r.getMessage() for r in caplog.records if "Unable connect" in r.getMessage()]
    assert len(refusals) == 3, refusals
    assert all("Authentication failed" in m for m in refusals), refusals


# -- kcat --------------------------------------------------------------------------------------


def kcat(cluster: LocalCluster, certs: Path, password: str, *args: str, stdin: bytes = b""):
    options = sasl_config(cluster, certs, sasl.SCRAM_SHA_512, USER, password)
    command = [KCAT, "-b", options.pop("bootstrap.servers")]
    for key, value in options.items():
        command += ["-X", f"{key}={value}"]
    return subprocess.run([*command, *args], input=stdin, capture_output=True, timeout=90)


def test_kcat_scram_sha_512_over_tls(cluster, certs) -> None:
    topic = "kcat-scram"
    create_topic(cluster, certs, topic)
    sent = written(topic)
    for partition in range(PARTITIONS):
        lines = b"".join(k + b":" + v + b"\n" for p, k, v in sent if p == partition)
        done = kcat(
            cluster, certs, PASSWORD, "-P", "-t", topic, "-p", str(partition), "-K", ":",
            "-X", "acks=all", stdin=lines,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr.decode()
    done = kcat(cluster, certs, PASSWORD, "-C", "-t", topic, "-o", "beginning", "-e", "-J")
    assert done.returncode == 0, done.stderr.decode()
    read = [json.loads(line) for line in done.stdout.decode().splitlines() if line.strip()]
    assert_read_back(
        sent,
        [(r["partition"], r["offset"], r["key"].encode(), r["payload"].encode()) for r in read],
    )


def test_kcat_wrong_password_is_refused(cluster, certs) -> None:
    done = kcat(cluster, certs, "not-" + PASSWORD, "-L", "-m", "10")
    assert done.returncode != 0, done.stdout.decode()
    assert b"Authentication failed" in done.stderr, done.stderr.decode()
    assert b" brokers:" not in done.stdout  # no metadata listed
