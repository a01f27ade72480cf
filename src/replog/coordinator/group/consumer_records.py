"""Replay of a KIP-848 consumer group's records (key versions 3 to 8) into a shard.

``replay`` applies one record read from ``__consumer_offsets`` to the shard's groups;
the coordinator's loader calls it for each record of a partition it starts leading,
and the heartbeat path applies its own records the same way once they are committed,
so a group is rebuilt after a failover exactly as it was built live. The records, their
Kafka schemas and codecs are in ``consumer_records_codec``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from replog.coordinator.group.consumer_group import ConsumerGroup
from replog.coordinator.group.consumer_records_codec import (
    GROUP_METADATA,
    ConsumerGroupRecord,
    decode,
)

if TYPE_CHECKING:
    from replog.coordinator.group.shard import GroupShard

log = logging.getLogger(__name__)


def replay(shard: GroupShard, key_version: int, key: bytes, value: bytes | None) -> None:
    """Apply one record read from the log (the runtime's loader calls this)."""
    record = decode(key, value)
    assert record.key_version == key_version
    apply(shard, record)


def apply(shard: GroupShard, record: ConsumerGroupRecord) -> None:
    """Apply one decoded record to the shard's groups (Kafka ``GroupMetadataManager.replay``):
    a record creates its consumer group if needed; the group epoch's tombstone removes it."""
    group = shard.groups.get(record.group_id)
    if group is not None and not isinstance(group, ConsumerGroup):
        if record.value is None:
            return  # a tombstone for a consumer group that is not here
        log.warning(
            "group %s: a consumer group record replaces a %s group",
            record.group_id,
            group.group_type,
        )
        group = None
    if group is None:
        if record.value is None:
            return
        group = ConsumerGroup(record.group_id)
        shard.groups[record.group_id] = group
    group.replay(record)
    if record.key_version == GROUP_METADATA and record.value is None:
        del shard.groups[record.group_id]
        group.on_deleted_by_replay()
