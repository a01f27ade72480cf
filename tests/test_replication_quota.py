"""Replication quota rules (Kafka ``ReplicationQuotaManager``), time passed in."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replog.replication.quota import (
    UNTHROTTLED,
    ReplicationQuota,
    follower_should_throttle,
    is_throttled,
    leader_should_throttle,
    throttled_partitions,
)
from replog.storage.log_config import LogConfig


def test_rate_is_bytes_over_at_least_ten_windows() -> None:
    quota = ReplicationQuota(1000)
    quota.record(5000, now=100.0)
    # One sample, elapsed 0: Kafka stretches the window to (11 - 1) * 1 s.
    assert quota.rate(100.0) == pytest.approx(500.0)
    assert not quota.is_quota_exceeded(100.0)
    quota.record(6000, now=100.5)
    assert quota.rate(100.5) == pytest.approx(11000 / 10.5)
    assert quota.is_quota_exceeded(100.5)


def test_old_samples_expire_after_the_whole_window() -> None:
    quota = ReplicationQuota(1000)
    quota.record(20_000, now=0.0)
    assert quota.is_quota_exceeded(10.9)
    # The sample started at 0 is purged at 11 s (11 windows of 1 s).
    assert quota.rate(11.0) == 0.0
    assert not quota.is_quota_exceeded(11.0)


def test_unthrottled_and_updated_quota() -> None:
    quota = ReplicationQuota()
    assert quota.quota == UNTHROTTLED
    quota.record(10**12, now=0.0)
    assert not quota.is_quota_exceeded(0.0)
    quota.update_quota(100)
    assert quota.is_quota_exceeded(0.0)


@given(
    rate=st.integers(1_000, 1_000_000),
    quarters=st.floats(0.0001, 1.0),
    seconds=st.integers(30, 120),
)
def test_a_throttled_copier_averages_about_the_quota(
    rate: int, quarters: float, seconds: int
) -> None:
    """A follower that fetches ``chunk`` bytes (at most a quarter of a second's quota)
    every 10 ms unless over its quota copies about the quota: at most 10 % more (the
    window's granularity) over elapsed time plus the whole window, and, unless it is
    slower than the quota, no less than the quota over the elapsed time."""
    chunk = max(1, int(rate / 4 * quarters))
    quota = ReplicationQuota(rate)
    copied = 0
    steps = seconds * 100
    for step in range(steps):
        now = step / 100
        if not quota.is_quota_exceeded(now):
            quota.record(chunk, now)
            copied += chunk
    assert copied <= 1.1 * rate * (seconds + 11) + chunk
    assert copied >= min(rate, chunk * 100) * (seconds - 1) - chunk


def test_throttled_replica_lists() -> None:
    assert throttled_partitions("0:1,1:2,2:1", 1) == frozenset({0, 2})
    assert throttled_partitions("*", 7) is None
    assert is_throttled("*", 3, 7)
    assert is_throttled("0:1, 1:2", 1, 2)
    assert not is_throttled("0:1,1:2", 1, 1)
    assert not is_throttled("", 0, 0)


def test_throttle_only_out_of_sync_replicas_over_quota() -> None:
    quota = ReplicationQuota(10)
    quota.record(1000, now=0.0)
    assert follower_should_throttle(quota, throttled=True, caught_up=False, now=0.0)
    assert not follower_should_throttle(quota, throttled=True, caught_up=True, now=0.0)
    assert not follower_should_throttle(quota, throttled=False, caught_up=False, now=0.0)
    assert leader_should_throttle(quota, throttled=True, follower_in_isr=False, now=0.0)
    assert not leader_should_throttle(quota, throttled=True, follower_in_isr=True, now=0.0)


def test_topic_configs_validate_the_lists() -> None:
    config = LogConfig.from_properties(
        {
            "leader.replication.throttled.replicas": "0:1, 1:2",
            "follower.replication.throttled.replicas": "*",
        }
    )
    assert config.leader_replication_throttled_replicas == "0:1,1:2"
    assert config.follower_replication_throttled_replicas == "*"
    with pytest.raises(ValueError, match="must be the literal"):
        LogConfig.from_properties({"leader.replication.throttled.replicas": "0-1"})
