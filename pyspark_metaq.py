"""Automatic registration of the ``metaq`` Spark data source.

PySpark 4.x registers, once per session, the ``DefaultSource`` of every importable top-level
module whose name starts with ``pyspark_`` (``pyspark/sql/worker/lookup_data_sources.py``).
This module is that hook: when it is importable by Spark's Python workers,
``spark.read.format("metaq")`` works without ``meta.spark.register(spark)``.

Importing it imports PySpark (``meta.spark.datasource``) but no kazoo and opens nothing.
"""

from meta.spark.datasource import MetaQDataSource as DefaultSource

__all__ = ["DefaultSource"]
