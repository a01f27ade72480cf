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

# The files that take longest (seconds of one worker each, from `--durations`), started
# first. `make test` runs `--dist loadfile --no-loadscope-reorder`, which hands whole files
# to the two workers in collection order; xdist's default order (files with the most tests
# first) left these few-test, long files to the end, where one worker ran them while the
# other sat idle.
SLOWEST_FILES = (
    "test_spark_driver_restart.py",
    "test_demo_run.py",
    "test_spark_source.py",
    "test_chaos.py",
    "test_reassign_partitions.py",
    "test_replication_faults.py",
    "test_group_membership.py",
    "test_mixed_group_clients.py",
    "test_secure_replication.py",
    "test_kip848_clients.py",
)


def pytest_collection_modifyitems(session, config, items) -> None:
    rank = {name: i for i, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOWEST_FILES)))
