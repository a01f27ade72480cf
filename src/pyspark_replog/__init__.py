"""Lets Spark find ``format("replog")`` with no registration.

PySpark (``pyspark.sql.worker.lookup_data_sources``) imports every top-level module whose
name starts with ``pyspark_`` and registers its ``DefaultSource`` under
``DefaultSource.name()``.
"""

from replog.spark.source import ReplogDataSource as DefaultSource

__all__ = ["DefaultSource"]
