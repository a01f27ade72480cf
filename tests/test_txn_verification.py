"""KIP-890 part 1's sender (``server.txn_verification.TransactionVerifier``) against a
stand-in transaction coordinator: a TCP server that reads the real AddPartitionsToTxn v4
frames the verifier sends and answers with scripted errors (no replog broker serves the
coordinator's side on this branch; the broker-level behaviour is in
test_txn_partition_failover).

* The request is v4 with ``verify_only``, one transaction per transactional id, grouped
  by topic; verifications waiting while a request is in flight go together in the next.
* Answers: per partition; PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH and
  TRANSACTION_ABORTABLE INVALID_TXN_STATE; a top-level error applies to every partition;
  a partition left out is UNKNOWN_SERVER_ERROR; a lost connection NETWORK_EXCEPTION,
  and the next verification connects again.
* No ``__transaction_state`` in the metadata: COORDINATOR_NOT_AVAILABLE, and the produce
  answer for it is NOT_ENOUGH_REPLICAS.
"""

from __future__ import annotations

import asyncio
import datetime
import struct
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader

from replog.common.topics import TRANSACTION_STATE_TOPIC_NAME
from replog.protocol import schema_reader
from replog.protocol.apis import ApiKey, make, nested, request_schema, response_schema
from replog.protocol.frames import encode_response
from replog.security.client_security import PLAINTEXT
from replog.server.metadata_cache import BrokerEndpoint, MetadataCache, PartitionInfo
from replog.server.txn_verification import TransactionVerifier, produce_error

Answer = Callable[[Any], tuple[ErrorCode, dict[str, dict[tuple[str, int], ErrorCode]]]]


class FakeCoordinator:
    """Reads AddPartitionsToTxn v4 requests; answers with ``answer(request)``."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[Any] = []
        self.release = asyncio.Event()
        self.release.set()
        self.server: asyncio.Server | None = None
        self.drop_next = False

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                api_key, version, correlation_id = struct.unpack_from(">hhi", frame, 0)
                assert (api_key, version) == (ApiKey.ADD_PARTITIONS_TO_TXN, 4)
                _, offset = schema_reader.read_entity(RequestHeader, frame, 0)
                body, _ = schema_reader.read_entity(request_schema(api_key, 4), frame, offset)
                self.requests.append(body)
                await self.release.wait()
                if self.drop_next:
                    self.drop_next = False
                    writer.close()
                    return
                top, errors = self.answer(body)
                writer.write(encode_response(api_key, correlation_id, _response(top, errors)))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


def _response(top: ErrorCode, errors: dict[str, dict[tuple[str, int], ErrorCode]]) -> Any:
    cls = response_schema(ApiKey.ADD_PARTITIONS_TO_TXN, 4)
    results = []
    for tid, parts in errors.items():
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), code in parts.items():
            by_topic.setdefault(topic, []).append(
                make(
                    nested(cls, "AddPartitionsToTxnPartitionResult"),
                    partition_index=partition,
                    partition_error_code=code,
                )
            )
        results.append(
            make(
                nested(cls, "AddPartitionsToTxnResult"),
                transactional_id=tid,
                topic_results=tuple(
                    make(
                        nested(cls, "AddPartitionsToTxnTopicResult"),
                        name=name,
                        results_by_partition=tuple(ps),
                    )
                    for name, ps in by_topic.items()
                ),
            )
        )
    return make(
        cls,
        throttle_time=datetime.timedelta(0),
        error_code=top,
        results_by_transaction=tuple(results),
    )


def _requested(body: Any) -> dict[str, tuple[int, int, bool, dict[str, tuple[int, ...]]]]:
    return {
        str(t.transactional_id): (
            int(t.producer_id),
            int(t.producer_epoch),
            bool(t.verify_only),
            {str(topic.name): tuple(int(p) for p in topic.partitions) for topic in t.topics},
        )
        for t in body.transactions
    }


def _verifier(port: int | None) -> TransactionVerifier:
    cache = MetadataCache()
    if port is not None:
        cache.update(
            controller_id=0,
            controller_epoch=1,
            brokers=[BrokerEndpoint(7, "127.0.0.1", port)],
            partitions=[
                PartitionInfo(TRANSACTION_STATE_TOPIC_NAME, p, 7, 0, (7,), (7,)) for p in range(3)
            ],
        )
    return TransactionVerifier(
        cache,
        listener="PLAINTEXT",
        security=PLAINTEXT,
        request_timeout_ms=5000,
        client_id="test-verifier",
    )


def test_verification_requests_answers_and_batching() -> None:
    def answer(body: Any) -> tuple[ErrorCode, dict[str, dict[tuple[str, int], ErrorCode]]]:
        out: dict[str, dict[tuple[str, int], ErrorCode]] = {}
        for tid, (_, _, _, topics) in _requested(body).items():
            codes = {
                "tx-ok": ErrorCode.none,
                "tx-fenced": ErrorCode.producer_fenced,
                "tx-abortable": ErrorCode.transaction_abortable,
            }
            parts = {(t, p): codes.get(tid, ErrorCode.none) for t, ps in topics.items() for p in ps}
            if tid == "tx-partial":
                parts.pop(("b", 1))
            out[tid] = parts
        return ErrorCode.none, out

    async def run() -> None:
        coordinator = FakeCoordinator(answer)
        port = await coordinator.start()
        verifier = _verifier(port)
        try:
            # every __transaction_state partition is led by broker 7, the stand-in
            assert verifier.coordinator("tx-ok") == (7, "127.0.0.1", port)
            ok = await verifier.verify("tx-ok", 11, 2, [("a", 0), ("a", 1), ("b", 0)])
            assert ok == {
                ("a", 0): ErrorCode.none,
                ("a", 1): ErrorCode.none,
                ("b", 0): ErrorCode.none,
            }
            assert _requested(coordinator.requests[0]) == {
                "tx-ok": (11, 2, True, {"a": (0, 1), "b": (0,)})
            }
            # While one request is in flight, the others wait and go together, one
            # transaction per id: a second verification of an id goes in the request after.
            coordinator.release.clear()
            first = asyncio.create_task(verifier.verify("tx-ok", 11, 2, [("a", 0)]))
            await asyncio.sleep(0.2)
            rest = [
                asyncio.create_task(verifier.verify(tid, 12, 0, parts))
                for tid, parts in (
                    ("tx-fenced", [("a", 0)]),
                    ("tx-abortable", [("a", 0)]),
                    ("tx-partial", [("b", 0), ("b", 1)]),
                    ("tx-ok", [("b", 0)]),
                    ("tx-ok", [("a", 1)]),
                )
            ]
            await asyncio.sleep(0.2)
            coordinator.release.set()
            assert await first == {("a", 0): ErrorCode.none}
            fenced, abortable, partial, again, later = await asyncio.gather(*rest)
            assert fenced == {("a", 0): ErrorCode.invalid_producer_epoch}
            assert abortable == {("a", 0): ErrorCode.invalid_txn_state}
            assert partial == {("b", 0): ErrorCode.none, ("b", 1): ErrorCode.unknown_server_error}
            assert again == {("b", 0): ErrorCode.none}
            assert later == {("a", 1): ErrorCode.none}
            assert [sorted(_requested(r)) for r in coordinator.requests[1:]] == [
                ["tx-ok"],
                ["tx-abortable", "tx-fenced", "tx-ok", "tx-partial"],
                ["tx-ok"],
            ]
            # A lost connection: NETWORK_EXCEPTION, then a new connection.
            coordinator.drop_next = True
            lost = await verifier.verify("tx-ok", 11, 2, [("a", 0)])
            assert lost == {("a", 0): ErrorCode.network_exception}
            assert await verifier.verify("tx-ok", 11, 2, [("a", 0)]) == {("a", 0): ErrorCode.none}
        finally:
            await verifier.close()
            await coordinator.stop()

    asyncio.run(run())


def test_a_top_level_error_applies_to_every_partition() -> None:
    async def run() -> None:
        coordinator = FakeCoordinator(lambda body: (ErrorCode.not_coordinator, {}))
        verifier = _verifier(await coordinator.start())
        try:
            got = await verifier.verify("tx", 1, 0, [("a", 0), ("b", 3)])
            assert got == {("a", 0): ErrorCode.not_coordinator, ("b", 3): ErrorCode.not_coordinator}
            assert {produce_error(code) for code in got.values()} == {ErrorCode.not_enough_replicas}
        finally:
            await verifier.close()
            await coordinator.stop()

    asyncio.run(run())


def test_no_coordinator_known() -> None:
    async def run() -> None:
        verifier = _verifier(None)
        try:
            got = await verifier.verify("tx", 1, 0, [("a", 0)])
            assert got == {("a", 0): ErrorCode.coordinator_not_available}
            assert produce_error(got[("a", 0)]) == ErrorCode.not_enough_replicas
            assert (
                produce_error(ErrorCode.invalid_producer_epoch) == ErrorCode.invalid_producer_epoch
            )
        finally:
            await verifier.close()

    asyncio.run(run())


def test_a_producers_requests_take_turns_in_arrival_order() -> None:
    """``TransactionalAppendOrder``: a transactional id's produce requests verify and
    append one at a time in arrival order, so a request waiting for its verification is
    not overtaken by a later one that needs none (it would be OUT_OF_ORDER_SEQUENCE_NUMBER);
    other ids are not held up, and an id's entry goes once its requests are done."""
    from replog.server.txn_verification import TransactionalAppendOrder

    async def go() -> tuple[list[str], int]:
        order = TransactionalAppendOrder()
        appended: list[str] = []
        verified = asyncio.Event()

        async def request(tid: str, name: str, verify: bool) -> None:
            async with order.turn(tid):
                if verify:
                    await verified.wait()  # the coordinator answers later
                appended.append(name)

        first = asyncio.ensure_future(request("t", "seq 0 (verifying)", True))
        await asyncio.sleep(0)
        later = asyncio.ensure_future(request("t", "seq 1", False))
        other = asyncio.ensure_future(request("u", "other id", False))
        await asyncio.wait_for(other, 5)
        assert appended == ["other id"]  # t's later request waits behind the first
        verified.set()
        await asyncio.wait_for(asyncio.gather(first, later), 5)
        return appended, len(order._locks)

    appended, left = asyncio.run(go())
    assert appended == ["other id", "seq 0 (verifying)", "seq 1"]
    assert left == 0
