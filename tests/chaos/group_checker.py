"""Check the consumer-group part of a history (``chaos.groups`` describes its events).

Pure: events in, a ``GroupResult`` out.

Anomalies, per group and partition:

- **commits backwards**: an acknowledged commit lower than one acknowledged before it;
- **lost commits**: the offset a new member is given after the heal (``group-committed``)
  lower than the last acknowledged commit;
- **resumed past the commits**: the new member's first read (or, with nothing to read, its
  committed offset) beyond every offset the group ever asked to commit;
- **skipped**: an acknowledged write no member of the group ever read, on a partition the
  new member read to its end (the group started from offset 0, so its reads and the
  resumption together must cover the whole log);
- **non-monotonic resume**: the new member's offsets not strictly increasing.

Re-reading after a rebalance or a failed commit is allowed (at least once) and counted as
``reread``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

RESUMER = "resume"


@dataclass
class GroupResult:
    reads: int = 0
    reread: int = 0  # reads of a (partition, offset) the group had read before
    commits_ok: int = 0
    commits_failed: int = 0
    # (partition, earlier offset, its ack time, later offset, its ack time)
    backwards: list[tuple[int, int, float, int, float]] = field(default_factory=list)
    # (partition, last acknowledged commit, offset given to the new member)
    lost_commits: list[tuple[int, int, int | None]] = field(default_factory=list)
    # (partition, where the new member started, the highest offset ever committed)
    resumed_past: list[tuple[int, int, int]] = field(default_factory=list)
    skipped: list[tuple[int, int, str]] = field(default_factory=list)  # (partition, offset, v)
    nonmonotonic_resume: list[tuple[int, int, int]] = field(default_factory=list)
    unfinished: list[int] = field(default_factory=list)  # resumed partitions not read to end
    resumed: bool = False

    @property
    def ok(self) -> bool:
        return not (
            self.backwards
            or self.lost_commits
            or self.resumed_past
            or self.skipped
            or self.nonmonotonic_resume
            or self.unfinished
        )

    def anomalies(self) -> dict[str, int]:
        return {
            "group commits backwards": len(self.backwards),
            "group commits lost": len(self.lost_commits),
            "group resumed past its commits": len(self.resumed_past),
            "group skipped acked writes": len(self.skipped),
            "group resume non-monotonic": len(self.nonmonotonic_resume),
        }


def check_groups(
    events: list[dict[str, Any]], acked_positions: dict[str, tuple[int, int]]
) -> GroupResult:
    """``acked_positions``: value -> (partition, offset) of every acknowledged write (where
    the final reader found it, else its ack's offset)."""
    result = GroupResult()
    seen: set[tuple[int, int]] = set()
    group_values: set[str] = set()
    highest_ok: dict[int, tuple[int, float]] = {}  # partition -> (offset, ack time)
    highest_asked: dict[int, int] = {}
    given: dict[int, int | None] = {}
    first_resume: dict[int, int] = {}
    last_resume: dict[int, int] = {}
    ended: set[int] = set()
    resume_partitions: set[int] = set()
    for e in events:
        kind = e["type"]
        if kind == "group-read":
            p, offset = e["partition"], e["offset"]
            result.reads += 1
            if (p, offset) in seen:
                result.reread += 1
            seen.add((p, offset))
            group_values.add(e["value"])
            if e["member"] == RESUMER:
                first_resume.setdefault(p, offset)
                if p in last_resume and offset <= last_resume[p]:
                    result.nonmonotonic_resume.append((p, last_resume[p], offset))
                last_resume[p] = offset
        elif kind == "group-commit":
            p, offset = e["partition"], e["offset"]
            if e["phase"] == "invoke":
                highest_asked[p] = max(highest_asked.get(p, 0), offset)
            elif e["phase"] == "fail":
                result.commits_failed += 1
            elif e["phase"] == "ok":
                result.commits_ok += 1
                before = highest_ok.get(p)
                if before is not None and offset < before[0]:
                    result.backwards.append((p, before[0], before[1], offset, e["t"]))
                if before is None or offset > before[0]:
                    highest_ok[p] = (offset, e["t"])
        elif kind == "group-committed":
            result.resumed = True
            given[e["partition"]] = e["offset"]
            resume_partitions.add(e["partition"])
        elif kind == "group-end" and e["member"] == RESUMER:
            ended.add(e["partition"])

    for p, offset in sorted(given.items()):
        last = highest_ok.get(p)
        if last is not None and (offset is None or offset < last[0]):
            result.lost_commits.append((p, last[0], offset))
        start = first_resume.get(p, offset if offset is not None else 0)
        if start > highest_asked.get(p, 0):
            result.resumed_past.append((p, start, highest_asked.get(p, 0)))
    result.unfinished = sorted(resume_partitions - ended)
    if result.resumed:
        for value, (p, offset) in sorted(acked_positions.items(), key=lambda kv: kv[1]):
            if p in ended and value not in group_values:
                result.skipped.append((p, offset, value))
    return result


def report_lines(result: GroupResult) -> list[str]:
    lines = [
        f"consumer group: {result.reads} reads ({result.reread} re-reads), "
        f"commits {result.commits_ok} acknowledged, {result.commits_failed} failed; "
        + ("resumed after the heal" if result.resumed else "no resumption recorded")
    ]
    for p, o1, t1, o2, t2 in result.backwards[:5]:
        lines.append(
            f"  group commit backwards: partition {p} committed {o2} at t={t2:.1f} "
            f"after {o1} was acknowledged at t={t1:.1f}"
        )
    for p, last, offset in result.lost_commits[:5]:
        lines.append(
            f"  group commit lost: partition {p} resumed at {offset}, last acknowledged {last}"
        )
    for p, start, asked in result.resumed_past[:5]:
        lines.append(
            f"  group resumed past commits: partition {p} at {start}, highest committed {asked}"
        )
    for p, offset, value in result.skipped[:5]:
        lines.append(f"  group skipped: value {value} at {p}/{offset} never read by the group")
    for p, previous, offset in result.nonmonotonic_resume[:5]:
        lines.append(f"  group resume non-monotonic: partition {p} at {offset} after {previous}")
    if result.unfinished:
        lines.append(f"  the resumed member did not finish partitions {result.unfinished}")
    return lines
