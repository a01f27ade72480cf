"""Producer ids for idempotent producers, unique across the cluster.

As in Kafka's ZooKeeper mode, each broker claims blocks of ids from the znode
``/latest_producer_id_block`` with a conditional update and hands them out
one by one.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

PATH = "/latest_producer_id_block"
BLOCK_SIZE = 1000


class ProducerIdManager:
    def __init__(self, broker_id: int, kazoo_client: Any) -> None:
        self.broker_id = broker_id
        self._zk = kazoo_client
        self._next = 0
        self._end = -1  # inclusive
        self._lock = asyncio.Lock()

    def _claim_block(self) -> tuple[int, int]:
        """Claim the next block in ZooKeeper; blocking, runs in a worker thread."""
        while True:
            try:
                data, stat = self._zk.get(PATH)
            except NoNodeError:
                block = {
                    "version": 1,
                    "broker": self.broker_id,
                    "block_start": "0",
                    "block_end": str(BLOCK_SIZE - 1),
                }
                try:
                    self._zk.create(PATH, json.dumps(block).encode(), makepath=True)
                    return 0, BLOCK_SIZE - 1
                except NodeExistsError:
                    continue
            start = int(json.loads(data.decode())["block_end"]) + 1 if data else 0
            block = {
                "version": 1,
                "broker": self.broker_id,
                "block_start": str(start),
                "block_end": str(start + BLOCK_SIZE - 1),
            }
            try:
                self._zk.set(PATH, json.dumps(block).encode(), version=stat.version)
                return start, start + BLOCK_SIZE - 1
            except BadVersionError:
                continue

    async def generate_producer_id(self) -> int:
        async with self._lock:
            if self._next > self._end:
                self._next, self._end = await asyncio.to_thread(self._claim_block)
            producer_id = self._next
            self._next += 1
            return producer_id
