"""PySpark data source and sink ``replog`` (Spark 4 Python Data Source API).

``format("replog")`` works without registration once ``replog`` is installed, through the
top-level module ``pyspark_replog``; :func:`register` does it explicitly.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ReplogDataSource", "register"]


def __getattr__(name: str) -> Any:
    # Imported lazily so that ``import replog`` never needs pyspark.
    if name == "ReplogDataSource":
        from replog.spark.source import ReplogDataSource

        return ReplogDataSource
    raise AttributeError(name)


def register(spark: Any) -> None:
    """Register ``format("replog")`` on a SparkSession explicitly."""
    from replog.spark.source import ReplogDataSource

    spark.dataSource.register(ReplogDataSource)
