"""Topic ids (KIP-516) without processes: Kafka's Uuid text, the topic znode's ``topic_id``,
``partition.metadata`` and its consistency rule, and the log manager keeping the file."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replog.protocol.errors import InconsistentTopicId
from replog.protocol.kafka_uuid import (
    METADATA_TOPIC_ID,
    ZERO_UUID,
    InvalidUuid,
    random_uuid,
    uuid_from_string,
    uuid_to_string,
)
from replog.storage.log_config import LogConfig
from replog.storage.log_manager import LogManager
from replog.storage.partition_metadata import (
    PARTITION_METADATA_FILE,
    PartitionMetadataError,
    decode_partition_metadata,
    encode_partition_metadata,
    has_consistent_topic_id,
    read_partition_metadata,
    write_partition_metadata,
)
from replog.zk import data as zd

topic_ids = st.uuids().filter(lambda u: u not in (ZERO_UUID, METADATA_TOPIC_ID))


def java_uuid_to_string(value: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString`` spelled out: ``Base64.getUrlEncoder().withoutPadding()``
    over the most then the least significant 64 bits, big-endian."""
    raw = (value.int >> 64).to_bytes(8, "big") + (value.int & (2**64 - 1)).to_bytes(8, "big")
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


# --- Kafka's Uuid ----------------------------------------------------------------------


@given(st.uuids())
def test_uuid_text_round_trips_in_kafkas_form(value: uuid.UUID) -> None:
    text = uuid_to_string(value)
    assert text == java_uuid_to_string(value)
    assert len(text) == 22 and "=" not in text
    assert uuid_from_string(text) == value
    assert uuid_from_string(text + "==") == value  # Java's decoder takes padding too


def test_reserved_uuids_have_kafkas_text() -> None:
    assert uuid_to_string(ZERO_UUID) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert uuid_to_string(METADATA_TOPIC_ID) == "AAAAAAAAAAAAAAAAAAAAAQ"


@pytest.mark.parametrize(
    "text", ["", "AAAA", "A" * 25, "AAAAAAAAAAAAAAAA+AAAAA", "AAAAAAAAAAAAAAAAAAAA/A", "é" * 22]
)
def test_uuid_from_string_rejects_what_kafka_rejects(text: str) -> None:
    with pytest.raises(InvalidUuid):
        uuid_from_string(text)


def test_random_uuid_skips_reserved_ids_and_leading_dashes() -> None:
    dash = uuid.UUID(bytes=b"\xf8" + bytes(15))  # text starts with "-"
    assert uuid_to_string(dash).startswith("-")
    good = uuid.UUID(int=12345 << 64)
    draws = iter([ZERO_UUID, METADATA_TOPIC_ID, dash, good])
    assert random_uuid(lambda: next(draws)) == good
    assert next(draws, None) is None  # every rejected draw was consumed, in order
    assert random_uuid() not in (ZERO_UUID, METADATA_TOPIC_ID)


# --- the topic znode ---------------------------------------------------------------------


@given(
    assignment=st.dictionaries(
        st.integers(0, 1000), st.lists(st.integers(0, 100), min_size=1, max_size=4), max_size=8
    ),
    topic_id=topic_ids,
)
def test_topic_znode_carries_the_id_as_kafka_writes_it(
    assignment: dict[int, list[int]], topic_id: uuid.UUID
) -> None:
    data = zd.encode_topic_assignment(assignment, topic_id)
    assert json.loads(data)["topic_id"] == java_uuid_to_string(topic_id)
    assert json.loads(data)["version"] == 3
    assert zd.decode_topic_id(data) == topic_id
    assert zd.decode_topic_assignment("t", data) == assignment
    # A znode written without an id (old tools) gets one added, the rest kept.
    bare = zd.encode_topic_assignment(assignment)
    assert zd.decode_topic_id(bare) is None
    patched = zd.with_topic_id(bare, topic_id)
    assert patched == data


def test_with_topic_id_keeps_every_field_of_an_old_znode() -> None:
    old = b'{"version":1,"partitions":{"0":[1,2]},"custom":{"a":1}}'
    patched = json.loads(zd.with_topic_id(old, uuid.UUID(int=7 << 64)))
    assert patched == {
        "version": 3,
        "partitions": {"0": [1, 2]},
        "custom": {"a": 1},
        "adding_replicas": {},
        "removing_replicas": {},
        "topic_id": java_uuid_to_string(uuid.UUID(int=7 << 64)),
    }
    with pytest.raises(ValueError):
        zd.encode_topic_assignment({0: [1]}, ZERO_UUID)


# --- partition.metadata ------------------------------------------------------------------


@given(topic_ids)
def test_partition_metadata_round_trips_in_kafkas_format(topic_id: uuid.UUID) -> None:
    data = encode_partition_metadata(topic_id)
    assert data == f"version: 0\ntopic_id: {java_uuid_to_string(topic_id)}\n".encode()
    assert decode_partition_metadata(data) == topic_id


def test_partition_metadata_reads_what_kafka_writes() -> None:
    # Kafka's PartitionMetadataFile writes no final newline; its reader splits on ":\s+".
    text = "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ"
    assert decode_partition_metadata(text.encode()) == METADATA_TOPIC_ID
    assert decode_partition_metadata(b"version:  1\ntopic_id:\tAAAAAAAAAAAAAAAAAAAAAQ\n") == (
        METADATA_TOPIC_ID
    )


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"version: 0\n",
        b"version: -1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n",
        b"version: x\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n",
        b"versions: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n",
        b"version: 0\ntopicid: AAAAAAAAAAAAAAAAAAAAAQ\n",
        b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n",  # the zero Uuid
        b"version: 0\ntopic_id: not-a-uuid\n",
        b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\nextra: 1\n",
        b"version:0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n",
        b"\xff\xfe",
    ],
)
def test_partition_metadata_rejects_malformed_files(data: bytes) -> None:
    with pytest.raises(PartitionMetadataError):
        decode_partition_metadata(data)


def test_partition_metadata_file_io(tmp_path: Path) -> None:
    assert read_partition_metadata(tmp_path) is None
    topic_id = uuid.UUID(int=99 << 64 | 5)
    write_partition_metadata(tmp_path, topic_id)
    assert read_partition_metadata(tmp_path) == topic_id
    assert sorted(p.name for p in tmp_path.iterdir()) == [PARTITION_METADATA_FILE]  # no .tmp
    (tmp_path / PARTITION_METADATA_FILE).write_bytes(b"garbage")
    with pytest.raises(PartitionMetadataError, match="partition.metadata"):
        read_partition_metadata(tmp_path)


@pytest.mark.parametrize(
    ("requested", "on_disk", "consistent"),
    [
        (None, None, True),
        (None, uuid.UUID(int=2), True),  # a request without an id (old controller)
        (uuid.UUID(int=2), None, True),  # a log without an id yet: it takes this one
        (uuid.UUID(int=2), uuid.UUID(int=2), True),
        (uuid.UUID(int=2), uuid.UUID(int=3), False),  # another topic of the same name
    ],
)
def test_consistent_topic_id_rule(
    requested: uuid.UUID | None, on_disk: uuid.UUID | None, consistent: bool
) -> None:
    assert has_consistent_topic_id(requested, on_disk) is consistent


# --- the log manager ---------------------------------------------------------------------


def test_log_manager_records_the_id_once_and_reads_it_at_startup(tmp_path: Path) -> None:
    config = LogConfig.from_properties({})
    first, second = uuid.UUID(int=10 << 64), uuid.UUID(int=11 << 64)
    manager = LogManager([tmp_path], config)
    manager.startup(0)
    log = manager.get_or_create_log("orders", 0, config, 0)
    manager.get_or_create_log("orders", 1, config, 0)
    assert manager.topic_id("orders", 0) is None
    manager.assign_topic_id("orders", 0, first)
    manager.assign_topic_id("orders", 0, first)  # the same id again is fine
    assert read_partition_metadata(log.dir) == first
    with pytest.raises(InconsistentTopicId):
        manager.assign_topic_id("orders", 0, second)
    assert read_partition_metadata(log.dir) == first  # never overwritten
    manager.shutdown()

    restarted = LogManager([tmp_path], config)
    restarted.startup(0)
    assert restarted.topic_id("orders", 0) == first
    assert restarted.topic_id("orders", 1) is None
    restarted.delete_log("orders", 0)
    assert restarted.topic_id("orders", 0) is None
    # The name is free again: a new log of it takes the new topic's id.
    restarted.get_or_create_log("orders", 0, config, 0)
    restarted.assign_topic_id("orders", 0, second)
    assert restarted.topic_id("orders", 0) == second
    restarted.shutdown()


def test_a_torn_partition_metadata_after_a_crash_reads_as_none_and_is_written_again(
    tmp_path: Path,
) -> None:
    # assign_topic_id writes without fsync (flush_dirty_logs fsyncs later); a crash in
    # between may leave the file empty or torn. It must read as "no id yet", and the
    # next LeaderAndIsr's id is taken and written.
    config = LogConfig.from_properties({})
    topic_id = uuid.UUID(int=12 << 64)
    manager = LogManager([tmp_path], config)
    manager.startup(0)
    log = manager.get_or_create_log("orders", 0, config, 0)
    manager.assign_topic_id("orders", 0, topic_id)
    manager.flush_dirty_logs()
    assert read_partition_metadata(log.dir) == topic_id
    (log.dir / PARTITION_METADATA_FILE).write_bytes(b"version: 0\ntopic_id: AAAA")  # torn

    restarted = LogManager([tmp_path], config)  # no shutdown: a crash
    restarted.startup(0)
    assert restarted.topic_id("orders", 0) is None
    restarted.assign_topic_id("orders", 0, topic_id)
    restarted.shutdown()
    assert read_partition_metadata(log.dir) == topic_id
