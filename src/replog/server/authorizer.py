"""Kafka's ``AclAuthorizer`` on a broker: every ACL in memory, checked per request.

On with ``authorizer.class.name`` set (Kafka's ``kafka.security.authorizer.AclAuthorizer``
or any non-empty value); off (everything allowed, no cost) when empty, as in Kafka.
The ACLs are loaded from ZooKeeper at start and again whenever a change notification
appears under ``/kafka-acl-changes`` or ``/kafka-acl-extended-changes`` (this broker's
own CreateAcls/DeleteAcls reload at once); notifications older than 15 minutes are then
deleted, as Kafka's brokers do. ``super.users`` (``User:a;User:b``) may do
everything; ``allow.everyone.if.no.acl.found`` decides for resources no ACL names.
A refusal is logged once per (principal, operation, resource), never per request.
Decisions are cached per (principal, host, operation, resource) until the ACLs change.

Concurrency: the ACL list is replaced whole on the event loop; kazoo's watch callbacks
only schedule a reload there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from kazoo.recipe.watchers import ChildrenWatch

from replog.common.clock import now_ms
from replog.security import acl
from replog.security.acl import AclBinding, AclOperation, ResourceType
from replog.zk import acls as zk_acls

if TYPE_CHECKING:
    from replog.config import KafkaConfig
    from replog.server.network import RequestContext
    from replog.zk.client import KafkaZkClient

log = logging.getLogger(__name__)

MAX_LOGGED_DENIALS = 10_000
MAX_CACHED_DECISIONS = 100_000


def peer_host(peer: str) -> str:
    """``127.0.0.1:51234`` -> ``127.0.0.1`` (``[::1]:5`` -> ``::1``)."""
    host = peer.rsplit(":", 1)[0]
    return host.strip("[]")


class Authorizer:
    def __init__(self, zk: KafkaZkClient, super_users: frozenset[str], allow_if_no_acl: bool):
        self.zk = zk
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self._acls: list[AclBinding] = []
        # (principal, host, operation, resource type, name) -> allowed, for the ACLs in
        # force: every request asks again, and a decision is a scan of every ACL. Emptied
        # when the ACLs are replaced, and when it grows past MAX_CACHED_DECISIONS.
        self._decisions: dict[tuple[str, str, int, int, str], bool] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reloading: asyncio.Task[None] | None = None
        self._again = False
        self._denied: set[tuple[str, int, int, str]] = set()

    @property
    def acls(self) -> list[AclBinding]:
        return self._acls

    @acls.setter
    def acls(self, acls: list[AclBinding]) -> None:
        """Replaced whole (never changed in place): the cached decisions go with it."""
        self._acls = acls
        self._decisions = {}

    @classmethod
    def from_config(cls, config: KafkaConfig, zk: KafkaZkClient) -> Authorizer | None:
        if not config.authorizer_class_name:
            return None
        supers = frozenset(u.strip() for u in config.super_users.split(";") if u.strip())
        return cls(zk, supers, config.allow_everyone_if_no_acl_found)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self.reload()
        client = self.zk.client
        for path in (zk_acls.LITERAL_CHANGES, zk_acls.EXTENDED_CHANGES):
            await asyncio.to_thread(client.ensure_path, path)
            ChildrenWatch(client, path, self._on_change)

    def _on_change(self, _children: list[str]) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self.reload()))

    async def reload(self) -> None:
        """Read every ACL again (one reload at a time; a change meanwhile runs another)."""
        if self._reloading is not None and not self._reloading.done():
            self._again = True
            await asyncio.shield(self._reloading)
            return
        self._reloading = asyncio.ensure_future(self._reload())
        await asyncio.shield(self._reloading)

    async def _reload(self) -> None:
        # A change noticed at any await of this task, the purge's included, reads every
        # ACL again: ``reload`` only sets ``_again`` while this task runs (a change seen
        # during the purge was lost before, and with it an ACL until the next change).
        while True:
            self._again = False
            try:
                self.acls = await asyncio.to_thread(zk_acls.load_all, self.zk.client)
            except Exception as exc:  # ZooKeeper away: keep the ACLs we have
                log.warning("could not reload ACLs: %s", exc)
            await self._purge_expired_changes()
            if not self._again:
                break

    async def _purge_expired_changes(self) -> None:
        try:
            purged = await asyncio.to_thread(
                zk_acls.purge_expired_changes, self.zk.client, now_ms()
            )
        except Exception as exc:  # another broker's purge, or ZooKeeper away: next time
            log.debug("could not purge ACL change notifications: %s", exc)
        else:
            if purged:
                log.info("deleted %d expired ACL change notifications", len(purged))

    def allowed(
        self, ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        principal = str(ctx.principal)
        host = peer_host(ctx.peer)
        key = (principal, host, int(operation), int(resource_type), name)
        ok = self._decisions.get(key)
        if ok is not None:
            return ok
        ok = acl.authorize(
            principal,
            host,
            operation,
            resource_type,
            name,
            self._acls,
            super_users=self.super_users,
            allow_if_no_acl=self.allow_if_no_acl,
        )
        if len(self._decisions) >= MAX_CACHED_DECISIONS:
            self._decisions = {}
        self._decisions[key] = ok
        if not ok:
            key = (principal, int(operation), int(resource_type), name)
            if key not in self._denied and len(self._denied) < MAX_LOGGED_DENIALS:
                self._denied.add(key)
                log.info(
                    "principal %s from %s is denied %s on %s %s",
                    principal,
                    peer_host(ctx.peer),
                    operation.name,
                    resource_type.name,
                    name,
                )
        return ok

    def allowed_on_some(
        self, ctx: RequestContext, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Whether ``operation`` is allowed on some resource of the type (KIP-679)."""
        return acl.authorize_by_resource_type(
            str(ctx.principal),
            peer_host(ctx.peer),
            operation,
            resource_type,
            self._acls,
            super_users=self.super_users,
            allow_if_no_acl=self.allow_if_no_acl,
        )

    def filter_allowed(
        self,
        ctx: RequestContext,
        operation: AclOperation,
        resource_type: ResourceType,
        names: Iterable[str],
    ) -> set[str]:
        return {n for n in names if self.allowed(ctx, operation, resource_type, n)}
