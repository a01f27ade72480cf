"""``KafkaZkClient.get_controller_and_epoch``, the one read a broker makes before it
obeys a controller's command, against a real ZooKeeper (fixtures.zookeeper)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from replog.zk.client import KafkaZkClient


@pytest.fixture
def clients(zk_chroot: str) -> Iterator[tuple[KafkaZkClient, KafkaZkClient]]:
    made = [KafkaZkClient(zk_chroot, session_timeout_ms=10000) for _ in range(2)]
    for client in made:
        client.start()
    try:
        yield made[0], made[1]
    finally:
        for client in made:
            client.close()


def test_agrees_with_the_single_reads(clients: tuple[KafkaZkClient, KafkaZkClient]) -> None:
    first, second = clients
    assert second.get_controller_and_epoch() == (None, None)
    elected = first.register_controller_and_increment_epoch(4, 1000)
    assert second.get_controller_and_epoch() == (4, elected)
    assert second.get_controller_and_epoch() == (
        second.get_controller_id(),
        second.get_controller_epoch(),
    )
    first.close()  # /controller goes with its session; the epoch stays
    assert second.get_controller_and_epoch() == (None, elected)
    again = second.register_controller_and_increment_epoch(5, 2000)
    assert again.epoch == elected.epoch + 1
    assert second.get_controller_and_epoch() == (5, again)
