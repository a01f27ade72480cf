"""The group coordinator: consumer groups and committed offsets on ``__consumer_offsets``.

- ``offsets_topic``: the topic's name, settings, and which partition holds a group.
- ``records``: Kafka's key/value schemas of the records in that topic.
- ``group``: what every group type offers the coordinator (``Group``).
- ``offsets``: committed offsets per group, as replayed from the log.
- ``classic_group`` / ``classic_group_rebalance`` / ``classic_group_service``: the classic
  protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup): state, rebalances, requests.
- ``consumer_group`` / ``assignors``: the KIP-848 protocol (ConsumerGroupHeartbeat).
- ``coordinator``: the runtime: loads a partition's groups when this broker becomes its
  leader, writes records with acks=all, owns the timers.
"""
