"""The cluster console (``replog console``): its view core directly, and the page in a real
headless browser (Debian's chromium driven by Playwright) against a 3-broker cluster: a
broker is killed and the page, without reloading, shows the new leaders, the dead broker
and the under-replicated partitions."""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from clients_util import wait_for_leaders
from replog.cluster.launcher import LocalCluster
from replog.console.view import (
    GroupInfo,
    GroupMember,
    Observation,
    build_snapshot,
)
from replog.server.metadata_cache import PartitionInfo

CHROMIUM = shutil.which("chromium")


def _obs(taken_ms: int, live: dict[int, str], partitions: list[PartitionInfo], **kw):
    return Observation(
        taken_ms=taken_ms,
        brokers=live,
        known_brokers={0, 1, 2},
        controller_id=kw.pop("controller", 0),
        controller_epoch=kw.pop("epoch", 1),
        partitions=partitions,
        **kw,
    )


def _messages(topic: str, broker_counts: dict[int, float]) -> dict[int, dict]:
    name = "kafka_server_brokertopicmetrics_messagesin_total"
    return {b: {(name, (("topic", topic),)): v} for b, v in broker_counts.items()}


def test_view_flags_and_events_between_polls() -> None:
    live = {0: "h:1", 1: "h:2", 2: "h:3"}
    before = build_snapshot(
        _obs(
            1_000,
            live,
            [PartitionInfo("t", 0, 1, 4, (1, 2, 0), (1, 2, 0))],
            metrics=_messages("t", {1: 100.0}),
        ),
        None,
    )
    assert before.events == []
    [p] = before.partitions
    assert not p.under_replicated and not p.offline
    after = build_snapshot(
        _obs(
            3_000,
            {0: "h:1", 2: "h:3"},
            [PartitionInfo("t", 0, 2, 5, (1, 2, 0), (2, 0))],
            controller=2,
            epoch=2,
            metrics=_messages("t", {2: 300.0}),
        ),
        before,
    )
    [p] = after.partitions
    assert p.under_replicated and not p.offline and p.leader == 2
    assert [b.alive for b in after.brokers] == [True, False, True]
    texts = [e.text for e in after.events]
    assert "broker 2 is controller (epoch 2)" in texts
    assert "broker 1 left the cluster" in texts
    assert "t-0: leader 1 -> broker 2 (epoch 5)" in texts
    assert any(t.startswith("t-0: ISR shrank, without [1]") for t in texts)
    # 100 then 300 messages counted in 2 s (by whichever broker led): 100 messages/s
    [topic] = after.topics
    assert topic.messages_in_per_s == pytest.approx(100.0)
    offline = build_snapshot(
        _obs(4_000, {0: "h:1"}, [PartitionInfo("t", 0, -1, 6, (1, 2, 0), (2,))]), after
    )
    assert offline.partitions[0].offline and not offline.partitions[0].under_replicated
    assert offline.as_json()["offline"] == 1
    assert "t-0: leader 2 -> no leader (offline) (epoch 6)" in [e.text for e in offline.events]


def test_group_lag_comes_from_the_coordinators_metrics() -> None:
    lag = "kafka_consumergroup_lag"
    samples = {
        (lag, (("consumergroup", "g"), ("partition", "0"), ("topic", "t"))): 7.0,
        (lag, (("consumergroup", "g"), ("partition", "1"), ("topic", "t"))): 3.0,
        (lag, (("consumergroup", "other"), ("partition", "0"), ("topic", "t"))): 50.0,
    }
    obs = _obs(
        1_000,
        {0: "h:1", 1: "h:2", 2: "h:3"},
        [],
        groups=[GroupInfo("g", "Stable", "consumer", 1, (GroupMember("m-1", "c", "/h"),))],
        metrics={1: samples},
    )
    [group] = build_snapshot(obs, None).groups
    assert group.lag == 10 and group.partition_lag == {"t-0": 7, "t-1": 3}
    assert group.members == [{"member_id": "m-1", "client_id": "c", "host": "/h"}]


@pytest.fixture(scope="module")
def console_cluster(zookeeper, tmp_path_factory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path_factory.mktemp("console"))
    try:
        cluster.up(3, zookeeper=f"{zookeeper.connect}/replog-{uuid.uuid4().hex[:8]}", metrics=True)
        cluster.start_console()
        yield cluster
    finally:
        cluster.down()


def test_bad_paths(console_cluster: LocalCluster) -> None:
    url = console_cluster.console_url()
    assert url is not None
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(url + "admin", timeout=10)
    assert missing.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as post:
        urllib.request.urlopen(urllib.request.Request(url, data=b"x", method="POST"), timeout=10)
    assert post.value.code == 405
    with urllib.request.urlopen(url + "state.json", timeout=10) as ok:
        assert ok.headers["Content-Type"] == "application/json"


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (make test installs it)")
def test_page_follows_a_broker_kill_live(console_cluster: LocalCluster) -> None:
    topic = "console-kill"
    bootstrap = console_cluster.bootstrap_servers()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 3, 3)], operation_timeout=30)[topic].result(timeout=40)
    wait_for_leaders(bootstrap, {topic: 3})
    url = console_cluster.console_url()
    try:
        _watch_a_broker_kill(console_cluster, topic, url)
    finally:
        # (Outside Playwright's sync API, whose event loop asyncio.run cannot share.)
        for broker in console_cluster.broker_ids:
            console_cluster.start_broker(broker)


def _watch_a_broker_kill(console_cluster: LocalCluster, topic: str, url: str | None) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page()
            page.goto(url)
            page.wait_for_function(
                f"""() => [0, 1, 2].every(p => {{
                    const row = document.querySelector(`tr[data-partition="{topic}-${{p}}"]`);
                    return row && row.querySelector('.isr').textContent.split(',').length === 3;
                }})""",
                timeout=30_000,
            )
            victim = int(page.inner_text(f'tr[data-partition="{topic}-0"] .leader').strip())
            page.evaluate("() => { window.notReloaded = true; }")
            console_cluster.kill_broker(victim)
            page.wait_for_function(
                f"""() => {{
                    const row = document.querySelector('tr[data-partition="{topic}-0"]');
                    const broker = document.querySelector('tr[data-broker="{victim}"]');
                    return row && row.querySelector('.leader').textContent !== '{victim}'
                        && row.classList.contains('under')
                        && broker && broker.classList.contains('dead');
                }}""",
                timeout=60_000,
            )
            assert page.evaluate("() => window.notReloaded") is True
            leaders = [
                page.inner_text(f'tr[data-partition="{topic}-{p}"] .leader').strip()
                for p in range(3)
            ]
            assert str(victim) not in leaders
            assert page.inner_text(f'tr[data-broker="{victim}"] .alive').strip() == "no"
            events = page.inner_text("#events")
            assert f"{topic}-0: leader {victim} -> broker" in events
            assert f"broker {victim} left the cluster" in events
        finally:
            browser.close()
