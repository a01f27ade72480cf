"""The demo's chart: produce and consume rate over time, the broker failure marked."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ChartData:
    """Rates per one-second bin from ``start`` (seconds since the epoch)."""

    start: float
    sent: list[float]
    acked: list[float]
    consumed: list[float]
    kill_at: float | None
    restart_at: float | None
    killed_broker: int | None
    stall: tuple[float, float] | None  # longest ack gap of one partition: (from, to)


def draw(data: ChartData, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 5), dpi=110)
    xs = list(range(len(data.acked)))
    ax.plot(xs, data.sent, color="0.65", linewidth=1, label="sent by the producer")
    ax.plot(xs, data.acked, color="tab:blue", linewidth=1.6, label="acknowledged (acks=all)")
    ax.plot(
        list(range(len(data.consumed))),
        data.consumed,
        color="tab:orange",
        linewidth=1.6,
        label="consumed by the Spark query",
    )
    if data.stall is not None:
        ax.axvspan(
            data.stall[0] - data.start,
            data.stall[1] - data.start,
            color="tab:red",
            alpha=0.12,
            label="longest partition stall",
        )
    if data.kill_at is not None:
        ax.axvline(data.kill_at - data.start, color="tab:red", linestyle="--", linewidth=1.5)
        ax.annotate(
            f"SIGKILL broker {data.killed_broker}",
            (data.kill_at - data.start, 1),
            xycoords=("data", "axes fraction"),
            xytext=(4, -14),
            textcoords="offset points",
            color="tab:red",
        )
    if data.restart_at is not None:
        ax.axvline(data.restart_at - data.start, color="tab:green", linestyle="--", linewidth=1.5)
        ax.annotate(
            f"broker {data.killed_broker} restarted",
            (data.restart_at - data.start, 1),
            xycoords=("data", "axes fraction"),
            xytext=(4, -28),
            textcoords="offset points",
            color="tab:green",
        )
    ax.set_xlabel("seconds since the producer started")
    ax.set_ylabel("records / second")
    ax.set_title("replog demo: page views through a 3-broker cluster, one broker killed")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", framealpha=0.9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
