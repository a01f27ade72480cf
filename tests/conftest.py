"""Shared pytest configuration: fixtures live in tests/fixtures/, one module per component."""

pytest_plugins = [
    "fixtures.processes",
    "fixtures.zookeeper",
    "fixtures.cluster",
    "fixtures.spark",
]
