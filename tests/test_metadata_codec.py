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
