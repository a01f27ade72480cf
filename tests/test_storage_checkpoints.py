"""Checkpoint files, the leader epoch cache (KIP-101) and LogConfig parsing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replog.storage.checkpoints import CheckpointError, OffsetCheckpointFile
from replog.storage.leader_epoch import LeaderEpochFileCache
from replog.storage.log_config import (
    BROKER_LOG_KEYS,
    TOPIC_CONFIG_KEYS,
    TOPIC_CONFIGS,
    LogConfig,
)

# -- offset checkpoints ----------------------------------------------------


def test_offset_checkpoint_round_trip_in_kafka_format(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    cp = OffsetCheckpointFile(path)
    assert cp.read() == {}
    offsets = {("my.topic", 0): 17, ("a-b_c", 12): 0, ("my.topic", 3): 2**40}
    cp.write(offsets)
    assert cp.read() == offsets
    assert path.read_text() == "0\n3\na-b_c 12 0\nmy.topic 0 17\nmy.topic 3 1099511627776\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no tmp left behind
    cp.write({})
    assert path.read_text() == "0\n0\n" and cp.read() == {}


@given(
    st.dictionaries(
        st.tuples(st.text("abcxyz.-_019", min_size=1, max_size=12), st.integers(0, 10_000)),
        st.integers(0, 2**62),
        max_size=20,
    )
)
def test_offset_checkpoint_property(
    tmp_path_factory: pytest.TempPathFactory, offsets: dict
) -> None:
    cp = OffsetCheckpointFile(tmp_path_factory.mktemp("cp") / "cp")
    cp.write(offsets)
    assert cp.read() == offsets


def test_failed_write_keeps_the_old_file_and_no_tmp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "log-start-offset-checkpoint"
    cp = OffsetCheckpointFile(path)
    cp.write({("t", 0): 5})

    def failing_replace(src: object, dst: object) -> None:
        raise OSError("disk went away")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        cp.write({("t", 0): 9})
    monkeypatch.undo()
    assert cp.read() == {("t", 0): 5}
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


@pytest.mark.parametrize(
    "text",
    ["1\n0\n", "0\n2\nt 0 1\n", "0\n1\nt 0\n", "0\n1\nt zero 1\n", "garbage", "0\n"],
)
def test_malformed_checkpoints_raise(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CheckpointError):
        OffsetCheckpointFile(path).read()


# -- leader epoch cache ----------------------------------------------------


def epoch_cache(tmp_path: Path, *entries: tuple[int, int]) -> LeaderEpochFileCache:
    cache = LeaderEpochFileCache(tmp_path / "leader-epoch-checkpoint")
    for epoch, offset in entries:
        cache.assign(epoch, offset)
    return cache


def test_assign_is_monotonic_and_persisted(tmp_path: Path) -> None:
    cache = epoch_cache(tmp_path, (1, 0), (1, 5), (3, 10), (2, 12), (3, 11))
    assert cache.entries() == [(1, 0), (3, 10)]  # same epoch later, lower epoch: ignored
    assert cache.latest_epoch == 3
    cache.assign(4, 10)  # same start offset as epoch 3: epoch 3 had no records
    assert cache.entries() == [(1, 0), (4, 10)]
    cache.assign(4, 8)  # the latest epoch moving its start earlier replaces it
    assert cache.entries() == [(1, 0), (4, 8)]
    path = tmp_path / "leader-epoch-checkpoint"
    assert not path.exists()  # written at flush, not at every change
    cache.flush()
    assert path.read_text() == "0\n2\n1 0\n4 8\n"
    assert LeaderEpochFileCache(path).entries() == [(1, 0), (4, 8)]
    with pytest.raises(ValueError):
        cache.assign(-1, 0)


def test_end_offset_for(tmp_path: Path) -> None:
    empty = epoch_cache(tmp_path)
    assert empty.end_offset_for(0, 100) == (-1, -1)
    cache = epoch_cache(tmp_path, (2, 10), (4, 20), (7, 35))
    assert cache.end_offset_for(-1, 50) == (-1, -1)  # UNDEFINED_EPOCH
    assert cache.end_offset_for(7, 50) == (7, 50)  # latest epoch: the log end offset
    assert cache.end_offset_for(4, 50) == (4, 35)
    assert cache.end_offset_for(5, 50) == (4, 35)  # unknown epoch: largest below it
    assert cache.end_offset_for(6, 50) == (4, 35)
    assert cache.end_offset_for(2, 50) == (2, 20)
    assert cache.end_offset_for(3, 50) == (2, 20)
    assert cache.end_offset_for(1, 50) == (1, 10)  # below all: first known start offset
    assert cache.end_offset_for(8, 50) == (-1, -1)  # above all known epochs


def test_truncate_from_end_and_start(tmp_path: Path) -> None:
    cache = epoch_cache(tmp_path, (2, 10), (4, 20), (7, 35))
    cache.truncate_from_end(36)
    assert cache.entries() == [(2, 10), (4, 20), (7, 35)]
    cache.truncate_from_end(35)
    assert cache.entries() == [(2, 10), (4, 20)]
    cache.truncate_from_start(5)
    assert cache.entries() == [(2, 10), (4, 20)]
    cache.truncate_from_start(15)
    assert cache.entries() == [(2, 15), (4, 20)]
    cache.truncate_from_start(20)
    assert cache.entries() == [(4, 20)]
    cache.truncate_from_start(25)
    assert cache.entries() == [(4, 25)]
    cache.flush()
    reloaded = LeaderEpochFileCache(tmp_path / "leader-epoch-checkpoint")
    assert reloaded.entries() == [(4, 25)]
    reloaded.truncate_from_end(0)
    assert reloaded.entries() == []


# -- LogConfig ---------------------------------------------------------------


def test_log_config_defaults_match_kafka() -> None:
    cfg = LogConfig()
    assert cfg.to_properties() == {
        "segment.bytes": "1073741824",
        "segment.ms": "604800000",
        "segment.jitter.ms": "0",
        "retention.ms": "604800000",
        "retention.bytes": "-1",
        "max.message.bytes": "1048588",
        "index.interval.bytes": "4096",
        "message.timestamp.type": "CreateTime",
        "min.insync.replicas": "1",
        "unclean.leader.election.enable": "false",
        "cleanup.policy": "delete",
        "min.cleanable.dirty.ratio": "0.5",
        "min.compaction.lag.ms": "0",
        "max.compaction.lag.ms": "9223372036854775807",
        "delete.retention.ms": "86400000",
        # Kafka's default: no replica throttled (an empty list).
        "leader.replication.throttled.replicas": "",
        "follower.replication.throttled.replicas": "",
    }
    assert set(cfg.to_properties()) == TOPIC_CONFIG_KEYS


def test_log_config_from_properties() -> None:
    base = LogConfig(segment_bytes=1000)
    cfg = LogConfig.from_properties(
        {
            "retention.ms": "-1",
            "unclean.leader.election.enable": "TRUE",
            "cleanup.policy": "delete,compact",
        },
        base,
    )
    assert (cfg.segment_bytes, cfg.retention_ms, cfg.unclean_leader_election_enable) == (
        1000,
        -1,
        True,
    )
    assert cfg.cleanup_policy == "compact,delete" and cfg.delete_enabled
    assert LogConfig.from_properties(cfg.to_properties()) == cfg


@pytest.mark.parametrize(
    ("props", "key"),
    [
        ({"segment.bytes": "ten"}, "segment.bytes"),
        ({"segment.bytes": "13"}, "segment.bytes"),
        ({"retention.ms": "-2"}, "retention.ms"),
        ({"min.insync.replicas": "0"}, "min.insync.replicas"),
        ({"message.timestamp.type": "WallClock"}, "message.timestamp.type"),
        ({"unclean.leader.election.enable": "yes"}, "unclean.leader.election.enable"),
        ({"cleanup.policy": "archive"}, "cleanup.policy"),
        ({"log.segment.bytes": "100"}, "log.segment.bytes"),
    ],
)
def test_log_config_rejects_bad_values_naming_the_key(props: dict, key: str) -> None:
    with pytest.raises(ValueError) as err:
        LogConfig.from_properties(props)
    message = str(err.value)
    assert key in message and "\n" not in message


def test_log_config_from_broker_properties() -> None:
    cfg = LogConfig.from_broker_properties(
        {
            "log.segment.bytes": "2048",
            "log.roll.hours": "2",
            "log.retention.minutes": "5",
            "log.retention.hours": "100",
            "broker.id": "1",
        }
    )
    assert (cfg.segment_bytes, cfg.segment_ms, cfg.retention_ms) == (2048, 7_200_000, 300_000)
    assert (
        LogConfig.from_broker_properties({"log.roll.ms": "7", "log.roll.hours": "1"}).segment_ms
        == 7
    )
    # Kafka's precedence: .ms over .minutes over .hours, whatever the order given
    both = LogConfig.from_broker_properties(
        {"log.retention.hours": "1", "log.retention.ms": "9", "log.retention.minutes": "2"}
    )
    assert both.retention_ms == 9
    jitter = LogConfig.from_broker_properties({"log.roll.jitter.hours": "1"})
    assert jitter.segment_jitter_ms == 3_600_000
    # Kafka: retention negative in any unit is unlimited; the other time keys are checked
    assert LogConfig.from_broker_properties({"log.retention.hours": "-2"}).retention_ms == -1
    assert LogConfig.from_broker_properties({"log.retention.ms": "-5"}).retention_ms == -1
    for bad in ({"log.roll.hours": "0"}, {"log.roll.ms": "0"}, {"log.roll.jitter.ms": "-1"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            LogConfig.from_broker_properties(bad)


def test_broker_log_keys_have_kafkas_types_and_defaults() -> None:
    """One table gives both the broker keys and the topic keys they feed; the default of a
    time key sits on its coarsest unit, as in Kafka's KafkaConfig."""
    got = {n: (k.topic_key, k.type, k.default) for n, k in BROKER_LOG_KEYS.items()}
    assert got["log.roll.ms"] == ("segment.ms", "LONG", None)
    assert got["log.roll.hours"] == ("segment.ms", "INT", "168")
    assert got["log.roll.jitter.ms"] == ("segment.jitter.ms", "LONG", None)
    assert got["log.roll.jitter.hours"] == ("segment.jitter.ms", "INT", "0")
    assert got["log.retention.ms"] == ("retention.ms", "LONG", None)
    assert got["log.retention.minutes"] == ("retention.ms", "INT", None)
    assert got["log.retention.hours"] == ("retention.ms", "INT", "168")
    assert got["log.segment.bytes"] == ("segment.bytes", "INT", "1073741824")
    assert got["log.cleaner.min.cleanable.ratio"] == ("min.cleanable.dirty.ratio", "DOUBLE", "0.5")
    assert got["message.max.bytes"] == ("max.message.bytes", "INT", "1048588")
    # every topic key with a broker synonym is fed by exactly the keys it names
    for topic in TOPIC_CONFIGS.values():
        assert [n for n, k in BROKER_LOG_KEYS.items() if k.topic_key == topic.name] == list(
            topic.broker_synonyms
        )
    # Kafka's defaults of the broker keys give LogConfig's defaults
    assert LogConfig.from_broker_properties({}) == LogConfig()
