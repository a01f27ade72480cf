"""``KafkaZkClient``: Kafka's ZooKeeper znode layout and formats, over kazoo.

IO only: this module reads and writes znodes and reports what happened; every decision
(who leads, what the ISR is, when to retry) belongs to the caller.

Concurrency rules
-----------------
* Every method except the ``watch_*``/listener registrations blocks on ZooKeeper. Call them
  from a worker thread (``await asyncio.to_thread(zk.get_all_brokers)``), never on the event
  loop. kazoo is thread-safe: several threads may use one client.
* Callbacks (watches, session listeners) run on kazoo's threads, not on the event loop.
  Hand their data over with ``loop.call_soon_threadsafe(queue.put_nowait, Event(...))``
  and return at once. Session listeners run on kazoo's *connection* thread: a blocking
  ZooKeeper call there deadlocks. Watch callbacks run on kazoo's callback thread; the
  first call of ``watch_children``/``watch_data`` happens synchronously on the registering
  thread.
* Batched reads use ZooKeeper's ``multiRead`` (ZooKeeper 3.6+; up to 1,000 reads per
  request), falling back to pipelined ``get_async`` calls on older servers. Batched writes
  are ``multi`` transactions of up to 1,000 ops that start with a ``check`` on
  ``/controller_epoch``'s version, so a deposed controller's writes fail as a whole.

Session expiry
--------------
kazoo reconnects by itself after a session expires, with a *new* session: this client's
ephemeral znodes (``/brokers/ids/<id>``, ``/controller``) are gone and every Kafka watch
must be treated as having missed events (kazoo's recipes re-read and re-arm themselves).
Listeners added with :meth:`KafkaZkClient.add_session_listener` receive
:attr:`ZkSessionState.NEW_SESSION` in that case, instead of ``CONNECTED``. The caller then
re-registers, from its own task/thread: ``register_broker(info)`` again, and the controller
re-runs its election (Kafka's ``KafkaController`` ``Expire``/``RegisterBrokerAndReelect``
events). A ``LOST`` event means the old session is over: stop acting as controller at once.
"""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat
from kazoo.retry import KazooRetry

from replog.common.clock import now_ms
from replog.zk import data as zd
from replog.zk import security as zsec
from replog.zk.controller_znodes import ControllerZnodes
from replog.zk.data import BrokerInfo
from replog.zk.notification_znodes import NotificationZnodes
from replog.zk.ops import (
    SessionTracker,
    WatchHandle,
    ZkOps,
    ZkSessionState,
    ZkWriteError,
    ZkWriteResult,
)
from replog.zk.security import ZkLogin, ZkSecurityError
from replog.zk.topic_znodes import TopicExistsError, TopicZnodes
from replog.zk.znode_access import GET_DATA

__all__ = [
    "BrokerAlreadyRegisteredError",
    "KafkaZkClient",
    "TopicExistsError",
    "WatchHandle",
    "ZkSessionState",
    "ZkWriteError",
    "ZkWriteResult",
]

log = logging.getLogger(__name__)


class BrokerAlreadyRegisteredError(Exception):
    """``/brokers/ids/<id>`` is held by another ZooKeeper session."""


class KafkaZkClient(ControllerZnodes, TopicZnodes, NotificationZnodes):
    """Kafka's ``KafkaZkClient`` for replog. See the module docstring for threading rules.

    Its methods come by family of znodes: the controller's (``controller_znodes``),
    topics and partitions (``topic_znodes``), notifications and dynamic configs
    (``notification_znodes``); this module holds the session, the brokers' znodes and
    the watches.

    ``connect`` is ``host:port[,host:port...][/chroot]``; a missing chroot is created on
    :meth:`start`, as Kafka does.
    """

    def __init__(
        self,
        connect: str,
        session_timeout_ms: int = 18000,
        connection_timeout_ms: int | None = None,
        login: ZkLogin | None = None,
        set_acl: bool = False,
    ) -> None:
        """``login``: SASL to ZooKeeper (``replog.zk.security``); ``set_acl``
        (``zookeeper.set.acl``): Kafka's ACLs on every znode created, which needs a login."""
        if set_acl and login is None:
            raise ZkSecurityError(
                "zookeeper.set.acl is true, but there is no ZooKeeper login (a JAAS file with "
                "a Client section, named by -Djava.security.auth.login.config in KAFKA_OPTS)"
            )
        self._login = login
        self._set_acl = set_acl
        hosts, _, chroot = connect.partition("/")
        self.connect = connect
        self._hosts = hosts
        self._chroot = "/" + chroot.strip("/") if chroot.strip("/") else ""
        self._session_timeout_s = session_timeout_ms / 1000
        self._connection_timeout_s = (connection_timeout_ms or session_timeout_ms) / 1000
        self._zk = self._new_kazoo(connect)
        self._ops = ZkOps(self._zk, self._connection_timeout_s)
        self._sessions = SessionTracker(self._zk)

    def _new_kazoo(self, hosts: str) -> KazooClient:
        return KazooClient(
            hosts=hosts,
            timeout=self._session_timeout_s,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
            sasl_options=None if self._login is None else self._login.sasl_options(),
            default_acl=zsec.default_acls("/", self._set_acl),
        )

    # --- lifecycle -------------------------------------------------------------------

    def start(self, timeout_ms: int | None = None) -> None:
        """Connect (creating the chroot if needed) and ensure Kafka's persistent paths.
        ``timeout_ms``: the wait for a connection (default: the connection timeout)."""
        timeout_s = self._connection_timeout_s if timeout_ms is None else timeout_ms / 1000
        if self._chroot:
            bootstrap = self._new_kazoo(self._hosts)
            try:
                bootstrap.start(timeout=timeout_s)
                bootstrap.ensure_path(self._chroot)
            finally:
                bootstrap.stop()
                bootstrap.close()
        try:
            self._zk.start(timeout=timeout_s)
        except Exception:
            self._zk.stop()
            raise
        for path in zd.PERSISTENT_ZK_PATHS:
            self._ops.call(self._zk.ensure_path, path)

    def close(self) -> None:
        """Close the session: this client's ephemeral znodes disappear at once."""
        self._zk.stop()
        self._zk.close()

    def __enter__(self) -> KafkaZkClient:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def client(self) -> KazooClient:
        """The underlying kazoo client (for paths this class does not cover, and tests)."""
        return self._zk

    def get_or_create_cluster_id(self, proposed: str | None = None) -> str:
        """Kafka's ``getOrCreateClusterId``: read ``/cluster/id``, creating it if absent.

        A new id is ``proposed`` or a random UUID in Kafka's 22-character url-safe base64.
        """
        try:
            return zd.decode_cluster_id(self._ops.call(self._zk.get, zd.CLUSTER_ID_PATH)[0])
        except NoNodeError:
            pass
        if proposed is None:
            proposed = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        try:
            self._ops.call(
                self._zk.create, zd.CLUSTER_ID_PATH, zd.encode_cluster_id(proposed), makepath=True
            )
            return proposed
        except NodeExistsError:
            return zd.decode_cluster_id(self._ops.call(self._zk.get, zd.CLUSTER_ID_PATH)[0])

    def _checked_ephemeral_create(self, path: str, data: bytes) -> ZnodeStat:
        """Create an ephemeral znode; if it exists, succeed only if this session owns it.

        The node may go between the create that found it and the read of its owner (the
        session holding it expired then, as after a kill -9 and a quick restart): create
        again, as Kafka's ``checkedEphemeralCreate`` does. NoNodeError escaping here once
        left a restarted broker unregistered until it was killed (campaign seed 14).
        """
        while True:
            try:
                _, stat = self._ops.call(
                    self._zk.create, path, data, ephemeral=True, include_data=True
                )
                return stat
            except NodeExistsError:
                try:
                    existing, stat = self._ops.call(self._zk.get, path)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == self.session_id and existing == data:
                    return stat
                raise

    # --- brokers ---------------------------------------------------------------------

    def register_broker(self, info: BrokerInfo, timestamp_ms: int | None = None) -> int:
        """Create ephemeral ``/brokers/ids/<id>``; return the broker epoch (its czxid)."""
        timestamp_ms = now_ms() if timestamp_ms is None else timestamp_ms
        try:
            stat = self._checked_ephemeral_create(
                zd.broker_path(info.id), zd.encode_broker(info, timestamp_ms)
            )
        except NodeExistsError as exc:
            raise BrokerAlreadyRegisteredError(
                f"broker id {info.id} is registered by another session"
            ) from exc
        return int(stat.czxid)

    def deregister_broker(self, broker_id: int) -> None:
        """Delete ``/brokers/ids/<id>`` if this session holds it (the controller sees the
        broker leave; a registration after it is a new broker epoch)."""
        path = zd.broker_path(broker_id)
        try:
            _, stat = self._ops.call(self._zk.get, path)
            if stat.ephemeralOwner == self.session_id:
                self._ops.call(self._zk.delete, path, stat.version)
        except NoNodeError:
            return

    def get_broker_ids(self) -> set[int]:
        return {int(child) for child in self._ops.call(self._zk.get_children, zd.BROKER_IDS_PATH)}

    def get_broker(self, broker_id: int) -> BrokerInfo | None:
        try:
            data, stat = self._ops.call(self._zk.get, zd.broker_path(broker_id))
        except NoNodeError:
            return None
        return zd.decode_broker(broker_id, data, epoch=stat.czxid)

    def get_broker_epoch(self, broker_id: int) -> int | None:
        """The broker epoch ``broker_id`` is registered at (the czxid of its
        ``/brokers/ids/<id>``), or None if it is not registered."""
        stat = self._ops.call(self._zk.exists, zd.broker_path(broker_id))
        return None if stat is None else int(stat.czxid)

    def get_all_brokers(self) -> dict[int, BrokerInfo]:
        ids = sorted(self.get_broker_ids())
        results = self._ops.read_many([zd.broker_path(i) for i in ids], GET_DATA)
        return {
            broker_id: zd.decode_broker(broker_id, result[0], epoch=result[1].czxid)
            for broker_id, result in zip(ids, results, strict=True)
            if not isinstance(result, Exception)
        }

    # --- watches and session ---------------------------------------------------------

    def watch_children(self, path: str, callback: Callable[[list[str]], None]) -> WatchHandle:
        """Call ``callback(sorted children)`` now and after every change (see ``ZkOps``)."""
        return self._ops.watch_children(path, callback)

    def watch_data(
        self, path: str, callback: Callable[[bytes | None, int | None], None]
    ) -> WatchHandle:
        """Call ``callback(data, zk_version)`` now and on create/change/delete of ``path``."""
        return self._ops.watch_data(path, callback)

    def watch_controller(self, callback: Callable[[int | None], None]) -> WatchHandle:
        """Call ``callback(controller broker id or None)`` now and on every change of
        ``/controller`` (Kafka's ``ControllerChangeHandler``)."""

        def on_controller(data: bytes | None, _version: int | None) -> None:
            controller = None
            if data:
                try:
                    controller = zd.decode_controller(data)
                except (zd.ZkDataError, KeyError, ValueError):
                    log.warning("unreadable /controller: %r", data)
            callback(controller)

        return self.watch_data(zd.CONTROLLER_PATH, on_controller)

    def add_session_listener(self, callback: Callable[[ZkSessionState], None]) -> None:
        """Call ``callback(state)`` on session changes, on kazoo's connection thread.

        It must return quickly and must not call ZooKeeper (that deadlocks).
        """
        self._sessions.listeners.append(callback)

    def remove_session_listener(self, callback: Callable[[ZkSessionState], None]) -> None:
        self._sessions.listeners.remove(callback)
