"""The ``metaq`` Spark data source (PySpark 4.x ``pyspark.sql.datasource``).

Register it once per ``SparkSession``, then read and write topics::

    import meta.spark
    meta.spark.register(spark)
    df = (spark.read.format("metaq")
          .option("zk.connect", "zk1:2181").option("topic", "logs").load())

Streams use ``spark.readStream.format("metaq")`` and ``df.writeStream.format("metaq")``
(``meta.spark.streaming``). Where the top-level module ``pyspark_metaq`` is importable by
Spark's Python workers, PySpark registers the source by itself and ``register`` is optional.

Importing this package imports neither PySpark nor kazoo; ``register`` does.
"""

from __future__ import annotations

from typing import Any

SOURCE_NAME = "metaq"


def register(spark: Any) -> None:
    """Register the ``metaq`` format with ``spark`` (``spark.dataSource.register``).

    Args:
        spark: a ``pyspark.sql.SparkSession`` (PySpark 4.0 or later).
    """
    from meta.spark.datasource import MetaQDataSource

    spark.dataSource.register(MetaQDataSource)
