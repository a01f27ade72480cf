"""README's "Kafka APIs served" table says exactly what a running broker answers to ApiVersions.

The table is parsed from README.md (rows ``| API | key | versions | notes |``, versions
``lo–hi`` or a single ``v``) and compared with the ``api_keys`` of a real broker's
ApiVersions response, at the oldest and the newest ApiVersions version it serves.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsRequestV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.errors import ErrorCode

from replog.cli.api_versions_cmd import update_readme
from replog.protocol.apis import ApiKey
from replog.protocol.client import KafkaConnection

README = Path(__file__).resolve().parent.parent / "README.md"
SECTION = "## Kafka APIs served"
ROW = re.compile(
    r"^\|\s*(?P<name>[A-Za-z]+)\s*\|\s*(?P<key>\d+)\s*\|\s*(?P<lo>\d+)(?:\s*[–-]\s*(?P<hi>\d+))?\s*\|"
)


def readme_table() -> dict[int, tuple[str, int, int]]:
    """api key -> (name, min version, max version) from README's table."""
    text = README.read_text()
    start = text.index(SECTION) + len(SECTION)
    end = text.find("\n## ", start)
    section = text[start : end if end >= 0 else len(text)]
    table: dict[int, tuple[str, int, int]] = {}
    for line in section.splitlines():
        m = ROW.match(line.strip())
        if m is None:
            continue
        key = int(m["key"])
        assert key not in table, f"README lists api key {key} twice"
        lo = int(m["lo"])
        table[key] = (m["name"], lo, int(m["hi"]) if m["hi"] else lo)
    return table


def test_readme_table_parses() -> None:
    table = readme_table()
    assert len(table) >= 10, table
    for key, (name, lo, hi) in table.items():
        assert lo <= hi, (name, lo, hi)
        # The name column is Kafka's name of that key (ApiKey spells it in upper snake case).
        assert re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper() == ApiKey(key).name, (name, key)


async def _api_versions(port: int, request: object) -> dict[int, tuple[int, int]]:
    conn = KafkaConnection("127.0.0.1", port, client_id="test-api-versions")
    await conn.connect()
    try:
        response = await conn.request(request, timeout_s=30)
    finally:
        await conn.close()
    assert response.error_code == ErrorCode.none
    return {int(a.api_key): (int(a.min_version), int(a.max_version)) for a in response.api_keys}


@pytest.mark.parametrize(
    "request_body",
    [
        ApiVersionsRequestV0(),
        ApiVersionsRequestV3(client_software_name="replog-tests", client_software_version="0"),
    ],
    ids=["v0", "v3"],
)
def test_readme_matches_broker(replog_broker, request_body) -> None:
    served = asyncio.run(
        _api_versions(replog_broker.port(replog_broker.broker_ids[0]), request_body)
    )
    claimed = {key: (lo, hi) for key, (_name, lo, hi) in readme_table().items()}
    names = {key: name for key, (name, _lo, _hi) in readme_table().items()}
    differences = {
        names.get(key, f"api key {key}"): (claimed.get(key), served.get(key))
        for key in claimed.keys() | served.keys()
        if claimed.get(key) != served.get(key)
    }
    assert not differences, f"README (claimed, served) differ: {differences}"


def test_readme_table_is_what_the_command_generates(replog_broker) -> None:
    served = asyncio.run(
        _api_versions(
            replog_broker.port(replog_broker.broker_ids[0]),
            ApiVersionsRequestV3(client_software_name="replog-tests", client_software_version="0"),
        )
    )
    text = README.read_text()
    assert update_readme(text, served) == text, (
        "README's API table is stale: run "
        "`replog api-versions --bootstrap-server HOST:PORT --update-readme README.md`"
    )
