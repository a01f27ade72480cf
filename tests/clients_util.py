"""Helpers for the real-client tests: records to send, producers and readers per client.

Every reader returns ``Rec`` values so that what one client wrote can be compared
field by field with what another client read. Consumers never join a group (the
broker has no group coordinator): they ``assign()`` partitions and start at the
beginning. Waiting on the broker (another process) is done with ``wait_for``, a
poll with a deadline.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from cluster_util import wait_for

T = TypeVar("T")

KCAT = "/usr/bin/kcat"
Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class Rec:
    """One record as a client sees it. ``offset`` is -1 for a record not yet written."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    timestamp: int

    def at(self, offset: int) -> Rec:
        return Rec(self.partition, offset, self.key, self.value, self.headers, self.timestamp)


def make_records(
    tag: str,
    count: int,
    partitions: int,
    ts_base: int,
    *,
    null_headers: bool = True,
    value_size: int = 60,
) -> list[Rec]:
    """``count`` distinct records spread round-robin over ``partitions``.

    Keys, values and headers all name the record; values carry some repetitive
    text so that compression has something to do; a few records have a null key
    or an empty value, and (with ``null_headers``) a header without a value.
    Timestamps are ``ts_base + i`` (CreateTime, in the past on purpose).
    """
    filler = ("replog-" * (value_size // 7 + 1))[:value_size]
    out = []
    for i in range(count):
        key: bytes | None = f"{tag}-key-{i}".encode()
        value: bytes | None = f"{tag}:{i}:{filler}".encode()
        if i % 97 == 13:
            key = None
        if i % 101 == 7:
            value = b""
        headers: list[Header] = [("seq", str(i).encode()), ("tag", tag.encode())]
        if i % 5 == 0:
            headers.append(("seq", b"again"))  # repeated header names keep their order
        if null_headers and i % 7 == 3:
            headers.append(("none", None))
        out.append(Rec(i % partitions, -1, key, value, tuple(headers), ts_base + i))
    return out


def by_partition(records: Iterable[Rec]) -> dict[int, list[Rec]]:
    out: dict[int, list[Rec]] = {}
    for rec in records:
        out.setdefault(rec.partition, []).append(rec)
    for recs in out.values():
        recs.sort(key=lambda r: r.offset)
    return out


def end_offsets(records: Iterable[Rec]) -> dict[int, int]:
    """Next offset per partition for a dense log of ``records``."""
    ends: dict[int, int] = {}
    for rec in records:
        ends[rec.partition] = max(ends.get(rec.partition, 0), rec.offset + 1)
    return ends


def assert_dense(records: list[Rec], what: str) -> None:
    """Offsets of every partition are exactly 0..n-1, each once."""
    for partition, recs in by_partition(records).items():
        offsets = [r.offset for r in recs]
        assert offsets == list(range(len(offsets))), (
            f"{what}: partition {partition} offsets are not dense 0..{len(offsets) - 1}: "
            f"first gap/duplicate near {_first_bad(offsets)}"
        )


def _first_bad(offsets: list[int]) -> int | None:
    for i, offset in enumerate(offsets):
        if offset != i:
            return i
    return None


def assert_same_records(read: list[Rec], expected: list[Rec], what: str) -> None:
    """``read`` holds exactly ``expected``: same offsets, keys, values, headers, timestamps."""
    assert_dense(read, what)
    got = {(r.partition, r.offset): r for r in read}
    assert len(got) == len(read), f"{what}: a record was read twice"
    want = {(r.partition, r.offset): r for r in expected}
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    assert not missing, f"{what}: {len(missing)} records missing, first {missing[:5]}"
    assert not extra, f"{what}: {len(extra)} unexpected records, first {extra[:5]}"
    for pos in sorted(want):
        assert got[pos] == want[pos], (
            f"{what}: record {pos} differs:\n read {got[pos]}\n sent {want[pos]}"
        )


# -- topics -------------------------------------------------------------------------


def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int = 1,
    config: dict[str, str] | None = None,
    timeout_s: float = 60,
) -> None:
    """CreateTopics through the AdminClient, then wait until every partition has a leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, partitions, 1, config=config or {})], operation_timeout=timeout_s
    )
    futures[topic].result(timeout=timeout_s + 10)
    wait_for_leaders(bootstrap, {topic: partitions}, timeout_s)


def wait_for_leaders(bootstrap: str, topics: dict[str, int], timeout_s: float = 60) -> None:
    """Wait until Metadata names a leader for every partition of ``topics``."""
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def ready() -> bool:
        try:
            md = admin.list_topics(timeout=5)
        except KafkaException:
            return False
        for name, count in topics.items():
            t = md.topics.get(name)
            if t is None or t.error is not None or len(t.partitions) != count:
                return False
            if any(p.leader < 0 or p.error is not None for p in t.partitions.values()):
                return False
        return True

    wait_for(ready, timeout_s, f"leaders for {sorted(topics)}", interval_s=0.1)


def watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    """``(log start offset, high watermark)`` via ListOffsets."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "replog-tests", "enable.auto.commit": False}
    )
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=20)
    finally:
        consumer.close()


# -- confluent-kafka ----------------------------------------------------------------


def produce_confluent(bootstrap: str, topic: str, records: list[Rec], **config: Any) -> list[Rec]:
    """Send ``records`` to their partitions; return them with the offsets the broker acked.

    Fails if any delivery fails.
    """
    settings: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "linger.ms": 5,
        "message.timeout.ms": 60000,
    }
    settings.update(config)
    producer = Producer(settings)
    acked: list[Rec] = []
    errors: list[str] = []

    def report(index: int) -> Callable[[Any, Any], None]:
        def done(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(f"record {index}: {err}")
            else:
                acked.append(records[index].at(msg.offset()))

        return done

    for i, rec in enumerate(records):
        while True:
            try:
                producer.produce(
                    topic,
                    value=rec.value,
                    key=rec.key,
                    partition=rec.partition,
                    headers=list(rec.headers),
                    timestamp=rec.timestamp,
                    on_delivery=report(i),
                )
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(60)
    assert remaining == 0, f"{remaining} records to {topic} still undelivered after 60 s"
    assert not errors, f"deliveries to {topic} failed: {errors[:5]}"
    assert len(acked) == len(records)
    return acked


def consumer_confluent(bootstrap: str, **config: Any) -> Consumer:
    settings: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": "replog-tests",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
    }
    settings.update(config)
    return Consumer(settings)


def consume_confluent(
    bootstrap: str, topic: str, ends: dict[int, int], timeout_s: float = 60, **config: Any
) -> list[Rec]:
    """Read every partition in ``ends`` from the beginning up to (excluding) its end offset.

    Any consumer error other than partition EOF fails the read.
    """
    consumer = consumer_confluent(bootstrap, **config)
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        out: list[Rec] = []
        next_offset = {p: 0 for p in ends}
        deadline = time.monotonic() + timeout_s
        while any(next_offset[p] < ends[p] for p in ends):
            assert time.monotonic() < deadline, (
                f"reading {topic}: stuck at {next_offset} of {ends} after {timeout_s} s"
            )
            for msg in consumer.consume(num_messages=5000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    assert err.code() == -191, f"reading {topic}: {err}"  # _PARTITION_EOF
                    continue
                ts_type, ts = msg.timestamp()
                assert ts_type == TIMESTAMP_CREATE_TIME, f"{topic}: timestamp type {ts_type}"
                out.append(
                    Rec(
                        msg.partition(),
                        msg.offset(),
                        msg.key(),
                        msg.value(),
                        tuple(msg.headers() or ()),
                        ts,
                    )
                )
                next_offset[msg.partition()] = msg.offset() + 1
        return out
    finally:
        consumer.close()


# -- kafka-python --------------------------------------------------------------------


def produce_kafka_python(
    bootstrap: str, topic: str, records: list[Rec], **config: Any
) -> list[Rec]:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **config)
    try:
        futures = [
            producer.send(
                topic,
                value=rec.value,
                key=rec.key,
                partition=rec.partition,
                headers=list(rec.headers),
                timestamp_ms=rec.timestamp,
            )
            for rec in records
        ]
        producer.flush(60)
        return [rec.at(f.get(timeout=60).offset) for rec, f in zip(records, futures, strict=True)]
    finally:
        producer.close(timeout=10)


def consume_kafka_python(
    bootstrap: str, topic: str, ends: dict[int, int], timeout_s: float = 60
) -> list[Rec]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        parts = [KTopicPartition(topic, p) for p in ends]
        consumer.assign(parts)
        for tp in parts:
            consumer.seek(tp, 0)
        out: list[Rec] = []
        next_offset = {p: 0 for p in ends}
        deadline = time.monotonic() + timeout_s
        while any(next_offset[p] < ends[p] for p in ends):
            assert time.monotonic() < deadline, (
                f"kafka-python reading {topic}: stuck at {next_offset} of {ends}"
            )
            batches = consumer.poll(timeout_ms=500, max_records=5000)
            for tp, msgs in batches.items():
                for m in msgs:
                    assert m.timestamp_type == 0, f"{topic}: timestamp type {m.timestamp_type}"
                    out.append(
                        Rec(
                            tp.partition,
                            m.offset,
                            m.key,
                            m.value,
                            tuple((k, v) for k, v in m.headers),
                            m.timestamp,
                        )
                    )
                    next_offset[tp.partition] = m.offset + 1
        return out
    finally:
        consumer.close()


# -- aiokafka ------------------------------------------------------------------------


def produce_aiokafka(bootstrap: str, topic: str, records: list[Rec], **config: Any) -> list[Rec]:
    from aiokafka import AIOKafkaProducer

    async def run() -> list[Rec]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **config)
        await producer.start()
        try:
            futures = [
                await producer.send(
                    topic,
                    value=rec.value,
                    key=rec.key,
                    partition=rec.partition,
                    headers=list(rec.headers),
                    timestamp_ms=rec.timestamp,
                )
                for rec in records
            ]
            metas = await asyncio.wait_for(asyncio.gather(*futures), 60)
            return [rec.at(m.offset) for rec, m in zip(records, metas, strict=True)]
        finally:
            await producer.stop()

    return asyncio.run(run())


def consume_aiokafka(
    bootstrap: str, topic: str, ends: dict[int, int], timeout_s: float = 60
) -> list[Rec]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATopicPartition

    async def run() -> list[Rec]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False
        )
        await consumer.start()
        try:
            parts = [ATopicPartition(topic, p) for p in ends]
            consumer.assign(parts)
            await consumer.seek_to_beginning(*parts)
            out: list[Rec] = []
            next_offset = {p: 0 for p in ends}
            deadline = time.monotonic() + timeout_s
            while any(next_offset[p] < ends[p] for p in ends):
                assert time.monotonic() < deadline, (
                    f"aiokafka reading {topic}: stuck at {next_offset} of {ends}"
                )
                batches = await consumer.getmany(timeout_ms=500, max_records=5000)
                for tp, msgs in batches.items():
                    for m in msgs:
                        assert m.timestamp_type == 0, f"{topic}: timestamp type {m.timestamp_type}"
                        out.append(
                            Rec(
                                tp.partition,
                                m.offset,
                                m.key,
                                m.value,
                                tuple((k, v) for k, v in m.headers),
                                m.timestamp,
                            )
                        )
                        next_offset[tp.partition] = m.offset + 1
            return out
        finally:
            await consumer.stop()

    return asyncio.run(run())


# -- kcat ----------------------------------------------------------------------------


def produce_kcat(
    bootstrap: str,
    topic: str,
    partition: int,
    lines: list[tuple[str, str]],
    headers: list[tuple[str, str]],
    extra: list[str] = (),  # type: ignore[assignment]
) -> None:
    """``kcat -P``: one ``key:value`` line per record, the same headers on all of them."""
    args = [KCAT, "-P", "-b", bootstrap, "-t", topic, "-p", str(partition), "-K", ":"]
    for name, value in headers:
        args += ["-H", f"{name}={value}"]
    args += list(extra)
    data = "".join(f"{k}:{v}\n" for k, v in lines).encode()
    done = subprocess.run(args, input=data, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, f"kcat -P failed ({done.returncode}): {done.stderr.decode()}"


def consume_kcat(bootstrap: str, topic: str, ends: dict[int, int]) -> list[Rec]:
    """``kcat -C -o beginning -e -J``, one run per partition."""
    out: list[Rec] = []
    for partition, end in ends.items():
        args = [KCAT, "-C", "-b", bootstrap, "-t", topic, "-p", str(partition)]
        args += ["-o", "beginning", "-e", "-J", "-c", str(end)]
        done = subprocess.run(args, capture_output=True, timeout=120, check=False)
        assert done.returncode == 0, f"kcat -C failed ({done.returncode}): {done.stderr.decode()}"
        for line in done.stdout.decode().splitlines():
            obj = json.loads(line)
            assert obj["tstype"] == "create", f"{topic}: timestamp type {obj['tstype']}"
            raw_headers = obj.get("headers") or []
            headers = tuple(
                (
                    raw_headers[i],
                    None if raw_headers[i + 1] is None else raw_headers[i + 1].encode(),
                )
                for i in range(0, len(raw_headers), 2)
            )
            out.append(
                Rec(
                    obj["partition"],
                    obj["offset"],
                    None if obj["key"] is None else obj["key"].encode(),
                    None if obj["payload"] is None else obj["payload"].encode(),
                    headers,
                    obj["ts"],
                )
            )
    return out


# -- broker logs and files -------------------------------------------------------------

SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex)$")


def broker_log(broker_dir: Path) -> str:
    try:
        return (broker_dir / "broker.log").read_text(errors="replace")
    except OSError:
        return ""


def log_lines(broker_dir: Path, pattern: str) -> list[str]:
    return [line for line in broker_log(broker_dir).splitlines() if re.search(pattern, line)]


def partition_dir(broker_dir: Path, topic: str, partition: int) -> Path:
    return broker_dir / "data" / f"{topic}-{partition}"


def segment_bases(broker_dir: Path, topic: str, partition: int) -> list[int]:
    """Base offsets of the ``.log`` segment files of a partition, ascending."""
    directory = partition_dir(broker_dir, topic, partition)
    return sorted(
        int(m.group(1))
        for m in (SEGMENT_FILE.match(p.name) for p in directory.iterdir())
        if m and m.group(2) == "log"
    )
