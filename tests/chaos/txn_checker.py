"""Check the transactional part of a history (``chaos.txn_workload`` writes it) for the
anomalies Jepsen's analyses of Redpanda (2022) and Bufstream (2024) found in Kafka-family
transactions.

Pure: events in, a ``TxnResult`` out; no I/O, no clock.

Events (besides ``chaos.history``'s ``t``/``wall``)::

    {"type": "txn", "phase": "invoke", "producer": "p0", "txn": "p0.7"}      begin
    {"type": "txn-send", "txn": "p0.7", "topic": "t", "partition": 2, "value": "p0.7.0",
     "source": "w"}                       source: the input value it copies (consume-transform-produce)
    {"type": "txn-ack", "txn": "p0.7", "topic": "t", "partition": 2, "value": "p0.7.0",
     "offset": 41}                        or "error" instead of "offset"
    {"type": "txn-consume", "txn": "w0.3", "reader": "w0", "session": 1, "topic": "in",
     "partition": 2, "offset": 41, "value": "p0.7.0"}      an input of a transaction
    {"type": "txn", "phase": "commit", "txn": "p0.7"}       commit_transaction called
    {"type": "txn", "phase": "ok" | "aborted" | "unknown", "txn": "p0.7", "error": "..."}
    {"type": "txn-session", "reader": "r0", "session": 1, "topic": "t", "starts": {"0": 0}}
    {"type": "txn-read", "reader": "r0", "session": 1, "topic": "t", "partition": 2,
     "offset": 41, "value": "p0.7.0"}     a read_committed poll's record
    {"type": "txn-end", "reader": "r0", "session": 1, "topic": "t", "partition": 2,
     "offset": 57}                        the reader's position reached 57 (end of partition)
    {"type": "txn-final", "topic": "t", "ends": {"2": 57}}   the final reader's targets
    {"type": "txn-drained", "topic": "in", "output": "out", "ends": {"2": 57},
     "inputs": {"2": 57}, "complete": true}
                                          the flow's committed offsets (ends) reached the
                                          offsets after the last inputs (or not: complete false)

A transaction's outcome: **committed** on ``ok``; **aborted** on ``aborted``, or when the
client never called ``commit_transaction`` (only the client's EndTxn can commit it);
**unknown** otherwise (a commit that timed out, a producer fenced or failed in the
commit): it may be either, but not half, so it counts as committed when any of its records
is seen anywhere and as aborted otherwise.

A reader *session* (one consumer's life, ``txn-session`` with its start offsets) *covers* a
record at ``(topic, partition, offset)`` when it started at or below that offset and its
position passed it (a record read above it, or a ``txn-end`` above it). A record's offset
is its acknowledgement's, else where a reader found it; a record with neither is covered by
an end reached after its transaction's outcome.

Anomalies (any fails the check):

- **aborted read**: a record of an aborted transaction read (by a reader or as the input
  of a consume-transform-produce transaction);
- **lost write**: a record of a committed transaction missed by a session that covers it;
- **torn transaction**: a visible transaction (committed, or unknown and partly seen) with
  a record missed by a covering session, or a session covering all of its records that
  saw some of them and not the others;
- **torn order**: a transaction ``a`` whose client had its commit before ``b`` began, yet
  on some partition a record of ``b`` sits below one of ``a``: both their orders in the
  log disagree with real time (and so, on two partitions, with each other). Concurrent
  transactions may interleave in different orders on two partitions: Kafka promises no
  serial order for them (Jepsen's Redpanda analysis calls such write cycles G0, which
  Kafka allows);
- **duplicate**: one value at two positions (acks, reads, inputs);
- **inconsistent offsets**: two values at one position;
- **non-monotonic read**: within one session, a partition's offsets not strictly
  increasing;
- **unexpected value**: a value read that no one sent;
- **not exactly once**: after the consume-transform-produce flow drained its input, an
  input record below the drained ends with no copy, or with two, in the output the final
  reader read;
- **final read short of the end**: the final reader (reader ``final``) never reached
  the end of a partition it was asked to read (``txn-final``): a transaction left open
  holds the last stable offset back;
- **flow not drained**: the flow's committed offsets never reached the last input
  (``complete`` false); the inputs below them are still checked for exactly once;
- **write cycle**: two flow transactions ``a`` and ``b``, ``a``'s inputs all below
  ``b``'s on an input partition (``b`` consumed from ``a``'s committed offsets, so began
  after ``a`` committed), yet on an output partition a record of ``b`` below one of ``a``:
  the output-input dependency graph has the cycle a -wr-> b -ww-> a.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from chaos.history import fault_began

Where = tuple[str, int, int]  # (topic, partition, offset)
Session = tuple[str, int]  # (reader, session)
FINAL = "final"


@dataclass
class Txn:
    txn: str
    producer: str
    invoked: float
    commit_invoked: bool = False
    outcome: str | None = None  # "ok", "aborted", "unknown" as recorded
    done: float | None = None  # when the client learned the outcome
    # value -> (topic, partition, source)
    sends: dict[str, tuple[str, int, str | None]] = field(default_factory=dict)
    # (topic, partition) -> offsets of the inputs it consumed
    consumed: dict[tuple[str, int], list[int]] = field(default_factory=dict)

    @property
    def status(self) -> str:
        """committed, aborted or unknown (see the module's docstring)."""
        if self.outcome == "ok":
            return "committed"
        if self.outcome == "aborted" or not self.commit_invoked:
            return "aborted"
        return "unknown"


@dataclass
class TxnResult:
    transactions: int = 0
    committed: int = 0
    aborted: int = 0
    unknown: int = 0
    unknown_visible: int = 0  # unknown outcomes whose records were seen (so committed)
    records: int = 0
    reads: int = 0
    flow_transactions: int = 0
    # (reader, topic, partition, offset, value, txn)
    aborted_reads: list[tuple[str, str, int, int, str, str]] = field(default_factory=list)
    # (txn, topic, partition, offset, value, session missing it)
    lost: list[tuple[str, str, int, int, str, str]] = field(default_factory=list)
    torn: list[tuple[str, str]] = field(default_factory=list)  # (txn, explanation)
    torn_order: list[tuple[str, str, str, int]] = field(default_factory=list)  # a, b, topic, p
    duplicates: dict[str, list[Where]] = field(default_factory=dict)
    inconsistent: dict[Where, list[str]] = field(default_factory=dict)
    nonmonotonic: list[tuple[str, str, int, int, int]] = field(default_factory=list)
    unexpected: list[tuple[str, int, int, str]] = field(default_factory=list)
    # (input value, its position, the output values copying it)
    not_exactly_once: list[tuple[str, Where, list[str]]] = field(default_factory=list)
    write_cycles: list[tuple[str, str, str, int, str, int]] = field(default_factory=list)
    unread: list[tuple[str, int]] = field(default_factory=list)  # final reader short of end
    drained: bool = False
    # (input topic, partition, committed offset, offset after the last input)
    not_drained: list[tuple[str, int, int, int]] = field(default_factory=list)
    drain_error: str = ""  # the flow's last failed OffsetFetch when it did not drain
    # fault kind -> {"faults": n, "committed"/"aborted"/"unknown": transactions whose client
    # learned the outcome while a fault of that kind was on}
    under_faults: dict[str, dict[str, int]] = field(default_factory=dict)

    def anomalies(self) -> dict[str, int]:
        return {
            "aborted read": len(self.aborted_reads),
            "lost write": len(self.lost),
            "torn transaction": len(self.torn),
            "torn order": len(self.torn_order),
            "duplicate": len(self.duplicates),
            "inconsistent offsets": len(self.inconsistent),
            "non-monotonic read": len(self.nonmonotonic),
            "unexpected value": len(self.unexpected),
            "not exactly once": len(self.not_exactly_once),
            "write cycle": len(self.write_cycles),
            "flow not drained": len(self.not_drained),
            "final read short of the end": len(self.unread),
        }

    @property
    def ok(self) -> bool:
        return not any(self.anomalies().values())

    @property
    def found(self) -> list[str]:
        return [name for name, count in self.anomalies().items() if count]


def check_transactions(events: list[dict[str, Any]]) -> TxnResult:
    result = TxnResult()
    txns: dict[str, Txn] = {}
    owner: dict[str, str] = {}  # value -> txn
    acked_at: dict[str, Where] = {}
    positions: dict[str, set[Where]] = defaultdict(set)
    at: dict[Where, set[str]] = defaultdict(set)
    seen_by: dict[Session, set[str]] = defaultdict(set)
    seen_anywhere: set[str] = set()
    starts: dict[Session, dict[tuple[str, int], int]] = {}
    reached: dict[Session, dict[tuple[str, int], int]] = defaultdict(dict)
    ends: dict[Session, dict[tuple[str, int], list[tuple[float, int]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    last: dict[tuple[str, int, str, int], int] = {}
    reads: list[tuple[str, str, int, int, str]] = []  # (reader, topic, p, offset, value)
    final_reads: dict[str, dict[str, Where]] = defaultdict(dict)  # topic -> value -> where
    drained: list[dict[str, Any]] = []
    faults: dict[int, list[Any]] = {}  # fault number -> [kind, start, stop or None]

    def observe(reader: str, session: int, topic: str, p: int, offset: int, value: str) -> None:
        where = (topic, p, offset)
        positions[value].add(where)
        at[where].add(value)
        seen_anywhere.add(value)
        key = (reader, session, topic, p)
        if key in last and offset <= last[key]:
            result.nonmonotonic.append((f"{reader}#{session}", topic, p, last[key], offset))
        last[key] = offset
        reads.append((reader, topic, p, offset, value))
        s = (reader, session)
        seen_by[s].add(value)
        reached[s][(topic, p)] = max(reached[s].get((topic, p), 0), offset + 1)

    for e in events:
        kind = e["type"]
        if kind == "txn":
            phase = e["phase"]
            if phase == "invoke":
                txns[e["txn"]] = Txn(e["txn"], e.get("producer", ""), e["t"])
                continue
            txn = txns.get(e["txn"])
            if txn is None:
                continue
            if phase == "commit":
                txn.commit_invoked = True
            elif phase in ("ok", "aborted", "unknown"):
                txn.outcome, txn.done = phase, e["t"]
        elif kind == "txn-send" and e["txn"] in txns:
            txns[e["txn"]].sends[e["value"]] = (e["topic"], e["partition"], e.get("source"))
            owner[e["value"]] = e["txn"]
        elif kind == "txn-ack" and e.get("offset") is not None and e["offset"] >= 0:
            where = (e["topic"], e["partition"], e["offset"])
            acked_at[e["value"]] = where
            positions[e["value"]].add(where)
            at[where].add(e["value"])
        elif kind == "txn-session":
            starts[(e["reader"], e["session"])] = {
                (e["topic"], int(p)): o for p, o in e["starts"].items()
            }
        elif kind == "txn-read":
            result.reads += 1
            topic, p, offset, value = e["topic"], e["partition"], e["offset"], e["value"]
            observe(e["reader"], e["session"], topic, p, offset, value)
            if e["reader"] == FINAL:
                final_reads[topic].setdefault(value, (topic, p, offset))
        elif kind == "txn-consume":
            topic, p, offset, value = e["topic"], e["partition"], e["offset"], e["value"]
            observe(e["reader"], e["session"], topic, p, offset, value)
            if e["txn"] in txns:
                txns[e["txn"]].consumed.setdefault((topic, p), []).append(offset)
        elif kind == "txn-end":
            s, tp = (e["reader"], e["session"]), (e["topic"], e["partition"])
            reached[s][tp] = max(reached[s].get(tp, 0), e["offset"])
            ends[s][tp].append((e["t"], e["offset"]))
        elif kind == "txn-drained":
            drained.append(e)
        elif kind == "nemesis":
            if e.get("phase") == "start":
                faults[e["fault"]] = [e["name"], fault_began(e), None]
            elif e.get("fault") in faults:
                faults[e["fault"]][2] = e["t"]

    status = {name: txn.status for name, txn in txns.items()}
    for name, txn in txns.items():
        if status[name] == "unknown" and any(v in seen_anywhere for v in txn.sends):
            status[name] = "committed"
            result.unknown_visible += 1
    result.transactions = len(txns)
    result.committed = sum(1 for t in txns.values() if t.status == "committed")
    result.aborted = sum(1 for t in txns.values() if t.status == "aborted")
    result.unknown = sum(1 for t in txns.values() if t.status == "unknown")
    result.records = len(owner)
    result.flow_transactions = sum(1 for t in txns.values() if t.consumed)
    result.under_faults = _under_faults(txns, status, faults)

    for reader, topic, p, offset, value in reads:
        name = owner.get(value)
        if name is None:
            result.unexpected.append((topic, p, offset, value))
        elif status[name] == "aborted":
            result.aborted_reads.append((reader, topic, p, offset, value, name))

    result.duplicates = {v: sorted(ws) for v, ws in positions.items() if len(ws) > 1}
    result.inconsistent = {w: sorted(vs) for w, vs in at.items() if len(vs) > 1}

    def offset_of(value: str) -> int | None:
        if value in acked_at:
            return acked_at[value][2]
        found = sorted(positions.get(value, ()))
        return found[0][2] if found else None

    def covers(s: Session, topic: str, p: int, offset: int | None, txn: Txn) -> bool:
        if s not in starts or (topic, p) not in starts[s]:
            return False
        if offset is None:  # never acked nor read: an end reached after the outcome
            done = txn.done if txn.done is not None else float("inf")
            return any(t > done for t, _ in ends[s].get((topic, p), []))
        return starts[s][(topic, p)] <= offset < reached[s].get((topic, p), 0)

    for name, txn in sorted(txns.items()):
        if status[name] != "committed":
            continue
        records = [(v, topic, p, offset_of(v)) for v, (topic, p, _) in txn.sends.items()]
        torn_why = None
        for value, topic, p, offset in records:
            for s in starts:
                if covers(s, topic, p, offset, txn) and value not in seen_by[s]:
                    who = f"{s[0]}#{s[1]}"
                    if txn.status == "committed":
                        result.lost.append(
                            (name, topic, p, -1 if offset is None else offset, value, who)
                        )
                    elif torn_why is None:
                        torn_why = f"record {value} at {topic}/{p}/{offset} missed by {who}"
        for s in starts:
            if all(covers(s, topic, p, offset, txn) for _, topic, p, offset in records):
                seen = [v for v, *_ in records if v in seen_by[s]]
                if seen and len(seen) < len(records) and torn_why is None:
                    torn_why = (
                        f"{s[0]}#{s[1]} read past all of it and saw {len(seen)} of "
                        f"{len(records)} records"
                    )
        if torn_why is not None:
            result.torn.append((name, torn_why))

    visible = [t for n, t in txns.items() if status[n] == "committed"]
    result.torn_order = _torn_order(visible, offset_of)
    result.write_cycles = _write_cycles(visible, offset_of)

    for topic_ends in _final_ends(events):
        result.unread.extend(topic_ends)
    for d in drained:
        result.drained = result.drained or d.get("complete", True)
        if not d.get("complete", True):
            result.drain_error = d.get("error", "")
            got = {int(p): o for p, o in d["ends"].items()}
            for p, last in sorted((int(p), o) for p, o in d.get("inputs", {}).items()):
                if got.get(p, 0) < last:
                    result.not_drained.append((d["topic"], p, got.get(p, 0), last))
        result.not_exactly_once.extend(
            _exactly_once(d, final_reads, txns, owner, {r[0] for r in result.unread})
        )
    return result


def _intervals(
    txn: Txn, offset_of: Any, consumed: bool = False
) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (lowest, highest) offset of the transaction's records there
    (``consumed``: of its inputs)."""
    found: dict[tuple[str, int], list[int]] = defaultdict(list)
    if consumed:
        for tp, offsets in txn.consumed.items():
            found[tp].extend(offsets)
    else:
        for value, (topic, p, _) in txn.sends.items():
            offset = offset_of(value)
            if offset is not None:
                found[(topic, p)].append(offset)
    return {tp: (min(os), max(os)) for tp, os in found.items() if os}


def _inversions(
    before: list[tuple[float, float, str]], spans: dict[str, tuple[int, int]]
) -> list[tuple[str, str]]:
    """Pairs (a, b) where ``a`` ends before ``b`` starts in the first order (``before``:
    (start, end, name)) yet a record of ``b`` sits below one of ``a`` (``spans``: name ->
    (lowest, highest) offset on one partition)."""
    items = [i for i in before if i[2] in spans]
    by_end = sorted(items, key=lambda i: i[1])
    highs: list[tuple[int, str]] = []  # (highest offset, name) of those ended so far
    out = []
    k = 0
    for start, _, name in sorted(items, key=lambda i: i[0]):
        while k < len(by_end) and by_end[k][1] < start:
            earlier = by_end[k][2]
            bisect.insort(highs, (spans[earlier][1], earlier))
            k += 1
        low = spans[name][0]
        for _, earlier in highs[bisect.bisect_right(highs, (low, "\uffff")) :]:
            out.append((earlier, name))
    return out


def _torn_order(visible: list[Txn], offset_of: Any) -> list[tuple[str, str, str, int]]:
    timed = [t for t in visible if t.outcome == "ok" and t.done is not None]
    order = [(t.invoked, t.done or 0.0, t.txn) for t in timed]
    per_partition: dict[tuple[str, int], dict[str, tuple[int, int]]] = defaultdict(dict)
    for t in timed:
        for tp, span in _intervals(t, offset_of).items():
            per_partition[tp][t.txn] = span
    out = []
    for (topic, p), spans in sorted(per_partition.items()):
        out.extend((a, b, topic, p) for a, b in _inversions(order, spans))
    return out


def _write_cycles(visible: list[Txn], offset_of: Any) -> list[tuple[str, str, str, int, str, int]]:
    flow = [t for t in visible if t.consumed]
    inputs: dict[tuple[str, int], dict[str, tuple[int, int]]] = defaultdict(dict)
    outputs: dict[tuple[str, int], dict[str, tuple[int, int]]] = defaultdict(dict)
    for t in flow:
        for tp, span in _intervals(t, offset_of, consumed=True).items():
            inputs[tp][t.txn] = span
        for tp, span in _intervals(t, offset_of).items():
            outputs[tp][t.txn] = span
    out = []
    for (in_topic, in_p), in_spans in sorted(inputs.items()):
        order = [(lo, hi, name) for name, (lo, hi) in in_spans.items()]
        for (out_topic, out_p), out_spans in sorted(outputs.items()):
            for a, b in _inversions(order, out_spans):
                out.append((a, b, in_topic, in_p, out_topic, out_p))
    return out


def _final_ends(events: list[dict[str, Any]]) -> list[list[tuple[str, int]]]:
    """Partitions the final reader was asked to read (``txn-final`` info) and never
    reached the end of."""
    asked: set[tuple[str, int]] = set()
    done: set[tuple[str, int]] = set()
    for e in events:
        if e["type"] == "txn-final":
            asked.update((e["topic"], int(p)) for p in e["ends"])
        elif e["type"] == "txn-end" and e["reader"] == FINAL:
            done.add((e["topic"], e["partition"]))
    return [sorted(asked - done)]


def _exactly_once(
    drained: dict[str, Any],
    final_reads: dict[str, dict[str, Where]],
    txns: dict[str, Txn],
    owner: dict[str, str],
    unread: set[str],
) -> list[tuple[str, Where, list[str]]]:
    topic, output = drained["topic"], drained["output"]
    if topic in unread or output in unread or output not in final_reads:
        return []
    limit = {int(p): o for p, o in drained["ends"].items()}
    copies: dict[str, list[str]] = defaultdict(list)
    for value in final_reads[output]:
        name = owner.get(value)
        if name is not None:
            source = txns[name].sends[value][2]
            if source is not None:
                copies[source].append(value)
    out = []
    for value, where in sorted(final_reads.get(topic, {}).items(), key=lambda kv: kv[1]):
        if where[2] < limit.get(where[1], 0) and len(copies.get(value, [])) != 1:
            out.append((value, where, sorted(copies.get(value, []))))
    return out


def _under_faults(
    txns: dict[str, Txn], status: dict[str, str], faults: dict[int, list[Any]]
) -> dict[str, dict[str, int]]:
    """Per fault kind: how many ran, and the transactions decided (their outcome learned
    by the client) while one of that kind was on."""
    out: dict[str, dict[str, int]] = {}
    for kind, _, _ in faults.values():
        counts = out.setdefault(kind, {"faults": 0, "committed": 0, "aborted": 0, "unknown": 0})
        counts["faults"] += 1
    for name, txn in txns.items():
        if txn.done is None:
            continue
        done = txn.done
        on = {k for k, start, stop in faults.values() if start <= done and (stop or done) >= done}
        for kind in on:
            out[kind][status[name]] += 1
    return out


def report_lines(result: TxnResult) -> list[str]:
    lines = [
        f"transactions: {result.transactions} ({result.committed} committed, {result.aborted} "
        f"aborted, {result.unknown} unknown of which {result.unknown_visible} seen), "
        f"{result.records} records, {result.reads} read_committed reads, "
        f"{result.flow_transactions} consume-transform-produce transactions"
        + ("; the flow drained its input" if result.drained else "")
    ]
    lines.append(
        "transaction anomalies: "
        + ", ".join(f"{name} {count}" for name, count in result.anomalies().items())
    )
    for reader, topic, p, offset, value, txn in result.aborted_reads[:5]:
        lines.append(f"  aborted read: {reader} read {value} at {topic}/{p}/{offset} ({txn})")
    for txn, topic, p, offset, value, who in result.lost[:5]:
        lines.append(f"  lost write: {value} of {txn} at {topic}/{p}/{offset}, missed by {who}")
    for txn, why in result.torn[:5]:
        lines.append(f"  torn transaction: {txn}: {why}")
    for a, b, topic, p in result.torn_order[:5]:
        lines.append(
            f"  torn order: {a} committed before {b} began, yet {b} sits below {a} on {topic}/{p}"
        )
    for value, where in list(result.duplicates.items())[:5]:
        lines.append(f"  duplicate: {value} at {', '.join('/'.join(map(str, w)) for w in where)}")
    for where, values in list(result.inconsistent.items())[:5]:
        lines.append(f"  inconsistent offsets: {'/'.join(map(str, where))} holds {values}")
    for who, topic, p, previous, offset in result.nonmonotonic[:5]:
        lines.append(f"  non-monotonic read: {who} read {topic}/{p} at {offset} after {previous}")
    for topic, p, offset, value in result.unexpected[:5]:
        lines.append(f"  unexpected value: {value} at {topic}/{p}/{offset} was never sent")
    for value, where, copies in result.not_exactly_once[:5]:
        lines.append(
            f"  not exactly once: input {value} at {'/'.join(map(str, where))} copied "
            f"{len(copies)} times {copies}"
        )
    for a, b, in_topic, in_p, out_topic, out_p in result.write_cycles[:5]:
        lines.append(
            f"  write cycle: {a} consumed {in_topic}/{in_p} before {b}, yet {b} wrote below "
            f"{a} on {out_topic}/{out_p}"
        )
    for topic, p, got, last in result.not_drained[:5]:
        lines.append(
            f"  flow not drained: {topic}/{p} committed up to {got}, its last input ends at {last}"
        )
    if result.not_drained and result.drain_error:
        lines.append(f"  the flow's committed offsets, last asked: {result.drain_error}")
    if result.unread:
        lines.append(f"  final read short of the end: {result.unread}")
    if result.under_faults:
        lines.append(
            "nemeses that ran, and the transactions decided while one of the kind was on "
            "(committed/aborted/unknown):"
        )
    for kind, n in sorted(result.under_faults.items()):
        lines.append(
            f"  {kind}: {n['faults']} fault{'s' if n['faults'] != 1 else ''}; "
            f"{n['committed']}/{n['aborted']}/{n['unknown']}"
        )
    return lines
