"""Topics' znodes: ``/brokers/topics/<t>`` (assignment, topic id, KIP-455 adding and
removing replicas), ``/config/topics/<t>``, the partitions' state znodes, deletion
(``/admin/delete_topics``), preferred replica election and
``/admin/reassign_partitions``.

Every controller write is guarded by ``/controller_epoch``'s version (``epoch_check``).

Concurrency: as :class:`~replog.zk.client.KafkaZkClient` (blocking; worker threads).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from replog.protocol.kafka_uuid import random_uuid
from replog.zk import data as zd
from replog.zk import notification_data as nd
from replog.zk.data import LeaderAndIsr, LeaderIsrAndControllerEpoch, TopicPartition
from replog.zk.fencing import ControllerMovedError
from replog.zk.ops import Op, ZkWriteError, ZkWriteResult, apply_ops
from replog.zk.znode_access import GET_CHILDREN, GET_DATA, ZnodeAccess, epoch_check

__all__ = ["TopicExistsError", "TopicZnodes"]


class TopicExistsError(Exception):
    """``/brokers/topics/<topic>`` already exists."""


class TopicZnodes(ZnodeAccess):
    """``KafkaZkClient``'s methods on topics, partitions and the admin znodes about them."""

    def create_topic(
        self,
        topic: str,
        assignment: Mapping[int, Sequence[int]],
        config: Mapping[str, str],
        topic_id: uuid.UUID | None = None,
    ) -> uuid.UUID:
        """Write ``/config/topics/<t>`` and ``/brokers/topics/<t>`` in one transaction.

        The topic znode carries ``topic_id`` (KIP-516), a new random one unless given;
        returns the id written. Raises :class:`TopicExistsError` (nothing written) if the
        topic znode exists. A leftover config znode of a deleted topic is overwritten.
        """
        topic_id = random_uuid() if topic_id is None else topic_id
        config_path = zd.topic_config_path(topic)
        config_data = zd.encode_config(config)
        topic_op: Op = (
            "create",
            zd.topic_path(topic),
            zd.encode_topic_assignment(assignment, topic_id),
            -1,
        )
        for _ in range(5):
            config_stat = self._ops.call(self._zk.exists, config_path)
            # A config znode left by a deleted topic is overwritten.
            config_op: Op = ("create", config_path, config_data, -1)
            if config_stat is not None:
                config_op = ("set", config_path, config_data, config_stat.version)
            results = self._ops.commit(partial(apply_ops, [config_op, topic_op]))
            if not any(isinstance(r, Exception) for r in results):
                return topic_id
            if isinstance(results[1], NodeExistsError):
                raise TopicExistsError(f"topic {topic!r} already exists")
            if isinstance(results[1], NoNodeError):
                raise NoNodeError(f"{zd.TOPICS_PATH} is missing")
            # The config znode changed under us: read it again.
        raise TopicExistsError(f"topic {topic!r}: config znode keeps changing")

    def get_all_topics(self) -> set[str]:
        return set(self._ops.call(self._zk.get_children, zd.TOPICS_PATH))

    def topic_exists(self, topic: str) -> bool:
        return self._ops.call(self._zk.exists, zd.topic_path(topic)) is not None

    def get_topic_assignment(self, topic: str) -> dict[int, list[int]] | None:
        return self.get_topic_assignments([topic]).get(topic)

    def get_topic_assignments(self, topics: Iterable[str]) -> dict[str, dict[int, list[int]]]:
        """Replica assignments of many topics in batched reads; absent topics are omitted."""
        names = list(topics)
        results = self._ops.read_many([zd.topic_path(t) for t in names], GET_DATA)
        return {
            topic: zd.decode_topic_assignment(topic, result[0])
            for topic, result in zip(names, results, strict=True)
            if not isinstance(result, Exception)
        }

    def read_topic_znodes(self, topics: Iterable[str]) -> dict[str, tuple[bytes, int]]:
        """``/brokers/topics/<t>`` of many topics in batched reads: ``(data, zk version)``
        per topic (``zd.decode_topic_id`` reads the id); absent topics are omitted."""
        names = list(topics)
        results = self._ops.read_many([zd.topic_path(t) for t in names], GET_DATA)
        return {
            topic: (result[0], int(result[1].version))
            for topic, result in zip(names, results, strict=True)
            if not isinstance(result, Exception)
        }

    def get_topic_ids(self, topics: Iterable[str]) -> dict[str, uuid.UUID | None]:
        """Each existing topic's id (None where its znode has none)."""
        return {
            t: zd.decode_topic_id(data) for t, (data, _) in self.read_topic_znodes(topics).items()
        }

    def update_topic_znodes(
        self,
        updates: Mapping[str, tuple[bytes, int]],
        expected_controller_epoch_zk_version: int,
    ) -> dict[str, ZkWriteResult]:
        """Set ``/brokers/topics/<t>`` to ``data`` if it is still at ``zk version``, per
        topic (``updates``: topic -> (data, expected version)), in batches guarded by the
        controller epoch check. BAD_VERSION: someone wrote the znode since it was read;
        NO_NODE: it was deleted; CONTROLLER_MOVED: the epoch check failed."""
        items = [
            (topic, ("set", zd.topic_path(topic), data, version))
            for topic, (data, version) in updates.items()
        ]
        return self._ops.write_batched(items, epoch_check(expected_controller_epoch_zk_version))

    def get_replica_assignments(
        self, topics: Iterable[str]
    ) -> dict[str, tuple[dict[int, zd.ReplicaAssignment], int]]:
        """Each existing topic's partitions with their adding and removing replicas
        (KIP-455), and the topic znode's version."""
        return {
            topic: (zd.decode_replica_assignments(topic, data), version)
            for topic, (data, version) in self.read_topic_znodes(topics).items()
        }

    def set_replica_assignments(
        self,
        topic: str,
        change: Callable[[dict[int, zd.ReplicaAssignment]], dict[int, zd.ReplicaAssignment]],
        expected_controller_epoch_zk_version: int | None,
        attempts: int = 5,
    ) -> dict[int, zd.ReplicaAssignment]:
        """Read ``/brokers/topics/<t>``, apply ``change`` to its assignments and write the
        result back conditionally on the version read (again on a lost race); the topic
        id and other fields are kept. The controller's writes pass its epoch's version
        (``ControllerMovedError`` if the check fails); an admin's (CreatePartitions)
        pass None, as Kafka's ``AdminZkClient`` writes unfenced. ``NoNodeError`` if the
        topic does not exist. Returns the assignments written."""
        path = zd.topic_path(topic)
        for _ in range(attempts):
            data, stat = self._ops.call(self._zk.get, path)
            new = change(zd.decode_replica_assignments(topic, data))
            op: Op = ("set", path, zd.with_replica_assignments(data, new), stat.version)
            check = (
                None
                if expected_controller_epoch_zk_version is None
                else epoch_check(expected_controller_epoch_zk_version)
            )
            result = self._ops.write_batched([(path, op)], check)[path]
            if result.error is None:
                return new
            if result.error is ZkWriteError.CONTROLLER_MOVED:
                raise ControllerMovedError(f"controller moved while writing topic {topic!r}")
            if result.error is ZkWriteError.NO_NODE:
                raise NoNodeError(path)
        raise BadVersionError(f"{path} keeps changing")

    def get_topic_config(self, topic: str) -> dict[str, str]:
        try:
            data, _ = self._ops.call(self._zk.get, zd.topic_config_path(topic))
        except NoNodeError:
            return {}
        return zd.decode_config(data)

    # --- partition state -------------------------------------------------------------

    def get_partition_states(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, LeaderIsrAndControllerEpoch]:
        """Read ``.../partitions/<p>/state`` for many partitions; absent ones are omitted."""
        return {tp: state for tp, (state, _) in self.read_partition_states(partitions).items()}

    def read_partition_states(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, tuple[LeaderIsrAndControllerEpoch, int]]:
        """Each partition's state with the zxid of the znode's last write (its mzxid)."""
        keys = list(partitions)
        results = self._ops.read_many([zd.partition_state_path(t, p) for t, p in keys], GET_DATA)
        return {
            key: (zd.decode_partition_state(result[0], result[1].version), result[1].mzxid)
            for key, result in zip(keys, results, strict=True)
            if not isinstance(result, Exception)
        }

    def create_partition_states(
        self,
        states: Mapping[TopicPartition, LeaderAndIsr],
        controller_epoch: int,
        expected_controller_epoch_zk_version: int,
    ) -> dict[TopicPartition, ZkWriteResult]:
        """Create state znodes (and their parent znodes), guarded by the epoch check.

        Success has ``zk_version == 0``. NODE_EXISTS if the state exists, NO_NODE if the
        topic znode does not, CONTROLLER_MOVED if the epoch check failed.
        """
        topics = sorted({t for t, _ in states})
        listing = self._ops.read_many([zd.topic_partitions_path(t) for t in topics], GET_CHILDREN)
        existing = {t: set(r) for t, r in zip(topics, listing, strict=True) if isinstance(r, list)}
        parents: list[tuple[str, Op]] = [
            (zd.topic_partitions_path(t), ("create", zd.topic_partitions_path(t), b"", -1))
            for t in topics
            if t not in existing
        ]
        parents += [
            (zd.topic_partition_path(t, p), ("create", zd.topic_partition_path(t, p), b"", -1))
            for t, p in sorted(states)
            if str(p) not in existing.get(t, set())
        ]
        done = self._ops.write_batched(parents, epoch_check(expected_controller_epoch_zk_version))
        if any(r.error is ZkWriteError.CONTROLLER_MOVED for r in done.values()):
            return {key: ZkWriteResult(error=ZkWriteError.CONTROLLER_MOVED) for key in states}
        items = [
            (
                key,
                (
                    "create",
                    zd.partition_state_path(*key),
                    zd.encode_partition_state(LeaderIsrAndControllerEpoch(lai, controller_epoch)),
                    -1,
                ),
            )
            for key, lai in states.items()
        ]
        return self._ops.write_batched(items, epoch_check(expected_controller_epoch_zk_version))

    def update_partition_states(
        self,
        states: Mapping[TopicPartition, LeaderAndIsr],
        controller_epoch: int,
        expected_controller_epoch_zk_version: int,
    ) -> dict[TopicPartition, ZkWriteResult]:
        """Set state znodes, each conditional on its ``LeaderAndIsr.zk_version``.

        Kafka's ``updateLeaderAndIsr``. A BAD_VERSION whose znode already holds exactly the
        requested state (e.g. our own write, re-sent after a connection loss) is reported as
        success with the znode's version, as Kafka's ``checkLeaderAndIsrZkData`` does.
        """
        payloads = {
            key: zd.encode_partition_state(LeaderIsrAndControllerEpoch(lai, controller_epoch))
            for key, lai in states.items()
        }
        items = [
            (key, ("set", zd.partition_state_path(*key), payloads[key], lai.zk_version))
            for key, lai in states.items()
        ]
        results = self._ops.write_batched(items, epoch_check(expected_controller_epoch_zk_version))
        stale = [key for key, r in results.items() if r.error is ZkWriteError.BAD_VERSION]
        if stale:
            now = self._ops.read_many([zd.partition_state_path(*key) for key in stale], GET_DATA)
            for key, result in zip(stale, now, strict=True):
                if not isinstance(result, Exception) and result[0] == payloads[key]:
                    results[key] = ZkWriteResult(zk_version=result[1].version)
        return results

    def update_leader_and_isr_conditional(
        self,
        topic: str,
        partition: int,
        state: LeaderIsrAndControllerEpoch,
        expected_version: int,
    ) -> int | None:
        """One conditional set of a partition's state (a leader changing its ISR).

        Returns the new zk version, or None if the version did not match (someone else
        wrote first: re-read). Raises ``kazoo.exceptions.NoNodeError`` if there is no state.
        """
        path = zd.partition_state_path(topic, partition)
        payload = zd.encode_partition_state(state)
        try:
            stat = self._ops.call(self._zk.set, path, payload, expected_version)
        except BadVersionError:
            data, stat = self._ops.call(self._zk.get, path)
            return int(stat.version) if data == payload else None
        return int(stat.version)

    # --- topic deletion --------------------------------------------------------------

    def mark_topic_for_deletion(self, topic: str) -> None:
        try:
            self._ops.call(self._zk.create, zd.delete_topic_path(topic))
        except NodeExistsError:
            pass

    def get_topics_marked_for_deletion(self) -> set[str]:
        return set(self._ops.call(self._zk.get_children, zd.DELETE_TOPICS_PATH))

    def delete_topic_znodes(self, topic: str, expected_controller_epoch_zk_version: int) -> None:
        """Delete ``/brokers/topics/<t>`` recursively and ``/config/topics/<t>``.

        Deletes leaves first, in batched transactions guarded by the epoch check.
        Raises :class:`ControllerMovedError` if the epoch check fails.
        """
        for root in (zd.topic_path(topic), zd.topic_config_path(topic)):
            for _ in range(5):
                tree = self._ops.subtree(root)
                if not tree:
                    break
                items = [(path, ("delete", path, b"", -1)) for path in reversed(tree)]
                results = self._ops.write_batched(
                    items, epoch_check(expected_controller_epoch_zk_version)
                )
                if any(r.error is ZkWriteError.CONTROLLER_MOVED for r in results.values()):
                    raise ControllerMovedError(f"controller moved while deleting {topic!r}")
            else:
                raise NotEmptyError(f"{root} keeps getting new children")

    def remove_deletion_marker(self, topic: str, expected_controller_epoch_zk_version: int) -> None:
        """Delete ``/admin/delete_topics/<t>``, guarded by the epoch check."""
        path = zd.delete_topic_path(topic)
        result = self._ops.write_batched(
            [(path, ("delete", path, b"", -1))], epoch_check(expected_controller_epoch_zk_version)
        )
        if result[path].error is ZkWriteError.CONTROLLER_MOVED:
            raise ControllerMovedError(f"controller moved while removing deletion of {topic!r}")

    # --- preferred replica election -------------------------------------------------

    def get_preferred_replica_election(self) -> set[TopicPartition] | None:
        """The partitions ``/admin/preferred_replica_election`` lists; None if absent."""
        try:
            data, _stat = self._ops.call(self._zk.get, zd.PREFERRED_REPLICA_ELECTION_PATH)
        except NoNodeError:
            return None
        return nd.decode_preferred_replica_election(data)

    def delete_preferred_replica_election(self, expected_controller_epoch_zk_version: int) -> None:
        """Delete ``/admin/preferred_replica_election`` (the controller is done with it),
        guarded by the epoch check."""
        path = zd.PREFERRED_REPLICA_ELECTION_PATH
        result = self._ops.write_batched(
            [(path, ("delete", path, b"", -1))], epoch_check(expected_controller_epoch_zk_version)
        )
        if result[path].error is ZkWriteError.CONTROLLER_MOVED:
            raise ControllerMovedError("controller moved while ending a preferred election")

    # --- partition reassignment (/admin/reassign_partitions) ---------------------------

    def get_reassign_partitions(
        self,
    ) -> tuple[dict[TopicPartition, tuple[int, ...]], int] | None:
        """What ``/admin/reassign_partitions`` asks for and its version; None if absent."""
        try:
            data, stat = self._ops.call(self._zk.get, zd.REASSIGN_PARTITIONS_PATH)
        except NoNodeError:
            return None
        return nd.decode_reassign_partitions(data), int(stat.version)

    def create_reassign_partitions(
        self, reassignments: Mapping[TopicPartition, Sequence[int]]
    ) -> None:
        """Write ``/admin/reassign_partitions`` as Kafka's tool does; ``NodeExistsError``
        while one is under way."""
        self._ops.call(
            self._zk.create,
            zd.REASSIGN_PARTITIONS_PATH,
            nd.encode_reassign_partitions(reassignments),
            makepath=True,
        )

    def update_reassign_partitions(
        self,
        remaining: Mapping[TopicPartition, Sequence[int]],
        expected_version: int,
        expected_controller_epoch_zk_version: int,
    ) -> bool:
        """The controller's update of ``/admin/reassign_partitions``: keep ``remaining``
        (delete the znode if empty), conditional on ``expected_version`` and guarded by
        the epoch check. False if the znode changed or vanished meanwhile."""
        path = zd.REASSIGN_PARTITIONS_PATH
        op: Op = (
            ("set", path, nd.encode_reassign_partitions(remaining), expected_version)
            if remaining
            else ("delete", path, b"", expected_version)
        )
        result = self._ops.write_batched(
            [(path, op)], epoch_check(expected_controller_epoch_zk_version)
        )[path]
        if result.error is ZkWriteError.CONTROLLER_MOVED:
            raise ControllerMovedError("controller moved while updating reassign_partitions")
        return result.error is None
