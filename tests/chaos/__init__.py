"""A fault campaign on real processes (issue 14).

Each ZooKeeper and broker runs in a Linux network namespace of its own on a bridge; a
nemesis kills, pauses and partitions them and fills their disks; a workload of acks=all
idempotent producers records every send and acknowledgement; a checker reads the history
afterwards.

- ``net``: bridge, namespaces, veth pairs, nftables drop rules (``Network``);
- ``cluster``: ZooKeeper and brokers started by pid inside their namespaces;
- ``nemesis``: reversible faults, each logged with a timestamp;
- ``workload``: the producer, a live consumer and the final read, all into a ``History``;
- ``groups``: a consumer group committing as it reads, and a new member resuming after
  the heal; ``group_checker`` judges its commits;
- ``admin``: scratch topics created, grown and deleted during the faults;
- ``leaders``: each partition's leader and epoch, polled from ZooKeeper, for the timeline;
- ``checker``: pure analysis of a history (lost, duplicated, inconsistent, non-monotonic,
  availability) and its one-page report;
- ``timeline``: the chart (faults as bands, acked writes and leader changes a second);
- ``txn_workload``: with ``--workload transactions``, transactional producers committing
  and aborting and a consume-transform-produce flow on topics of their own, and
  ``txn_readers``' read_committed readers; ``txn_checker`` judges them (aborted reads,
  lost writes, torn transactions, exactly once through the flow);
- ``campaign`` / ``run``: seeded schedules, ``python -m chaos.run --seed S --minutes M``.
"""
