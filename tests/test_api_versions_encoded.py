"""ApiVersions is answered from bytes encoded once per version: they must be the bytes
kio's writer makes of the answer, for every version served, with header v0 (KIP-511)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from replog.protocol import apis, frames
from replog.protocol.apis import ApiKey
from replog.server.handlers.metadata import _api_versions_body, _api_versions_encoded

LO, HI = apis.supported_versions()[ApiKey.API_VERSIONS]


@pytest.mark.parametrize("version", range(LO, HI + 1))
def test_the_pre_encoded_answer_is_kios_encoding(version: int) -> None:
    for correlation_id in (0, 7, 2**31 - 1):
        expected = frames.encode_response(
            ApiKey.API_VERSIONS, correlation_id, _api_versions_body(version, ErrorCode.none)
        )
        parts = frames.encode_response_parts(
            ApiKey.API_VERSIONS, correlation_id, _api_versions_encoded(version)
        )
        assert b"".join(parts) == expected
