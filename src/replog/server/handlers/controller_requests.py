"""ControlledShutdown and ElectLeaders: requests that the controller answers.

ControlledShutdown (Kafka ``handleControlledShutdownRequest``): a broker about to stop
asks the controller to move its leaderships away; a broker that is not the controller
answers NOT_CONTROLLER (the sender looks the controller up again and retries).

ElectLeaders (Kafka ``handleElectLeaders`` + ``ReplicaManager.electLeaders``, KIP-460):
any broker takes the request and hands it to its own controller; when that controller
is not active, every partition is NOT_CONTROLLER (admin clients send ElectLeaders to the
controller named by Metadata, so this happens only during a controller move). A null
partition list means every partition of the metadata cache, and then partitions whose
leader is already right (ELECTION_NOT_NEEDED) are left out of the answer, as Kafka
does. Successful elections are answered once this broker's metadata cache shows the
new leaders (Kafka ``DelayedElectLeader``), or REQUEST_TIMED_OUT after the request's
timeout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from replog.controller import decisions
from replog.controller.context import TopicPartition
from replog.protocol.apis import ApiKey, make, nested
from replog.protocol.controller_schemas import controlled_shutdown as csd
from replog.security.acl import AclOperation
from replog.server.handlers.context import NO_THROTTLE, response_class
from replog.server.network import RequestContext

if TYPE_CHECKING:
    from replog.controller.controller import KafkaController
    from replog.server.metadata_cache import MetadataCache

log = logging.getLogger(__name__)

METADATA_POLL_S = 0.01


class ControllerRequests:
    """Hands ControlledShutdown and ElectLeaders to this broker's controller.

    Concurrency: event loop only; the controller's answer comes through its event queue.
    """

    def __init__(
        self,
        controller: Callable[[], KafkaController | None],
        metadata_cache: MetadataCache,
        cluster_allowed: Callable[[RequestContext, AclOperation], bool] = lambda _c, _o: True,
    ) -> None:
        self.controller = controller
        self.metadata_cache = metadata_cache
        # ACLs: may the request's principal do this operation on the cluster?
        self.cluster_allowed = cluster_allowed

    async def handle_controlled_shutdown(self, ctx: RequestContext, request: Any) -> Any:
        version = ctx.api_version
        broker_id = int(request.broker_id)
        broker_epoch = int(getattr(request, "broker_epoch", csd.UNKNOWN_BROKER_EPOCH))
        log.info("controlled shutdown requested by broker %d (epoch %d)", broker_id, broker_epoch)
        controller = self.controller()
        if not self.cluster_allowed(ctx, AclOperation.CLUSTER_ACTION):
            result = decisions.ControlledShutdownResult(
                int(ErrorCode.cluster_authorization_failed), ()
            )
        elif controller is None or not controller.is_active:
            result = decisions.ControlledShutdownResult(int(ErrorCode.not_controller), ())
        else:
            result = await controller.controlled_shutdown(broker_id, broker_epoch)
        remaining_cls = csd.REMAINING_PARTITIONS[version]
        return csd.RESPONSES[version](
            error_code=ErrorCode(result.error_code),
            remaining_partitions=tuple(
                remaining_cls(topic_name=t, partition_index=p) for t, p in result.remaining
            ),
        )

    async def handle_elect_leaders(self, ctx: RequestContext, request: Any) -> Any:
        started = time.monotonic()
        timeout_s = max(_millis(request.timeout), 0) / 1000
        election_type = int(getattr(request, "election_type", decisions.PREFERRED_ELECTION))
        everything = request.topic_partitions is None
        if everything:
            cache = self.metadata_cache
            wanted = frozenset(
                TopicPartition(t, p) for t in cache.topics() for p in cache.partitions[t]
            )
        else:
            wanted = frozenset(
                TopicPartition(str(t.topic), int(p))
                for t in request.topic_partitions
                for p in t.partitions
            )
        error = ErrorCode.none
        outcomes: dict[TopicPartition, decisions.ElectionOutcome]
        if not self.cluster_allowed(ctx, AclOperation.ALTER):  # Kafka: Alter on the cluster
            error = ErrorCode.cluster_authorization_failed
            outcomes = {
                tp: decisions.ElectionOutcome(int(ErrorCode.cluster_authorization_failed))
                for tp in ([] if everything else wanted)
            }
        elif election_type not in (decisions.PREFERRED_ELECTION, decisions.UNCLEAN_ELECTION):
            error = ErrorCode.invalid_request
            outcomes = {}
        else:
            controller = self.controller()
            answer = None
            if controller is not None and controller.is_active:
                answer = await controller.elect_leaders(wanted, election_type)
            if answer is None:
                outcomes = {
                    tp: decisions.ElectionOutcome(int(ErrorCode.not_controller)) for tp in wanted
                }
            else:
                outcomes = await self._wait_for_leaders(answer, started + timeout_s)
        if everything:
            outcomes = {
                tp: o for tp, o in outcomes.items() if o.error_code != ErrorCode.election_not_needed
            }
        return _elect_leaders_response(ctx.api_version, error, outcomes)

    async def _wait_for_leaders(
        self, outcomes: dict[TopicPartition, decisions.ElectionOutcome], deadline: float
    ) -> dict[TopicPartition, decisions.ElectionOutcome]:
        """Kafka ``DelayedElectLeader``: successes wait until the metadata cache names
        their new leader; those still waiting at the deadline are REQUEST_TIMED_OUT."""
        cache = self.metadata_cache

        def waiting() -> list[TopicPartition]:
            return [
                tp
                for tp, o in outcomes.items()
                if o.error_code == 0
                and ((info := cache.partition(tp[0], tp[1])) is None or info.leader != o.leader)
            ]

        pending = waiting()
        while pending and time.monotonic() < deadline:
            await asyncio.sleep(METADATA_POLL_S)
            pending = waiting()
        if not pending:
            return outcomes
        timed_out = decisions.ElectionOutcome(
            int(ErrorCode.request_timed_out), message="Timed out waiting for the new leader"
        )
        return {**outcomes, **{tp: timed_out for tp in pending}}


def _millis(value: Any) -> float:
    seconds = getattr(value, "total_seconds", None)
    return seconds() * 1000 if seconds is not None else float(value)


def _elect_leaders_response(
    version: int, error: ErrorCode, outcomes: dict[TopicPartition, decisions.ElectionOutcome]
) -> Any:
    cls = response_class(ApiKey.ELECT_LEADERS, version)
    topic_cls = nested(cls, "ReplicaElectionResult")
    partition_cls = nested(cls, "PartitionResult")
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), o in sorted(outcomes.items()):
        message = o.message
        if o.error_code != 0 and message is None:
            message = ErrorCode(o.error_code).name.upper()
        by_topic.setdefault(topic, []).append(
            make(
                partition_cls,
                partition_id=partition,
                error_code=ErrorCode(o.error_code),
                error_message=message if o.error_code != 0 else None,
            )
        )
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=error,
        replica_election_results=tuple(
            make(topic_cls, topic=topic, partition_result=tuple(parts))
            for topic, parts in by_topic.items()
        ),
    )
