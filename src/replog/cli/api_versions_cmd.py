"""``replog api-versions``: what a broker answers to ApiVersions, like kafka-broker-api-versions.sh.

``--update-readme README.md`` rewrites the README's "Kafka APIs served" table
from the broker's answer, keeping each API's notes column; the table is never
edited by hand, and ``tests/test_api_versions_table.py`` fails when it and a
running broker disagree.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from pathlib import Path

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode

from replog.protocol.apis import ApiKey
from replog.protocol.client import KafkaConnection

SECTION = "## Kafka APIs served"
HEADER = "| API | key | versions | notes |\n| --- | --- | --- | --- |"
_ROW = re.compile(r"^\|\s*(?P<name>[A-Za-z]+)\s*\|\s*(?P<key>\d+)\s*\|[^|]*\|(?P<notes>.*)\|\s*$")


def api_name(api_key: int) -> str:
    """Kafka's CamelCase name of an API key (``ApiKey.LIST_OFFSETS`` -> ``ListOffsets``)."""
    try:
        upper = ApiKey(api_key).name
    except ValueError:
        return f"ApiKey{api_key}"
    return "".join(part.capitalize() for part in upper.split("_"))


def render_table(versions: dict[int, tuple[int, int]], notes: dict[int, str]) -> str:
    rows = [HEADER]
    for key in sorted(versions):
        lo, hi = versions[key]
        span = str(lo) if lo == hi else f"{lo}–{hi}"
        note = notes.get(key)
        rows.append(
            f"| {api_name(key)} | {key} | {span} | {note} |"
            if note
            else f"| {api_name(key)} | {key} | {span} | |"
        )
    return "\n".join(rows)


def _table_span(text: str) -> tuple[int, int]:
    """Start and end offsets of the table inside the README's section."""
    start = text.index(SECTION)
    table = text.index(HEADER, start)
    end = table
    for line in text[table:].splitlines(keepends=True):
        if not line.startswith("|"):
            break
        end += len(line)
    return table, end


def readme_notes(text: str) -> dict[int, str]:
    start, end = _table_span(text)
    notes: dict[int, str] = {}
    for line in text[start:end].splitlines():
        m = _ROW.match(line.strip())
        if m is not None:
            notes[int(m["key"])] = m["notes"].strip()
    return notes


def update_readme(text: str, versions: dict[int, tuple[int, int]]) -> str:
    """``text`` with its API table replaced by one rendered from ``versions``."""
    start, end = _table_span(text)
    table = render_table(versions, readme_notes(text))
    return text[:start] + table + "\n" + text[end:]


async def fetch_versions(bootstrap: str) -> dict[int, tuple[int, int]]:
    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    conn = KafkaConnection(host or "127.0.0.1", int(port), client_id="replog-api-versions")
    await conn.connect()
    try:
        response = await conn.request(
            ApiVersionsRequest(
                client_software_name="replog-api-versions", client_software_version="1"
            ),
            timeout_s=30,
        )
    finally:
        await conn.close()
    if response.error_code != ErrorCode.none:
        raise RuntimeError(f"ApiVersions answered {response.error_code.name}")
    return {int(a.api_key): (int(a.min_version), int(a.max_version)) for a in response.api_keys}


def _run(args: argparse.Namespace) -> int:
    try:
        versions = asyncio.run(fetch_versions(args.bootstrap_server))
    except (OSError, RuntimeError, TimeoutError) as exc:
        print(f"replog api-versions: {args.bootstrap_server}: {exc}", file=sys.stderr)
        return 1
    if args.update_readme:
        path = Path(args.update_readme)
        try:
            text = path.read_text()
            path.write_text(update_readme(text, versions))
        except (OSError, ValueError) as exc:
            print(f"replog api-versions: cannot update {path}: {exc}", file=sys.stderr)
            return 1
        print(f"updated the API table of {path} ({len(versions)} APIs)")
        return 0
    if args.markdown:
        print(render_table(versions, {}))
        return 0
    print(f"{args.bootstrap_server} -> (")
    for key in sorted(versions):
        lo, hi = versions[key]
        print(f"\t{api_name(key)}({key}): {lo} to {hi}")
    print(")")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "api-versions", help="the API versions a broker serves (kafka-broker-api-versions)"
    )
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--markdown", action="store_true", help="print a markdown table")
    out.add_argument(
        "--update-readme", metavar="README.md", help="rewrite the README's API table in place"
    )
    parser.set_defaults(func=_run)
