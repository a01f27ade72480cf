"""Round-trip every controller RPC schema through kio's writer and reader (Hypothesis)."""

from __future__ import annotations

import io
import uuid
from dataclasses import fields, is_dataclass, replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.constants import uuid_zero

from replog.protocol.controller_schemas import (
    API_VERSIONS,
    REQUESTS,
    RESPONSES,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrTopicState,
    StopReplicaPartitionState,
    StopReplicaRequest,
    StopReplicaTopicState,
)
from replog.protocol.controller_schemas.controlled_shutdown import REMAINING_PARTITIONS

ALL_ENTITIES = [
    cls for by_version in (*REQUESTS.values(), *RESPONSES.values()) for cls in by_version.values()
]


def _no_zero_uuid(value: Any) -> Any:
    """kio reads the all-zero UUID back as None; normalise so equality is meaningful."""
    if isinstance(value, tuple):
        return tuple(_no_zero_uuid(v) for v in value)
    if is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in fields(value):
            v = getattr(value, f.name)
            if v == uuid_zero:
                changes[f.name] = None
            elif isinstance(v, tuple) or is_dataclass(v):
                changes[f.name] = _no_zero_uuid(v)
        return replace(value, **changes)
    return value


def roundtrip(cls: type, instance: Any) -> Any:
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, instance)
    data = buffer.getvalue()
    decoded, size = entity_reader(cls)(data, 0)
    assert size == len(data)
    return decoded


@pytest.mark.parametrize("cls", ALL_ENTITIES, ids=lambda c: c.__name__)
def test_roundtrip(cls: type) -> None:
    @settings(max_examples=60, deadline=None)
    @given(st.from_type(cls))
    def check(instance: Any) -> None:
        instance = _no_zero_uuid(instance)
        assert roundtrip(cls, instance) == instance

    check()


def test_registry_is_consistent() -> None:
    assert set(REQUESTS) == set(RESPONSES) == set(API_VERSIONS) == {4, 5, 6, 7}
    assert API_VERSIONS[7] == (1, 3)
    for api_key, (low, high) in API_VERSIONS.items():
        for version in range(low, high + 1):
            request, response = REQUESTS[api_key][version], RESPONSES[api_key][version]
            assert request.__api_key__ == response.__api_key__ == api_key
            assert request.__version__ == response.__version__ == version
            # ControlledShutdown is flexible from v3 (Kafka's flexibleVersions "3+").
            flexible = api_key != 7 or version >= 3
            assert request.__flexible__ == response.__flexible__ == flexible


def test_controlled_shutdown_known_bytes() -> None:
    """v2: broker id and epoch; v3 adds the tagged-field section (0) after them, and
    its answer uses compact arrays and strings (length + 1)."""
    v2 = REQUESTS[7][2](broker_id=3, broker_epoch=0x1122)
    v3 = REQUESTS[7][3](broker_id=3, broker_epoch=0x1122)
    v1 = REQUESTS[7][1](broker_id=3)
    assert _encode(REQUESTS[7][1], v1) == bytes.fromhex("00000003")
    assert _encode(REQUESTS[7][2], v2) == bytes.fromhex("000000030000000000001122")
    assert _encode(REQUESTS[7][3], v3) == bytes.fromhex("00000003000000000000112200")
    answer_cls = RESPONSES[7][3]
    answer = answer_cls(
        error_code=ErrorCode.stale_broker_epoch,
        remaining_partitions=(REMAINING_PARTITIONS[3](topic_name="t", partition_index=1),),
    )
    assert _encode(answer_cls, answer) == bytes.fromhex("004d020274000000010000")


def _encode(cls: type, value: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, value)
    return buffer.getvalue()


def test_leader_and_isr_known_bytes() -> None:
    """A hand-checked encoding: compact arrays are length+1, tagged-field sections are 0."""
    request = LeaderAndIsrRequest(
        controller_id=1,
        controller_epoch=2,
        broker_epoch=3,
        type=0,
        topic_states=(
            LeaderAndIsrTopicState(
                topic_name="t",
                topic_id=None,
                partition_states=(
                    LeaderAndIsrPartitionState(
                        partition_index=0,
                        controller_epoch=2,
                        leader=1,
                        leader_epoch=5,
                        isr=(1, 2),
                        zk_version=7,
                        replicas=(1, 2),
                        is_new=True,
                    ),
                ),
            ),
        ),
        live_leaders=(),
    )
    buffer = io.BytesIO()
    entity_writer(LeaderAndIsrRequest)(buffer, request)
    data = buffer.getvalue()
    expected = (
        b"\x00\x00\x00\x01"  # controller_id
        b"\x00\x00\x00\x02"  # controller_epoch
        b"\x00\x00\x00\x00\x00\x00\x00\x03"  # broker_epoch
        b"\x00"  # type
        b"\x02"  # one topic
        b"\x02t"  # compact string "t"
        + bytes(16)  # zero uuid
        + b"\x02"  # one partition
        b"\x00\x00\x00\x00"  # partition_index
        b"\x00\x00\x00\x02"  # controller_epoch
        b"\x00\x00\x00\x01"  # leader
        b"\x00\x00\x00\x05"  # leader_epoch
        b"\x03\x00\x00\x00\x01\x00\x00\x00\x02"  # isr
        b"\x00\x00\x00\x07"  # zk_version
        b"\x03\x00\x00\x00\x01\x00\x00\x00\x02"  # replicas
        b"\x01"  # adding_replicas (empty)
        b"\x01"  # removing_replicas (empty)
        b"\x01"  # is_new
        b"\x00"  # leader_recovery_state
        b"\x00"  # partition tagged fields
        b"\x00"  # topic tagged fields
        b"\x01"  # live_leaders (empty)
        b"\x00"  # request tagged fields
    )
    assert data == expected
    assert roundtrip(LeaderAndIsrRequest, request) == request


def test_stop_replica_delete_flag_survives() -> None:
    topic_id_free = StopReplicaRequest(
        controller_id=0,
        controller_epoch=1,
        broker_epoch=10,
        topic_states=(
            StopReplicaTopicState(
                topic_name="gone",
                partition_states=(
                    StopReplicaPartitionState(
                        partition_index=3, leader_epoch=-2, delete_partition=True
                    ),
                    StopReplicaPartitionState(partition_index=4, delete_partition=False),
                ),
            ),
        ),
    )
    decoded = roundtrip(StopReplicaRequest, topic_id_free)
    states = decoded.topic_states[0].partition_states
    assert [(s.partition_index, s.leader_epoch, s.delete_partition) for s in states] == [
        (3, -2, True),
        (4, -1, False),
    ]


def test_topic_id_roundtrip() -> None:
    topic_id = uuid.UUID("12345678-1234-5678-1234-567812345678")
    state = LeaderAndIsrTopicState(topic_name="x", topic_id=topic_id, partition_states=())
    assert roundtrip(LeaderAndIsrTopicState, state).topic_id == topic_id
