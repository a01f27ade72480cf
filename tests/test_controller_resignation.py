"""A controller whose failover fails, and whose resignation cannot delete ``/controller``
either, must not leave the cluster without a controller.

The failover and the delete fail as they do when ZooKeeper stays out of reach beyond
``zookeeper.connection.timeout.ms`` while the session lives on: the call raises kazoo's
``RetryFailedError`` (injected into this broker's real ``KafkaZkClient`` for the calls
named; the ZooKeeper is real). ``/controller`` is then still this broker's, held by a
live session: no watch fires, and no other broker runs. The broker must give its claim
up once ZooKeeper answers again and run for election afresh (Kafka
``triggerControllerMove``, whose delete waits for the connection).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kazoo.retry import RetryFailedError

from replog.controller import controller_zk
from test_controller_io import Cluster, eventually, run


def _failing(calls: list[str], name: str, original: Callable[..., Any], fail: set[int]) -> Any:
    """``original``, except that its n-th call (1-based) for n in ``fail`` raises."""

    def call(*args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        if calls.count(name) in fail:
            raise RetryFailedError(f"{name}: exceeded retry deadline (injected)")
        return original(*args, **kwargs)

    return call


@pytest.mark.parametrize("retry_read_fails", [False, True], ids=["retry-reads", "retry-fails"])
def test_failed_failover_whose_resignation_cannot_delete_the_controller_znode(
    zk_chroot: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, retry_read_fails: bool
) -> None:
    """``retry-fails``: ZooKeeper is still out of reach when the broker first runs again
    (its first read then fails too), so it must run once more."""
    calls: list[str] = []
    monkeypatch.setattr(
        controller_zk,
        "load_context",
        _failing(calls, "load_context", controller_zk.load_context, {1}),
    )

    async def scenario(cluster: Cluster) -> None:
        await cluster.add_broker(1)
        await cluster.add_broker(2, with_controller=False)
        session = cluster.sessions[1]
        for name, fail in [
            ("delete_controller", {1}),
            # 1: the start-up's look at /controller, 2: the first retry's
            ("get_controller_id", {2} if retry_read_fails else set()),
        ]:
            monkeypatch.setattr(session, name, _failing(calls, name, getattr(session, name), fail))
        controller = cluster.controllers[1]
        await controller.start()
        await eventually(lambda: controller.is_active, "the controller to be elected again")
        # Elected at epoch 1, failed over, could not give /controller up; then gave it
        # up and won the next election, at epoch 2.
        assert [c for c in calls if c != "get_controller_id"] == [
            "load_context",
            "delete_controller",
            "delete_controller",
            "load_context",
        ]
        assert controller.controller_epoch == 2
        assert await asyncio.to_thread(cluster.admin.get_controller_id) == 1
        epoch = await asyncio.to_thread(cluster.admin.get_controller_epoch)
        assert epoch is not None and epoch.epoch == 2

    run(zk_chroot, tmp_path, scenario)
