"""The console's IO: poll the cluster, serve the page and its state.

Every ``interval_s`` the poller asks a live broker for Metadata (brokers, controller,
leaders, ISRs), the controller for ListPartitionReassignments, every broker for
ListGroups and DescribeGroups of the groups it coordinates and for ListTransactions
(the open states only) and DescribeTransactions of the transactions it coordinates, and
scrapes every broker's ``/metrics`` (log end offsets per replica, high watermarks,
per-topic counters, group lag, LSO lag); with a ZooKeeper address it also reads ``/controller_epoch``. It never writes.
The HTTP side serves ``/`` (one static page) and ``/state.json`` (the latest
``Snapshot``); the page fetches the state every second and redraws, without reloading.

Concurrency: one asyncio loop; blocking reads (metrics over HTTP, ZooKeeper) go to
threads and their results come back to the loop.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import time
import urllib.request
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from kio.schema.describe_groups.v5 import request as describe_req
from kio.schema.errors import ErrorCode
from kio.schema.list_groups.v4 import request as list_req
from kio.schema.list_partition_reassignments.v0 import request as reassign_req
from kio.schema.list_transactions.v1 import request as list_txn_req
from kio.schema.metadata.v8 import request as metadata_req
from kio.static.primitive import i32Timedelta
from prometheus_client.parser import text_string_to_metric_families

from replog.common.clock import now_ms
from replog.console.view import (
    GroupInfo,
    GroupMember,
    Observation,
    Snapshot,
    TransactionInfo,
    build_snapshot,
    parse_samples,
)
from replog.protocol import describe_transactions_codec as describe_txn_codec
from replog.protocol.apis import ApiKey
from replog.protocol.client import KafkaConnection
from replog.protocol.wire import CodecError
from replog.server.metadata_cache import PartitionInfo

log = logging.getLogger(__name__)

CLIENT_ID = "replog-console"
REQUEST_TIMEOUT_S = 5.0
MAX_HTTP_REQUEST_LINE = 8192
# the transaction states in which a transaction is open (holds its partitions' LSO back)
OPEN_TRANSACTION_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")


@dataclass
class ConsoleTargets:
    """Where the cluster is: bootstrap servers, each broker's metrics URL, ZooKeeper."""

    bootstrap: list[str]
    metrics_urls: dict[int, str] = field(default_factory=dict)
    zookeeper: str | None = None


async def _request(address: str, body: Any) -> Any:
    host, _, port = address.rpartition(":")
    conn = KafkaConnection(host, int(port), client_id=CLIENT_ID)
    await conn.connect(timeout_s=REQUEST_TIMEOUT_S)
    try:
        return await conn.request(body, timeout_s=REQUEST_TIMEOUT_S)
    finally:
        await conn.close()


async def _request_encoded(address: str, api_key: int, version: int, body: bytes) -> bytes:
    host, _, port = address.rpartition(":")
    conn = KafkaConnection(host, int(port), client_id=CLIENT_ID)
    await conn.connect(timeout_s=REQUEST_TIMEOUT_S)
    try:
        return await conn.request_encoded(api_key, version, body, timeout_s=REQUEST_TIMEOUT_S)
    finally:
        await conn.close()


def _scrape(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=REQUEST_TIMEOUT_S) as response:
        return parse_samples(list(text_string_to_metric_families(response.read().decode())))


class ClusterPoller:
    """Polls the cluster into ``Snapshot``s. Concurrency: event loop only."""

    def __init__(self, targets: ConsoleTargets) -> None:
        self.targets = targets
        self.snapshot: Snapshot | None = None
        self.known_brokers: set[int] = set(targets.metrics_urls)
        self.addresses: dict[int, str] = {}
        self.error: str | None = None
        self._zk: Any = None

    async def poll_once(self) -> Snapshot | None:
        metadata, source = await self._metadata()
        if metadata is None:
            self.error = f"no broker answers ({', '.join(self.targets.bootstrap)})"
            return self.snapshot
        self.error = None
        brokers = {int(b.node_id): f"{b.host}:{b.port}" for b in metadata.brokers}
        self.addresses.update(brokers)
        self.known_brokers |= set(brokers)
        controller = int(metadata.controller_id)
        partitions = [
            PartitionInfo(
                str(t.name),
                int(p.partition_index),
                int(p.leader_id),
                int(p.leader_epoch),
                tuple(int(r) for r in p.replica_nodes),
                tuple(int(r) for r in p.isr_nodes),
            )
            for t in metadata.topics
            if t.error_code == ErrorCode.none
            for p in t.partitions
        ]
        reassigning, groups, transactions, metrics, epoch = await asyncio.gather(
            self._reassigning(brokers.get(controller)),
            self._groups(brokers),
            self._transactions(brokers),
            self._metrics(set(brokers)),
            self._controller_epoch(),
        )
        observation = Observation(
            taken_ms=now_ms(),
            brokers=brokers,
            known_brokers=set(self.known_brokers),
            controller_id=controller,
            controller_epoch=epoch,
            partitions=partitions,
            reassigning=reassigning,
            groups=groups,
            metrics=metrics,
            transactions=transactions,
        )
        self.snapshot = build_snapshot(observation, self.snapshot)
        log.debug("polled %s: %d partitions", source, len(partitions))
        return self.snapshot

    async def _metadata(self) -> tuple[Any, str | None]:
        request = metadata_req.MetadataRequest(
            topics=None,
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        for address in [*self.targets.bootstrap, *self.addresses.values()]:
            try:
                return await _request(address, request), address
            except (OSError, TimeoutError, ConnectionError) as exc:
                log.debug("metadata from %s failed: %s", address, exc)
        return None, None

    async def _reassigning(self, controller: str | None) -> set[tuple[str, int]]:
        if controller is None:
            return set()
        timeout = i32Timedelta.parse(datetime.timedelta(milliseconds=5000))
        try:
            response = await _request(
                controller,
                reassign_req.ListPartitionReassignmentsRequest(timeout=timeout, topics=None),
            )
        except (OSError, TimeoutError, ConnectionError):
            return set()
        return {
            (str(t.name), int(p.partition_index)) for t in response.topics for p in t.partitions
        }

    async def _groups(self, brokers: dict[int, str]) -> list[GroupInfo]:
        async def of(broker: int, address: str) -> list[GroupInfo]:
            try:
                listed = await _request(address, list_req.ListGroupsRequest(states_filter=()))
                ids = tuple(str(g.group_id) for g in listed.groups)
                if not ids:
                    return []
                described = await _request(
                    address,
                    describe_req.DescribeGroupsRequest(
                        groups=ids, include_authorized_operations=False
                    ),
                )
            except (OSError, TimeoutError, ConnectionError):
                return []
            return [
                GroupInfo(
                    str(g.group_id),
                    str(g.group_state),
                    str(g.protocol_type),
                    broker,
                    tuple(
                        GroupMember(str(m.member_id), str(m.client_id), str(m.client_host))
                        for m in g.members
                    ),
                )
                for g in described.groups
                if g.error_code == ErrorCode.none
            ]

        found = await asyncio.gather(*(of(b, a) for b, a in sorted(brokers.items())))
        return [g for per_broker in found for g in per_broker]

    async def _transactions(self, brokers: dict[int, str]) -> list[TransactionInfo]:
        async def of(broker: int, address: str) -> list[TransactionInfo]:
            try:
                listed = await _request(
                    address,
                    list_txn_req.ListTransactionsRequest(
                        state_filters=OPEN_TRANSACTION_STATES, producer_id_filters=()
                    ),
                )
                ids = [str(t.transactional_id) for t in listed.transaction_states]
                if listed.error_code != ErrorCode.none or not ids:
                    return []
                frame = await _request_encoded(
                    address,
                    ApiKey.DESCRIBE_TRANSACTIONS,
                    describe_txn_codec.API_VERSION,
                    describe_txn_codec.encode_request(ids),
                )
                described = describe_txn_codec.decode_response(frame)
            except (OSError, TimeoutError, ConnectionError, CodecError):
                return []
            return [
                TransactionInfo(
                    t.transactional_id,
                    broker,
                    t.producer_id,
                    t.producer_epoch,
                    t.transaction_state,
                    t.transaction_timeout_ms,
                    t.transaction_start_time_ms,
                    tuple((topic, p) for topic, parts in t.topics for p in parts),
                )
                for t in described
                # it may have ended between the list and the description
                if t.error_code == ErrorCode.none and t.transaction_state in OPEN_TRANSACTION_STATES
            ]

        found = await asyncio.gather(*(of(b, a) for b, a in sorted(brokers.items())))
        return [t for per_broker in found for t in per_broker]

    async def _metrics(self, live: set[int]) -> dict[int, dict]:
        async def of(broker: int, url: str) -> tuple[int, dict | None]:
            try:
                return broker, await asyncio.to_thread(_scrape, url)
            except (OSError, ValueError) as exc:
                log.debug("metrics of broker %d failed: %s", broker, exc)
                return broker, None

        urls = {b: u for b, u in self.targets.metrics_urls.items() if b in live}
        results = await asyncio.gather(*(of(b, u) for b, u in urls.items()))
        return {b: s for b, s in results if s is not None}

    async def _controller_epoch(self) -> int | None:
        if self.targets.zookeeper is None:
            return None
        try:
            return await asyncio.to_thread(self._read_controller_epoch)
        except Exception as exc:  # ZooKeeper down: show the rest
            log.debug("reading /controller_epoch failed: %s", exc)
            return None

    def _read_controller_epoch(self) -> int | None:
        from kazoo.client import KazooClient
        from kazoo.exceptions import NoNodeError

        if self._zk is None:
            zk = KazooClient(hosts=self.targets.zookeeper, timeout=5, read_only=True)
            zk.start(timeout=5)
            self._zk = zk
        try:
            data, _ = self._zk.get("/controller_epoch")
        except NoNodeError:
            return None
        return int(data)

    def close(self) -> None:
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()


def page() -> bytes:
    return resources.files("replog.console").joinpath("console.html").read_bytes()


class ConsoleServer:
    """Serves the page and the poller's latest state over HTTP on ``host:port``."""

    def __init__(self, poller: ClusterPoller, interval_s: float = 1.0) -> None:
        self.poller = poller
        self.interval_s = interval_s
        self.port: int | None = None
        self._server: asyncio.AbstractServer | None = None
        self._task: asyncio.Task[None] | None = None
        self._page = page()

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._serve, host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        self._task = asyncio.create_task(self._poll_loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        await asyncio.to_thread(self.poller.close)

    async def _poll_loop(self) -> None:
        while True:
            started = time.monotonic()
            try:
                await self.poller.poll_once()
            except Exception:
                log.exception("console poll failed")
            await asyncio.sleep(max(self.interval_s - (time.monotonic() - started), 0.05))

    def state(self) -> dict[str, Any]:
        snapshot = self.poller.snapshot
        body: dict[str, Any] = {"error": self.poller.error}
        if snapshot is not None:
            body.update(snapshot.as_json())
        return body

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 10)
            if len(line) > MAX_HTTP_REQUEST_LINE:
                return
            while (await asyncio.wait_for(reader.readline(), 10)) not in (b"\r\n", b"\n", b""):
                pass
            parts = line.decode("latin-1").split()
            method, path = (parts[0], parts[1].split("?", 1)[0]) if len(parts) >= 2 else ("", "")
            if method != "GET":
                status, ctype, body = "405 Method Not Allowed", "text/plain", b"GET only\n"
            elif path == "/":
                status, ctype, body = "200 OK", "text/html; charset=utf-8", self._page
            elif path == "/state.json":
                status, ctype = "200 OK", "application/json"
                body = json.dumps(self.state()).encode()
            else:
                status, ctype, body = "404 Not Found", "text/plain", b"not found\n"
            writer.write(
                (
                    f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
                    f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\n"
                    "Connection: close\r\n\r\n"
                ).encode("latin-1")
                + body
            )
            await writer.drain()
        except (TimeoutError, ConnectionError, UnicodeDecodeError):
            pass
        finally:
            writer.close()
