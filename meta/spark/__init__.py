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

    Safe to call when PySpark already registered the source through ``pyspark_metaq``:
    PySpark 4.0 and 4.1 refuse to register a name their automatic lookup registered
    (``DATA_SOURCE_ALREADY_EXISTS``), later versions replace it; either way ``metaq`` is
    this source afterwards.

    Args:
        spark: a ``pyspark.sql.SparkSession`` (PySpark 4.0 or later).
    """
    from pyspark.errors import AnalysisException

    from meta.spark.datasource import MetaQDataSource

    try:
        spark.dataSource.register(MetaQDataSource)
    except AnalysisException as error:
        if error.getCondition() != "DATA_SOURCE_ALREADY_EXISTS":
            raise
