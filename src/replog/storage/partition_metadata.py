"""``partition.metadata``: the topic id (KIP-516) a partition directory belongs to.

Format (Kafka ``PartitionMetadataFile``)::

    version: 0
    topic_id: <22-char base64 Kafka Uuid>

Kafka writes it when a replica first learns its topic's id and reads it when the log
loads; a LeaderAndIsr naming another id for the partition is refused with
INCONSISTENT_TOPIC_ID, so the log of a deleted topic is never taken for the log of a
new topic created under the same name. The reader accepts what Kafka accepts: any
version from 0 on, whitespace after each colon, a final newline or none; the all-zero
id is not a topic id.

The codec and the rule are pure functions; ``read_partition_metadata`` and
``write_partition_metadata`` are the only IO (the write is atomic: tmp file, fsync,
rename, fsync of the directory).
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

from replog.protocol.kafka_uuid import ZERO_UUID, InvalidUuid, uuid_from_string, uuid_to_string
from replog.storage.checkpoints import atomic_write, fsync_dir

PARTITION_METADATA_FILE = "partition.metadata"
CURRENT_VERSION = 0

_LINE = re.compile(r"^(?P<key>[^:\s]+):\s+(?P<value>\S+)\s*$")


class PartitionMetadataError(ValueError):
    """A ``partition.metadata`` file that is not in Kafka's format."""


def encode_partition_metadata(topic_id: uuid.UUID) -> bytes:
    if topic_id == ZERO_UUID:
        raise ValueError("the zero Uuid is not a topic id")
    return f"version: {CURRENT_VERSION}\ntopic_id: {uuid_to_string(topic_id)}\n".encode("ascii")


def decode_partition_metadata(data: bytes) -> uuid.UUID:
    """The topic id in a ``partition.metadata`` file's bytes."""
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise PartitionMetadataError(f"not text: {data[:80]!r}") from exc
    if len(lines) != 2:
        raise PartitionMetadataError(f"expected 2 lines, found {len(lines)}: {data[:80]!r}")
    version_line, id_line = (_LINE.match(line) for line in lines)
    if version_line is None or version_line["key"] != "version":
        raise PartitionMetadataError(f"malformed version line {lines[0]!r}")
    if not version_line["value"].isdigit() or int(version_line["value"]) < CURRENT_VERSION:
        raise PartitionMetadataError(f"unrecognized version {version_line['value']!r}")
    if id_line is None or id_line["key"] != "topic_id":
        raise PartitionMetadataError(f"malformed topic id line {lines[1]!r}")
    try:
        topic_id = uuid_from_string(id_line["value"])
    except InvalidUuid as exc:
        raise PartitionMetadataError(str(exc)) from exc
    if topic_id == ZERO_UUID:
        raise PartitionMetadataError("the zero Uuid is not a topic id")
    return topic_id


def has_consistent_topic_id(requested: uuid.UUID | None, on_disk: uuid.UUID | None) -> bool:
    """Kafka ``ReplicaManager.hasConsistentTopicId``: a request without an id, or a log
    that has none yet, agree with anything; otherwise the two ids must be equal."""
    return requested is None or on_disk is None or requested == on_disk


def read_partition_metadata(partition_dir: Path) -> uuid.UUID | None:
    """The topic id recorded in ``partition_dir``, or None if it has no file."""
    try:
        data = (partition_dir / PARTITION_METADATA_FILE).read_bytes()
    except FileNotFoundError:
        return None
    try:
        return decode_partition_metadata(data)
    except PartitionMetadataError as exc:
        raise PartitionMetadataError(f"{partition_dir / PARTITION_METADATA_FILE}: {exc}") from exc


def write_partition_metadata(
    partition_dir: Path, topic_id: uuid.UUID, *, durable: bool = True
) -> None:
    """Record ``topic_id`` in ``partition_dir``, atomically; ``durable`` with fsyncs.

    A non-durable write is safe to read back after a crash: the file validates itself
    (a torn one does not decode and is ignored, as a missing one), and the next
    LeaderAndIsr writes it again.
    """
    atomic_write(
        partition_dir / PARTITION_METADATA_FILE,
        encode_partition_metadata(topic_id),
        durable=durable,
    )


def flush_partition_metadata(partition_dir: Path) -> None:
    """fsync a non-durably written ``partition.metadata`` and its directory entry."""
    fd = os.open(partition_dir / PARTITION_METADATA_FILE, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(partition_dir)
