"""Prometheus metrics of one broker, at ``/metrics`` on ``metrics.port``.

Names are Kafka's JMX metric names as the Prometheus JMX exporter's Kafka rules
(``kafka-2_0_0.yml``) translate them: ``kafka.server<type=ReplicaManager,
name=IsrShrinksPerSec>`` becomes ``kafka_server_replicamanager_isrshrinks_total``,
``kafka.network<type=RequestMetrics, name=TotalTimeMs, request=Produce>`` becomes
``kafka_network_requestmetrics_totaltimems{request="Produce"}`` (a histogram here),
``kafka.log<type=Log, name=LogEndOffset, topic=t, partition=0>`` becomes
``kafka_log_log_logendoffset{topic="t",partition="0"}``. A per-topic count's all-topics
sum is the sample with ``topic=""``, which Prometheus reads as the sample without the
label, as the exporter writes it. Consumer group lag uses kafka-exporter's names
(``kafka_consumergroup_lag{consumergroup,topic,partition}``), for every partition a
group coordinated here committed: against this broker's high watermark where it leads
the partition, else against the leader's, which ``RemoteEndOffsets`` asks the leaders
for (ListOffsets, one request per leader broker) at most every ``REMOTE_REFRESH_S``
seconds, started by a scrape and never awaited by it (the console scrapes every second).

Nothing below the server layer knows about Prometheus: the replica manager, the
controller and the handlers keep plain counters, and the collectors here read them (and
the partitions' state) when Prometheus scrapes. The HTTP endpoint runs on the broker's
event loop, so a scrape reads the state between two events, never in the middle of one.

Request stages, as Kafka's RequestMetrics splits them (replog has no request queue
between a network thread and handler threads; a handler task starts when the request is
read, unless the connection already has ``MAX_IN_FLIGHT_PER_CONNECTION`` requests):

* ``requestqueuetimems``: read off the socket -> handler started (waiting for room on a
  busy connection);
* ``localtimems``: the handler's own work (its time minus the remote time);
* ``remotetimems``: waiting on others inside the handler (acks=all for followers, a
  fetch's long poll, a follower's replication throttle);
* ``responsequeuetimems``: handler done -> response handed to the socket (it waits for
  the responses to earlier requests on the connection, which go out first);
* ``totaltimems``: read off the socket -> response handed to the socket.

Concurrency: event loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from replog.protocol.apis import ApiKey, make, nested, request_schema
from replog.protocol.client import KafkaConnection
from replog.server.loop_lag import LoopLagMonitor
from replog.server.request_metrics import (  # noqa: F401 (re-exported)
    MS_BUCKETS,
    STAGES,
    RequestMetrics,
    escape_label,
    kafka_request_name,
)

if TYPE_CHECKING:
    from replog.controller.controller import KafkaController
    from replog.coordinator.group.coordinator import GroupCoordinator
    from replog.coordinator.transaction.runtime import TransactionCoordinatorRuntime
    from replog.replication.replica_manager import ReplicaManager
    from replog.security.client_security import ClientSecurity
    from replog.server.fetch_session import FetchManager
    from replog.server.metadata_cache import MetadataCache
    from replog.server.topic_stats import BrokerTopicStats

log = logging.getLogger(__name__)

MAX_HTTP_REQUEST_LINE = 8192
# The text format every Prometheus server reads (prometheus_client's "latest" is 1.0.0).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Group lag of partitions led elsewhere: their leaders' high watermarks are asked for at
# most this often (seconds), after a scrape, with ListOffsets at this version.
REMOTE_REFRESH_S = 5.0
REMOTE_LIST_OFFSETS_VERSION = 7
LATEST_TIMESTAMP = -1


class RemoteEndOffsets:
    """High watermarks of partitions another broker leads, for the group lag metric (what
    Kafka's lag exporters read with ListOffsets latest from each partition's leader).

    ``want`` (called by a scrape, never awaiting) starts a refresh when the last began
    ``refresh_s`` ago or more and none runs: one ListOffsets per leader broker for the
    partitions the groups committed, over a kept connection on the inter-broker listener.
    A scrape reads what the last refresh found (``high_watermark``), so it is up to
    ``refresh_s`` plus a round trip old; a partition not fetched yet is left out.

    Concurrency: event loop only; ``_known`` changes only in the refresh task, between
    its awaits, and scrapes read it whole.
    """

    def __init__(
        self,
        broker_id: int,
        metadata_cache: MetadataCache,
        listener: str,
        security: ClientSecurity,
        refresh_s: float = REMOTE_REFRESH_S,
    ) -> None:
        self.broker_id = broker_id
        self.metadata_cache = metadata_cache
        self.listener = listener
        self.security = security
        self.refresh_s = refresh_s
        self.requests_sent = 0
        self._known: dict[tuple[str, int], int] = {}
        self._connections: dict[int, KafkaConnection] = {}
        self._task: asyncio.Task[None] | None = None
        self._last_start = float("-inf")

    def high_watermark(self, topic: str, partition: int) -> int | None:
        return self._known.get((topic, partition))

    def want(self, partitions: set[tuple[str, int]], now: float) -> None:
        """The partitions a scrape needed; refreshes them if it is time (not awaited)."""
        if self._task is not None and not self._task.done():
            return
        if now - self._last_start < self.refresh_s:
            return
        self._last_start = now
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for topic, partition in sorted(partitions):
            info = self.metadata_cache.partition(topic, partition)
            if info is not None and info.leader >= 0 and info.leader != self.broker_id:
                by_leader.setdefault(info.leader, []).append((topic, partition))
        self._known = {tp: hw for tp, hw in self._known.items() if tp in partitions}
        if by_leader:
            self._task = asyncio.get_running_loop().create_task(
                self._refresh(by_leader), name="metrics-remote-end-offsets"
            )

    async def _refresh(self, by_leader: dict[int, list[tuple[str, int]]]) -> None:
        await asyncio.gather(*(self._ask(b, tps) for b, tps in sorted(by_leader.items())))

    async def _ask(self, leader: int, partitions: list[tuple[str, int]]) -> None:
        cls = request_schema(ApiKey.LIST_OFFSETS, REMOTE_LIST_OFFSETS_VERSION)
        topic_cls, partition_cls = (
            nested(cls, "ListOffsetsTopic"),
            nested(cls, "ListOffsetsPartition"),
        )
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        body = make(
            cls,
            replica_id=-1,
            isolation_level=0,
            topics=tuple(
                make(
                    topic_cls,
                    name=topic,
                    partitions=tuple(
                        make(partition_cls, partition_index=p, timestamp=LATEST_TIMESTAMP)
                        for p in indexes
                    ),
                )
                for topic, indexes in by_topic.items()
            ),
        )
        try:
            conn = self._connections.get(leader)
            if conn is None or not conn.connected:
                endpoint = self.metadata_cache.brokers_for(self.listener).get(leader)
                if endpoint is None:
                    return
                conn = KafkaConnection(
                    endpoint.host,
                    endpoint.port,
                    client_id=f"broker-{self.broker_id}-metrics",
                    security=self.security,
                )
                await conn.connect()
                self._connections[leader] = conn
            self.requests_sent += 1
            answer = await conn.request(body, timeout_s=self.refresh_s)
        except (OSError, TimeoutError, ConnectionError) as exc:
            log.debug("metrics: end offsets from broker %d not read: %s", leader, exc)
            dropped = self._connections.pop(leader, None)
            if dropped is not None:
                await dropped.close()
            return
        for topic in answer.topics:
            for p in topic.partitions:
                key = (str(topic.name), int(p.partition_index))
                if p.error_code == ErrorCode.none and p.offset >= 0:
                    self._known[key] = int(p.offset)
                else:  # e.g. no longer the leader: asked again at the next refresh
                    self._known.pop(key, None)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        for conn in self._connections.values():
            await conn.close()
        self._connections.clear()


# The per-partition gauges: (name, help), in the order they are rendered.
LOG_GAUGES = (
    ("kafka_log_log_logendoffset", "Log end offset"),
    ("kafka_log_log_logstartoffset", "Log start offset"),
    ("kafka_log_log_size", "Log size in bytes"),
    ("kafka_log_log_numlogsegments", "Segments in the log"),
    ("kafka_cluster_partition_highwatermark", "High watermark"),
    (
        "kafka_cluster_partition_laststableoffsetlag",
        "High watermark minus the last stable offset (0 where not leader)",
    ),
)


class LogGauges:
    """Six gauges per partition (``LOG_GAUGES``), rendered as Prometheus text by hand:
    at thousands of partitions they are most of a scrape, and most partitions did not
    move since the last one, so each partition's lines are kept with the values they
    show and made again only when a value changed (the text is what
    ``GaugeMetricFamily`` wrote, so scrapers read it unchanged).

    Concurrency: event loop only (a scrape reads the partitions between two events)."""

    def __init__(self) -> None:
        self._lines: dict[tuple[str, int], tuple[tuple[int, ...], tuple[str, ...]]] = {}

    def text(self, partitions: dict[tuple[str, int], Any]) -> str:
        cache = self._lines
        fresh: dict[tuple[str, int], tuple[tuple[int, ...], tuple[str, ...]]] = {}
        columns: list[list[str]] = [[] for _ in LOG_GAUGES]
        for key, p in partitions.items():
            values = (
                p.log_end_offset,
                p.log_start_offset,
                p.size_in_bytes(),
                p.segment_count,
                p.high_watermark,
                p.last_stable_offset_lag,
            )
            entry = cache.get(key)
            if entry is None or entry[0] != values:
                # label names sorted, as prometheus_client writes them
                labels = f'{{partition="{key[1]}",topic="{escape_label(key[0])}"}}'
                entry = (
                    values,
                    tuple(
                        f"{name}{labels} {floatToGoString(value)}\n"
                        for (name, _), value in zip(LOG_GAUGES, values, strict=True)
                    ),
                )
            fresh[key] = entry
            for column, line in zip(columns, entry[1], strict=True):
                column.append(line)
        self._lines = fresh  # deleted partitions' lines go
        out = []
        for (name, text), column in zip(LOG_GAUGES, columns, strict=True):
            out.append(f"# HELP {name} {text}\n# TYPE {name} gauge\n")
            out.extend(column)
        return "".join(out)


class BrokerStateCollector(Collector):
    """Gauges and counts read from the broker's components at scrape time."""

    def __init__(
        self,
        replica_manager: ReplicaManager,
        topic_stats: BrokerTopicStats,
        group_coordinator: GroupCoordinator,
        controller: Callable[[], KafkaController | None],
        fetch_manager: FetchManager | None = None,
        end_offsets: RemoteEndOffsets | None = None,
    ) -> None:
        self.replica_manager = replica_manager
        self.topic_stats = topic_stats
        self.group_coordinator = group_coordinator
        self.controller = controller
        self.fetch_manager = fetch_manager
        self.end_offsets = end_offsets
        self.log_gauges = LogGauges()
        self.transaction_coordinator: TransactionCoordinatorRuntime | None = None

    def collect(self) -> Iterator[Any]:
        yield from self._replica_manager()
        yield from self._fetch_sessions()
        yield from self._topics()
        yield from self._controller()
        yield from self._group_lag()
        yield from self._transaction_coordinator()

    def _replica_manager(self) -> Iterator[Any]:
        rm = self.replica_manager
        parts = list(rm.partitions.values())
        leaders = [p for p in parts if p.is_leader]
        under = 0
        under_min_isr = 0
        for p in leaders:
            state = p.state
            isr = len(p.in_sync_replicas)
            if state is not None and isr < len(state.replicas):
                under += 1
            if isr < p.min_insync_replicas:
                under_min_isr += 1
        prefix = "kafka_server_replicamanager_"
        for name, value, text in (
            ("partitioncount", len(parts), "Replicas on this broker"),
            ("leadercount", len(leaders), "Partitions this broker leads"),
            ("underreplicatedpartitions", under, "Led partitions whose ISR lacks a replica"),
            ("underminisrpartitioncount", under_min_isr, "Led partitions below min ISR"),
        ):
            yield GaugeMetricFamily(prefix + name, text, value=value)
        yield CounterMetricFamily(
            prefix + "isrshrinks", "ISR shrinks written as leader", value=rm.isr_shrinks
        )
        yield CounterMetricFamily(
            prefix + "isrexpands", "ISR expansions written as leader", value=rm.isr_expands
        )

    def _fetch_sessions(self) -> Iterator[Any]:
        """Kafka's FetchSessionCache metrics (KIP-227), and replog's count of requests
        answered within a session."""
        manager = self.fetch_manager
        if manager is None:
            return
        cache = manager.cache
        prefix = "kafka_server_fetchsessioncache_"
        yield GaugeMetricFamily(
            prefix + "numincrementalfetchsessions",
            "Incremental fetch sessions in the cache",
            value=len(cache),
        )
        yield GaugeMetricFamily(
            prefix + "numincrementalfetchpartitionscached",
            "Partitions held by the cache's sessions",
            value=cache.total_partitions,
        )
        yield CounterMetricFamily(
            prefix + "incrementalfetchsessionevictions",
            "Sessions evicted to make room for new ones",
            value=cache.evictions,
        )
        yield CounterMetricFamily(
            prefix + "incrementalfetches",
            "Fetch requests answered within a session (replog's own)",
            value=manager.incremental_fetches,
        )

    def logs_text(self) -> str:
        """The per-partition log gauges (``LogGauges``), in the text format."""
        return self.log_gauges.text(self.replica_manager.partitions)

    def _topics(self) -> Iterator[Any]:
        prefix = "kafka_server_brokertopicmetrics_"
        fields = (
            ("messagesin", "messages_in", "Messages appended as leader (MessagesInPerSec)"),
            ("bytesin", "bytes_in", "Bytes appended as leader from producers (BytesInPerSec)"),
            ("bytesout", "bytes_out", "Bytes fetched by consumers (BytesOutPerSec)"),
            (
                "replicationbytesout",
                "replication_bytes_out",
                "Bytes fetched by followers (ReplicationBytesOutPerSec)",
            ),
            (
                "failedproducerequests",
                "failed_produce_requests",
                "Partition appends refused (FailedProduceRequestsPerSec)",
            ),
        )
        topics = self.topic_stats.topics
        for name, attr, text in fields:
            family = CounterMetricFamily(prefix + name, text, labels=["topic"])
            total = 0
            for topic, counts in topics.items():
                value = getattr(counts, attr)
                total += value
                family.add_metric([topic], value)
            family.add_metric([""], total)  # the all-topics count, as the exporter names it
            yield family

    def _controller(self) -> Iterator[Any]:
        controller = self.controller()
        active = controller is not None and controller.is_active
        prefix = "kafka_controller_kafkacontroller_"
        yield GaugeMetricFamily(
            prefix + "activecontrollercount",
            "1 on the active controller, 0 elsewhere",
            value=1 if active else 0,
        )
        offline = topics = partitions = imbalance = 0
        if active:
            ctx = controller.context
            live = ctx.live_brokers
            topics = len(ctx.all_topics)
            for tp, state in ctx.partition_leadership.items():
                partitions += 1
                leader = state.leader_and_isr.leader
                if leader not in live:
                    offline += 1
                replicas = ctx.replicas_for(tp)
                if replicas and leader != replicas[0]:
                    imbalance += 1
        for name, value, text in (
            ("offlinepartitionscount", offline, "Partitions without a live leader"),
            ("globaltopiccount", topics, "Topics (active controller only)"),
            ("globalpartitioncount", partitions, "Partitions (active controller only)"),
            (
                "preferredreplicaimbalancecount",
                imbalance,
                "Partitions not led by their preferred replica",
            ),
        ):
            yield GaugeMetricFamily(prefix + name, text, value=value)
        if controller is None:
            return
        stats = controller.stats
        yield CounterMetricFamily(
            "kafka_controller_controllerstats_uncleanleaderelections",
            "Leaders elected from outside the ISR",
            value=stats.unclean_leader_elections,
        )
        yield CounterMetricFamily(
            "kafka_controller_controllerstats_leaderelections",
            "Partitions given a new leader by this broker's controller",
            value=stats.leader_elections,
        )
        yield SummaryMetricFamily(
            "kafka_controller_controllerstats_leaderelectionrateandtimems",
            "Controller decisions that moved leadership: count, and ms until every "
            "LeaderAndIsr was acknowledged",
            count_value=stats.election_events,
            sum_value=stats.election_time_s * 1000,
        )
        yield GaugeMetricFamily(
            "kafka_controller_controllereventmanager_eventqueuesize",
            "Events waiting in the controller's queue",
            value=controller.events.size(),
        )

    def _transaction_coordinator(self) -> Iterator[Any]:
        """Kafka's ``TransactionMarkerChannelManager`` gauges and
        ``transaction-coordinator-metrics``' partition load times, and the transactional
        ids coordinated here by state."""
        runtime = self.transaction_coordinator
        if runtime is None:
            return
        prefix = "kafka_coordinator_transaction_transactionmarkerchannelmanager_"
        yield GaugeMetricFamily(
            prefix + "unknowndestinationqueuesize",
            "Markers waiting for their partitions' leaders",
            value=runtime.channel.unknown_destination_count(),
        )
        yield GaugeMetricFamily(
            prefix + "logappendretryqueuesize",
            "CompleteCommit/CompleteAbort appends waiting to be retried",
            value=runtime.completions_to_retry,
        )
        prefix = "kafka_server_transaction_coordinator_metrics_"
        yield GaugeMetricFamily(
            prefix + "partition_load_time_max",
            "Longest load of a __transaction_state partition (ms)",
            value=runtime.load_time_max_ms,
        )
        yield GaugeMetricFamily(
            prefix + "partition_load_time_avg",
            "Mean load time of a __transaction_state partition (ms)",
            value=runtime.load_time_total_ms / runtime.loads if runtime.loads else 0.0,
        )
        states = GaugeMetricFamily(
            "replog_transaction_coordinator_transactions",
            "Transactional ids coordinated here, by state",
            labels=["state"],
        )
        for state, count in sorted(runtime.transaction_counts().items()):
            states.add_metric([state], count)
        yield states

    def _group_lag(self) -> Iterator[Any]:
        """Lag of the groups coordinated here, for every partition they committed: the
        leader's high watermark minus the committed offset. This broker's own where it
        leads; else the leader's as ``end_offsets`` last read it (refreshed at most every
        few seconds, off the scrape), else this broker's follower replica's; a partition
        with none of these yet is left out."""
        labels = ["consumergroup", "topic", "partition"]
        remote = self.end_offsets
        lag = GaugeMetricFamily(
            "kafka_consumergroup_lag",
            "High watermark minus committed offset; the high watermark of a partition led "
            "by another broker is the leader's, read with ListOffsets at most every "
            f"{remote.refresh_s if remote else REMOTE_REFRESH_S:g} s (not at each scrape)",
            labels=labels,
        )
        current = GaugeMetricFamily(
            "kafka_consumergroup_current_offset", "Committed offset", labels=labels
        )
        partitions = self.replica_manager.partitions
        elsewhere: set[tuple[str, int]] = set()
        for group, offsets in self.group_coordinator.committed_offsets():
            for (topic, partition), committed in offsets.items():
                values = [group, topic, str(partition)]
                current.add_metric(values, committed.offset)
                part = partitions.get((topic, partition))
                high_watermark = None
                if part is not None and part.is_leader:
                    high_watermark = part.high_watermark
                else:
                    elsewhere.add((topic, partition))
                    if remote is not None:
                        high_watermark = remote.high_watermark(topic, partition)
                    if high_watermark is None and part is not None:
                        high_watermark = part.high_watermark
                if high_watermark is not None:
                    lag.add_metric(values, max(high_watermark - committed.offset, 0))
        if remote is not None and elsewhere:
            remote.want(elsewhere, time.monotonic())
        yield lag
        yield current


class BrokerMetrics:
    """The broker's registry, its request metrics and the ``/metrics`` endpoint."""

    def __init__(self, state: BrokerStateCollector) -> None:
        self.state = state
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = RequestMetrics()
        # The network layer's request observer: the request metrics' own method, bound.
        self.observe_request = self.requests.observe
        self.registry.register(state)
        # The event loop's lag (stalls), measured while the endpoint is up.
        self.loop_lag = LoopLagMonitor()
        self._server: asyncio.AbstractServer | None = None
        self.port: int | None = None

    def exposition(self) -> bytes:
        return (
            self.requests.exposition().encode()
            + generate_latest(self.registry)
            + self.state.logs_text().encode()
            + self.loop_lag.exposition().encode()
        )

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._serve, host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        self.loop_lag.start()
        log.info("metrics at http://%s:%d/metrics", host, self.port)

    async def stop(self) -> None:
        self.loop_lag.stop()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self.state.end_offsets is not None:
            await self.state.end_offsets.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One HTTP/1.x request per connection: ``GET /metrics``, anything else 404/405."""
        try:
            request_line = await asyncio.wait_for(reader.readline(), 10)
            if len(request_line) > MAX_HTTP_REQUEST_LINE:
                return
            while True:  # the headers: read and ignored
                line = await asyncio.wait_for(reader.readline(), 10)
                if line in (b"\r\n", b"\n", b""):
                    break
            parts = request_line.decode("latin-1").split()
            method, path = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
            if method not in ("GET", "HEAD"):
                status, body, ctype = "405 Method Not Allowed", b"GET only\n", "text/plain"
            elif path.split("?", 1)[0] != "/metrics":
                status, body, ctype = "404 Not Found", b"see /metrics\n", "text/plain"
            else:
                status, body, ctype = "200 OK", self.exposition(), CONTENT_TYPE
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            ).encode("latin-1")
            writer.write(head if method == "HEAD" else head + body)
            await writer.drain()
        except (TimeoutError, ConnectionError, UnicodeDecodeError):
            pass
        except Exception:
            log.exception("metrics request failed")
        finally:
            writer.close()
