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
