"""Check a campaign's history, in the style of Jepsen's queue and Kafka checkers.

Pure: takes the list of events (``chaos.history`` describes their shapes), returns a
``CheckResult``; no I/O, no clock.

Safety (any of these fails the campaign):

- **lost**: acknowledged (``ok``), never read by the final reader although the final
  reader reached the partition's end;
- **duplicates**: one value at two positions (partition, offset) across acks and reads;
  unless the replicas show the copies were written under two epochs of the producer
  (``duplicate-origin`` events): librdkafka bumps an idempotent producer's epoch for every
  partition when one answers OUT_OF_ORDER_SEQUENCE_NUMBER, and retries a batch that may
  already be in the log under the new epoch (librdkafka issue 4953); no broker can
  deduplicate across epochs, so these are reported (``epoch_bump_duplicates``) and do
  not fail the check;
- **inconsistent offsets**: two values at one position across acks and reads;
- **non-monotonic**: within one reader, a partition's offsets not strictly increasing;
- **reordered**: ``a`` acknowledged before ``b`` was sent, on the same partition, yet
  ``b`` sits at a lower offset;
- **unexpected**: a value read that no one sent;
- **admin errors**: an ``admin`` operation (``chaos.admin``) answered with an error a
  client cannot retry (the "already done" answer to a retry excepted);
- **crashed**: a ZooKeeper or broker process that exited by itself (``crash`` events);
- **divergent replicas**: ``divergence`` events (``chaos.replicas``), offsets below the
  high watermark where the replicas' logs on disk differ;
- the consumer group's anomalies (``chaos.group_checker``): commits going backwards or
  lost, a resumption past the commits, acknowledged writes the group skipped. A group's
  reads also count for inconsistent offsets and unexpected values;
- the transactional workload's anomalies (``chaos.txn_checker``, on its own topics):
  aborted reads, lost writes, torn transactions, duplicates, non-monotonic reads, and
  the consume-transform-produce flow's exactly-once and write cycles.

Writes that failed (timeouts, errors) are indeterminate: reading them is fine and counted
as ``recovered``.

Liveness, reported and not asserted: per partition the longest time without an
acknowledgement, and per fault the time from its heal to the first acknowledgement on each
partition (``None``: none came).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from chaos.admin import DEGRADED_AFTER_HEAL_S, accepted
from chaos.group_checker import GroupResult, check_groups, report_lines
from chaos.history import fault_began
from chaos.txn_checker import TxnResult, check_transactions
from chaos.txn_checker import report_lines as txn_report_lines

Position = tuple[int, int]  # (partition, offset)


@dataclass
class Gap:
    partition: int
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass
class FaultWindow:
    fault: int
    name: str
    detail: str
    start: float
    stop: float | None
    # partition -> seconds from the heal to the first ack after it (None: no ack came)
    recovery: dict[int, float | None] = field(default_factory=dict)
    # the longest ack gap overlapping [start, stop]
    longest_gap: Gap | None = None
    # seconds from the heal to full ISRs (None: not full within the campaign's timeout, or
    # not waited for); the campaign's "isr full" / "isr not full" info events
    isr_full: float | None = None
    isr_short: bool = False
    # what the fault's victim did after the recovery ("after recovery" info events)
    after_recovery: str = ""

    @property
    def worst_recovery(self) -> float | None:
        values = list(self.recovery.values())
        if not values:
            return 0.0
        if any(v is None for v in values):
            return None
        return max(v for v in values if v is not None)


@dataclass
class CheckResult:
    sent: int = 0
    acked: int = 0
    acked_without_offset: list[str] = field(default_factory=list)  # reported, not an anomaly
    failed: int = 0
    read: int = 0
    recovered: int = 0  # failed (indeterminate) writes found in the log
    lost: list[tuple[int, int, str]] = field(default_factory=list)  # (partition, offset, value)
    duplicates: dict[str, list[Position]] = field(default_factory=dict)
    # value -> [[partition, offset, producer id, epoch, sequence]] for copies under two epochs
    epoch_bump_duplicates: dict[str, list[list[int]]] = field(default_factory=dict)
    inconsistent: dict[Position, list[tuple[str, str]]] = field(default_factory=dict)
    nonmonotonic: list[tuple[str, int, int, int]] = field(default_factory=list)
    reordered: list[tuple[int, str, int, str, int]] = field(default_factory=list)
    unexpected: list[tuple[int, int, str]] = field(default_factory=list)
    unread_partitions: list[int] = field(default_factory=list)  # final read never reached end
    divergent: list[dict[str, Any]] = field(default_factory=list)
    crashed: list[str] = field(default_factory=list)  # processes that exited by themselves
    admin_ok: int = 0
    admin_retried: int = 0  # retriable (or already-done) errors
    admin_errors: list[tuple[float, str, str, str]] = field(
        default_factory=list
    )  # t, op, topic, code
    longest_gap: dict[int, Gap] = field(default_factory=dict)
    faults: list[FaultWindow] = field(default_factory=list)
    groups: GroupResult = field(default_factory=GroupResult)
    transactions: TxnResult = field(default_factory=TxnResult)

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.broker_duplicates
            or self.inconsistent
            or self.nonmonotonic
            or self.reordered
            or self.unexpected
            or self.unread_partitions
            or self.divergent
            or self.crashed
            or self.admin_errors
            or not self.groups.ok
            or not self.transactions.ok
        )

    @property
    def broker_duplicates(self) -> dict[str, list[Position]]:
        """Duplicates not explained by a client's epoch bump."""
        return {v: w for v, w in self.duplicates.items() if v not in self.epoch_bump_duplicates}

    def anomalies(self) -> dict[str, int]:
        return {
            "lost": len(self.lost),
            "duplicated": len(self.broker_duplicates),
            "inconsistent offsets": len(self.inconsistent),
            "non-monotonic reads": len(self.nonmonotonic),
            "reordered acks": len(self.reordered),
            "unexpected values": len(self.unexpected),
            "partitions not read to the end": len(self.unread_partitions),
            "divergent replica offsets": len(self.divergent),
            "crashed processes": len(self.crashed),
            "admin errors not retriable": len(self.admin_errors),
            **self.groups.anomalies(),
        }


def check(events: list[dict[str, Any]]) -> CheckResult:
    result = CheckResult()
    invoked: dict[str, int] = {}  # value -> partition
    acked: dict[str, tuple[int, int, float]] = {}  # value -> (partition, offset, time)
    failed: set[str] = set()
    positions: dict[str, set[Position]] = defaultdict(set)
    at_position: dict[Position, dict[str, str]] = defaultdict(dict)  # pos -> value -> source
    final_values: dict[int, set[str]] = defaultdict(set)
    final_position: dict[str, Position] = {}
    final_reached: set[int] = set()
    last_offset: dict[tuple[str, int], int] = {}
    partitions: set[int] = set()

    for e in events:
        kind = e["type"]
        if kind == "invoke":
            invoked[e["value"]] = e["partition"]
            partitions.add(e["partition"])
        elif kind == "ok":
            if e["offset"] is None or e["offset"] < 0:
                # acknowledged without an offset (librdkafka's answer to a duplicate batch):
                # it must still be read, but says nothing about where
                result.acked_without_offset.append(e["value"])
                acked[e["value"]] = (e["partition"], -1, e["t"])
                continue
            pos = (e["partition"], e["offset"])
            acked[e["value"]] = (e["partition"], e["offset"], e["t"])
            positions[e["value"]].add(pos)
            at_position[pos].setdefault(e["value"], "ack")
        elif kind == "fail":
            failed.add(e["value"])
        elif kind == "read":
            reader, p, offset, value = e["reader"], e["partition"], e["offset"], e["value"]
            result.read += 1
            pos = (p, offset)
            positions[value].add(pos)
            at_position[pos].setdefault(value, f"read by {reader}")
            key = (reader, p)
            previous = last_offset.get(key)
            if previous is not None and offset <= previous:
                result.nonmonotonic.append((reader, p, previous, offset))
            last_offset[key] = offset
            if value not in invoked:
                result.unexpected.append((p, offset, value))
            if reader == "final":
                final_values[p].add(value)
                final_position.setdefault(value, pos)
        elif kind == "group-read":
            pos = (e["partition"], e["offset"])
            positions[e["value"]].add(pos)
            at_position[pos].setdefault(e["value"], f"read by group member {e['member']}")
            if e["value"] not in invoked:
                result.unexpected.append((*pos, e["value"]))
        elif kind == "admin" and e["phase"] == "ok":
            result.admin_ok += 1
        elif kind == "admin" and e["phase"] == "fail":
            if accepted(e["op"], e["code"], e["attempt"], degraded=_degraded(events, e["t"])):
                result.admin_retried += 1
            else:
                result.admin_errors.append((e["t"], e["op"], e["topic"], e["code"]))
        elif kind == "duplicate-origin":
            epochs = {(c[2], c[3]) for c in e["copies"]}
            if len(e["copies"]) > 1 and len({pid for pid, _ in epochs}) == 1 and len(epochs) > 1:
                result.epoch_bump_duplicates[e["value"]] = e["copies"]
        elif kind == "crash":
            result.crashed.append(f"{e['process']} (status {e['status']})")
        elif kind == "divergence":
            result.divergent.append(e)
        elif kind == "end" and e["reader"] == "final":
            final_reached.add(e["partition"])

    result.sent = len(invoked)
    result.acked = len(acked)
    result.failed = len(failed - acked.keys())
    result.recovered = sum(1 for v in failed - acked.keys() if v in final_position)

    result.unread_partitions = sorted(p for p in partitions if p not in final_reached)
    for value, (p, offset, _) in sorted(acked.items(), key=lambda kv: kv[1][:2]):
        if p in final_reached and value not in final_values[p]:
            result.lost.append((p, offset, value))
    result.duplicates = {v: sorted(ps) for v, ps in positions.items() if len(ps) > 1}
    result.inconsistent = {
        pos: sorted(values.items()) for pos, values in at_position.items() if len(values) > 1
    }
    result.reordered = _reordered(events, acked, final_position)
    result.longest_gap, gaps = _gaps(events, partitions)
    result.faults = _fault_windows(events, partitions, gaps)
    acked_positions = {
        value: final_position.get(value, (p, offset)) for value, (p, offset, _) in acked.items()
    }
    result.groups = check_groups(events, acked_positions)
    result.transactions = check_transactions(events)
    return result


def _degraded(events: list[dict[str, Any]], t: float) -> bool:
    """Whether a fault was active at ``t`` or healed less than DEGRADED_AFTER_HEAL_S before."""
    started: dict[int, float] = {}
    for e in events:
        if e["type"] != "nemesis":
            continue
        if e["phase"] == "start":
            started[e["fault"]] = fault_began(e)
        elif e["fault"] in started:
            if started[e["fault"]] <= t <= e["t"] + DEGRADED_AFTER_HEAL_S:
                return True
            del started[e["fault"]]
    return any(start <= t for start in started.values())


def _reordered(
    events: list[dict[str, Any]],
    acked: dict[str, tuple[int, int, float]],
    final_position: dict[str, Position],
) -> list[tuple[int, str, int, str, int]]:
    """(partition, earlier value, its offset, later value, its offset) where the later value,
    sent after the earlier one's ack, sits at or below it. A value's offset is where the
    final reader found it, else where its ack put it."""

    def position(value: str) -> Position | None:
        if value in final_position:
            return final_position[value]
        if value in acked:
            return acked[value][0], acked[value][1]
        return None

    out = []
    highest: dict[int, tuple[int, str]] = {}  # partition -> (offset, value) acked so far
    bounds: list[tuple[str, tuple[int, str]]] = []  # (value, highest acked when it was sent)
    for e in events:
        if e["type"] == "invoke" and e["partition"] in highest:
            bounds.append((e["value"], highest[e["partition"]]))
        elif e["type"] == "ok":
            where = position(e["value"])
            if where is None or where[1] < 0:
                continue
            assert where is not None
            if where[0] not in highest or where[1] > highest[where[0]][0]:
                highest[where[0]] = (where[1], e["value"])
    for value, (bound_offset, bound_value) in bounds:
        where = position(value)
        if where is not None and 0 <= where[1] <= bound_offset:
            out.append((where[0], bound_value, bound_offset, value, where[1]))
    return sorted(out)


def _gaps(
    events: list[dict[str, Any]], partitions: set[int]
) -> tuple[dict[int, Gap], dict[int, list[Gap]]]:
    """Per partition, the gaps between consecutive acks within the write window (from the
    first invoke to the producer's stop, or the last invoke in a history without it), and
    the longest of them. A producer that stopped sending (seed 16: its messages held by
    its client for 15 minutes) shows as a gap to its stop, not as a short window."""
    invokes = [e["t"] for e in events if e["type"] == "invoke"]
    if not invokes:
        return {}, {}
    stops = [e["t"] for e in events if e["type"] == "info" and e["what"] == "producer stopped"]
    window_start, window_end = min(invokes), max([*invokes, *stops])
    ack_times: dict[int, list[float]] = defaultdict(list)
    for e in events:
        if e["type"] == "ok":
            ack_times[e["partition"]].append(e["t"])
    gaps: dict[int, list[Gap]] = {}
    longest: dict[int, Gap] = {}
    for p in sorted(partitions):
        times = sorted(t for t in ack_times[p] if t <= window_end)
        edges = [window_start, *times, window_end]
        gaps[p] = [Gap(p, a, b) for a, b in zip(edges, edges[1:], strict=False) if b > a]
        if gaps[p]:
            longest[p] = max(gaps[p], key=lambda g: g.seconds)
    return longest, gaps


def _fault_windows(
    events: list[dict[str, Any]], partitions: set[int], gaps: dict[int, list[Gap]]
) -> list[FaultWindow]:
    windows: dict[int, FaultWindow] = {}
    for e in events:
        if e["type"] != "nemesis":
            continue
        if e["phase"] == "start":
            windows[e["fault"]] = FaultWindow(
                e["fault"], e["name"], e.get("detail", ""), fault_began(e), None
            )
        elif e["phase"] == "stop" and e["fault"] in windows:
            windows[e["fault"]].stop = e["t"]
    for e in events:
        if e["type"] != "info" or e.get("fault") not in windows:
            continue
        if e["what"] == "isr full":
            windows[e["fault"]].isr_full = e["seconds"]
        elif e["what"] == "isr not full":
            windows[e["fault"]].isr_short = True
        elif e["what"] == "after recovery":
            windows[e["fault"]].after_recovery = e["detail"]
    ack_times: dict[int, list[float]] = defaultdict(list)
    for e in events:
        if e["type"] == "ok":
            ack_times[e["partition"]].append(e["t"])
    for window in windows.values():
        end = window.stop if window.stop is not None else float("inf")
        for p in sorted(partitions):
            if window.stop is not None:
                after = [t for t in ack_times[p] if t >= window.stop]
                window.recovery[p] = (min(after) - window.stop) if after else None
            for gap in gaps.get(p, []):
                if gap.end >= window.start and gap.start <= end:
                    if window.longest_gap is None or gap.seconds > window.longest_gap.seconds:
                        window.longest_gap = gap
    return [windows[k] for k in sorted(windows)]


def report(result: CheckResult, title: str = "chaos campaign") -> str:
    """A one-page text report."""
    lines = [f"== {title}: {'OK' if result.ok else 'ANOMALIES FOUND'} =="]
    lines.append(
        f"writes: {result.sent} sent, {result.acked} acknowledged, {result.failed} failed "
        f"(indeterminate; {result.recovered} of them found in the log); {result.read} reads"
    )
    if result.acked_without_offset:
        shown = ", ".join(result.acked_without_offset[:5])
        lines.append(
            f"acknowledged without an offset: {len(result.acked_without_offset)} ({shown}); "
            "each must still be read once"
        )
    lines.append(
        "anomalies: " + ", ".join(f"{name} {count}" for name, count in result.anomalies().items())
    )
    for p, offset, value in result.lost[:5]:
        lines.append(f"  lost: value {value} acknowledged at {p}/{offset}, never read")
    for value, where in list(result.broker_duplicates.items())[:5]:
        lines.append(f"  duplicated: value {value} at {', '.join(f'{p}/{o}' for p, o in where)}")
    if result.epoch_bump_duplicates:
        lines.append(
            f"duplicated by a producer epoch bump (librdkafka, not deduplicable): "
            f"{len(result.epoch_bump_duplicates)}"
        )
    for value, copies in list(result.epoch_bump_duplicates.items())[:5]:
        where = ", ".join(f"{p}/{o} (epoch {epoch} seq {seq})" for p, o, _, epoch, seq in copies)
        lines.append(f"  value {value} at {where}")
    for (p, offset), values in list(result.inconsistent.items())[:5]:
        seen = "; ".join(f"{v} ({src})" for v, src in values)
        lines.append(f"  inconsistent: {p}/{offset} holds {seen}")
    for reader, p, previous, offset in result.nonmonotonic[:5]:
        lines.append(f"  non-monotonic: {reader} read partition {p} at {offset} after {previous}")
    for p, v1, o1, v2, o2 in result.reordered[:5]:
        lines.append(f"  reordered: partition {p}: {v2}@{o2} sent after {v1}@{o1} was acked")
    for p, offset, value in result.unexpected[:5]:
        lines.append(f"  unexpected: {value} at {p}/{offset} was never sent")
    for d in result.divergent[:5]:
        lines.append(f"  divergent: {d['partition']}/{d['offset']} replicas hold {d['values']}")
    if result.admin_ok or result.admin_retried or result.admin_errors:
        lines.append(
            f"admin: {result.admin_ok} operations done, {result.admin_retried} retriable errors, "
            f"{len(result.admin_errors)} others"
        )
    for t, op, topic, code in result.admin_errors[:5]:
        lines.append(f"  admin error: {op} {topic} answered {code} at t={t:.1f}")
    if result.crashed:
        lines.append(f"  crashed: {', '.join(result.crashed)}")
    if result.unread_partitions:
        lines.append(f"  final read did not reach the end of partitions {result.unread_partitions}")
    if result.groups.reads or result.groups.resumed:
        lines.extend(report_lines(result.groups))
    if result.transactions.transactions or result.transactions.reads:
        lines.extend(txn_report_lines(result.transactions))
    lines.append("availability (longest time without an ack, per partition):")
    for p, gap in sorted(result.longest_gap.items()):
        lines.append(f"  partition {p}: {gap.seconds:6.2f} s  (t={gap.start:.1f}..{gap.end:.1f})")
    if result.faults:
        lines.append("faults (t start..heal; longest ack gap overlapping; heal -> first ack):")
    for w in result.faults:
        stop = f"{w.stop:.1f}" if w.stop is not None else "never"
        gap = (
            f"{w.longest_gap.seconds:5.2f} s on p{w.longest_gap.partition}"
            if w.longest_gap
            else "-"
        )
        worst = w.worst_recovery
        rec = "no ack after heal" if worst is None else f"{worst:.2f} s"
        isr = "" if w.isr_full is None else f"; ISRs full {w.isr_full:.2f} s after the heal"
        isr += "; ISRs still short after the recovery timeout" if w.isr_short else ""
        lines.append(
            f"  #{w.fault} {w.name} [{w.start:.1f}..{stop}] gap {gap}; recovery {rec}{isr}"
        )
        if w.detail:
            lines.append(f"      {w.detail}")
        if w.after_recovery:
            lines.append(f"      then: {w.after_recovery}")
    if result.faults:
        lines.append("by kind (faults; longest ack gap; worst heal -> ack; worst ISR refill):")
    for name, windows in sorted(by_kind(result.faults).items()):
        gaps = [w.longest_gap.seconds for w in windows if w.longest_gap is not None]
        recoveries = [w.worst_recovery for w in windows]
        refills = [w.isr_full for w in windows]
        short = any(w.isr_short for w in windows)
        lines.append(
            f"  {name}: {len(windows)}; {_most(gaps)}; "
            f"{'no ack after a heal' if None in recoveries else _most(recoveries)}; "
            f"{'an ISR short after a heal' if short else _most(refills)}"
        )
    return "\n".join(lines)


def by_kind(faults: list[FaultWindow]) -> dict[str, list[FaultWindow]]:
    out: dict[str, list[FaultWindow]] = defaultdict(list)
    for w in faults:
        out[w.name].append(w)
    return dict(out)


def _most(values: list[float | None]) -> str:
    present = [v for v in values if v is not None]
    return f"{max(present):.2f} s" if present else "-"
