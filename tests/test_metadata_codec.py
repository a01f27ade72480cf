"""``replog.protocol.metadata_codec`` writes exactly kio's bytes for every flexible
Metadata response version (Hypothesis over every field), and ``frames`` takes it for
those versions: the frame decodes as kio's would."""

from __future__ import annotations

import io
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer

from replog.protocol import apis, frames, metadata_codec

VERSIONS = range(metadata_codec.FIRST_FLEXIBLE, 14)


def _kio(cls: type, value: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, value)
    return buffer.getvalue()


def test_every_flexible_version_served_has_an_encoder() -> None:
    top = apis.supported_versions()[apis.ApiKey.METADATA][1]
    assert top == max(VERSIONS)
    for version in range(metadata_codec.FIRST_FLEXIBLE, top + 1):
        assert apis.response_schema(apis.ApiKey.METADATA, version) in frames.RESPONSE_ENCODERS


@pytest.mark.parametrize("version", VERSIONS)
def test_same_bytes_as_kio(version: int) -> None:
    cls = apis.response_schema(apis.ApiKey.METADATA, version)
    encode = metadata_codec.RESPONSE_ENCODERS[cls]

    @settings(max_examples=40, deadline=None)
    @given(st.from_type(cls))
    def check(value: Any) -> None:
        try:
            expected = _kio(cls, value)
        except (TypeError, ValueError):  # kio refuses it (a null where v9 has none)
            return
        assert encode(value) == expected
        assert encode(value) == expected  # again, from the caches

    check()


@pytest.mark.parametrize("version", [9, 12, 13])
def test_response_frame_decodes(version: int) -> None:
    cls = apis.response_schema(apis.ApiKey.METADATA, version)

    @settings(max_examples=15, deadline=None)
    @given(st.from_type(cls), st.integers(0, 2**31 - 1))
    def check(body: Any, correlation_id: int) -> None:
        try:
            _kio(cls, body)
        except (TypeError, ValueError):
            return
        frame = frames.encode_response(apis.ApiKey.METADATA, correlation_id, body)
        assert frames.SIZE.unpack_from(frame, 0)[0] == len(frame) - 4
        got_id, decoded = frames.decode_response(apis.ApiKey.METADATA, version, frame[4:])
        assert got_id == correlation_id
        assert _kio(cls, decoded) == _kio(cls, body)

    check()


def _light(value: Any) -> metadata_codec.MetadataResponse:
    """kio's response as the handler's plain objects, fields a version lacks defaulted."""
    return metadata_codec.MetadataResponse(
        throttle_time=value.throttle_time,
        brokers=[
            metadata_codec.MetadataBroker(b.node_id, b.host, b.port, b.rack) for b in value.brokers
        ],
        cluster_id=value.cluster_id,
        controller_id=value.controller_id,
        topics=[
            metadata_codec.MetadataTopic(
                error_code=t.error_code,
                name=t.name,
                topic_id=getattr(t, "topic_id", None),
                is_internal=t.is_internal,
                partitions=[
                    metadata_codec.MetadataPartition(
                        p.error_code,
                        p.partition_index,
                        p.leader_id,
                        p.leader_epoch,
                        p.replica_nodes,
                        p.isr_nodes,
                        p.offline_replicas,
                    )
                    for p in t.partitions
                ],
                topic_authorized_operations=t.topic_authorized_operations,
            )
            for t in value.topics
        ],
        cluster_authorized_operations=getattr(value, "cluster_authorized_operations", -1),
        error_code=getattr(value, "error_code", 0),
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_the_handlers_plain_objects_encode_as_kio_writes(version: int) -> None:
    """The Metadata handler builds MetadataResponse (not kio's objects) for the flexible
    versions: encode(version, it) is kio's bytes for the same answer."""
    cls = apis.response_schema(apis.ApiKey.METADATA, version)

    @settings(max_examples=30, deadline=None)
    @given(st.from_type(cls))
    def check(value: Any) -> None:
        try:
            expected = _kio(cls, value)
        except (TypeError, ValueError):
            return
        assert metadata_codec.encode(version, _light(value)) == expected

    check()
