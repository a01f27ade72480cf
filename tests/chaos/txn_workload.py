"""The transactional workload (issue 26): transactional producers, a consume-transform-produce
flow and read_committed readers, all with confluent-kafka, recording into the campaign's
``History`` in the shapes ``chaos.txn_checker`` describes.

- ``TxnProducing``: ``producers`` threads, each a transactional producer of its own
  (``transactional.id`` ``chaos-txn-p<n>``) writing transactions of 1-5 records to seeded
  partitions of the input topic, then committing or (one in four) aborting, as the seed
  says. A commit that answers a retriable error is retried; one that still fails, or
  answers an abortable or fatal error, is recorded ``unknown`` (the EndTxn may have
  landed), the abortable one aborted afterwards (KIP-360) and the fatal one replaced by a
  new producer with the same id, whose ``init_transactions`` fences the old one and
  finishes what it left (as Jepsen advises after an indefinite error).
- ``TxnFlow``: ``workers`` members of one consumer group (``isolation.level``
  ``read_committed``), each with a transactional producer, copying every input record to
  the output topic in a transaction with ``send_offsets_to_transaction`` (KIP-447 fencing
  by the group's generation). Any failure restarts the worker: a new consumer and a new
  producer with the same transactional id, resuming from the group's committed offsets. A
  worker stuck in one client call for ``STUCK_S`` is replaced by a new thread that does
  the same (the stuck one, fenced, leaves when its call returns).
- read_committed readers (``chaos.txn_readers``) while the faults run and after the heal.
- ``TxnWorkload`` ties them together for the campaign: ``start``, then ``stop``: the
  producers end their transactions, the input is read to its end, the flow runs until its
  committed offsets pass the last input (``txn-drained``), and the output is read.

Concurrency: every producer, worker and reader owns its thread and its clients; they only
append to the shared ``History``.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from chaos.history import History
from chaos.txn_readers import CONSUMER_CONFIG, TxnReading, final_read
from chaos.workload import CLIENT_LOGGER

INPUT = "chaos-txn"
OUTPUT = "chaos-txn-out"
FLOW_GROUP = "chaos-txn-flow"
TRANSACTION_TIMEOUT_MS = 15000
CALL_TIMEOUT_S = 15  # init/commit/abort/send_offsets calls
COMMIT_ATTEMPTS = 3
# a flow worker in one client call this long is stuck: librdkafka's
# send_offsets_to_transaction can block past its timeout while the group coordinator is
# unreachable without a broker state change (librdkafka issues 5456, 5511); the worker
# is then replaced by one with the same transactional id, which fences it, and its
# consumer leaves the group after MAX_POLL_INTERVAL_MS without a poll, which hands its
# partitions to the others
STUCK_S = CALL_TIMEOUT_S + 5
MAX_POLL_INTERVAL_MS = 20000
ABORT_SHARE = 0.25
PRODUCERS = 3  # transactional producers, ``chaos-txn-p<n>``
WORKERS = 2  # consume-transform-produce members, ``chaos-txn-flow-w<n>``

# CHAOS_TXN_DEBUG=eos (librdkafka debug contexts) puts the transactional clients' debug
# lines in the run's clients.log, to study a run that went wrong
CLIENT_DEBUG = os.environ.get("CHAOS_TXN_DEBUG", "")

PRODUCER_CONFIG = {
    "acks": "all",
    "linger.ms": 5,
    "request.timeout.ms": 5000,
    "socket.timeout.ms": 5000,
    "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
    "message.timeout.ms": TRANSACTION_TIMEOUT_MS,
    "topic.metadata.refresh.interval.ms": 1000,
    "retry.backoff.ms": 100,
    "socket.keepalive.enable": True,
}


def _producer(bootstrap: str, transactional_id: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "logger": CLIENT_LOGGER,
            **PRODUCER_CONFIG,
            **({"debug": CLIENT_DEBUG} if CLIENT_DEBUG else {}),
        }
    )


def stacks(threads: list[threading.Thread]) -> str:
    """Where each of ``threads`` is now (for a workload that does not finish)."""
    frames = sys._current_frames()
    out = []
    for thread in threads:
        frame = frames.get(thread.ident or -1)
        if frame is not None:
            where = "".join(traceback.format_stack(frame)[-4:])
            out.append(f"{thread.name}:\n{where}")
    return "\n".join(out)


def _error(exc: BaseException) -> KafkaError | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def _produce(producer: Producer, topic: str, partition: int, value: str, on_delivery) -> None:
    while True:
        try:
            producer.produce(
                topic, value=value.encode(), partition=partition, on_delivery=on_delivery
            )
            return
        except BufferError:
            producer.poll(0.1)


class _Transactions:
    """Begin, commit and abort with the outcome recorded; shared by producers and workers.

    ``commit`` returns whether the transaction committed and whether the producer can go
    on (False: replace it); ``abort`` whether the producer can go on."""

    def __init__(self, history: History, beat: Callable[[], None] = lambda: None) -> None:
        self.history = history
        self.beat = beat  # called before each client call (the flow's stuck-worker watch)

    def delivery(self, txn: str) -> Callable[[KafkaError | None, Any], None]:
        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            fields = {
                "txn": txn,
                "topic": msg.topic(),
                "partition": msg.partition(),
                "value": msg.value().decode(),
            }
            if err is None:
                self.history.append("txn-ack", offset=msg.offset(), **fields)
            else:
                self.history.append("txn-ack", error=str(err), **fields)

        return on_delivery

    def commit(self, producer: Producer, txn: str) -> tuple[bool, bool]:
        self.history.append("txn", phase="commit", txn=txn)
        err: KafkaError | None = None
        for _ in range(COMMIT_ATTEMPTS):
            try:
                self.beat()
                producer.commit_transaction(CALL_TIMEOUT_S)
                self.history.append("txn", phase="ok", txn=txn)
                return True, True
            except KafkaException as exc:
                err = _error(exc)
                if err is None or not err.retriable():
                    break
        if err is not None and err.txn_requires_abort():
            aborted = self._abort_quietly(producer)
            self.history.append(
                "txn", phase="unknown", txn=txn, error=str(err), then=aborted or "aborted"
            )
            return False, aborted is None
        self.history.append("txn", phase="unknown", txn=txn, error=str(err))
        return False, False

    def abort(self, producer: Producer, txn: str, why: str | None = None) -> bool:
        """Abort a transaction whose commit was never asked for: aborted whatever the
        answer (only the client's EndTxn could commit it)."""
        failed = self._abort_quietly(producer)
        fields = {"error": why} if why else {}
        if failed:
            fields["abort_error"] = failed
        self.history.append("txn", phase="aborted", txn=txn, **fields)
        return failed is None

    def _abort_quietly(self, producer: Producer) -> str | None:
        """abort_transaction, retried while retriable; the error text if it failed."""
        last = "abort not attempted"
        for _ in range(COMMIT_ATTEMPTS):
            try:
                self.beat()
                producer.abort_transaction(CALL_TIMEOUT_S)
                return None
            except KafkaException as exc:
                err = _error(exc)
                last = str(err or exc)
                if err is None or not err.retriable():
                    break
        return last


class TxnProducing:
    """Transactional producers writing to ``topic`` until ``stop``."""

    def __init__(
        self,
        history: History,
        bootstrap: str,
        topic: str,
        partitions: int,
        seed: int,
        producers: int = PRODUCERS,
        pause_s: float = 0.05,
    ) -> None:
        self.history = history
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.seed = seed
        self.pause_s = pause_s
        self.committed = 0
        self._txns = _Transactions(history)
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(n,), name=f"chaos-txn-p{n}", daemon=True)
            for n in range(producers)
        ]

    def _run(self, n: int) -> None:
        name = f"p{n}"
        rng = random.Random(self.seed * 1000 + n)
        producer: Producer | None = None
        sequence = 0
        while not self._stop.is_set():
            if producer is None:
                producer = _producer(self.bootstrap, producer_transactional_id(n))
                try:
                    producer.init_transactions(CALL_TIMEOUT_S)
                except KafkaException as exc:
                    self.history.append("info", what=f"txn {name} init failed", error=str(exc))
                    producer = None
                    self._stop.wait(1)
                    continue
            sequence += 1
            txn = f"{name}.{sequence}"
            records = [rng.randrange(self.partitions) for _ in range(rng.randint(1, 5))]
            commit = rng.random() >= ABORT_SHARE
            if not self._one(producer, name, txn, records, commit):
                _discard(producer)
                producer = None
            self._stop.wait(self.pause_s)
        if producer is not None:
            producer.flush(5)

    def _one(
        self, producer: Producer, name: str, txn: str, records: list[int], commit: bool
    ) -> bool:
        try:
            producer.begin_transaction()
        except KafkaException as exc:
            self.history.append("info", what=f"txn {name} begin failed", error=str(exc))
            return False
        self.history.append("txn", phase="invoke", producer=name, txn=txn)
        on_delivery = self._txns.delivery(txn)
        try:
            for i, partition in enumerate(records):
                value = f"{txn}.{i}"
                self.history.append(
                    "txn-send", txn=txn, topic=self.topic, partition=partition, value=value
                )
                _produce(producer, self.topic, partition, value, on_delivery)
            producer.poll(0)
        except KafkaException as exc:
            return self._txns.abort(producer, txn, why=str(exc)) and not _fatal(exc)
        if not commit:
            # the records reach the log first, so that a read_committed reader has
            # aborted records to skip (an abort would purge them from the queue)
            producer.flush(CALL_TIMEOUT_S)
            return self._txns.abort(producer, txn)
        committed, usable = self._txns.commit(producer, txn)
        self.committed += 1 if committed else 0
        return usable

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(4 * CALL_TIMEOUT_S * COMMIT_ATTEMPTS)


def _discard(producer: Producer) -> None:
    """Drop what a producer about to be replaced still queues (its successor's
    init_transactions fences whatever it already sent)."""
    try:
        producer.purge()
    except (KafkaException, RuntimeError):
        pass


def _fatal(exc: KafkaException) -> bool:
    err = _error(exc)
    return err is None or err.fatal()


class TxnFlow:
    """Consume-transform-produce from ``source`` to ``sink`` by ``workers`` group members."""

    def __init__(
        self,
        history: History,
        bootstrap: str,
        source: str,
        sink: str,
        sink_partitions: int,
        workers: int = WORKERS,
        group: str = FLOW_GROUP,
    ) -> None:
        self.history = history
        self.bootstrap = bootstrap
        self.source = source
        self.sink = sink
        self.sink_partitions = sink_partitions
        self.group = group
        self.committed = 0
        self.replaced = 0
        self._txns = _Transactions(history, beat=self._beat)
        self._stop = threading.Event()
        self._names = [f"w{n}" for n in range(workers)]
        self._threads: list[threading.Thread] = []  # every worker thread started
        self._current: dict[str, threading.Thread] = {}  # worker name -> its thread now
        self._beats: dict[int, float] = {}  # thread ident -> start of its current call
        self._watcher = threading.Thread(target=self._watch, name="chaos-flow-watch", daemon=True)

    def _consumer(self, name: str) -> Consumer:
        return Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "client.id": name,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 1000,
                "max.poll.interval.ms": MAX_POLL_INTERVAL_MS,
                "enable.partition.eof": False,
                "logger": CLIENT_LOGGER,
                **CONSUMER_CONFIG,
            }
        )

    def _beat(self) -> None:
        self._beats[threading.get_ident()] = time.monotonic()

    def _spawn(self, name: str) -> None:
        incarnation = sum(1 for t in self._threads if t.name.startswith(f"chaos-flow-{name}"))
        suffix = f"-{incarnation + 1}" if incarnation else ""
        thread = threading.Thread(
            target=self._run, args=(name,), name=f"chaos-flow-{name}{suffix}", daemon=True
        )
        self._threads.append(thread)
        self._current[name] = thread
        thread.start()

    def _mine(self, name: str) -> bool:
        """Whether the calling thread is still worker ``name`` (not replaced)."""
        return self._current.get(name) is threading.current_thread()

    def _watch(self) -> None:
        """Replace a worker stuck in one client call for ``STUCK_S`` (see its comment)."""
        while not self._stop.wait(1):
            for name in self._names:
                thread = self._current[name]
                since = self._beats.get(thread.ident or -1)
                if not thread.is_alive() or since is None:
                    continue
                if time.monotonic() - since > STUCK_S:
                    self.history.append(
                        "info",
                        what=f"flow {name} stuck in a client call; replaced",
                        stacks=stacks([thread]),
                    )
                    self.replaced += 1
                    self._spawn(name)

    def _run(self, name: str) -> None:
        state = {"session": 0, "sequence": 0}
        while not self._stop.is_set() and self._mine(name):
            self._beat()
            consumer = self._consumer(name)
            producer = _producer(self.bootstrap, flow_transactional_id(name))

            def on_assign(_consumer, partitions, name=name):
                state["session"] += 1
                self.history.append(
                    "info",
                    what=f"flow {name} assigned",
                    session=state["session"],
                    partitions=sorted(tp.partition for tp in partitions),
                )

            try:
                self._beat()
                producer.init_transactions(CALL_TIMEOUT_S)
                consumer.subscribe([self.source], on_assign=on_assign)
                self._loop(name, consumer, producer, state)
            except KafkaException as exc:
                self.history.append("info", what=f"flow {name} restarts", error=str(exc))
            finally:
                self._beat()
                _discard(producer)
                try:
                    consumer.close()
                except (KafkaException, RuntimeError):
                    pass
            self._stop.wait(0.5)

    def _loop(self, name: str, consumer: Consumer, producer: Producer, state: dict) -> None:
        """Copy batches until ``stop`` or the first failure (return: the worker restarts).
        Its transactions and reads are recorded under the thread's label (``w0``, a
        replacement ``w0-2``), so that a replaced worker's names never repeat."""
        who = threading.current_thread().name.removeprefix("chaos-flow-")
        while not self._stop.is_set() and self._mine(name):
            self._beat()
            batch = []
            for msg in consumer.consume(num_messages=20, timeout=0.5):
                if msg.error():
                    self.history.append(
                        "info", what=f"flow {name} consumer error", error=str(msg.error())
                    )
                else:
                    batch.append(msg)
            if not batch:
                continue
            state["sequence"] += 1
            txn = f"{who}.{state['session']}.{state['sequence']}"
            producer.begin_transaction()
            self.history.append("txn", phase="invoke", producer=who, txn=txn)
            on_delivery = self._txns.delivery(txn)
            nexts: dict[int, int] = {}
            try:
                for n, msg in enumerate(batch):
                    p, offset, source = msg.partition(), msg.offset(), msg.value().decode()
                    self.history.append(
                        "txn-consume",
                        txn=txn,
                        reader=who,
                        session=state["session"],
                        topic=self.source,
                        partition=p,
                        offset=offset,
                        value=source,
                    )
                    nexts[p] = max(nexts.get(p, 0), offset + 1)
                    value = f"{txn}.{n}"
                    out = p % self.sink_partitions
                    self.history.append(
                        "txn-send",
                        txn=txn,
                        topic=self.sink,
                        partition=out,
                        value=value,
                        source=source,
                    )
                    _produce(producer, self.sink, out, value, on_delivery)
                offsets = [TopicPartition(self.source, p, o) for p, o in sorted(nexts.items())]
                self._beat()
                producer.send_offsets_to_transaction(
                    offsets, consumer.consumer_group_metadata(), CALL_TIMEOUT_S
                )
            except KafkaException as exc:
                self._txns.abort(producer, txn, why=str(exc))
                return
            committed, _ = self._txns.commit(producer, txn)
            if not committed:
                # the consumer's position is past this transaction's inputs: only a new
                # consumer, from the group's committed offsets, reads them again
                return
            self.committed += 1

    def drain(self, ends: dict[int, int], timeout_s: float = 150) -> dict[int, int] | None:
        """Wait until the group's committed offsets reach ``ends`` (partition -> the offset
        after the last input record); record and return them, or None on timeout."""
        consumer = Consumer(
            {"bootstrap.servers": self.bootstrap, "group.id": self.group, **CONSUMER_CONFIG}
        )
        try:
            deadline = time.monotonic() + timeout_s
            got: dict[int, int] = {}
            error = None
            while time.monotonic() < deadline:
                try:
                    tps = [TopicPartition(self.source, p) for p in sorted(ends)]
                    got = {tp.partition: max(tp.offset, 0) for tp in consumer.committed(tps, 10)}
                except KafkaException as exc:
                    error = str(exc)
                    time.sleep(0.5)  # the coordinator moves: ask again
                    continue
                if all(got.get(p, 0) >= end for p, end in ends.items()):
                    self._drained(got, ends, complete=True)
                    return got
                time.sleep(0.5)
            self._drained(got, ends, complete=False, error=error)
            return None
        finally:
            consumer.close()

    def _drained(
        self, got: dict[int, int], ends: dict[int, int], complete: bool, error: str | None = None
    ) -> None:
        """``error``: the last answer of an OffsetFetch that failed (``got`` is then
        what an earlier one answered, or empty)."""
        self.history.append(
            "txn-drained",
            topic=self.source,
            output=self.sink,
            ends={str(p): o for p, o in got.items()},
            inputs={str(p): o for p, o in ends.items()},
            complete=complete,
            **({"error": error} if error else {}),
        )

    def start(self) -> None:
        for name in self._names:
            self._spawn(name)
        self._watcher.start()

    def stop(self) -> None:
        """Ask the workers to stop; each gets one client call's time to finish (a worker
        blocked in a client call longer than that is left, a daemon thread)."""
        self._stop.set()
        self._watcher.join(5)
        for thread in list(self._current.values()):
            thread.join(2 * CALL_TIMEOUT_S)

    def stuck(self) -> str:
        """The stacks of the workers still running (empty when none is)."""
        return stacks([t for t in self._threads if t.is_alive()])


class TxnWorkload:
    """The whole transactional workload, as the campaign drives it."""

    def __init__(self, history: History, bootstrap: str, partitions: int, seed: int) -> None:
        self.history = history
        self.bootstrap = bootstrap
        self.partitions = partitions
        self.producing = TxnProducing(history, bootstrap, INPUT, partitions, seed)
        self.flow = TxnFlow(history, bootstrap, INPUT, OUTPUT, partitions)
        self.readers = [
            TxnReading(history, bootstrap, INPUT, partitions, "txn-reader-in"),
            TxnReading(history, bootstrap, OUTPUT, partitions, "txn-reader-out"),
        ]
        self._stopped = False

    @property
    def committed(self) -> int:
        return self.producing.committed

    def start(self) -> None:
        self.producing.start()
        self.flow.start()
        for reader in self.readers:
            reader.start()

    def stop(self, log: Callable[[str], None] = print) -> None:
        """End the producers, read the input, let the flow drain it, read the output."""
        if self._stopped:
            return
        self._stopped = True
        self.producing.stop()
        for reader in self.readers:
            reader.stop()
        log(f"transactional producers stopped: {self.producing.committed} commits")
        last = final_read(self.history, self.bootstrap, INPUT, self.partitions, session=1)
        drained = self.flow.drain(last)
        if drained is None:
            self.history.append("info", what="flow not drained: workers", stacks=self.flow.stuck())
        self.flow.stop()
        if self.flow.stuck():
            log(f"flow workers still running after stop:\n{self.flow.stuck()}")
        log(
            f"flow {'drained' if drained is not None else 'NOT drained'} "
            f"({self.flow.committed} commits); committed offsets {drained}, inputs {last}"
        )
        final_read(self.history, self.bootstrap, OUTPUT, self.partitions, session=2)

    def abandon(self) -> None:
        """Stop every thread without the final reads (the campaign failed)."""
        self._stopped = True
        self.producing.stop()
        self.flow.stop()
        for reader in self.readers:
            reader.stop()


def txn_topics() -> tuple[str, str]:
    return INPUT, OUTPUT


def producer_transactional_id(n: int) -> str:
    return f"chaos-txn-p{n}"


def flow_transactional_id(worker: str) -> str:
    return f"chaos-txn-flow-{worker}"


def transactional_ids() -> list[str]:
    """Every transactional id the workload uses (producers first, then the flow's)."""
    return [producer_transactional_id(n) for n in range(PRODUCERS)] + [
        flow_transactional_id(f"w{n}") for n in range(WORKERS)
    ]


def create_txn_topics(bootstrap: str, partitions: int, segment_bytes: int = 0) -> None:
    """The input and output topics, replicated as the queue's topic (RF 3, min ISR 2)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
    if segment_bytes:
        config["segment.bytes"] = str(segment_bytes)
    futures = admin.create_topics(
        [NewTopic(t, partitions, 3, config=config) for t in txn_topics()], operation_timeout=30
    )
    for future in futures.values():
        future.result(timeout=60)
