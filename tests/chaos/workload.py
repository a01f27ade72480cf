"""The queue workload: one acks=all idempotent producer, a live consumer, a final read.

Every value is unique (a counter) and goes to partition ``n % partitions``. The producer
sends at a bounded rate and records ``invoke`` before each send and ``ok`` (with the
offset) or ``fail`` in the delivery callback. The live consumer reads every partition
from the beginning while faults happen. After the faults heal and the producer has
flushed, ``final_read`` reads every partition from offset 0 up to the high watermark it
finds at that moment.

Concurrency: the producer and the live consumer each own a thread; both only append to
the shared ``History``.
"""

from __future__ import annotations

import logging
import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from chaos.history import History

PRODUCER_CONFIG = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 5,
    # A paused or cut-off broker keeps its sockets: time requests out in seconds.
    "request.timeout.ms": 5000,
    "socket.timeout.ms": 5000,
    "message.timeout.ms": 30000,
    "topic.metadata.refresh.interval.ms": 1000,
    "retry.backoff.ms": 100,
    "socket.keepalive.enable": True,
    # the idempotence state machine (producer id, epoch bumps, drains) into clients.log
    "debug": "eos",
}

# librdkafka's own log lines (connection failures are the point of a campaign) go here;
# the campaign attaches a file handler in its run directory.
CLIENT_LOGGER = logging.getLogger("chaos.clients")
CLIENT_LOGGER.propagate = False


class Producing:
    """A producer thread writing ``rate`` values a second until ``stop``."""

    def __init__(
        self, history: History, bootstrap: str, topic: str, partitions: int, rate: int = 200
    ) -> None:
        self.history = history
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.interval = 1.0 / rate
        self.acked = 0
        self._next = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-producer", daemon=True)
        self._producer = self._new_producer()

    def _new_producer(self) -> Producer:
        return Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "error_cb": self._on_error,
                "logger": CLIENT_LOGGER,
                **PRODUCER_CONFIG,
            }
        )

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self.history.append("info", what="producer fatal error", error=str(err))

    def _on_delivery(self, err: KafkaError | None, msg) -> None:
        value = msg.value().decode()
        if err is None:
            self.acked += 1
            self.history.append("ok", value=value, partition=msg.partition(), offset=msg.offset())
        else:
            self.history.append("fail", value=value, partition=msg.partition(), error=str(err))

    def _run(self) -> None:
        next_send = time.monotonic()
        while not self._stop.is_set():
            value = str(self._next)
            partition = self._next % self.partitions
            self.history.append("invoke", value=value, partition=partition)
            self._next += 1
            while True:
                try:
                    self._producer.produce(
                        self.topic,
                        value=value.encode(),
                        partition=partition,
                        on_delivery=self._on_delivery,
                    )
                    break
                except BufferError:
                    self._producer.poll(0.1)
                except KafkaException as exc:
                    if not exc.args[0].fatal():
                        raise
                    # The idempotent producer is fenced for good: a new one takes over.
                    self.history.append("info", what="producer replaced", error=str(exc))
                    self._producer.flush(5)
                    self._producer = self._new_producer()
            next_send += self.interval
            self._producer.poll(max(0.0, next_send - time.monotonic()))

    def start(self) -> None:
        self._thread.start()

    def stop(self, flush_s: float = 60) -> int:
        """Stop sending; wait for every outstanding delivery; return how many remain."""
        self._stop.set()
        self._thread.join(30)
        remaining = self._producer.flush(flush_s)
        self.history.append("info", what="producer stopped", undelivered=remaining)
        return remaining


def _consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            "topic.metadata.refresh.interval.ms": 1000,
            "enable.partition.eof": False,
            "logger": CLIENT_LOGGER,
        }
    )


class LiveReading:
    """Reads every partition from the start while the campaign runs (reader ``live``)."""

    def __init__(self, history: History, bootstrap: str, topic: str, partitions: int) -> None:
        self.history = history
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-reader", daemon=True)

    def _run(self) -> None:
        consumer = _consumer(self.bootstrap, f"chaos-live-{id(self)}")
        next_offset = {p: 0 for p in range(self.partitions)}
        try:
            consumer.assign([TopicPartition(self.topic, p, 0) for p in range(self.partitions)])
            while not self._stop.is_set():
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error():
                    err = msg.error()
                    self.history.append(
                        "info", what="live reader error", partition=msg.partition(), error=str(err)
                    )
                    if err.code() == KafkaError._AUTO_OFFSET_RESET and msg.partition() is not None:
                        # Asked to reset: carry on from where we were, and let the checker
                        # judge what comes next.
                        p = msg.partition()
                        consumer.seek(TopicPartition(self.topic, p, next_offset[p]))
                    continue
                p, offset = msg.partition(), msg.offset()
                self.history.append(
                    "read", reader="live", partition=p, offset=offset, value=msg.value().decode()
                )
                next_offset[p] = offset + 1
        finally:
            consumer.close()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def final_read(
    history: History, bootstrap: str, topic: str, partitions: int, timeout_s: float = 60
) -> dict[int, int]:
    """Read every partition from offset 0 to its high watermark now; return the watermarks.
    A partition whose end was reached gets an ``end`` event."""
    consumer = _consumer(bootstrap, "chaos-final")
    try:
        ends = {}
        for p in range(partitions):
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            ends[p] = high
        history.append("info", what="final high watermarks", ends=ends)
        pending = {p for p, high in ends.items() if high > 0}
        for p in set(ends) - pending:
            history.append("end", reader="final", partition=p, offset=0)
        consumer.assign([TopicPartition(topic, p, 0) for p in sorted(pending)])
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                history.append(
                    "info",
                    what="final reader error",
                    partition=msg.partition(),
                    error=str(msg.error()),
                )
                continue
            p, offset = msg.partition(), msg.offset()
            history.append(
                "read", reader="final", partition=p, offset=offset, value=msg.value().decode()
            )
            if p in pending and offset + 1 >= ends[p]:
                pending.discard(p)
                history.append("end", reader="final", partition=p, offset=ends[p])
        return ends
    finally:
        consumer.close()
