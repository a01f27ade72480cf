"""The fault campaign (issue 14): the checker on hand-made histories holding each anomaly,
and a short fixed campaign on real processes in network namespaces.

The campaign needs root, ``ip netns`` and nftables (``make system-deps`` installs it);
elsewhere it skips with the reason.
"""

from __future__ import annotations

import re
import socket
import socketserver
import threading
import time
from pathlib import Path

import pytest

from chaos.campaign import CampaignConfig, ScheduledFault, make_schedule, run_campaign
from chaos.checker import check, report
from chaos.net import leftovers, unavailable_reason
from chaos.proxy import ProxyProcess
from chaos.timeline import draw, series
from replog.cluster.launcher import pid_alive

# -- the checker, on histories written by hand --------------------------------------------


def invoke(t, value, partition=0):
    return {"t": t, "type": "invoke", "value": value, "partition": partition}


def ok(t, value, offset, partition=0):
    return {"t": t, "type": "ok", "value": value, "partition": partition, "offset": offset}


def fail(t, value, partition=0):
    return {"t": t, "type": "fail", "value": value, "partition": partition, "error": "timed out"}


def read(t, value, offset, partition=0, reader="final"):
    return {
        "t": t,
        "type": "read",
        "reader": reader,
        "partition": partition,
        "offset": offset,
        "value": value,
    }


def end(t, offset, partition=0):
    return {"t": t, "type": "end", "reader": "final", "partition": partition, "offset": offset}


def test_a_clean_history_passes():
    history = [
        invoke(0.0, "a"),
        invoke(0.1, "b"),
        ok(0.2, "a", 0),
        ok(0.3, "b", 1),
        invoke(0.4, "c"),
        fail(5.0, "c"),
        read(6.0, "a", 0),
        read(6.1, "b", 1),
        read(6.2, "c", 2),  # a failed write may still be there: indeterminate
        end(6.3, 3),
    ]
    result = check(history)
    assert result.ok, report(result)
    assert (result.sent, result.acked, result.failed, result.recovered) == (3, 2, 1, 1)


def test_an_acknowledged_write_never_read_is_lost():
    history = [
        invoke(0.0, "a"),
        invoke(0.1, "b"),
        ok(0.2, "a", 0),
        ok(0.3, "b", 1),
        read(6.0, "a", 0),
        end(6.1, 1),  # the partition ends at offset 1: "b" is gone
    ]
    result = check(history)
    assert not result.ok
    assert result.lost == [(0, 1, "b")]
    assert "lost: value b acknowledged at 0/1" in report(result)


def test_a_partition_not_read_to_its_end_is_reported_not_counted_lost():
    history = [invoke(0.0, "a"), ok(0.1, "a", 0)]
    result = check(history)
    assert result.unread_partitions == [0]
    assert result.lost == []
    assert not result.ok


def test_one_value_at_two_offsets_is_a_duplicate():
    history = [
        invoke(0.0, "a"),
        ok(0.2, "a", 0),
        invoke(0.3, "b"),
        ok(0.4, "b", 1),
        read(6.0, "a", 0),
        read(6.1, "b", 1),
        read(6.2, "a", 2),
        end(6.3, 3),
    ]
    result = check(history)
    assert result.duplicates == {"a": [(0, 0), (0, 2)]}
    assert not result.ok


def test_a_duplicate_written_under_two_producer_epochs_is_reported_not_failed():
    # librdkafka bumped the epoch (an OUT_OF_ORDER_SEQUENCE_NUMBER on another partition)
    # and retried "a", already in the log, under the new one: no broker can see it
    history = [
        invoke(0.0, "a"),
        ok(5.0, "a", 1),
        read(6.0, "a", 0),
        read(6.1, "a", 1),
        end(6.2, 2),
    ]
    origin = {"t": 7.0, "type": "duplicate-origin", "value": "a"}
    bumped = {**origin, "copies": [[0, 0, 7, 0, 844], [0, 1, 7, 1, 0]]}
    result = check([*history, bumped])
    assert result.duplicates == {"a": [(0, 0), (0, 1)]}
    assert result.epoch_bump_duplicates == {"a": bumped["copies"]}
    assert result.ok, report(result)
    assert "value a at 0/0 (epoch 0 seq 844), 0/1 (epoch 1 seq 0)" in report(result)
    # one epoch, one sequence, two offsets: the broker missed a duplicate
    missed = {**origin, "copies": [[0, 0, 7, 0, 844], [0, 1, 7, 0, 844]]}
    result = check([*history, missed])
    assert result.broker_duplicates == {"a": [(0, 0), (0, 1)]}
    assert not result.ok
    assert "duplicated: value a at 0/0, 0/1" in report(result)


def test_two_values_at_one_offset_are_inconsistent():
    # the live reader saw "x" at offset 1 during a fault; the log now has "b" there
    history = [
        invoke(0.0, "a"),
        invoke(0.0, "x"),
        ok(0.2, "a", 0),
        read(1.0, "a", 0, reader="live"),
        read(1.1, "x", 1, reader="live"),
        fail(3.0, "x"),
        invoke(4.0, "b"),
        ok(4.1, "b", 1),
        read(6.0, "a", 0),
        read(6.1, "b", 1),
        end(6.2, 2),
    ]
    result = check(history)
    assert list(result.inconsistent) == [(0, 1)]
    assert {v for v, _ in result.inconsistent[(0, 1)]} == {"x", "b"}
    assert not result.ok


def test_an_ack_offset_that_disagrees_with_the_log_is_inconsistent():
    history = [
        invoke(0.0, "a"),
        invoke(0.0, "b"),
        ok(0.2, "a", 0),
        ok(0.2, "b", 0),  # two acks for one offset
        read(6.0, "a", 0),
        read(6.1, "b", 1),
        end(6.2, 2),
    ]
    result = check(history)
    assert (0, 0) in result.inconsistent
    assert result.duplicates == {"b": [(0, 0), (0, 1)]}


def test_offsets_going_backwards_within_one_reader_are_non_monotonic():
    history = [
        invoke(0.0, "a"),
        invoke(0.0, "b"),
        ok(0.1, "a", 0),
        ok(0.1, "b", 1),
        read(1.0, "a", 0, reader="live"),
        read(1.1, "b", 1, reader="live"),
        read(1.2, "a", 0, reader="live"),  # went back to the start
        read(6.0, "a", 0),
        read(6.1, "b", 1),
        end(6.2, 2),
    ]
    result = check(history)
    assert result.nonmonotonic == [("live", 0, 1, 0)]
    assert not result.ok


def test_a_write_sent_after_an_ack_but_stored_before_it_is_reordered():
    history = [
        invoke(0.0, "a"),
        ok(0.1, "a", 1),
        invoke(0.2, "b"),  # sent after a's ack ...
        ok(0.3, "b", 0),  # ... yet before it in the log
        read(6.0, "b", 0),
        read(6.1, "a", 1),
        end(6.2, 2),
    ]
    result = check(history)
    assert result.reordered == [(0, "a", 1, "b", 0)]
    assert not result.ok


def test_a_value_nobody_sent_is_unexpected():
    history = [
        invoke(0.0, "a"),
        ok(0.1, "a", 0),
        read(6.0, "a", 0),
        read(6.1, "zz", 1),
        end(6.2, 2),
    ]
    result = check(history)
    assert result.unexpected == [(0, 1, "zz")]
    assert not result.ok


def test_replicas_that_differ_below_the_high_watermark_are_divergent():
    history = [
        invoke(0.0, "a"),
        ok(0.1, "a", 0),
        read(6.0, "a", 0),
        end(6.1, 1),
        {
            "t": 7.0,
            "type": "divergence",
            "partition": 0,
            "offset": 0,
            "values": {"0": "a", "1": "a", "2": None},
        },
    ]
    result = check(history)
    assert len(result.divergent) == 1
    assert "divergent: 0/0" in report(result)
    assert not result.ok


def test_an_ack_without_offset_must_still_be_read():
    # librdkafka acknowledges a batch the broker calls a duplicate with offset -1 (None)
    history = [invoke(0.0, "a"), {**ok(0.1, "a", 0), "offset": None}, invoke(0.2, "b")]
    history += [ok(0.3, "b", 1)]
    read_back = check([*history, read(6.0, "a", 0), read(6.1, "b", 1), end(6.2, 2)])
    assert read_back.ok, report(read_back)
    assert read_back.acked_without_offset == ["a"]
    assert "acknowledged without an offset: 1" in report(read_back)
    missing = check([*history, read(6.1, "b", 1), end(6.2, 2)])
    assert missing.lost == [(0, -1, "a")]


def test_availability_measures_ack_gaps_and_recovery_after_each_heal():
    history = [invoke(0.0, "0"), ok(0.1, "0", 0)]
    for n in range(1, 4):
        history += [invoke(float(n), str(n)), ok(n + 0.1, str(n), n)]
    history.append(
        {"t": 3.5, "type": "nemesis", "phase": "start", "fault": 0, "name": "pause", "detail": ""}
    )
    history.append({"t": 8.0, "type": "nemesis", "phase": "stop", "fault": 0, "name": "pause"})
    history += [invoke(9.0, "9"), ok(9.5, "9", 4), invoke(10.0, "10"), ok(10.1, "10", 5)]
    history += [read(11.0, str(v), o) for o, v in enumerate([0, 1, 2, 3, 9, 10])] + [end(11, 6)]
    result = check(history)
    assert result.ok, report(result)
    gap = result.longest_gap[0]
    assert (gap.start, gap.end) == (3.1, 9.5)
    (window,) = result.faults
    assert window.recovery == {0: 1.5}
    assert window.longest_gap == gap
    assert "recovery 1.50 s" in report(result)


def test_a_producer_that_stopped_sending_shows_as_a_gap_to_its_stop():
    """Seed 16: the producer's client held its messages and it sent nothing for 15 minutes;
    the write window ended at its last send, and the report showed 10 s at most."""
    history = [invoke(0.0, "0"), ok(0.1, "0", 0), invoke(1.0, "1"), ok(1.1, "1", 1)]
    history.append({"t": 900.0, "type": "info", "what": "producer stopped", "undelivered": 0})
    history += [read(901.0, "0", 0), read(901.0, "1", 1), end(901.0, 2)]
    result = check(history)
    gap = result.longest_gap[0]
    assert (gap.start, gap.end) == (1.1, 900.0)


def group_read(t, value, offset, member="m0", partition=0):
    return {
        "t": t,
        "type": "group-read",
        "group": "g",
        "member": member,
        "partition": partition,
        "offset": offset,
        "value": value,
    }


def group_commit(t, offset, phase="ok", member="m0", partition=0):
    return {
        "t": t,
        "type": "group-commit",
        "phase": phase,
        "group": "g",
        "member": member,
        "partition": partition,
        "offset": offset,
    }


def group_resumed(t, committed, end_offset, partition=0):
    return [
        {
            "t": t,
            "type": "group-committed",
            "group": "g",
            "member": "resume",
            "partition": partition,
            "offset": committed,
        },
        {
            "t": t + 1,
            "type": "group-end",
            "group": "g",
            "member": "resume",
            "partition": partition,
            "offset": end_offset,
        },
    ]


def three_acked_and_read():
    history = []
    for n, value in enumerate("abc"):
        history += [invoke(n * 0.1, value), ok(n * 0.1 + 0.05, value, n)]
    return history, [read(9.0, v, o) for o, v in enumerate("abc")] + [end(9.5, 3)]


def test_a_group_that_reads_commits_and_resumes_passes():
    writes, final = three_acked_and_read()
    history = [
        *writes,
        group_read(1.0, "a", 0),
        group_read(1.0, "b", 1),
        group_commit(1.1, 2, "invoke"),
        group_commit(1.2, 2),
        group_read(2.0, "b", 1, member="m1"),  # after a rebalance: read again, allowed
        group_read(2.0, "c", 2, member="m1"),
        group_commit(2.1, 3, "invoke", member="m1"),
        group_commit(2.2, 3, "fail", member="m1"),  # indeterminate
        *final,
        *group_resumed(10.0, 2, 3),
        group_read(10.5, "c", 2, member="resume"),
    ]
    result = check(history)
    assert result.ok, report(result)
    groups = result.groups
    assert (groups.reads, groups.reread, groups.commits_ok, groups.commits_failed) == (5, 2, 1, 1)
    assert "consumer group: 5 reads (2 re-reads)" in report(result)


def test_group_offsets_going_backwards_are_reported():
    writes, final = three_acked_and_read()
    history = [
        *writes,
        group_read(1.0, "a", 0),
        group_read(1.0, "b", 1),
        group_read(1.0, "c", 2),
        group_commit(1.1, 3, "invoke"),
        group_commit(1.2, 3),
        group_commit(2.0, 1, "invoke", member="m1"),
        group_commit(2.1, 1, member="m1"),  # acknowledged, lower than 3 acknowledged before
        *final,
    ]
    result = check(history)
    assert result.groups.backwards == [(0, 3, 1.2, 1, 2.1)]
    assert not result.ok
    assert "group commits backwards 1" in report(result)
    assert "partition 0 committed 1 at t=2.1 after 3 was acknowledged at t=1.2" in report(result)


def test_a_new_member_given_less_than_the_last_commit_is_a_lost_commit():
    writes, final = three_acked_and_read()
    history = [
        *writes,
        *(group_read(1.0, v, o) for o, v in enumerate("abc")),
        group_commit(1.1, 3, "invoke"),
        group_commit(1.2, 3),
        *final,
        *group_resumed(10.0, 1, 3),  # the coordinator forgot the commit of 3
        group_read(10.2, "b", 1, member="resume"),
        group_read(10.3, "c", 2, member="resume"),
    ]
    result = check(history)
    assert result.groups.lost_commits == [(0, 3, 1)]
    assert not result.ok


def test_a_group_that_skips_an_acknowledged_write_is_reported():
    writes, final = three_acked_and_read()
    history = [
        *writes,
        group_read(1.0, "a", 0),
        group_commit(1.1, 1, "invoke"),
        group_commit(1.2, 1),
        *final,
        *group_resumed(10.0, 2, 3),  # given 2 though 1 was the last commit asked for
        group_read(10.3, "c", 2, member="resume"),
    ]
    result = check(history)
    assert result.groups.resumed_past == [(0, 2, 1)]
    assert result.groups.skipped == [(0, 1, "b")]
    assert "group skipped: value b at 0/1" in report(result)
    assert not result.ok


def admin(t, phase, op, attempt=1, code=None, topic="scratch-0"):
    event = {"t": t, "type": "admin", "phase": phase, "op": op, "topic": topic}
    event["attempt"] = attempt
    if code is not None:
        event.update(code=code, error=code)
    return event


def test_admin_errors_must_be_retriable_and_brokers_must_not_crash():
    writes, final = three_acked_and_read()
    calm = [
        admin(1.0, "invoke", "create"),
        admin(6.0, "fail", "create", code="REQUEST_TIMED_OUT"),  # it took effect after all
        admin(6.5, "invoke", "create", attempt=2),
        admin(6.6, "fail", "create", attempt=2, code="TOPIC_ALREADY_EXISTS"),
        admin(6.7, "invoke", "create-partitions"),
        admin(6.8, "ok", "create-partitions"),
        admin(7.0, "invoke", "delete"),
        admin(7.1, "fail", "delete", code="NOT_CONTROLLER"),
        admin(7.2, "invoke", "delete", attempt=2),
        admin(7.3, "ok", "delete", attempt=2),
        # a broker paused long enough to lose its registration: Kafka's answer too
        {"t": 7.4, "type": "nemesis", "phase": "start", "fault": 0, "name": "pause-leader"},
        {"t": 8.0, "type": "nemesis", "phase": "stop", "fault": 0, "name": "pause-leader"},
        admin(9.0, "invoke", "create", topic="scratch-1"),
        admin(9.1, "fail", "create", code="INVALID_REPLICATION_FACTOR", topic="scratch-1"),
    ]
    result = check([*writes, *calm, *final])
    assert result.ok, report(result)
    assert (result.admin_ok, result.admin_retried, result.admin_errors) == (2, 4, [])
    broken = [
        *calm,
        admin(30.0, "invoke", "create", topic="scratch-2"),
        admin(30.1, "fail", "create", code="TOPIC_ALREADY_EXISTS", topic="scratch-2"),  # 1st try
        admin(30.2, "invoke", "create", topic="scratch-3"),
        admin(30.3, "fail", "create", code="UNKNOWN_SERVER_ERROR", topic="scratch-3"),
        admin(30.4, "invoke", "create", topic="scratch-4"),  # 22 s after the heal
        admin(30.5, "fail", "create", code="INVALID_REPLICATION_FACTOR", topic="scratch-4"),
        {"t": 31.0, "type": "crash", "process": "b1", "status": 1},
    ]
    result = check([*writes, *broken, *final])
    assert result.admin_errors == [
        (30.1, "create", "scratch-2", "TOPIC_ALREADY_EXISTS"),
        (30.3, "create", "scratch-3", "UNKNOWN_SERVER_ERROR"),
        (30.5, "create", "scratch-4", "INVALID_REPLICATION_FACTOR"),
    ]
    assert result.crashed == ["b1 (status 1)"]
    assert not result.ok
    text = report(result)
    assert "admin error: create scratch-3 answered UNKNOWN_SERVER_ERROR" in text
    assert "crashed: b1 (status 1)" in text


def leader(t, partition, broker, epoch):
    return {
        "t": t,
        "type": "leader",
        "partition": partition,
        "leader": broker,
        "leader_epoch": epoch,
    }


def test_the_timeline_bins_acks_and_leader_changes_and_draws_fault_bands(tmp_path):
    history = [leader(0.1, 0, 1, 0), leader(0.1, 1, 2, 0)]
    for n in range(6):
        history += [invoke(n + 0.1, str(n)), ok(n + 0.2, str(n), n)]
    history.append(ok(0.3, "0", 0))  # two acks in the first second
    history += [
        {"t": 2.0, "type": "nemesis", "phase": "start", "fault": 0, "name": "kill-leader"},
        leader(2.6, 0, 2, 1),  # partition 0 moves to broker 2
        leader(2.7, 1, 2, 1),  # same leader, a new epoch: not a leader change
        {"t": 4.5, "type": "nemesis", "phase": "stop", "fault": 0, "name": "kill-leader"},
        leader(4.8, 0, 1, 2),  # back again
    ]
    timeline = series(history)
    assert timeline.acked == [2, 1, 1, 1, 1, 1]
    assert timeline.leader_changes == [0, 0, 1, 0, 1, 0]
    assert [(b.start, b.stop, b.name) for b in timeline.faults] == [(2.0, 4.5, "kill-leader")]
    png, svg = draw(timeline, tmp_path, "test timeline")
    assert png.read_bytes().startswith(b"\x89PNG")
    text = svg.read_text()
    assert "kill-leader" in text and "leader changes / s" in text and "test timeline" in text


def test_schedules_follow_from_the_seed():
    assert make_schedule(5, 3) == make_schedule(5, 3)
    assert make_schedule(5, 3) != make_schedule(6, 3)
    kinds = {f.kind for f in make_schedule(5, 10)}
    assert {"kill-leader", "pause-leader", "leader-followers", "controller-zookeeper"} <= kinds


# -- the delaying, losing proxy, on loopback ---------------------------------------------


class EchoServer:
    """Echoes every connection's bytes back, in a thread per connection."""

    def __init__(self) -> None:
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        try:
            while data := self.request.recv(65536):
                self.request.sendall(data)
        except ConnectionResetError:  # the proxy reset a lost connection
            pass


def round_trip(sock: socket.socket, payload: bytes) -> float:
    """Seconds from sending ``payload`` to reading all of it back."""
    started = time.monotonic()
    sock.sendall(payload)
    got = b""
    while len(got) < len(payload):
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        got += chunk
    assert got == payload
    return time.monotonic() - started


def test_the_proxy_delays_each_way_and_loses_connections_by_stalling_then_resetting(tmp_path):
    """A real proxy process (``python -m chaos.proxy``, stopped by pid) before an echo
    server: a delay of 250 ms each way makes each round trip at least 500 ms; with loss 1
    every connection stalls for ``stall_ms`` and is then reset; with loss 0.3 some chunks
    get through and some connections die; with both back to 0 it forwards again."""
    echo = EchoServer()
    proxy = None
    sockets: list[socket.socket] = []

    def connect() -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sockets.append(sock)
        return sock

    try:
        proxy = ProxyProcess(("127.0.0.1", 0), ("127.0.0.1", echo.port), tmp_path / "proxy.log")
        port = proxy.wait_listening()
        sock = connect()
        plain = [round_trip(sock, b"x" * 100) for _ in range(5)]
        answer = proxy.set(delay_ms=250)
        assert answer["delay_ms"] == 250 and answer["delayed"] == 0
        delayed = [round_trip(sock, b"y" * 100) for _ in range(3)]  # same connection
        assert min(delayed) >= 0.5, delayed  # 250 ms there, 250 ms back
        assert proxy.set()["delayed"] == 6  # 3 chunks each way
        print(f"round trips: plain {plain}, delayed 250 ms each way {delayed}")

        answer = proxy.set(delay_ms=0, loss=1.0, stall_ms=400)
        assert answer["loss"] == 1.0
        sock = connect()  # accepted by the kernel, then stalled and reset by the proxy
        started = time.monotonic()
        sock.sendall(b"lost")
        with pytest.raises(ConnectionResetError):
            sock.recv(100)
        stalled = time.monotonic() - started
        assert stalled >= 0.4 - 0.05, stalled  # the stall started at accept, before sendall
        assert proxy.set()["lost"] == 1

        # a draw for each connection and for each chunk: a third of each lost
        proxy.set(loss=0.3, stall_ms=50, seed=7)
        outcomes = []
        for _ in range(12):
            sock = connect()
            try:
                round_trip(sock, b"z" * 10)
                outcomes.append("through")
            except ConnectionResetError:
                outcomes.append("reset")
        assert "through" in outcomes and "reset" in outcomes, outcomes
        assert proxy.set()["lost"] == 1 + outcomes.count("reset")

        proxy.set(loss=0)
        assert round_trip(connect(), b"back" * 10) < 0.5
    finally:
        for sock in sockets:
            sock.close()
        if proxy is not None:
            assert proxy.stop() is None
            assert proxy.process.returncode is not None  # gone, by its pid
        echo.close()


# -- a short campaign on real processes ---------------------------------------------------

REASON = unavailable_reason()


@pytest.mark.skipif(REASON is not None, reason=f"chaos harness unavailable: {REASON}")
def test_a_short_campaign_loses_no_acknowledged_write(tmp_path):
    """One of each: the leader cut from its followers (ZooKeeper still reaches it), a kill -9
    of a leader, a SIGSTOP of a leader, a leader's log dir full (every broker's log dir is a
    small tmpfs), the followers' traffic to a leader delayed by its proxy (so every
    inter-broker connection crosses a proxy, and the drops must still cut them), an OS crash
    under a leader (its unflushed tail cut before the restart), the controller's ZooKeeper
    session expired, the transaction coordinator paused with transactions in PrepareCommit
    or PrepareAbort; then a full read of every partition. A consumer group, the admin
    workload and the transactional workload (producers, consume-transform-produce,
    read_committed readers) run beside the producer."""
    schedule = [
        ScheduledFault("leader-followers", pick=0, hold_s=5, quiet_s=1),
        ScheduledFault("kill-leader", pick=1, hold_s=3, quiet_s=1),
        ScheduledFault("pause-leader", pick=2, hold_s=3, quiet_s=1),
        ScheduledFault("disk-full", pick=0, hold_s=3, quiet_s=1),
        ScheduledFault("slow-leader", pick=1, hold_s=2, quiet_s=1),
        ScheduledFault("crash-leader", pick=2, hold_s=1, quiet_s=1),
        ScheduledFault("expire-controller", pick=0, hold_s=0, quiet_s=1),
        ScheduledFault("pause-coordinator-prepared", pick=0, hold_s=1, quiet_s=1),
    ]
    lines: list[str] = []
    result = run_campaign(
        schedule,
        tmp_path,
        CampaignConfig(partitions=3, rate=100, recovery_timeout_s=30, transactions=True),
        log=lines.append,
        title="test campaign",
    )
    text = report(result)
    assert result.acked > 500, text
    assert result.lost == [], text
    assert result.inconsistent == {}, text
    assert result.broker_duplicates == {}, text
    assert result.nonmonotonic == [], text
    assert result.reordered == [], text
    assert result.unread_partitions == [], text
    assert result.divergent == [], text
    assert result.crashed == [], text
    # scratch topics were created, grown and deleted; every error was a retriable one
    assert result.admin_errors == [], text
    assert result.admin_ok >= 3, text
    # the consumer group read during the faults and a new member resumed from its commits
    assert result.groups.ok, text
    assert result.groups.resumed and result.groups.commits_ok > 10, text
    # transactions under the same faults: none of Jepsen's anomalies, the flow drained its
    # input and copied each input once, commits and aborts both seen by the readers
    txns = result.transactions
    assert txns.ok, text
    assert txns.committed > 20 and txns.aborted > 3 and txns.reads > 50, text
    assert txns.drained and txns.flow_transactions > 5, text
    # every fault was carried out and healed, in the history and in the nemesis log
    assert [(w.name, w.stop is not None) for w in result.faults] == [
        ("leader-followers", True),
        ("kill-leader", True),
        ("pause-leader", True),
        ("disk-full", True),
        ("slow-leader", True),
        ("crash-leader", True),
        ("expire-controller", True),
        ("pause-coordinator-prepared", True),
    ]
    log = (tmp_path / "nemesis.log").read_text()
    assert "cut from" in log and "kill -9 broker" in log and "SIGSTOP broker" in log
    assert re.search(r"log dir of broker \d \(leader of partition 0\) filled: \d+ MB", log)
    # the full broker took its only log dir offline and halted (Kafka's KIP-112), and was
    # started again once the disk was emptied
    broker = re.search(r"log dir of broker (\d)", log).group(1)
    broker_log = (tmp_path / "cluster" / f"broker-{broker}" / "broker.log").read_text()
    assert re.search(r"is offline: .*No space left on device", broker_log), broker_log[-3000:]
    assert "every log dir has failed" in broker_log
    assert f"broker {broker} had halted (status 1): disk emptied, restarted" in log, log
    # the proxy delayed the followers' fetches to the leader, then forwarded plainly again
    slow = re.search(r"delayed (\d+) ms each way", log)
    assert slow is not None and int(slow.group(1)) == 200 + 1 % 301, log
    delayed = re.search(
        r"fault #4 healed: proxy back to transparent: (\d+) chunks forwarded, (\d+) delayed", log
    )
    assert delayed is not None and int(delayed.group(2)) > 0, log
    # the leader-followers cut shrank the ISRs although every fetch crossed a proxy
    # (its partitions took no acks=all write once their ISRs were the leader alone)
    cut = result.faults[0]
    assert cut.longest_gap is not None and cut.longest_gap.seconds > 3, text
    # an OS crash under a leader: its unflushed tail cut (nothing was checkpointed yet, so
    # the cuts start anywhere), recovered on restart, back in every ISR
    crash = re.search(
        r"fault #5 crash-leader .*kill -9 broker (\d) .*tail lost: (\d+) segment", log
    )
    assert crash is not None and int(crash.group(2)) > 0, log
    crashed_log = (tmp_path / "cluster" / f"broker-{crash.group(1)}" / "broker.log").read_text()
    assert "past the recovery point" in crashed_log
    # the controller's session expired on the ensemble, the cut healed at once, and the
    # broker registered again under a new session
    assert re.search(r"fault #6: session 0x[0-9a-f]+ expired on the ensemble; healed", log), log
    assert re.search(r"fault #6: broker \d registered again under session", log), log
    expired = re.search(r"fault #6 expire-controller .*: broker (\d) \(the controller\)", log)
    assert expired is not None, log
    expired_log = (tmp_path / "cluster" / f"broker-{expired.group(1)}" / "broker.log").read_text()
    assert "resigned as controller" in expired_log
    assert "registered again after a new ZooKeeper session" in expired_log
    # the coordinator was paused with a transaction prepared (its markers held back only
    # until one was seen), which completed after the pause
    paused = re.search(
        r"fault #7 pause-coordinator-prepared .*: SIGSTOP broker \d .* with (.*);", log
    )
    assert paused is not None and " in Prepare" in paused.group(1), log
    assert re.search(r"fault #7: transactions seen prepared completed: ", log), log
    assert txns.under_faults["pause-coordinator-prepared"]["faults"] == 1, text
    for window in result.faults[5:]:
        assert window.isr_full is not None, text  # full ISRs after the heal
    assert (tmp_path / "history.jsonl").stat().st_size > 0
    assert (tmp_path / "timeline.png").stat().st_size > 0
    # nothing left behind: processes are stopped by the campaign, the network removed
    prefix = next(m.group(1) for line in lines if (m := re.search(r"network (rlc\w+)", line)))
    assert leftovers(prefix) == []
    proxies = [int(pid) for line in lines for pid in re.findall(r"proxy p\d=(\d+)", line)]
    assert len(proxies) == 3 and not any(pid_alive(pid) for pid in proxies)
    mounts = Path("/proc/self/mounts").read_text()
    assert str(tmp_path) not in mounts  # the small disks were unmounted
    assert (tmp_path / "cluster" / "broker-0" / "data-kept" / "chaos-0").is_dir()


def test_a_flow_worker_stuck_in_a_client_call_is_replaced(tmp_path, monkeypatch):
    """librdkafka's send_offsets_to_transaction can block past its timeout (librdkafka
    issues 5456, 5511): a flow worker whose one client call lasts longer than STUCK_S is
    replaced by a worker with the same transactional id (which fences it), recorded
    under a label of its own so that no transaction or reader name repeats. Here no
    broker answers, so init_transactions blocks for its whole timeout."""
    from chaos import txn_workload
    from chaos.history import History

    monkeypatch.setattr(txn_workload, "STUCK_S", 1.0)
    monkeypatch.setattr(txn_workload, "CALL_TIMEOUT_S", 3)
    history = History(tmp_path / "history.jsonl")
    flow = txn_workload.TxnFlow(history, "127.0.0.1:1", "in", "out", 1, workers=1)
    flow.start()
    try:
        deadline = time.monotonic() + 30
        while flow.replaced < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        flow.stop()
        history.close()
    assert flow.replaced >= 1
    stuck = [e for e in history.snapshot() if "stuck in a client call" in e.get("what", "")]
    assert stuck and "init_transactions" in stuck[0]["stacks"], stuck
    names = [t.name for t in flow._threads]
    assert names[:2] == ["chaos-flow-w0", "chaos-flow-w0-2"], names
