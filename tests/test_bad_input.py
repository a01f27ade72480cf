"""Hostile and broken input on raw sockets, while a well-behaved client keeps working.

Each bad request gets either its Kafka error code or a closed connection (as
Kafka does for frames it cannot parse). Meanwhile a confluent-kafka producer and
consumer pair runs rounds on another topic; at the end it must have carried on
through the whole module without an error, the broker process must still be up,
and the records stored before the attacks must read back unchanged.
"""

from __future__ import annotations

import datetime
import random
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Producer, TopicPartition
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from clients_util import (
    Rec,
    assert_same_records,
    consume_confluent,
    consumer_confluent,
    create_topic,
    end_offsets,
    log_lines,
    make_records,
    produce_confluent,
    wait_for,
)
from replog.cluster.launcher import LocalCluster, pid_alive
from replog.protocol import apis, frames, wire
from replog.protocol.apis import ApiKey, nested
from replog.protocol.records import simple_batch

STORED = "bad-input-stored"
LIVE = "bad-input-live"
FUZZ = "bad-input-fuzz"
SOCKET_REQUEST_MAX_BYTES = 104857600  # the broker default
MESSAGE_MAX_BYTES = 1048588  # the broker default


# -- raw protocol ------------------------------------------------------------------


class Raw:
    """One TCP connection speaking (or mangling) the Kafka protocol."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _recv_exactly(self, n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            buf += chunk
        return buf

    def read_frame(self) -> bytes | None:
        """The next response frame (without its size), or None if the broker closed."""
        prefix = self._recv_exactly(4)
        if prefix is None:
            return None
        (size,) = struct.unpack(">i", prefix)
        return self._recv_exactly(size)

    def assert_closed(self) -> None:
        """The broker closes this connection without answering (10 s socket timeout)."""
        frame = self.read_frame()
        assert frame is None, f"expected a closed connection, got a {len(frame)}-byte response"

    def request(self, body: Any) -> Any:
        api_key, version = int(type(body).__api_key__), int(type(body).__version__)
        self.correlation_id += 1
        self.send(frames.encode_request(api_key, version, self.correlation_id, "bad-input", body))
        frame = self.read_frame()
        assert frame is not None, f"broker closed the connection instead of answering {body}"
        correlation_id, response = frames.decode_response(api_key, version, frame)
        assert correlation_id == self.correlation_id
        return response


def _timeout(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


def produce_request(topic: str, partition: int, records: bytes, version: int = 8, acks: int = 1):
    cls = apis.request_schema(ApiKey.PRODUCE, version)
    part = nested(cls, "PartitionProduceData")(index=partition, records=records)
    return cls(
        transactional_id=None,
        acks=acks,
        timeout=_timeout(5000),
        topic_data=(nested(cls, "TopicProduceData")(name=topic, partition_data=(part,)),),
    )


def produce_error(raw: Raw, topic: str, partition: int, records: bytes, version: int = 8) -> int:
    response = raw.request(produce_request(topic, partition, records, version))
    [topic_response] = response.responses
    [part] = topic_response.partition_responses
    assert int(part.index) == partition
    return int(part.error_code)


def fetch_request(topic: str, partition: int, offset: int = 0):
    cls = apis.request_schema(ApiKey.FETCH, 11)
    part = nested(cls, "FetchPartition")(
        partition=partition,
        current_leader_epoch=-1,
        fetch_offset=offset,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    return cls(
        replica_id=-1,
        max_wait=_timeout(100),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(nested(cls, "FetchTopic")(topic=topic, partitions=(part,)),),
        forgotten_topics_data=(),
        rack_id="",
    )


def list_offsets_request(topic: str, partition: int, timestamp: int = -2):
    cls = apis.request_schema(ApiKey.LIST_OFFSETS, 5)
    part = nested(cls, "ListOffsetsPartition")(
        partition_index=partition, current_leader_epoch=-1, timestamp=timestamp
    )
    return cls(
        replica_id=-1,
        isolation_level=0,
        topics=(nested(cls, "ListOffsetsTopic")(name=topic, partitions=(part,)),),
    )


def api_versions_request():
    cls = apis.request_schema(ApiKey.API_VERSIONS, 3)
    return cls(client_software_name="bad-input", client_software_version="1")


def header(api_key: int, version: int, correlation_id: int = 7) -> bytes:
    """A request header v1 (non-flexible): key, version, correlation id, client id."""
    client = b"bad-input"
    return struct.pack(">hhih", api_key, version, correlation_id, len(client)) + client


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


# -- the well-behaved client ---------------------------------------------------------


class LiveTraffic(threading.Thread):
    """Rounds of 100 records produced (acks=all) and read back, until stopped."""

    ROUND = 100

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.rounds = 0
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 2})
        consumer = consumer_confluent(self.bootstrap)
        consumer.assign([TopicPartition(LIVE, 0, OFFSET_BEGINNING)])
        read = 0
        try:
            while not self.stop.is_set() and not self.errors:
                base = self.rounds * self.ROUND
                for i in range(base, base + self.ROUND):
                    producer.produce(
                        LIVE,
                        key=b"%d" % i,
                        value=b"live-%d" % i,
                        partition=0,
                        on_delivery=self._delivered,
                    )
                if producer.flush(30) != 0:
                    self.errors.append(f"round {self.rounds}: records undelivered after 30 s")
                deadline = time.monotonic() + 30
                while read < base + self.ROUND and not self.errors:
                    if time.monotonic() > deadline:
                        self.errors.append(f"round {self.rounds}: read stuck at offset {read}")
                    for msg in consumer.consume(num_messages=500, timeout=0.2):
                        err = msg.error()
                        if err is not None:
                            if err.code() != -191:  # partition EOF
                                self.errors.append(f"consumer: {err}")
                            continue
                        if msg.offset() != read or msg.value() != b"live-%d" % read:
                            self.errors.append(
                                f"read {msg.offset()}:{msg.value()!r}, expected {read}:live-{read}"
                            )
                        read += 1
                self.rounds += 1
        except Exception as exc:  # reported by the last test
            self.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            consumer.close()

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(f"delivery: {err}")


@pytest.fixture(scope="module")
def stored(replog_broker: LocalCluster) -> list[Rec]:
    bootstrap = replog_broker.bootstrap_servers()
    create_topic(bootstrap, STORED, 2)
    records = make_records("stored", 3_000, 2, int(time.time() * 1000) - 1000)
    return produce_confluent(bootstrap, STORED, records, **{"compression.type": "zstd"})


@pytest.fixture(scope="module")
def live(replog_broker: LocalCluster, stored: list[Rec]) -> Iterator[LiveTraffic]:
    bootstrap = replog_broker.bootstrap_servers()
    create_topic(bootstrap, LIVE, 1)
    create_topic(bootstrap, FUZZ, 1)
    traffic = LiveTraffic(bootstrap)
    traffic.start()
    try:
        wait_for(lambda: traffic.rounds >= 1 or traffic.errors, 60, "a first healthy round")
        yield traffic
    finally:
        traffic.stop.set()
        traffic.join(60)


@pytest.fixture
def raw(replog_broker: LocalCluster, live: LiveTraffic) -> Iterator[Raw]:
    conn = Raw(replog_broker.port(0))
    try:
        yield conn
    finally:
        conn.close()
    assert pid_alive(replog_broker.broker_pid(0) or -1), "the broker died"
    assert not live.errors, live.errors[:5]


# -- frames the broker cannot parse ---------------------------------------------------


def test_random_garbage_frames_close_the_connection(replog_broker: LocalCluster, live) -> None:
    rng = random.Random(20240611)
    for _ in range(100):
        conn = Raw(replog_broker.port(0))
        try:
            size = rng.randint(8, 4096)
            body = rng.randbytes(size)
            # An API key no broker serves: the frame is refused whatever follows.
            body = struct.pack(">h", rng.randint(1000, 32767)) + body[2:]
            conn.send(framed(body))
            conn.assert_closed()
        finally:
            conn.close()
    for _ in range(100):
        conn = Raw(replog_broker.port(0))
        try:
            # A real Produce v8 header followed by random bytes: undecodable.
            conn.send(framed(header(0, 8) + rng.randbytes(rng.randint(0, 2048))))
            conn.assert_closed()
        finally:
            conn.close()
    assert log_lines(replog_broker.broker_dir(0), r"closing connection from .*malformed PRODUCE")


def test_truncated_frames(replog_broker: LocalCluster, live) -> None:
    # The size prefix promises more than arrives before the client stops sending.
    conn = Raw(replog_broker.port(0))
    try:
        request = frames.encode_request(0, 8, 1, "bad-input", produce_request(STORED, 0, b""))
        conn.send(request[: len(request) // 2])
        conn.sock.shutdown(socket.SHUT_WR)
        conn.assert_closed()
    finally:
        conn.close()
    # A whole frame whose body stops short of what its fields announce.
    conn = Raw(replog_broker.port(0))
    try:
        batch = simple_batch([b"cut short"] * 3)
        request = frames.encode_request(0, 8, 1, "bad-input", produce_request(STORED, 0, batch))
        payload = request[4:-20]
        conn.send(framed(payload))
        conn.assert_closed()
    finally:
        conn.close()
    # Half a size prefix, then the client goes away.
    conn = Raw(replog_broker.port(0))
    conn.send(b"\x00\x00")
    conn.close()


@pytest.mark.parametrize("size", [SOCKET_REQUEST_MAX_BYTES + 1, 0x7FFFFFFF, -1, -(2**31), 0, 7])
def test_bad_size_prefix_closes_the_connection(replog_broker: LocalCluster, live, size) -> None:
    conn = Raw(replog_broker.port(0))
    try:
        conn.send(struct.pack(">i", size) + header(0, 8))
        conn.assert_closed()
    finally:
        conn.close()
    if size > SOCKET_REQUEST_MAX_BYTES:
        assert log_lines(
            replog_broker.broker_dir(0),
            rf"request size {size} outside \[8, {SOCKET_REQUEST_MAX_BYTES}\]",
        )


def test_unknown_api_key_and_versions(replog_broker: LocalCluster, raw: Raw) -> None:
    for key, version in [(0, 99), (0, 2), (1, 3), (999, 0), (ApiKey.OFFSET_COMMIT, 8)]:
        conn = Raw(replog_broker.port(0))
        try:
            conn.send(framed(header(key, version) + b"\x00" * 16))
            conn.assert_closed()
        finally:
            conn.close()
    # ApiVersions at a version the broker does not know: a v0 answer, UNSUPPORTED_VERSION,
    # and the connection stays usable (KIP-511).
    raw.send(framed(header(ApiKey.API_VERSIONS, 99, correlation_id=41) + b"\x00" * 8))
    frame = raw.read_frame()
    assert frame is not None
    correlation_id, body = frames.decode_response(ApiKey.API_VERSIONS, 0, frame)
    assert correlation_id == 41
    assert body.error_code == ErrorCode.unsupported_version
    advertised = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in body.api_keys}
    assert advertised[ApiKey.PRODUCE] == apis.CLIENT_API_VERSIONS[ApiKey.PRODUCE]
    response = raw.request(api_versions_request())
    assert response.error_code == ErrorCode.none


_uvarint = wire.uvarint


def _compact(data: bytes) -> bytes:
    return wire.uvarint(len(data) + 1) + data


def api_versions_v3_payload(header_tags: bytes, body: bytes, correlation_id: int = 11) -> bytes:
    """ApiVersions v3 by hand: header v2 (tagged fields) and a flexible body."""
    return header(ApiKey.API_VERSIONS, 3, correlation_id) + header_tags + body


def test_unknown_tagged_fields_are_skipped(raw: Raw) -> None:
    # A newer client adds tagged fields the broker does not know, in the header and
    # the body (tag 99 with 2 bytes; tag 1000 with 300): Kafka's rule is to skip them.
    tags = b"\x02" + _uvarint(99) + b"\x02\xab\xcd" + _uvarint(1000) + _uvarint(300) + b"x" * 300
    body = _compact(b"replog-test") + _compact(b"1.0") + tags
    raw.send(framed(api_versions_v3_payload(tags, body)))
    frame = raw.read_frame()
    assert frame is not None, "the broker closed the connection over unknown tagged fields"
    correlation_id, response = frames.decode_response(ApiKey.API_VERSIONS, 3, frame)
    assert correlation_id == 11
    assert response.error_code == ErrorCode.none
    assert {int(k.api_key) for k in response.api_keys} >= {ApiKey.PRODUCE, ApiKey.FETCH}


MALFORMED_FLEXIBLE = {
    # six continuation bytes: longer than the 5 bytes a Kafka varint may take
    "varint overflow": b"\x00" + _compact(b"x") + _compact(b"1") + b"\xff" * 5 + b"\x01",
    # compact length 0 means null, which the schema forbids for this string
    "negative compact length": b"\x00" + b"\x00" + _compact(b"1") + b"\x00",
    # a tagged field announcing 50 bytes that ends after 2
    "truncated tagged field": b"\x00" + _compact(b"x") + _compact(b"1") + b"\x01\x63\x32ab",
    # a tag count of 3 with nothing after it
    "missing tags": b"\x03",
}


@pytest.mark.parametrize("name", sorted(MALFORMED_FLEXIBLE))
def test_malformed_flexible_encodings_close_only_that_connection(
    replog_broker: LocalCluster, raw: Raw, name: str
) -> None:
    conn = Raw(replog_broker.port(0))
    try:
        conn.send(framed(api_versions_v3_payload(b"", MALFORMED_FLEXIBLE[name])))
        conn.assert_closed()
    finally:
        conn.close()
    assert log_lines(
        replog_broker.broker_dir(0), r"closing connection from .*malformed API_VERSIONS v3"
    )
    # Another connection is answered as before.
    assert raw.request(api_versions_request()).error_code == ErrorCode.none


# -- well-formed requests with bad contents: Kafka error codes ------------------------


@pytest.mark.parametrize("version", [3, 8])
def test_corrupt_crc_is_corrupt_message(raw: Raw, version: int) -> None:
    batch = bytearray(simple_batch([b"payload-%d" % i for i in range(10)]))
    batch[-3] ^= 0x40  # inside the last record: the header still parses, the CRC fails
    assert produce_error(raw, STORED, 0, bytes(batch), version) == ErrorCode.corrupt_message


def test_malformed_batches_are_corrupt_message(raw: Raw) -> None:
    good = simple_batch([b"a", b"b", b"c"])
    wrong_magic = bytearray(good)
    wrong_magic[16] = 1
    truncated = good[:-5]
    short = good[:40]
    empty_records = b""
    for records in (bytes(wrong_magic), truncated, short, good + b"\x00" * 7, empty_records):
        assert produce_error(raw, STORED, 1, records) == ErrorCode.corrupt_message, records[:20]


def test_oversize_batch_is_message_too_large(raw: Raw) -> None:
    batch = simple_batch([b"x" * (MESSAGE_MAX_BYTES + 100)])
    assert produce_error(raw, STORED, 0, batch) == ErrorCode.message_too_large
    # The connection is still good afterwards.
    assert raw.request(api_versions_request()).error_code == ErrorCode.none


@pytest.mark.parametrize("partition", [-1, -(2**31), 2, 1000])
def test_bad_partitions_are_unknown(raw: Raw, partition: int) -> None:
    batch = simple_batch([b"nowhere"])
    assert produce_error(raw, STORED, partition, batch) == ErrorCode.unknown_topic_or_partition

    fetched = raw.request(fetch_request(STORED, partition))
    [topic] = fetched.responses
    [part] = topic.partitions
    assert part.error_code == ErrorCode.unknown_topic_or_partition
    assert part.records in (None, b"")

    listed = raw.request(list_offsets_request(STORED, partition))
    [topic] = listed.topics
    [part] = topic.partitions
    assert part.error_code == ErrorCode.unknown_topic_or_partition


def test_unknown_topic_is_unknown(raw: Raw) -> None:
    batch = simple_batch([b"nowhere"])
    assert produce_error(raw, "no-such-topic", 0, batch) == ErrorCode.unknown_topic_or_partition


def test_fetch_out_of_range(raw: Raw, stored: list[Rec]) -> None:
    ends = end_offsets(stored)
    for offset in (ends[0] + 1, -5, 2**62):
        fetched = raw.request(fetch_request(STORED, 0, offset))
        [part] = fetched.responses[0].partitions
        assert part.error_code == ErrorCode.offset_out_of_range, offset
        assert int(part.high_watermark) == ends[0]


def test_fuzzed_produce_requests(replog_broker: LocalCluster, live) -> None:
    """Valid Produce requests with 1-3 flipped bytes: answered or closed, never a crash;
    whatever the broker accepted reads back as valid batches with dense offsets."""
    rng = random.Random(7)
    accepted = 0
    conn: Raw | None = None
    for n in range(300):
        if conn is None:
            conn = Raw(replog_broker.port(0))
        values = [b"fuzz-%d-%d" % (n, i) for i in range(rng.randint(1, 5))]
        frame = bytearray(
            frames.encode_request(
                0, 8, 1000 + n, "bad-input", produce_request(FUZZ, 0, simple_batch(values))
            )
        )
        for _ in range(rng.randint(1, 3)):
            frame[rng.randrange(4, len(frame))] ^= 1 << rng.randrange(8)
        conn.send(bytes(frame))
        # A well-formed request right behind it: its answer comes after the fuzzed one's
        # (if the fuzzed one is answered at all: acks may have become 0).
        conn.correlation_id = 50_000 + n
        conn.send(
            frames.encode_request(
                ApiKey.API_VERSIONS, 3, conn.correlation_id, "bad-input", api_versions_request()
            )
        )
        while True:
            response = conn.read_frame()
            if response is None:  # closed: fine, open another connection
                conn.close()
                conn = None
                break
            (correlation_id,) = struct.unpack_from(">i", response)
            if correlation_id == conn.correlation_id:
                break
            if correlation_id == 1000 + n:
                try:
                    _, body = frames.decode_response(0, 8, response)
                except Exception:
                    continue  # the version was flipped too: answered in another layout
                for topic in body.responses:
                    for part in topic.partition_responses:
                        accepted += int(part.error_code) == ErrorCode.none
    if conn is not None:
        conn.close()
    bootstrap = replog_broker.bootstrap_servers()
    _, high = watermarks_of(bootstrap, FUZZ, 0)
    assert high >= accepted
    read = consume_confluent(bootstrap, FUZZ, {0: high}) if high else []
    assert [r.offset for r in read] == list(range(high))
    assert all(r.value is not None and r.value.startswith(b"fuzz-") for r in read)


def watermarks_of(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    consumer = consumer_confluent(bootstrap)
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=20)
    finally:
        consumer.close()


# -- afterwards ---------------------------------------------------------------------------


def test_healthy_client_carried_on_and_stored_data_is_intact(
    replog_broker: LocalCluster, live: LiveTraffic, stored: list[Rec]
) -> None:
    rounds = live.rounds
    wait_for(lambda: live.rounds >= rounds + 2 or live.errors, 60, "two more healthy rounds")
    assert not live.errors, live.errors[:5]
    assert pid_alive(replog_broker.broker_pid(0) or -1)
    bootstrap = replog_broker.bootstrap_servers()
    read = consume_confluent(bootstrap, STORED, end_offsets(stored))
    assert_same_records(read, stored, "records stored before the bad input")
    # Nothing the bad requests sent was appended anywhere.
    for partition, end in end_offsets(stored).items():
        consumer = consumer_confluent(bootstrap)
        try:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(STORED, partition), timeout=20
            )
        finally:
            consumer.close()
        assert (low, high) == (0, end)
