"""Internal topics created on first use (Kafka ``AutoTopicCreationManager`` for
``__consumer_offsets`` and ``__transaction_state``): the first FindCoordinator that needs
one creates it, with the partition count and configs its coordinator asks for and a
replication factor no higher than the live brokers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from replog.server.admin import TopicSpec
from replog.server.handlers.context import BrokerServices

log = logging.getLogger(__name__)


class InternalTopic:
    """Creates the topic ``name`` once. ``shape()`` gives its partitions, wanted
    replication factor and configs when it is created.

    Concurrency: event loop; concurrent callers share one creation task.
    """

    def __init__(
        self,
        services: BrokerServices,
        name: str,
        shape: Callable[[], tuple[int, int, dict[str, str]]],
    ) -> None:
        self.services = services
        self.name = name
        self._shape = shape
        self._creating: asyncio.Task[None] | None = None

    def exists(self) -> bool:
        return self.services.metadata_cache.has_topic(self.name)

    def ensure(self) -> None:
        if self.exists() or (self._creating is not None and not self._creating.done()):
            return
        self._creating = asyncio.get_running_loop().create_task(self._create())

    async def _create(self) -> None:
        partitions, wanted_replication, configs = self._shape()
        live = len(self.services.metadata_cache.brokers) or 1
        replication = min(wanted_replication, live)
        spec = TopicSpec(self.name, partitions, replication, configs=configs)
        try:
            [outcome] = await self.services.admin.create_topics([spec], 0, False)
        except Exception:
            log.exception("creating %s failed", self.name)
            return
        if outcome.error in (ErrorCode.none, ErrorCode.topic_already_exists):
            log.info(
                "created %s (%d partitions, replication factor %d)",
                self.name,
                partitions,
                replication,
            )
        else:
            log.warning("creating %s failed: %s %s", self.name, outcome.error, outcome.message)
