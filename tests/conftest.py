"""Shared pytest configuration: fixtures live in tests/fixtures/, one module per component."""

from hypothesis import settings

pytest_plugins = [
    "fixtures.processes",
    "fixtures.zookeeper",
    "fixtures.cluster",
    "fixtures.spark",
]

# Hypothesis' per-example deadline is a timing assertion: on a shared 2-core machine an
# fsync or a garbage collection can take longer than 200 ms and fail a correct example.
# Timing is measured in bench/, not asserted in tests.
settings.register_profile("replog", deadline=None)
settings.load_profile("replog")

# The files that take longest (seconds of one worker each: the sum of a file's phases from
# `--durations=0`), started first. `make test` runs `--dist loadfile
# --no-loadscope-reorder`, which hands whole files to the workers in collection order;
# xdist's default order (files with the most tests first) left these few-test, long files
# to the end, where one worker ran them while the others sat idle. The Spark files, the
# demo and the campaign lead (each 1.5-4 min), then the cluster and CLI files of 50-150 s
# (on a machine at load 12, where CLI processes' start-up makes test_configs and
# test_acls_cli as long as the cluster files).
SLOWEST_FILES = (
    "test_spark_driver_restart.py",
    "test_demo_run.py",
    "test_chaos.py",
    "test_spark_source.py",
    "test_configs.py",
    "test_acls_cli.py",
    "test_reassign_partitions.py",
    "test_data_dir_guards.py",
    "test_controller_codec.py",
    "test_replication_faults.py",
    "test_elect_leaders.py",
    "test_cluster.py",
    "test_delete_records_cluster.py",
    "test_cli.py",
    "test_secure_replication.py",
    "test_group_membership.py",
    "test_cluster_roll.py",
    "test_controlled_shutdown.py",
    "test_mixed_group_clients.py",
    "test_zk_fence_cluster.py",
    "test_txn_partition_failover.py",
    "test_kip848_clients.py",
)


def pytest_collection_modifyitems(session, config, items) -> None:
    rank = {name: i for i, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOWEST_FILES)))
