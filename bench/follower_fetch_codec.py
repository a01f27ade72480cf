"""The CPU a follower fetch's frames cost, Fetch v11 against v15 (prints figures).

    .venv/bin/python bench/follower_fetch_codec.py [--rounds 30] [--number 3000]

Followers fetch at v15 (topics by id, the broker epoch: KIP-903) where they fetched at
v11; v12+ frames are flexible (varints, tagged fields). For a fetch of 1 and of 12
partitions, each answered with one 1.1 KB record set: the leader's share (its reader
decodes the request as the broker does, ``frames.decode_request``, and the hand codec
encodes the answer) and the follower's (encode the request, decode the answer with its
response header), both versions interleaved, the fastest of ``--rounds`` rounds of
``--number`` calls each (on a shared machine the minimum is the steadiest figure).
``bench/request_cpu.py --only produce_all`` gives the whole broker's cost per request.
"""

from __future__ import annotations

import argparse
import timeit
import uuid
from collections.abc import Callable

from replog.protocol import fetch_codec, frames
from replog.protocol.apis import ApiKey

RECORDS = b"x" * 1100
TOPIC_ID = uuid.uuid4()
VERSIONS = (11, 15)


def round_trip(version: int, partitions: int) -> tuple[Callable[[], object], Callable[[], object]]:
    """(the leader's work, the follower's work) for one fetch at ``version``."""
    by_id = version >= fetch_codec.FIRST_TOPIC_ID
    flexible = version >= fetch_codec.FIRST_FLEXIBLE
    asked = [
        fetch_codec.FetchRequestPartitionData(
            "rf3", p, 3, 1000, 0, 1 << 20, topic_id=TOPIC_ID if by_id else None
        )
        for p in range(partitions)
    ]
    request = dict(
        replica_id=2,
        replica_epoch=77,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        partitions=asked,
        session_id=5,
        session_epoch=3,
    )
    body = fetch_codec.encode_fetch_request(version, **request)  # type: ignore[arg-type]
    header_tags = b"\0" if flexible else b""
    frame = frames.encode_request_body(ApiKey.FETCH, version, 9, "replica-2", header_tags + body)
    answers = [
        fetch_codec.FetchResponsePartitionData(
            "" if by_id else "rf3",
            p,
            0,
            1000,
            1000,
            0,
            RECORDS,
            topic_id=TOPIC_ID if by_id else None,
        )
        for p in range(partitions)
    ]
    response = (
        (9).to_bytes(4, "big") + header_tags + fetch_codec.encode_fetch_response(version, answers)
    )

    def leader() -> object:
        return frames.decode_request(frame[4:]), fetch_codec.encode_fetch_response(version, answers)

    def follower() -> object:
        return (
            fetch_codec.encode_fetch_request(version, **request),  # type: ignore[arg-type]
            fetch_codec.decode_fetch_response_frame(version, response),
        )

    return leader, follower


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--number", type=int, default=3000)
    args = parser.parse_args()
    print(f"µs per fetch, fastest of {args.rounds} rounds of {args.number}")
    for partitions in (1, 12):
        cases = {v: round_trip(v, partitions) for v in VERSIONS}
        best = {(v, side): float("inf") for v in VERSIONS for side in (0, 1)}
        for _ in range(args.rounds):
            for v, sides in cases.items():
                for side, work in enumerate(sides):
                    took = timeit.timeit(work, number=args.number) / args.number * 1e6
                    best[v, side] = min(best[v, side], took)
        for side, name in ((0, "leader: decode request, encode answer"), (1, "follower")):
            old, new = best[11, side], best[15, side]
            print(
                f"partitions {partitions:>2}  {name:<38} v11 {old:6.2f}  v15 {new:6.2f}"
                f"  v15/v11 {new / old:.2f}"
            )


if __name__ == "__main__":
    main()
