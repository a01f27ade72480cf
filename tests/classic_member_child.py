"""A classic-protocol group member in a process of its own, for the mixed-group tests:
``python classic_member_child.py kafka-python|aiokafka BOOTSTRAP GROUP TOPIC CLIENT_ID``.

It consumes from the start, commits after every batch (again on the next turns if a
rebalance refused it), and writes JSON lines to stdout:
``{"assigned": [partitions]}`` whenever its assignment changes, ``{"records": [[partition,
value], ...]}`` for each batch read (after its commit was tried), and ``{"error": text}``
for a commit refused during a rebalance. SIGTERM closes the consumer (it leaves the
group) and ends the process.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys


def emit(**fields) -> None:
    print(json.dumps(fields), flush=True)


def run_kafka_python(bootstrap: str, group: str, topic: str, client_id: str) -> None:
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id=client_id,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=10_000,
        heartbeat_interval_ms=500,
        max_poll_interval_ms=30_000,
    )
    assigned: list[int] | None = None
    uncommitted = False
    try:
        while not stopping:
            batches = consumer.poll(timeout_ms=200)
            now = sorted(tp.partition for tp in consumer.assignment())
            if now != assigned:
                assigned = now
                emit(assigned=now)
            records = [[r.partition, r.value.decode()] for rs in batches.values() for r in rs]
            if records or uncommitted:
                try:
                    consumer.commit()
                    uncommitted = False
                except KafkaError as exc:  # refused during a rebalance: tried again
                    uncommitted = True
                    emit(error=repr(exc))
            if records:
                emit(records=records)
    finally:
        consumer.close()


async def run_aiokafka(bootstrap: str, group: str, topic: str, client_id: str) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import KafkaError

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id=client_id,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=10_000,
        heartbeat_interval_ms=500,
        max_poll_interval_ms=30_000,
    )
    await consumer.start()
    assigned: list[int] | None = None
    uncommitted = False
    try:
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=200)
            now = sorted(tp.partition for tp in consumer.assignment())
            if now != assigned:
                assigned = now
                emit(assigned=now)
            records = [[r.partition, r.value.decode()] for rs in batches.values() for r in rs]
            if records or uncommitted:
                try:
                    await consumer.commit()
                    uncommitted = False
                except KafkaError as exc:  # refused during a rebalance: tried again
                    uncommitted = True
                    emit(error=repr(exc))
            if records:
                emit(records=records)
    finally:
        await consumer.stop()


if __name__ == "__main__":
    client, *args = sys.argv[1:]
    if client == "kafka-python":
        run_kafka_python(*args)
    else:
        asyncio.run(run_aiokafka(*args))
