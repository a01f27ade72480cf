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

None of those modules does IO, reads a clock or awaits (``runtime`` and
``marker_channel``, below, are the IO). Producer ids come from the broker's
``server.producer_ids.ProducerIdManager`` (blocks claimed from
``/latest_producer_id_block`` as Kafka's ZooKeeper mode does): the core only says
``needs_producer_id`` and is called again with one (``effects``).

Wired around it (issue 26):

- ``runtime``: the IO (``TransactionCoordinatorRuntime``): loading a partition on
  election and unloading it on resignation, the appends, the producer ids, the timers.
- ``marker_channel``: WriteTxnMarkers to the partition leaders, grouped per broker, with
  the coordinator epoch; answers and lost requests reported back to the core.
- The broker (``server.broker``) builds the runtime from the ``transaction.*`` keys
  (``replog.config``) and hands it LeaderAndIsr/StopReplica for ``__transaction_state``;
  ``server.handlers.transactions`` serves FindCoordinator's key type 1 (creating
  ``__transaction_state``), the transactional InitProducerId, AddPartitionsToTxn v0-v5,
  AddOffsetsToTxn, EndTxn, DescribeTransactions and ListTransactions, with Kafka's ACLs.

Not done: transaction version 2 (an epoch bump per transaction, EndTxn v5);
``TransactionConfig.transaction_version`` is 0 or 1. The partition side (transactional
batches, WriteTxnMarkers, the LSO, read_committed, the KIP-890 verification before a
transaction's first batch through ``handle_verify_partitions_in_txn``) lives in
``replication``/``storage``/``server.handlers`` (txn-part).
"""
