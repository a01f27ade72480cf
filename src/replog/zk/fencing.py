"""Fencing a deposed controller: the fence its ZooKeeper writes carry, the error it gets
once fenced, and the epoch rules that brokers and the controller both apply.

Kafka fences a controller two ways. Its ZooKeeper writes are ``multi`` transactions led
by a version check of ``/controller_epoch`` (:class:`ControllerEpoch` is that fence);
and every controller epoch it meets, in a partition state znode or in a request to a
broker, is compared with the one it knows (:func:`is_stale_controller_epoch`). Either
failing means another controller took over: :class:`ControllerMovedError`.

Pure: no ZooKeeper calls, no clock. Lives in ``zk`` because the ZooKeeper client is the
lowest layer that raises :class:`ControllerMovedError`; the controller and the broker's
handlers of controller requests import it from here.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "UNKNOWN_BROKER_EPOCH",
    "ControllerEpoch",
    "ControllerMovedError",
    "check_controller_epoch",
    "is_stale_broker_epoch",
    "is_stale_controller_epoch",
]

UNKNOWN_BROKER_EPOCH = -1
"""A request's broker epoch when the sender does not know it (Kafka
``AbstractControlRequest.UNKNOWN_BROKER_EPOCH``): never stale."""


class ControllerEpoch(NamedTuple):
    """An elected controller's epoch and the znode version of ``/controller_epoch`` that
    holds it. Every controller write to ZooKeeper is conditional on ``zk_version``: a
    write of a controller that another one has replaced fails as a whole."""

    epoch: int
    zk_version: int


class ControllerMovedError(Exception):
    """Another broker is (or became) controller: this one must stop acting as controller.

    Raised when a ZooKeeper write fails its ``/controller_epoch`` check, when the
    election or an epoch bump finds ``/controller`` held by another session, and when a
    decision meets a partition state written by a newer controller epoch.
    """


def is_stale_controller_epoch(controller_epoch: int, current_controller_epoch: int) -> bool:
    """True if ``controller_epoch`` is older than ``current_controller_epoch``.

    A broker refuses a request whose controller epoch is stale against the newest it
    has accepted (Kafka ``STALE_CONTROLLER_EPOCH``); a controller whose own epoch is
    stale against the epoch in a znode has been replaced (Kafka
    ``ControllerMovedException``). Equal epochs are the same controller.
    """
    return controller_epoch < current_controller_epoch


def check_controller_epoch(own_epoch: int, seen_epoch: int, where: object) -> None:
    """Raise :class:`ControllerMovedError` if ``seen_epoch`` (read at ``where``, e.g. a
    partition's state znode) was written by a newer controller than ``own_epoch``."""
    if is_stale_controller_epoch(own_epoch, seen_epoch):
        raise ControllerMovedError(
            f"{where} was written by controller epoch {seen_epoch}, ours is {own_epoch}"
        )


def is_stale_broker_epoch(broker_epoch: int, current_broker_epoch: int) -> bool:
    """True if a request addressed to (or sent by) a broker at ``broker_epoch`` predates
    that broker's current registration (Kafka ``isBrokerEpochStale``, error
    ``STALE_BROKER_EPOCH``). :data:`UNKNOWN_BROKER_EPOCH` is never stale."""
    return broker_epoch != UNKNOWN_BROKER_EPOCH and broker_epoch < current_broker_epoch
