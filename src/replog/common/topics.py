"""The internal topics' names (Kafka ``org.apache.kafka.common.internals.Topic``).

Clients may not produce to them nor delete their records; Metadata marks them
``is_internal``; regex subscriptions and auto-creation leave them out.
"""

from __future__ import annotations

__all__ = [
    "GROUP_METADATA_TOPIC_NAME",
    "INTERNAL_TOPICS",
    "SHARE_GROUP_STATE_TOPIC_NAME",
    "TRANSACTION_STATE_TOPIC_NAME",
]

GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"
SHARE_GROUP_STATE_TOPIC_NAME = "__share_group_state"

INTERNAL_TOPICS: frozenset[str] = frozenset(
    {GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME, SHARE_GROUP_STATE_TOPIC_NAME}
)
