"""The fault campaign's transaction checker (issue 26) on histories written by hand: a clean
one passes, and each anomaly of Jepsen's Kafka-family analyses is flagged by name."""

from __future__ import annotations

from chaos.txn_checker import FINAL, TxnResult, check_transactions, report_lines

IN, OUT = "in", "out"


class History:
    """Builds events in the shapes ``chaos.txn_workload`` records, one tick apart."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.t = 0.0
        self.sessions: dict[str, int] = {}

    def add(self, type_: str, **fields) -> None:
        self.t = round(self.t + 0.01, 4)
        self.events.append({"t": self.t, "type": type_, **fields})

    def begin(self, txn: str, producer: str | None = None) -> None:
        self.add("txn", phase="invoke", producer=producer or txn.split(".")[0], txn=txn)

    def send(self, txn: str, n: int, topic: str, p: int, offset: int | None, source=None):
        value = f"{txn}.{n}"
        self.add("txn-send", txn=txn, topic=topic, partition=p, value=value, source=source)
        if offset is not None:
            self.add("txn-ack", txn=txn, topic=topic, partition=p, value=value, offset=offset)
        return value

    def finish(self, txn: str, outcome: str) -> None:
        if outcome in ("ok", "unknown"):
            self.add("txn", phase="commit", txn=txn)
        if outcome != "none":
            self.add("txn", phase=outcome, txn=txn)

    def txn(self, txn: str, writes: list[tuple[str, int, int | None]], outcome: str = "ok"):
        """A whole transaction: begin, its writes ((topic, partition, offset)), the outcome
        ("ok", "aborted", "unknown" after a commit, or "none": never finished)."""
        self.begin(txn)
        values = [self.send(txn, n, topic, p, o) for n, (topic, p, o) in enumerate(writes)]
        self.finish(txn, outcome)
        return values

    def session(self, reader: str, topic: str, partitions=(0, 1), start: int = 0) -> int:
        self.sessions[reader] = self.sessions.get(reader, 0) + 1
        session = self.sessions[reader]
        starts = {str(p): start for p in partitions}
        self.add("txn-session", reader=reader, session=session, topic=topic, starts=starts)
        return session

    def read(self, reader: str, topic: str, p: int, offset: int, value: str) -> None:
        session = self.sessions[reader]
        self.add(
            "txn-read",
            reader=reader,
            session=session,
            topic=topic,
            partition=p,
            offset=offset,
            value=value,
        )

    def end(self, reader: str, topic: str, p: int, offset: int) -> None:
        session = self.sessions[reader]
        self.add("txn-end", reader=reader, session=session, topic=topic, partition=p, offset=offset)

    def consume(self, txn: str, worker: str, p: int, offset: int, value: str) -> None:
        session = self.sessions.setdefault(worker, 1)
        self.add(
            "txn-consume",
            txn=txn,
            reader=worker,
            session=session,
            topic=IN,
            partition=p,
            offset=offset,
            value=value,
        )


def flagged(result: TxnResult, name: str) -> None:
    text = "\n".join(report_lines(result))
    assert result.found == [name], text
    assert f"  {name}: " in text, text
    assert not result.ok


def test_a_clean_history_passes():
    h = History()
    a = h.txn("p0.1", [(IN, 0, 0), (IN, 1, 0)])  # committed on two partitions
    h.txn("p1.1", [(IN, 0, 1), (IN, 1, 1)], outcome="aborted")  # markers at 2
    u = h.txn("p0.2", [(IN, 0, 3), (IN, 1, None)], outcome="unknown")  # a timed-out commit
    h.txn("p1.2", [(IN, 1, None)], outcome="unknown")  # unknown, never seen: aborted
    h.txn("p1.3", [(IN, 0, None)], outcome="none")  # fenced before its commit: aborted
    # consume-transform-produce: each input once in the output, inputs' order kept
    h.begin("w0.1")
    h.consume("w0.1", "w0", 0, 0, a[0])
    h.consume("w0.1", "w0", 1, 0, a[1])
    c1 = h.send("w0.1", 0, OUT, 0, 0, source=a[0])
    c2 = h.send("w0.1", 1, OUT, 0, 1, source=a[1])
    h.finish("w0.1", "ok")
    h.begin("w0.2")
    h.consume("w0.2", "w0", 0, 3, u[0])
    h.consume("w0.2", "w0", 1, 4, u[1])
    c3 = h.send("w0.2", 0, OUT, 0, 3, source=u[0])
    c4 = h.send("w0.2", 1, OUT, 1, 0, source=u[1])
    h.finish("w0.2", "ok")
    h.add("txn-drained", topic=IN, output=OUT, ends={"0": 5, "1": 6})
    # a live reader that saw part of the log, then the final reader of both topics
    h.session("r0", IN)
    h.read("r0", IN, 0, 0, a[0])
    h.read("r0", IN, 1, 0, a[1])
    h.end("r0", IN, 1, 1)
    h.add("txn-final", topic=IN, ends={"0": 5, "1": 6})
    h.session(FINAL, IN)
    for p, offset, value in [(0, 0, a[0]), (1, 0, a[1]), (0, 3, u[0]), (1, 4, u[1])]:
        h.read(FINAL, IN, p, offset, value)
    h.end(FINAL, IN, 0, 5)
    h.end(FINAL, IN, 1, 6)
    h.add("txn-final", topic=OUT, ends={"0": 5, "1": 2})
    h.sessions[FINAL] += 1
    h.add("txn-session", reader=FINAL, session=2, topic=OUT, starts={"0": 0, "1": 0})
    for p, offset, value in [(0, 0, c1), (0, 1, c2), (0, 3, c3), (1, 0, c4)]:
        h.read(FINAL, OUT, p, offset, value)
    h.end(FINAL, OUT, 0, 5)
    h.end(FINAL, OUT, 1, 2)
    result = check_transactions(h.events)
    assert result.ok, "\n".join(report_lines(result))
    assert (result.committed, result.aborted, result.unknown) == (3, 2, 2)
    assert result.unknown_visible == 1 and result.flow_transactions == 2 and result.drained


def test_a_record_of_an_aborted_transaction_read_is_an_aborted_read():
    h = History()
    (v,) = h.txn("p0.1", [(IN, 0, 0)], outcome="aborted")
    h.session("r0", IN)
    h.read("r0", IN, 0, 0, v)
    flagged(check_transactions(h.events), "aborted read")


def test_a_transaction_whose_commit_was_never_asked_for_cannot_be_read():
    h = History()
    (v,) = h.txn("p0.1", [(IN, 0, 0)], outcome="none")  # the producer died mid-transaction
    h.session("r0", IN)
    h.read("r0", IN, 0, 0, v)
    flagged(check_transactions(h.events), "aborted read")


def test_a_committed_write_a_reader_read_past_is_lost():
    h = History()
    h.txn("p0.1", [(IN, 0, 0)])
    (b,) = h.txn("p1.1", [(IN, 0, 2)])
    h.session("r0", IN)
    h.read("r0", IN, 0, 2, b)  # read past offset 0 without seeing it
    result = check_transactions(h.events)
    flagged(result, "lost write")
    assert result.lost[0][:4] == ("p0.1", IN, 0, 0)


def test_a_committed_write_before_the_end_a_reader_reached_is_lost():
    h = History()
    h.txn("p0.1", [(IN, 1, 0)])
    h.session("r0", IN)
    h.end("r0", IN, 1, 2)
    flagged(check_transactions(h.events), "lost write")


def test_a_reader_that_started_later_or_stopped_short_does_not_lose_anything():
    h = History()
    h.txn("p0.1", [(IN, 0, 0), (IN, 0, 5)])
    h.session("r0", IN, start=3)  # started above offset 0
    h.end("r0", IN, 0, 4)  # and stopped below 5
    assert check_transactions(h.events).ok


def test_part_of_a_committed_transaction_visible_without_the_rest_is_torn():
    h = History()
    a, b = h.txn("p0.1", [(IN, 0, 0), (IN, 1, 0)])
    h.session("r0", IN)
    h.read("r0", IN, 0, 0, a)
    h.end("r0", IN, 1, 2)  # read past b's offset without it
    result = check_transactions(h.events)
    assert set(result.found) == {"torn transaction", "lost write"}
    assert result.torn[0][0] == "p0.1"
    assert "torn transaction: p0.1" in "\n".join(report_lines(result))


def test_an_unknown_outcome_may_be_either_but_not_half():
    h = History()
    a, _ = h.txn("p0.1", [(IN, 0, 0), (IN, 1, 0)], outcome="unknown")
    h.session("r0", IN)
    h.read("r0", IN, 0, 0, a)
    h.end("r0", IN, 1, 1)
    result = check_transactions(h.events)
    flagged(result, "torn transaction")  # not a lost write: the commit may have failed
    whole = History()
    x, y = whole.txn("p0.1", [(IN, 0, 0), (IN, 1, 0)], outcome="unknown")
    whole.session("r0", IN)
    whole.read("r0", IN, 0, 0, x)
    whole.read("r0", IN, 1, 0, y)
    none = History()
    none.txn("p0.1", [(IN, 0, 0), (IN, 1, 0)], outcome="unknown")
    none.session("r0", IN)
    none.end("r0", IN, 0, 2)
    none.end("r0", IN, 1, 2)
    assert check_transactions(whole.events).ok and check_transactions(none.events).ok


def test_an_unknown_transaction_seen_by_one_reader_and_missed_by_another_is_torn():
    h = History()
    (a,) = h.txn("p0.1", [(IN, 0, None)], outcome="unknown")  # no ack: offset from the read
    h.session("r0", IN)
    h.read("r0", IN, 0, 4, a)
    h.session("r1", IN)
    h.end("r1", IN, 0, 6)
    flagged(check_transactions(h.events), "torn transaction")


def test_a_later_transaction_below_an_earlier_one_is_torn_order():
    h = History()
    h.txn("p0.1", [(IN, 0, 7), (IN, 1, 2)])  # committed before p1.1 began
    h.txn("p1.1", [(IN, 0, 9), (IN, 1, 1)])  # after it on partition 0, before it on 1
    result = check_transactions(h.events)
    flagged(result, "torn order")
    assert result.torn_order == [("p0.1", "p1.1", IN, 1)]


def test_concurrent_transactions_may_interleave_in_different_orders():
    h = History()
    h.begin("p0.1")
    h.begin("p1.1")
    h.send("p0.1", 0, IN, 0, 0)
    h.send("p1.1", 0, IN, 1, 0)
    h.send("p0.1", 1, IN, 1, 1)
    h.send("p1.1", 1, IN, 0, 1)
    h.finish("p0.1", "ok")
    h.finish("p1.1", "ok")
    assert check_transactions(h.events).ok


def test_one_record_at_two_offsets_is_a_duplicate():
    h = History()
    (a,) = h.txn("p0.1", [(IN, 0, 0)])
    h.session("r0", IN)
    h.read("r0", IN, 0, 0, a)
    h.read("r0", IN, 0, 3, a)
    result = check_transactions(h.events)
    flagged(result, "duplicate")
    assert result.duplicates == {a: [(IN, 0, 0), (IN, 0, 3)]}


def test_two_records_at_one_offset_are_inconsistent():
    h = History()
    (a,) = h.txn("p0.1", [(IN, 0, 0)])
    (b,) = h.txn("p1.1", [(IN, 0, None)])
    h.session("r0", IN)
    h.read("r0", IN, 0, 0, b)
    result = check_transactions(h.events)
    assert "inconsistent offsets" in result.found and "lost write" in result.found


def test_offsets_going_back_within_a_session_are_a_non_monotonic_read():
    h = History()
    a, b = h.txn("p0.1", [(IN, 0, 0), (IN, 0, 1)])
    h.session("r0", IN)
    h.read("r0", IN, 0, 0, a)
    h.read("r0", IN, 0, 1, b)
    h.read("r0", IN, 0, 0, a)
    flagged(check_transactions(h.events), "non-monotonic read")
    again = History()  # a new session may read again from the start
    x, y = again.txn("p0.1", [(IN, 0, 0), (IN, 0, 1)])
    again.session("r0", IN)
    again.read("r0", IN, 0, 0, x)
    again.read("r0", IN, 0, 1, y)
    again.session("r0", IN)
    again.read("r0", IN, 0, 0, x)
    assert check_transactions(again.events).ok


def test_a_value_nobody_sent_is_unexpected():
    h = History()
    h.session("r0", IN)
    h.read("r0", IN, 0, 0, "ghost")
    flagged(check_transactions(h.events), "unexpected value")


def flow(copies: dict[int, int], extra: int | None = None) -> History:
    """Inputs at in/0 offsets 0..2, the flow copying input n ``copies[n]`` times (each
    copy in a transaction of its own), then drained and read back."""
    h = History()
    inputs = h.txn("p0.1", [(IN, 0, 0), (IN, 0, 1), (IN, 0, 2)])
    out_offset = 0
    outputs = []
    for n, times in copies.items():
        for k in range(times):
            txn = f"w0.{n}.{k}"
            h.begin(txn)
            h.sessions["w0"] = h.sessions.get("w0", 0) + 1  # a restarted worker reads again
            h.consume(txn, "w0", 0, n, inputs[n])
            outputs.append((out_offset, h.send(txn, 0, OUT, 0, out_offset, source=inputs[n])))
            out_offset += 2
            h.finish(txn, "ok")
    h.add("txn-drained", topic=IN, output=OUT, ends={"0": 4})
    h.add("txn-final", topic=IN, ends={"0": 4})
    h.session(FINAL, IN, partitions=(0,))
    for n, value in enumerate(inputs):
        h.read(FINAL, IN, 0, n, value)
    h.end(FINAL, IN, 0, 4)
    h.add("txn-final", topic=OUT, ends={"0": out_offset})
    h.session(FINAL, OUT, partitions=(0,))
    for offset, value in outputs:
        h.read(FINAL, OUT, 0, offset, value)
    h.end(FINAL, OUT, 0, out_offset)
    return h


def test_every_input_once_in_the_output_is_exactly_once():
    assert check_transactions(flow({0: 1, 1: 1, 2: 1}).events).ok


def test_an_input_copied_twice_is_not_exactly_once():
    result = check_transactions(flow({0: 1, 1: 2, 2: 1}).events)
    flagged(result, "not exactly once")
    value, where, copies = result.not_exactly_once[0]
    assert where == (IN, 0, 1) and len(copies) == 2


def test_an_input_never_copied_is_not_exactly_once():
    result = check_transactions(flow({0: 1, 2: 1}).events)
    flagged(result, "not exactly once")
    assert result.not_exactly_once[0][2] == []


def test_output_in_the_opposite_order_of_the_inputs_is_a_write_cycle():
    h = History()
    inputs = h.txn("p0.1", [(IN, 0, 0), (IN, 0, 1), (IN, 1, 0)])
    # w1.1 takes in/0 offset 0, w2.1 (another worker) offset 1 from w1.1's commit; yet
    # w2.1's output sits below w1.1's on out/0 (w1.1's write arrived late)
    h.begin("w1.1")
    h.begin("w2.1")
    h.consume("w1.1", "w1", 0, 0, inputs[0])
    h.send("w1.1", 0, OUT, 1, 0, source=inputs[0])
    h.send("w1.1", 1, OUT, 0, 5, source=inputs[0] + "'")
    h.consume("w2.1", "w2", 0, 1, inputs[1])
    h.consume("w2.1", "w2", 1, 0, inputs[2])
    h.send("w2.1", 0, OUT, 0, 3, source=inputs[1])
    h.finish("w1.1", "ok")
    h.finish("w2.1", "ok")
    result = check_transactions(h.events)
    flagged(result, "write cycle")
    assert result.write_cycles == [("w1.1", "w2.1", IN, 0, OUT, 0)]


def test_a_final_read_that_never_reaches_the_end_is_reported():
    h = History()
    (a,) = h.txn("p0.1", [(IN, 0, 0)])
    h.add("txn-final", topic=IN, ends={"0": 2, "1": 0})
    h.session(FINAL, IN)
    h.read(FINAL, IN, 0, 0, a)
    h.end(FINAL, IN, 0, 2)
    result = check_transactions(h.events)
    flagged(result, "final read short of the end")
    assert result.unread == [(IN, 1)]


def test_a_flow_that_never_reached_its_last_input_is_not_drained():
    h = flow({0: 1})  # input 0 copied; its committed offsets stopped at 1 of 3
    h.events = [e for e in h.events if e["type"] != "txn-drained"]
    h.add(
        "txn-drained",
        topic=IN,
        output=OUT,
        ends={"0": 1},
        inputs={"0": 3},
        complete=False,
        error="UNSTABLE_OFFSET_COMMIT",
    )
    result = check_transactions(h.events)
    flagged(result, "flow not drained")  # input 0, below the commits, was copied once
    assert result.not_drained == [(IN, 0, 1, 3)]
    assert "last asked: UNSTABLE_OFFSET_COMMIT" in "\n".join(report_lines(result))
    h.events[-1]["ends"] = {"0": 2}  # input 1 committed yet never copied
    assert set(check_transactions(h.events).found) == {"flow not drained", "not exactly once"}


def test_the_report_names_the_nemeses_and_the_transactions_decided_under_each():
    h = History()
    h.add("nemesis", phase="start", fault=0, name="kill-coordinator-prepared", detail="")
    h.txn("p0.1", [(IN, 0, 0)])  # committed while the kill is on
    h.txn("p0.2", [(IN, 0, None)], outcome="unknown")  # never seen: stays unknown
    h.add("nemesis", phase="stop", fault=0, name="kill-coordinator-prepared")
    h.txn("p0.3", [(IN, 0, 2)])  # between faults
    h.add("nemesis", phase="start", fault=1, name="coordinator-markers", detail="")
    h.txn("p0.4", [(IN, 0, 3)], outcome="aborted")
    h.add("nemesis", phase="stop", fault=1, name="coordinator-markers")
    h.add("nemesis", phase="start", fault=2, name="coordinator-markers", detail="")
    h.add("nemesis", phase="stop", fault=2, name="coordinator-markers")
    result = check_transactions(h.events)
    assert result.under_faults == {
        "kill-coordinator-prepared": {"faults": 1, "committed": 1, "aborted": 0, "unknown": 1},
        "coordinator-markers": {"faults": 2, "committed": 0, "aborted": 1, "unknown": 0},
    }
    text = "\n".join(report_lines(result))
    assert "  coordinator-markers: 2 faults; 0/1/0" in text, text
    assert "  kill-coordinator-prepared: 1 fault; 1/0/1" in text, text
