"""The transaction coordinator: transactional ids and their transactions on
``__transaction_state`` (Kafka ``kafka.coordinator.transaction``), as a sans-IO core.

- ``transaction_topic``: the topic's settings (``TransactionConfig``, Kafka's keys and
  defaults) and which partition holds a transactional id.
- ``transaction_log``: Kafka's ``TransactionLogKey`` / ``TransactionLogValue`` records,
  byte for byte (value v0 and flexible v1), and tombstones.
- ``metadata``: ``TransactionState`` with Kafka's table of valid previous states, and
  ``TransactionMetadata``'s prepare / complete transitions.
- ``state_manager``: the ids of the partitions led here, loading them from the log,
  completing or rolling back a transition after its append, timed-out transactions and
  expired ids (Kafka ``TransactionStateManager``).
- ``coordinator``: the decisions for InitProducerId, AddPartitionsToTxn (client and
  ``verify_only`` forms), AddOffsetsToTxn, EndTxn, the markers and their completion, with
  the table of every error it answers (Kafka ``TransactionCoordinator``).
- ``markers``: the transactions whose markers are being written, their answers, and
  the CompleteCommit/CompleteAbort append (Kafka ``TransactionMarkerChannelManager``'s
  bookkeeping).
- ``describe``: DescribeTransactions and ListTransactions (KIP-664) over that state.
- ``effects``: what those decisions ask the broker to do (``Outcome``).

Nothing here does IO, reads a clock or awaits. Producer ids come from the broker's
``server.producer_ids.ProducerIdManager`` (blocks claimed from
``/latest_producer_id_block`` as Kafka's ZooKeeper mode does): the core only says
``needs_producer_id`` and is called again with one (``effects``).

What remains to wire (nothing of it is done yet):

1. Config: the ``transaction.*`` keys of ``TransactionConfig`` into the broker's config
   table (``replog.config``), and ``__transaction_state`` created on first
   FindCoordinator with ``transaction_topic_configs``, replication factor
   min(``transaction.state.log.replication.factor``, live brokers) and
   ``transaction.state.log.num.partitions`` partitions, as ``__consumer_offsets`` is.
2. FindCoordinator key type 1 (TRANSACTION): the leader of
   ``partition_for(transactional_id)``; TRANSACTIONAL_ID_AUTHORIZATION_FAILED without
   Describe on the TransactionalId.
3. A runtime like ``coordinator.group.coordinator``: on LeaderAndIsr for a
   ``__transaction_state`` partition ``on_election(partition, leader_epoch)``, wait for the
   high watermark to reach the log end offset, read the records to the HW and
   ``complete_loading``; ``on_resignation`` when leadership goes. It carries out each
   ``Outcome``: appends with acks=-1 (checking ``can_append`` right before), then
   ``append_completed``; COMPLETE_TXN appends retried after a backoff; timers for
   ``abort_timed_out_transactions`` and ``expire_transactional_ids``.
4. Handlers (``server/handlers``): InitProducerId with a transactional id (the existing
   handler keeps the idempotent case), AddPartitionsToTxn v0-v5 (v4+ needs
   ClusterAction and batches transactions; ``rejected_partitions`` for the topic checks),
   AddOffsetsToTxn, EndTxn; ``error_for_version`` for old versions; ACLs (Write on the
   TransactionalId, Read on the group for AddOffsetsToTxn); DescribeTransactions and
   ListTransactions answered from ``describe``.
5. The marker channel (Kafka ``TransactionMarkerChannelManager``): group each
   ``SendTxnMarkers`` by partition leader, send WriteTxnMarkers (with the coordinator
   epoch) per broker, report ``markers_written`` / ``markers_undelivered`` /
   ``markers_partitions_deleted``.
6. The partition side (issue 26): transactional batches, control batches written by
   WriteTxnMarkers, the LSO, ``.txnindex``, read_committed fetch, TxnOffsetCommit, the
   cleaner; the KIP-890 verification before a partition appends a transaction's first
   batch calls ``handle_verify_partitions_in_txn``.
7. Transaction version 2 (an epoch bump per transaction, EndTxn v5) is not implemented;
   ``TransactionConfig.transaction_version`` is 0 or 1.
"""
