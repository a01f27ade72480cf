"""The transactional workload's read_committed readers (``chaos.txn_workload`` runs them).

- ``TxnReading``: a read_committed reader of one topic from offset 0 while the faults run,
  recording every record and each end of partition it reaches; a new session after an
  error it cannot carry on from.
- ``final_read``: after the heal, a read_committed read of every partition of a topic to
  its high watermark (which the last stable offset must reach once every transaction has
  ended).

Concurrency: each reader owns its thread and its consumer; it only appends to the shared
``History``.
"""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from chaos.history import History
from chaos.txn_checker import FINAL
from chaos.workload import CLIENT_LOGGER

# every read_committed consumer of the workload: these readers and the flow's members
CONSUMER_CONFIG = {
    "isolation.level": "read_committed",
    "enable.auto.commit": False,
    "socket.timeout.ms": 5000,
    "topic.metadata.refresh.interval.ms": 1000,
}


def _reader(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "error",
            "enable.partition.eof": True,
            "logger": CLIENT_LOGGER,
            **CONSUMER_CONFIG,
        }
    )


class TxnReading:
    """A read_committed reader of every partition of ``topic`` from offset 0 until ``stop``."""

    def __init__(
        self, history: History, bootstrap: str, topic: str, partitions: int, name: str
    ) -> None:
        self.history = history
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.name = name
        self.read = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"chaos-{name}", daemon=True)

    def _run(self) -> None:
        session = 0
        while not self._stop.is_set():
            session += 1
            try:
                self._session(session)
            except KafkaException as exc:
                self.history.append("info", what=f"{self.name} restarts", error=str(exc))
                self._stop.wait(0.5)

    def _session(self, session: int) -> None:
        history, topic, name = self.history, self.topic, self.name
        consumer = _reader(self.bootstrap, f"chaos-{name}")
        nexts = {p: 0 for p in range(self.partitions)}
        ended: dict[int, int] = {}
        try:
            history.append(
                "txn-session",
                reader=name,
                session=session,
                topic=topic,
                starts={str(p): 0 for p in nexts},
            )
            consumer.assign([TopicPartition(topic, p, 0) for p in nexts])
            while not self._stop.is_set():
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                err = msg.error()
                p = msg.partition()
                if err is not None and err.code() == KafkaError._PARTITION_EOF:
                    if ended.get(p) != msg.offset():
                        ended[p] = msg.offset()
                        history.append(
                            "txn-end",
                            reader=name,
                            session=session,
                            topic=topic,
                            partition=p,
                            offset=msg.offset(),
                        )
                    continue
                if err is not None:
                    history.append("info", what=f"{name} error", partition=p, error=str(err))
                    if err.code() == KafkaError._AUTO_OFFSET_RESET and p is not None:
                        consumer.seek(TopicPartition(topic, p, nexts[p]))
                    continue
                history.append(
                    "txn-read",
                    reader=name,
                    session=session,
                    topic=topic,
                    partition=p,
                    offset=msg.offset(),
                    value=msg.value().decode(),
                )
                self.read += 1
                nexts[p] = msg.offset() + 1
        finally:
            consumer.close()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def final_read(
    history: History,
    bootstrap: str,
    topic: str,
    partitions: int,
    session: int,
    timeout_s: float = 90,
) -> dict[int, int]:
    """Read every partition of ``topic`` read_committed from 0 until its end reaches the
    high watermark found first (reader ``final``, session ``session``); return, per
    partition, the offset after the last record read (0 if none)."""
    consumer = _reader(bootstrap, "chaos-txn-final")
    try:
        highs = {}
        for p in range(partitions):
            _, highs[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        history.append("txn-final", topic=topic, ends={str(p): o for p, o in highs.items()})
        history.append(
            "txn-session",
            reader=FINAL,
            session=session,
            topic=topic,
            starts={str(p): 0 for p in highs},
        )
        consumer.assign([TopicPartition(topic, p, 0) for p in highs])
        after = {p: 0 for p in highs}
        pending = set(highs)
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err, p = msg.error(), msg.partition()
            if err is not None and err.code() == KafkaError._PARTITION_EOF:
                if p in pending and msg.offset() >= highs[p]:
                    pending.discard(p)
                    history.append(
                        "txn-end",
                        reader=FINAL,
                        session=session,
                        topic=topic,
                        partition=p,
                        offset=msg.offset(),
                    )
                continue
            if err is not None:
                history.append("info", what="txn final reader error", error=str(err))
                continue
            history.append(
                "txn-read",
                reader=FINAL,
                session=session,
                topic=topic,
                partition=p,
                offset=msg.offset(),
                value=msg.value().decode(),
            )
            after[p] = msg.offset() + 1
        if pending:
            history.append(
                "info", what="txn final read short", topic=topic, pending=sorted(pending)
            )
        return after
    finally:
        consumer.close()
