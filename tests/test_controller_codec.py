"""The hand encoders of ``replog.protocol.controller_codec`` write exactly kio's bytes
(Hypothesis over every field), and the frames they make decode as kio's would."""

from __future__ import annotations

import io
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer

from replog.protocol import controller_codec, frames
from replog.protocol.controller_schemas import (
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    UpdateMetadataRequest,
)

ENCODERS = [
    (LeaderAndIsrRequest, controller_codec.encode_leader_and_isr_request),
    (UpdateMetadataRequest, controller_codec.encode_update_metadata_request),
    (LeaderAndIsrResponse, controller_codec.encode_leader_and_isr_response),
]


def _kio(cls: type, value: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, value)
    return buffer.getvalue()


@pytest.mark.parametrize(("cls", "encode"), ENCODERS, ids=lambda c: getattr(c, "__name__", ""))
def test_same_bytes_as_kio(cls: type, encode: Any) -> None:
    @settings(max_examples=150, deadline=None)
    @given(st.from_type(cls))
    def check(value: Any) -> None:
        assert encode(value) == _kio(cls, value)
        assert encode(value) == _kio(cls, value)  # again, from the caches

    check()


@settings(max_examples=40, deadline=None)
@given(st.from_type(LeaderAndIsrRequest), st.integers(0, 2**31 - 1), st.none() | st.text())
def test_request_frame_decodes(body: LeaderAndIsrRequest, correlation_id: int, client: Any) -> None:
    """``frames.encode_request`` takes the hand path for these types; the broker's
    decoder reads the frame back (header v2, the body kio would read)."""
    frame = frames.encode_request(4, 6, correlation_id, client, body)
    assert frames.SIZE.unpack_from(frame, 0)[0] == len(frame) - 4
    request = frames.decode_request(frame[4:])
    assert (request.api_key, request.api_version) == (4, 6)
    assert request.correlation_id == correlation_id
    assert request.client_id == client
    assert _kio(LeaderAndIsrRequest, request.body) == _kio(LeaderAndIsrRequest, body)


@settings(max_examples=40, deadline=None)
@given(st.from_type(LeaderAndIsrResponse), st.integers(0, 2**31 - 1))
def test_response_frame_decodes(body: LeaderAndIsrResponse, correlation_id: int) -> None:
    frame = frames.encode_response(4, correlation_id, body)
    assert frames.SIZE.unpack_from(frame, 0)[0] == len(frame) - 4
    got_id, decoded = frames.decode_response(4, 6, frame[4:])
    assert got_id == correlation_id
    assert _kio(LeaderAndIsrResponse, decoded) == _kio(LeaderAndIsrResponse, body)
