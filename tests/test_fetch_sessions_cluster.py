"""Followers replicate through incremental fetch sessions (KIP-227): three broker
processes, a topic of 12 partitions at replication factor 3, confluent-kafka producing
with acks=all.

* Every replica of every partition ends with the leader's log end offset and high
  watermark (the high watermark reaches followers in incremental answers, which name a
  partition only when it changed).
* Each broker's session cache (its Prometheus metrics) holds one session per follower
  broker (``num.replica.fetchers`` is 1) covering every partition it leads, and counts
  incremental fetches; each follower logs the sessions the leaders created.
* After a broker is stopped and started again (its sessions are gone; its followers
  reconnect and start over with a full fetch), records produced meanwhile reach every
  replica, and once it leads again (the preferred leader election, every 5 s here) its
  followers fetch from it in sessions again.
"""

from __future__ import annotations

import urllib.request

from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families

from clients_util import log_lines, make_records, produce_confluent, wait_for_leaders
from cluster_util import create_topic, wait_for
from replog.cluster.launcher import LocalCluster

TOPIC = "sessions-rf3"
PARTITIONS = 12
PREFIX = "kafka_server_fetchsessioncache_"


def scrape(cluster: LocalCluster, broker_id: int) -> dict[tuple[str, frozenset], float]:
    url = cluster.metrics_url(broker_id)
    assert url is not None
    with urllib.request.urlopen(url, timeout=20) as response:
        text = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def replica_offsets(cluster: LocalCluster, broker_id: int) -> dict[int, tuple[float, float]]:
    """``{partition: (log end offset, high watermark)}`` of TOPIC on one broker."""
    samples = scrape(cluster, broker_id)
    out = {}
    for p in range(PARTITIONS):
        labels = frozenset({("topic", TOPIC), ("partition", str(p))})
        out[p] = (
            samples.get(("kafka_log_log_logendoffset", labels)),
            samples.get(("kafka_cluster_partition_highwatermark", labels)),
        )
    return out


def leaders(cluster: LocalCluster) -> dict[int, int]:
    """``{broker: partitions of TOPIC it leads}``."""
    md = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()}).list_topics(
        TOPIC, timeout=20
    )
    counts = dict.fromkeys(cluster.broker_ids, 0)
    for p in md.topics[TOPIC].partitions.values():
        counts[p.leader] += 1
    return counts


def all_replicas_at(cluster: LocalCluster, ends: dict[int, int]) -> bool:
    """Every replica's log end offset and high watermark are the leader's end."""
    want = {p: (float(ends.get(p, 0)), float(ends.get(p, 0))) for p in range(PARTITIONS)}
    try:
        return all(replica_offsets(cluster, b) == want for b in cluster.broker_ids)
    except OSError:  # a broker just started, its metrics endpoint not up yet
        return False


def sessions_in_place(cluster: LocalCluster, *, exact: bool = True) -> bool:
    """Each broker holds one session per follower broker, over all the partitions it
    leads (each followed by the two others). Not ``exact``: at least that (a follower
    restarted leaves its old session behind, until evicted, as in Kafka)."""
    led = leaders(cluster)
    for broker in cluster.broker_ids:
        samples = scrape(cluster, broker)
        sessions = samples.get((PREFIX + "numincrementalfetchsessions", frozenset()))
        cached = samples.get((PREFIX + "numincrementalfetchpartitionscached", frozenset()))
        if led[broker] == 0 or sessions is None or cached is None:
            return False
        if exact and (sessions, cached) != (2, 2 * led[broker]):
            return False
        if not exact and (sessions < 2 or cached < 2 * led[broker]):
            return False
    return True


def incremental_fetches(cluster: LocalCluster, broker: int) -> float:
    return scrape(cluster, broker)[(PREFIX + "incrementalfetches_total", frozenset())]


def test_followers_replicate_through_incremental_fetch_sessions(cluster_factory) -> None:
    cluster: LocalCluster = cluster_factory(
        3,
        overrides={
            "replica.lag.time.max.ms": "10000",
            "leader.imbalance.check.interval.seconds": "5",
        },
        metrics=True,
    )
    bootstrap = cluster.bootstrap_servers()
    create_topic(bootstrap, TOPIC, partitions=PARTITIONS, replication=3)
    wait_for_leaders(bootstrap, {TOPIC: PARTITIONS})
    ends: dict[int, int] = {}

    def produce(prefix: str, n: int) -> None:
        acked = produce_confluent(
            bootstrap, TOPIC, make_records(prefix, n, PARTITIONS, 1_700_000_000_000), acks="all"
        )
        assert len(acked) == n
        for r in acked:
            ends[r.partition] = max(ends.get(r.partition, 0), r.offset + 1)

    produce("a", 600)
    wait_for(lambda: all_replicas_at(cluster, ends), 60, "every replica at the leader's end")
    wait_for(lambda: sessions_in_place(cluster), 60, "two follower sessions on each broker")
    before = {b: incremental_fetches(cluster, b) for b in cluster.broker_ids}
    assert all(v > 0 for v in before.values()), before

    # Records produced now travel in incremental answers only.
    produce("b", 600)
    wait_for(lambda: all_replicas_at(cluster, ends), 60, "every replica at the new end")
    after = {b: incremental_fetches(cluster, b) for b in cluster.broker_ids}
    assert all(after[b] > before[b] for b in cluster.broker_ids), (before, after)
    for broker in cluster.broker_ids:
        created = log_lines(cluster.broker_dir(broker), r"created fetch session \d+ of \d+")
        assert len(created) >= 2, f"broker {broker} logged {created}"

    # A broker restarted has no sessions: its followers start over with full fetches.
    restarted = cluster.broker_ids[0]
    assert cluster.stop_broker(restarted)
    produce("c", 300)
    cluster.start_broker(restarted)
    wait_for(lambda: all_replicas_at(cluster, ends), 90, "every replica after the restart")
    wait_for(lambda: leaders(cluster)[restarted] > 0, 60, f"broker {restarted} leading again")
    wait_for(
        lambda: sessions_in_place(cluster, exact=False), 60, "the sessions back after the restart"
    )
    wait_for(lambda: incremental_fetches(cluster, restarted) > 0, 30, "incremental fetches")
    produce("d", 300)
    wait_for(lambda: all_replicas_at(cluster, ends), 60, "every replica at the last end")
