"""The consumer-group workload: members of one group read the topic during the faults and
commit what they processed; after the heal a new member resumes from the group's commits.

Each member is a confluent-kafka consumer (``subscribe``, ``enable.auto.commit`` false,
``auto.offset.reset`` earliest) in a thread of its own. It takes a batch from ``consume``,
records every record as a ``group-read``, then commits, synchronously, the next offset of
each partition in the batch: a ``group-commit`` ``invoke`` before, then ``ok`` or ``fail``
per partition. Event shapes (besides ``chaos.history``'s)::

    {"type": "group-read", "group": g, "member": "m0", "partition": 2, "offset": 5, "value": "17"}
    {"type": "group-commit", "phase": "invoke"|"ok"|"fail", "group": g, "member": "m0",
     "partition": 2, "offset": 6, "error": "..."}            offset: the next one to read
    {"type": "group-assign", "group": g, "member": "m0", "partitions": [0, 3]}
    {"type": "group-committed", "group": g, "member": "resume", "partition": 2, "offset": 6}
    {"type": "group-end", "group": g, "member": "resume", "partition": 2, "offset": 9}

``resume`` runs once the members have left and the producer has stopped: a new member of
the same group records the committed offsets it is given (``group-committed``), reads each
partition from there to the high watermark (``group-read`` by member ``resume``) and marks
each partition it finished (``group-end``).

Concurrency: each member owns its thread and consumer; they only append to the History.
"""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from chaos.history import History
from chaos.workload import CLIENT_LOGGER

GROUP = "chaos-group"
RESUMER = "resume"


def _member(bootstrap: str, group: str, name: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": name,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 1000,
            "max.poll.interval.ms": 60000,
            "socket.timeout.ms": 5000,
            "topic.metadata.refresh.interval.ms": 1000,
            "enable.partition.eof": False,
            "logger": CLIENT_LOGGER,
        }
    )


def _commit(
    history: History, consumer: Consumer, topic: str, group: str, member: str, nexts: dict
) -> None:
    """Commit ``nexts`` (partition -> next offset) synchronously; record invoke and the
    outcome of each partition."""
    for p, offset in sorted(nexts.items()):
        history.append(
            "group-commit", phase="invoke", group=group, member=member, partition=p, offset=offset
        )
    offsets = [TopicPartition(topic, p, o) for p, o in sorted(nexts.items())]
    try:
        done = consumer.commit(offsets=offsets, asynchronous=False)
    except KafkaException as exc:
        for p, offset in sorted(nexts.items()):
            history.append(
                "group-commit",
                phase="fail",
                group=group,
                member=member,
                partition=p,
                offset=offset,
                error=str(exc.args[0]),
            )
        return
    for tp in done or []:
        fields = {"group": group, "member": member, "partition": tp.partition, "offset": tp.offset}
        if tp.error is not None:
            history.append("group-commit", phase="fail", error=str(tp.error), **fields)
        else:
            history.append("group-commit", phase="ok", **fields)


class GroupConsuming:
    """``members`` consumers of one group, reading and committing until ``stop``."""

    def __init__(
        self, history: History, bootstrap: str, topic: str, members: int = 2, group: str = GROUP
    ) -> None:
        self.history = history
        self.bootstrap = bootstrap
        self.topic = topic
        self.group = group
        self.read = 0
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(f"m{i}",), name=f"chaos-m{i}", daemon=True)
            for i in range(members)
        ]

    def _run(self, name: str) -> None:
        history, group = self.history, self.group
        consumer = _member(self.bootstrap, group, name)

        def on_assign(_consumer, partitions):
            history.append(
                "group-assign",
                group=group,
                member=name,
                partitions=sorted(tp.partition for tp in partitions),
            )

        try:
            consumer.subscribe([self.topic], on_assign=on_assign)
            while not self._stop.is_set():
                nexts: dict[int, int] = {}
                for msg in consumer.consume(num_messages=200, timeout=0.3):
                    if msg.error():
                        history.append(
                            "info", what=f"group member {name} error", error=str(msg.error())
                        )
                        continue
                    p, offset = msg.partition(), msg.offset()
                    history.append(
                        "group-read",
                        group=group,
                        member=name,
                        partition=p,
                        offset=offset,
                        value=msg.value().decode(),
                    )
                    self.read += 1
                    nexts[p] = max(nexts.get(p, 0), offset + 1)
                if nexts:
                    _commit(history, consumer, self.topic, group, name, nexts)
        finally:
            consumer.close()

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)


def resume(
    history: History,
    bootstrap: str,
    topic: str,
    ends: dict[int, int],
    group: str = GROUP,
    timeout_s: float = 60,
) -> set[int]:
    """A new member of ``group`` reads from the committed offsets to ``ends`` (the high
    watermarks, fixed once the producer stopped); returns the partitions it finished."""
    consumer = _member(bootstrap, group, RESUMER)
    assigned: list[int] = []
    consumer.subscribe([topic], on_assign=lambda _c, ps: assigned.extend(t.partition for t in ps))
    finished: set[int] = set()
    try:
        deadline = time.monotonic() + timeout_s
        batch: list = []
        while len(set(assigned)) < len(ends) and time.monotonic() < deadline:
            batch += consumer.consume(num_messages=500, timeout=0.3)  # joins the group
        if len(set(assigned)) < len(ends):
            history.append("info", what="resume: not every partition assigned", got=assigned)
        committed = consumer.committed([TopicPartition(topic, p) for p in sorted(ends)], timeout=30)
        starts = {}
        for tp in committed:
            starts[tp.partition] = tp.offset
            history.append(
                "group-committed",
                group=group,
                member=RESUMER,
                partition=tp.partition,
                offset=tp.offset if tp.offset >= 0 else None,
            )
        for p, end in ends.items():  # nothing past the commit: finished already
            if starts.get(p, -1) >= end:
                finished.add(p)
                history.append("group-end", group=group, member=RESUMER, partition=p, offset=end)
        while len(finished) < len(ends) and time.monotonic() < deadline:
            for msg in batch or consumer.consume(num_messages=500, timeout=0.3):
                if msg.error():
                    if msg.error().code() != KafkaError._PARTITION_EOF:
                        history.append("info", what="resume error", error=str(msg.error()))
                    continue
                p, offset = msg.partition(), msg.offset()
                history.append(
                    "group-read",
                    group=group,
                    member=RESUMER,
                    partition=p,
                    offset=offset,
                    value=msg.value().decode(),
                )
                if p not in finished and offset + 1 >= ends[p]:
                    finished.add(p)
                    history.append(
                        "group-end", group=group, member=RESUMER, partition=p, offset=ends[p]
                    )
            batch = []
        return finished
    finally:
        consumer.close()
