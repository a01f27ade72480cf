"""Helpers for the mixed-group tests (``test_mixed_group_clients.py``,
``test_group_migration_policy.py``): classic members in processes of their own
(``classic_member_child.py``), librdkafka ``group.protocol=consumer`` members polled
from the test, and waits on what they report."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

TOPIC = "mixed"
PARTITIONS = 6
CHILD = Path(__file__).with_name("classic_member_child.py")


class ClassicMember:
    """A classic member's process and what it reported: its assignment and the values
    it read."""

    def __init__(self, client: str, bootstrap: str, group: str, client_id: str) -> None:
        self.client = client
        self.assigned: set[int] = set()
        self.values: list[str] = []
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, str(CHILD), client, bootstrap, group, TOPIC, client_id],
            stdout=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            event = json.loads(line)
            if "assigned" in event:
                self.assigned = set(event["assigned"])
            for _, value in event.get("records", ()):
                self.values.append(value)

    def stop(self) -> None:
        """SIGTERM by its pid (it closes its consumer), SIGKILL if it does not exit."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._reader.join(10)


class NewMember:
    """A librdkafka member with ``group.protocol=consumer``, polled from the test."""

    def __init__(self, bootstrap: str, group: str, client_id: str) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "client.id": client_id,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        self.consumer.subscribe([TOPIC])
        self.values: list[str] = []
        self.closed = False

    @property
    def assigned(self) -> set[int]:
        return set() if self.closed else {tp.partition for tp in self.consumer.assignment()}

    def poll(self) -> None:
        msg = self.consumer.poll(0.05)
        if msg is None or msg.error() is not None:
            return
        self.values.append(msg.value().decode())
        try:
            self.consumer.commit(message=msg, asynchronous=False)
        except Exception:
            pass  # a commit refused during a rebalance: the record is read again later

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.consumer.close()


def poll_until(new_members, condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for m in new_members:
            if not m.closed:
                m.poll()
        if condition():
            return
    raise AssertionError(f"not in time: {what}")


def each_partition_once(members) -> bool:
    for m in members:
        if isinstance(m, ClassicMember) and m.process.poll() is not None:
            raise AssertionError(f"the {m.client} member exited ({m.process.returncode})")
    sets = [m.assigned for m in members]
    every = [p for s in sets for p in s]
    return all(sets) and sorted(every) == list(range(PARTITIONS))


def group_type(admin: AdminClient, group: str):
    """The group's type as its coordinator describes it (None while it cannot say)."""
    try:
        return admin.describe_consumer_groups([group])[group].result(10).type
    except Exception:
        return None  # a coordinator moving or loading: asked again


def wait_type(new_members, admin: AdminClient, group: str, wanted) -> None:
    poll_until(
        new_members, lambda: group_type(admin, group) == wanted, 60, f"the group is {wanted}"
    )
