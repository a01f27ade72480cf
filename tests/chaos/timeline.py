"""The campaign's timeline chart: faults as shaded bands, acknowledged writes per second and
leader changes per second as lines, drawn from the history alone.

``series`` is pure (events in, one-second bins out); ``draw`` writes ``timeline.png`` and
``timeline.svg`` with matplotlib, as the demo's chart does (``replog.demo.chart``). The
SVG keeps its text as text, so a fault's name can be searched for in it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.history import fault_began


@dataclass(frozen=True)
class Band:
    start: float
    stop: float
    name: str


@dataclass
class Timeline:
    """Counts per one-second bin from t=0."""

    acked: list[int] = field(default_factory=list)
    leader_changes: list[int] = field(default_factory=list)
    faults: list[Band] = field(default_factory=list)


def series(events: list[dict[str, Any]]) -> Timeline:
    end = max((e["t"] for e in events), default=0.0)
    bins = max(1, math.ceil(end) + (1 if end == math.ceil(end) else 0))
    timeline = Timeline(acked=[0] * bins, leader_changes=[0] * bins)
    leader_of: dict[int, tuple[int, int]] = {}
    started: dict[int, dict[str, Any]] = {}
    for e in events:
        second = min(int(e["t"]), bins - 1)
        if e["type"] == "ok":
            timeline.acked[second] += 1
        elif e["type"] == "leader":
            now = (e["leader"], e["leader_epoch"])
            before = leader_of.get(e["partition"])
            if before is not None and now[0] != before[0]:
                timeline.leader_changes[second] += 1
            leader_of[e["partition"]] = now
        elif e["type"] == "nemesis" and e["phase"] == "start":
            started[e["fault"]] = e
        elif e["type"] == "nemesis" and e["phase"] == "stop" and e["fault"] in started:
            begin = started.pop(e["fault"])
            timeline.faults.append(Band(fault_began(begin), e["t"], e["name"]))
    for begin in started.values():  # never healed: the band runs to the end
        timeline.faults.append(Band(fault_began(begin), end, begin["name"]))
    timeline.faults.sort(key=lambda b: b.start)
    return timeline


def draw(timeline: Timeline, directory: Path, title: str = "chaos campaign") -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    matplotlib.rcParams["svg.fonttype"] = "none"
    fig, acked_ax = plt.subplots(figsize=(12, 5), dpi=110)
    xs = list(range(len(timeline.acked)))
    for n, band in enumerate(timeline.faults):
        acked_ax.axvspan(
            band.start,
            band.stop,
            color="tab:red",
            alpha=0.15,
            label="fault" if n == 0 else None,
        )
        acked_ax.annotate(
            band.name,
            (band.start, 1),
            xycoords=("data", "axes fraction"),
            xytext=(2, -10 - 11 * (n % 3)),
            textcoords="offset points",
            fontsize=7,
            color="tab:red",
        )
    acked_ax.plot(xs, timeline.acked, color="tab:blue", linewidth=1.4, label="acked writes / s")
    leaders_ax = acked_ax.twinx()
    leaders_ax.plot(
        xs,
        timeline.leader_changes,
        color="tab:orange",
        linewidth=1.2,
        drawstyle="steps-post",
        label="leader changes / s",
    )
    acked_ax.set_xlabel("seconds since the campaign started")
    acked_ax.set_ylabel("acknowledged writes / second")
    leaders_ax.set_ylabel("leader changes / second")
    acked_ax.set_ylim(bottom=0)
    leaders_ax.set_ylim(bottom=0, top=max(3, max(timeline.leader_changes, default=0) + 1))
    acked_ax.set_title(title)
    acked_ax.grid(alpha=0.3)
    handles, labels = acked_ax.get_legend_handles_labels()
    more_handles, more_labels = leaders_ax.get_legend_handles_labels()
    acked_ax.legend(
        handles + more_handles,
        labels + more_labels,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.13),
        ncol=3,
        framealpha=0.9,
    )
    fig.tight_layout()
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / "timeline.png", directory / "timeline.svg"]
    for path in paths:
        fig.savefig(path)
    plt.close(fig)
    return paths
