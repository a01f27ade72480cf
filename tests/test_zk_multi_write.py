"""``replog.zk.ops.MultiWrite``, the hand-serialized ``multi`` of ZkOps.write_batched:
the same bytes as kazoo's transaction, and its answers read right against a real
ZooKeeper (fixtures.zookeeper), inside a chroot, across several pipelined batches."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError, RolledBackError
from kazoo.protocol.serialization import CheckVersion, Delete, SetData, Transaction

from replog.zk.ops import BATCH_OPS, MultiWrite, ZkOps, ZkWriteError

paths = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789/_-é", min_size=1, max_size=30).map(
    lambda s: "/" + s
)
versions = st.integers(-1, 2**31 - 1)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("check"), paths, st.just(b""), versions),
        st.tuples(st.just("set"), paths, st.binary(max_size=200), versions),
        st.tuples(st.just("delete"), paths, st.just(b""), versions),
    ),
    max_size=20,
)
KAZOO_OP = {"check": CheckVersion, "delete": Delete}


@given(ops, st.sampled_from(["", "/chroot"]))
def test_same_bytes_as_kazoo(operations: list, chroot: str) -> None:
    kazoo_ops = [
        SetData(chroot + path, data, version)
        if kind == "set"
        else KAZOO_OP[kind](chroot + path, version)
        for kind, path, data, version in operations
    ]
    request = MultiWrite.build(operations, chroot)
    assert request.serialize() == bytes(Transaction(kazoo_ops).serialize())
    assert request.type == Transaction.type


def test_creates_are_not_its_business() -> None:
    with pytest.raises(KeyError):
        MultiWrite.build([("create", "/a", b"", -1)])


@pytest.fixture
def ops_in_chroot(zk_chroot: str) -> Iterator[tuple[ZkOps, KazooClient]]:
    hosts, chroot = zk_chroot.split("/", 1)
    root = KazooClient(hosts=hosts)
    root.start(timeout=10)
    root.ensure_path(f"/{chroot}")
    root.stop()
    root.close()
    client = KazooClient(hosts=zk_chroot)
    client.start(timeout=10)
    try:
        yield ZkOps(client, timeout_s=10), client
    finally:
        client.stop()
        client.close()


def _nodes(client: KazooClient, count: int) -> list[str]:
    client.ensure_path("/n")
    client.create("/guard", b"")
    paths = [f"/n/{i}" for i in range(count)]
    tx = ZkOps(client, 10)
    created = tx.write_batched([(p, ("create", p, b"v0", -1)) for p in paths], None)
    assert all(r.ok for r in created.values())
    return paths


def test_answers_across_pipelined_batches(ops_in_chroot: tuple[ZkOps, KazooClient]) -> None:
    """2,500 sets in three pipelined multis, each led by the guard's check: the new
    versions come back per key; one stale version fails only its own write; a delete
    and a set of empty data go the same way."""
    zk_ops, client = ops_in_chroot
    count = 2 * BATCH_OPS + 500
    paths = _nodes(client, count)
    items = [(p, ("set", p, b"v1", 0)) for p in paths]
    items[1500] = (paths[1500], ("set", paths[1500], b"v1", 7))  # stale: in the 2nd batch
    items[2100] = (paths[2100], ("set", paths[2100], b"", 0))
    results = zk_ops.write_batched(items, ("/guard", 0))
    assert results[paths[1500]].error is ZkWriteError.BAD_VERSION
    assert client.get(paths[1500]) == (b"v0", client.get(paths[1500])[1])
    assert all(results[p].ok and results[p].zk_version == 1 for p in paths if p != paths[1500])
    assert client.get(paths[1499])[0] == b"v1" and client.get(paths[1501])[0] == b"v1"
    assert client.get(paths[2100])[0] == b""
    deleted = zk_ops.write_batched([(paths[0], ("delete", paths[0], b"", 1))], ("/guard", 0))
    assert deleted[paths[0]].ok and deleted[paths[0]].zk_version is None
    assert client.exists(paths[0]) is None
    gone = zk_ops.write_batched([(paths[0], ("set", paths[0], b"x", -1))], ("/guard", 0))
    assert gone[paths[0]].error is ZkWriteError.NO_NODE


def test_deposed_writer_writes_nothing(ops_in_chroot: tuple[ZkOps, KazooClient]) -> None:
    """The guard moved (a new controller bumped /controller_epoch): every multi of the
    call fails as a whole, all 2,500 writes are CONTROLLER_MOVED, none is written."""
    zk_ops, client = ops_in_chroot
    paths = _nodes(client, 2 * BATCH_OPS + 500)
    client.set("/guard", b"new controller")  # now at version 1
    results = zk_ops.write_batched([(p, ("set", p, b"v1", 0)) for p in paths], ("/guard", 0))
    assert {r.error for r in results.values()} == {ZkWriteError.CONTROLLER_MOVED}
    versions = {client.get(p)[1].version for p in paths[:: BATCH_OPS // 4]}
    assert versions == {0}


def test_raw_answers(ops_in_chroot: tuple[ZkOps, KazooClient]) -> None:
    """What the request itself returns: a set's version, True for a check or a delete,
    the failed op's exception and RolledBackError for the others."""
    _zk_ops, client = ops_in_chroot
    _nodes(client, 3)

    def send(operations: list) -> list:
        pending = client.handler.async_result()
        client._call(MultiWrite.build(operations, client.chroot), pending)
        return pending.get(timeout=10)

    ok = send([("check", "/guard", b"", 0), ("set", "/n/0", b"a", 0), ("delete", "/n/1", b"", 0)])
    assert ok == [True, 1, True]
    failed = send([("check", "/guard", b"", 0), ("set", "/n/2", b"a", 0), ("set", "/n/1", b"", 0)])
    assert [type(r) for r in failed] == [RolledBackError, RolledBackError, NoNodeError]
    moved = send([("check", "/guard", b"", 3), ("set", "/n/2", b"a", 0)])
    assert isinstance(moved[0], BadVersionError)
    assert client.get("/n/2")[1].version == 0
