"""The partition state znode's hand-formatted JSON is byte for byte what the JSON
encoder writes from Kafka's field order (Hypothesis), and decodes back."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from replog.zk import data as zd
from replog.zk.data import LeaderAndIsr, LeaderIsrAndControllerEpoch

int32 = st.integers(-(2**31), 2**31 - 1)


@given(int32, int32, st.lists(int32, max_size=10), int32, st.integers(0, 2**31 - 1))
def test_same_bytes_as_the_json_encoder(
    leader: int, leader_epoch: int, isr: list[int], controller_epoch: int, zk_version: int
) -> None:
    state = LeaderIsrAndControllerEpoch(
        LeaderAndIsr(leader=leader, leader_epoch=leader_epoch, isr=tuple(isr), zk_version=0),
        controller_epoch,
    )
    expected = json.dumps(
        {
            "controller_epoch": controller_epoch,
            "leader": leader,
            "version": zd.PARTITION_STATE_VERSION,
            "leader_epoch": leader_epoch,
            "isr": isr,
        },
        separators=(",", ":"),
    ).encode()
    encoded = zd.encode_partition_state(state)
    assert encoded == expected
    decoded = zd.decode_partition_state(encoded, zk_version)
    assert decoded.leader_and_isr == state.leader_and_isr.with_zk_version(zk_version)
    assert decoded.controller_epoch == controller_epoch
