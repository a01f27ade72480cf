"""A small world around the transaction coordinator's core for its unit tests: it
carries out the core's effects in memory (the log, the producer ids, the markers)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog.coordinator.transaction.coordinator import TransactionCoordinator
from replog.coordinator.transaction.effects import (
    Answer,
    AppendTombstones,
    AppendTxnState,
    Outcome,
    SendTxnMarkers,
)
from replog.coordinator.transaction.metadata import TransactionMetadata
from replog.coordinator.transaction.transaction_topic import TransactionConfig

NONE = ErrorCode.none
TIMEOUT = 60_000


class World:
    def __init__(self, partitions: int = 1, coordinator_epoch: int = 1, **config: int) -> None:
        settings = {"transaction_max_timeout_ms": 120_000, **config}
        self.config = TransactionConfig(transaction_log_num_partitions=partitions, **settings)
        self.coordinator = TransactionCoordinator(self.config, offsets_topic_partitions=50)
        self.epoch = coordinator_epoch
        for p in range(partitions):
            self.coordinator.on_election(p, coordinator_epoch)
            assert self.coordinator.complete_loading(p, coordinator_epoch, [], 0) == Outcome()
        self.next_producer_id = 1000
        self.now = 10_000
        # (partition, key, value) of every record appended, in order
        self.log: list[tuple[int, bytes, bytes | None]] = []

    # -- carrying out effects ---------------------------------------------------------------

    def append(self, outcome: Outcome, error: ErrorCode = NONE) -> Outcome:
        """Carry out ``outcome``'s one append with ``error``; what the core says next."""
        (effect,) = outcome.appends
        assert isinstance(effect, AppendTxnState)
        assert self.coordinator.can_append(effect)
        if error is NONE:
            self.log.append((effect.partition, effect.key, effect.value))
        return self.coordinator.append_completed(effect, error, self.now)

    def tombstones(self, outcome: Outcome, error: ErrorCode = NONE) -> list[str]:
        removed = []
        for effect in outcome.appends:
            assert isinstance(effect, AppendTombstones)
            if error is NONE:
                self.log.extend((effect.partition, key, None) for key in effect.keys)
            removed += self.coordinator.tombstones_appended(effect, error)
        return removed

    def settle(self, outcome: Outcome) -> Answer | None:
        """Carry out every effect successfully, markers included, until nothing is left;
        the first answer given."""
        answer = outcome.answer
        work = [outcome]
        while work:
            current = work.pop()
            for effect in current.appends:
                assert isinstance(effect, AppendTxnState)
                out = self.append(Outcome(appends=(effect,)))
                answer = answer or out.answer
                work.append(Outcome(None, out.appends, out.markers))
            for marker in current.markers:
                work.append(self.write_markers(marker))
        return answer

    def write_markers(self, marker: SendTxnMarkers, errors: dict | None = None) -> Outcome:
        result = {tp: NONE for tp in marker.partitions}
        result.update(errors or {})
        return self.coordinator.markers_written(marker, result)

    # -- requests -------------------------------------------------------------------------

    def init(
        self,
        tid: str,
        producer_id: int = -1,
        producer_epoch: int = -1,
        timeout_ms: int = TIMEOUT,
    ) -> Outcome:
        """InitProducerId, allocating a producer id when asked, up to its append."""
        out = self.coordinator.handle_init_producer_id(
            tid, timeout_ms, producer_id, producer_epoch, self.now
        )
        if out.needs_producer_id:
            self.next_producer_id += 1
            out = self.coordinator.handle_init_producer_id(
                tid, timeout_ms, producer_id, producer_epoch, self.now, self.next_producer_id
            )
        return out

    def init_ok(self, tid: str, producer_id: int = -1, producer_epoch: int = -1) -> Answer:
        answer = self.settle(self.init(tid, producer_id, producer_epoch))
        assert answer is not None and answer.error is NONE, answer
        return answer

    def add(self, tid: str, answer: Answer, *partitions: tuple[str, int]) -> Outcome:
        return self.coordinator.handle_add_partitions_to_txn(
            tid, answer.producer_id, answer.producer_epoch, partitions, self.now
        )

    def add_ok(self, tid: str, answer: Answer, *partitions: tuple[str, int]) -> None:
        got = self.settle(self.add(tid, answer, *partitions))
        assert got is not None and got.error is NONE, got

    def end(self, tid: str, answer: Answer, committed: bool) -> Outcome:
        return self.coordinator.handle_end_txn(
            tid, answer.producer_id, answer.producer_epoch, committed, self.now
        )

    def metadata(self, tid: str) -> TransactionMetadata:
        found = self.coordinator.state.lookup(tid)
        assert found.metadata is not None, found
        return found.metadata
