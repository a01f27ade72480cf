"""Kafka's ``RequestMetrics``: request counts and stage histograms per request name, as
plain counts that ``/metrics`` renders (see ``replog.server.metrics`` for the stages).

Every answered request passes through ``observe``, so it does the least it can: it
appends the request's context to a list (one ``append``, no histogram work), and the
counting is done for ``FOLD_AT`` requests at a time, or when the scrape (or ``sum_ms``)
asks: one dictionary lookup gives the request name's ``RequestStats`` (bound once per
name, as a pre-bound Prometheus child would be), then per stage one ``bisect`` and two
additions on plain lists. Counting in a batch, with its code and data warm, costs less
than counting each request as it is answered on a busy machine (bench/README.md, issue
27). No locks (the event loop is the only writer and reader), no label lookups. The
scrape turns the counts into the text Prometheus reads, cumulative buckets included,
and keeps each request name's text until that name answers again: an idle broker's
scrape re-renders nothing but the names that moved.

The text is what ``prometheus_client``'s ``Counter`` and ``Histogram`` with a ``request``
label wrote before (same families, samples, ``_created`` gauges and number format), so
Prometheus and the console read it unchanged.

Concurrency: event loop only.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from typing import TYPE_CHECKING

from prometheus_client.utils import floatToGoString

from replog.protocol.apis import ApiKey

if TYPE_CHECKING:
    from replog.server.network import RequestContext

# Milliseconds: sub-millisecond local work up to a produce waiting its full timeout.
MS_BUCKETS = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)
STAGES = ("requestqueuetimems", "localtimems", "remotetimems", "responsequeuetimems")
# Histogram families in the order they are rendered: the total first, then the stages.
HISTOGRAMS = ("totaltimems", *STAGES)
PREFIX = "kafka_network_requestmetrics_"
REQUESTS = PREFIX + "requests"
_HELP = {
    "totaltimems": "Read off the socket to response handed to the socket (Kafka TotalTimeMs)",
    **{stage: f"Kafka RequestMetrics {stage} (see replog.server.metrics)" for stage in STAGES},
}
_REQUESTS_HELP = "Requests answered (Kafka RequestsPerSec), by request and version"
_BOUNDS = [float(b) for b in MS_BUCKETS]
# Answered requests kept before they are counted (their contexts, a few hundred KB at most).
FOLD_AT = 1024
_LE = [floatToGoString(b) for b in MS_BUCKETS] + ["+Inf"]


def kafka_request_name(api_key: int) -> str:
    """``ApiKey.LEADER_AND_ISR`` -> ``"LeaderAndIsr"``, Kafka's ``ApiKeys.name``."""
    try:
        name = ApiKey(api_key).name
    except ValueError:
        return str(api_key)
    return "".join(word.capitalize() for word in name.split("_"))


def escape_label(value: str) -> str:
    """A label value in the text format (backslash, newline and quote escaped)."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class RequestStats:
    """One request name's counts: answers by version; per histogram (``HISTOGRAMS``
    order) the observations per bucket (not cumulative; the last is +Inf) and their
    sum in milliseconds."""

    __slots__ = ("name", "versions", "buckets", "sums", "created", "answered", "_text", "_at")

    def __init__(self, name: str) -> None:
        self.name = name
        self.versions: dict[int, list[float]] = {}  # version -> [count, created]
        self.buckets = [[0] * (len(_BOUNDS) + 1) for _ in HISTOGRAMS]
        self.sums = [0.0] * len(HISTOGRAMS)
        self.created = 0.0  # first timed observation (the histograms' _created)
        self.answered = 0  # every observation: the rendered text is current while equal
        self._text: tuple[str, list[str]] | None = None
        self._at = -1

    def observe(
        self,
        version: int,
        stages: tuple[float, float, float, float, float] | None,
        at: float | None = None,
    ) -> None:
        """One answered request; ``stages``: seconds of total and the four stages, or
        None when the handler failed (counted, not timed); ``at``: when it was answered
        (``time.time()`` seconds; now if None), for the ``_created`` samples."""
        self.answered += 1
        count = self.versions.get(version)
        if count is None:
            self.versions[version] = [1.0, time.time() if at is None else at]
        else:
            count[0] += 1
        if stages is None:
            return
        if not self.created:
            self.created = time.time() if at is None else at
        buckets, sums, bounds = self.buckets, self.sums, _BOUNDS
        for i, seconds in enumerate(stages):
            ms = seconds * 1000 if seconds > 0 else 0.0
            buckets[i][bisect_left(bounds, ms)] += 1
            sums[i] += ms

    def text(self) -> tuple[str, list[str]]:
        """``(requests counter lines, [lines of each histogram])``, rendered again only
        when something was observed since the last call."""
        if self._text is not None and self._at == self.answered:
            return self._text
        label = f'request="{escape_label(self.name)}"'
        counter = []
        created = []
        for version, (count, at) in self.versions.items():
            labels = f'{{{label},version="{version}"}}'
            counter.append(f"{REQUESTS}_total{labels} {floatToGoString(count)}\n")
            created.append(f"{REQUESTS}_created{labels} {floatToGoString(at)}\n")
        histograms = []
        for i, family in enumerate(HISTOGRAMS):
            if not self.created:
                histograms.append(("", ""))
                continue
            name = PREFIX + family
            lines = []
            total = 0
            for le, n in zip(_LE, self.buckets[i], strict=True):
                total += n
                lines.append(f'{name}_bucket{{le="{le}",{label}}} {floatToGoString(total)}\n')
            lines.append(f"{name}_count{{{label}}} {floatToGoString(total)}\n")
            lines.append(f"{name}_sum{{{label}}} {floatToGoString(self.sums[i])}\n")
            histograms.append(
                ("".join(lines), f"{name}_created{{{label}}} {floatToGoString(self.created)}\n")
            )
        self._text = ("".join(counter), "".join(created)), histograms
        self._at = self.answered
        return self._text


class RequestMetrics:
    """Kafka's ``RequestMetrics``: request counts and stage histograms per request name."""

    def __init__(self) -> None:
        self._by_key: dict[int | str, RequestStats] = {}  # api key or request_name
        self._by_name: dict[str, RequestStats] = {}  # in order of first answer
        # Answered, not counted yet: (context, when written, monotonic seconds).
        self._pending: list[tuple[RequestContext, float]] = []

    def stats(self, key: int | str) -> RequestStats:
        """The counts of an api key (by Kafka's name) or of an explicit request name."""
        stats = self._by_key.get(key)
        if stats is None:
            name = key if isinstance(key, str) else kafka_request_name(key)
            stats = self._by_name.get(name)
            if stats is None:
                stats = self._by_name[name] = RequestStats(name)
            self._by_key[key] = stats
        return stats

    def observe(self, context: RequestContext, written_s: float) -> None:
        """A request answered (its response handed to the socket at ``written_s``,
        monotonic seconds): kept, counted with others later (``fold``)."""
        pending = self._pending
        pending.append((context, written_s))
        if len(pending) >= FOLD_AT:
            self.fold()

    def fold(self) -> None:
        """Count the requests answered since the last fold."""
        pending = self._pending
        if not pending:
            return
        self._pending = []
        by_key = self._by_key
        wall = time.time() - time.monotonic()  # monotonic seconds + wall = time.time()
        for context, written_s in pending:
            key = context.request_name or context.api_key
            stats = by_key.get(key) or self.stats(key)
            handled = context.handled_s
            if not handled:  # the handler failed: the connection closed unanswered
                stats.observe(context.api_version, None, written_s + wall)
                continue
            remote = context.remote_s
            started = context.started_s
            stats.observe(
                context.api_version,
                (
                    written_s - context.received_s,
                    started - context.received_s,
                    handled - started - remote,
                    remote,
                    written_s - handled,
                ),
                written_s + wall,
            )

    def sum_ms(self, name: str, family: str) -> float:
        """The sum of a histogram (``totaltimems`` or a stage) for a request name."""
        self.fold()
        stats = self._by_name.get(name)
        return 0.0 if stats is None else stats.sums[HISTOGRAMS.index(family)]

    def exposition(self) -> str:
        """The request metrics in Prometheus' text format (0.0.4)."""
        self.fold()
        if not self._by_name:
            return ""
        texts = [stats.text() for stats in self._by_name.values()]
        out = [
            f"# HELP {REQUESTS}_total {_REQUESTS_HELP}\n# TYPE {REQUESTS}_total counter\n",
            *(counter for (counter, _), _ in texts),
            f"# HELP {REQUESTS}_created {_REQUESTS_HELP}\n# TYPE {REQUESTS}_created gauge\n",
            *(created for (_, created), _ in texts),
        ]
        for i, family in enumerate(HISTOGRAMS):
            name = PREFIX + family
            out.append(f"# HELP {name} {_HELP[family]}\n# TYPE {name} histogram\n")
            out.extend(histograms[i][0] for _, histograms in texts)
            out.append(f"# HELP {name}_created {_HELP[family]}\n# TYPE {name}_created gauge\n")
            out.extend(histograms[i][1] for _, histograms in texts)
        return "".join(out)
