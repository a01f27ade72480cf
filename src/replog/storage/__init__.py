"""Kafka's on-disk log: segments, sparse indexes, checkpoints, recovery, retention.

Modules: ``log_config`` (topic configs), ``log`` (one partition's log),
``segment`` / ``index`` (files), ``log_loader`` (opening and recovery),
``leader_epoch`` (KIP-101 cache) and ``epoch_entries`` (its rules, pure),
``producer_state`` (idempotence), ``checkpoints`` (Kafka's text checkpoint files),
``log_manager`` (all logs of a broker), ``record_reader`` (decoding one batch for timestamp lookups).
"""
