"""``meta.properties`` and the log dir lock, in-process: the file's format (Kafka's, read
and written), the checks at start, and the lock between two log managers."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replog.storage.log_config import LogConfig
from replog.storage.log_dir_lock import LOCK_FILE, LogDirLockedError
from replog.storage.log_manager import LogManager
from replog.storage.meta_properties import (
    BrokerMetadata,
    InconsistentBrokerIdError,
    InconsistentBrokerMetadataError,
    InconsistentClusterIdError,
    MetaPropertiesError,
    check_broker_id,
    check_cluster_id,
    common_metadata,
    decode,
    encode,
    read_meta_properties,
    write_meta_properties,
)

# As a Kafka 3.x broker in ZooKeeper mode writes it (Properties.store: keys in hash order).
KAFKA_WRITTEN = """#
#Tue Mar 15 10:15:23 UTC 2022
cluster.id=Qb4gPJd7TXyjxDbAPiY9wA
version=0
broker.id=3
"""

CLUSTER_IDS = st.text(
    st.sampled_from("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"),
    min_size=1,
    max_size=22,
)


@given(st.integers(0, 2**31 - 1), st.none() | CLUSTER_IDS, st.floats(0, 4e9))
def test_what_is_written_reads_back(broker_id: int, cluster_id: str | None, now: float) -> None:
    metadata = BrokerMetadata(broker_id, cluster_id)
    text = encode(metadata, now).decode()
    assert text.startswith("#\n#")  # Properties.store's empty comment, then the date
    assert decode(text, Path("meta.properties")) == metadata


def test_a_file_kafka_wrote_reads() -> None:
    assert decode(KAFKA_WRITTEN, Path("m")) == BrokerMetadata(3, "Qb4gPJd7TXyjxDbAPiY9wA")
    spaced = "! comment\n  broker.id : 4\nversion = 0\ncluster.id   abc\n"
    assert decode(spaced, Path("m")) == BrokerMetadata(4, "abc")


def test_unreadable_files() -> None:
    with pytest.raises(OSError, match="Unrecognized version of the server meta.properties file: 1"):
        decode("version=1\nnode.id=1\ncluster.id=x\n", Path("m"))
    with pytest.raises(MetaPropertiesError, match="Missing required property 'broker.id'"):
        decode("version=0\ncluster.id=x\n", Path("m"))
    with pytest.raises(MetaPropertiesError, match="broker.id"):
        decode("version=0\nbroker.id=-1\n", Path("m"))


def test_written_atomically_and_a_leftover_temp_file_removed(tmp_path: Path) -> None:
    assert read_meta_properties(tmp_path) is None
    write_meta_properties(tmp_path, BrokerMetadata(1, "c"), 0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meta.properties"]
    (tmp_path / "meta.properties.tmp").write_text("torn")
    assert read_meta_properties(tmp_path) == BrokerMetadata(1, "c")
    assert not (tmp_path / "meta.properties.tmp").exists()


def test_the_checks_at_start() -> None:
    a, b = Path("/a"), Path("/b")
    stored = BrokerMetadata(1, "c1")
    assert common_metadata({}) is None
    assert common_metadata({a: stored, b: stored}) == stored
    with pytest.raises(InconsistentBrokerMetadataError, match="not consistent across log.dirs"):
        common_metadata({a: stored, b: BrokerMetadata(2, "c1")})
    check_broker_id(1, stored)
    check_broker_id(5, None)
    with pytest.raises(InconsistentBrokerIdError, match="Configured broker.id 2 doesn't match"):
        check_broker_id(2, stored)
    check_cluster_id("c1", stored)
    check_cluster_id("c2", None)
    check_cluster_id("c2", BrokerMetadata(1, None))  # written before cluster ids existed
    with pytest.raises(InconsistentClusterIdError, match="The Cluster ID c2 doesn't match"):
        check_cluster_id("c2", stored)


def manager(*dirs: Path) -> LogManager:
    return LogManager(list(dirs), LogConfig.from_properties({}))


def test_one_log_manager_per_dir_until_it_shuts_down(tmp_path: Path) -> None:
    first, second = manager(tmp_path / "a", tmp_path / "b"), manager(tmp_path / "b")
    first.lock_log_dirs()
    assert (tmp_path / "a" / LOCK_FILE).exists()
    with pytest.raises(LogDirLockedError, match=f"in {tmp_path / 'b'}. A Kafka instance"):
        second.lock_log_dirs()
    first.startup(0)
    first.shutdown()  # releases the locks, after the clean shutdown marker
    second.lock_log_dirs()
    second.release_locks()


def test_a_failed_dir_releases_its_lock(tmp_path: Path) -> None:
    first = manager(tmp_path / "a", tmp_path / "b")
    first.lock_log_dirs()
    first.mark_offline(tmp_path / "b", "test")
    first.handle_log_dir_failure(tmp_path / "b")
    manager(tmp_path / "b").lock_log_dirs()
    with pytest.raises(LogDirLockedError):
        manager(tmp_path / "a").lock_log_dirs()
    first.release_locks()


def test_broker_metadata_written_where_missing_or_different(tmp_path: Path) -> None:
    logs = manager(tmp_path / "a", tmp_path / "b")
    write_meta_properties(tmp_path / "a", BrokerMetadata(1, "c"), 0)
    before = (tmp_path / "a" / "meta.properties").read_bytes()
    assert logs.read_broker_metadata() == {tmp_path / "a": BrokerMetadata(1, "c")}
    logs.checkpoint_broker_metadata(BrokerMetadata(1, "c"), 10**9)
    assert (tmp_path / "a" / "meta.properties").read_bytes() == before  # not rewritten
    assert read_meta_properties(tmp_path / "b") == BrokerMetadata(1, "c")
