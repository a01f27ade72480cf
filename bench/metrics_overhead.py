"""What serving Prometheus metrics costs: produce and consume throughput of a broker with
``metrics.port`` set against one without, one run (prints figures).

    .venv/bin/python bench/metrics_overhead.py [--runs 5] [--records 300000] [--size 100]

Two 1-broker LocalClusters side by side (each its own ZooKeeper), one with metrics on
(a scrape of ``/metrics`` every second during the run, as Prometheus would) and one
without, measured alternately with the same confluent-kafka client: one partition,
``acks=1``, ``linger.ms=5``, records of ``--size`` bytes. Medians over ``--runs``; the
ratio is metrics-on over metrics-off (1.0: no cost).
"""

from __future__ import annotations

import argparse
import threading
import urllib.request
import uuid
from contextlib import ExitStack

from common import consume_all, create_topic, median, produce_burst, replog_cluster, say, work_dir

PRODUCER = {"acks": "1", "linger.ms": 5, "compression.type": "none"}


class Scraper:
    """Scrapes ``url`` every second on a thread until stopped (Prometheus' default is 15 s;
    1 s makes the cost visible)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.scrapes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            with urllib.request.urlopen(self.url, timeout=30) as response:
                response.read()
            self.scrapes += 1

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def measure(bootstrap: str, records: int, size: int) -> tuple[float, float]:
    topic = f"bench-metrics-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 1, 1)
    return (
        records / produce_burst(bootstrap, topic, records, size, PRODUCER),
        records / consume_all(bootstrap, topic, records),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()
    print(
        f"command: .venv/bin/python bench/metrics_overhead.py --runs {args.runs} "
        f"--records {args.records} --size {args.size}"
    )
    results: dict[str, list[tuple[float, float]]] = {"on": [], "off": []}
    with work_dir("metrics") as out, ExitStack() as stack:
        on = stack.enter_context(replog_cluster(out / "on", 1, {"metrics.port": "0"}))
        off = stack.enter_context(replog_cluster(out / "off", 1))
        log_text = (on.broker_dir(0) / "broker.log").read_text()
        url = log_text.split("metrics at ", 1)[1].split()[0]
        measure(on.bootstrap_servers(), args.records // 10, args.size)  # warm up both
        measure(off.bootstrap_servers(), args.records // 10, args.size)
        for run in range(args.runs):
            for name, cluster in (
                (("on", on), ("off", off)) if run % 2 else (("off", off), ("on", on))
            ):
                if name == "on":
                    with Scraper(url):
                        results[name].append(
                            measure(cluster.bootstrap_servers(), args.records, args.size)
                        )
                else:
                    results[name].append(
                        measure(cluster.bootstrap_servers(), args.records, args.size)
                    )
                say(
                    f"run {run + 1} {name}: {results[name][-1][0]:,.0f} / {results[name][-1][1]:,.0f} rec/s"
                )
    print(f"\nmetrics overhead, {args.size}-byte records, medians of {args.runs} alternated runs")
    for i, what in enumerate(("produce", "consume")):
        on_med = median([r[i] for r in results["on"]])
        off_med = median([r[i] for r in results["off"]])
        print(
            f"  {what:8} metrics on {on_med:>10,.0f} rec/s   off {off_med:>10,.0f} rec/s   "
            f"ratio {on_med / off_med:.2f}"
        )


if __name__ == "__main__":
    main()
