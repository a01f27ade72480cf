"""Drive kafkajs (a pure-JavaScript Kafka client) from the Python tests.

``tests/js/admin.js`` runs one kafkajs call and prints its result as JSON; the
Makefile installs kafkajs with ``npm ci`` in ``tests/js``. Tests skip with a
reason when Node.js or the package is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

JS_DIR = Path(__file__).resolve().parent / "js"


def require_kafkajs() -> None:
    if shutil.which("node") is None:
        pytest.skip("Node.js is not installed: kafkajs tests need it")
    if not (JS_DIR / "node_modules" / "kafkajs").is_dir():
        pytest.skip("kafkajs is not installed: run `make test` (npm ci in tests/js)")


class KafkajsError(RuntimeError):
    pass


def kafkajs(bootstrap: str, action: str, timeout_s: float = 60, **args: Any) -> Any:
    """The JSON result of one kafkajs call; KafkajsError with its message if it failed."""
    command = {"brokers": bootstrap.split(","), "action": action, "args": args}
    return _node("admin.js", command, timeout_s)


def _node(script: str, command: dict[str, Any], timeout_s: float) -> Any:
    """Run ``tests/js/<script>`` with ``command`` as its JSON argument; its JSON output."""
    require_kafkajs()
    done = subprocess.run(
        ["node", str(JS_DIR / script), json.dumps(command)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "KAFKAJS_NO_PARTITIONER_WARNING": "1"},
        check=False,
    )
    if done.returncode != 0:
        raise KafkajsError(done.stderr.strip() or f"node exited {done.returncode}")
    return json.loads(done.stdout)


def kafkajs_group_consume(
    bootstrap: str, group: str, topic: str, count: int, timeout_s: float = 60
) -> list[str]:
    """The values kafkajs read as a member of ``group`` (``tests/js/group.js``): ``count``
    records from its committed position (or the beginning), committed as it goes."""
    command = {"brokers": bootstrap.split(","), "group": group, "topic": topic, "count": count}
    return list(_node("group.js", command, timeout_s)["values"])


def kafkajs_transactions(
    bootstrap: str,
    transactional_id: str,
    topic: str,
    commit: list[str],
    abort: list[str],
    timeout_s: float = 60,
) -> None:
    """A kafkajs transactional producer (``tests/js/transaction.js``): one transaction
    sending ``commit`` to partition 0 and committed, then one sending ``abort`` to
    partition 1 and aborted."""
    command = {
        "brokers": bootstrap.split(","),
        "transactionalId": transactional_id,
        "topic": topic,
        "commit": commit,
        "abort": abort,
    }
    _node("transaction.js", command, timeout_s)
