"""Prometheus metrics (``replog.server.metrics``) on real broker processes.

A 3-broker cluster with ``metrics.port`` set on each broker (as ``replog cluster up``
does); metric names and values are checked after known work: records produced, an ISR
shrink and expansion around a SIGSTOP, the active controller count across the cluster,
a consumer group's lag, and bad HTTP requests to the endpoint. The request-stage
arithmetic is checked directly.
"""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from clients_util import make_records, produce_confluent, wait_for_leaders
from cluster_util import wait_for
from fixtures.cluster import INTERNAL_TOPICS
from replog.cluster.launcher import LocalCluster, pid_alive
from replog.protocol.apis import ApiKey
from replog.server.metrics import STAGES, RequestMetrics, kafka_request_name
from replog.server.network import RequestContext

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("metrics"))
    try:
        c.up(
            3,
            zookeeper=f"{zookeeper.connect}/replog-{uuid.uuid4().hex[:8]}",
            overrides={**INTERNAL_TOPICS, "replica.lag.time.max.ms": "2000"},
            metrics=True,
        )
        yield c
    finally:
        c.down()


def scrape(cluster: LocalCluster, broker_id: int) -> Samples:
    url = cluster.metrics_url(broker_id)
    assert url is not None
    with urllib.request.urlopen(url, timeout=20) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def topic_partition_leader(cluster: LocalCluster, topic: str) -> tuple[int, list[int]]:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()})
    md = admin.list_topics(topic, timeout=20).topics[topic].partitions[0]
    return md.leader, list(md.replicas)


def new_topic(cluster: LocalCluster, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()})
    admin.create_topics([NewTopic(name, 1, 3)], operation_timeout=30)[name].result(timeout=40)
    wait_for_leaders(cluster.bootstrap_servers(), {name: 1})


def test_records_in_and_log_offsets(cluster: LocalCluster) -> None:
    topic = "metrics-in"
    new_topic(cluster, topic)
    records = make_records("m", 40, 1, 1_700_000_000_000)
    produce_confluent(cluster.bootstrap_servers(), topic, records, acks="all")
    leader, replicas = topic_partition_leader(cluster, topic)
    on_leader = scrape(cluster, leader)
    assert value(on_leader, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 40
    bytes_in = value(on_leader, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic)
    assert bytes_in is not None and bytes_in > 40 * 10
    # The all-topics sample (topic="") counts at least this topic's messages.
    assert value(on_leader, "kafka_server_brokertopicmetrics_messagesin_total", topic="") >= 40
    by_version = [
        v
        for (name, labels), v in on_leader.items()
        if name == "kafka_network_requestmetrics_requests_total"
        and ("request", "Produce") in labels
    ]
    assert sum(by_version) >= 1
    assert value(on_leader, "kafka_network_requestmetrics_totaltimems_count", request="Produce")
    assert value(
        on_leader, "kafka_network_requestmetrics_totaltimems_count", request="FetchFollower"
    )
    # The event loop's lag is measured (a timer every 20 ms) and exported.
    assert value(on_leader, "kafka_server_eventloop_lagms_count") > 0
    assert value(on_leader, "kafka_server_eventloop_maxlagms") is not None
    # Every replica's log reaches 40; only the leader counts messages in.
    for broker in replicas:
        wait_for(
            lambda b=broker: (
                value(scrape(cluster, b), "kafka_log_log_logendoffset", topic=topic, partition="0")
                == 40
            ),
            30,
            f"broker {broker}'s log end offset of {topic} to reach 40",
        )
        if broker != leader:
            samples = scrape(cluster, broker)
            assert (
                value(samples, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic)
                is None
            )
            assert value(samples, "kafka_log_log_size", topic=topic, partition="0") > 0


def test_isr_shrinks_when_a_follower_stops_and_expands_when_it_resumes(
    cluster: LocalCluster,
) -> None:
    topic = "metrics-isr"
    new_topic(cluster, topic)
    leader, replicas = topic_partition_leader(cluster, topic)
    follower = next(b for b in replicas if b != leader)

    def replica_manager() -> tuple[float, float, float]:
        s = scrape(cluster, leader)
        prefix = "kafka_server_replicamanager_"
        return (
            value(s, prefix + "isrshrinks_total"),
            value(s, prefix + "isrexpands_total"),
            value(s, prefix + "underreplicatedpartitions"),
        )

    shrinks, expands, _ = replica_manager()
    cluster.pause_broker(follower)
    try:
        # A follower as far as the leader's log end stays in sync however long it is
        # silent (Kafka's isCaughtUp): the ISR shrinks once it falls behind new records.
        produce_confluent(
            cluster.bootstrap_servers(), topic, make_records("i", 5, 1, 1_700_000_000_000), acks=1
        )
        wait_for(
            lambda: (now := replica_manager())[0] > shrinks and now[2] >= 1,
            60,
            f"an ISR shrink on broker {leader} after SIGSTOP of broker {follower}",
        )
    finally:
        cluster.resume_broker(follower)
    wait_for(
        lambda: (now := replica_manager())[1] > expands and now[2] == 0,
        60,
        f"the ISR to expand again on broker {leader}",
    )


def test_consumer_group_lag_on_the_coordinator(cluster: LocalCluster) -> None:
    topic, group = "metrics-lag", "metrics-group"
    new_topic(cluster, topic)
    produce_confluent(
        cluster.bootstrap_servers(), topic, make_records("l", 30, 1, 1_700_000_000_000)
    )
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers(),
            "group.id": group,
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 10)], asynchronous=False)
    finally:
        consumer.close()

    def lag() -> float | None:
        for broker in cluster.broker_ids:
            samples = scrape(cluster, broker)
            found = value(
                samples, "kafka_consumergroup_lag", consumergroup=group, topic=topic, partition="0"
            )
            if found is not None:
                committed = value(
                    samples,
                    "kafka_consumergroup_current_offset",
                    consumergroup=group,
                    topic=topic,
                    partition="0",
                )
                assert committed == 10
                return found
        return None

    assert wait_for(lambda: lag() == 20, 30, "the coordinator to report a lag of 20")


def test_consumer_group_lag_of_partitions_led_by_other_brokers(cluster: LocalCluster) -> None:
    """The coordinator reports the lag of every partition its group committed, those led
    by other brokers too (their leaders' high watermarks, read with ListOffsets at most
    every few seconds however often it is scraped)."""
    topic, group = "metrics-lag-remote", "metrics-group-remote"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()})
    brokers = cluster.broker_ids
    placed = NewTopic(topic, len(brokers), replica_assignment=[[b] for b in brokers])  # RF 1
    admin.create_topics([placed], operation_timeout=30)[topic].result(timeout=40)
    count = len(cluster.broker_ids)
    # every broker knows the topic (the coordinator checks a commit's partitions against
    # its own metadata: UNKNOWN_TOPIC_OR_PARTITION, which librdkafka does not retry)
    for broker in brokers:
        wait_for_leaders(cluster.bootstrap_servers([broker]), {topic: count})
    produce_confluent(
        cluster.bootstrap_servers(), topic, make_records("r", 10 * count, count, 1_700_000_000_000)
    )
    committed = {p: 2 * (p + 1) for p in range(count)}
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers(),
            "group.id": group,
            "enable.auto.commit": False,
        }
    )
    try:
        answer = consumer.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in committed.items()],
            asynchronous=False,
        )
    finally:
        consumer.close()
    assert answer is not None and [tp.error for tp in answer] == [None] * count, answer

    def coordinator() -> int | None:
        for broker in cluster.broker_ids:
            if value(
                scrape(cluster, broker),
                "kafka_consumergroup_current_offset",
                consumergroup=group,
                topic=topic,
                partition="0",
            ):
                return broker
        return None

    # a one-element list: broker 0 is falsy, and wait_for waits for a truthy value
    (home,) = wait_for(lambda: [b for b in [coordinator()] if b is not None], 30, "the coordinator")
    expected = {str(p): 10.0 - o for p, o in committed.items()}

    def lags() -> dict[str, float | None]:
        samples = scrape(cluster, home)
        return {
            p: value(
                samples, "kafka_consumergroup_lag", consumergroup=group, topic=topic, partition=p
            )
            for p in expected
        }

    wait_for(lambda: lags() == expected, 30, f"lag of every partition on broker {home}")

    # the leaders elsewhere are asked at most once per refresh, not once per scrape
    others = [b for b in cluster.broker_ids if b != home]

    def list_offsets_requests() -> float:
        total = 0.0
        for broker in others:
            total += sum(
                v
                for (name, labels), v in scrape(cluster, broker).items()
                if name == "kafka_network_requestmetrics_requests_total"
                and ("request", "ListOffsets") in labels
            )
        return total

    before = list_offsets_requests()
    started = time.monotonic()
    for _ in range(20):
        scrape(cluster, home)
    elapsed = time.monotonic() - started
    sent = list_offsets_requests() - before
    # one request per other leader per refresh (5 s), plus the one a refresh in flight
    assert sent <= len(others) * (elapsed // 5 + 2), (sent, elapsed)


def test_bad_requests_to_the_endpoint(cluster: LocalCluster) -> None:
    url = cluster.metrics_url(0)
    assert url is not None
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(url.replace("/metrics", "/admin"), timeout=10)
    assert missing.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as post:
        urllib.request.urlopen(urllib.request.Request(url, data=b"x", method="POST"), timeout=10)
    assert post.value.code == 405
    port = int(url.split(":")[2].split("/")[0])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(b"\x00\xff garbage without a newline" * 500 + b"\r\n\r\n")
        raw.recv(100)  # closed or answered; the broker must not care
    assert value(scrape(cluster, 0), "kafka_controller_kafkacontroller_activecontrollercount") in (
        0,
        1,
    )


def test_one_active_controller_across_the_cluster(cluster: LocalCluster) -> None:
    def active() -> dict[int, float]:
        return {
            b: value(scrape(cluster, b), "kafka_controller_kafkacontroller_activecontrollercount")
            for b in cluster.broker_ids
            if (pid := cluster.broker_pid(b)) is not None and pid_alive(pid)
        }

    counts = wait_for(
        lambda: c if sum((c := active()).values()) == 1 else None, 30, "one active controller"
    )
    [controller] = [b for b, v in counts.items() if v == 1]
    assert controller == cluster.controller_id()
    cluster.kill_broker(controller)
    try:
        wait_for(
            lambda: (c := active()) and controller not in c and sum(c.values()) == 1,
            60,
            "another broker to become the one active controller",
        )
    finally:
        cluster.start_broker(controller)


def test_request_stages_add_up() -> None:
    """The stages split the total: queue + local + remote + response queue = total."""
    metrics = RequestMetrics()
    ctx = RequestContext(
        api_key=int(ApiKey.PRODUCE),
        api_version=9,
        correlation_id=1,
        client_id=None,
        peer="test",
        received_s=10.0,
    )
    ctx.started_s, ctx.handled_s, ctx.remote_s = 10.002, 10.050, 0.040
    metrics.observe(ctx, 10.060)
    sums = {stage: metrics.sum_ms("Produce", stage) for stage in STAGES}
    assert sums["requestqueuetimems"] == pytest.approx(2)
    assert sums["localtimems"] == pytest.approx(8)
    assert sums["remotetimems"] == pytest.approx(40)
    assert sums["responsequeuetimems"] == pytest.approx(10)
    assert metrics.sum_ms("Produce", "totaltimems") == pytest.approx(sum(sums.values()))
    assert kafka_request_name(int(ApiKey.LEADER_AND_ISR)) == "LeaderAndIsr"
    assert kafka_request_name(int(ApiKey.OFFSET_FOR_LEADER_EPOCH)) == "OffsetForLeaderEpoch"
    assert kafka_request_name(9999) == "9999"


def test_request_metrics_count_every_answer_when_scraped() -> None:
    """Answers are counted a batch at a time (``FOLD_AT``): a scrape sees every answer
    so far, batched or not, and ``_created`` is when the first was answered, not when
    it was counted."""
    from replog.server.request_metrics import FOLD_AT

    metrics = RequestMetrics()
    answered = time.monotonic() - 100  # answered 100 s ago, counted only now
    for i in range(FOLD_AT + 5):
        ctx = RequestContext(int(ApiKey.PRODUCE), 9, i, None, "test", received_s=answered)
        ctx.started_s = ctx.handled_s = answered
        metrics.observe(ctx, answered + 0.001)
    samples = {
        (s.name, s.labels.get("request"), s.labels.get("le")): s.value
        for family in text_string_to_metric_families(metrics.exposition())
        for s in family.samples
    }
    total = "kafka_network_requestmetrics_requests_total"
    assert samples[total, "Produce", None] == FOLD_AT + 5
    assert samples["kafka_network_requestmetrics_totaltimems_bucket", "Produce", "1.0"] == (
        FOLD_AT + 5
    )
    assert samples["kafka_network_requestmetrics_totaltimems_bucket", "Produce", "0.5"] == 0
    created = samples["kafka_network_requestmetrics_requests_created", "Produce", None]
    assert abs(created - (time.time() - 100)) < 5
    ctx = RequestContext(int(ApiKey.PRODUCE), 9, 0, None, "test", received_s=answered)
    metrics.observe(ctx, answered)  # a failed handler (never handled): counted only
    assert "} 1030.0" in metrics.exposition()


def test_metrics_port_is_checked(tmp_path: Path) -> None:
    from replog.config import ConfigError, KafkaConfig

    base = {"broker.id": "0", "log.dirs": str(tmp_path), "zookeeper.connect": "127.0.0.1:1"}
    assert KafkaConfig.from_properties(base).metrics_port == -1
    with pytest.raises(ConfigError, match="metrics.port"):
        KafkaConfig.from_properties({**base, "metrics.port": "70000"})
