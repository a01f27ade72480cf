"""The broker's replicas: role changes from the controller, appends, reads, waits.
Reads for Fetch requests are ``fetch_reader.py``'s (Kafka ``fetchMessages``).

Concurrency: event-loop only. Every role change, append and read runs to its
end without awaiting; only the waits for acks=all and long-poll fetches await,
and they re-check state when they wake.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from kio.schema.errors import ErrorCode

from replog.common.clock import now_ms
from replog.config import KafkaConfig
from replog.protocol.errors import error_code_for
from replog.protocol.records import EndTxnMarker
from replog.replication.core import StopLeading
from replog.replication.delayed_operations import (
    DelayedDeleteRecords,
    DelayedProduce,
    DeleteRecordsResult,
    ProduceResult,
)
from replog.replication.fetch_reader import FetchReader, FetchResult, FetchWait
from replog.replication.fetcher import ReplicaFetcherManager
from replog.replication.hw_checkpoint import HighWatermarkCheckpoints
from replog.replication.isr import IsrChangeProposal
from replog.replication.isr_write import IsrWriter
from replog.replication.machine import (
    Action,
    IsrCommitted,
    PartitionLeadership,
    StartFetching,
    StopFetching,
)
from replog.replication.partition import Partition
from replog.storage.log import AppendInfo
from replog.storage.log_config import LogConfig
from replog.storage.log_manager import LogManager
from replog.storage.producer_state import VerificationGuard
from replog.zk.client import KafkaZkClient

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class ReplicaManager:
    """The broker's partitions: role changes from the controller, appends, reads, and
    the requests that wait (``delayed_operations``). Each ``Partition`` drives its own
    machine and log; this hands a partition's leftover actions to the fetchers and
    the ISR writer.

    Concurrency: event-loop only. Every role change, append and read runs to its end
    without awaiting; the delayed operations and the ZooKeeper ISR writes await, and
    ask their partitions again when they resume.
    """

    def __init__(
        self,
        config: KafkaConfig,
        log_manager: LogManager,
        topic_config: Callable[[str], LogConfig],
        zk: KafkaZkClient,
    ) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.log_manager = log_manager
        self.topic_config = topic_config
        self.partitions: dict[TopicPartition, Partition] = {}
        self.offline_partitions: set[TopicPartition] = set()
        """Partitions whose log dir went offline (Kafka ``HostedPartition.Offline``):
        requests for them get KAFKA_STORAGE_ERROR until the broker restarts."""
        self.on_log_dir_offline: Callable[[Path, list[TopicPartition]], None] | None = None
        """The broker's part of a failed log dir (the ZooKeeper notification, or the halt
        when no log dir is left), after this manager stopped serving its partitions."""
        log_manager.on_log_dir_failure = self.handle_log_dir_failure
        self.fetcher_manager: ReplicaFetcherManager | None = None
        self.on_replica_deleted: Callable[[str], None] | None = None  # drops cached topic config
        self.is_live_broker: Callable[[int], bool] = lambda _broker_id: True
        self.zk = zk
        self.isr_writer = IsrWriter(
            self.broker_id,
            zk,
            config.replica_fetch_backoff_ms,
            is_hosted=lambda part: self.partitions.get((part.topic, part.partition)) is part,
            carry_out=self._carry_out,
            now_ms=now_ms,
        )
        self.hw_checkpoints = HighWatermarkCheckpoints(log_manager)
        self.fetch_reader = FetchReader(
            self.get_partition,
            self._missing,
            lambda broker_id: self.is_live_broker(broker_id),  # set by the broker later
            self._carry_out,
            self.storage_failed,
        )

    @property
    def isr_shrinks(self) -> int:
        """ISR shrinks this broker wrote as leader (the server's metrics read them)."""
        return self.isr_writer.shrinks

    @property
    def isr_expands(self) -> int:
        return self.isr_writer.expands

    def get_partition(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def _missing(
        self,
        topic: str,
        partition: int,
        otherwise: ErrorCode = ErrorCode.unknown_topic_or_partition,
    ) -> ErrorCode:
        """The error for a partition not hosted here: offline ones say so."""
        if self.offline_partitions and (topic, partition) in self.offline_partitions:
            return ErrorCode.kafka_storage_error
        return otherwise

    # -- failed log dirs (KIP-112) --------------------------------------------

    def storage_failed(self, part: Partition, what: str, exc: OSError) -> None:
        """A read or write of ``part``'s log failed for its disk: the whole log dir goes
        offline (Kafka ``LogDirFailureChannel.maybeAddOfflineLogDir``)."""
        self.log_manager.fail_log_dir(part.log_dir, what, exc)

    def handle_log_dir_failure(self, log_dir: Path) -> None:
        """Kafka ``ReplicaManager.handleLogDirFailure``: stop fetching and serving every
        partition in the offline ``log_dir`` (their leaders stop leading, waiting
        requests complete), close their logs, then the broker tells the controller,
        which moves their leaderships and ISRs elsewhere."""
        gone = sorted(tp for tp in self.partitions if self.log_manager.log_dir_of(*tp) == log_dir)
        for tp in gone:
            part = self.partitions.pop(tp)
            if self.fetcher_manager is not None:
                self.fetcher_manager.remove_partition(*tp)
            self._carry_out(part, part.stop())
        offline = sorted({*gone, *self.log_manager.handle_log_dir_failure(log_dir)})
        self.offline_partitions.update(offline)
        log.error(
            "stopped serving %d replicas in the offline log dir %s: %s",
            len(offline),
            log_dir,
            ", ".join(f"{t}-{p}" for t, p in offline[:20]),
        )
        if self.on_log_dir_offline is not None:
            self.on_log_dir_offline(log_dir, offline)

    # -- produce --------------------------------------------------------------

    def append_to_leader(
        self,
        topic: str,
        partition: int,
        records: bytes,
        acks: int,
        now: int,
        *,
        verification_required: bool = False,
        verification_guard: VerificationGuard | None = None,
        from_coordinator: bool = False,
    ) -> ProduceResult:
        """A produce request's records for one partition. ``verification_required``
        (KIP-890, ``transaction.partition.verification.enable``): a transactional batch
        that opens a transaction needs the ``verification_guard`` its verification with
        the transaction coordinator carried (``maybe_start_transaction_verification``)."""
        part = self.partitions.get((topic, partition))
        if part is None:
            return ProduceResult(self._missing(topic, partition))
        return self._append(
            part,
            lambda: part.append_as_leader(
                bytearray(records),
                acks=acks,
                now_ms=now,
                verification_required=verification_required,
                verification_guard=verification_guard,
                from_coordinator=from_coordinator,
            ),
        )

    def maybe_start_transaction_verification(
        self, topic: str, partition: int, producer_id: int
    ) -> tuple[ErrorCode, VerificationGuard | None]:
        """KIP-890: whether the producer's transaction must be verified with its
        coordinator before an append here: (NONE, guard) to verify, (NONE, None) when
        its transaction is open here, or the error the append would get (not led here)."""
        part = self.partitions.get((topic, partition))
        if part is None:
            return self._missing(topic, partition), None
        if not part.is_leader:
            return ErrorCode.not_leader_or_follower, None
        return ErrorCode.none, part.maybe_start_transaction_verification(producer_id)

    def append_txn_marker(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        marker: EndTxnMarker,
        now: int,
    ) -> ProduceResult:
        """A WriteTxnMarkers entry's COMMIT or ABORT for one partition led here; wait for
        it with ``wait_for_acks_all`` (markers are written with acks=all)."""
        part = self.partitions.get((topic, partition))
        if part is None:
            return ProduceResult(self._missing(topic, partition))
        return self._append(
            part,
            lambda: part.append_marker_as_leader(producer_id, producer_epoch, marker, now_ms=now),
        )

    def _append(
        self, part: Partition, append: Callable[[], tuple[ErrorCode, AppendInfo | None]]
    ) -> ProduceResult:
        topic, partition = part.topic, part.partition
        try:
            error, info = append()
        except Exception as exc:
            code = error_code_for(exc)
            if code == ErrorCode.unknown_server_error:
                log.exception("append to %s-%d failed", topic, partition)
            elif code == ErrorCode.kafka_storage_error:
                self.storage_failed(part, f"append to {topic}-{partition}", exc)
            else:
                log.info("append to %s-%d rejected: %s", topic, partition, exc)
            return ProduceResult(code, error_message=str(exc) or None)
        if info is None:
            return ProduceResult(error)
        return ProduceResult(
            ErrorCode.none,
            base_offset=info.first_offset,
            log_append_time=info.log_append_time,
            log_start_offset=part.log_start_offset,
            required_offset=info.last_offset + 1,
            leader_epoch=part.leader_epoch,
        )

    async def wait_for_acks_all(
        self, results: dict[TopicPartition, ProduceResult], timeout_ms: int
    ) -> None:
        """Wait until every ISR member has each appended batch, or the timeout passes
        (``DelayedProduce``, which updates ``results`` in place with REQUEST_TIMED_OUT,
        NOT_LEADER_OR_FOLLOWER or NOT_ENOUGH_REPLICAS_AFTER_APPEND where those apply)."""
        operation = DelayedProduce(self.get_partition, results)
        await operation.wait(operation.partitions(), timeout_ms / 1000)

    # -- DeleteRecords --------------------------------------------------------

    def delete_records(self, topic: str, partition: int, offset: int) -> DeleteRecordsResult:
        """Move a leader's log start offset up (Kafka ``deleteRecordsOnLocalLog``)."""
        part = self.partitions.get((topic, partition))
        if part is None:
            return DeleteRecordsResult(
                self._missing(topic, partition, ErrorCode.not_leader_or_follower)
            )
        try:
            decision = part.delete_records(offset, self.is_live_broker)
        except OSError as exc:
            self.storage_failed(part, f"DeleteRecords on {topic}-{partition}", exc)
            return DeleteRecordsResult(ErrorCode.kafka_storage_error)
        if decision.error is not ErrorCode.none:
            return DeleteRecordsResult(decision.error)
        log.info(
            "%s-%d: DeleteRecords to offset %d (log start %d, low watermark %d)",
            topic,
            partition,
            decision.requested_offset,
            part.log_start_offset,
            decision.low_watermark,
        )
        return DeleteRecordsResult(
            ErrorCode.none,
            low_watermark=decision.low_watermark,
            requested_offset=decision.requested_offset,
            leader_epoch=part.leader_epoch,
        )

    async def wait_for_delete_records(
        self, results: dict[TopicPartition, DeleteRecordsResult], timeout_ms: int
    ) -> None:
        """``DelayedDeleteRecords``: wait until every live replica's log start offset (the
        low watermark) reaches each requested offset, or the timeout passes. Updates
        ``results`` in place."""
        operation = DelayedDeleteRecords(self.get_partition, results, self.is_live_broker)
        await operation.wait(operation.partitions(), timeout_ms / 1000)

    def _carry_out(
        self,
        part: Partition,
        actions: Sequence[Action],
        leader_addresses: dict[int, tuple[str, int]] | None = None,
    ) -> None:
        """What a partition hands back: fetcher changes, ZooKeeper writes, notifications.

        ``leader_addresses`` are a LeaderAndIsr's live leaders, the only source of
        ``StartFetching``."""
        for action in actions:
            if isinstance(action, IsrChangeProposal):
                log.info(
                    "%s-%d: %s ISR %s -> %s",
                    part.topic,
                    part.partition,
                    "expanding" if action.added else "shrinking",
                    list(action.current_isr),
                    list(action.new_isr),
                )
                self.isr_writer.submit(part, action)
            elif isinstance(action, IsrCommitted):
                log.info(
                    "%s-%d: ISR is now %s",
                    part.topic,
                    part.partition,
                    list(action.in_sync_replicas),
                )
                self.isr_writer.committed(part)
            elif isinstance(action, StopLeading):
                log.warning(
                    "%s-%d: %s; no longer acting as leader at epoch %d",
                    part.topic,
                    part.partition,
                    action.reason,
                    action.leader_epoch,
                )
            elif isinstance(action, StartFetching):
                if self.fetcher_manager is not None:
                    self.fetcher_manager.add_partition(
                        part, action.leader_id, (leader_addresses or {}).get(action.leader_id)
                    )
            elif isinstance(action, StopFetching):
                if self.fetcher_manager is not None:
                    self.fetcher_manager.remove_partition(part.topic, part.partition)

    # -- ISR changes and the HW checkpoint (timers) ---------------------------

    def maybe_shrink_isr(self, now: int) -> None:
        for part in list(self.partitions.values()):
            proposal = part.maybe_shrink_isr(now)
            if proposal is not None:
                log.info(
                    "%s-%d: shrinking ISR from %s to %s (not caught up within "
                    "replica.lag.time.max.ms=%d)",
                    part.topic,
                    part.partition,
                    list(proposal.current_isr),
                    list(proposal.new_isr),
                    self.config.replica_lag_time_max_ms,
                )
                if len(proposal.new_isr) < part.min_insync_replicas:
                    # The replicas leaving held the acknowledged records too; from the
                    # write on, only this leader does, and acks=all stops. Made durable
                    # before ZooKeeper says so, an OS crash of the last ISR member cannot
                    # take acknowledged records with it (Kafka leaves them to the page
                    # cache; the fault campaign's crash-leader lost them that way).
                    self.log_manager.flush_and_checkpoint(part.topic, part.partition)
                self.isr_writer.submit(part, proposal)

    async def maybe_propagate_isr_changes(self, now: int) -> None:
        await self.isr_writer.maybe_propagate(now)

    def checkpoint_high_watermarks(self) -> None:
        self.hw_checkpoints.write(self.partitions.values())

    async def checkpoint_high_watermarks_off_loop(self) -> None:
        """The periodic checkpoint: the files written in a worker thread (fsyncs)."""
        await self.hw_checkpoints.write_off_loop(list(self.partitions.values()))

    # -- role changes (driven by the controller) ------------------------------

    def become_leader_or_follower(
        self,
        topic: str,
        partition: int,
        state: PartitionLeadership,
        *,
        live_leaders: dict[int, tuple[str, int]],
        is_new: bool = False,
    ) -> ErrorCode:
        """Apply one partition of a LeaderAndIsr request (Kafka ``becomeLeaderOrFollower``).

        A partition in an offline log dir answers KAFKA_STORAGE_ERROR (the controller then
        takes the replica as offline), and so does one with no log here that is not new
        while some log dir is offline: its log may be on that dir, and an empty log made
        elsewhere would pass for it (Kafka ``getOrCreateLog`` with ``isNew`` false)."""
        if not state.assigns(self.broker_id):
            return ErrorCode.unknown_topic_or_partition  # before creating a log for it
        tp = (topic, partition)
        if self.offline_partitions and tp in self.offline_partitions:
            return ErrorCode.kafka_storage_error
        if (
            tp not in self.partitions
            and self.log_manager.offline_log_dirs
            and not is_new
            and self.log_manager.get_log(topic, partition) is None
        ):
            log.warning(
                "%s-%d: no log here and log dirs %s are offline: KAFKA_STORAGE_ERROR",
                topic,
                partition,
                sorted(str(d) for d in self.log_manager.offline_log_dirs),
            )
            return ErrorCode.kafka_storage_error
        try:
            part = self._get_or_create_partition(topic, partition)
        except OSError as exc:
            log.error("%s-%d: cannot create its log: %s", topic, partition, exc)
            return ErrorCode.kafka_storage_error
        try:
            # may write the leader epoch file
            code, actions = part.make_leader_or_follower(state, now_ms())
            if code is ErrorCode.stale_controller_epoch:
                log.warning(
                    "%s-%d: ignoring LeaderAndIsr at leader epoch %d, current is %d",
                    topic,
                    partition,
                    state.leader_epoch,
                    part.leader_epoch,
                )
            self._carry_out(part, actions, live_leaders)
        except OSError as exc:
            self.storage_failed(
                part, f"becoming {state.leader}'s replica of {topic}-{partition}", exc
            )
            return ErrorCode.kafka_storage_error
        if (
            code is ErrorCode.none
            and state.leader == self.broker_id
            and len(state.isr) < part.min_insync_replicas
        ):
            # Led with an ISR the controller cut below min.insync.replicas (its other
            # members died): this replica may be the last holding acknowledged records.
            self.log_manager.flush_and_checkpoint(topic, partition)
        if actions:
            log.debug(
                "%s-%d: %s at epoch %d (leader %d, ISR %s, LEO %d)",
                topic,
                partition,
                part.role.value,
                state.leader_epoch,
                state.leader,
                list(state.isr),
                part.log_end_offset,
            )
        return code

    def _get_or_create_partition(self, topic: str, partition: int) -> Partition:
        part = self.partitions.get((topic, partition))
        if part is None:
            config = self.topic_config(topic)
            log_ = self.log_manager.get_or_create_log(topic, partition, config, now_ms())
            log_.update_config(config)  # a log loaded at start-up has the broker defaults
            part = Partition(
                topic,
                partition,
                self.broker_id,
                log_,
                high_watermark=self.hw_checkpoints.restored(topic, partition, log_.dir.parent),
                replica_lag_time_max_ms=self.config.replica_lag_time_max_ms,
            )
            self.partitions[(topic, partition)] = part
        return part

    def resign_leaderships(self) -> int:
        """The ZooKeeper session is surely expired: every partition led here stops
        leading (``PartitionMachine.on_session_expired``); how many did."""
        resigned = 0
        for part in list(self.partitions.values()):
            actions = part.on_session_expired()
            if actions:
                resigned += 1
                self._carry_out(part, actions)
        return resigned

    def on_session_renewed(self) -> None:
        """The broker registered anew (a new broker epoch) after its session expired:
        replicas that fenced themselves take the controller's next LeaderAndIsr at their
        epoch (``PartitionMachine.on_session_renewed``)."""
        for part in self.partitions.values():
            part.on_session_renewed()

    def stop_replica(self, topic: str, partition: int, delete: bool) -> None:
        if delete:
            self.offline_partitions.discard((topic, partition))
        part = self.partitions.pop((topic, partition), None)
        if self.fetcher_manager is not None:
            self.fetcher_manager.remove_partition(topic, partition)
        if part is not None:
            self._carry_out(part, part.stop())
        if delete:
            self.log_manager.delete_log(topic, partition)
            if self.on_replica_deleted is not None:
                self.on_replica_deleted(topic)
            log.info("%s-%d: replica stopped and deleted", topic, partition)

    async def shutdown(self) -> None:
        if self.fetcher_manager is not None:
            await self.fetcher_manager.shutdown()
        self.isr_writer.cancel()
        self.checkpoint_high_watermarks()


__all__ = [
    "DeleteRecordsResult",
    "FetchResult",
    "FetchWait",
    "ProduceResult",
    "ReplicaManager",
]
