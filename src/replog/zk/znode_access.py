"""What the families of :class:`~replog.zk.client.KafkaZkClient`'s methods share: the
kazoo client, the batching and retrying ops, and the controller-epoch guard of every
controller write.

``KafkaZkClient`` is made of one class per family of znodes (``controller_znodes``,
``topic_znodes``, ``notification_znodes``), each on this base; ``client.py`` adds the
session's lifecycle, the brokers' registrations and the watches. The threading rules
are ``client.py``'s.
"""

from __future__ import annotations

import logging

from kazoo.client import KazooClient

from replog.zk import data as zd
from replog.zk.ops import MultiRead, ZkOps

__all__ = ["GET_CHILDREN", "GET_DATA", "ZnodeAccess", "epoch_check"]

log = logging.getLogger("replog.zk.client")
GET_DATA, GET_CHILDREN = MultiRead.GET_DATA, MultiRead.GET_CHILDREN


class ZnodeAccess:
    """The state every family of znode methods uses; ``KafkaZkClient`` sets it up.

    Concurrency: as ``KafkaZkClient`` (blocking calls, from worker threads).
    """

    _zk: KazooClient
    _ops: ZkOps
    _set_acl: bool

    @property
    def session_id(self) -> int | None:
        client_id = self._zk.client_id
        return client_id[0] if client_id else None


def epoch_check(expected_controller_epoch_zk_version: int) -> tuple[str, int]:
    """The guard of every controller write: ``/controller_epoch`` still at the version
    this controller's election left it at. Required: there is no unfenced controller
    write (STYLE.md, "Fencing as a type")."""
    if not isinstance(expected_controller_epoch_zk_version, int):
        raise TypeError(
            f"controller writes need the controller epoch's zk version, not "
            f"{expected_controller_epoch_zk_version!r}"
        )
    return (zd.CONTROLLER_EPOCH_PATH, expected_controller_epoch_zk_version)
