"""``/controller`` and ``/controller_epoch``: reading who controls, electing this broker
and bumping the epoch in one transaction (Kafka
``registerControllerAndIncrementControllerEpoch``), resigning.

Concurrency: as :class:`~replog.zk.client.KafkaZkClient` (blocking; worker threads).
"""

from __future__ import annotations

from functools import partial

from kazoo.client import TransactionRequest
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from replog.zk import data as zd
from replog.zk.fencing import ControllerEpoch, ControllerMovedError
from replog.zk.znode_access import GET_DATA, ZnodeAccess

__all__ = ["ControllerZnodes"]


class ControllerZnodes(ZnodeAccess):
    """``KafkaZkClient``'s methods on the controller's znodes."""

    def get_controller_id(self) -> int | None:
        try:
            data, _ = self._ops.call(self._zk.get, zd.CONTROLLER_PATH)
        except NoNodeError:
            return None
        return zd.decode_controller(data)

    def get_controller_epoch(self) -> ControllerEpoch | None:
        """``(epoch, zk version)`` of ``/controller_epoch``, or None if it does not exist."""
        try:
            data, stat = self._ops.call(self._zk.get, zd.CONTROLLER_EPOCH_PATH)
        except NoNodeError:
            return None
        return ControllerEpoch(zd.decode_controller_epoch(data), stat.version)

    def get_controller_and_epoch(self) -> tuple[int | None, ControllerEpoch | None]:
        """``/controller``'s broker id and ``/controller_epoch`` in one batched read (one
        round trip: a broker checks both before it obeys a controller's command); None
        for a znode that does not exist."""
        controller, epoch = self._ops.read_many(
            [zd.CONTROLLER_PATH, zd.CONTROLLER_EPOCH_PATH], GET_DATA
        )
        for result in (controller, epoch):
            if isinstance(result, Exception) and not isinstance(result, NoNodeError):
                raise result
        return (
            None if isinstance(controller, Exception) else zd.decode_controller(controller[0]),
            None
            if isinstance(epoch, Exception)
            else ControllerEpoch(zd.decode_controller_epoch(epoch[0]), epoch[1].version),
        )

    def _get_or_create_controller_epoch(self) -> ControllerEpoch:
        current = self.get_controller_epoch()
        if current is not None:
            return current
        try:
            self._ops.call(
                self._zk.create,
                zd.CONTROLLER_EPOCH_PATH,
                zd.encode_controller_epoch(zd.INITIAL_CONTROLLER_EPOCH),
            )
            return ControllerEpoch(
                zd.INITIAL_CONTROLLER_EPOCH, zd.INITIAL_CONTROLLER_EPOCH_ZK_VERSION
            )
        except NodeExistsError:
            current = self.get_controller_epoch()
            if current is None:
                raise ControllerMovedError("/controller_epoch vanished while read") from None
            return current

    def increment_controller_epoch(self, max_attempts: int = 10) -> ControllerEpoch:
        """Bump ``/controller_epoch`` while this session holds ``/controller``.

        One transaction: ``check /controller`` (at the version read, owned by this session)
        and a conditional set of the epoch; a lost race on the epoch is retried. Raises
        :class:`ControllerMovedError` if ``/controller`` is absent or another session's.
        Returns the new epoch and its zk version (needed for the epoch checks of writes).
        """
        for _ in range(max_attempts):
            try:
                data, controller_stat = self._ops.call(self._zk.get, zd.CONTROLLER_PATH)
            except NoNodeError:
                raise ControllerMovedError("no controller is registered") from None
            if controller_stat.ephemeralOwner != self.session_id:
                raise ControllerMovedError(
                    f"/controller is held by broker {zd.decode_controller(data)}, another session"
                )
            epoch, version = self._get_or_create_controller_epoch()
            guard = (zd.CONTROLLER_PATH, controller_stat.version)
            results = self._ops.commit(partial(_bump_epoch, guard, None, epoch + 1, version))
            if not any(isinstance(r, Exception) for r in results):
                return ControllerEpoch(epoch + 1, results[1].version)
            if isinstance(results[0], (BadVersionError, NoNodeError)):
                raise ControllerMovedError("/controller changed while incrementing the epoch")
        raise ControllerMovedError(f"lost {max_attempts} races for /controller_epoch")

    def register_controller_and_increment_epoch(
        self, broker_id: int, timestamp_ms: int, max_attempts: int = 10
    ) -> ControllerEpoch:
        """Kafka's ``registerControllerAndIncrementControllerEpoch``, as one transaction.

        ``create /controller`` (ephemeral) and ``set /controller_epoch`` conditional on the
        version just read. Returns the new ``(epoch, zk version)``. Raises
        :class:`ControllerMovedError` if another broker is controller. If the epoch moved
        but nobody holds ``/controller`` the attempt is repeated.
        """
        data = zd.encode_controller(broker_id, timestamp_ms)
        for _ in range(max_attempts):
            epoch, version = self._get_or_create_controller_epoch()
            results = self._ops.commit(partial(_bump_epoch, None, data, epoch + 1, version))
            if not any(isinstance(r, Exception) for r in results):
                return ControllerEpoch(epoch + 1, results[1].version)
            # NodeExists or BadVersion (or a re-sent commit that had landed): look again.
            try:
                current, stat = self._ops.call(self._zk.get, zd.CONTROLLER_PATH)
            except NoNodeError:
                continue
            if (
                stat.ephemeralOwner == self.session_id
                and zd.decode_controller(current) == broker_id
            ):
                now = self.get_controller_epoch()
                if current == data and now is not None and now.epoch == epoch + 1:
                    return now  # our transaction had landed before a connection loss
                return self.increment_controller_epoch()  # registered earlier by this session
            raise ControllerMovedError(
                f"broker {zd.decode_controller(current)} is controller, not broker {broker_id}"
            )
        raise ControllerMovedError(f"lost {max_attempts} races for /controller_epoch")

    def delete_controller(self, broker_id: int) -> bool:
        """Resign: delete ``/controller`` if this session holds it for ``broker_id``."""
        try:
            data, stat = self._ops.call(self._zk.get, zd.CONTROLLER_PATH)
            if stat.ephemeralOwner != self.session_id or zd.decode_controller(data) != broker_id:
                return False
            self._ops.call(self._zk.delete, zd.CONTROLLER_PATH, stat.version)
        except (NoNodeError, BadVersionError):
            return False
        return True


def _bump_epoch(
    guard: tuple[str, int] | None,
    controller_data: bytes | None,
    new_epoch: int,
    expected_version: int,
    txn: TransactionRequest,
) -> None:
    """Transaction ops: [check guard | create /controller], then set /controller_epoch."""
    if guard is not None:
        txn.check(*guard)
    if controller_data is not None:
        txn.create(zd.CONTROLLER_PATH, controller_data, ephemeral=True)
    txn.set_data(zd.CONTROLLER_EPOCH_PATH, zd.encode_controller_epoch(new_epoch), expected_version)
