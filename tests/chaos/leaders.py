"""Who leads each partition, as ZooKeeper says, polled through the campaign.

``LeaderWatch`` reads every partition's state znode twice a second with a ZooKeeper client
of its own and records a ``leader`` event whenever a partition's leader or leader epoch
changes::

    {"type": "leader", "partition": 2, "leader": 1, "leader_epoch": 4}

The first event of each partition is its starting state, not a change. A poll that fails
(ZooKeeper unreachable from the clients' side) is skipped; the next one catches up, and
the epoch says how many elections happened in between.

Concurrency: one thread of its own; it only appends to the History.
"""

from __future__ import annotations

import threading

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError

from chaos.history import History
from replog.zk import data as zk_data

POLL_S = 0.5


class LeaderWatch:
    def __init__(self, history: History, zookeeper_connect: str, topic: str, partitions: int):
        self.history = history
        self.hosts = zookeeper_connect
        self.topic = topic
        self.partitions = partitions
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-leaders", daemon=True)

    def _run(self) -> None:
        client = KazooClient(hosts=self.hosts, timeout=10)
        known: dict[int, tuple[int, int]] = {}
        try:
            client.start(timeout=20)
            while not self._stop.wait(POLL_S):
                for p in range(self.partitions):
                    try:
                        data, stat = client.get(zk_data.partition_state_path(self.topic, p))
                    except (KazooException, NoNodeError):
                        continue
                    lai = zk_data.decode_partition_state(data, stat.version).leader_and_isr
                    now = (int(lai.leader), int(lai.leader_epoch))
                    if known.get(p) != now:
                        known[p] = now
                        self.history.append(
                            "leader", partition=p, leader=now[0], leader_epoch=now[1]
                        )
        except Exception as exc:  # the chart loses its leader line, the campaign goes on
            self.history.append("info", what="leader watch stopped", error=repr(exc))
        finally:
            client.stop()
            client.close()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
